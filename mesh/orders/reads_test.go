package orders

import (
	"runtime"
	"slices"
	"testing"

	"github.com/shade-mesh/shade/mesh/wire"
)

// each is the test of runs of samples that Reads and Cut take, of a
// test of one sample: each sample's mask is mask's of it.
func each(mask func(id uint32) uint64) func(ids []uint32, masks []uint64) {
	return func(ids []uint32, masks []uint64) {
		for k, id := range ids {
			masks[k] = mask(id)
		}
	}
}

// owns is each of a test of whether a node owns a sample: mask 1 where
// it does.
func owns(own func(id uint32) bool) func(ids []uint32, masks []uint64) {
	return each(func(id uint32) uint64 {
		if own(id) {
			return 1
		}
		return 0
	})
}

// TestReads: the owned ids of every slice, position by position across
// the slices (shorter slices skipped once past their end), and nothing
// that the test does not own.
func TestReads(t *testing.T) {
	p := &wire.PublishMsg{Slices: []wire.U32s{{1, 2, 3}, {4, 5}, {6, 7, 8}}}
	even := func(id uint32) bool { return id%2 == 0 }
	var got []uint32
	n := Reads(p, owns(even), func(id uint32) { got = append(got, id) })
	if want := []uint32{4, 6, 2, 8}; !slices.Equal(got, want) || n != len(want) {
		t.Fatalf("Reads = %v (%d), want %v", got, n, want)
	}
	got = nil
	if n := Reads(p, owns(func(uint32) bool { return true }), func(id uint32) { got = append(got, id) }); n != 8 ||
		!slices.Equal(got, []uint32{1, 4, 6, 2, 5, 7, 3, 8}) {
		t.Fatalf("Reads of everything = %v (%d)", got, n)
	}
	if n := Reads(&wire.PublishMsg{}, owns(even), func(uint32) { t.Fatal("visited an id of an empty order") }); n != 0 {
		t.Fatalf("Reads of an empty order = %d", n)
	}
}

// TestCut: each member's part holds the slices (and weights) of the
// ranks on it, none of the others', the reads Reads gives it from the
// whole order, and the whole order's length; Reads of a part visits the
// reads it carries that the member still owns.
func TestCut(t *testing.T) {
	p := &wire.PublishMsg{Dataset: "ds", Version: "v", Gen: 2, Epoch: 3, Term: 4, World: 3, Ahead: 1,
		Slices:  []wire.U32s{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}},
		Weights: []wire.F32s{{1, 1, 1}, {2, 2, 2}, {3, 3, 3}},
		Ranks:   []string{"a", "b", "a"}, Sampler: []byte("state")}
	even := func(id uint32) bool { return id%2 == 0 }
	low := func(id uint32) bool { return id < 5 }
	parts := Cut(p, []string{"a", "c"}, each(func(id uint32) (m uint64) {
		if even(id) {
			m |= 1
		}
		if low(id) {
			m |= 2
		}
		return m
	}))
	a, c := parts[0], parts[1]
	if a.Part != "a" || c.Part != "c" || a.Epoch != 3 || a.Term != 4 || a.Ahead != 1 || a.Size != 9 || len(a.Sampler) != 0 {
		t.Fatalf("parts %+v, %+v: want a's and c's of epoch 3, term 4, 9 reads, no sampler state", a, c)
	}
	for r := range p.Slices {
		own := p.Ranks[r] == "a"
		if a.HasSlice(r) != own || own != slices.Equal(a.Slices[r], p.Slices[r]) || own != slices.Equal(a.Weights[r], p.Weights[r]) {
			t.Fatalf("a's part, rank %d: slice %v, weights %v", r, a.Slices[r], a.Weights[r])
		}
		if c.HasSlice(r) || len(c.Slices[r]) != 0 || len(c.Weights[r]) != 0 {
			t.Fatalf("c's part holds rank %d's slice %v", r, c.Slices[r])
		}
	}
	for i, own := range []func(uint32) bool{even, low} {
		var want []uint32
		Reads(p, owns(own), func(id uint32) { want = append(want, id) })
		if !slices.Equal(parts[i].Reads, want) {
			t.Fatalf("%s's reads %v, want %v", parts[i].Part, parts[i].Reads, want)
		}
	}
	var got []uint32
	if n := Reads(a, owns(func(id uint32) bool { return id != 4 }), func(id uint32) { got = append(got, id) }); n != 3 || !slices.Equal(got, []uint32{2, 8, 6}) {
		t.Fatalf("Reads of a's part, 4 no longer owned: %v (%d), want [2 8 6]", got, n)
	}
}

