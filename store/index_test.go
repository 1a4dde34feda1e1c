package store

import (
	"hash/maphash"
	"iter"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// heldOff returns the block offset the index holds for hash h (0 if none).
func heldOff(s *Store, h uint64) uint64 {
	off, _ := s.shard(h).m.get(h)
	return off
}

// TestIndexAgainstMap runs random sets and deletions on an index and on a
// Go map side by side and checks after each that both hold the same: the
// same answer to every get, the same count. The index places hashes by a
// seeded hash of its own, so runs come from load alone: from a few dozen
// to a few thousand hashes kept in tables up to three quarters full,
// through splits, make long probe runs, runs that wrap past a
// table's end, and deletions inside them (a deletion that ignores the
// wrap fails this test).
func TestIndexAgainstMap(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		var x index
		defer x.reset()
		model := map[uint64]uint64{}
		hashes := make([]uint64, 50+r.IntN(4000))
		for i := range hashes {
			hashes[i] = r.Uint64()
		}
		hashes[0] = 0 // a hash may be 0
		for op := range 20000 {
			h := hashes[r.IntN(len(hashes))]
			if r.IntN(3) == 0 {
				_, want := model[h]
				if got := x.del(h); got != want {
					t.Fatalf("seed %d op %d: del(%#x) = %v, want %v", seed, op, h, got, want)
				}
				delete(model, h)
			} else {
				off := uint64(r.IntN(1 << 20)) // 0 included: a block at the arena's start
				old, had := x.set(h, off)
				if wantOld, wantHad := model[h]; had != wantHad || old != wantOld {
					t.Fatalf("seed %d op %d: set(%#x) replaced %d, %v; want %d, %v", seed, op, h, old, had, wantOld, wantHad)
				}
				model[h] = off
			}
			if n := entries(&x); n != len(model) {
				t.Fatalf("seed %d op %d: %d entries, want %d", seed, op, n, len(model))
			}
			if op%997 == 0 || op > 19900 {
				for _, h := range hashes {
					off, ok := x.get(h)
					if want, wantOK := model[h]; ok != wantOK || off != want {
						t.Fatalf("seed %d op %d: get(%#x) = %d, %v; want %d, %v", seed, op, h, off, ok, want, wantOK)
					}
				}
			}
			if op%97 == 0 {
				checkIndex(t, &x)
			}
		}
	}
}

// TestIndexResetAndPrefetch: a reset index is empty and usable again,
// prefetchSlot on an empty or reset index does nothing, and the slot it
// hints is the slot a lookup reads.
func TestIndexResetAndPrefetch(t *testing.T) {
	var spread uint64 = 0x9e3779b97f4a7c15
	var x index
	defer x.reset()
	x.prefetchSlot(42)
	for i := range uint64(100) {
		x.set(i*spread, i)
	}
	x.prefetchSlot(3 * spread)
	for tab := range tablesOf(x.d.Load()) {
		for _, i := range []uint64{0, 1, tableMask} {
			if got, want := slotAt(unsafe.Pointer(tab), i), unsafe.Pointer(&tab.slots[i]); got != want {
				t.Fatalf("slotAt(table, %d) = %p, want %p", i, got, want)
			}
		}
	}
	x.reset()
	x.prefetchSlot(42)
	if _, ok := x.get(5 * spread); ok || entries(&x) != 0 {
		t.Fatal("a reset index holds an entry")
	}
	if _, had := x.set(7, 9); had {
		t.Fatal("set after reset replaced an entry")
	}
	if off, ok := x.get(7); !ok || off != 9 {
		t.Fatalf("get after reset = %d, %v", off, ok)
	}
}

// TestIndexCraftedHashesSpread: hashes that share their top 20 bits, as
// keys chosen to meet in one place of an index placed by the hash alone
// would, still spread over the tables (its seeded hash), so no lookup
// walks a long run: the farthest entry from its first slot is a few
// dozen slots away at most, where placed by those bits all 4,096 would
// lie in one run.
func TestIndexCraftedHashesSpread(t *testing.T) {
	var x index
	defer x.reset()
	for i := range uint64(4096) {
		x.set(0xabcde<<44|i, i)
	}
	d := x.d.Load()
	farthest := uint64(0)
	for tab := range tablesOf(d) {
		for i, s := range tab.slots {
			if s.off != 0 {
				farthest = max(farthest, (uint64(i)-home(maphash.Comparable(d.seed, s.h)))&tableMask)
			}
		}
	}
	if farthest > 200 {
		t.Fatalf("an entry lies %d slots from its first", farthest)
	}
	t.Logf("4,096 entries in %d tables: the farthest %d slots from its first", len(slices.Collect(tablesOf(d))), farthest)
}

