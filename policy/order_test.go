package policy

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Hand-checked replays of traces that publish orders. Notation as for
// replayCases; an OrderAware key is written [next place, APP key] with ∞ for
// never read again in the current order. Places count from 0 in each
// order. Only the policies named in hits are run.
var orderCases = []struct {
	name      string
	capacity  int64
	trace     string
	hits      map[string]int64
	rejected  map[string]int64
	evictions map[string]int64
}{
	{
		// Unit sizes, capacity 2, one order: 1 2 3 1 2 3, places 1@0,3
		// 2@1,4 3@2,5.
		// order: t1 1 [3,(d,1,1)], t2 2 [4,(d,1,2)]; t3 3 [5,(d,1,3)]: the
		//   best victim 2 is read at 4, before 3: bypass, rejected. t4 hit 1
		//   → [∞,(d,2,4)], t5 hit 2 → [∞,(d,2,5)]. t6 3 [∞,(d,2,6)]: 1 and
		//   2 are never read again and less important (older): evict 1,
		//   admit 3. Hits 2, rejected 1, 1 eviction.
		// APP ("loop" in replayCases): each newcomer evicts the item read
		//   next: 0 hits, 4 evictions. LRU: 0.
		// MIN: p2 3(5) vs 2(4): bypass; p3, p4 hit; p5 3(∞) vs ∞: bypass.
		//   Hits 2, rejected 2, no eviction.
		name:      "bypass in the order",
		capacity:  2,
		trace:     "e 0\nr 1 1\nr 2 1\nr 3 1\nr 1 1\nr 2 1\nr 3 1\n",
		hits:      map[string]int64{"order": 2, "app": 0, "lru": 0, "min": 2},
		rejected:  map[string]int64{"order": 1, "app": 0, "min": 2},
		evictions: map[string]int64{"order": 1, "app": 4, "min": 0},
	},
	{
		// The next read beats importance. Capacity 1; scores 1=5, 2=1;
		// order 1 2 2 2 1, places 1@0,4 2@1,2,3.
		// order: t1 1 [4,(5,1,1)]; t2 2 [2,(1,1,2)]: 1 is read later (4):
		//   evict it, admit 2. t3 hit 2 → [3,..], t4 hit 2 → [∞,(1,3,4)].
		//   t5 1 [∞,(5,2,5)]: 2 is never read again and less important:
		//   evict, admit 1. Hits 2, 2 evictions, none rejected.
		// APP: 2 (score 1) never displaces 1 (score 5): t2 t3 t4 rejected,
		//   t5 hits. Hits 1, rejected 3.
		// MIN: p1 2(2) evicts 1(4); p2, p3 hit; p4 1(∞) vs 2(∞): bypass.
		//   Hits 2, rejected 1, 1 eviction.
		name:      "next read beats importance",
		capacity:  1,
		trace:     "s 1 5\ns 2 1\ne 0\nr 1 1\nr 2 1\nr 2 1\nr 2 1\nr 1 1\n",
		hits:      map[string]int64{"order": 2, "app": 1, "min": 2},
		rejected:  map[string]int64{"order": 0, "app": 3, "min": 1},
		evictions: map[string]int64{"order": 2, "app": 0, "min": 1},
	},
	{
		// APP's gate between items never read again. Capacity 1; scores
		// 1=5, 2=1; orders [2 1], then [1 2].
		// order: t1 2 [∞,(1,1,1)]; t2 1 [∞,(5,1,2)]: more important than 2,
		//   evict 2, admit 1. "e 1": 1 is re-keyed to [0,..]. t3 hit 1 →
		//   [∞,(5,2,3)]. t4 2 [∞,(1,2,4)]: 1 is more important: rejected.
		//   Hits 1, 1 eviction, rejected 1.
		// APP decides the same. MIN: reads 2 1 1 2, p0→3 p1→2 p2,p3→∞;
		//   p1 1(2) evicts 2(3), p2 hits, p3 2(∞) vs 1(∞): bypass. Same.
		// LRU: t2 evicts 2, t3 hits, t4 evicts 1: hits 1, 2 evictions.
		name:      "importance decides among the never read again",
		capacity:  1,
		trace:     "s 1 5\ns 2 1\ne 0\nr 2 1\nr 1 1\ne 1\nr 1 1\nr 2 1\n",
		hits:      map[string]int64{"order": 1, "app": 1, "min": 1, "lru": 1},
		rejected:  map[string]int64{"order": 1, "app": 1, "min": 1, "lru": 0},
		evictions: map[string]int64{"order": 1, "app": 1, "min": 1, "lru": 2},
	},
	{
		// A new order re-keys residents. Capacity 2; scores 1=5, 2=5, 3=1;
		// orders [1 2], then [3 2 3].
		// order: t1 1, t2 2 admitted into free space, both [∞,..]. "e 1":
		//   1 stays [∞,(5,1,1)], 2 becomes [1,(5,1,2)]. t3 3 [2,(1,1,3)]:
		//   1 is never read again: evicted although more important; 3
		//   admitted. t4 hit 2, t5 hit 3. Hits 2, 1 eviction.
		// APP: 3 (score 1) never displaces 1 or 2: t3 t5 rejected, t4 hits.
		//   Hits 1.
		// MIN: reads 1 2 3 2 3, p0→∞ p1→3 p2→4; p2 3(4) evicts 1(∞); p3, p4
		//   hit: 2. LRU: t3 evicts 1, then 2 hits: 2.
		name:      "an order re-keys residents",
		capacity:  2,
		trace:     "s 1 5\ns 2 5\ns 3 1\ne 0\nr 1 1\nr 2 1\ne 1\nr 3 1\nr 2 1\nr 3 1\n",
		hits:      map[string]int64{"order": 2, "app": 1, "min": 2, "lru": 2},
		rejected:  map[string]int64{"order": 0, "app": 2, "min": 0},
		evictions: map[string]int64{"order": 1, "app": 0, "min": 1},
	},
	{
		// An order installed again under the same epoch number replaces
		// the first. Capacity 1, no scores; orders [1], then [2 1].
		// order: t1 1 [∞,(d,1,1)]. The second "e 1" re-keys 1 to [1,..].
		//   t2 2 [∞,(d,1,2)]: 1 is read first: rejected. t3 hits 1: 1 hit.
		//   (Had the first order stayed, 1 would be [∞,(d,1,1)], older than
		//   2: evicted at t2, and t3 would miss.)
		// APP: t2 2 (d,1,2) evicts 1 (d,1,1); t3 1 (d,2,3) evicts 2: 0.
		// MIN: reads 1 2 1: p1 2(∞) bypassed, p2 hits: 1.
		name:     "re-installed order",
		capacity: 1,
		trace:    "e 1\nr 1 1\ne 1\nr 2 1\nr 1 1\n",
		hits:     map[string]int64{"order": 1, "app": 0, "min": 1},
		rejected: map[string]int64{"order": 1, "app": 0, "min": 1},
	},
	{
		// Variable sizes: like MIN, the greedy loop may evict and then find
		// that the item still does not fit. Capacity 10, no scores; order
		// (id:size) 1:5 2:5 3:8 1:5 3:8 2:5, places 1@0,3 2@1,5 3@2,4.
		// order: t1 1 [3,..], t2 2 [5,..]: used 10. t3 3 [4,(d,1,3)]: evict
		//   2 (read at 5, after 4): free 5 of 8; the next victim 1 is read
		//   at 3, before 3: stop, rejected. t4 hit 1 → [∞,(d,2,4)]. t5 3
		//   [∞,(d,2,5)]: 1 is never read again and older: evict, free 10,
		//   admit 3. t6 2 [∞,(d,2,6)]: free 2: evict 3 [∞,(d,2,5)], admit.
		//   Hits 1, rejected 1, 3 evictions.
		// MIN: p0→3 p1→5 p2→4 p3,p4,p5→∞. p2 evicts 2(5), then 1(3) < 4:
		//   rejected. p3 hits. p4 3(∞) vs 1(∞): bypass. p5 2 fits in the 5
		//   free bytes. Hits 1, rejected 2, 1 eviction.
		// APP: t3 3(d,1,3) evicts 1 and 2; t4 1(d,2,4) evicts 3; t5 3(d,2,5)
		//   evicts 1; t6 2(d,2,6) evicts 3. Hits 0, 5 evictions.
		name:      "variable sizes",
		capacity:  10,
		trace:     "e 0\nr 1 5\nr 2 5\nr 3 8\nr 1 5\nr 3 8\nr 2 5\n",
		hits:      map[string]int64{"order": 1, "app": 0, "min": 1},
		rejected:  map[string]int64{"order": 1, "app": 0, "min": 2},
		evictions: map[string]int64{"order": 3, "app": 5, "min": 1},
	},
}

