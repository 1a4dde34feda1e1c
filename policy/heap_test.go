package policy

import (
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// checkIDMap verifies an id table: every id is found from its home
// without crossing an empty slot, each table holds at most its limit and
// counts its ids right, the map counts them all, and the directory sends
// each id's hash to the table that holds it: a table of depth k fills the
// 1 << (depth-k) entries, from a multiple of that, that share its ids' top
// k bits.
func checkIDMap[V comparable](t *testing.T, m *idMap[V]) {
	t.Helper()
	if len(m.dir) != 1<<m.depth && m.dir != nil {
		t.Fatalf("a directory of depth %d has %d entries", m.depth, len(m.dir))
	}
	var empty V
	used, tables := 0, 0
	for j := 0; j < len(m.dir); {
		tab := m.dir[j]
		span := 1 << (m.depth - tab.depth)
		if tab.depth > m.depth || j%span != 0 || m.tabs[tab.num] != tab {
			t.Fatalf("table %d of depth %d at entry %d of a directory of depth %d", tab.num, tab.depth, j, m.depth)
		}
		for k := j; k < j+span; k++ {
			if m.dir[k] != tab {
				t.Fatalf("entry %d of table %d's %d points to table %d", k, tab.num, span, m.dir[k].num)
			}
		}
		tables++
		n := 0
		for i := range tab.slots {
			sl := &tab.slots[i]
			if sl.v == empty {
				continue
			}
			n++
			if top := maphash.Comparable(m.seed, sl.id) >> (64 - m.depth); m.depth > 0 && (top < uint64(j) || top >= uint64(j+span)) {
				t.Fatalf("id %d is in the table of entries %d-%d", sl.id, j, j+span-1)
			}
			if f, s := m.locate(sl.id); f != sl || m.find(sl.id) != sl || s != tab.num<<tabBits|int32(i) || m.slot(s) != sl {
				t.Fatalf("id %d in slot %d of table %d: the map finds slot %d", sl.id, i, tab.num, s)
			}
		}
		if n != int(tab.n) || n > int(m.limit) {
			t.Fatalf("table %d counts %d ids, holds %d (at most %d)", tab.num, tab.n, n, m.limit)
		}
		used += n
		j += span
	}
	if tables != len(m.tabs) || used != m.len() {
		t.Fatalf("the directory points to %d tables of %d, holding %d ids of %d", tables, len(m.tabs), used, m.len())
	}
}

// checkHeap verifies the heap order, the slots and the id table
// (checkIDMap): every item's slot names it, and no other slot is used.
func checkHeap[K any](t *testing.T, h *idHeap[K]) {
	t.Helper()
	checkIDMap(t, &h.ids)
	if h.ids.len() != h.n || len(h.chunks) < (h.n+itemChunk-1)/itemChunk {
		t.Fatalf("the table holds %d ids, the heap %d items in %d chunks", h.ids.len(), h.n, len(h.chunks))
	}
	for i := range h.n {
		e := h.item(i)
		sl := h.slot(e.slot)
		if s, ok := h.find(sl.id); sl.v.pos.index() != i || !ok || s != sl {
			t.Fatalf("item %d: slot %d says id %d at %d, the table finds another slot (%v)", i, e.slot, sl.id, sl.v.pos.index(), ok)
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
		defer func() {
			for _, r := range h.pools() {
				r.Release()
			}
		}()
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
				if ref[it.id] != it.key || it.tag != uint32(it.id)^0xa5 {
					t.Fatalf("step %d: popped %d with key %d and tag %#x, want %d and %#x", step, it.id, it.key, it.tag, ref[it.id], uint32(it.id)^0xa5)
				}
				delete(ref, it.id)
			case op == 1:
				if it, ok := h.remove(id); ok != hasKey(ref, id) || ok && (it.key != ref[id] || it.tag != uint32(id)^0xa5) {
					t.Fatalf("step %d: remove(%d) = %+v, %v; want key %d, %v", step, id, it, ok, ref[id], hasKey(ref, id))
				}
				delete(ref, id)
			default:
				k := rng.IntN(1000)
				if h.has(id) {
					h.set(id, k)
				} else {
					h.push(id, k, uint32(id)^0xa5) // a tag of its own, to follow
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
		if ids > 200 && (len(h.ids.tabs) < 4 || most <= 2*itemChunk) {
			t.Fatalf("at most %d ids, in %d tables: too few to test splits and chunks", most, len(h.ids.tabs))
		}
	}
}

func hasKey(m map[ID]int, id ID) bool {
	_, ok := m[id]
	return ok
}

// TestHeapMemoryGivenBack: a policy's id tables (its heap's and its
// ghost entries') and its heap's chunks lie outside the Go heap, and are
// given back once the policy is unreachable.
func TestHeapMemoryGivenBack(t *testing.T) {
	for _, name := range []string{"app", "order", "lfu"} {
		p, err := New(name, Options{})
		if err != nil {
			t.Fatal(err)
		}
		fill(p, 20_000)
		var pools []releaser
		switch q := p.(type) {
		case *APP:
			pools = append(q.heap.pools(), q.ghosts.pool)
		case *OrderAware:
			pools = append(q.heap.pools(), q.ghosts.pool, q.cursor.pool)
			q.BeginEpoch(0, []ID{40_000, 40_001}) // places of ids not resident
		case *LFU:
			pools = q.heap.pools()
		}
		least := int64(20_000 * (16 + 16))
		if s, ok := p.(Scorer); ok {
			for id := range ID(20_000) { // ghost entries of ids never admitted
				s.SetScore(20_000+id, 1)
			}
			least += 40_000 * 16
		}
		if o, ok := p.(*OrderAware); ok && o.cursor.len() != 2 {
			t.Fatalf("order: %d ids in the cursor, want 2", o.cursor.len())
		}
		bytes := func() int64 {
			var n int64
			for _, r := range pools {
				n += r.(interface{ Bytes() int64 }).Bytes()
			}
			return n
		}
		if b := bytes(); b < least || p.(OffHeap).OffHeapBytes() != b {
			t.Fatalf("%s: %d bytes outside the Go heap for 20,000 residents, want %d or more (OffHeapBytes %d)", name, b, least, p.(OffHeap).OffHeapBytes())
		}
		p = nil
		testsupport.WaitFor(t, 10*time.Second, name+"'s memory given back", func() bool {
			runtime.GC()
			return bytes() == 0
		})
	}
}
