package sampling

import (
	"fmt"
	"testing"
)

// BenchmarkReport256 merges minibatches of 256 distinct samples of 60,000
// (a table in cache), scored by rank (ScoreRankLog) and by magnitude
// (ScoreMagnitude, shade-peer's default), and by magnitude into a table
// of 1.28 M samples spread over 5,000 minibatches: an epoch of ImageNet,
// each sample's score a miss in the cache, as a leader merges them.
func BenchmarkReport256(b *testing.B) {
	for _, c := range []struct {
		kind    ScoreKind
		n       int
		batches int
	}{{ScoreRankLog, 60000, 64}, {ScoreMagnitude, 60000, 64}, {ScoreMagnitude, 1280000, 5000}} {
		name := c.kind.String()
		if c.n != 60000 {
			name = fmt.Sprintf("%s/n=%d", name, c.n)
		}
		kind, n, batches := c.kind, c.n, c.batches
		b.Run(name, func(b *testing.B) {
			const batch = 256
			rng := newRand(1)
			tb := NewTable(n, 0, kind)
			ids := make([][]uint32, batches)
			losses := make([][]float64, batches)
			perm := rng.Perm(n)
			for i := range batches {
				ids[i] = make([]uint32, batch)
				losses[i] = make([]float64, batch)
				for j := range batch {
					// 5,000 batches of 256 are 1.28 M: each sample once an epoch.
					ids[i][j] = uint32(perm[(i*batch+j)%n])
					losses[i][j] = rng.ExpFloat64()
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := tb.Report(ids[i%batches], losses[i%batches], rng); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkOrder(b *testing.B) {
	for _, n := range []int{60000, 1280000} {
		tb := NewTable(n, 0, ScoreRankLog)
		rng := newRand(2)
		for id := range n {
			if id%5 != 0 {
				_ = tb.Set(uint32(id), 2.3+2*rng.Float64())
			}
		}
		for _, mode := range []string{"pads", "uniform"} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.PADS = mode == "pads"
				s := NewSampler(n, cfg)
				if _, err := s.Order(0, tb); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.Order(s.Next(), tb); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDraw draws PADS epochs with weights: "weights" with the mixture
// only, "boost+cap" with Boost 3 over 8 strata, MaxWeight 4 and no uniform
// floor (so that the cap binds), two samples in five resident.
func BenchmarkDraw(b *testing.B) {
	for _, n := range []int{60000, 1280000} {
		tb := NewTable(n, 0, ScoreMagnitude)
		rng := newRand(2)
		bitmap := make([]uint64, (n+63)/64)
		for id := range n {
			if id%5 != 0 {
				_ = tb.Set(uint32(id), 0.05+rng.ExpFloat64())
			}
			if rng.IntN(5) < 2 {
				bitmap[id/64] |= 1 << (id % 64)
			}
		}
		// leader: as a leader of shade-peer's defaults draws a job's
		// order, to be aligned (mesh alignedScores).
		for _, mode := range []string{"weights", "boost+cap", "leader"} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) {
				cfg := DefaultConfig()
				draw := (*Sampler).Draw
				switch mode {
				case "boost+cap":
					cfg.UniformFloor, cfg.Boost, cfg.MaxWeight = 0, 3, 4
				case "leader":
					cfg.Boost, cfg.MaxWeight, cfg.DrawSeed = PeerBoost, PeerMaxWeight, 9
					draw = (*Sampler).DrawUnordered
				}
				s := NewSampler(n, cfg)
				if _, err := draw(s, 0, tb, bitmap); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := draw(s, s.Next(), tb, bitmap); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSortByProb is the sort behind Boost's strata and the cap.
func BenchmarkSortByProb(b *testing.B) {
	const n = 60000
	s := NewSampler(n, Config{PADS: true})
	s.prob = make([]float64, n)
	rng := newRand(1)
	for i := range s.prob {
		s.prob[i] = 0.05 + rng.ExpFloat64()
	}
	ids := make([]uint32, n)
	for b.Loop() {
		for i := range ids {
			ids[i] = uint32(i)
		}
		s.sortByProb(ids)
	}
}

func BenchmarkSplit(b *testing.B) {
	order := permutation(1280000, 1, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Split(order, 8); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLocalitySplit splits an epoch of 1.28 M samples among a rank on
// each of 1,000 nodes, each sample owned by 2 of them, as a leader of such
// a mesh does every epoch.
func BenchmarkLocalitySplit(b *testing.B) {
	benchThousandNodes(b, func(order []uint32, rankNode []string, where Placement) error {
		_, err := LocalitySplit(order, len(rankNode), rankNode, where)
		return err
	})
}

// BenchmarkGroupOrder looks up the partition of each place of an epoch's
// order of 1.28 M samples at 1,000 peers, as the leader does with each
// draw.
func BenchmarkGroupOrder(b *testing.B) {
	benchThousandNodes(b, func(order []uint32, _ []string, where Placement) error {
		_, err := GroupOrder(order, where)
		return err
	})
}

// benchThousandNodes times step on an epoch's order at 1,000 nodes
// (thousandNodes), for each of ringPartitions.
func benchThousandNodes(b *testing.B, step func(order []uint32, rankNode []string, where Placement) error) {
	for _, partitions := range ringPartitions {
		b.Run(fmt.Sprint("partitions=", partitions), func(b *testing.B) {
			order, rankNode, where := thousandNodes(partitions)
			b.ReportAllocs()
			for b.Loop() {
				if err := step(order, rankNode, where); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGroupedSplit is BenchmarkLocalitySplit's split once the groups
// are looked up (GroupOrder, with the draw): what the last rank to join
// waits for in epoch 0.
func BenchmarkGroupedSplit(b *testing.B) {
	for _, partitions := range ringPartitions {
		b.Run(fmt.Sprint("partitions=", partitions), func(b *testing.B) {
			order, rankNode, where := thousandNodes(partitions)
			g, err := GroupOrder(order, where)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Split(len(rankNode), rankNode, where); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// ringPartitions are the splits' benchmarks' partition counts: a ring's
// default, where most of 1,000 nodes own no partition and most samples
// go to ranks that do not own them, and what a ring of 1,000 peers
// advises, where every node owns some.
var ringPartitions = []int{271, 16381}

// thousandNodes is an epoch of 1.28 M samples, a rank on each of 1,000
// nodes and a placement of each sample on 2 of them, in partitions
// groups.
func thousandNodes(partitions int) ([]uint32, []string, Placement) {
	const n, nodes = 1280000, 1000
	order := permutation(n, 1, 0)
	rankNode := make([]string, nodes)
	for r := range rankNode {
		rankNode[r] = fmt.Sprint("node-", r)
	}
	owners := make([][]string, partitions)
	for p := range owners {
		owners[p] = []string{rankNode[p*7%nodes], rankNode[(p*13+1)%nodes]}
	}
	// Each sample's partition read from a table, as a node's hashed
	// samples (mesh/ring.Samples) give it, a run at a time as
	// ring.Samples.PartitionsOf reads them.
	partOf := make([]uint16, n)
	for i := range partOf {
		partOf[i] = uint16(mix64(uint64(i)) % uint64(partitions))
	}
	where := Placement{
		Groups: partitions,
		Group:  func(id uint32) int { return int(partOf[id]) },
		GroupEach: func(ids []uint32, groups []int32) {
			for k, id := range ids {
				groups[k] = int32(partOf[id])
			}
		},
		Owners: func(g int) []string { return owners[g] },
	}
	return order, rankNode, where
}