func TestOrderAwareHandChecked(t *testing.T) {
	for _, c := range orderCases {
		tr := mustTrace(t, c.trace)
		for name, want := range c.hits {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				p := build(t, name, tr)
				r := Replay(p, tr, c.capacity)
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
			})
		}
	}
}

// nextOf returns the next-read place of a resident of o.
func nextOf(t *testing.T, o *OrderAware, id ID) int64 {
	t.Helper()
	k, ok := o.heap.key(id)
	if !ok {
		t.Fatalf("%d not resident", id)
	}
	return k.next
}

// TestOrderAwareResync drives reads that do not follow the published order:
// each read consumes its id's earliest unconsumed place, whatever its turn.
func TestOrderAwareResync(t *testing.T) {
	o := NewOrderAware(Options{})
	room := &recRoom{Budget: NewBudget(10)}
	if o.Epoch() != -1 {
		t.Fatalf("epoch before any order %d", o.Epoch())
	}
	order := []ID{1, 2, 3, 1, 2, 1}
	o.BeginEpoch(4, order)
	order[0], order[3] = 7, 7 // the caller's slice is its own again
	if o.Epoch() != 4 {
		t.Fatalf("epoch %d", o.Epoch())
	}
	miss(o, 2, 1, room) // out of turn: consumes place 1, next 4
	miss(o, 1, 1, room) // consumes place 0, next 3
	miss(o, 9, 1, room) // not in the order: never
	for id, want := range map[ID]int64{2: 4, 1: 3, 9: never} {
		if got := nextOf(t, o, id); got != want {
			t.Errorf("after the first reads, %d next %d, want %d", id, got, want)
		}
	}
	o.Hit(1) // place 3, next 5
	o.Hit(1) // place 5, next never
	o.Hit(1) // beyond the order: never
	o.Hit(2) // place 4: never
	if got := nextOf(t, o, 1); got != never {
		t.Errorf("1 next %d after its last place", got)
	}
	if got := nextOf(t, o, 2); got != never {
		t.Errorf("2 next %d after its last place", got)
	}
	o.BeginEpoch(5, []ID{9, 2, 9})
	for id, want := range map[ID]int64{9: 0, 2: 1, 1: never} {
		if got := nextOf(t, o, id); got != want {
			t.Errorf("in the new order, %d next %d, want %d", id, got, want)
		}
	}
	o.BeginEpoch(6, nil)
	if got := nextOf(t, o, 9); got != never {
		t.Errorf("in an empty order, 9 next %d", got)
	}
}

