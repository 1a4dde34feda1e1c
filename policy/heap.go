package policy

// idHeap is a 4-ary min-heap of ids keyed by K, with an index from id to
// position so that any member can be re-keyed or removed in O(log n). Four
// children a node, not two, halve the levels an item crosses when it is
// re-keyed, each of which, in a heap of a large cache's residents, waits
// for memory twice (the item moved and its slot); a node's four children
// lie side by side.
//
// The heap array holds keys and slot numbers; a slot holds the id and its
// current heap position. Moving an item during a sift therefore writes an
// array element, never the map, which is touched only to find, add or drop
// an id. Nothing in it is a pointer, so the garbage collector does not scan
// it however many residents there are.
type idHeap[K any] struct {
	items []heapEntry[K] // heap order
	slots []heapSlot     // by slot number; freed ones listed in free
	free  []int32
	at    map[ID]int32 // id -> slot number
	less  func(a, b K) bool
}

type heapEntry[K any] struct {
	key  K
	slot int32
}

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
	return idHeap[K]{at: make(map[ID]int32), less: less}
}

func (h *idHeap[K]) len() int { return len(h.items) }

func (h *idHeap[K]) has(id ID) bool {
	_, ok := h.at[id]
	return ok
}

// key returns id's key and whether id is in the heap.
func (h *idHeap[K]) key(id ID) (K, bool) {
	s, ok := h.at[id]
	if !ok {
		var zero K
		return zero, false
	}
	return h.items[h.slots[s].pos].key, true
}

// top returns the least item; the heap must not be empty.
func (h *idHeap[K]) top() heapItem[K] {
	e := h.items[0]
	return heapItem[K]{h.slots[e.slot].id, e.key}
}

// push adds id, which must not be in the heap.
func (h *idHeap[K]) push(id ID, k K) {
	var s int32
	if n := len(h.free); n > 0 {
		s = h.free[n-1]
		h.free = h.free[:n-1]
	} else {
		s = int32(len(h.slots))
		h.slots = append(h.slots, heapSlot{})
	}
	i := len(h.items)
	h.slots[s] = heapSlot{id: id, pos: int32(i)}
	h.at[id] = s
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
	s, ok := h.at[id]
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
// the heap. A slot number is valid until id leaves the heap.
func (h *idHeap[K]) find(id ID) (int32, bool) {
	s, ok := h.at[id]
	return s, ok
}

// keyOf returns the key of the id in slot s.
func (h *idHeap[K]) keyOf(s int32) K { return h.items[h.slots[s].pos].key }

// set re-keys id, which must be in the heap.
func (h *idHeap[K]) set(id ID, k K) { h.setSlot(h.at[id], k) }

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
	s := h.items[i].slot
	delete(h.at, h.slots[s].id)
	h.slots[s] = heapSlot{}
	h.free = append(h.free, s)
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
