package policy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// get returns id's ghost entry, and whether it has one.
func (t *ghostTable) get(id ID) (ghost, bool) {
	sl := t.find(id)
	if sl == nil {
		return ghost{}, false
	}
	return sl.v, true
}

// TestGhostTableRandomOps runs random reads, departures, scores and
// admissions (an entry moving into the heap) on a ghost table and on a Go map side by side: over 100 ids
// (one table) and over 40,000, most of them remembered (tables three
// quarters full splitting, and ids leaving them, with probe runs that
// wrap past a table's end). Scores include 0, negative zero and -1, whose
// bits inverted are near the empty slot's zero.
func TestGhostTableRandomOps(t *testing.T) {
	scores := []float64{0, math.Copysign(0, -1), -1, 1, math.Inf(-1), math.MaxFloat32, 3.25}
	for _, ids := range []int{100, 40_000} {
		rng := rand.New(rand.NewPCG(2, uint64(ids)))
		g := newGhostTable()
		defer g.pool.Release()
		type entry struct {
			score float32
			freq  uint32
		}
		ref := map[ID]entry{}
		same := func(step int, id ID) {
			got, ok := g.get(id)
			want, has := ref[id]
			if ok != has || ok && (got.freq != want.freq || math.Float32bits(got.score()) != math.Float32bits(want.score)) {
				t.Fatalf("step %d: id %d's entry is %v %v (score %v), want %v %+v", step, id, ok, got, got.score(), has, want)
			}
		}
		for step := range 10 * ids {
			id := ID(rng.Uint64N(uint64(ids))) << 20 // ids apart, as a node's are
			e, has := ref[id]
			if !has {
				e.score = unscored
			}
			switch rng.IntN(6) {
			case 0:
				e.freq++
				ref[id] = e
				if got := g.touch(id); got != (ghost{^math.Float32bits(e.score), e.freq}) {
					t.Fatalf("step %d: touch(%d) = %+v, want %+v", step, id, got, e)
				}
			case 1:
				if has {
					e.freq++
					ref[id] = e
				}
				g.touchKnown(id)
			case 2:
				e.freq = rng.Uint32N(10)
				if rng.IntN(2) == 0 {
					e.score = float32(scores[rng.IntN(len(scores))])
				}
				ref[id] = e
				g.left(id, ghost{nscore: ^math.Float32bits(e.score), freq: e.freq})
			case 3:
				s := scores[rng.IntN(len(scores))]
				e.score = float32(s)
				ref[id] = e
				if got := g.setScore(id, s); got != float32(s) {
					t.Fatalf("step %d: setScore gave %v for %v", step, got, s)
				}
			default:
				delete(ref, id)
				g.admitted(id)
			}
			same(step, id)
			if g.len() != len(ref) {
				t.Fatalf("step %d: %d entries, want %d", step, g.len(), len(ref))
			}
			if ids <= 100 || step%(ids/20) == 0 {
				checkIDMap(t, &g.idMap)
			}
		}
		checkIDMap(t, &g.idMap)
		seen := 0
		g.each(func(id ID, _ ghost) {
			same(-1, id)
			seen++
		})
		if seen != len(ref) {
			t.Fatalf("each gave %d ids, want %d", seen, len(ref))
		}
		if ids > 100 && len(g.tabs) < 4 {
			t.Fatalf("%d ids in %d tables: too few to test splits", g.len(), len(g.tabs))
		}
	}
}

// TestIDMapSplitsAtLimit: a table holds its map's limit of ids and no
// more; the next id splits it.
func TestIDMapSplitsAtLimit(t *testing.T) {
	for _, limit := range []int32{halfFull, threeQuartersFull} {
		m := newIDMap[plusOne](limit)
		defer m.pool.Release()
		id := ID(0)
		for ; len(m.tabs) < 2; id++ {
			m.insert(id, 1, nil)
		}
		if id != ID(limit)+1 {
			t.Fatalf("limit %d: the table split at its id %d", limit, id)
		}
		checkIDMap(t, &m)
	}
}
