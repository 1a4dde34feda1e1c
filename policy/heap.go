package policy

import (
	"hash/maphash"
	"unsafe"

	"github.com/shade-mesh/shade/internal/prefetch"
)

// idHeap is a 4-ary min-heap of ids keyed by K, with an index from id to
// position so that any member can be re-keyed or removed in O(log n). Four
// children a node, not two, halve the levels an item crosses when it is
// re-keyed, each of which, in a heap of a large cache's residents, waits
// for memory twice (the item moved and its slot); a node's four children
// lie side by side.
//
// The heap array holds keys and slot numbers; a slot holds the id and its
// current heap position. Moving an item during a sift therefore writes an
// array element and its slot, never anything else. The slots are
// themselves the index from id to position: an open-addressing hash table
// (linear probing, at most half full, deletion by shifting the slots after
// it back), so that finding a resident waits for memory twice, its slot
// and its item, where a Go map and a separate slot array took four loads
// that miss the CPU's caches in a large heap. The table hashes ids with a
// seed of its own (hash/maphash, as Go's maps do), so that ids chosen to
// collide (a client picking keys) cannot be found without the seed. Nothing
// in it is a pointer, so the garbage collector does not scan it however
// many residents there are.
type idHeap[K any] struct {
	items []heapEntry[K] // heap order
	slots []heapSlot     // the id table: a power of two long, or empty
	seed  maphash.Seed
	less  func(a, b K) bool
}

type heapEntry[K any] struct {
	key  K
	slot int32
}

// heapSlot is a slot of the id table: an id and its heap position, or a
// position of -1 for an empty slot.
type heapSlot struct {
	id  ID
	pos int32
}

// heapItem is an id and its key, as top and pop return them.
type heapItem[K any] struct {
	id  ID
	key K
}

func newIDHeap[K any](less func(a, b K) bool) idHeap[K] {
	return idHeap[K]{seed: maphash.MakeSeed(), less: less}
}

func (h *idHeap[K]) len() int { return len(h.items) }

func (h *idHeap[K]) has(id ID) bool {
	_, ok := h.find(id)
	return ok
}

// key returns id's key and whether id is in the heap.
func (h *idHeap[K]) key(id ID) (K, bool) {
	s, ok := h.find(id)
	if !ok {
		var zero K
		return zero, false
	}
	return h.keyOf(s), true
}

// top returns the least item; the heap must not be empty.
func (h *idHeap[K]) top() heapItem[K] {
	e := h.items[0]
	return heapItem[K]{h.slots[e.slot].id, e.key}
}

// push adds id, which must not be in the heap.
func (h *idHeap[K]) push(id ID, k K) {
	if 2*(len(h.items)+1) > len(h.slots) {
		h.grow()
	}
	i := len(h.items)
	s := h.vacant(id)
	h.slots[s] = heapSlot{id: id, pos: int32(i)}
	h.items = append(h.items, heapEntry[K]{k, s})
	h.up(i)
}

// pop removes and returns the least item; the heap must not be empty.
func (h *idHeap[K]) pop() heapItem[K] {
	it := h.top()
	h.removeAt(0)
	return it
}

// remove takes id out of the heap and returns its key, and whether it was
// there.
func (h *idHeap[K]) remove(id ID) (K, bool) {
	s, ok := h.find(id)
	if !ok {
		var zero K
		return zero, false
	}
	i := int(h.slots[s].pos)
	k := h.items[i].key
	h.removeAt(i)
	return k, true
}

// find returns id's slot number, for keyOf and setSlot, and whether id is in
// the heap. A slot number is valid until an id joins or leaves the heap
// (either may move slots in the table).
func (h *idHeap[K]) find(id ID) (int32, bool) {
	if len(h.slots) == 0 {
		return 0, false
	}
	mask := len(h.slots) - 1
	for i := h.home(id); ; i = (i + 1) & mask {
		switch sl := &h.slots[i]; {
		case sl.pos < 0:
			return 0, false
		case sl.id == id:
			return int32(i), true
		}
	}
}

// hintDistance is how many hits ahead hintAhead hints an id's item; its
// slot is hinted twice as far ahead.
const hintDistance = 8

// hintSlots is the table size (1 MiB of slots, 16,384 residents or more)
// from which hintAhead hints: in a smaller heap the table and items stay
// in the CPU's caches and hinting only costs (BenchmarkHits: 64 hits on
// 10,000 residents took 1.25-1.3x the time hinted; on 100,000 0.21-0.41x).
const hintSlots = 1 << 16

// hintAhead hints the CPU for a loop that hits ids in turn and is about
// to hit ids[i], in two steps (prefetch.Ahead): the slot where the search
// for an id begins about 2*hintDistance hits before it, then its item
// (found through that slot) about hintDistance before, so that each hit
// finds both in the CPU's caches. In a heap of a large cache's residents
// each would otherwise wait for memory in turn. It changes nothing, and
// does nothing for a table of fewer than hintSlots slots.
func (h *idHeap[K]) hintAhead(ids []ID, i int) {
	if len(h.slots) < hintSlots {
		return
	}
	prefetch.Ahead(len(ids), i, hintDistance,
		func(j int) { prefetch.Lines(unsafe.Pointer(&h.slots[h.home(ids[j])]), 1) },
		func(j int) {
			if s, ok := h.find(ids[j]); ok {
				prefetch.Lines(unsafe.Pointer(&h.items[h.slots[s].pos]), 1)
			}
		})
}

