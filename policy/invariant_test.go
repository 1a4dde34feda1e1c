package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randomTrace returns n events over ids 0..ids-1: half the reads go to a hot
// tenth of the ids. Each id has a fixed size, 1..100 bytes when varSizes,
// else 1. With scores, one event in ten is a score update in SHADE's range
// [ln 10, ln 73].
func randomTrace(seed uint64, n, ids int, varSizes, scores bool) []Access {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	size := func(id ID) int64 {
		if !varSizes {
			return 1
		}
		return int64(id*2654435761%100) + 1
	}
	hot := max(ids/10, 1)
	tr := make([]Access, 0, n)
	for range n {
		var id ID
		if rng.IntN(2) == 0 {
			id = ID(rng.IntN(hot))
		} else {
			id = ID(rng.IntN(ids))
		}
		if scores && rng.IntN(10) == 0 {
			tr = append(tr, Access{ID: id, HasScore: true, Score: math.Log(10 + 63*rng.Float64())})
			continue
		}
		tr = append(tr, Access{ID: id, Size: size(id)})
	}
	return tr
}

// withEpochs returns a copy of tr with an epoch event before every per-th
// read (from the first), numbered 0, 1, ...; every third order is installed
// twice in a row, the way a re-installed order repeats its number in a
// node's trace. per <= 0 gives tr unchanged.
func withEpochs(tr []Access, per int) []Access {
	if per <= 0 {
		return tr
	}
	out := make([]Access, 0, len(tr)+len(tr)/per+1)
	reads, epoch := 0, 0
	for _, a := range tr {
		if a.IsRead() {
			if reads%per == 0 {
				out = append(out, Access{Epoch: epoch, IsEpoch: true})
				if epoch%3 == 2 {
					out = append(out, Access{Epoch: epoch, IsEpoch: true})
				}
				epoch++
			}
			reads++
		}
		out = append(out, a)
	}
	return out
}

// checkRoom is a Budget that checks what a policy asks of it.
type checkRoom struct {
	*Budget
	p    Policy
	errs []string
}

func (c *checkRoom) Evict(id ID) {
	if !c.Stored(id) {
		c.errs = append(c.errs, fmt.Sprintf("evicted %d, which is not stored", id))
	}
	if c.p.Resident(id) {
		c.errs = append(c.errs, fmt.Sprintf("evicted %d while the policy still holds it", id))
	}
	c.Budget.Evict(id)
}

func TestInvariantsRandomReplay(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		for _, varSizes := range []bool{false, true} {
			// Seeds 3 and 4 publish an order every 700 reads.
			tr := withEpochs(randomTrace(seed, 6000, 400, varSizes, true), int(seed/3)*700)
			_, ws := WorkingSet(tr)
			for _, frac := range []float64{0.02, 0.1, 0.3, 1.1} {
				capacity := int64(frac * float64(ws))
				for _, name := range allNames {
					t.Run(fmt.Sprintf("seed%d/var%v/%v/%s", seed, varSizes, frac, name), func(t *testing.T) {
						checkReplay(t, build(t, name, tr), tr, capacity)
					})
				}
			}
		}
	}
}

// checkReplay replays tr as Replay does, checking after every event that
// the Budget is within capacity and that the policy and the Budget agree on
// what is resident, and that Replay counts the same hits.
func checkReplay(t *testing.T, p Policy, tr []Access, capacity int64) {
	t.Helper()
	hits := checkedReplay(t, p, tr, capacity)
	if r := Replay(build(t, p.Name(), tr), tr, capacity); r.Hits != hits {
		t.Fatalf("Replay hits %d, checked replay %d", r.Hits, hits)
	}
}

