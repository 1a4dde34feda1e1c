package sampling

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// distributedSampler is PyTorch's DistributedSampler.__iter__ with
// drop_last=False, transcribed, applied to a given permutation.
func distributedSampler(indices []uint32, world, rank int) []uint32 {
	n := len(indices)
	numSamples := (n + world - 1) / world
	totalSize := numSamples * world
	padding := totalSize - n
	idx := slices.Clone(indices)
	if padding <= n {
		idx = append(idx, indices[:padding]...)
	} else {
		reps := (padding + n - 1) / n
		var rep []uint32
		for range reps {
			rep = append(rep, indices...)
		}
		idx = append(idx, rep[:padding]...)
	}
	var out []uint32
	for i := rank; i < totalSize; i += world {
		out = append(out, idx[i])
	}
	return out
}

func TestSplit(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 5, 7, 10, 16, 17, 100, 101, 1000} {
		for _, world := range []int{1, 2, 3, 4, 7, 8, 16, 33, 1000} {
			t.Run(fmt.Sprintf("n=%d/world=%d", n, world), func(t *testing.T) {
				order := make([]uint32, n)
				for i := range order {
					order[i] = uint32(i*7919) % 100003 // distinct, not sorted
				}
				parts, err := Split(order, world)
				if err != nil {
					t.Fatal(err)
				}
				if len(parts) != world {
					t.Fatalf("%d slices", len(parts))
				}
				per := (n + world - 1) / world
				counts := map[uint32]int{}
				for r, sl := range parts {
					if len(sl) != per {
						t.Fatalf("rank %d has %d ids, want %d", r, len(sl), per)
					}
					if cap(sl) != per {
						t.Fatalf("rank %d capacity %d", r, cap(sl))
					}
					if n > 0 && !slices.Equal(sl, distributedSampler(order, world, r)) {
						t.Fatalf("rank %d differs from DistributedSampler", r)
					}
					// Disjoint positions: rank r holds padded positions r + k*world.
					for k, id := range sl {
						if id != order[(r+k*world)%n] {
							t.Fatalf("rank %d position %d", r, k)
						}
						counts[id]++
					}
				}
				// The union covers the order; padding repeats from the front.
				if n > 0 {
					total := 0
					for i, id := range order {
						want := (per*world - i + n - 1) / n // copies of position i in the padded order
						if counts[id] != want {
							t.Fatalf("id at position %d appears %d times, want %d", i, counts[id], want)
						}
						total += counts[id]
					}
					if total != per*world {
						t.Fatalf("total %d, want %d", total, per*world)
					}
				}
			})
		}
	}
	if _, err := Split([]uint32{1}, 0); !errors.Is(err, ErrBadWorld) {
		t.Fatalf("world 0: %v", err)
	}
	// Appending to one slice never writes into the next.
	sl, _ := Split([]uint32{0, 1, 2, 3}, 2)
	_ = append(sl[0], 99)
	if sl[1][0] != 1 {
		t.Fatalf("append clobbered rank 1")
	}
}

