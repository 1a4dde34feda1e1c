package wire

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkScoreQueueAdd queues one epoch of merged minibatches, as a
// leader at 1,000 peers does: 1.28 M samples in batches of 256 in random
// order, 271 partitions with 2 owners each, the queue taken every 62,500
// samples (25 ms of training). A sample's group is read from a table of
// partitions by sample, as ring.Samples holds them.
func BenchmarkScoreQueueAdd(b *testing.B) {
	const samples, parts, peers, batch, flush = 1280000, 271, 1000, 256, 62500
	rng := rand.New(rand.NewPCG(1, 2))
	part := make([]uint16, samples)
	for i := range part {
		part[i] = uint16(rng.IntN(parts))
	}
	owners := make([][]string, parts)
	for p := range owners {
		a := rng.IntN(peers)
		owners[p] = []string{fmt.Sprintf("peer-%04d", a), fmt.Sprintf("peer-%04d", (a+1+rng.IntN(peers-1))%peers)}
	}
	where := Placement{Groups: parts, Group: func(id uint32) int { return int(part[id]) }, Owners: func(g int) []string { return owners[g] }}
	order := rng.Perm(samples)
	ids := make([]uint32, samples)
	for i, id := range order {
		ids[i] = uint32(id)
	}
	scores := make([]float64, batch)
	for i := range scores {
		scores[i] = 1 + rng.Float64()
	}
	job := JobKey{Dataset: "imagenet"}
	var q ScoreQueue
	b.ReportAllocs()
	for b.Loop() {
		pending := 0
		for start := 0; start < samples; start += batch {
			q.Add(where, "peer-0000", job, ids[start:start+batch], scores, nil)
			if pending += batch; pending >= flush {
				q.Take()
				pending = 0
			}
		}
		q.Take()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/samples, "ns/sample")
}
