package policy

import (
	"hash/maphash"
	"runtime"
	"unsafe"

	"github.com/shade-mesh/shade/internal/offheap"
)

// idMap maps ids to values of V in memory outside the Go heap. A policy
// keeps an entry of an id for each of its residents (its place in the
// heap) and for each id it remembers (a ghost entry): at a large
// dataset's tens of millions of samples that is hundreds of MB, which on
// the Go heap the garbage collector would count and let the heap grow by
// as much again before collecting.
//
// It is extendible hashing, as the store's index and Go's own maps are:
// the top depth bits of an id's seeded hash pick an entry of dir, which
// points to a table of tabSlots slots; its low bits pick the slot where
// its search starts (linear probing). A table that would hold more than
// limit ids splits in two by the next bit of the hash, the directory
// doubling first where the table had one entry in it, so that growing
// moves at most one table's ids and no insert holds its caller's lock
// for long. Deleting an id shifts the slots after it back, so the tables
// need no tombstones. Ids are hashed with a seed of the map's own
// (hash/maphash, as Go's maps do), so that ids chosen to collide (a
// client picking keys) cannot be found without the seed.
//
// A slot holding V's zero value is empty: no value stored may be zero.
// A slot has a number, its table's number times tabSlots plus its place,
// which stays the id's until an id joins or leaves the map (either may
// move ids): insert and remove tell their caller of each id they move.
//
// The tables come from pool, which the map's owner has released once it
// is unreachable (releaseWith); every method that reads a table keeps
// the map, and so its owner, alive to its end (runtime.KeepAlive), as
// must a caller that reads a slot a method returned.
type idMap[V comparable] struct {
	tabs  []*idTab[V] // the tables, by number
	dir   []*idTab[V] // each seeded hash's table, by its top depth bits
	depth uint
	n     int   // ids
	limit int32 // the ids a table holds before it splits
	seed  maphash.Seed
	pool  *offheap.Pool[idTab[V]]
}

// idTab is one table of an idMap.
type idTab[V comparable] struct {
	num   int32 // its number in tabs
	n     int32 // slots used
	depth uint  // the top bits of a seeded hash its ids all share
	slots [tabSlots]idSlot[V]
}

// idSlot is a slot of an idMap: an id and its value, or an empty slot
// (a zero value).
type idSlot[V comparable] struct {
	id ID
	v  V
}

const (
	// tabBits is log2 of tabSlots, the slots of each table of an idMap
	// (128 KiB of 16-byte slots: a split moves at most 4,096 ids of a
	// heap's id table). Smaller tables make a larger directory, which a
	// large heap's hits probably push out of the CPU's caches: runs of
	// 64 hits on 1,000,000 residents took a median 1.2-1.5x the time
	// they took in one table with 1,024 slots, 1.11-1.15x with 8,192
	// (both with a find that also loaded the table's number),
	// 0.98-1.04x with 8,192 and find as it is (BenchmarkHits).
	tabBits  = 13
	tabSlots = 1 << tabBits
	tabMask  = tabSlots - 1
)

// Limits on a table's ids: half full where hits look ids up (a heap's
// residents: a search crosses 1.5 slots on average, 2.5 for an id not
// there), three quarters where only misses and score updates do (ghost
// entries: 2.5 and 8.5 slots, and a third less memory an id).
const (
	halfFull          = tabSlots / 2
	threeQuartersFull = tabSlots / 4 * 3
)

// newIDMap returns an empty map whose tables split beyond limit ids; its
// owner calls releaseWith with its pool.
func newIDMap[V comparable](limit int32) idMap[V] {
	return idMap[V]{limit: limit, seed: maphash.MakeSeed(), pool: new(offheap.Pool[idTab[V]])}
}

// len is the number of ids in m.
func (m *idMap[V]) len() int { return m.n }

// slotCount is the number of slots of m's tables.
func (m *idMap[V]) slotCount() int { return len(m.tabs) * tabSlots }

// bytes is the memory m holds outside the Go heap.
func (m *idMap[V]) bytes() int64 { return m.pool.Bytes() }

func (m *idMap[V]) hash(id ID) uint64 { return maphash.Comparable(m.seed, id) }

