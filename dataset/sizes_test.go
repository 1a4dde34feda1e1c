package dataset

import (
	"math"
	"testing"
	"unsafe"
)

// TestSizes: sizes read back as given, those of 4 GiB and more (and the
// one that is exactly the marker) kept aside, the rest in 4 bytes each.
func TestSizes(t *testing.T) {
	in := []int64{0, 1, 4096, math.MaxUint32 - 1, math.MaxUint32, math.MaxUint32 + 1, 5 << 30, math.MaxInt64, -1, 100}
	s := NewSizes(in)
	if s.Len() != len(in) {
		t.Fatalf("Len %d, want %d", s.Len(), len(in))
	}
	for i, want := range in {
		if got := s.At(i); got != want {
			t.Errorf("At(%d) = %d, want %d", i, got, want)
		}
	}
	if len(s.big) != 5 {
		t.Errorf("%d sizes kept aside, want the 5 of 4 GiB and more or negative", len(s.big))
	}
	in[2] = 7 // the caller's slice is its own
	if s.At(2) != 4096 {
		t.Error("NewSizes kept the caller's slice")
	}
	var zero Sizes
	if zero.Len() != 0 {
		t.Error("the zero Sizes is not empty")
	}
	// 4 bytes a sample where every size is below 4 GiB.
	n := NewSizes(make([]int64, 1000))
	if n.big != nil || int(unsafe.Sizeof(n.small[0]))*len(n.small) != 4000 {
		t.Errorf("1,000 small sizes: %d bytes, %d aside", int(unsafe.Sizeof(n.small[0]))*len(n.small), len(n.big))
	}
}