// TestOrderAwareAppendEpoch: the next epoch's order, published while the
// current one is read, goes behind the current one's unconsumed reads, so
// a resident read early next epoch is no longer "never read again".
func TestOrderAwareAppendEpoch(t *testing.T) {
	o := NewOrderAware(Options{})
	room := &recRoom{Budget: NewBudget(10)}
	o.BeginEpoch(4, []ID{1, 2, 3, 1})
	miss(o, 1, 1, room) // place 0, next 3
	miss(o, 2, 1, room) // place 1, next never
	miss(o, 5, 1, room) // not in the order
	if got := nextOf(t, o, 2); got != never {
		t.Fatalf("2 next %d before the next order", got)
	}
	next := []ID{2, 4, 1}
	o.AppendEpoch(5, next)
	next[0] = 9 // the caller's slice is its own again
	if o.Epoch() != 5 {
		t.Fatalf("epoch %d", o.Epoch())
	}
	// The order is now 3 1 | 2 4 1.
	for id, want := range map[ID]int64{1: 1, 2: 2, 5: never} {
		if got := nextOf(t, o, id); got != want {
			t.Errorf("after the append, %d next %d, want %d", id, got, want)
		}
	}
	o.Hit(1) // place 1, next 4
	if got := nextOf(t, o, 1); got != 4 {
		t.Errorf("1 next %d after its read, want 4", got)
	}
	o.Hit(1) // place 4: never
	if got := nextOf(t, o, 1); got != never {
		t.Errorf("1 next %d after its last read", got)
	}
}

