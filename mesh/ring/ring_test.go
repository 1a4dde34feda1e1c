package ring

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "node-" + strconv.Itoa(i)
	}
	return out
}

func keys(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte("fashion-mnist/" + strconv.Itoa(i))
	}
	return out
}

func mustNew(t testing.TB, cfg Config, members []string) *Ring {
	t.Helper()
	r, err := New(cfg, members)
	if err != nil {
		t.Fatalf("New(%+v, %d members): %v", cfg, len(members), err)
	}
	return r
}

// checkRing asserts the invariants every ring must hold.
func checkRing(t *testing.T, r *Ring, members int) {
	t.Helper()
	cfg := r.Config()
	want := min(cfg.Replicas, members)
	total := 0
	for p := range cfg.Partitions {
		owners := r.OwnersOfPartition(p)
		if len(owners) != want {
			t.Fatalf("partition %d: %d owners %v, want %d", p, len(owners), owners, want)
		}
		if view := r.PartitionOwners(p); !slices.Equal(view, owners) {
			t.Fatalf("partition %d: PartitionOwners %v, OwnersOfPartition %v", p, view, owners)
		}
		seen := map[string]bool{}
		for _, o := range owners {
			if seen[o] {
				t.Fatalf("partition %d: duplicate owner in %v", p, owners)
			}
			if _, ok := slices.BinarySearch(r.Members(), o); !ok {
				t.Fatalf("partition %d: owner %q is not a member", p, o)
			}
			seen[o] = true
		}
	}
	for _, n := range r.Load() {
		total += n
	}
	if members > 0 && total != cfg.Partitions {
		t.Fatalf("load sums to %d, want %d", total, cfg.Partitions)
	}
}

func TestShapes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		members int
	}{
		{"defaults 10", Config{}, 10},
		{"one member", Config{}, 1},
		{"replicas > members", Config{Replicas: 5}, 3},
		{"replicas 1", Config{Replicas: 1}, 7},
		{"more members than partitions, R 3", Config{Partitions: 7, Replicas: 3}, 50},
		{"one partition", Config{Partitions: 1}, 5},
		{"load 1.0 uneven", Config{Load: 1}, 10},
		{"load 1.0 two members five partitions", Config{Partitions: 5, Load: 1}, 2},
		{"load 1.0 partitions == members", Config{Partitions: 13, Load: 1}, 13},
		{"load 1.01, 271/100", Config{Load: 1.01}, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, tc.cfg, names(tc.members))
			checkRing(t, r, tc.members)
			if got := len(r.Owners([]byte("k"))); got != min(r.Config().Replicas, tc.members) {
				t.Fatalf("Owners: %d owners", got)
			}
		})
	}
}