// TestIndexGrowsByTable fills an index with 200,000 hashes, checking its
// shape as it goes (checkIndex): a set that grows the index splits one
// table, and the directory sends every hash to the table that holds it.
// Each split reuses the table the one before left: the tables' memory is
// those in use and one more.
func TestIndexGrowsByTable(t *testing.T) {
	var x index
	defer x.reset()
	r := rand.New(rand.NewPCG(3, 3))
	for i := range 200_000 {
		x.set(r.Uint64(), uint64(i))
		if i%10_007 == 0 {
			checkIndex(t, &x)
		}
	}
	checkIndex(t, &x)
	d := x.d.Load()
	n := len(slices.Collect(tablesOf(d)))
	if n < 200_000/tableSlots {
		t.Fatalf("200,000 entries in %d tables", n)
	}
	if got, most := x.bytes(), int64(n+1)*int64(unsafe.Sizeof(slotTable{})); got > most {
		t.Fatalf("%d tables in use take %d bytes, want at most %d", n, got, most)
	}
}

// TestIndexPrefetchWhileGrowing hints lookups without the lock, as
// PrefetchIndex does, while a writer holding it fills the index through
// table growths, splits and directory doublings: under the race detector
// the hints race with none of it, and every entry set is found after.
func TestIndexPrefetchWhileGrowing(t *testing.T) {
	var (
		x    index
		mu   sync.Mutex
		done atomic.Bool
	)
	defer x.reset()
	const n = 50_000
	go func() {
		defer done.Store(true)
		for i := range uint64(n) {
			mu.Lock()
			x.set(i*0x9e3779b97f4a7c15, i)
			mu.Unlock()
		}
	}()
	for i := uint64(0); !done.Load(); i++ {
		x.prefetchSlot(i % n * 0x9e3779b97f4a7c15)
	}
	mu.Lock()
	defer mu.Unlock()
	checkIndex(t, &x)
	for i := range uint64(n) {
		if off, ok := x.get(i * 0x9e3779b97f4a7c15); !ok || off != i {
			t.Fatalf("entry %d: %d, %v", i, off, ok)
		}
	}
}

// tablesOf yields each table of d once, in directory order.
func tablesOf(d *directory) iter.Seq[*slotTable] {
	return func(yield func(*slotTable) bool) {
		for j := 0; d != nil && j < len(d.tables); {
			tab := d.tables[j].Load()
			if !yield(tab) {
				return
			}
			j += 1 << (d.depth - tab.depth)
		}
	}
}

// checkIndex fails t unless x's directory and tables agree: each table
// of depth k fills the 1 << (depth-k) entries of the directory, from a
// multiple of that, that share its entries' top k seeded bits; it is at
// most three quarters full, and counts its entries right.
func checkIndex(t *testing.T, x *index) {
	t.Helper()
	d := x.d.Load()
	if d == nil {
		return
	}
	if len(d.tables) != 1<<d.depth {
		t.Fatalf("a directory of depth %d has %d entries", d.depth, len(d.tables))
	}
	for j := 0; j < len(d.tables); {
		tab := d.tables[j].Load()
		span := 1 << (d.depth - tab.depth)
		if tab.depth > d.depth || j%span != 0 {
			t.Fatalf("a table of depth %d at entry %d of a directory of depth %d", tab.depth, j, d.depth)
		}
		for k := j; k < j+span; k++ {
			if d.tables[k].Load() != tab {
				t.Fatalf("entry %d of %d's table's %d points elsewhere", k, j, span)
			}
		}
		if 4*tab.n > 3*tableSlots {
			t.Fatalf("a table of %d slots holds %d", tableSlots, tab.n)
		}
		used := 0
		for _, s := range tab.slots {
			if s.off == 0 {
				continue
			}
			used++
			if sh := maphash.Comparable(d.seed, s.h); sh>>(64-d.depth) < uint64(j) || sh>>(64-d.depth) >= uint64(j+span) {
				t.Fatalf("hash %#x is in the table of entries %d-%d", s.h, j, j+span-1)
			}
		}
		if used != tab.n {
			t.Fatalf("a table counts %d entries, holds %d", tab.n, used)
		}
		j += span
	}
}

// entries is the number of entries x's tables count.
func entries(x *index) int {
	n := 0
	for tab := range tablesOf(x.d.Load()) {
		n += tab.n
	}
	return n
}
