package policy

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// allNames is every policy, MIN included.
var allNames = []string{"app", "order", "lru", "fifo", "lfu", "minio", "min"}

// build returns a fresh policy; MIN is built from trace's reads.
func build(t testing.TB, name string, trace []Access) Policy {
	t.Helper()
	if name == "min" {
		return NewMIN(Reads(trace))
	}
	p, err := New(name, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustTrace(t testing.TB, text string) []Access {
	t.Helper()
	tr, err := ReadTrace(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Expected figures below were derived by hand. In the notes, t<n> is the n-th
// read (from 1), p<n> MIN's trace position (from 0), an APP key is written
// (score, freq, last tick) with d the default score, an LFU key (freq, last)
// and a MIN key next-use position (∞: never read again). Sets list residents
// in eviction order, victim first. None of these traces publishes an order
// (no epoch event), and OrderAware without an order decides as APP: its
// figures are APP's. Cases with orders are in order_test.go.
var replayCases = []struct {
	name     string
	capacity int64
	trace    string
	hits     map[string]int64
	// optional; checked for the policies they name
	rejected  map[string]int64
	evictions map[string]int64
}{
	{
		// Unit sizes, capacity 2, a loop over 3 items.
		// LRU, FIFO: every read evicts the item read next: 0 hits.
		// LFU: all counts stay 1, so it evicts the oldest like LRU: 0.
		// APP, no scores: t3 3(d,1,3) evicts 1(d,1,1); t4 1 comes back with
		//   ghost freq 2 (d,2,4), evicts 2(d,1,2); t5 2(d,2,5) evicts 3(d,1,3);
		//   t6 3(d,2,6) evicts 1(d,2,4); ... the newcomer always outranks the
		//   oldest resident: 0 hits (flat scores degenerate to LFU-with-ghosts).
		// MinIO keeps {1,2}: hits t4 t5 t7 t8 = 4; 3 rejected three times.
		// MIN: next p0→3 p1→4 p2→5 p3→6 p4→7 p5→8 p6,p7,p8→∞.
		//   p2 3(5) vs top 2(4): 4 < 5, bypass. p3 hit 1→6, p4 hit 2→7,
		//   p5 3(8) vs top 2(7): bypass. p6, p7 hit. p8 3(∞): bypass.
		//   Hits 4, rejected 3, no eviction.
		name:     "loop",
		capacity: 2,
		trace:    "r 1 1\nr 2 1\nr 3 1\nr 1 1\nr 2 1\nr 3 1\nr 1 1\nr 2 1\nr 3 1\n",
		hits:     map[string]int64{"app": 0, "order": 0, "lru": 0, "fifo": 0, "lfu": 0, "minio": 4, "min": 4},
		rejected: map[string]int64{"app": 0, "order": 0, "lru": 0, "minio": 3, "min": 3},
		evictions: map[string]int64{"app": 7, "order": 7, "lru": 7, "fifo": 7, "lfu": 7,
			"minio": 0, "min": 0},
	},
	{
		// APP refuses to evict more important residents, then a SetScore
		// re-keys resident 1 so that it becomes the victim.
		// Reads: 1 2 3 1 3 2 3 3 1, capacity 2, unit sizes.
		// APP: scores 1=4, 2=4, 3=1.
		//   t1 admit 1(4,1,1); t2 admit 2(4,1,2);
		//   t3 3(1,1,3): top 1(4,1,1) is more important: rejected;
		//   t4 hit 1 → (4,2,4); t5 3(1,2,5) rejected; t6 hit 2 → (4,2,6);
		//   "s 1 0.5" re-keys 1 → (0.5,2,4), now the top;
		//   t7 3(1,3,7) evicts 1, admitted: {3(1,3,7), 2(4,2,6)};
		//   t8 hit 3 → (1,4,8); t9 1(0.5,3,9) vs top 3(1,4,8): rejected.
		//   Hits t4 t6 t8 = 3; admitted 3, rejected 3, 1 eviction.
		// LRU: t3 evicts 1 {2,3}; t4 evicts 2 {3,1}; t5 hit {1,3}; t6 evicts 1
		//   {3,2}; t7 hit {2,3}; t8 hit; t9 evicts 2. Hits 3, 4 evictions.
		// FIFO: [2,3] after t3; t4 evicts 2 [3,1]; t5 hit; t6 evicts 3 [1,2];
		//   t7 evicts 1 [2,3]; t8 hit; t9 evicts 2. Hits 2, 5 evictions.
		// LFU: t3 evicts 1 {2(1,2),3(1,3)}; t4 evicts 2 {3(1,3),1(1,4)};
		//   t5 hit 3(2,5); t6 evicts 1 {2(1,6),3(2,5)}; t7, t8 hit 3;
		//   t9 evicts 2. Hits 3.
		// MinIO {1,2}: hits t4 t6 t9 = 3.
		// MIN: 1 2 3 1 3 2 3 3 1, next p0→3 p1→5 p2→4 p3→8 p4→6 p5→∞ p6→7
		//   p7→∞ p8→∞. p2 3(4) evicts 2(5): {1:3, 3:4}; p3 hit 1→8, p4 hit
		//   3→6; p5 2(∞) vs top 1(8): bypass; p6, p7, p8 hit. Hits 5.
		name:     "app refuses then rekeys",
		capacity: 2,
		trace: `s 1 4
s 2 4
s 3 1
r 1 1
r 2 1
r 3 1   # rejected by APP
r 1 1
r 3 1   # rejected by APP
r 2 1
s 1 0.5 # 1 is now the least important resident
r 3 1   # evicts 1
r 3 1
r 1 1   # rejected by APP
`,
		hits:      map[string]int64{"app": 3, "order": 3, "lru": 3, "fifo": 2, "lfu": 3, "minio": 3, "min": 5},
		rejected:  map[string]int64{"app": 3, "order": 3, "lru": 0, "min": 1},
		evictions: map[string]int64{"app": 1, "order": 1, "lru": 4, "fifo": 5, "min": 1},
	},
	{
		// Variable sizes, capacity 10. Reads (id:size): 1:6 2:4 3:5 1:6 2:4
		// 3:5 2:4.
		// LRU: t2 full {1,2}; t3 evicts 1 (free 6) {2,3} used 9; t4 1 needs 6
		//   of 1 free: evicts 2 (free 5) and 3 (free 10) {1}; t5 {1,2} used
		//   10; t6 evicts 1 {2,3}; t7 hit 2. Hits 1; evictions 1+2+1 = 4.
		// FIFO, LFU (all counts 1 when evicting) and APP (no scores; each
		//   newcomer outranks the oldest, as in "loop") evict in the same
		//   order: hits 1.
		// MinIO keeps {1,2} (used 10): 3 is rejected twice; hits t4 t5 t7 = 3.
		// MIN: next p0→3 p1→4 p2→5 p3→∞ p4→6 p5→∞ p6→∞. p2 3(5) vs top 2(4):
		//   bypass; p3 hit 1→∞; p4 hit 2→6; p5 3(∞) vs top 1(∞): bypass; p6
		//   hit. Hits 3, rejected 2.
		name:      "variable sizes",
		capacity:  10,
		trace:     "r 1 6\nr 2 4\nr 3 5\nr 1 6\nr 2 4\nr 3 5\nr 2 4\n",
		hits:      map[string]int64{"app": 1, "order": 1, "lru": 1, "fifo": 1, "lfu": 1, "minio": 3, "min": 3},
		rejected:  map[string]int64{"app": 0, "order": 0, "lru": 0, "minio": 2, "min": 2},
		evictions: map[string]int64{"app": 4, "order": 4, "lru": 4, "fifo": 4, "lfu": 4, "minio": 0, "min": 0},
	},
	{
		// An item larger than the whole cache (9:5 in 4 bytes) is refused by
		// every policy before anything is evicted (Budget is Bounded), so
		// 1 and 2 stay and hit: 2 hits, 1 rejected, no eviction, for all.
		name:      "larger than the cache",
		capacity:  4,
		trace:     "r 1 2\nr 2 2\nr 9 5\nr 1 2\nr 2 2\n",
		hits:      map[string]int64{"app": 2, "order": 2, "lru": 2, "fifo": 2, "lfu": 2, "minio": 2, "min": 2},
		rejected:  map[string]int64{"app": 1, "order": 1, "lru": 1, "fifo": 1, "lfu": 1, "minio": 1, "min": 1},
		evictions: map[string]int64{"app": 0, "order": 0, "lru": 0, "fifo": 0, "lfu": 0, "minio": 0, "min": 0},
	},
	{
		// Important hot set {1,2} (score 4) against a scan of unimportant
		// items 3, 4, 5 (score 1). Reads: 1 2 3 1 4 2 5 1 2, capacity 2.
		// APP admits 1 and 2 and rejects 3, 4, 5: hits t4 t6 t8 t9 = 4.
		// LRU: each read evicts the item read two steps later: 0 hits; FIFO
		//   likewise (it never hits, so it orders as LRU); LFU: all counts 1,
		//   same order: 0.
		// MinIO {1,2}: 4 hits. MIN: 3, 4, 5 are never read again: bypassed;
		//   4 hits.
		name:     "importance beats recency",
		capacity: 2,
		trace:    "s 1 4\ns 2 4\ns 3 1\ns 4 1\ns 5 1\nr 1 1\nr 2 1\nr 3 1\nr 1 1\nr 4 1\nr 2 1\nr 5 1\nr 1 1\nr 2 1\n",
		hits:     map[string]int64{"app": 4, "order": 4, "lru": 0, "fifo": 0, "lfu": 0, "minio": 4, "min": 4},
		rejected: map[string]int64{"app": 3, "order": 3, "min": 3},
	},
	{
		// Never-scored ids take the running mean of the score table.
		// Reads: 1 2 3 4 1 4, capacity 2.
		// APP: after "s 1 2" the default is 2. t1 1(2,1,1); t2 2 unscored
		//   (2,1,2). "s 3 5": mean (2+5)/2 = 3.5. t3 3(5,1,3) evicts 1:
		//   {2(2,1,2), 3(5,1,3)}; t4 4 unscored (3.5,1,4) evicts 2:
		//   {4(3.5,1,4), 3(5,1,3)}; t5 1(2,2,5) < top 4: rejected; t6 hit 4.
		//   Hits 1, rejected 1. (With a minimum default, 4 would have been
		//   rejected at t4 and t6 would miss.)
		// LRU: {1,2}, t3 evicts 1, t4 evicts 2 {3,4}, t5 evicts 3, t6 hit.
		//   FIFO and LFU evict in the same order. MinIO {1,2}: t5 hits.
		//   All 1.
		// MIN: next p0→4 p1→∞ p2→∞ p3→5 p4→∞ p5→∞. p2 3(∞): bypass; p3 4(5)
		//   evicts 2(∞): {1:4, 4:5}; p4, p5 hit: 2.
		name:     "default is the running mean",
		capacity: 2,
		trace:    "s 1 2\nr 1 1\nr 2 1\ns 3 5\nr 3 1\nr 4 1\nr 1 1\nr 4 1\n",
		hits:     map[string]int64{"app": 1, "order": 1, "lru": 1, "fifo": 1, "lfu": 1, "minio": 1, "min": 2},
		rejected: map[string]int64{"app": 1, "order": 1, "min": 1},
	},
	{
		// LFU keeps the frequent item where LRU drops it. Capacity 2, reads
		// 1 1 1 2 3 1: LRU: t4 {1,2}, t5 evicts 1 {2,3}, t6 misses: hits 2.
		// FIFO: t5 evicts 1 (oldest admitted): hits 2. LFU: 1 has count 3,
		// t5 evicts 2(1,4): t6 hits: 3. APP: 1 has freq 3, t5 3(d,1,5)
		// evicts 2(d,1,4): 3. MinIO {1,2}: t2 t3 t6: 3. MIN: 3 is never read
		// again: bypass, 3.
		name:     "frequency",
		capacity: 2,
		trace:    "r 1 1\nr 1 1\nr 1 1\nr 2 1\nr 3 1\nr 1 1\n",
		hits:     map[string]int64{"app": 3, "order": 3, "lru": 2, "fifo": 2, "lfu": 3, "minio": 3, "min": 3},
	},
}

func TestReplayHandChecked(t *testing.T) {
	for _, c := range replayCases {
		tr := mustTrace(t, c.trace)
		for _, name := range allNames {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				p := build(t, name, tr)
				r := Replay(p, tr, c.capacity)
				want, ok := c.hits[name]
				if !ok {
					t.Fatalf("case has no expected hits for %s", name)
				}
				if r.Hits != want {
					t.Errorf("hits = %d, want %d (%+v)", r.Hits, want, r)
				}
				if w, ok := c.rejected[name]; ok && r.Rejected != w {
					t.Errorf("rejected = %d, want %d (%+v)", r.Rejected, w, r)
				}
				if w, ok := c.evictions[name]; ok && r.Evictions != w {
					t.Errorf("evictions = %d, want %d (%+v)", r.Evictions, w, r)
				}
				if r.Hits+r.Admitted+r.Rejected != r.Reads {
					t.Errorf("hits+admitted+rejected != reads: %+v", r)
				}
				if r.Policy != name || r.Capacity != c.capacity {
					t.Errorf("result names %q/%d", r.Policy, r.Capacity)
				}
				if m, ok := p.(*MIN); ok && m.Err() != nil {
					t.Errorf("MIN diverged: %v", m.Err())
				}
			})
		}
	}
}

func TestMinIONeverEvicts(t *testing.T) {
	tr := randomTrace(7, 5000, 200, true, true)
	for _, capacity := range []int64{0, 100, 1000, 5000} {
		r := Replay(NewMinIO(), tr, capacity)
		if r.Evictions != 0 {
			t.Errorf("capacity %d: %d evictions", capacity, r.Evictions)
		}
	}
}

// recRoom is a Budget that records the order of evictions.
type recRoom struct {
	*Budget
	evicted []ID
}

func (r *recRoom) Evict(id ID) {
	r.evicted = append(r.evicted, id)
	r.Budget.Evict(id)
}

// miss drives one Miss through room and stores an admitted item.
func miss(p Policy, id ID, size int64, room *recRoom) bool {
	ok := p.Miss(id, size, room)
	if ok {
		room.Admit(id, size)
	}
	return ok
}

func TestAPPSetScoreRekeysResident(t *testing.T) {
	a := NewAPP(Options{})
	room := &recRoom{Budget: NewBudget(3)}
	for id := ID(1); id <= 3; id++ {
		a.SetScore(id, float64(id)) // 1 least important
		if !miss(a, id, 1, room) {
			t.Fatalf("id %d not admitted into free space", id)
		}
	}
	a.SetScore(3, 0.5) // 3 becomes the least important
	a.SetScore(1, 10)  // 1 the most
	// 4 (score 2.5) outranks 3 (0.5) and 2 (2), not 1 (10).
	a.SetScore(4, 2.5)
	if !miss(a, 4, 2, room) {
		t.Fatal("4 not admitted")
	}
	if got := room.evicted; len(got) != 2 || got[0] != 3 || got[1] != 2 {
		t.Fatalf("evicted %v, want [3 2]", got)
	}
	if !a.Resident(1) || !a.Resident(4) || a.Resident(2) || a.Resident(3) || a.Len() != 2 {
		t.Fatalf("residents wrong: len %d", a.Len())
	}
	// 5 (score 5) needs all 3 bytes: it may evict 4 (2.5) but not 1 (10),
	// so it is rejected after evicting 4, the greedy rule of the design.
	a.SetScore(5, 5)
	if miss(a, 5, 3, room) {
		t.Fatal("5 admitted over a more important resident")
	}
	if !a.Resident(1) || a.Resident(4) || room.Used() != 1 {
		t.Fatalf("after 5: resident 1 %v, 4 %v, used %d", a.Resident(1), a.Resident(4), room.Used())
	}
	// 4 comes back into free space with what its ghost kept: score 2.5 and
	// its second read.
	a.SetScore(1, 1)
	if !miss(a, 4, 2, room) || room.Used() != 3 {
		t.Fatalf("4 not readmitted into free space, used %d", room.Used())
	}
	if k, _ := a.heap.key(4); k.score != 2.5 || k.freq != 2 {
		t.Fatalf("4 readmitted with key %+v, want score 2.5 freq 2", k)
	}
	if !miss(a, 6, 3, room) {
		// 6 unscored: default MiddleScore ≈ 3.73 outranks 1 (1) and 4 (2.5).
		t.Fatal("6 not admitted")
	}
	if a.Len() != 1 || !a.Resident(6) || a.Ghosts() != 5 { // the five ids not resident
		t.Fatalf("len %d, ghosts %d", a.Len(), a.Ghosts())
	}
}

func TestAPPHitRekeys(t *testing.T) {
	a := NewAPP(Options{DefaultScore: 1})
	room := &recRoom{Budget: NewBudget(2)}
	miss(a, 1, 1, room)
	miss(a, 2, 1, room)
	a.Hit(1) // 1: freq 2; 2 is now least important
	miss(a, 3, 1, room)
	if len(room.evicted) != 1 || room.evicted[0] != 2 {
		t.Fatalf("evicted %v, want [2]", room.evicted)
	}
}

func TestAPPRemoveKeepsGhost(t *testing.T) {
	a := NewAPP(Options{})
	room := &recRoom{Budget: NewBudget(10)}
	miss(a, 1, 1, room)
	a.Hit(1)
	a.Remove(1)
	room.Evict(1)
	a.Remove(1) // no-op
	a.Remove(99)
	if a.Resident(1) || a.Len() != 0 {
		t.Fatal("1 still resident")
	}
	miss(a, 1, 1, room)
	if k, _ := a.heap.key(1); k.freq != 3 {
		t.Fatalf("freq after remove and readmit = %d, want 3", k.freq)
	}
}

// TestFrequencySurvivesEviction: a resident's reads are counted in its key
// alone; when it is evicted, or removed, its ghost entry takes them over, so
// that it comes back with all its reads counted.
func TestFrequencySurvivesEviction(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    interface {
			Policy
			Scorer
		}
	}{
		{"app", NewAPP(Options{DefaultScore: 1})},
		{"order", NewOrderAware(Options{DefaultScore: 1})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			freq := func(id ID) uint32 {
				switch p := tc.p.(type) {
				case *APP:
					k, _ := p.heap.key(id)
					return k.freq
				case *OrderAware:
					k, _ := p.heap.key(id)
					return k.imp.freq
				}
				panic("unknown policy")
			}
			room := &recRoom{Budget: NewBudget(1)}
			miss(tc.p, 1, 1, room) // read 1
			tc.p.Hit(1)            // 2
			tc.p.Hit(1)            // 3
			tc.p.SetScore(2, 5)
			if !miss(tc.p, 2, 1, room) || tc.p.Resident(1) {
				t.Fatal("2, more important, did not take 1's place")
			}
			tc.p.SetScore(1, 9)
			if !miss(tc.p, 1, 1, room) { // read 4
				t.Fatal("1, now the more important, was not admitted")
			}
			if f := freq(1); f != 4 {
				t.Fatalf("1 back after an eviction with frequency %d, want 4", f)
			}
			tc.p.Hit(1) // 5
			tc.p.Remove(1)
			room.Evict(1)
			if !miss(tc.p, 1, 1, room) { // 6
				t.Fatal("1 not admitted into an empty cache")
			}
			if f := freq(1); f != 6 {
				t.Fatalf("1 back after a removal with frequency %d, want 6", f)
			}
		})
	}
}

