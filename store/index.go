package store

import (
	"hash/maphash"
	"sync/atomic"
	"unsafe"

	"github.com/shade-mesh/shade/internal/prefetch"
)

// index maps the hash of each key a shard holds to its block's offset in
// the arena: open addressing with linear probing over a table of a power
// of two slots, each slot the hash and the offset side by side, grown to
// twice the slots when three quarters would be used, a deletion closing
// its gap by moving later slots back (no tombstones). A hash's first slot
// is chosen by hashing it again with a random seed of the index's
// (hash/maphash, as Go's maps do): keys are a client's to choose, and
// xxhash64 is not keyed, so keys whose hashes start in one slot could
// otherwise be found offline, and their probe runs would make every
// lookup in the shard slow.
//
// It does what a Go map[uint64]uint64 did, in a layout the store can hint
// to the CPU: the slot of a hash is found from the hash and the table
// alone, so prefetchSlot can start loading it for a key some reads ahead without
// taking the shard's lock. A lookup of a key out of the CPU's caches
// otherwise waits for memory twice in turn, for the slot and then for the
// block's header, and the lock's atomic instructions keep lookups of
// different keys from overlapping those waits (BenchmarkLendBatch).
//
// get, set and del need the shard's lock (read lock for get); the zero
// value is an empty index. prefetchSlot needs no lock.
type index struct {
	t atomic.Pointer[slotTable] // nil until the first set, and after reset
	n int                       // slots used
}

// slotTable is one generation of an index's slots. It never changes
// size; growing makes a new one. A slot with off 0 is empty; a used slot
// holds its block's offset plus one (a block may lie at offset 0).
type slotTable struct {
	slots []slot
	shift uint // 64 - log2(len(slots))
	seed  maphash.Seed
}

type slot struct{ h, off uint64 }

// minSlots is the size of an index's first table: 1 << (64 - its shift).
const minSlots = 8

// home is the slot where the search for h starts.
func (t *slotTable) home(h uint64) uint64 { return maphash.Comparable(t.seed, h) >> t.shift }

func (t *slotTable) mask() uint64 { return uint64(len(t.slots) - 1) }

// find returns the slot of h, or the empty slot where h would go.
func (t *slotTable) find(h uint64) (i uint64, found bool) {
	m := t.mask()
	for i = t.home(h); ; i = (i + 1) & m {
		s := &t.slots[i]
		if s.off == 0 {
			return i, false
		}
		if s.h == h {
			return i, true
		}
	}
}

// get returns the offset held for h.
func (x *index) get(h uint64) (off uint64, ok bool) {
	t := x.t.Load()
	if t == nil {
		return 0, false
	}
	i, ok := t.find(h)
	if !ok {
		return 0, false
	}
	return t.slots[i].off - 1, true
}

// set holds off for h and returns the offset it replaces, if any.
func (x *index) set(h, off uint64) (old uint64, had bool) {
	t := x.t.Load()
	if t == nil || 4*(x.n+1) > 3*len(t.slots) {
		t = x.grow(t)
	}
	i, had := t.find(h)
	s := &t.slots[i]
	if had {
		old = s.off - 1
	} else {
		x.n++
	}
	s.h, s.off = h, off+1
	return old, had
}

// grow replaces t (nil: none yet) by a table of twice its slots (or
// minSlots) holding the same entries, and returns it.
//
// The seed stays: an entry's first slot in the new table is then 2i or
// 2i+1 for its first slot i in the old, so the copy writes the new table
// in order instead of at random. With a new seed a growth to 512 Ki slots
// took 12-24 ms, most of it waiting for memory, while the shard's readers
// waited for its lock.
func (x *index) grow(t *slotTable) *slotTable {
	if t == nil {
		next := &slotTable{slots: make([]slot, minSlots), shift: 64 - 3, seed: maphash.MakeSeed()}
		x.t.Store(next)
		return next
	}
	next := &slotTable{slots: make([]slot, 2*len(t.slots)), shift: t.shift - 1, seed: t.seed}
	for _, s := range t.slots {
		if s.off != 0 {
			i, _ := next.find(s.h)
			next.slots[i] = s
		}
	}
	x.t.Store(next)
	return next
}

// del removes h and reports whether it was held. The slots after it that
// probed past it move back, so that every entry stays reachable from its
// home slot without crossing an empty one.
func (x *index) del(h uint64) bool {
	t := x.t.Load()
	if t == nil {
		return false
	}
	i, ok := t.find(h)
	if !ok {
		return false
	}
	m := t.mask()
	for j := (i + 1) & m; t.slots[j].off != 0; j = (j + 1) & m {
		// The entry at j may fill the gap at i if its home is not in
		// the cyclic range (i, j]: it probed from at or before i.
		if k := t.home(t.slots[j].h); (j-k)&m >= (j-i)&m {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	x.n--
	return true
}

// reset drops every entry and the table.
func (x *index) reset() {
	x.t.Store(nil)
	x.n = 0
}

// prefetchSlot asks the CPU to start loading the slot where a lookup of h
// begins, without waiting for it. It takes no lock: the table it reads
// may be replaced meanwhile, and then the hint is only wasted.
func (x *index) prefetchSlot(h uint64) {
	if t := x.t.Load(); t != nil {
		prefetch.Lines(unsafe.Pointer(&t.slots[t.home(h)]), 1)
	}
}
