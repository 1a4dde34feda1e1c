package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/protocol/samplekey"
)

// scalePeerName is the name of simulated peer i by default.
func scalePeerName(i int) string { return fmt.Sprintf(defaultPeerNames, i) }

// defaultPeerNames is shadectl scale --names's default.
const defaultPeerNames = "peer-%04d"

// peerNamer returns the namer of simulated peers that format gives: a
// fmt format of one integer, the peer's number, which must give every
// peer its own name (a ring collapses names that are the same).
func peerNamer(format string) (func(int) string, error) {
	name := func(i int) string { return fmt.Sprintf(format, i) }
	a, b, c := name(0), name(1), name(10)
	if strings.Contains(a+b+c, "%!") || a == b || b == c || a == c {
		return nil, fmt.Errorf("--names %q: want a format of one integer that names each peer apart, such as %q", format, defaultPeerNames)
	}
	return name, nil
}

// scaleSampleKey appends the store key of a sample, "<dataset>/<index>",
// byte for byte as a node forms it, to dst.
func scaleSampleKey(dst []byte, dataset string, id uint32) []byte {
	return samplekey.Append(dst, dataset, int(id))
}

// partitionSamples counts the samples of a dataset of n samples that hash
// into each partition of r. Keys hash into partitions independently of the
// members, so one count serves every ring of the same Config.
func partitionSamples(r *ring.Ring, dataset string, n int) []int {
	counts := make([]int, r.Config().Partitions)
	key := make([]byte, 0, len(dataset)+16)
	for id := range n {
		key = scaleSampleKey(key[:0], dataset, uint32(id))
		counts[r.Partition(key)]++
	}
	return counts
}

// ringLoads returns, per member of r, the samples it owns as primary and
// the samples it holds a copy of (as any of the R owners). Every member is
// present, possibly with 0.
func ringLoads(r *ring.Ring, counts []int) (primary, copies map[string]int) {
	primary = make(map[string]int)
	copies = make(map[string]int)
	for _, m := range r.Members() {
		primary[m], copies[m] = 0, 0
	}
	for p, c := range counts {
		owners := r.OwnersOfPartition(p)
		if len(owners) == 0 {
			continue
		}
		primary[owners[0]] += c
		for _, o := range owners {
			copies[o] += c
		}
	}
	return primary, copies
}

// spread summarises how evenly samples lie over peers, each figure
// relative to the mean: 1 is perfectly even.
type spread struct {
	Peers  int
	Mean   float64 // samples per peer
	Max    float64 // max/mean
	P99    float64 // 99th percentile/mean
	StdDev float64 // standard deviation/mean
	Empty  int     // peers holding nothing
}

func spreadOf(loads map[string]int) spread {
	vals := make([]int, 0, len(loads))
	for _, v := range loads {
		vals = append(vals, v)
	}
	if len(vals) == 0 {
		return spread{}
	}
	slices.Sort(vals)
	var sum, sq float64
	s := spread{Peers: len(vals)}
	for _, v := range vals {
		sum += float64(v)
		if v == 0 {
			s.Empty++
		}
	}
	s.Mean = sum / float64(len(vals))
	for _, v := range vals {
		d := float64(v) - s.Mean
		sq += d * d
	}
	if s.Mean > 0 {
		s.Max = float64(vals[len(vals)-1]) / s.Mean
		s.P99 = float64(vals[max(0, int(math.Ceil(0.99*float64(len(vals))))-1)]) / s.Mean
		s.StdDev = math.Sqrt(sq/float64(len(vals))) / s.Mean
	}
	return s
}

// churn is what one peer joining or leaving moves.
type churn struct {
	Peer   string
	Update time.Duration // ring.Update from the old view to the new
	// Fractions of the dataset's samples whose primary changes, whose
	// owner set changes, and of the R copies that land on a new holder.
	Primary, Owners, Copies float64
	// Held is the copies the peer holds: after it joined, or before it left.
	Held int
	// Partitions is how many partitions the peer holds a copy of.
	Partitions int
	// For a departure: how many survivors received the departed peer's
	// copies, and the largest share of them one survivor received.
	Recipients int
	Largest    float64
	// For a departure: the load spread over the survivors afterwards.
	After, AfterPrimary spread
}