func TestPlainRoomFlushesForOversize(t *testing.T) {
	// Over a Room that is not Bounded a policy cannot tell an oversized item
	// before evicting: it evicts everything it may, then refuses.
	type plain struct{ Room }
	for _, name := range []string{"lru", "fifo", "lfu"} {
		p := build(t, name, nil)
		b := NewBudget(4)
		for id := ID(1); id <= 2; id++ {
			if p.Miss(id, 2, plain{b}) {
				b.Admit(id, 2)
			}
		}
		if p.Miss(9, 5, plain{b}) {
			t.Fatalf("%s admitted an item larger than the room", name)
		}
		if p.Len() != 0 || b.Used() != 0 {
			t.Fatalf("%s: len %d used %d", name, p.Len(), b.Used())
		}
	}
}

func TestNegativeSizeRefused(t *testing.T) {
	for _, name := range allNames {
		p := build(t, name, nil)
		if p.Miss(1, -1, NewBudget(10)) {
			t.Errorf("%s admitted a negative size", name)
		}
	}
}

func TestMissOfResidentIsHit(t *testing.T) {
	for _, name := range allNames {
		p := build(t, name, []Access{{ID: 1, Size: 1}, {ID: 1, Size: 1}})
		b := NewBudget(10)
		if !p.Miss(1, 1, b) {
			t.Fatalf("%s: first miss refused", name)
		}
		b.Admit(1, 1)
		if !p.Miss(1, 1, b) || p.Len() != 1 {
			t.Fatalf("%s: miss of a resident: len %d", name, p.Len())
		}
	}
}

