package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHitsAsHitEach: Hits of a run of reads leaves every policy as Hit
// of each in turn does. Two policies replay one trace side by side, and
// every 300 events are told of 50 reads drawn from the trace's ids
// (residents and not, one in ten a repeat of an earlier one of the run): one by Hit of each, the other by Hits
// of all (long enough that hintAhead hints in both of its steps). The
// cache holds 20,000 unit-size items, so that APP's and OrderAware's
// tables are large enough to be hinted (hintSlots). Afterwards the two
// must evict in the same order. MIN is left out: it plays only the trace
// it was built from.
func TestHitsAsHitEach(t *testing.T) {
	const ids, capacity = 60_000, 20_000
	for seed := uint64(1); seed <= 2; seed++ {
		tr := withEpochs(randomTrace(seed, 100_000, ids, false, true), int(seed/2)*30_000)
		for _, name := range allNames {
			if name == "min" {
				continue
			}
			t.Run(fmt.Sprintf("seed%d/%s", seed, name), func(t *testing.T) {
				one, batched := build(t, name, tr), build(t, name, tr)
				roomOne, roomBatched := NewBudget(capacity), NewBudget(capacity)
				rng := rand.New(rand.NewPCG(seed, 3))
				run := make([]ID, 50)
				for i := range tr {
					step(one, roomOne, tr, i)
					step(batched, roomBatched, tr, i)
					if i%300 == 299 {
						for k := range run {
							run[k] = ID(rng.IntN(ids))
							if k%10 == 9 {
								run[k] = run[k-5] // read twice in one run
							}
							one.Hit(run[k])
						}
						Hits(batched, run)
					}
				}
				if slots := tableSize(batched); slots > 0 && slots < hintSlots {
					t.Fatalf("a table of %d slots, under the %d from which hits are hinted", slots, hintSlots)
				}
				held := one.Len()
				a, b := evictAll(one, roomOne), evictAll(batched, roomBatched)
				if len(a) != held && name != "minio" {
					t.Fatalf("evicted %d of %d residents", len(a), held)
				}
				if !slices.Equal(a, b) {
					t.Fatalf("evicted in different orders:\n%v\n%v", a, b)
				}
			})
		}
	}
}

// tableSize is the size of the table of residents of APP and OrderAware,
// 0 for the other policies.
func tableSize(p Policy) int {
	switch p := p.(type) {
	case *APP:
		return p.heap.ids.slotCount()
	case *OrderAware:
		return p.heap.ids.slotCount()
	}
	return 0
}

// step applies event i of tr to p over room, as Replay does.
func step(p Policy, room *Budget, tr []Access, i int) {
	switch a := tr[i]; {
	case a.IsRead() && p.Resident(a.ID):
		p.Hit(a.ID)
	case a.IsEpoch:
		if ahead, ok := p.(Lookahead); ok {
			ahead.BeginEpoch(a.Epoch, epochOrder(nil, tr[i+1:]))
		}
	case a.HasScore:
		if s, ok := p.(Scorer); ok {
			s.SetScore(a.ID, a.Score)
		}
	case p.Miss(a.ID, a.Size, room):
		room.Admit(a.ID, a.Size)
	}
}

// evictAll admits new ids of the whole capacity's size, each more
// important than any resident, until every resident of p is gone, and
// returns the residents evicted, in order (MinIO, which never evicts,
// evicts none).
func evictAll(p Policy, room *Budget) []ID {
	const fresh = 1 << 30 // ids above the trace's
	rec := &recRoom{Budget: room}
	var out []ID
	for id := ID(fresh); len(out) < p.Len() && id < fresh+1000; id++ {
		if s, ok := p.(Scorer); ok {
			s.SetScore(id, 100)
		}
		miss(p, id, room.capacity, rec)
		for _, e := range rec.evicted {
			if e < fresh {
				out = append(out, e)
			}
		}
		rec.evicted = rec.evicted[:0]
	}
	return out
}
