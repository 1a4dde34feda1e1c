package orders

import (
	"slices"
	"testing"

	"github.com/shade-mesh/shade/mesh/wire"
)

// TestReads: the owned ids of every slice, position by position across
// the slices (shorter slices skipped once past their end), and nothing
// that the test does not own.
func TestReads(t *testing.T) {
	p := &wire.PublishMsg{Slices: []wire.U32s{{1, 2, 3}, {4, 5}, {6, 7, 8}}}
	even := func(id uint32) bool { return id%2 == 0 }
	var got []uint32
	n := Reads(p, even, func(id uint32) { got = append(got, id) })
	if want := []uint32{4, 6, 2, 8}; !slices.Equal(got, want) || n != len(want) {
		t.Fatalf("Reads = %v (%d), want %v", got, n, want)
	}
	got = nil
	if n := Reads(p, func(uint32) bool { return true }, func(id uint32) { got = append(got, id) }); n != 8 ||
		!slices.Equal(got, []uint32{1, 4, 6, 2, 5, 7, 3, 8}) {
		t.Fatalf("Reads of everything = %v (%d)", got, n)
	}
	if n := Reads(&wire.PublishMsg{}, even, func(uint32) { t.Fatal("visited an id of an empty order") }); n != 0 {
		t.Fatalf("Reads of an empty order = %d", n)
	}
}
