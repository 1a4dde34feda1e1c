package consistent

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	upstream "github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Tests of the changes marked shade: (PATCHES.md). Every peer of a mesh
// must compute the same partition table from the same members, whatever
// build it runs, so the patched New, Add and Remove must give exactly
// upstream v0.10.0's table, not merely a good one.

type xxHasher struct{}

func (xxHasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// collider maps every key to one of 64 values, so points collide on the
// circle: the same hash from two members, and from two points of one.
type collider struct{}

func (collider) Sum64(b []byte) uint64 { return xxhash.Sum64(b) % 64 << 58 }

// table is what a Consistent decides: each partition's owner ("" for
// none) and each member's load, or the panic it raised.
type table struct {
	owners []string
	loads  string
	panic  string
}

func tableOf(parts int, owner func(int) fmt.Stringer, loads func() map[string]float64) table {
	var t table
	for p := range parts {
		m := owner(p)
		if m == nil {
			t.owners = append(t.owners, "")
			continue
		}
		t.owners = append(t.owners, m.String())
	}
	l := loads()
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.loads += fmt.Sprintf("%s=%v ", k, l[k])
	}
	return t
}

// step is one operation on both instances: New of members, Add of one,
// or Remove of one (by name).
type step struct {
	op   string
	name string
	all  []string
}

// run applies steps to a patched and an upstream instance and returns
// the table after each step.
func run(cfg Config, steps []step) (ours, theirs []table) {
	var c *Consistent
	var u *upstream.Consistent
	ucfg := upstream.Config{Hasher: cfg.Hasher, PartitionCount: cfg.PartitionCount, ReplicationFactor: cfg.ReplicationFactor, Load: cfg.Load}
	for _, s := range steps {
		ours = append(ours, guarded(func() table {
			switch s.op {
			case "new":
				ms := make([]Member, len(s.all))
				for i, n := range s.all {
					ms[i] = testMember(n)
				}
				c = New(ms, cfg)
			case "add":
				c.Add(testMember(s.name))
			case "remove":
				c.Remove(s.name)
			}
			return tableOf(int(c.partitionCount), func(p int) fmt.Stringer {
				if m := c.GetPartitionOwner(p); m != nil {
					return m
				}
				return nil
			}, c.LoadDistribution)
		}))
		theirs = append(theirs, guarded(func() table {
			switch s.op {
			case "new":
				ms := make([]upstream.Member, len(s.all))
				for i, n := range s.all {
					ms[i] = testMember(n)
				}
				u = upstream.New(ms, ucfg)
			case "add":
				u.Add(testMember(s.name))
			case "remove":
				u.Remove(s.name)
			}
			return tableOf(cfg.PartitionCount, func(p int) fmt.Stringer {
				if m := u.GetPartitionOwner(p); m != nil {
					return m
				}
				return nil
			}, u.LoadDistribution)
		}))
	}
	return ours, theirs
}

func guarded(f func() table) (t table) {
	defer func() {
		if p := recover(); p != nil {
			t = table{panic: fmt.Sprint(p)}
		}
	}()
	return f()
}

// TestSameTableAsUpstream: random memberships built with New, then
// members added and removed one at a time (some twice, some unknown), over
// several partition counts, point counts and load factors: after every
// step each partition has the owner upstream v0.10.0 gives it and each
// member the same load, or both panic alike.
func TestSameTableAsUpstream(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 60 {
		cfg := Config{
			Hasher:            xxHasher{},
			PartitionCount:    []int{7, 71, 271, 1084}[trial%4],
			ReplicationFactor: []int{1, 3, 20, 200}[trial/4%4],
			Load:              []float64{1.25, 2, 1.0}[trial%3],
		}
		n := 1 + rng.IntN(40)
		pool := make([]string, 60)
		for i := range pool {
			pool[i] = fmt.Sprintf("peer-%d#", rng.IntN(1000))
		}
		steps := []step{{op: "new", all: pool[:n]}}
		for range 12 {
			name := pool[rng.IntN(len(pool))]
			if rng.IntN(2) == 0 {
				steps = append(steps, step{op: "add", name: name})
			} else {
				steps = append(steps, step{op: "remove", name: name})
			}
		}
		ours, theirs := run(cfg, steps)
		for i := range steps {
			if ours[i].panic != theirs[i].panic || !slices.Equal(ours[i].owners, theirs[i].owners) || ours[i].loads != theirs[i].loads {
				t.Fatalf("trial %d (%+v), step %d %+v: patched and upstream differ:\n ours   %+v\n theirs %+v", trial, cfg, i, steps[i], ours[i], theirs[i])
			}
		}
	}
}