func TestNew(t *testing.T) {
	for _, name := range Names() {
		p, err := New(name, Options{})
		if err != nil || p.Name() != name {
			t.Fatalf("New(%q) = %v, %v", name, p, err)
		}
	}
	if _, err := New("arc", Options{}); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("New(arc) error %v", err)
	}
	if _, err := New("min", Options{}); !errors.Is(err, ErrNeedsTrace) {
		t.Errorf("New(min) error %v", err)
	}
	if _, err := New("app", Options{DefaultScore: math.NaN()}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("New(app, NaN) error %v", err)
	}
	if math.Abs(MiddleScore-math.Log(10+63*0.5)) > 1e-15 {
		t.Errorf("MiddleScore %v != ln(41.5) %v", MiddleScore, math.Log(10+63*0.5))
	}
	p, _ := New("app", Options{})
	if got := p.(*APP).DefaultScore(); got != float64(float32(MiddleScore)) {
		t.Errorf("default score %v, want %v", got, MiddleScore)
	}
	p, _ = New("app", Options{DefaultScore: 2})
	if got := p.(*APP).DefaultScore(); got != 2 {
		t.Errorf("default score %v, want 2", got)
	}
}

func TestMINDivergence(t *testing.T) {
	m := NewMIN([]ID{1, 2, 1}).(*MIN)
	b := NewBudget(1)
	if !m.Miss(1, 1, b) {
		t.Fatal("1 refused")
	}
	b.Admit(1, 1)
	m.Miss(3, 1, b) // the trace says 2
	if !errors.Is(m.Err(), ErrTraceDiverged) {
		t.Fatalf("Err = %v", m.Err())
	}
	// 3 counts as never read again: it must not displace 1 (next use 2).
	if m.Resident(3) || !m.Resident(1) {
		t.Fatal("a diverging read displaced a resident")
	}
	first := m.Err()
	m.Hit(7)
	if m.Err() != first {
		t.Fatal("Err changed after the first divergence")
	}
}