// TestThousandMembers: more members than partitions, where consistent
// alone panics.
func TestThousandMembers(t *testing.T) {
	m := 1000
	all := names(m)
	start := time.Now()
	r := mustNew(t, Config{Replicas: 3}, all)
	built := time.Since(start)
	checkRing(t, r, m)
	for name, n := range r.Load() {
		if n > 2 {
			t.Fatalf("%s owns %d partitions", name, n)
		}
	}
	start = time.Now()
	r2, err := r.Update(all[1:])
	if err != nil {
		t.Fatal(err)
	}
	r3, err := r2.Update(append(all[1:], "node-new"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d members: New %v, two Updates %v", m, built, time.Since(start))
	checkRing(t, r2, m-1)
	checkRing(t, r3, m)
}

// TestUpdateMatchesNew: a lineage of Updates gives exactly New's table,
// across the edit path and every rebuild trigger (many changes, the load
// factor or the internal partition count changing with M).
func TestUpdateMatchesNew(t *testing.T) {
	for _, cfg := range []Config{{}, {Replicas: 3, Load: 1}, {Partitions: 31}} {
		all := names(80)
		steps := [][]string{
			all[:20],
			all[1:20],                        // one leaves
			append(all[1:20], all[40:42]...), // two join
			all[6:20],                        // many leave: rebuild
			all[6:45],                        // cross M > P for 31 partitions
			all[:70],
			all[:69],
			{"solo"},
			nil,
			all[:3],
		}
		r := mustNew(t, cfg, all[:20])
		for i, members := range steps {
			r = updateMatchesNew(t, r, members, fmt.Sprintf("%+v step %d", cfg, i))
		}
	}
}

// updateMatchesNew returns r.Update(members), having checked that it owns
// every partition as New(members) does.
func updateMatchesNew(t *testing.T, r *Ring, members []string, step string) *Ring {
	t.Helper()
	next, err := r.Update(members)
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	want := mustNew(t, r.Config(), members)
	for p := range want.Config().Partitions {
		if !slices.Equal(next.OwnersOfPartition(p), want.OwnersOfPartition(p)) {
			t.Fatalf("%s (%d members) partition %d: Update %v, New %v", step, len(members), p,
				next.OwnersOfPartition(p), want.OwnersOfPartition(p))
		}
	}
	checkOwnerMasks(t, next, step)
	return next
}

// checkOwnerMasks checks that r.OwnerMasks gives every partition the OR
// of the bits of its owners (PartitionOwners): bits for every third
// member, some sharing a bit, and for a name that is no member.
func checkOwnerMasks(t *testing.T, r *Ring, step string) {
	t.Helper()
	bits := map[string]uint64{"not-a-member": 1 << 63}
	for i, name := range r.Members() {
		if i%3 == 0 {
			bits[name] |= 1 << (i % 5)
		}
	}
	masks := make([]uint64, r.Config().Partitions+1)
	for p := range masks {
		masks[p] = 1 << 62 // to be overwritten
	}
	r.OwnerMasks(bits, masks)
	for p := range r.Config().Partitions {
		var want uint64
		for _, name := range r.PartitionOwners(p) {
			want |= bits[name]
		}
		if masks[p] != want {
			t.Fatalf("%s: partition %d (owners %v): mask %b, want %b", step, p, r.PartitionOwners(p), masks[p], want)
		}
	}
	if masks[len(masks)-1] != 1<<62 {
		t.Fatalf("%s: OwnerMasks wrote past the partitions", step)
	}
}

// TestRandomUpdatesMatchNew: lineages of random joins and leaves (one at a
// time, several, and many), with 1 to 4 replicas, give exactly New's table
// after every step, whether the replicas' ranking was derived from the
// ring before (rankAll) or ranked afresh.
func TestRandomUpdatesMatchNew(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := names(120)
	for _, cfg := range []Config{{}, {Replicas: 1}, {Replicas: 3}, {Replicas: 4, Partitions: 61}} {
		members := slices.Clone(pool[:1+rng.IntN(30)])
		r := mustNew(t, cfg, members)
		for step := range 40 {
			changes := 1 + rng.IntN(3)
			if step%10 == 9 {
				changes = 1 + len(members)/2 // a rebuild
			}
			for range changes {
				if i := rng.IntN(len(pool)); slices.Contains(members, pool[i]) && len(members) > 1 {
					members = slices.DeleteFunc(members, func(m string) bool { return m == pool[i] })
				} else if !slices.Contains(members, pool[i]) {
					members = append(members, pool[i])
				}
			}
			r = updateMatchesNew(t, r, members, fmt.Sprintf("%+v step %d", cfg, step))
		}
	}
}

// derive must give rank's ranking of the members after a change, equal
// scores included (seeds of 16 values: many members share one).
func TestDerive(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pool := names(40)
	seedsOf := func(ms []string) []uint64 {
		out := make([]uint64, len(ms))
		for i, m := range ms {
			out[i] = uint64(len(m)+int(m[len(m)-1])) % 16
		}
		return out
	}
	derived := 0
	for trial := range 2000 {
		pick := func() []string {
			var ms []string
			for _, m := range pool {
				if rng.IntN(2) == 0 {
					ms = append(ms, m)
				}
			}
			slices.Sort(ms)
			return ms
		}
		old, now := pick(), pick()
		k := min(1+trial%4, len(old), len(now))
		if k == 0 {
			continue
		}
		seed := partitionSeed(trial)
		prev := rank(nil, seedsOf(old), seed, k)
		prevTop := make([]int32, k)
		for j, i := range prev {
			prevTop[j] = int32(i)
		}
		moved, added := remap(old, now)
		dst, sc := make([]int32, k), make([]uint64, k)
		if !derive(dst, sc, prevTop, moved, added, seedsOf(now), seed) {
			continue
		}
		derived++
		want := rank(nil, seedsOf(now), seed, k)
		for j := range want {
			if int(dst[j]) != want[j] {
				t.Fatalf("trial %d: derive %v, rank %v (old %v, now %v)", trial, dst, want, old, now)
			}
		}
	}
	if derived < 100 {
		t.Fatalf("only %d of the trials kept their top members: the test checks too little", derived)
	}
}

func TestRemap(t *testing.T) {
	moved, added := remap([]string{"a", "b", "d", "f"}, []string{"b", "c", "d", "e", "g"})
	if !slices.Equal(moved, []int32{-1, 0, 2, -1}) || !slices.Equal(added, []int{1, 3, 4}) {
		t.Fatalf("remap: moved %v, added %v", moved, added)
	}
}

// Updates on rings of one lineage may race; each result stays correct.
func TestUpdateConcurrent(t *testing.T) {
	all := names(30)
	base := mustNew(t, Config{}, all[:20])
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			members := slices.Delete(slices.Clone(all[:20+i%3]), i, i+1)
			got, err := base.Update(members)
			if err != nil {
				t.Error(err)
				return
			}
			want, _ := New(Config{}, members)
			for p := range 271 {
				if !slices.Equal(got.OwnersOfPartition(p), want.OwnersOfPartition(p)) {
					t.Errorf("update %d partition %d differs", i, p)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestEmptyRing(t *testing.T) {
	for _, members := range [][]string{nil, {}} {
		r := mustNew(t, Config{}, members)
		if o := r.Owners([]byte("x")); o != nil {
			t.Fatalf("Owners on empty ring = %v, want nil", o)
		}
		if o := r.OwnersOfPartition(0); o != nil {
			t.Fatalf("OwnersOfPartition on empty ring = %v", o)
		}
		if o := r.PartitionOwners(0); o != nil {
			t.Fatalf("PartitionOwners on empty ring = %v", o)
		}
		if len(r.Members()) != 0 || len(r.Load()) != 0 {
			t.Fatalf("empty ring has members %v load %v", r.Members(), r.Load())
		}
		checkOwnerMasks(t, r, "empty ring")
	}
}

func TestInvalid(t *testing.T) {
	for _, tc := range []struct {
		cfg     Config
		members []string
		want    error
	}{
		{Config{Partitions: -1}, nil, ErrConfig},
		{Config{Replicas: -2}, nil, ErrConfig},
		{Config{Load: 0.5}, nil, ErrConfig},
		{Config{Load: -1}, nil, ErrConfig},
		{Config{Load: 1 / zero()}, nil, ErrConfig},
		{Config{}, []string{"a", ""}, ErrMember},
	} {
		if _, err := New(tc.cfg, tc.members); !errors.Is(err, tc.want) {
			t.Errorf("New(%+v, %q) = %v, want %v", tc.cfg, tc.members, err, tc.want)
		}
	}
}

func zero() float64 { return 0 }

func TestDeterministicAndDeduplicated(t *testing.T) {
	a := mustNew(t, Config{Replicas: 3}, []string{"c", "a", "b", "a", "d"})
	b := mustNew(t, Config{Replicas: 3}, []string{"d", "b", "c", "a"})
	if !slices.Equal(a.Members(), []string{"a", "b", "c", "d"}) {
		t.Fatalf("Members = %v", a.Members())
	}
	for p := range a.Config().Partitions {
		if !slices.Equal(a.OwnersOfPartition(p), b.OwnersOfPartition(p)) {
			t.Fatalf("partition %d: %v vs %v: ring depends on input order", p,
				a.OwnersOfPartition(p), b.OwnersOfPartition(p))
		}
	}
	if o := a.OwnersOfPartition(-1); o != nil {
		t.Fatal("negative partition has owners")
	}
	if o := a.OwnersOfPartition(a.Config().Partitions); o != nil {
		t.Fatal("partition out of range has owners")
	}
	if a.PartitionOwners(-1) != nil || a.PartitionOwners(a.Config().Partitions) != nil {
		t.Fatal("PartitionOwners: a partition out of range has owners")
	}
	// Returned slices are the caller's.
	o := a.Owners([]byte("k"))
	o[0] = "mutated"
	if a.Owners([]byte("k"))[0] == "mutated" {
		t.Fatal("Owners exposes internal state")
	}
	dst := a.AppendOwners(make([]string, 0, 4), []byte("k"))
	if !slices.Equal(dst, a.Owners([]byte("k"))) {
		t.Fatalf("AppendOwners = %v, Owners = %v", dst, a.Owners([]byte("k")))
	}
}

// Names like node-1 and node-11 would share virtual points without the
// separator in member.String.
func TestVirtualNodeKeysUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range names(200) {
		m := newMember(n)
		for i := range virtualNodes {
			k := fmt.Sprintf("%s%d", m.String(), i) // consistent's formula
			if seen[k] {
				t.Fatalf("virtual node key %q repeats", k)
			}
			seen[k] = true
		}
	}
}

func TestBoundedLoad(t *testing.T) {
	for _, m := range []int{3, 10, 50, 271} {
		r := mustNew(t, Config{}, names(m))
		limit := int(float64(271)/float64(m)*DefaultLoad) + 2
		for name, n := range r.Load() {
			if n > limit {
				t.Errorf("%d members: %s owns %d partitions, bound %d", m, name, n, limit)
			}
		}
	}
}

func primaries(r *Ring, ks [][]byte) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = r.Owners(k)[0]
	}
	return out
}

// TestRebalanceFigures measures what a membership change moves. Keys are
// spread uniformly over partitions, so key fractions track partitions.
func TestRebalanceFigures(t *testing.T) {
	const n = 10
	ks := keys(20000)
	all := names(n)
	before := mustNew(t, Config{}, all)
	pBefore := primaries(before, ks)

	worstShare, worstMoved, sumShare := 0.0, 0.0, 0.0
	for dead := range n {
		survivors := slices.Delete(slices.Clone(all), dead, dead+1)
		after := mustNew(t, Config{}, survivors)

		// (a) who takes the dead member's partitions
		taken := map[string]int{}
		orphaned := 0
		for p := range before.Config().Partitions {
			if before.OwnersOfPartition(p)[0] == all[dead] {
				orphaned++
				taken[after.OwnersOfPartition(p)[0]]++
			}
		}
		maxTaken := 0
		for _, c := range taken {
			maxTaken = max(maxTaken, c)
		}
		share := float64(maxTaken) / float64(orphaned)
		worstShare = max(worstShare, share)
		sumShare += share

		// (b) keys whose primary changed
		moved := 0
		for i, o := range primaries(after, ks) {
			if o != pBefore[i] {
				moved++
			}
		}
		frac := float64(moved) / float64(len(ks))
		worstMoved = max(worstMoved, frac)
		t.Logf("leave %s: %d partitions orphaned, spread over %d survivors, max share %.0f%%; keys moved %.1f%% (1/N = %.1f%%)",
			all[dead], orphaned, len(taken), 100*share, 100*frac, 100.0/n)
		if share > 0.70 {
			t.Errorf("leave %s: one survivor takes %.0f%% of its partitions, want <= 70%%", all[dead], 100*share)
		}
		if frac >= 2.5/n {
			t.Errorf("leave %s: %.1f%% of keys changed primary, want < %.1f%%", all[dead], 100*frac, 250.0/n)
		}
	}
	// With consistent's 20 points per member the share is noisy: a departed
	// member's partitions sit in a few arcs of the circle, and a large arc
	// goes whole to its successor. The mean over every possible leaver is
	// the stable figure.
	meanShare := sumShare / n
	t.Logf("one of %d leaves: max share mean %.0f%%, worst %.0f%%; worst keys moved %.1f%%",
		n, 100*meanShare, 100*worstShare, 100*worstMoved)
	if meanShare > 0.40 {
		t.Errorf("mean max share %.0f%%, want <= 40%%", 100*meanShare)
	}

	// A member joins: ideally 1/(N+1) of keys move, all to the newcomer.
	grown := mustNew(t, Config{}, append(slices.Clone(all), "node-new"))
	moved, toNew := 0, 0
	for i, o := range primaries(grown, ks) {
		if o != pBefore[i] {
			moved++
			if o == "node-new" {
				toNew++
			}
		}
	}
	frac := float64(moved) / float64(len(ks))
	t.Logf("join of an 11th member: keys moved %.1f%% (1/N = %.1f%%), %.0f%% of them to the newcomer",
		100*frac, 100.0/(n+1), 100*float64(toNew)/float64(max(moved, 1)))
	if frac >= 2.5/(n+1) {
		t.Errorf("join: %.1f%% of keys moved, want < %.1f%%", 100*frac, 250.0/(n+1))
	}
}

// TestReplicaPlacement checks where replicas go: every partition has
// min(R, M) distinct owners, its primary (consistent's owner, Load) first;
// the table depends only on the member set; and the replicas of one
// primary's partitions lie on many members, not on one successor, with
// every member holding replicas.
func TestReplicaPlacement(t *testing.T) {
	for _, tc := range []struct{ members, replicas int }{{2, 2}, {3, 2}, {5, 3}, {10, 2}, {17, 3}, {40, 2}} {
		all := names(tc.members)
		r := mustNew(t, Config{Replicas: tc.replicas}, all)
		checkRing(t, r, tc.members)
		rev := slices.Clone(all)
		slices.Reverse(rev)
		again := mustNew(t, Config{Replicas: tc.replicas}, rev)
		load := r.Load()
		primaries := map[string]int{}
		backers := map[string]map[string]bool{} // primary -> members holding its replicas
		held := map[string]int{}                // replica partitions held, by member
		for p := range r.Config().Partitions {
			o := r.OwnersOfPartition(p)
			if !slices.Equal(o, again.OwnersOfPartition(p)) {
				t.Fatalf("%d members: partition %d: %v, from reversed names %v", tc.members, p, o, again.OwnersOfPartition(p))
			}
			primaries[o[0]]++
			if backers[o[0]] == nil {
				backers[o[0]] = map[string]bool{}
			}
			for _, s := range o[1:] {
				backers[o[0]][s] = true
				held[s]++
			}
		}
		for m, n := range primaries {
			if load[m] != n {
				t.Fatalf("%d members: %s is first owner of %d partitions, Load says %d", tc.members, m, n, load[m])
			}
		}
		// Each primary's replicas spread over at least half of the
		// members that could hold them (all others, or as many as it has
		// replica slots).
		for m, bs := range backers {
			slots := primaries[m] * (min(tc.replicas, tc.members) - 1)
			want := min(tc.members-1, slots) / 2
			if len(bs) < want {
				t.Errorf("%d members: %s's replicas lie on %d members, want >= %d", tc.members, m, len(bs), want)
			}
		}
		if len(held) != tc.members {
			t.Errorf("%d members: %d members hold replicas, want all", tc.members, len(held))
		}
		t.Logf("%d members, R=%d: replicas of node-0's %d partitions on %d members; replica partitions held per member: %v",
			tc.members, tc.replicas, primaries["node-0"], len(backers["node-0"]), held)
	}
}

// rank must give the k best scores, best first, as a full sort does.
func TestRank(t *testing.T) {
	seeds := make([]uint64, 50)
	for i := range seeds {
		seeds[i] = mix(uint64(i) * 7)
	}
	seeds[31] = seeds[12] // equal scores: the lower index first
	for p := range 200 {
		seed := partitionSeed(p)
		all := make([]int, len(seeds))
		for i := range seeds {
			all[i] = i
		}
		slices.SortStableFunc(all, func(a, b int) int {
			return cmp.Compare(mix(seed^seeds[b]), mix(seed^seeds[a]))
		})
		for _, k := range []int{0, 1, 2, 5, 9, 12, 50} {
			if got := rank(nil, seeds, seed, k); !slices.Equal(got, all[:k]) && !(k == 0 && len(got) == 0) {
				t.Fatalf("partition %d k %d: rank %v, sort %v", p, k, got, all[:k])
			}
		}
	}
}

// moves compares ring a with ring b (same Config) partition by partition:
// copies is how many (partition, owner) pairs of b are new (copies that
// change owner); taken counts those of the partitions dead held in a, by
// the survivor that receives them.
func moves(a, b *Ring, dead string) (copies int, taken map[string]int) {
	taken = map[string]int{}
	for p := range a.Config().Partitions {
		oa, ob := a.OwnersOfPartition(p), b.OwnersOfPartition(p)
		for _, o := range ob {
			if !slices.Contains(oa, o) {
				copies++
				if slices.Contains(oa, dead) {
					taken[o]++
				}
			}
		}
	}
	return copies, taken
}

// dies compares base with the ring of all but all[d] (moves): the copies
// that change owner, those of all[d]'s partitions by the survivor that
// takes them, their sum and the most one survivor takes.
func dies(t *testing.T, base *Ring, all []string, d int) (copies int, taken map[string]int, sum, most int) {
	t.Helper()
	left, err := base.Update(slices.Delete(slices.Clone(all), d, d+1))
	if err != nil {
		t.Fatal(err)
	}
	copies, taken = moves(base, left, all[d])
	for _, n := range taken {
		sum += n
		most = max(most, n)
	}
	return copies, taken, sum, most
}

// TestFailureSpread: when a member dies, its data (the copies of every
// partition it was primary or replica of) spreads over the survivors: none
// takes more than 2x the average share (the copies moved over the N-1
// survivors; at 1,000 members, where a member holds about 32 copies, a
// survivor takes at least a whole copy, so 2x of max(average, 1)). And a
// join or a leave moves, on average over the trials, at most 1.2x the
// ideal R*P/N copies. Partition counts of 27 and 16 a member (271 for 10
// members, 16381 for 1,000), where a join keeps the bounded load (Cap;
// TestCapChange covers joins that change it).
//
// The share bound holds here for these names and these dead members, and
// guards them against a change that concentrates more; at these partition
// counts it is not a property of every ring: the survivors of a dead
// member's few dozen copies are drawn by hashes, and other names, or other
// members dead, give 1.9-2.5x at 10 members and 3x at 1,000
// (test/results/scale.md, "Where a dead peer's data goes").
// TestFailureSpreadSmallMesh checks the bound for every member and four
// name formats at the partition counts the README advises.
func TestFailureSpread(t *testing.T) {
	for _, tc := range []struct{ members, partitions, trials int }{{10, 271, 10}, {1000, 16381, 12}} {
		t.Run(strconv.Itoa(tc.members), func(t *testing.T) {
			all := names(tc.members)
			cfg := Config{Partitions: tc.partitions, Replicas: 2}
			base := mustNew(t, cfg, all)
			worst := 0.0
			var leaveSum, joinSum, leaveWorst, joinWorst float64
			for i := range tc.trials {
				d := (i * 7919) % tc.members // spread over the names
				copies, taken, sum, most := dies(t, base, all, d)
				avg := float64(sum) / float64(tc.members-1)
				ratio := float64(most) / max(avg, 1)
				worst = max(worst, ratio)
				ideal := float64(2*tc.partitions) / float64(tc.members)
				leaveSum += float64(copies) / ideal
				leaveWorst = max(leaveWorst, float64(copies)/ideal)
				t.Logf("%s dies: its %d copies go to %d survivors, largest %d, average %.2f (over receivers %.2f): %.2fx; %d copies moved, %.2fx of ideal %.1f",
					all[d], sum, len(taken), most, avg, float64(sum)/float64(len(taken)), ratio, copies, float64(copies)/ideal, ideal)
				if ratio > 2 {
					t.Errorf("%s dies: a survivor takes %d of its %d copies, %.2fx the average %.2f, want <= 2x", all[d], most, sum, ratio, avg)
				}

				joined, err := base.Update(append(slices.Clone(all), "joiner-"+strconv.Itoa(i)))
				if err != nil {
					t.Fatal(err)
				}
				copies, _ = moves(base, joined, "")
				ideal = float64(2*tc.partitions) / float64(tc.members+1)
				joinSum += float64(copies) / ideal
				joinWorst = max(joinWorst, float64(copies)/ideal)
				t.Logf("joiner-%d joins: %d copies moved, %.2fx of ideal %.1f", i, copies, float64(copies)/ideal, ideal)
			}
			leave, join := leaveSum/float64(tc.trials), joinSum/float64(tc.trials)
			t.Logf("%d members, %d partitions, R=2: largest survivor share at worst %.2fx the average; copies moved on leave %.2fx of ideal (worst %.2fx), on join %.2fx (worst %.2fx)",
				tc.members, tc.partitions, worst, leave, leaveWorst, join, joinWorst)
			if leave > 1.2 || join > 1.2 {
				t.Errorf("copies moved: leave %.2fx, join %.2fx of ideal, want <= 1.2x", leave, join)
			}
		})
	}
}

// TestFailureSpreadSmallMesh: with 16,381 partitions (the README's advice
// up to 256 peers) in a mesh of up to 16 members, whichever member dies,
// and whatever the names, no survivor takes more than 2x the average share
// of its copies: measured over four name formats with every member killed
// in turn, 1.04-1.09x at 4 members, 1.32-1.36x at 10, 1.61-1.77x at 16
// (scale.md, "A dead peer's data within 2x"). With 271 (the default) the
// same runs gave up to 2.54x at 10 members and 3.89x at 16: a dead
// member's copies are then a few dozen draws over the survivors.
func TestFailureSpreadSmallMesh(t *testing.T) {
	formats := []string{"node-%d", "peer-%04d", "gpu%02d", "host-%d.cluster"}
	for _, members := range []int{4, 10, 16} {
		t.Run(strconv.Itoa(members), func(t *testing.T) {
			worst := 0.0
			for _, format := range formats {
				all := make([]string, members)
				for i := range all {
					all[i] = fmt.Sprintf(format, i)
				}
				base := mustNew(t, Config{Partitions: 16381}, all)
				for d := range all {
					_, taken, sum, most := dies(t, base, all, d)
					if len(taken) != members-1 {
						t.Errorf("%s dies: its copies go to %d survivors, want all %d", all[d], len(taken), members-1)
					}
					avg := float64(sum) / float64(members-1)
					ratio := float64(most) / avg
					worst = max(worst, ratio)
					if ratio > 2 {
						t.Errorf("%s dies: a survivor takes %d of its %d copies, %.2fx the average %.1f, want <= 2x", all[d], most, sum, ratio, avg)
					}
				}
			}
			t.Logf("%d members, 16381 partitions, R=2, %d name formats, every member dead in turn: the busiest survivor at worst %.2fx the average", members, len(formats), worst)
		})
	}
}

func BenchmarkOwners(b *testing.B) {
	for _, m := range []int{10, 100, 1000} {
		r := mustNew(b, Config{Replicas: 3}, names(m))
		key := []byte("fashion-mnist/123456")
		b.Run(fmt.Sprintf("members=%d", m), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = r.Owners(key)
			}
		})
		b.Run(fmt.Sprintf("append/members=%d", m), func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]string, 0, 4)
			for b.Loop() {
				dst = r.AppendOwners(dst[:0], key)
			}
		})
	}
}