// TestSameTableAsUpstreamWithCollisions: with a hash of 64 values, points
// of different members, and of one member, share a place on the circle;
// the patched circle keeps and removes the same duplicates as upstream's
// (and, where upstream panics on the ring entry a removal deleted under
// another member's point, panics alike).
func TestSameTableAsUpstreamWithCollisions(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	panics := 0
	for trial := range 40 {
		cfg := Config{Hasher: collider{}, PartitionCount: 71, ReplicationFactor: 1 + rng.IntN(8), Load: 3}
		pool := make([]string, 12)
		for i := range pool {
			pool[i] = fmt.Sprintf("m%d#", i)
		}
		steps := []step{{op: "new", all: pool[:2+rng.IntN(6)]}}
		for range 6 {
			op := "add"
			if rng.IntN(2) == 0 {
				op = "remove"
			}
			steps = append(steps, step{op: op, name: pool[rng.IntN(len(pool))]})
		}
		ours, theirs := run(cfg, steps)
		for i := range steps {
			if ours[i].panic != "" {
				panics++
			}
			if ours[i].panic != theirs[i].panic || !slices.Equal(ours[i].owners, theirs[i].owners) || ours[i].loads != theirs[i].loads {
				t.Fatalf("trial %d (%+v), step %d %+v: patched and upstream differ:\n ours   %+v\n theirs %+v", trial, cfg, i, steps[i], ours[i], theirs[i])
			}
			if ours[i].panic != "" {
				break // both instances are unusable past a panic
			}
		}
	}
	t.Logf("%d runs ended in the same panic", panics)
}

// pairs returns the (value, slot) pairs of s and slots, sorted.
func pairs(s []uint64, slots []int32) [][2]int64 {
	var ps [][2]int64
	for i := range s {
		ps = append(ps, [2]int64{int64(s[i]), int64(slots[i])})
	}
	slices.SortFunc(ps, func(a, b [2]int64) int {
		if a[0] != b[0] {
			return int(a[0] - b[0])
		}
		return int(a[1] - b[1])
	})
	return ps
}

func TestMergeTail(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		s := make([]uint64, rng.IntN(30))
		slots := make([]int32, len(s))
		for i := range s {
			s[i] = uint64(rng.IntN(20)) // duplicates within and across halves
		}
		n := rng.IntN(len(s) + 1)
		slices.Sort(s[:n])
		slices.Sort(s[n:])
		for i := range slots {
			slots[i] = int32(s[i]*100) + int32(i) // each slot tells its value
		}
		want, wantPairs := slices.Sorted(slices.Values(s)), pairs(s, slots)
		got, gotSlots := mergeTail(s, slots, n)
		if !slices.Equal(got, want) {
			t.Fatalf("mergeTail(%v, %d) = %v, want %v", s, n, got, want)
		}
		if !slices.Equal(pairs(got, gotSlots), wantPairs) {
			t.Fatalf("mergeTail moved slots from their values: %v %v", got, gotSlots)
		}
	}
}

func TestRemoveSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 500 {
		set := make([]uint64, rng.IntN(30))
		for i := range set {
			set[i] = uint64(rng.IntN(20))
		}
		slices.Sort(set)
		slots := make([]int32, len(set))
		for i := range slots {
			slots[i] = int32(set[i]*100) + int32(i)
		}
		gone := make([]uint64, rng.IntN(10))
		for i := range gone {
			gone[i] = uint64(rng.IntN(25)) // some not in set, some twice
		}
		// Upstream's delSlice, once a value of gone in its order.
		want := slices.Clone(set)
		for _, g := range gone {
			if i := slices.Index(want, g); i >= 0 {
				want = slices.Delete(want, i, i+1)
			}
		}
		got, gotSlots := removeSorted(slices.Clone(set), slices.Clone(slots), slices.Clone(gone))
		if !slices.Equal(got, want) {
			t.Fatalf("removeSorted(%v, %v) = %v, want %v", set, gone, got, want)
		}
		for i := range got {
			if uint64(gotSlots[i]/100) != got[i] || !slices.Contains(slots, gotSlots[i]) {
				t.Fatalf("removeSorted: slot %d beside value %d", gotSlots[i], got[i])
			}
		}
	}
}

// BenchmarkNew: a circle of members of 200 points each, as mesh/ring
// builds it, against upstream's New in the same run.
func BenchmarkNew(b *testing.B) {
	for _, m := range []int{100, 1000} {
		ms := make([]Member, m)
		ums := make([]upstream.Member, m)
		for i := range ms {
			ms[i] = testMember(fmt.Sprintf("peer-%04d#", i))
			ums[i] = ms[i]
		}
		b.Run(fmt.Sprintf("patched/members=%d", m), func(b *testing.B) {
			for b.Loop() {
				New(ms, Config{Hasher: xxHasher{}, PartitionCount: 16381, ReplicationFactor: 200, Load: 1.25})
			}
		})
		b.Run(fmt.Sprintf("upstream/members=%d", m), func(b *testing.B) {
			for b.Loop() {
				upstream.New(ums, upstream.Config{Hasher: xxHasher{}, PartitionCount: 16381, ReplicationFactor: 200, Load: 1.25})
			}
		})
	}
}