// compareRings measures the move from ring a to ring b (same Config) for
// the samples counted per partition. peer is the one that joined (in b
// only) or, when leaving, departed (in a only); a departed peer's copies
// are traced to their new holders.
func compareRings(a, b *ring.Ring, counts []int, peer string, leaving bool) churn {
	c := churn{Peer: peer}
	total, copies := 0, 0
	var primary, owners, moved int
	got := make(map[string]int)
	for p, n := range counts {
		oa, ob := a.OwnersOfPartition(p), b.OwnersOfPartition(p)
		total += n
		copies += n * len(oa)
		if len(oa) > 0 && len(ob) > 0 && oa[0] != ob[0] {
			primary += n
		}
		if !sameSet(oa, ob) {
			owners += n
		}
		for _, o := range ob {
			if !slices.Contains(oa, o) {
				moved += n
				if leaving && slices.Contains(oa, peer) {
					got[o] += n
				}
			}
		}
		held := ob
		if leaving {
			held = oa
		}
		if slices.Contains(held, peer) {
			c.Held += n
			c.Partitions++
		}
	}
	if total > 0 {
		c.Primary = float64(primary) / float64(total)
		c.Owners = float64(owners) / float64(total)
	}
	if copies > 0 {
		c.Copies = float64(moved) / float64(copies)
	}
	if leaving {
		c.Recipients = len(got)
		sum, most := 0, 0
		for _, n := range got {
			sum += n
			most = max(most, n)
		}
		if sum > 0 {
			c.Largest = float64(most) / float64(sum)
		}
		prim, cop := ringLoads(b, counts)
		c.After, c.AfterPrimary = spreadOf(cop), spreadOf(prim)
	}
	return c
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// ringResult is the ring half of shadectl scale.
type ringResult struct {
	Config  ring.Config
	Peers   int
	Samples int
	Build   time.Duration // ring.New of every peer
	// Before is the load spread of copies (all R owners) and of primaries
	// over all peers.
	Before, BeforePrimary spread
	Joins, Leaves         []churn
	// The bounded load of the ring of all peers, and what a join and a
	// leave make it.
	boundedLoad
	// Ring is the ring of all peers.
	Ring *ring.Ring
}

// simulateRing builds the ring of peers members as a node does and moves
// it through trials joins and trials departures, each from the full view,
// measuring the samples that move. progress gets one line per step.
func simulateRing(cfg ring.Config, peers, samples, trials int, dataset string, seed uint64, name func(int) string, progress func(string, ...any)) (*ringResult, error) {
	names := make([]string, peers)
	for i := range names {
		names[i] = name(i)
	}
	start := time.Now()
	base, err := ring.New(cfg, names)
	if err != nil {
		return nil, err
	}
	res := &ringResult{Config: base.Config(), Peers: peers, Samples: samples, Build: time.Since(start), Ring: base}
	progress("ring of %d peers built in %s", peers, res.Build.Round(time.Millisecond))
	counts := partitionSamples(base, dataset, samples)
	prim, cop := ringLoads(base, counts)
	res.Before, res.BeforePrimary = spreadOf(cop), spreadOf(prim)
	res.boundedLoad = boundedLoadOf(base)

	rng := rand.New(rand.NewPCG(seed, 0x5ca1e))
	leavers := rng.Perm(peers)[:min(trials, peers)]
	for t := range trials {
		joiner := name(peers + t)
		start := time.Now()
		joined, err := base.Update(append(slices.Clone(names), joiner))
		if err != nil {
			return nil, err
		}
		d := time.Since(start)
		c := compareRings(base, joined, counts, joiner, false)
		c.Update = d
		res.Joins = append(res.Joins, c)
		progress("join %d/%d: %s in %s", t+1, trials, joiner, d.Round(time.Millisecond))
		if _, err := base.Update(names); err != nil { // back to the full view
			return nil, err
		}
	}
	for t, i := range leavers {
		gone := names[i]
		rest := slices.Delete(slices.Clone(names), i, i+1)
		start := time.Now()
		left, err := base.Update(rest)
		if err != nil {
			return nil, err
		}
		d := time.Since(start)
		c := compareRings(base, left, counts, gone, true)
		c.Update = d
		res.Leaves = append(res.Leaves, c)
		progress("leave %d/%d: %s in %s", t+1, len(leavers), gone, d.Round(time.Millisecond))
		if _, err := base.Update(names); err != nil {
			return nil, err
		}
	}
	return res, nil
}