// TestOrderAwareAppendDropsOrdersOver: an order appended to one that was
// itself appended drops what was left of the order before that one (its
// epoch is over), and keeps the rest of the current one.
func TestOrderAwareAppendDropsOrdersOver(t *testing.T) {
	o := NewOrderAware(Options{})
	room := &recRoom{Budget: NewBudget(10)}
	o.BeginEpoch(0, []ID{1, 7, 2, 7})
	miss(o, 1, 1, room)
	miss(o, 7, 1, room) // place 1, next 3
	o.AppendEpoch(1, []ID{4, 5})
	// Epoch 0's 2 and 7 are left, then epoch 1's reads: 2 7 | 4 5.
	if got, want := o.unconsumed(0, 0), []ID{2, 7, 4, 5}; !slices.Equal(got, want) || nextOf(t, o, 7) != 1 {
		t.Fatalf("after the first append: order %v, 7 next %d; want %v, 1", got, nextOf(t, o, 7), want)
	}
	o.Hit(4)
	// Epoch 0 is over: its 2 and 7 will not be read. Epoch 1's 5 will.
	o.AppendEpoch(2, []ID{6, 7})
	if got, want := o.unconsumed(0, 0), []ID{5, 6, 7}; !slices.Equal(got, want) || nextOf(t, o, 7) != 2 {
		t.Fatalf("after the second append: order %v, 7 next %d; want %v, 2", got, nextOf(t, o, 7), want)
	}
	// A merge beside other jobs keeps all that is left, and so does the
	// append after it.
	o.MergeEpoch(3, []ID{8}, 0, 1)
	o.AppendEpoch(4, []ID{9})
	if got, want := o.unconsumed(0, 0), []ID{5, 8, 6, 7, 9}; !slices.Equal(got, want) {
		t.Fatalf("after a merge and an append: order %v, want %v", got, want)
	}
}

// TestOrderAwareBeforeAnyOrderIsAPP: without an order every next read is
// never, and OrderAware decides exactly as APP.
func TestOrderAwareBeforeAnyOrderIsAPP(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		tr := randomTrace(seed, 5000, 300, seed%2 == 0, true)
		_, ws := WorkingSet(tr)
		for _, frac := range []float64{0.01, 0.05, 0.2} {
			capacity := int64(frac * float64(ws))
			a := Replay(NewAPP(Options{}), tr, capacity)
			o := Replay(NewOrderAware(Options{}), tr, capacity)
			a.Policy, o.Policy = "", ""
			if a != o {
				t.Errorf("seed %d, %v: app %+v, order %+v", seed, frac, a, o)
			}
		}
	}
}

// TestOrderAwareOneOrderIsMIN: with equal sizes and one order that holds
// every read, OrderAware keeps exactly MIN's items read again (it differs
// only in which dead items it holds), so it counts MIN's hits.
func TestOrderAwareOneOrderIsMIN(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		tr := withEpochs(randomTrace(seed, 4000, 300, false, true), 1<<30)
		for _, capacity := range []int64{1, 7, 30, 100} {
			o := Replay(NewOrderAware(Options{}), tr, capacity)
			m := Replay(NewMIN(Reads(tr)), tr, capacity)
			if o.Hits != m.Hits {
				t.Errorf("seed %d capacity %d: order %d hits, MIN %d", seed, capacity, o.Hits, m.Hits)
			}
		}
	}
}