// BenchmarkOwnerMasks: every partition's owners as the mask of one
// member (a member's test of the samples it owns) and of 4 groups of 17
// (a relay's of its groups' parts), at 1,000 members and the count
// advised for them, R=2.
func BenchmarkOwnerMasks(b *testing.B) {
	r := mustNew(b, Config{Partitions: 64513, Replicas: 2}, names(1000))
	masks := make([]uint64, r.Config().Partitions)
	one := map[string]uint64{r.Members()[0]: 1}
	groups := map[string]uint64{}
	for i, name := range r.Members()[:4*17] {
		groups[name] = 1 << (i / 17)
	}
	for _, c := range []struct {
		name string
		bits map[string]uint64
	}{{"member", one}, {"groups=4x17", groups}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				r.OwnerMasks(c.bits, masks)
			}
		})
	}
}

// BenchmarkUpdate: one member joins, then leaves, a ring of m members; at
// 1,000 members also with 16,381 partitions (16 a member) and 65,521 (about
// 64 a member, as the README advises).
func BenchmarkUpdate(b *testing.B) {
	for _, c := range []struct{ m, partitions int }{{10, 0}, {100, 0}, {1000, 0}, {1000, 16381}, {1000, 65521}} {
		m := c.m
		ms := names(m + 1)
		r := mustNew(b, Config{Partitions: c.partitions}, ms[:m])
		name := fmt.Sprintf("members=%d", m)
		if c.partitions != 0 {
			name += fmt.Sprintf("/partitions=%d", c.partitions)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// alternate one join and one leave
				var err error
				if i%2 == 0 {
					r, err = r.Update(ms)
				} else {
					r, err = r.Update(ms[:m])
				}
				if err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkNew: a ring of m members built whole, at 1,000 members also with
// the partition counts of BenchmarkUpdate.
func BenchmarkNew(b *testing.B) {
	for _, c := range []struct{ m, partitions int }{{10, 0}, {100, 0}, {1000, 0}, {1000, 16381}, {1000, 65521}} {
		ms := names(c.m)
		name := fmt.Sprintf("members=%d", c.m)
		if c.partitions != 0 {
			name += fmt.Sprintf("/partitions=%d", c.partitions)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(Config{Partitions: c.partitions}, ms); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCapChange: Cap is consistent's bound, no member owns more, and a
// membership change that changes it moves at most the ideal share plus
// about one primary for each member at the cap before the change (the
// cost of bounded loads at a cap change that the README states); one
// that keeps it moves near the ideal share.
func TestCapChange(t *testing.T) {
	for _, tc := range []struct {
		members, partitions int
		join                bool
	}{
		{16, 271, false},    // 20 -> 23: the cap rises
		{64, 1031, true},    // 20 -> 19
		{200, 3203, true},   // 20 -> 19
		{1000, 16001, true}, // 20 -> 19
		{1000, 16381, true}, // 20 -> 20
		{1000, 64007, true}, // 80 -> 79
		{1000, 65521, true}, // 82 -> 82
	} {
		all := names(tc.members + 1)
		from, to := all[:tc.members], all
		if !tc.join {
			to = all[1:tc.members]
		}
		cfg := Config{Partitions: tc.partitions}
		a, b := mustNew(t, cfg, from), mustNew(t, cfg, to)
		for _, r := range []*Ring{a, b} {
			if got, want := r.Cap(), int(r.b.c.AverageLoad()); got != want {
				t.Fatalf("%d members, %d partitions: Cap %d, consistent's bound %d", len(r.members), tc.partitions, got, want)
			}
			if got, err := CapFor(cfg, len(r.members)); err != nil || got != r.Cap() {
				t.Fatalf("%d members, %d partitions: CapFor %d, %v; Cap %d", len(r.members), tc.partitions, got, err, r.Cap())
			}
		}
		atCap := 0
		for m, n := range a.Load() {
			if n > a.Cap() {
				t.Fatalf("%s owns %d partitions over the cap %d", m, n, a.Cap())
			}
			if n == a.Cap() {
				atCap++
			}
		}
		if a.AtCap() != atCap {
			t.Fatalf("AtCap %d, %d members own Cap partitions", a.AtCap(), atCap)
		}
		moved, _ := moves(a, b, "")
		ideal := float64(2*tc.partitions) / float64(max(len(from), len(to)))
		bound := 1.2 * ideal
		if a.Cap() != b.Cap() {
			bound += 1.3 * float64(atCap)
		}
		t.Logf("%d -> %d members, %d partitions: cap %d -> %d, %d members at it; %d copies moved, ideal %.1f, bound %.1f",
			len(from), len(to), tc.partitions, a.Cap(), b.Cap(), atCap, moved, ideal, bound)
		if float64(moved) > bound {
			t.Errorf("%d -> %d members, %d partitions: %d copies moved, want <= %.1f", len(from), len(to), tc.partitions, moved, bound)
		}
	}
	if empty := mustNew(t, Config{}, nil); empty.Cap() != 0 || empty.AtCap() != 0 {
		t.Errorf("empty ring: Cap %d, AtCap %d, want 0", empty.Cap(), empty.AtCap())
	}
	// More members than partitions: consistent's count doubles to 16, each
	// member owns at most ceil(1·1.25) = 2 of them.
	if got, err := CapFor(Config{Partitions: 8}, 12); err != nil || got != 2 {
		t.Errorf("CapFor 8 partitions, 12 members = %d, %v; want 2", got, err)
	}
	if _, err := CapFor(Config{Load: 0.5}, 10); !errors.Is(err, ErrConfig) {
		t.Errorf("CapFor of load 0.5: %v, want ErrConfig", err)
	}
}

// TestAdvised: 16,381 up to 256 members; above, the smallest prime of at
// least 64.5 a member, never over 65,521, whose bounded load a join or a
// leave keeps; FewPartitions flags the default from 8 members and not the
// advised counts.
func TestAdvised(t *testing.T) {
	for _, tc := range []struct{ members, want int }{
		{0, 16381}, {3, 16381}, {256, 16381}, {257, 16603}, {300, 19373}, {999, 64439}, {1000, 64513},
		{1015, 65479}, {1016, 65521}, {5000, 65521},
	} {
		got := Advised(tc.members)
		if got != tc.want {
			t.Errorf("Advised(%d) = %d, want %d", tc.members, got, tc.want)
		}
		if !prime(got) || got > 65521 || (tc.members > 256 && tc.members < 1016 && 2*got < 129*tc.members) {
			t.Errorf("Advised(%d) = %d: not a prime of at least 64.5 a member, at most 65521", tc.members, got)
		}
		// A peer more or fewer (at 1,000, five) keeps the bounded load:
		// no such join or leave moves a partition for each member at the
		// cap.
		if tc.members > 256 && tc.members < 1016 {
			cfg := Config{Partitions: got}
			at, _ := CapFor(cfg, tc.members)
			d := max(1, tc.members/200)
			for _, m := range []int{tc.members - d, tc.members - 1, tc.members + 1, tc.members + d} {
				if c, err := CapFor(cfg, m); err != nil || c != at {
					t.Errorf("Advised(%d) = %d: Cap %d at %d members, %d (%v) at %d", tc.members, got, at, tc.members, c, err, m)
				}
			}
		}
	}
	for _, tc := range []struct {
		partitions, members int
		few                 bool
	}{
		{271, 7, false}, {271, 8, true}, {271, 100, true}, {4099, 16, false}, {4093, 16, true},
		{16381, 256, false}, {16381, 1000, false}, {16001, 1000, true}, {65521, 5000, false},
	} {
		if got := FewPartitions(tc.partitions, tc.members); got != tc.few {
			t.Errorf("FewPartitions(%d, %d) = %v, want %v", tc.partitions, tc.members, got, tc.few)
		}
	}
}