func TestReplayDeterministic(t *testing.T) {
	tr := randomTrace(3, 4000, 300, true, true)
	for _, name := range allNames {
		a := Replay(build(t, name, tr), tr, 20_000)
		b := Replay(build(t, name, tr), tr, 20_000)
		if a != b {
			t.Errorf("%s: %+v then %+v", name, a, b)
		}
	}
}

func TestWorkingSetAndReads(t *testing.T) {
	tr := mustTrace(t, "r 1 10\ns 1 3\nr 2 5\nr 1 12\nr 1 4\ns 9 1\n")
	n, bytes := WorkingSet(tr)
	if n != 2 || bytes != 17 {
		t.Fatalf("WorkingSet = %d, %d; want 2, 17", n, bytes)
	}
	ids := Reads(tr)
	if len(ids) != 4 || ids[0] != 1 || ids[1] != 2 || ids[3] != 1 {
		t.Fatalf("Reads = %v", ids)
	}
}

// TestNoneAdmitsNothing: the no-cache baseline misses every read and
// never evicts.
func TestNoneAdmitsNothing(t *testing.T) {
	p, err := New("none", Options{})
	if err != nil {
		t.Fatal(err)
	}
	room := NewBudget(1 << 20)
	for i := range 100 {
		if p.Miss(ID(i%10), 1, room) || p.Resident(ID(i%10)) {
			t.Fatalf("read %d of id %d admitted", i, i%10)
		}
	}
	if p.Len() != 0 || p.Name() != "none" {
		t.Errorf("Len %d, Name %q", p.Len(), p.Name())
	}
}
