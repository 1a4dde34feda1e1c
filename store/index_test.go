package store

import (
	"math/rand/v2"
	"testing"
)

// heldOff returns the block offset the index holds for hash h (0 if none).
func heldOff(s *Store, h uint64) uint64 {
	off, _ := s.shard(h).m.get(h)
	return off
}

// TestIndexAgainstMap runs random sets and deletions on an index and on a
// Go map side by side and checks after each that both hold the same: the
// same answer to every get, the same count. The index places hashes by a
// seeded hash of its own, so runs come from load alone: a few hundred
// hashes kept in tables of 8 to 1,024 slots, up to three quarters full,
// through several growths, make long probe runs, runs that wrap past the
// table's end, and deletions inside them (a deletion that ignores the
// wrap fails this test).
func TestIndexAgainstMap(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		var x index
		model := map[uint64]uint64{}
		hashes := make([]uint64, 50+r.IntN(400))
		for i := range hashes {
			hashes[i] = r.Uint64()
		}
		hashes[0] = 0 // a hash may be 0
		for op := range 5000 {
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
			if x.n != len(model) {
				t.Fatalf("seed %d op %d: %d entries, want %d", seed, op, x.n, len(model))
			}
			if op%97 == 0 || op > 4900 {
				for _, h := range hashes {
					off, ok := x.get(h)
					if want, wantOK := model[h]; ok != wantOK || off != want {
						t.Fatalf("seed %d op %d: get(%#x) = %d, %v; want %d, %v", seed, op, h, off, ok, want, wantOK)
					}
				}
			}
			if tab := x.t.Load(); tab != nil && 4*x.n > 3*len(tab.slots) {
				t.Fatalf("seed %d op %d: %d of %d slots used, more than three quarters", seed, op, x.n, len(tab.slots))
			}
		}
	}
}

// TestIndexResetAndPrefetch: a reset index is empty and usable again, and
// prefetchSlot on an empty or reset index does nothing.
func TestIndexResetAndPrefetch(t *testing.T) {
	var spread uint64 = 0x9e3779b97f4a7c15
	var x index
	x.prefetchSlot(42)
	for i := range uint64(100) {
		x.set(i*spread, i)
	}
	x.prefetchSlot(3 * spread)
	x.reset()
	x.prefetchSlot(42)
	if _, ok := x.get(5 * spread); ok || x.n != 0 {
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
// keys chosen to start in one slot of an index placed by the hash alone
// would, still spread over the table (its seeded hash), so no lookup
// walks a long run: the farthest entry from its first slot is a few
// dozen slots away at most, where placed by those bits all 4,096 would
// lie in one run.
func TestIndexCraftedHashesSpread(t *testing.T) {
	var x index
	for i := range uint64(4096) {
		x.set(0xabcde<<44|i, i)
	}
	tab := x.t.Load()
	m := tab.mask()
	farthest := uint64(0)
	for i, s := range tab.slots {
		if s.off != 0 {
			farthest = max(farthest, (uint64(i)-tab.home(s.h))&m)
		}
	}
	if farthest > 200 {
		t.Fatalf("an entry lies %d slots from its first of %d", farthest, len(tab.slots))
	}
	t.Logf("4,096 entries in %d slots: the farthest %d slots from its first", len(tab.slots), farthest)
}