// misinformed is an OrderAware given a wrong order: the true one shuffled,
// with some reads dropped and unknown ids added.
type misinformed struct {
	*OrderAware
	rng *rand.Rand
}

func (m misinformed) BeginEpoch(epoch int, reads []ID) {
	wrong := slices.Clone(reads)
	m.rng.Shuffle(len(wrong), func(i, j int) { wrong[i], wrong[j] = wrong[j], wrong[i] })
	wrong = wrong[:len(wrong)*3/4]
	for range len(reads) / 10 {
		wrong = append(wrong, ID(1_000_000+m.rng.IntN(100)))
	}
	m.OrderAware.BeginEpoch(epoch, wrong)
}

// TestOrderAwareWrongOrder: reads that diverge from the published order
// must not break the room's accounting or the policy's bookkeeping.
func TestOrderAwareWrongOrder(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		tr := withEpochs(randomTrace(seed, 5000, 400, true, true), 600)
		_, ws := WorkingSet(tr)
		for _, frac := range []float64{0.02, 0.1, 0.3} {
			t.Run(fmt.Sprintf("seed%d/%v", seed, frac), func(t *testing.T) {
				p := misinformed{NewOrderAware(Options{}), rand.New(rand.NewPCG(seed, 1))}
				checkedReplay(t, p, tr, int64(frac*float64(ws)))
			})
		}
	}
}

// TestReplayPassesOrders: a Lookahead policy gets, at each epoch event, the
// ids of the reads up to the next epoch event.
func TestReplayPassesOrders(t *testing.T) {
	tr := mustTrace(t, "r 5 1\ne 0\nr 1 1\ns 1 2\nr 2 1\ne 0\ne 1\nr 3 1\nr 1 1\ne 2\n")
	rec := &orderRecorder{Policy: NewLRU()}
	if r := Replay(rec, tr, 10); r.Reads != 5 {
		t.Fatalf("reads %d", r.Reads)
	}
	want := []string{"0:[1 2]", "0:[]", "1:[3 1]", "2:[]"}
	if !slices.Equal(rec.got, want) {
		t.Fatalf("orders %q, want %q", rec.got, want)
	}
}

type orderRecorder struct {
	Policy
	got []string
}

func (r *orderRecorder) BeginEpoch(epoch int, reads []ID) {
	r.got = append(r.got, fmt.Sprintf("%d:%v", epoch, reads))
}

func (r *orderRecorder) AppendEpoch(epoch int, reads []ID) {
	r.got = append(r.got, fmt.Sprintf("+%d:%v", epoch, reads))
}

func (r *orderRecorder) MergeEpoch(epoch int, reads []ID, start, others int) {
	r.got = append(r.got, fmt.Sprintf("~%d:%v start %d others %d", epoch, reads, start, others))
}