// find returns id's slot, or nil where id is not in m. It does not work
// out the slot's number (locate does): that reads the table's header,
// one more wait for memory a hit in a large table (see tabBits).
func (m *idMap[V]) find(id ID) *idSlot[V] {
	if len(m.dir) == 0 {
		return nil
	}
	sh := m.hash(id)
	t := m.dir[sh>>(64-m.depth)] // a shift by 64 is 0 in Go
	var empty V
	for i := sh & tabMask; ; i = (i + 1) & tabMask {
		switch sl := &t.slots[i]; {
		case sl.v == empty:
			runtime.KeepAlive(m)
			return nil
		case sl.id == id:
			runtime.KeepAlive(m)
			return sl
		}
	}
}

// locate returns id's slot and its number, or nil where id is not in m.
func (m *idMap[V]) locate(id ID) (*idSlot[V], int32) {
	sl := m.find(id)
	if sl == nil {
		return nil, 0
	}
	t := m.dir[m.hash(id)>>(64-m.depth)]
	i := (uintptr(unsafe.Pointer(sl)) - uintptr(unsafe.Pointer(&t.slots[0]))) / unsafe.Sizeof(*sl)
	runtime.KeepAlive(m)
	return sl, t.num<<tabBits | int32(i)
}

// slot returns slot number s.
func (m *idMap[V]) slot(s int32) *idSlot[V] { return &m.tabs[s>>tabBits].slots[s&tabMask] }

// home returns the slot where the search for id begins, for a hint to
// the CPU; m must not be empty.
func (m *idMap[V]) home(id ID) unsafe.Pointer {
	sh := m.hash(id)
	return unsafe.Pointer(&m.dir[sh>>(64-m.depth)].slots[sh&tabMask])
}

// insert adds id, which is not in m, with v, which is not zero, and
// returns its slot number. moved, where not nil, is called with each id
// that a split moves, in its new slot, and that slot's number.
func (m *idMap[V]) insert(id ID, v V, moved func(*idSlot[V], int32)) int32 {
	sh := m.hash(id)
	s := m.add(m.tabOf(sh), sh, id, v, moved)
	runtime.KeepAlive(m)
	return s
}

// put returns id's slot, first adding id with v, which is not zero,
// where id is not in m, and whether it added it: one search for an id
// that may be new. It is for maps whose slot numbers no one keeps (a
// split may move ids).
func (m *idMap[V]) put(id ID, v V) (*idSlot[V], bool) {
	sh := m.hash(id)
	t := m.tabOf(sh)
	var empty V
	for i := sh & tabMask; t.slots[i].v != empty; i = (i + 1) & tabMask {
		if t.slots[i].id == id {
			runtime.KeepAlive(m)
			return &t.slots[i], false
		}
	}
	s := m.add(t, sh, id, v, nil)
	sl := m.slot(s)
	runtime.KeepAlive(m)
	return sl, true
}

// tabOf returns the table of seeded hash sh, making the first table of
// an empty map.
func (m *idMap[V]) tabOf(sh uint64) *idTab[V] {
	if len(m.dir) == 0 {
		m.tabs = append(m.tabs[:0], m.newTab(0, 0))
		m.dir = []*idTab[V]{m.tabs[0]}
	}
	return m.dir[sh>>(64-m.depth)] // a shift by 64 is 0 in Go
}

// add puts id, of seeded hash sh, which is not in t, its table, into an
// empty slot with v, splitting t first where it holds its limit, and
// returns the slot's number.
func (m *idMap[V]) add(t *idTab[V], sh uint64, id ID, v V, moved func(*idSlot[V], int32)) int32 {
	for t.n >= m.limit { // once, unless a split left t's ids all in sh's half
		t = m.split(t, sh, moved)
	}
	s := t.vacant(sh)
	t.slots[s&tabMask] = idSlot[V]{id, v}
	t.n++
	m.n++
	return s
}

