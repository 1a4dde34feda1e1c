package s3

import (
	"strings"
	"testing"

	"github.com/shade-mesh/shade/internal/s3test"
)

// BenchmarkPeersStartingTogether starts 8 shade-peer processes at once
// over 16 WebDataset shards of 2,000 small samples in a bucket
// (versitygw on loopback), with nothing published beside them: each
// peer indexing the shards itself ("alone"), or with --publish-index, one
// indexing them for all ("shared"). It reports the time until every peer
// serves, and the GETs of shards the starts made (shard-GETs/op: 16 a
// build).
func BenchmarkPeersStartingTogether(b *testing.B) {
	const k, shards, per = 8, 16, 2000
	g := s3test.Start(b)
	putShards(b, g, shards, per)
	for _, c := range []struct {
		name string
		args []string
	}{{"alone", nil}, {"shared", []string{"--publish-index"}}} {
		b.Run(c.name, func(b *testing.B) {
			gets := 0
			for b.Loop() {
				b.StopTimer()
				g.Delete(b, "shade-wds", "wds/.shade/shards.index")
				before := shardGets(b, g)
				b.StartTimer()
				args := append([]string{"--dataset", "wds=shards:s3://shade-wds/wds"}, c.args...)
				peers := launchTogether(b, g, k, args...)
				b.StopTimer()
				for _, p := range peers {
					p.Kill()
				}
				gets += shardGets(b, g) - before
				b.StartTimer()
			}
			b.ReportMetric(float64(gets)/float64(b.N), "shard-GETs/op")
		})
	}
}

// shardGets is how many GETs of the shards g served so far.
func shardGets(b *testing.B, g *s3test.Gateway) int {
	n := 0
	for key, c := range g.GetCounts(b, "shade-wds") {
		if strings.HasPrefix(key, "wds/train-") {
			n += c
		}
	}
	return n
}