// home is the slot where id's search in the table starts.
func (h *idHeap[K]) home(id ID) int {
	return int(maphash.Comparable(h.seed, id)) & (len(h.slots) - 1)
}

// vacant returns the empty slot where id, which is not in the table, goes:
// the first after its home. The table must have one.
func (h *idHeap[K]) vacant(id ID) int32 {
	mask := len(h.slots) - 1
	i := h.home(id)
	for h.slots[i].pos >= 0 {
		i = (i + 1) & mask
	}
	return int32(i)
}

// grow doubles the table (16 slots at first) and moves every id to its
// slot in the new one.
func (h *idHeap[K]) grow() {
	old := h.slots
	h.slots = make([]heapSlot, max(16, 2*len(old)))
	for i := range h.slots {
		h.slots[i].pos = -1
	}
	for _, sl := range old {
		if sl.pos >= 0 {
			s := h.vacant(sl.id)
			h.slots[s] = sl
			h.items[sl.pos].slot = s
		}
	}
}

// vacate empties slot s and shifts the slots after it back, as far as
// their ids' homes allow, so that every id stays reachable from its home
// without a gap: the table needs no tombstones.
func (h *idHeap[K]) vacate(s int32) {
	mask := len(h.slots) - 1
	i := int(s)
	for j := (i + 1) & mask; h.slots[j].pos >= 0; j = (j + 1) & mask {
		// The id in slot j may move back to slot i if i lies between
		// its home and j (cyclically).
		if (j-i)&mask <= (j-h.home(h.slots[j].id))&mask {
			h.slots[i] = h.slots[j]
			h.items[h.slots[i].pos].slot = int32(i)
			i = j
		}
	}
	h.slots[i] = heapSlot{pos: -1}
}

// keyOf returns the key of the id in slot s.
func (h *idHeap[K]) keyOf(s int32) K { return h.items[h.slots[s].pos].key }

// set re-keys id, which must be in the heap.
func (h *idHeap[K]) set(id ID, k K) {
	s, _ := h.find(id)
	h.setSlot(s, k)
}

// setSlot re-keys the id in slot s.
func (h *idHeap[K]) setSlot(s int32, k K) {
	i := int(h.slots[s].pos)
	h.items[i].key = k
	if !h.up(i) {
		h.down(i)
	}
}

// each calls f with every id in the heap and its key, in no order; f must
// not change the heap.
func (h *idHeap[K]) each(f func(id ID, k K)) {
	for _, e := range h.items {
		f(h.slots[e.slot].id, e.key)
	}
}

// rekeyAll replaces every key k of an id by f(id, k) and restores the heap
// order, in O(n).
func (h *idHeap[K]) rekeyAll(f func(id ID, k K) K) {
	for i := range h.items {
		e := &h.items[i]
		e.key = f(h.slots[e.slot].id, e.key)
	}
	if n := len(h.items); n > 1 {
		for i := parent(n - 1); i >= 0; i-- {
			h.down(i)
		}
	}
}

func (h *idHeap[K]) removeAt(i int) {
	h.vacate(h.items[i].slot)
	last := len(h.items) - 1
	if i != last {
		h.items[i] = h.items[last]
		h.slots[h.items[i].slot].pos = int32(i)
	}
	h.items[last] = heapEntry[K]{}
	h.items = h.items[:last]
	if i != last && !h.up(i) {
		h.down(i)
	}
}

// arity is how many children a node of the heap has: item i's are
// arity*i+1 to arity*i+arity.
const arity = 4

// parent is the position of item i's parent; i > 0.
func parent(i int) int { return (i - 1) / arity }

// up moves item i towards the root and reports whether it moved.
func (h *idHeap[K]) up(i int) bool {
	start := i
	e := h.items[i]
	for i > 0 {
		p := parent(i)
		if !h.less(e.key, h.items[p].key) {
			break
		}
		h.items[i] = h.items[p]
		h.slots[h.items[i].slot].pos = int32(i)
		i = p
	}
	if i != start {
		h.items[i] = e
		h.slots[e.slot].pos = int32(i)
	}
	return i != start
}

func (h *idHeap[K]) down(i int) {
	start := i
	e := h.items[i]
	n := len(h.items)
	for {
		first := arity*i + 1
		if first >= n {
			break
		}
		c := first
		for r := first + 1; r < min(first+arity, n); r++ {
			if h.less(h.items[r].key, h.items[c].key) {
				c = r
			}
		}
		if !h.less(h.items[c].key, e.key) {
			break
		}
		h.items[i] = h.items[c]
		h.slots[h.items[i].slot].pos = int32(i)
		i = c
	}
	if i != start {
		h.items[i] = e
		h.slots[e.slot].pos = int32(i)
	}
}