func TestUniformSliceMatchesDistributedSampler(t *testing.T) {
	for _, n := range []int{0, 1, 3, 10, 64, 1001} {
		for _, world := range []int{1, 2, 3, 8, 16} {
			for _, epoch := range []int{0, 1, 7} {
				const seed = 2024
				perm := permutation(n, seed, epoch)
				if !isPermutation(perm, n) {
					t.Fatalf("n=%d epoch %d: not a permutation", n, epoch)
				}
				split, _ := Split(perm, world)
				s := NewSampler(n, Config{Seed: seed})
				var order []uint32
				for e := 0; e <= epoch; e++ {
					order, _ = s.Order(e, nil)
				}
				fromSampler, _ := Split(order, world)
				seen := make([]int, n)
				for rank := range world {
					got := UniformSlice(n, world, rank, seed, epoch)
					if n > 0 && !slices.Equal(got, distributedSampler(perm, world, rank)) {
						t.Fatalf("n=%d world=%d rank=%d epoch=%d: differs from DistributedSampler", n, world, rank, epoch)
					}
					if !slices.Equal(got, split[rank]) || !slices.Equal(got, fromSampler[rank]) {
						t.Fatalf("n=%d world=%d rank=%d: differs from Split of the sampler's order", n, world, rank)
					}
					if len(got) != (n+world-1)/world || got == nil {
						t.Fatalf("length %d", len(got))
					}
					for _, id := range got {
						seen[id]++
					}
				}
				for id, c := range seen {
					if c == 0 {
						t.Fatalf("n=%d world=%d: sample %d on no rank", n, world, id)
					}
				}
			}
		}
	}
	if !slices.Equal(UniformSlice(100, 1, 0, 1, 0), permutation(100, 1, 0)) {
		t.Fatalf("world 1 is not the permutation")
	}
	if slices.Equal(UniformSlice(100, 1, 0, 1, 0), UniformSlice(100, 1, 0, 1, 1)) {
		t.Fatalf("epochs 0 and 1 equal")
	}
	for _, bad := range [][3]int{{-1, 1, 0}, {5, 0, 0}, {5, 2, 2}, {5, 2, -1}} {
		if got := UniformSlice(bad[0], bad[1], bad[2], 0, 0); got != nil {
			t.Fatalf("UniformSlice%v = %v, want nil", bad, got)
		}
	}
	if UniformSlice(5, 1, 0, 0, -1) != nil {
		t.Fatalf("negative epoch accepted")
	}
}

func TestLocalitySplitKeepsSlicesEqual(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ n, world int }{{10, 3}, {100, 4}, {7, 7}, {5, 8}, {1000, 3}} {
		order := make([]uint32, tc.n)
		for i := range order {
			order[i] = uint32(rng.IntN(tc.n))
		}
		nodes := []string{"a", "b", "c"}
		rankNode := make([]string, tc.world)
		for r := range rankNode {
			rankNode[r] = nodes[r%3]
		}
		byThree := Placement{Groups: 3, Group: func(id uint32) int { return int(id % 3) }, Owners: func(g int) []string { return nodes[g : g+1] }}
		slices, err := LocalitySplit(order, tc.world, rankNode, byThree)
		if err != nil {
			t.Fatal(err)
		}
		per := (tc.n + tc.world - 1) / tc.world
		count := map[uint32]int{}
		total := 0
		for _, s := range slices {
			if len(s) != per {
				t.Fatalf("n=%d world=%d: slice of %d, want %d", tc.n, tc.world, len(s), per)
			}
			for _, id := range s {
				count[id]++
				total++
			}
		}
		want := map[uint32]int{}
		for i := 0; i < per*tc.world; i++ {
			want[order[i%tc.n]]++
		}
		for id, c := range want {
			if count[id] != c {
				t.Fatalf("n=%d world=%d: id %d drawn %d times, the order has it %d", tc.n, tc.world, id, count[id], c)
			}
		}
	}
}

// TestLocalitySplitKeepsTheOrdersSequence: each slice holds its samples
// in the order's sequence, and the slices advance through the order side
// by side, whether or not the ranks' nodes own every sample: the k-th
// sample of any slice comes from about place k*world of the order.
func TestLocalitySplitKeepsTheOrdersSequence(t *testing.T) {
	const n = 3000
	order := make([]uint32, n)
	for i := range order {
		order[i] = uint32(i) // the place of each sample is its id
	}
	rng := rand.New(rand.NewPCG(5, 6))
	rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
	place := make([]int, n)
	for i, id := range order {
		place[id] = i
	}
	nodes := []string{"a", "b", "c"}
	owners := func(id uint32) []string { return []string{nodes[id%3]} }
	for _, rankNode := range [][]string{{"a"}, {"b", "c"}, {"a", "b", "c"}, {"a", "a", "b", ""}} {
		world := len(rankNode)
		slices, err := LocalitySplit(order, world, rankNode, OwnersPlacement(n, owners))
		if err != nil {
			t.Fatal(err)
		}
		for r, s := range slices {
			worst := 0
			for k := 1; k < len(s); k++ {
				if place[s[k]] < place[s[k-1]] {
					t.Fatalf("ranks %v: slice %d out of the order's sequence at %d", rankNode, r, k)
				}
				worst = max(worst, abs(place[s[k]]-k*world))
			}
			if worst > n/10 {
				t.Errorf("ranks %v: slice %d runs up to %d places off its share of the order", rankNode, r, worst)
			}
		}
	}
}

