package store

import (
	"hash/maphash"
	"sync/atomic"
	"unsafe"

	"github.com/shade-mesh/shade/internal/offheap"
	"github.com/shade-mesh/shade/internal/prefetch"
)

// index maps the hash of each key a shard holds to its block's offset in
// the arena. A hash is hashed again with a random seed of the index's
// (hash/maphash, as Go's maps do: keys are a client's to choose, and
// xxhash64 is not keyed, so keys whose hashes meet in one place could
// otherwise be found offline, and every lookup in the shard would walk
// past them). The top bits of that seeded hash pick an entry of a
// directory, which points to a table; its low bits pick the slot where
// the search starts in that table.
//
// A table is open addressing with linear probing over tableSlots slots,
// each slot the hash and the offset side by side, a deletion closing its
// gap by moving later slots back (no tombstones). A table that would be
// more than three quarters full splits into two, by the next bit of the
// seeded hash, and the directory's entries that pointed to it point to
// one or the other (the directory doubles first if the table had one
// entry). This is extendible hashing, the layout of Go's own maps: a set
// that grows the index moves one table's entries, never the whole
// index's, so a shard's lock is never held for long while the cache
// fills (BenchmarkIndexFill). Tables never shrink.
//
// It does what a Go map[uint64]uint64 did, in a layout the store can hint
// to the CPU: the slot of a hash is found from the hash, the directory
// and the table alone, so prefetchSlot can start loading it for a key
// some reads ahead without taking the shard's lock. A lookup of a key out
// of the CPU's caches otherwise waits for memory twice in turn, for the
// slot and then for the block's header, and the lock's atomic
// instructions keep lookups of different keys from overlapping those
// waits (BenchmarkLendBatch).
//
// The tables lie outside the Go heap (offheap.Pool; the table a split
// leaves is the next split's): a node's index holds 31-37 bytes an
// entry, tens of MB for a cache of millions of small samples, which the
// garbage collector would otherwise count in its heap, and let the heap
// grow by as much again before collecting.
//
// get, set and del need the shard's lock (read lock for get), and so does
// reset, which gives the tables' memory back; the zero value is an empty
// index. prefetchSlot needs no lock.
type index struct {
	d    atomic.Pointer[directory] // nil until the first set, and after reset
	pool offheap.Pool[slotTable]
}

// directory points each value of a seeded hash's top bits to the table
// holding those hashes. A table of depth k has the 1 << (depth-k)
// consecutive entries that share their top k bits. Its size and seed
// never change; a deeper directory replaces it, and its entries are
// swapped atomically, for prefetchSlot's sake.
type directory struct {
	tables []atomic.Pointer[slotTable] // 1 << depth
	depth  uint
	seed   maphash.Seed
}

// slotTable is one table of an index. A split makes new ones. A slot
// with off 0 is empty; a used slot holds its block's offset plus one (a
// block may lie at offset 0). The slots lie in the table itself, so that
// a lookup finds its slot from the directory's pointer alone.
type slotTable struct {
	depth uint // the top bits of a seeded hash its entries all share
	n     int  // slots used
	slots [tableSlots]slot
}

type slot struct{ h, off uint64 }

const (
	// tableSlots is the slots of each table (16 KiB): a set that grows
	// the index moves at most three quarters of this many entries.
	tableBits  = 10
	tableSlots = 1 << tableBits
	tableMask  = tableSlots - 1
)

// table returns the table holding seeded hash sh.
func (d *directory) table(sh uint64) *slotTable {
	return d.tables[sh>>(64-d.depth)].Load() // a shift by 64 is 0 in Go
}

// home is the slot where the search for seeded hash sh starts.
func home(sh uint64) uint64 { return sh & tableMask }

// find returns the slot of h (seeded: sh), or the empty slot where it
// would go.
func (t *slotTable) find(h, sh uint64) (i uint64, found bool) {
	for i = home(sh); ; i = (i + 1) & tableMask {
		s := &t.slots[i]
		if s.off == 0 {
			return i, false
		}
		if s.h == h {
			return i, true
		}
	}
}

// add puts a slot whose hash (seeded: sh) t does not hold into t.
func (t *slotTable) add(s slot, sh uint64) {
	i, _ := t.find(s.h, sh)
	t.slots[i] = s
	t.n++
}

// get returns the offset held for h.
func (x *index) get(h uint64) (off uint64, ok bool) {
	d := x.d.Load()
	if d == nil {
		return 0, false
	}
	sh := maphash.Comparable(d.seed, h)
	t := d.table(sh)
	i, ok := t.find(h, sh)
	if !ok {
		return 0, false
	}
	return t.slots[i].off - 1, true
}

