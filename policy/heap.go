package policy

import (
	"runtime"
	"unsafe"

	"github.com/shade-mesh/shade/internal/offheap"
	"github.com/shade-mesh/shade/internal/prefetch"
)

// idHeap is a 4-ary min-heap of ids keyed by K, with an index from id to
// position so that any member can be re-keyed or removed in O(log n). Four
// children a node, not two, halve the levels an item crosses when it is
// re-keyed, each of which, in a heap of a large cache's residents, waits
// for memory twice (the item moved and its slot); a node's four children
// lie side by side.
//
// The heap array holds keys and slot numbers; a slot of the id table
// (ids, an idMap at most half full) holds the id and its current heap
// position. Moving an item during a sift therefore writes an array
// element and its slot, never anything else, and finding a resident waits
// for memory twice, its slot and its item, where a Go map and a separate
// slot array took four loads that miss the CPU's caches in a large heap.
//
// The heap grows a part at a time, so that no push holds the node's policy
// lock, and with it every read, for long: a single table and a single
// array, each copied whole to grow, held it for 43-117 ms at 1,000,000
// residents (BenchmarkFill). The id table splits a table at a time
// (idMap); the heap array is chunks of itemChunk items, one added when
// the last is full.
//
// The id table and the chunks lie in memory mapped outside the Go heap:
// at a large cache's millions of residents they are tens of MB (about
// 24-32 bytes a resident's item, 32-64 its slot), which the garbage
// collector would count in its heap and let the heap grow by as much
// again before collecting. A policy has no Close: its constructor has
// the memory given back once the policy is unreachable (releaseWith
// with pools), and every method of the heap that reads that memory
// keeps the heap, and so its owner, alive to its end
// (runtime.KeepAlive), so that no read outlives the mapping.
type idHeap[K any] struct {
	chunks    []*[itemChunk]heapEntry[K] // the heap array, in chunks of itemChunk items
	n         int                        // items
	ids       idMap[heapRef]             // each id's slot: its item's position, and its tag
	less      func(a, b K) bool
	chunkPool *offheap.Pool[[itemChunk]heapEntry[K]]
}

// pools is the memory outside the Go heap that h holds, for releaseWith.
func (h *idHeap[K]) pools() []releaser { return []releaser{h.ids.pool, h.chunkPool} }

// bytes is the memory h holds outside the Go heap.
func (h *idHeap[K]) bytes() int64 { return h.ids.bytes() + h.chunkPool.Bytes() }

// itemChunk is the items of each chunk of an idHeap's heap array (192-256
// KiB).
const (
	itemBits  = 13
	itemChunk = 1 << itemBits
	itemMask  = itemChunk - 1
)

// item returns item i of the heap array.
func (h *idHeap[K]) item(i int) *heapEntry[K] { return &h.chunks[i>>itemBits][i&itemMask] }

type heapEntry[K any] struct {
	key  K
	slot int32
}

// plusOne is a position (of an item in the heap array, of a read in
// OrderAware's order) plus one, so that no id's is zero, an idMap's
// empty slot.
type plusOne int32

// at is the plusOne of position i.
func at(i int) plusOne { return plusOne(i + 1) }

// index is the position p stands for.
func (p plusOne) index() int { return int(p) - 1 }

// heapRef is what the id table holds of an id in the heap: its position,
// and a word of its owner's (the tag: APP and OrderAware keep there what
// they remember of a resident beside its key, its ghost entry's score),
// in what would be the slot's padding.
type heapRef struct {
	pos plusOne
	tag uint32
}

// heapSlot is a slot of the id table: an id, its heap position and its
// tag.
type heapSlot = idSlot[heapRef]

// heapItem is an id, its key and its tag, as top and pop return them.
type heapItem[K any] struct {
	id  ID
	key K
	tag uint32
}

// newIDHeap returns an empty heap; its owner calls releaseWith with its
// pools.
func newIDHeap[K any](less func(a, b K) bool) idHeap[K] {
	return idHeap[K]{ids: newIDMap[heapRef](halfFull), less: less, chunkPool: new(offheap.Pool[[itemChunk]heapEntry[K]])}
}

func (h *idHeap[K]) len() int { return h.n }

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
	e := h.item(0)
	sl := h.slot(e.slot)
	it := heapItem[K]{sl.id, e.key, sl.v.tag}
	runtime.KeepAlive(h)
	return it
}

// push adds id, which must not be in the heap, keyed k, with tag.
func (h *idHeap[K]) push(id ID, k K, tag uint32) {
	i := h.n
	s := h.ids.insert(id, heapRef{at(i), tag}, h.moved)
	if i>>itemBits == len(h.chunks) {
		h.chunks = append(h.chunks, h.chunkPool.Get())
	}
	*h.item(i) = heapEntry[K]{k, s}
	h.n++
	h.up(i)
	runtime.KeepAlive(h)
}

// moved tells the item of the id in slot sl that its slot is now number
// s (the id table moved it).
func (h *idHeap[K]) moved(sl *heapSlot, s int32) { h.item(sl.v.pos.index()).slot = s }

// pop removes and returns the least item; the heap must not be empty.
func (h *idHeap[K]) pop() heapItem[K] {
	it := h.top()
	h.removeAt(0)
	runtime.KeepAlive(h)
	return it
}