// Hand-checked merges: current is installed by BeginEpoch, taken is read,
// then reads are merged with start and others; want is the order the
// policy then holds (its unconsumed places). Steps are written id@step.
var mergeCases = []struct {
	name          string
	current       []ID
	taken         []ID
	reads         []ID
	start, others int
	want          []ID
}{
	{
		// a@0 b@.5 c@1 d@1.5, x@0 y@1; a before x, c before y.
		name: "two others", current: ids("abcd"), reads: ids("xy"), others: 2,
		want: ids("axbcyd"),
	},
	{
		// a@0 b@.5 c@1 d@1.5, x@1 y@2.
		name: "two others, start 1", current: ids("abcd"), reads: ids("xy"), start: 1, others: 2,
		want: ids("abcxdy"),
	},
	{
		// a@0 b@1 c@2 d@3, x@0 y@1.
		name: "one other", current: ids("abcd"), reads: ids("xy"), others: 1,
		want: ids("axbycd"),
	},
	{
		// k counts the unconsumed places only: as "two others".
		name: "taken places do not count", current: ids("zazbcd"), taken: ids("zz"), reads: ids("xy"), others: 2,
		want: ids("axbcyd"),
	},
	{
		// The same id in both: a@0 b@1 a@2, a@0 x@1.
		name: "an id in both", current: ids("aba"), reads: ids("ax"), others: 1,
		want: ids("aabxa"),
	},
	{
		// x@5 comes after every place.
		name: "start past the current order", current: ids("abcd"), reads: ids("xy"), start: 5, others: 1,
		want: ids("abcdxy"),
	},
	{
		// a@0 b@.1 c@.2 d@.3, x@0 y@1.
		name: "more others than places", current: ids("abcd"), reads: ids("xy"), others: 10,
		want: ids("axbcdy"),
	},
	{
		name: "huge others", current: ids("abcd"), reads: ids("xy"), others: math.MaxInt,
		want: ids("axbcdy"),
	},
	{
		name: "huge start and others", current: ids("abcd"), reads: ids("xy"), start: math.MaxInt, others: math.MaxInt,
		want: ids("abcdxy"),
	},
	{
		name: "nothing left", current: ids("ab"), taken: ids("ba"), reads: ids("xy"), others: 2,
		want: ids("xy"),
	},
	{
		name: "no reads", current: ids("abcd"), start: 3, others: 2,
		want: ids("abcd"),
	},
	{
		name: "no others, start 0: BeginEpoch", current: ids("abcd"), reads: ids("xy"),
		want: ids("xy"),
	},
	{
		name: "no others, start 2: AppendEpoch", current: ids("abcd"), reads: ids("xy"), start: 2,
		want: ids("abcdxy"),
	},
	{
		name: "negative start and others: BeginEpoch", current: ids("abcd"), reads: ids("xy"), start: -3, others: -1,
		want: ids("xy"),
	},
	{
		name: "negative others: AppendEpoch", current: ids("abcd"), reads: ids("xy"), start: 2, others: -1,
		want: ids("abcdxy"),
	},
	{
		name: "negative start: start 0", current: ids("abcd"), reads: ids("xy"), start: -1, others: 2,
		want: ids("axbcyd"),
	},
}

// ids returns one id per letter of s: the letter's code.
func ids(s string) []ID {
	out := make([]ID, len(s))
	for i := range len(s) {
		out[i] = ID(s[i])
	}
	return out
}

// letters is the inverse of ids.
func letters(ids []ID) string {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return string(b)
}

func TestOrderAwareMergeEpoch(t *testing.T) {
	for _, c := range mergeCases {
		t.Run(c.name, func(t *testing.T) {
			o := NewOrderAware(Options{})
			o.BeginEpoch(0, c.current)
			for _, id := range c.taken {
				o.Hit(id)
			}
			reads := slices.Clone(c.reads)
			o.MergeEpoch(1, reads, c.start, c.others)
			clear(reads) // the caller's slice is its own again
			if got := o.unconsumed(0, 0); !slices.Equal(got, c.want) {
				t.Errorf("order %s, want %s", letters(got), letters(c.want))
			}
			if o.Epoch() != 1 {
				t.Errorf("epoch %d", o.Epoch())
			}
		})
	}
}

