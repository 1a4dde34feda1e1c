package wire

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkScoreQueueAdd queues one epoch of merged minibatches, as a
// leader does: 1.28 M samples in batches of 256 in random order, the
// queue taken every 62,500 samples (25 ms of training), each partition
// with 2 owners, among 8 peers with a ring's default 271 partitions, or
// among 1,000 peers with 271 or with the 16,381 that 1,000 peers need. A
// sample's group is read from a table of partitions by sample, as
// ring.Samples holds them.
func BenchmarkScoreQueueAdd(b *testing.B) {
	for _, c := range []struct{ peers, parts int }{{8, 271}, {1000, 271}, {1000, 16381}} {
		b.Run(fmt.Sprintf("peers=%d/partitions=%d", c.peers, c.parts), func(b *testing.B) { benchScoreQueue(b, c.peers, c.parts) })
	}
}

func benchScoreQueue(b *testing.B, peers, parts int) {
	const samples, batch, flush = 1280000, 256, 62500
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
	where := Placement{Groups: parts, Group: func(id uint32) int { return int(part[id]) }, Owners: func(g int) []string { return owners[g] }, Key: &owners,
		GroupEach: func(ids []uint32, groups []int32) { // as ring.Samples.PartitionsOf
			for k, id := range ids {
				groups[k] = int32(part[id])
			}
		}}
	order := rng.Perm(samples)
	ids := make([]uint32, samples)
	for i, id := range order {
		ids[i] = uint32(id)
	}
	scores := make([]float32, batch)
	for i := range scores {
		scores[i] = 1 + rng.Float32()
	}
	job := JobKey{Dataset: "imagenet"}
	var q ScoreQueue
	b.ReportAllocs()
	for b.Loop() {
		pending := 0
		for start := 0; start < samples; start += batch {
			q.Add(where, "peer-0000", job, Stamped(1, uint32(start/batch+1), ids[start:start+batch], scores), nil)
			if pending += batch; pending >= flush {
				q.Take(true)
				pending = 0
			}
		}
		q.Take(true)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/samples, "ns/sample")
}
