package offheap

import (
	"testing"
	"unsafe"
)

type small struct {
	a, b uint64
	c    uint32
}

type large struct{ words [300_000]uint64 } // 2.4 MB: one a slab

// TestPoolHandsOutDistinctZeroedValues: values come zeroed, do not
// overlap, and lie in memory that stays theirs across slabs; a value
// given back comes back zeroed, and the memory counted is the values
// handed out.
func TestPoolHandsOutDistinctZeroedValues(t *testing.T) {
	var p Pool[small]
	defer p.Release()
	n := 3*perSlab[small]() + 5 // several slabs
	vs := make([]*small, n)
	seen := map[uintptr]bool{}
	for i := range vs {
		v := p.Get()
		if *v != (small{}) {
			t.Fatalf("value %d not zeroed: %+v", i, *v)
		}
		at := uintptr(unsafe.Pointer(v))
		if at%unsafe.Alignof(*v) != 0 || seen[at] {
			t.Fatalf("value %d at %#x: misaligned or handed out twice", i, at)
		}
		seen[at] = true
		*v = small{uint64(i), ^uint64(i), uint32(i)}
		vs[i] = v
	}
	for i, v := range vs { // no write reached another value
		if *v != (small{uint64(i), ^uint64(i), uint32(i)}) {
			t.Fatalf("value %d holds %+v", i, *v)
		}
	}
	if got, want := p.Bytes(), int64(n*size[small]()); got != want {
		t.Fatalf("Bytes = %d, want %d", got, want)
	}
	p.Put(vs[7])
	if v := p.Get(); v != vs[7] || *v != (small{}) {
		t.Fatalf("the value given back came back as %p holding %+v", v, *v)
	}
	if got, want := p.Bytes(), int64(n*size[small]()); got != want {
		t.Fatalf("Bytes after reuse = %d, want %d", got, want)
	}
	p.Release()
	if p.Bytes() != 0 {
		t.Fatalf("Bytes after Release = %d", p.Bytes())
	}
	if v := p.Get(); *v != (small{}) || p.Bytes() != int64(size[small]()) {
		t.Fatal("a released pool does not hand out again")
	}
}

// TestPoolLargerThanASlab: a value larger than a slab gets a slab of its
// own.
func TestPoolLargerThanASlab(t *testing.T) {
	var p Pool[large]
	defer p.Release()
	a, b := p.Get(), p.Get()
	a.words[len(a.words)-1], b.words[0] = 1, 2
	if a.words[0] != 0 || b.words[len(b.words)-1] != 0 || len(p.slabs) != 2 {
		t.Fatalf("two large values overlap, or share a slab (%d slabs)", len(p.slabs))
	}
}