// TestLocalitySplitLeastFilledRank checks the cursor that finds the least
// filled rank, for the samples no rank on their owners may take, and the
// owners' ranks looked up once per group, against the scan over every
// rank and the owners of every sample that they replaced: the
// slices must be the same, sample for sample, over random orders, worlds,
// rank layouts (ranks on no node, several on one), owner sets, and
// groups of one sample each or shared by many, as a ring's partitions.
func TestLocalitySplitLeastFilledRank(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 300 {
		n := 1 + rng.IntN(400)
		world := 1 + rng.IntN(40)
		nodes := 1 + rng.IntN(12)
		order := make([]uint32, n)
		for i := range order {
			order[i] = uint32(rng.IntN(n))
		}
		rankNode := make([]string, world)
		for r := range rankNode {
			if rng.IntN(5) > 0 {
				rankNode[r] = fmt.Sprint("node-", rng.IntN(nodes))
			}
		}
		groups := n
		if trial%2 == 1 {
			groups = 1 + rng.IntN(20)
		}
		owners := make([][]string, groups)
		for g := range owners {
			for range rng.IntN(3) {
				owners[g] = append(owners[g], fmt.Sprint("node-", rng.IntN(nodes)))
			}
		}
		where := Placement{
			Groups: groups,
			Group:  func(id uint32) int { return int(id) % groups },
			Owners: func(g int) []string { return owners[g] },
		}
		ownersOf := func(id uint32) []string { return owners[int(id)%groups] }
		got, err := LocalitySplit(order, world, rankNode, where)
		if err != nil {
			t.Fatal(err)
		}
		want := scanSplit(order, world, rankNode, ownersOf)
		for r := range want {
			if !slices.Equal(got[r], want[r]) {
				t.Fatalf("trial %d (n %d, world %d): slice %d is %v, the scan gives %v", trial, n, world, r, got[r], want[r])
			}
		}
	}
}

// TestLocalitySplitRefusesABadPlacement: a placement without its
// functions, or one that puts a sample outside its groups, is an error,
// not a panic or a slice short of samples.
func TestLocalitySplitRefusesABadPlacement(t *testing.T) {
	order := []uint32{0, 1, 2, 3}
	owners := func(g int) []string { return []string{"a"} }
	for name, where := range map[string]Placement{
		"zero value":       {},
		"no owners":        {Groups: 2, Group: func(id uint32) int { return int(id % 2) }},
		"negative groups":  {Groups: -1, Group: func(uint32) int { return 0 }, Owners: owners},
		"group past range": {Groups: 2, Group: func(id uint32) int { return int(id) }, Owners: owners},
		"negative group":   {Groups: 2, Group: func(uint32) int { return -1 }, Owners: owners},
		"sample past n":    OwnersPlacement(3, func(uint32) []string { return []string{"a"} }),
	} {
		if _, err := LocalitySplit(order, 2, []string{"a", "b"}, where); !errors.Is(err, ErrBadPlacement) {
			t.Errorf("%s: err = %v, want ErrBadPlacement", name, err)
		}
	}
	// An order long enough that its groups are looked up by spans on
	// several goroutines, one sample out of range past the first span.
	long := identity(4 * minSpan)
	long[3*minSpan-1] = 4 * minSpan
	if _, err := LocalitySplit(long, 2, []string{"a", "b"}, OwnersPlacement(4*minSpan, func(uint32) []string { return []string{"a"} })); !errors.Is(err, ErrBadPlacement) {
		t.Errorf("a long order with a sample past n: err = %v, want ErrBadPlacement", err)
	}
}

