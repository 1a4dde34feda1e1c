package policy

import (
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// checkHeap verifies the heap order, the slots and the id table: every
// item's slot names it, every id is found from its home without crossing
// an empty slot, no other slot is used, each table is at most half full
// and counts its ids right, and the directory sends each id's hash to the
// table that holds it: a table of depth k fills the 1 << (depth-k)
// entries, from a multiple of that, that share its ids' top k bits.
func checkHeap[K any](t *testing.T, h *idHeap[K]) {
	t.Helper()
	if len(h.dir) != 1<<h.depth && h.dir != nil {
		t.Fatalf("a directory of depth %d has %d entries", h.depth, len(h.dir))
	}
	used, tables := 0, 0
	for j := 0; j < len(h.dir); {
		tab := h.dir[j]
		span := 1 << (h.depth - tab.depth)
		if tab.depth > h.depth || j%span != 0 || h.tabs[tab.num] != tab {
			t.Fatalf("table %d of depth %d at entry %d of a directory of depth %d", tab.num, tab.depth, j, h.depth)
		}
		for k := j; k < j+span; k++ {
			if h.dir[k] != tab {
				t.Fatalf("entry %d of table %d's %d points to table %d", k, tab.num, span, h.dir[k].num)
			}
		}
		tables++
		n := 0
		for _, sl := range tab.slots {
			if sl.pos < 0 {
				continue
			}
			n++
			if top := maphash.Comparable(h.seed, sl.id) >> (64 - h.depth); h.depth > 0 && (top < uint64(j) || top >= uint64(j+span)) {
				t.Fatalf("id %d is in the table of entries %d-%d", sl.id, j, j+span-1)
			}
		}
		if n != int(tab.n) || 2*n > tabSlots {
			t.Fatalf("table %d counts %d ids, holds %d", tab.num, tab.n, n)
		}
		used += n
		j += span
	}
	if tables != len(h.tabs) {
		t.Fatalf("the directory points to %d tables of %d", tables, len(h.tabs))
	}
	if used != h.n || len(h.chunks) < (h.n+itemChunk-1)/itemChunk {
		t.Fatalf("the tables hold %d ids, the heap %d items in %d chunks", used, h.n, len(h.chunks))
	}
	for i := range h.n {
		e := h.item(i)
		sl := h.slot(e.slot)
		if s, ok := h.find(sl.id); int(sl.pos) != i || !ok || s != sl {
			t.Fatalf("item %d: slot %d says id %d at %d, the table finds another slot (%v)", i, e.slot, sl.id, sl.pos, ok)
		}
		if i > 0 && h.less(e.key, h.item(parent(i)).key) {
			t.Fatalf("item %d less than its parent", i)
		}
	}
}

// TestIDHeapRandomOps runs random pushes, pops, removals and re-keyings
// on a heap and on a map side by side: over 200 ids (one table) and over
// 60,000, about a third of them held (tables splitting, and ids leaving
// them, with probe runs that wrap past a table's end, and items over
// several chunks of the heap array).
func TestIDHeapRandomOps(t *testing.T) {
	for _, ids := range []int{200, 60000} {
		rng := rand.New(rand.NewPCG(1, uint64(ids)))
		h := newIDHeap(func(a, b int) bool { return a < b })
		defer h.mem.release()
		ref := map[ID]int{}
		most := 0
		for step := range 4 * max(ids, 5000) {
			id := ID(rng.IntN(ids))
			switch op := rng.IntN(4); {
			case op == 0 && h.len() > 0:
				it := h.pop()
				if ids <= 200 {
					for _, k := range ref {
						if k < it.key {
							t.Fatalf("step %d: popped %d but %d is in the heap", step, it.key, k)
						}
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
			if ids <= 200 || step%(ids/50) == 0 {
				checkHeap(t, &h)
			}
			most = max(most, h.len())
			if len(ref) != h.len() {
				t.Fatalf("step %d: %d items, want %d", step, h.len(), len(ref))
			}
		}
		checkHeap(t, &h)
		if ids > 200 && (len(h.tabs) < 4 || most <= 2*itemChunk) {
			t.Fatalf("at most %d ids, in %d tables: too few to test splits and chunks", most, len(h.tabs))
		}
	}
}

func hasKey(m map[ID]int, id ID) bool {
	_, ok := m[id]
	return ok
}

// TestHeapMemoryGivenBack: a policy's tables and chunks lie outside the
// Go heap, and are given back once the policy is unreachable.
func TestHeapMemoryGivenBack(t *testing.T) {
	for _, name := range []string{"app", "order", "lfu"} {
		p, err := New(name, Options{})
		if err != nil {
			t.Fatal(err)
		}
		fill(p, 20_000)
		var mem interface{ bytes() int64 }
		switch q := p.(type) {
		case *APP:
			mem = q.heap.mem
		case *OrderAware:
			mem = q.heap.mem
		case *LFU:
			mem = q.heap.mem
		}
		if mem.bytes() < 20_000*16 || p.(OffHeap).OffHeapBytes() != mem.bytes() {
			t.Fatalf("%s: %d bytes outside the Go heap for 20,000 residents (OffHeapBytes %d)", name, mem.bytes(), p.(OffHeap).OffHeapBytes())
		}
		p = nil
		testsupport.WaitFor(t, 10*time.Second, name+"'s memory given back", func() bool {
			runtime.GC()
			return mem.bytes() == 0
		})
	}
}