// TestOrderAwareMergeEvicts: after a merge a newcomer is weighed against
// the residents by their places in the merged order, as Belady's MIN with
// bypass would on it. Capacity 2, unit sizes, no scores. Order y a n a n d:
// y and a are read and admitted, leaving n a n d (n@0 a@.5 n@1 d@1.5 for
// two others), then this job's order [y] is installed and n is read.
func TestOrderAwareMergeEvicts(t *testing.T) {
	y, a, n, d := ID('y'), ID('a'), ID('n'), ID('d')
	cases := []struct {
		name          string
		start, others int
		order         []ID // the order installed, by hand
		admitted      bool
		evicted       []ID
		belady        bool // order begins with the read of n: MIN decides the same
	}{
		// n next 3, y 1, a 2: both are read before n is again: bypass.
		{"two others", 0, 2, []ID{n, y, a, n, d}, false, nil, true},
		// n next 2, a 1, y 4: y goes.
		{"appended", 1, 0, []ID{n, a, n, d, y}, true, []ID{y}, true},
		// n and a never read again, y at 0: a, older than n, goes.
		{"replaced", 0, 0, []ID{y}, true, []ID{a}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := NewOrderAware(Options{})
			room := &recRoom{Budget: NewBudget(2)}
			o.BeginEpoch(0, []ID{y, a, n, a, n, d})
			miss(o, y, 1, room)
			miss(o, a, 1, room)
			o.MergeEpoch(1, []ID{y}, c.start, c.others)
			if got := o.unconsumed(0, 0); !slices.Equal(got, c.order) {
				t.Fatalf("order %s, want %s", letters(got), letters(c.order))
			}
			if ok := miss(o, n, 1, room); ok != c.admitted || !slices.Equal(room.evicted, c.evicted) {
				t.Errorf("n admitted %v, evicted %s; want %v, %s", ok, letters(room.evicted), c.admitted, letters(c.evicted))
			}
			if !c.belady {
				return
			}
			m := NewMIN(append([]ID{y, a}, c.order...))
			mroom := &recRoom{Budget: NewBudget(2)}
			miss(m, y, 1, mroom)
			miss(m, a, 1, mroom)
			if ok := miss(m, n, 1, mroom); ok != c.admitted || !slices.Equal(mroom.evicted, c.evicted) {
				t.Errorf("MIN: n admitted %v, evicted %s; want %v, %s", ok, letters(mroom.evicted), c.admitted, letters(c.evicted))
			}
		})
	}
}

// TestOrderAwareMergeWithoutOthers: with others <= 0, MergeEpoch is
// AppendEpoch for start > 0 and BeginEpoch otherwise, down to the order
// held and every later decision.
func TestOrderAwareMergeWithoutOthers(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		for _, others := range []int{0, -1} {
			for _, start := range []int{-2, 0, 1, 7} {
				t.Run(fmt.Sprintf("seed%d/others%d/start%d", seed, others, start), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(seed, 2))
					read := func() []ID {
						s := make([]ID, rng.IntN(300))
						for i := range s {
							s[i] = ID(rng.IntN(40))
						}
						return s
					}
					before, next, after := read(), read(), read()
					var logs [2][]string
					for k, merge := range []bool{true, false} {
						o := NewOrderAware(Options{})
						room := &recRoom{Budget: NewBudget(12)}
						o.BeginEpoch(0, before)
						for _, id := range before[:len(before)/2] {
							o.SetScore(id, float64(id%7))
							miss(o, id, 1, room)
						}
						switch {
						case merge:
							o.MergeEpoch(1, next, start, others)
						case start > 0:
							o.AppendEpoch(1, next)
						default:
							o.BeginEpoch(1, next)
						}
						logs[k] = append(logs[k], fmt.Sprint(o.Epoch(), o.unconsumed(0, 0)))
						for _, id := range after {
							room.evicted = room.evicted[:0]
							ok := miss(o, id, 1, room)
							logs[k] = append(logs[k], fmt.Sprint(id, ok, room.evicted))
						}
					}
					if !slices.Equal(logs[0], logs[1]) {
						t.Errorf("MergeEpoch %q\nother     %q", logs[0], logs[1])
					}
				})
			}
		}
	}
}

// merging is an OrderAware whose every order, with a quarter more reads of
// random ids 0..299 that the trace may not make, is merged, with start and
// others drawn at random, -1 to 3, into what is left of the one before. It
// keeps that order the slow way (model, whose first fresh places are what
// was left of the orders before the newest appended) and checks the
// policy's against it before and after each merge, and every resident's
// key after.
type merging struct {
	*OrderAware
	t     *testing.T
	rng   *rand.Rand
	model []ID
	fresh int
}