// remove empties slot s and shifts the slots after it in its table back,
// as far as their ids' homes allow, so that every id stays reachable from
// its home without crossing an empty slot. moved, where not nil, is
// called with each id shifted, in its new slot, and that slot's number.
func (m *idMap[V]) remove(s int32, moved func(*idSlot[V], int32)) {
	t := m.tabs[s>>tabBits]
	slots := &t.slots
	var empty V
	i := uint64(s & tabMask)
	for j := (i + 1) & tabMask; slots[j].v != empty; j = (j + 1) & tabMask {
		// The id in slot j may move back to slot i if i lies between
		// its home and j (cyclically).
		if home := m.hash(slots[j].id) & tabMask; (j-i)&tabMask <= (j-home)&tabMask {
			slots[i] = slots[j]
			if moved != nil {
				moved(&slots[i], t.num<<tabBits|int32(i))
			}
			i = j
		}
	}
	slots[i] = idSlot[V]{}
	t.n--
	m.n--
	runtime.KeepAlive(m)
}

// newTab returns an empty table numbered num, depth bits deep: the pool
// hands out zeroed memory, every slot empty.
func (m *idMap[V]) newTab(num int32, depth uint) *idTab[V] {
	t := m.pool.Get()
	t.num, t.depth = num, depth
	return t
}

// vacant returns the number of the empty slot of t where the id of
// seeded hash sh, which is not in t, goes: the first from its home on. t
// must have one.
func (t *idTab[V]) vacant(sh uint64) int32 {
	var empty V
	i := sh & tabMask
	for t.slots[i].v != empty {
		i = (i + 1) & tabMask
	}
	return t.num<<tabBits | int32(i)
}

// split makes room in t, the table of seeded hash sh: two new tables take
// its place and share its ids by the bit of their seeded hash after t's
// depth, the directory doubling first if t has only one entry in it, and
// moved (where not nil) learns of each id's new slot. It returns the
// table that now holds sh's ids. Where t is as deep as ids can be told
// apart (seeded hashes that share 51 top bits: beyond belief), split
// fails loudly rather than loop.
func (m *idMap[V]) split(t *idTab[V], sh uint64, moved func(*idSlot[V], int32)) *idTab[V] {
	depth := t.depth
	if depth >= 64-tabBits {
		panic("policy: an id table cannot tell its ids apart")
	}
	if depth == m.depth {
		dir := make([]*idTab[V], 2*len(m.dir))
		for j, u := range m.dir {
			dir[2*j], dir[2*j+1] = u, u
		}
		m.dir = dir
		m.depth++
	}
	// t's entries in dir: those sharing sh's top depth bits. The lower
	// half's table keeps t's number.
	halves := [2]*idTab[V]{m.newTab(t.num, depth+1), m.newTab(int32(len(m.tabs)), depth+1)}
	m.tabs[t.num] = halves[0]
	m.tabs = append(m.tabs, halves[1])
	span := uint64(1) << (m.depth - depth)
	first := sh >> (64 - depth) << (m.depth - depth)
	for j := range span {
		m.dir[first+j] = halves[j/(span/2)]
	}
	var empty V
	for _, sl := range &t.slots {
		if sl.v == empty {
			continue
		}
		ssh := m.hash(sl.id)
		to := halves[ssh>>(63-depth)&1]
		s := to.vacant(ssh)
		to.slots[s&tabMask] = sl
		to.n++
		if moved != nil {
			moved(&to.slots[s&tabMask], s)
		}
	}
	m.pool.Put(t)
	return halves[sh>>(63-depth)&1]
}

// reset empties m; its tables go back to its pool, for its next inserts.
func (m *idMap[V]) reset() {
	for _, t := range m.tabs {
		m.pool.Put(t)
	}
	m.tabs, m.dir, m.depth, m.n = m.tabs[:0], nil, 0, 0
}

// each calls f with every id in m and its value, in no order; f must not
// change m.
func (m *idMap[V]) each(f func(id ID, v V)) {
	var empty V
	for _, t := range m.tabs {
		for i := range t.slots {
			if sl := &t.slots[i]; sl.v != empty {
				f(sl.id, sl.v)
			}
		}
	}
	runtime.KeepAlive(m)
}

// releaser is memory outside the Go heap that a policy holds (an
// offheap.Pool).
type releaser interface{ Release() }

// releaseWith has the memory mem, which owner holds, given back once
// owner is unreachable (runtime.AddCleanup). Each policy's constructor
// calls it with the pools of its heap and maps.
func releaseWith[T any](owner *T, mem ...releaser) {
	runtime.AddCleanup(owner, func(mem []releaser) {
		for _, r := range mem {
			r.Release()
		}
	}, mem)
}