// scanSplit is LocalitySplit as it was first written: the least filled
// rank with room found by looking at every rank, a sample's candidate
// ranks by its owners' names.
func scanSplit(order []uint32, world int, rankNode []string, ownersOf func(uint32) []string) [][]uint32 {
	per := (len(order) + world - 1) / world
	padded := order
	for len(padded) < per*world {
		padded = append(padded[:len(padded):len(padded)], order[:min(len(order), per*world-len(padded))]...)
	}
	ranksOn := make(map[string][]int)
	for r, node := range rankNode {
		if node != "" {
			ranksOn[node] = append(ranksOn[node], r)
		}
	}
	slack := max(1, per/64)
	filled := make([]int, world)
	out := make([][]uint32, world)
	for i, id := range padded {
		pace := (i+1)*per/len(padded) + slack
		best := -1
		for _, owner := range ownersOf(id) {
			for _, r := range ranksOn[owner] {
				if filled[r] < min(per, pace) && (best < 0 || filled[r] < filled[best]) {
					best = r
				}
			}
		}
		if best < 0 {
			for r := range world {
				if filled[r] < per && (best < 0 || filled[r] < filled[best]) {
					best = r
				}
			}
		}
		filled[best]++
		out[best] = append(out[best], id)
	}
	return out
}

// TestLocalitySplitOnSeveralGoroutines: an order long enough to be cut
// into spans (its groups looked up, its candidates listed and its samples
// put in the slices span by span) is split as the scan over every rank
// splits it, on one goroutine and on several.
func TestLocalitySplitOnSeveralGoroutines(t *testing.T) {
	const n, world, nodes, groups = 5*minSpan + 123, 37, 9, 61
	rng := rand.New(rand.NewPCG(9, 10))
	order := make([]uint32, n)
	for i := range order {
		order[i] = uint32(rng.IntN(n))
	}
	rankNode := make([]string, world)
	for r := range rankNode {
		if r%6 != 5 {
			rankNode[r] = fmt.Sprint("node-", rng.IntN(nodes))
		}
	}
	owners := make([][]string, groups)
	for g := range owners {
		for range rng.IntN(4) {
			owners[g] = append(owners[g], fmt.Sprint("node-", rng.IntN(nodes)))
		}
	}
	where := Placement{
		Groups: groups,
		Group:  func(id uint32) int { return int(mix64(uint64(id)) % groups) },
		Owners: func(g int) []string { return owners[g] },
	}
	want := scanSplit(order, world, rankNode, func(id uint32) []string { return owners[where.Group(id)] })
	for _, workers := range []int{1, 2, 5} {
		got, err := localitySplit(order, world, rankNode, where, workers)
		if err != nil {
			t.Fatal(err)
		}
		for r := range want {
			if !slices.Equal(got[r], want[r]) {
				t.Fatalf("%d goroutines: slice %d differs from the scan's", workers, r)
			}
		}
	}
}

