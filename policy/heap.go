package policy

import (
	"hash/maphash"
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
// The heap array holds keys and slot numbers; a slot holds the id and its
// current heap position. Moving an item during a sift therefore writes an
// array element and its slot, never anything else. The slots are
// themselves the index from id to position: open-addressing hash tables
// (linear probing, at most half full, deletion by shifting the slots after
// it back), so that finding a resident waits for memory twice, its slot
// and its item, where a Go map and a separate slot array took four loads
// that miss the CPU's caches in a large heap. The table hashes ids with a
// seed of its own (hash/maphash, as Go's maps do), so that ids chosen to
// collide (a client picking keys) cannot be found without the seed.
//
// The heap grows a part at a time, so that no push holds the node's policy
// lock, and with it every read, for long: a single table and a single
// array, each copied whole to grow, held it for 43-117 ms at 1,000,000
// residents (BenchmarkFill). The id table is extendible hashing, as the
// store's index and Go's own maps are: the top depth bits of an id's
// seeded hash pick an entry of dir, which points to a table of tabSlots
// slots; its low bits pick the slot where its search starts. A table
// that would be more than half full splits in two by the next bit of the
// hash, the directory doubling first where the table had one entry in
// it, so growing moves at most one table's ids. The heap array is chunks
// of itemChunk items, one added when the last is full. An item's slot
// number is its table's number times tabSlots plus its place.
//
// The tables and the chunks lie in memory mapped outside the Go heap
// (heapMem): at a large cache's millions of residents they are tens of MB
// (about 24-32 bytes a resident's item, 32-64 its slot), which the
// garbage collector would count in its heap and let the heap grow by as
// much again before collecting. A policy has no Close: its constructor
// has the memory given back once the policy is unreachable
// (releaseWith), and every method of the heap that reads that memory
// keeps the heap, and so its owner, alive to its end
// (runtime.KeepAlive), so that no read outlives the mapping.
type idHeap[K any] struct {
	chunks []*[itemChunk]heapEntry[K] // the heap array, in chunks of itemChunk items
	n      int                        // items
	tabs   []*idTable                 // the id table's tables, by number
	dir    []*idTable                 // each seeded hash's table, by its top depth bits
	depth  uint
	seed   maphash.Seed
	less   func(a, b K) bool
	mem    *heapMem[K] // where the tables and chunks lie
}

// heapMem is the memory of an idHeap's tables and chunks, outside the
// Go heap.
type heapMem[K any] struct {
	tabs   offheap.Pool[idTable]
	chunks offheap.Pool[[itemChunk]heapEntry[K]]
}

// bytes is the memory m holds.
func (m *heapMem[K]) bytes() int64 { return m.tabs.Bytes() + m.chunks.Bytes() }

// release unmaps m's memory; nothing of it may be read after.
func (m *heapMem[K]) release() {
	m.tabs.Release()
	m.chunks.Release()
}

// releaseWith has the memory of h, which owner holds, given back once
// owner is unreachable (runtime.AddCleanup). Each policy's constructor
// calls it.
func releaseWith[T, K any](owner *T, h *idHeap[K]) {
	runtime.AddCleanup(owner, (*heapMem[K]).release, h.mem)
}

// itemChunk is the items of each chunk of an idHeap's heap array (192-256
// KiB).
const (
	itemBits  = 13
	itemChunk = 1 << itemBits
	itemMask  = itemChunk - 1
)

// item returns item i of the heap array.
func (h *idHeap[K]) item(i int) *heapEntry[K] { return &h.chunks[i>>itemBits][i&itemMask] }

// idTable is one table of an idHeap's id table.
type idTable struct {
	num   int32 // its number in tabs
	n     int32 // slots used
	depth uint  // the top bits of a seeded hash its ids all share
	slots [tabSlots]heapSlot
}

// newTable returns an empty table numbered num, depth bits deep.
func (h *idHeap[K]) newTable(num int32, depth uint) *idTable {
	t := h.mem.tabs.Get()
	t.num, t.depth = num, depth
	for i := range t.slots {
		t.slots[i] = heapSlot{pos: -1}
	}
	return t
}

const (
	// tabBits is log2 of tabSlots, the slots of each table of an
	// idHeap's id table (128 KiB: a split moves at most 4,096 ids).
	// Smaller tables make a larger directory, which a large heap's
	// hits probably push out of the CPU's caches: runs of 64 hits on
	// 1,000,000 residents took a median 1.2-1.5x the time they took in
	// one table with 1,024 slots, 1.11-1.15x with 8,192 (both with a
	// find that also loaded the table's number), 0.98-1.04x with 8,192
	// and find as it is (BenchmarkHits).
	tabBits  = 13
	tabSlots = 1 << tabBits
	tabMask  = tabSlots - 1
)

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

// newIDHeap returns an empty heap; its owner calls releaseWith.
func newIDHeap[K any](less func(a, b K) bool) idHeap[K] {
	return idHeap[K]{seed: maphash.MakeSeed(), less: less, mem: new(heapMem[K])}
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
	it := heapItem[K]{h.slot(e.slot).id, e.key}
	runtime.KeepAlive(h)
	return it
}

// push adds id, which must not be in the heap.
func (h *idHeap[K]) push(id ID, k K) {
	if h.dir == nil {
		h.tabs = []*idTable{h.newTable(0, 0)}
		h.dir = []*idTable{h.tabs[0]}
	}
	sh := maphash.Comparable(h.seed, id)
	t := h.dir[sh>>(64-h.depth)] // a shift by 64 is 0 in Go
	for 2*(t.n+1) > tabSlots {   // once, unless a split left t's ids all in sh's half
		t = h.split(t, sh)
	}
	i := h.n
	s := t.vacant(sh)
	*h.slot(s) = heapSlot{id: id, pos: int32(i)}
	t.n++
	if i>>itemBits == len(h.chunks) {
		h.chunks = append(h.chunks, h.mem.chunks.Get())
	}
	*h.item(i) = heapEntry[K]{k, s}
	h.n++
	h.up(i)
	runtime.KeepAlive(h)
}

// pop removes and returns the least item; the heap must not be empty.
func (h *idHeap[K]) pop() heapItem[K] {
	it := h.top()
	h.removeAt(0)
	runtime.KeepAlive(h)
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
	i := int(s.pos)
	k := h.item(i).key
	h.removeAt(i)
	runtime.KeepAlive(h)
	return k, true
}

// find returns id's slot, for keyOf and setSlot, and whether id is in the
// heap. The slot is valid until an id joins or leaves the heap (either may
// move slots in the table).
func (h *idHeap[K]) find(id ID) (*heapSlot, bool) {
	if h.dir == nil {
		return nil, false
	}
	sh := maphash.Comparable(h.seed, id)
	t := h.dir[sh>>(64-h.depth)]
	for i := sh & tabMask; ; i = (i + 1) & tabMask {
		switch sl := &t.slots[i]; {
		case sl.pos < 0:
			runtime.KeepAlive(h)
			return nil, false
		case sl.id == id:
			runtime.KeepAlive(h)
			return sl, true
		}
	}
}

// slot returns slot number s.
func (h *idHeap[K]) slot(s int32) *heapSlot { return &h.tabs[s>>tabBits].slots[s&tabMask] }

// tableSlots is the number of slots of the id table.
func (h *idHeap[K]) tableSlots() int { return len(h.tabs) * tabSlots }

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
	if h.tableSlots() < hintSlots {
		return
	}
	prefetch.Ahead(len(ids), i, hintDistance,
		func(j int) {
			sh := maphash.Comparable(h.seed, ids[j])
			prefetch.Lines(unsafe.Pointer(&h.dir[sh>>(64-h.depth)].slots[sh&tabMask]), 1)
		},
		func(j int) {
			if s, ok := h.find(ids[j]); ok {
				prefetch.Lines(unsafe.Pointer(h.item(int(s.pos))), 1)
			}
			runtime.KeepAlive(h)
		})
}