func (m *merging) BeginEpoch(epoch int, reads []ID) {
	m.t.Helper()
	if got := m.unconsumed(0, 0); !slices.Equal(got, m.model) {
		m.t.Fatalf("epoch %d: order %v, model %v", epoch, got, m.model)
	}
	reads = slices.Clone(reads)
	for range len(reads) / 4 {
		reads = append(reads, ID(m.rng.IntN(300)))
	}
	start, others := m.rng.IntN(5)-1, m.rng.IntN(5)-1
	m.MergeEpoch(epoch, reads, start, others)
	m.model, m.fresh = mergeBySort(m.model, m.fresh, reads, start, others)
	if got := m.unconsumed(0, 0); !slices.Equal(got, m.model) {
		m.t.Fatalf("epoch %d, start %d, others %d: order %v, model %v", epoch, start, others, got, m.model)
	}
	m.heap.each(func(id ID, k orderKey) {
		want := int64(slices.Index(m.model, id))
		if want < 0 {
			want = never
		}
		if k.next != want {
			m.t.Fatalf("epoch %d: %d next %d, want %d", epoch, id, k.next, want)
		}
	})
}

func (m *merging) consume(id ID) {
	if i := slices.Index(m.model, id); i >= 0 {
		m.model = slices.Delete(m.model, i, i+1)
		if i < m.fresh {
			m.fresh--
		}
	}
}

func (m *merging) Hit(id ID) {
	m.consume(id)
	m.OrderAware.Hit(id)
}

func (m *merging) Miss(id ID, size int64, room Room) bool {
	m.consume(id)
	return m.OrderAware.Miss(id, size, room)
}

// mergeBySort is MergeEpoch's order by its definition, and where the newest
// order appended begins in it: left's places and reads sorted by step,
// stably, left first on equal steps; without others, reads alone, or
// appended to left's places from fresh on.
func mergeBySort(left []ID, fresh int, reads []ID, start, others int) ([]ID, int) {
	start, others = max(start, 0), max(others, 0)
	if others == 0 {
		if start == 0 {
			return slices.Clone(reads), 0
		}
		left = left[fresh:]
		return append(slices.Clone(left), reads...), len(left)
	}
	type stepped struct {
		at   int // step times others
		read bool
		id   ID
	}
	all := make([]stepped, 0, len(left)+len(reads))
	for k, id := range left {
		all = append(all, stepped{k, false, id})
	}
	for i, id := range reads {
		all = append(all, stepped{others * (start + i), true, id})
	}
	slices.SortStableFunc(all, func(a, b stepped) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		switch {
		case a.read == b.read:
			return 0
		case a.read:
			return 1
		}
		return -1
	})
	out := make([]ID, len(all))
	for i, s := range all {
		out[i] = s.id
	}
	return out, 0
}

// TestOrderAwareMergeInvariants replays random traces whose every order
// is merged (see merging): the room's accounting holds, the order and
// keys follow the model, and with unit sizes MIN is not beaten.
func TestOrderAwareMergeInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		for _, varSizes := range []bool{false, true} {
			tr := withEpochs(randomTrace(seed, 5000, 300, varSizes, true), 150+int(seed)*150)
			_, ws := WorkingSet(tr)
			for _, frac := range []float64{0.02, 0.1, 0.3} {
				t.Run(fmt.Sprintf("seed%d/var%v/%v", seed, varSizes, frac), func(t *testing.T) {
					capacity := int64(frac * float64(ws))
					p := &merging{OrderAware: NewOrderAware(Options{}), t: t, rng: rand.New(rand.NewPCG(seed, 3))}
					hits := checkedReplay(t, p, tr, capacity)
					if best := Replay(NewMIN(Reads(tr)), tr, capacity).Hits; !varSizes && hits > best {
						t.Errorf("%d hits > MIN %d", hits, best)
					}
				})
			}
		}
	}
}