// checkedReplay is checkReplay without the comparison with Replay; it
// returns the hits.
func checkedReplay(t *testing.T, p Policy, tr []Access, capacity int64) int64 {
	t.Helper()
	room := &checkRoom{Budget: NewBudget(capacity), p: p}
	scorer, _ := p.(Scorer)
	ahead, _ := p.(Lookahead)
	var table scoreTable
	var hits int64
	for i, a := range tr {
		if a.IsEpoch {
			if ahead != nil {
				ahead.BeginEpoch(a.Epoch, epochOrder(nil, tr[i+1:]))
			}
			continue
		}
		if a.HasScore {
			if scorer != nil {
				scorer.SetScore(a.ID, a.Score)
				if mean, ok := table.set(a.ID, a.Score); ok {
					scorer.SetDefaultScore(mean)
				}
			}
			continue
		}
		if p.Resident(a.ID) {
			hits++
			p.Hit(a.ID)
		} else if p.Miss(a.ID, a.Size, room) {
			if room.Stored(a.ID) {
				t.Fatalf("event %d: admitted %d, already stored", i, a.ID)
			}
			room.Admit(a.ID, a.Size)
		}
		if room.Used() > capacity || room.Used() < 0 {
			t.Fatalf("event %d: used %d of %d", i, room.Used(), capacity)
		}
		if p.Len() != room.Len() {
			t.Fatalf("event %d: policy holds %d, room %d", i, p.Len(), room.Len())
		}
		if p.Resident(a.ID) != room.Stored(a.ID) {
			t.Fatalf("event %d: %d resident %v, stored %v", i, a.ID, p.Resident(a.ID), room.Stored(a.ID))
		}
		if len(room.errs) > 0 {
			t.Fatalf("event %d: %v", i, room.errs)
		}
	}
	for id := range room.sizes {
		if !p.Resident(id) {
			t.Fatalf("%d stored but not resident", id)
		}
	}
	if m, ok := p.(*MIN); ok && m.Err() != nil {
		t.Fatal(m.Err())
	}
	return hits
}

// TestAPPEveryResidentEvictable fills APP's cache by a random replay, then
// reads very important new items; every earlier resident must go. An item
// admitted but missing from the heap (SHADE's bug) would stay stored and
// block them.
func TestAPPEveryResidentEvictable(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		tr := randomTrace(seed, 5000, 500, false, true)
		const capacity = 60
		a := NewAPP(Options{})
		room := &checkRoom{Budget: NewBudget(capacity), p: a}
		for _, ev := range tr {
			switch {
			case ev.HasScore:
				a.SetScore(ev.ID, ev.Score)
			case a.Resident(ev.ID):
				a.Hit(ev.ID)
			case a.Miss(ev.ID, ev.Size, room):
				room.Admit(ev.ID, ev.Size)
			}
		}
		if a.Len() != capacity {
			t.Fatalf("seed %d: cache not full: %d", seed, a.Len())
		}
		old := make([]ID, 0, capacity)
		for id := range room.sizes {
			old = append(old, id)
		}
		for i := range capacity {
			id := ID(1_000_000 + i)
			a.SetScore(id, 1e30)
			if !a.Miss(id, 1, room) {
				t.Fatalf("seed %d: important item %d refused", seed, id)
			}
			room.Admit(id, 1)
		}
		for _, id := range old {
			if a.Resident(id) || room.Stored(id) {
				t.Fatalf("seed %d: %d survived", seed, id)
			}
		}
		if len(room.errs) > 0 {
			t.Fatal(room.errs)
		}
		// One item as large as the cache evicts all of those too.
		a.SetScore(2_000_000, 1e31)
		if !a.Miss(2_000_000, capacity, room) {
			t.Fatalf("seed %d: a cache-sized important item refused", seed)
		}
		if room.Len() != 0 || a.Len() != 1 {
			t.Fatalf("seed %d: after a cache-sized item: %d stored, %d resident", seed, room.Len(), a.Len())
		}
		room.Admit(2_000_000, capacity)
	}
}

// TestMINIsUpperBound: with equal sizes Belady's MIN with bypass is optimal,
// so no online policy may beat it, the order-aware one included, whether
// orders are published (even seeds: every 400 reads) or not.
func TestMINIsUpperBound(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		tr := withEpochs(randomTrace(seed, 5000, 300, false, true), int(1-seed%2)*400)
		for _, capacity := range []int64{1, 5, 20, 60, 150} {
			best := Replay(NewMIN(Reads(tr)), tr, capacity)
			for _, name := range Names() {
				r := Replay(build(t, name, tr), tr, capacity)
				if r.Hits > best.Hits {
					t.Errorf("seed %d capacity %d: %s %d hits > MIN %d", seed, capacity, name, r.Hits, best.Hits)
				}
			}
		}
	}
}