// vacant returns the empty slot of t where the id of seeded hash sh,
// which is not in t, goes: the first from its home on. t must have one.
func (t *idTable) vacant(sh uint64) int32 {
	i := sh & tabMask
	for t.slots[i].pos >= 0 {
		i = (i + 1) & tabMask
	}
	return t.num<<tabBits | int32(i)
}

// split makes room in t, the table of seeded hash sh: two new tables
// take its place and share its ids by the bit of their seeded hash after
// t's depth, the directory doubling first if t has only one entry in it,
// and their items learn their new slots. It returns the table that now holds
// sh's ids. Where t is as deep as ids can be told apart (seeded hashes
// that share 51 top bits: beyond belief), split fails loudly rather than
// loop.
func (h *idHeap[K]) split(t *idTable, sh uint64) *idTable {
	depth := t.depth
	if depth >= 64-tabBits {
		panic("policy: the id table cannot tell its ids apart")
	}
	if depth == h.depth {
		dir := make([]*idTable, 2*len(h.dir))
		for j, u := range h.dir {
			dir[2*j], dir[2*j+1] = u, u
		}
		h.dir = dir
		h.depth++
	}
	// t's entries in dir: those sharing sh's top depth bits. The lower
	// half's table keeps t's number.
	halves := [2]*idTable{h.newTable(t.num, depth+1), h.newTable(int32(len(h.tabs)), depth+1)}
	h.tabs[t.num] = halves[0]
	h.tabs = append(h.tabs, halves[1])
	span := uint64(1) << (h.depth - depth)
	first := sh >> (64 - depth) << (h.depth - depth)
	for j := range span {
		h.dir[first+j] = halves[j/(span/2)]
	}
	for _, sl := range &t.slots {
		if sl.pos < 0 {
			continue
		}
		ssh := maphash.Comparable(h.seed, sl.id)
		to := halves[ssh>>(63-depth)&1]
		s := to.vacant(ssh)
		to.slots[s&tabMask] = sl
		to.n++
		h.item(int(sl.pos)).slot = s
	}
	h.mem.tabs.Put(t)
	return halves[sh>>(63-depth)&1]
}