// set holds off for h and returns the offset it replaces, if any.
func (x *index) set(h, off uint64) (old uint64, had bool) {
	d := x.d.Load()
	if d == nil {
		d = &directory{tables: make([]atomic.Pointer[slotTable], 1), seed: maphash.MakeSeed()}
		d.tables[0].Store(x.newTable(0))
		x.d.Store(d)
	}
	sh := maphash.Comparable(d.seed, h)
	t := d.table(sh)
	i, had := t.find(h, sh)
	if had {
		old = t.slots[i].off - 1
		t.slots[i].off = off + 1
		return old, true
	}
	for 4*(t.n+1) > 3*tableSlots { // once, unless a split left t's entries all in sh's half
		t = x.split(x.d.Load(), t, sh)
		i, _ = t.find(h, sh)
	}
	t.slots[i] = slot{h, off + 1}
	t.n++
	return 0, false
}

// split makes room in t, the table of seeded hash sh in directory d, and
// returns the table that now holds sh's entries: t splits into two, by
// the bit of the seeded hash after its depth, the directory doubling
// first if t has only one entry in it. Where t is as deep as entries can
// be told apart (seeded hashes that share 54 top bits: beyond belief),
// split fails loudly rather than loop.
func (x *index) split(d *directory, t *slotTable, sh uint64) *slotTable {
	if t.depth >= 64-tableBits {
		panic("store: the index cannot tell its hashes apart")
	}
	first := sh >> (64 - t.depth) << (d.depth - t.depth) // t's first entry in d
	if t.depth == d.depth {
		deeper := &directory{tables: make([]atomic.Pointer[slotTable], 2*len(d.tables)), depth: d.depth + 1, seed: d.seed}
		for j := range d.tables {
			deeper.tables[2*j].Store(d.tables[j].Load())
			deeper.tables[2*j+1].Store(d.tables[j].Load())
		}
		x.d.Store(deeper)
		d, first = deeper, 2*first
	}
	halves := [2]*slotTable{x.newTable(t.depth + 1), x.newTable(t.depth + 1)}
	for _, s := range &t.slots {
		if s.off != 0 {
			ssh := maphash.Comparable(d.seed, s.h)
			halves[ssh>>(63-t.depth)&1].add(s, ssh)
		}
	}
	half := uint64(1) << (d.depth - t.depth - 1) // entries of each half
	for j := range 2 * half {
		d.tables[first+j].Store(halves[j/half])
	}
	x.pool.Put(t)
	return halves[sh>>(63-t.depth)&1]
}

// del removes h and reports whether it was held. The slots after it that
// probed past it move back, so that every entry stays reachable from its
// home slot without crossing an empty one.
func (x *index) del(h uint64) bool {
	d := x.d.Load()
	if d == nil {
		return false
	}
	sh := maphash.Comparable(d.seed, h)
	t := d.table(sh)
	i, ok := t.find(h, sh)
	if !ok {
		return false
	}
	const m = tableMask
	for j := (i + 1) & m; t.slots[j].off != 0; j = (j + 1) & m {
		// The entry at j may fill the gap at i if its home is not in
		// the cyclic range (i, j]: it probed from at or before i.
		if k := home(maphash.Comparable(d.seed, t.slots[j].h)); (j-k)&m >= (j-i)&m {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
	return true
}

// reset drops every entry and gives the tables' memory back.
func (x *index) reset() {
	x.d.Store(nil)
	x.pool.Release()
}

// bytes is the memory the index's tables take.
func (x *index) bytes() int64 { return x.pool.Bytes() }

// prefetchSlot asks the CPU to start loading the slot where a lookup of h
// begins, without waiting for it. It takes no lock: the directory and
// table it reads may be replaced meanwhile, the table reused by a split
// or its memory given back by reset, and then the hint is only wasted. It
// reads nothing of the table: the slot's address is worked out without
// the load a nil check would make (unsafe.Add), and a prefetch never
// faults.
func (x *index) prefetchSlot(h uint64) {
	if d := x.d.Load(); d != nil {
		sh := maphash.Comparable(d.seed, h)
		prefetch.Lines(slotAt(unsafe.Pointer(d.table(sh)), home(sh)), 1)
	}
}

// slotAt is the address of slot i of table t, worked out from t's
// address alone: it reads nothing.
func slotAt(t unsafe.Pointer, i uint64) unsafe.Pointer {
	return unsafe.Add(t, uint64(unsafe.Offsetof(slotTable{}.slots))+i*uint64(unsafe.Sizeof(slot{})))
}

// newTable returns an empty table depth bits deep.
func (x *index) newTable(depth uint) *slotTable {
	t := x.pool.Get()
	t.depth = depth
	return t
}
