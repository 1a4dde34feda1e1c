package scores

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shade-mesh/shade/sampling"
)

// BenchmarkReportsDuringDraw draws orders of a 1.28 M-sample table, as a
// leader of shade-peer's defaults does (weights, boost, cap, coupled
// draws), while another goroutine merges minibatches of 256 into the same
// table as fast as it can, as a leader whose orders run an epoch ahead
// does: reports go on arriving while it draws. It reports the samples
// merged per draw.
func BenchmarkReportsDuringDraw(b *testing.B) {
	const n, batch = 1280000, 256
	s := New(n, 0, sampling.ScoreMagnitude, rand.New(rand.NewPCG(1, 2)))
	rng := rand.New(rand.NewPCG(3, 4))
	ids, losses := make([]uint32, batch), make([]float64, batch)
	fill := func() {
		for i := range ids {
			ids[i], losses[i] = uint32(rng.IntN(n)), rng.ExpFloat64()
		}
	}
	for range n / batch {
		fill()
		if err := s.Report(ids, losses, 1); err != nil {
			b.Fatal(err)
		}
	}
	cfg := sampling.DefaultConfig()
	cfg.Boost, cfg.MaxWeight, cfg.DrawSeed = sampling.PeerBoost, sampling.PeerMaxWeight, 9
	sampler := sampling.NewSampler(n, cfg)
	resident := make([]uint64, (n+63)/64)
	for i := range resident {
		resident[i] = rng.Uint64()
	}
	var stop atomic.Bool
	var merged atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			fill()
			if err := s.Report(ids, losses, 1); err != nil {
				panic(err)
			}
			merged.Add(batch)
		}
	})
	b.ResetTimer()
	start := merged.Load()
	for e := 0; b.Loop(); e++ {
		if _, _, err := s.DrawUnordered(sampler, e, resident); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(merged.Load()-start)/float64(b.N), "merged/draw")
	stop.Store(true)
	wg.Wait()
}