// vacate empties slot s and shifts the slots after it in its table back,
// as far as their ids' homes allow, so that every id stays reachable from
// its home without a gap: the table needs no tombstones.
func (h *idHeap[K]) vacate(s int32) {
	t := h.tabs[s>>tabBits]
	slots := &t.slots
	i := uint64(s & tabMask)
	for j := (i + 1) & tabMask; slots[j].pos >= 0; j = (j + 1) & tabMask {
		// The id in slot j may move back to slot i if i lies between
		// its home and j (cyclically).
		if home := maphash.Comparable(h.seed, slots[j].id) & tabMask; (j-i)&tabMask <= (j-home)&tabMask {
			slots[i] = slots[j]
			h.item(int(slots[i].pos)).slot = t.num<<tabBits | int32(i)
			i = j
		}
	}
	slots[i] = heapSlot{pos: -1}
	t.n--
}

// keyOf returns the key of the id in slot s.
func (h *idHeap[K]) keyOf(s *heapSlot) K {
	k := h.item(int(s.pos)).key
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
	i := int(s.pos)
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
	h.vacate(h.item(i).slot)
	last := h.n - 1
	if i != last {
		*h.item(i) = *h.item(last)
		h.slot(h.item(i).slot).pos = int32(i)
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
		h.slot(pe.slot).pos = int32(i)
		i = p
	}
	if i != start {
		*h.item(i) = e
		h.slot(e.slot).pos = int32(i)
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
		h.slot(ce.slot).pos = int32(i)
		i = c
	}
	if i != start {
		*h.item(i) = e
		h.slot(e.slot).pos = int32(i)
	}
}