// remove takes id out of the heap and returns its key and tag, and
// whether it was there.
func (h *idHeap[K]) remove(id ID) (heapItem[K], bool) {
	s, ok := h.find(id)
	if !ok {
		return heapItem[K]{}, false
	}
	i := s.v.pos.index()
	it := heapItem[K]{id, h.item(i).key, s.v.tag}
	h.removeAt(i)
	runtime.KeepAlive(h)
	return it, true
}

// find returns id's slot, for keyOf and setSlot, and whether id is in the
// heap. The slot is valid until an id joins or leaves the heap (either may
// move slots in the table).
func (h *idHeap[K]) find(id ID) (*heapSlot, bool) {
	sl := h.ids.find(id)
	return sl, sl != nil
}

// slot returns slot number s.
func (h *idHeap[K]) slot(s int32) *heapSlot { return h.ids.slot(s) }

// hintDistance is how many hits ahead hintAhead hints an id's item; its
// slot is hinted twice as far ahead.
const hintDistance = 8

// hintSlots is the table size (1 MiB of slots, 8 tables: some 16,384
// residents or more) from which hintAhead hints: in a smaller heap the
// table and items stay in the CPU's caches and hinting only costs
// (BenchmarkHits: 64 hits on 10,000 residents took 1.25-1.3x the time
// hinted; on 100,000 0.21-0.41x).
const hintSlots = 1 << 16

// hintAhead hints the CPU for a loop that hits ids in turn and is about
// to hit ids[i], in two steps (prefetch.Ahead): the slot where the search
// for an id begins about 2*hintDistance hits before it, then its item
// (found through that slot) about hintDistance before, so that each hit
// finds both in the CPU's caches. In a heap of a large cache's residents
// each would otherwise wait for memory in turn. It changes nothing, and
// does nothing for a table of fewer than hintSlots slots.
func (h *idHeap[K]) hintAhead(ids []ID, i int) {
	if h.ids.slotCount() < hintSlots {
		return
	}
	prefetch.Ahead(len(ids), i, hintDistance,
		func(j int) {
			prefetch.Lines(h.ids.home(ids[j]), 1)
		},
		func(j int) {
			if s, ok := h.find(ids[j]); ok {
				prefetch.Lines(unsafe.Pointer(h.item(s.v.pos.index())), 1)
			}
			runtime.KeepAlive(h)
		})
}

// keyOf returns the key of the id in slot s.
func (h *idHeap[K]) keyOf(s *heapSlot) K {
	k := h.item(s.v.pos.index()).key
	runtime.KeepAlive(h)
	return k
}

// set re-keys id, which must be in the heap.
func (h *idHeap[K]) set(id ID, k K) {
	s, _ := h.find(id)
	h.setSlot(s, k)
}

// setSlot re-keys the id in slot s.
func (h *idHeap[K]) setSlot(s *heapSlot, k K) {
	i := s.v.pos.index()
	h.item(i).key = k
	if !h.up(i) {
		h.down(i)
	}
	runtime.KeepAlive(h)
}

// each calls f with every id in the heap and its key, in no order; f must
// not change the heap.
func (h *idHeap[K]) each(f func(id ID, k K)) {
	for i := range h.n {
		e := h.item(i)
		f(h.slot(e.slot).id, e.key)
	}
	runtime.KeepAlive(h)
}

// rekeyAll replaces every key k of an id by f(id, k) and restores the heap
// order, in O(n).
func (h *idHeap[K]) rekeyAll(f func(id ID, k K) K) {
	for i := range h.n {
		e := h.item(i)
		e.key = f(h.slot(e.slot).id, e.key)
	}
	if n := h.n; n > 1 {
		for i := parent(n - 1); i >= 0; i-- {
			h.down(i)
		}
	}
	runtime.KeepAlive(h)
}

func (h *idHeap[K]) removeAt(i int) {
	h.ids.remove(h.item(i).slot, h.moved)
	last := h.n - 1
	if i != last {
		*h.item(i) = *h.item(last)
		h.slot(h.item(i).slot).v.pos = at(i)
	}
	*h.item(last) = heapEntry[K]{}
	h.n = last
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
	e := *h.item(i)
	for i > 0 {
		p := parent(i)
		pe := h.item(p)
		if !h.less(e.key, pe.key) {
			break
		}
		*h.item(i) = *pe
		h.slot(pe.slot).v.pos = at(i)
		i = p
	}
	if i != start {
		*h.item(i) = e
		h.slot(e.slot).v.pos = at(i)
	}
	return i != start
}

func (h *idHeap[K]) down(i int) {
	start := i
	e := *h.item(i)
	n := h.n
	for {
		first := arity*i + 1
		if first >= n {
			break
		}
		c, ce := first, h.item(first)
		for r := first + 1; r < min(first+arity, n); r++ {
			if re := h.item(r); h.less(re.key, ce.key) {
				c, ce = r, re
			}
		}
		if !h.less(ce.key, e.key) {
			break
		}
		*h.item(i) = *ce
		h.slot(ce.slot).v.pos = at(i)
		i = c
	}
	if i != start {
		*h.item(i) = e
		h.slot(e.slot).v.pos = at(i)
	}
}