// TestCutGroups: a group's part holds the slices of the ranks on any of
// its members and the reads any of them owns, names its first member as
// Part and the rest Below; the parts its member cuts from it are those
// cut from the whole order.
func TestCutGroups(t *testing.T) {
	p := &wire.PublishMsg{Dataset: "ds", Version: "v", Gen: 2, Epoch: 3, Term: 4, World: 4, Ahead: 1,
		Slices:  []wire.U32s{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}},
		Weights: []wire.F32s{{1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {4, 4, 4}},
		Ranks:   []string{"a", "b", "c", "d"}, Sampler: []byte("state")}
	owner := func(id uint32) string { return []string{"a", "b", "c", "d"}[id%4] }
	ownedBy := func(groups [][]string) func([]uint32, []uint64) {
		return each(func(id uint32) (m uint64) {
			for i, g := range groups {
				if slices.Contains(g, owner(id)) {
					m |= 1 << i
				}
			}
			return m
		})
	}
	groups := [][]string{{"b", "c", "a"}, {"d"}}
	parts := CutGroups(p, groups, ownedBy(groups))
	g, d := parts[0], parts[1]
	if g.Part != "b" || !slices.Equal(g.Below, []string{"c", "a"}) || d.Part != "d" || len(d.Below) != 0 || g.Size != 12 {
		t.Fatalf("parts %+v, %+v: want b's with c and a below it, d's alone, of 12 reads", g, d)
	}
	for r := range p.Slices {
		in := p.Ranks[r] != "d"
		if g.HasSlice(r) != in || in != slices.Equal(g.Slices[r], p.Slices[r]) || in != slices.Equal(g.Weights[r], p.Weights[r]) {
			t.Fatalf("the group's part, rank %d: slice %v, weights %v", r, g.Slices[r], g.Weights[r])
		}
	}
	var want []uint32
	Reads(p, owns(func(id uint32) bool { return owner(id) != "d" }), func(id uint32) { want = append(want, id) })
	if !slices.Equal(g.Reads, want) {
		t.Fatalf("the group's reads %v, want %v", g.Reads, want)
	}
	// Its member cuts the parts of the group from it: as from the whole.
	names := []string{"b", "c", "a"}
	fromWhole := Cut(p, names, ownedBy([][]string{{"b"}, {"c"}, {"a"}}))
	fromGroup := Cut(g, names, ownedBy([][]string{{"b"}, {"c"}, {"a"}}))
	for i := range names {
		w, q := fromWhole[i], fromGroup[i]
		if q.Part != names[i] || len(q.Below) != 0 || q.Size != w.Size || !slices.Equal(q.Reads, w.Reads) || len(q.Reads) == 0 {
			t.Fatalf("%s's part from the group's: %+v, from the whole %+v", names[i], q, w)
		}
		for r := range p.Slices {
			if !slices.Equal(q.Slices[r], w.Slices[r]) || !slices.Equal(q.Weights[r], w.Weights[r]) {
				t.Fatalf("%s's part from the group's, rank %d: slice %v, from the whole %v", names[i], r, q.Slices[r], w.Slices[r])
			}
		}
	}
	// A member of no group: cut from the group's part, it gets no slices.
	if out := Cut(g, []string{"d"}, ownedBy([][]string{{"d"}})); len(out[0].Reads) != 0 || out[0].HasSlice(3) && len(out[0].Slices[3]) != 0 {
		t.Fatalf("d's part cut from a group's part without it: %+v", out[0])
	}
}

// TestCutInSpans: a cut of many reads, dealt on several goroutines in
// spans of the read order, gives each part the reads a single pass
// gives (Reads of its owners), in order, of the whole order (slices of
// unequal lengths, so that spans end within some) and of a group's part.
func TestCutInSpans(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	const world = 7
	p := &wire.PublishMsg{World: world, Epoch: 1}
	id := uint32(0)
	for r := range world {
		s := make(wire.U32s, 3*minCutSpan/world+r*101)
		for i := range s {
			s[i] = id * 2654435761 % (1 << 24) // ids out of sequence
			id++
		}
		p.Slices = append(p.Slices, s)
		p.Ranks = append(p.Ranks, "n")
	}
	// Owners: id%5 picks one of five pairs of the names below.
	names := []string{"a", "b", "c", "d", "e"}
	owners := func(id uint32) []string { k := id % 5; return []string{names[k], names[(k+2)%5]} }
	mask := func(groups [][]string, id uint32) (m uint64) {
		for i, g := range groups {
			for _, o := range owners(id) {
				if slices.Contains(g, o) {
					m |= 1 << i
				}
			}
		}
		return m
	}
	check := func(what string, from *wire.PublishMsg, groups [][]string) []*wire.PublishMsg {
		t.Helper()
		parts := CutGroups(from, groups, each(func(id uint32) uint64 { return mask(groups, id) }))
		for i, part := range parts {
			var want []uint32
			Reads(from, owns(func(id uint32) bool { return mask(groups, id)&(1<<i) != 0 }), func(id uint32) { want = append(want, id) })
			if len(want) < 2*minCutSpan/5 || !slices.Equal(part.Reads, want) {
				t.Fatalf("%s: group %v's part has %d reads, want the %d a single pass picks, in order", what, groups[i], len(part.Reads), len(want))
			}
		}
		return parts
	}
	parts := check("the whole", p, [][]string{{"a", "b"}, {"c"}, {"d", "e"}})
	check("a group's part", parts[0], [][]string{{"a"}, {"b"}})
}