// TestGroupedSplit: an order grouped ahead (GroupOrder) and split once
// the ranks are known, with owners changed meanwhile, is split as
// the scan over every rank splits it with the owners of the split, sample for
// sample, padded or not (a short order padded more than twice over) and
// split again alike; the grouped order is left as it was; a placement
// of other groups is refused.
func TestGroupedSplit(t *testing.T) {
	const nodes, groups = 7, 23
	rng := rand.New(rand.NewPCG(11, 12))
	ownersAt := func() [][]string {
		owners := make([][]string, groups)
		for g := range owners {
			for range rng.IntN(4) {
				owners[g] = append(owners[g], fmt.Sprint("node-", rng.IntN(nodes)))
			}
		}
		return owners
	}
	placement := func(owners [][]string) Placement {
		return Placement{
			Groups: groups,
			Group:  func(id uint32) int { return int(mix64(uint64(id)) % groups) },
			Owners: func(g int) []string { return owners[g] },
		}
	}
	for _, tc := range []struct {
		n      int
		worlds []int
	}{{3*minSpan + 17, []int{1, 4, 37}}, {10, []int{3, 12, 25, 64}}} {
		order := make([]uint32, tc.n)
		for i := range order {
			order[i] = uint32(rng.IntN(tc.n))
		}
		kept := slices.Clone(order)
		grouped, err := GroupOrder(order, placement(ownersAt()))
		if err != nil {
			t.Fatal(err)
		}
		groupsBefore := slices.Clone(grouped.groups)
		for _, world := range tc.worlds {
			rankNode := make([]string, world)
			for r := range rankNode {
				rankNode[r] = fmt.Sprint("node-", rng.IntN(nodes))
			}
			owners := ownersAt()
			now := placement(owners)
			want := scanSplit(order, world, rankNode, func(id uint32) []string { return owners[now.Group(id)] })
			for range 2 {
				got, err := grouped.Split(world, rankNode, now)
				if err != nil {
					t.Fatal(err)
				}
				for r := range want {
					if !slices.Equal(got[r], want[r]) {
						t.Fatalf("n %d, world %d: slice %d of the grouped order differs from the scan's", tc.n, world, r)
					}
				}
			}
			if !slices.Equal(grouped.groups, groupsBefore) || !slices.Equal(order, kept) {
				t.Fatalf("n %d, world %d: the split changed the grouped order", tc.n, world)
			}
		}
		other := placement(ownersAt())
		other.Groups++
		if _, err := grouped.Split(3, []string{"a", "b", "c"}, other); !errors.Is(err, ErrBadPlacement) {
			t.Errorf("split with other groups: err = %v, want ErrBadPlacement", err)
		}
		if _, err := grouped.Split(0, nil, placement(ownersAt())); !errors.Is(err, ErrBadWorld) {
			t.Errorf("world 0: err = %v, want ErrBadWorld", err)
		}
	}
	var empty Grouped
	if got, err := empty.Split(2, []string{"a", "b"}, Placement{Owners: func(int) []string { return nil }}); err != nil || len(got) != 2 || len(got[0]) != 0 {
		t.Errorf("the zero Grouped split in 2: %v, %v; want two empty slices", got, err)
	}
}

// TestGroupedRotated: a grouped order rotated is the grouped order of the
// order rotated, split alike, and the grouped order it came from is left
// as it was.
func TestGroupedRotated(t *testing.T) {
	const n, groups, world = 3*minSpan + 29, 31, 13
	rng := rand.New(rand.NewPCG(21, 22))
	owners := make([][]string, groups)
	for g := range owners {
		owners[g] = []string{fmt.Sprint("node-", rng.IntN(5)), fmt.Sprint("node-", rng.IntN(5))}
	}
	where := Placement{
		Groups: groups,
		Group:  func(id uint32) int { return int(mix64(uint64(id)) % groups) },
		Owners: func(g int) []string { return owners[g] },
	}
	rankNode := make([]string, world)
	for r := range rankNode {
		rankNode[r] = fmt.Sprint("node-", rng.IntN(5))
	}
	order := make([]uint32, n)
	for i := range order {
		order[i] = uint32(rng.IntN(n))
	}
	kept := slices.Clone(order)
	grouped, err := GroupOrder(order, where)
	if err != nil {
		t.Fatal(err)
	}
	groupsBefore := slices.Clone(grouped.groups)
	for _, k := range []int{0, 1, n / 3, n - 1, n, n + 5, -2} {
		at := ((k % n) + n) % n
		rotated := append(slices.Clone(order[at:]), order[:at]...)
		got := grouped.Rotated(k)
		if !slices.Equal(got.Order(), rotated) {
			t.Fatalf("k %d: the rotated order differs from the order rotated", k)
		}
		want, err := LocalitySplit(rotated, world, rankNode, where)
		if err != nil {
			t.Fatal(err)
		}
		split, err := got.Split(world, rankNode, where)
		if err != nil {
			t.Fatal(err)
		}
		for r := range want {
			if !slices.Equal(split[r], want[r]) {
				t.Fatalf("k %d: slice %d of the rotated grouped order differs from the rotated order's split", k, r)
			}
		}
	}
	if !slices.Equal(order, kept) || !slices.Equal(grouped.groups, groupsBefore) {
		t.Fatal("rotating changed the grouped order")
	}
	if got := (Grouped{}).Rotated(3); len(got.Order()) != 0 {
		t.Errorf("the zero Grouped rotated: %d places", len(got.Order()))
	}
}

