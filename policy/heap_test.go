package policy

import (
	"math/rand/v2"
	"testing"
)

// checkHeap verifies the heap order, the slots and the id table: every
// item's slot names it, every id is found from its home without crossing
// an empty slot, and no other slot is used.
func checkHeap[K any](t *testing.T, h *idHeap[K]) {
	t.Helper()
	used := 0
	for _, sl := range h.slots {
		if sl.pos >= 0 {
			used++
		}
	}
	if used != len(h.items) || len(h.slots)&(len(h.slots)-1) != 0 || 2*len(h.items) > len(h.slots) {
		t.Fatalf("table of %d slots has %d used, heap %d items", len(h.slots), used, len(h.items))
	}
	for i, e := range h.items {
		sl := h.slots[e.slot]
		if s, ok := h.find(sl.id); int(sl.pos) != i || !ok || s != e.slot {
			t.Fatalf("item %d: slot %d says id %d at %d, the table finds slot %d (%v)", i, e.slot, sl.id, sl.pos, s, ok)
		}
		if i > 0 && h.less(e.key, h.items[parent(i)].key) {
			t.Fatalf("item %d less than its parent", i)
		}
	}
}

func TestIDHeapRandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := newIDHeap(func(a, b int) bool { return a < b })
	ref := map[ID]int{}
	for step := range 20000 {
		id := ID(rng.IntN(200))
		switch op := rng.IntN(4); {
		case op == 0 && len(h.items) > 0:
			it := h.pop()
			for _, k := range ref {
				if k < it.key {
					t.Fatalf("step %d: popped %d but %d is in the heap", step, it.key, k)
				}
			}
			if ref[it.id] != it.key {
				t.Fatalf("step %d: popped %d with key %d, want %d", step, it.id, it.key, ref[it.id])
			}
			delete(ref, it.id)
		case op == 1:
			if k, ok := h.remove(id); ok != hasKey(ref, id) || ok && k != ref[id] {
				t.Fatalf("step %d: remove(%d) = %d, %v; want %d, %v", step, id, k, ok, ref[id], hasKey(ref, id))
			}
			delete(ref, id)
		default:
			k := rng.IntN(1000)
			if h.has(id) {
				h.set(id, k)
			} else {
				h.push(id, k)
			}
			ref[id] = k
		}
		checkHeap(t, &h)
		if len(ref) != h.len() {
			t.Fatalf("step %d: %d items, want %d", step, h.len(), len(ref))
		}
	}
}

func hasKey(m map[ID]int, id ID) bool {
	_, ok := m[id]
	return ok
}