// TestSliceWeightsOnSeveralGoroutines: slices long enough to be weighed
// on several goroutines, of unequal lengths and one empty, each get every
// id's own weight, in slices of their own (appending to one leaves the
// next as it was).
func TestSliceWeightsOnSeveralGoroutines(t *testing.T) {
	const n = 3*minSpan + 11
	weight := make([]float32, n)
	for i := range weight {
		weight[i] = float32(i%97) / 7
	}
	var ids [][]uint32
	for r, size := range []int{n / 2, 0, n / 3, 5, n / 7} {
		s := make([]uint32, size)
		for i := range s {
			s[i] = uint32((i*31 + r*7) % n)
		}
		ids = append(ids, s)
	}
	got := SliceWeights(ids, weight)
	if len(got) != len(ids) {
		t.Fatalf("%d slices of weights for %d of ids", len(got), len(ids))
	}
	for r, s := range ids {
		if len(got[r]) != len(s) || cap(got[r]) != len(s) {
			t.Fatalf("slice %d: %d weights (capacity %d) for %d ids", r, len(got[r]), cap(got[r]), len(s))
		}
		for i, id := range s {
			if got[r][i] != weight[id] {
				t.Fatalf("slice %d, place %d: weight %v, want id %d's %v", r, i, got[r][i], id, weight[id])
			}
		}
	}
	_ = append(got[0], -1)
	if got[2][0] != weight[ids[2][0]] {
		t.Fatalf("appending to slice 0 wrote into slice 2")
	}
	if SliceWeights(ids, []float32{1, 1, 1}) != nil {
		t.Fatalf("weights all 1: want nil")
	}
}

// TestPlacementOwnedBy: OwnedBy of runs of samples sets bit i for
// names[i] where it owns the sample, none for a sample of a group out of
// range, and asks each group's owners once; OwnedByAny sets bit i where
// any of sets[i] does. Runs longer than the test's own (256) and runs of
// one give the same masks, and a placement's GroupEach is used in place
// of its Group where it is set.
func TestPlacementOwnedBy(t *testing.T) {
	asked := make(map[int]int)
	group := func(id uint32) int {
		if id >= 300 {
			return 5
		}
		return int(id % 3)
	}
	owners := [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}}
	owns := func(name string, id uint32) bool { g := group(id); return g < 3 && slices.Contains(owners[g], name) }
	where := Placement{Groups: 3, Group: group, Owners: func(g int) []string { asked[g]++; return owners[g] }}
	ids := make([]uint32, 700) // 300 owned, 400 of a group out of range
	for i := range ids {
		ids[i] = uint32(i*7) % 700
	}
	once := map[int]int{0: 1, 1: 1, 2: 1} // each group's owners asked once
	check := func(what string, test func(ids []uint32, masks []uint64), want func(id uint32) uint64, wantAsked map[int]int) {
		t.Helper()
		clear(asked)
		masks := make([]uint64, len(ids))
		for k := range masks {
			masks[k] = 1 << 63 // to be overwritten
		}
		test(ids, masks)
		for k, id := range ids {
			if masks[k] != want(id) {
				t.Fatalf("%s: sample %d's mask %b, want %b", what, id, masks[k], want(id))
			}
			var one [1]uint64
			if test(ids[k:k+1], one[:]); one[0] != masks[k] {
				t.Fatalf("%s: sample %d's mask alone %b, in a run %b", what, id, one[0], masks[k])
			}
		}
		if !maps.Equal(asked, wantAsked) {
			t.Fatalf("%s: owners asked %v, want %v", what, asked, wantAsked)
		}
	}
	names := []string{"c", "d", "a"} // "d" owns none
	ofNames := func(id uint32) (m uint64) {
		for i, name := range names {
			if owns(name, id) {
				m |= 1 << i
			}
		}
		return m
	}
	check("OwnedBy", where.OwnedBy(names), ofNames, once)
	sets := [][]string{{"d"}, {"c", "a"}, {"b", "d"}, {"a"}}
	ofSets := func(id uint32) (m uint64) {
		for i, set := range sets {
			for _, name := range set {
				if owns(name, id) {
					m |= 1 << i
				}
			}
		}
		return m
	}
	check("OwnedByAny", where.OwnedByAny(sets), ofSets, once)
	// With Masks, a test finds every group's owners from it, once, as it
	// is made, and asks Owners for none.
	masked, made := where, 0
	masked.Masks = func(bits map[string]uint64, masks []uint64) {
		made++
		for g := range masks {
			masks[g] = 0
			for _, name := range owners[g] {
				masks[g] |= bits[name]
			}
		}
	}
	check("OwnedBy with Masks", masked.OwnedBy(names), ofNames, map[int]int{})
	check("OwnedByAny with Masks", masked.OwnedByAny(sets), ofSets, map[int]int{})
	if made != 2 {
		t.Fatalf("Masks called %d times for two tests, want once each", made)
	}
	// With GroupEach the test reads runs of groups from it, not Group.
	each := 0
	where.Group = func(uint32) int { t.Fatal("Group called with GroupEach set"); return 0 }
	where.GroupEach = func(ids []uint32, groups []int32) {
		each++
		for k, id := range ids {
			groups[k] = int32(group(id))
		}
	}
	check("OwnedBy with GroupEach", where.OwnedBy(names[:1]), func(id uint32) uint64 {
		if owns("c", id) {
			return 1
		}
		return 0
	}, once)
	if each == 0 {
		t.Fatal("GroupEach never called")
	}
}

// TestOwnedByConcurrently: one OwnedBy test used by several goroutines at
// once (as a cut on every core uses it) gives each of them every sample's
// owners, and asks for a group's owners at most once per goroutine.
func TestOwnedByConcurrently(t *testing.T) {
	const groups, goroutines, samples = 97, 4, 20000
	owners := func(g int) []string { return []string{fmt.Sprint("n", g%5), fmt.Sprint("n", (g+2)%5)} }
	var asked [groups]atomic.Int32
	where := Placement{Groups: groups, Group: func(id uint32) int { return int(id * 7 % groups) },
		Owners: func(g int) []string { asked[g].Add(1); return owners(g) }}
	names := []string{"n0", "n1", "n2", "n3", "n4"}
	ownedBy := where.OwnedBy(names)
	want := func(id uint32) (m uint64) {
		for _, o := range owners(where.Group(id)) {
			m |= 1 << slices.Index(names, o)
		}
		return m
	}
	var wg sync.WaitGroup
	wrong := make([]int, goroutines)
	for c := range goroutines {
		wg.Go(func() {
			ids, masks := make([]uint32, samples), make([]uint64, samples)
			for i := range ids {
				ids[i] = uint32(i)
			}
			ownedBy(ids, masks)
			for id, m := range masks {
				if m != want(uint32(id)) {
					wrong[c]++
				}
			}
		})
	}
	wg.Wait()
	for c, n := range wrong {
		if n != 0 {
			t.Fatalf("goroutine %d: %d samples with the wrong owners", c, n)
		}
	}
	for g := range asked {
		if n := asked[g].Load(); n < 1 || n > goroutines {
			t.Fatalf("group %d's owners asked %d times by %d goroutines", g, n, goroutines)
		}
	}
}
