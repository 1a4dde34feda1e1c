package sampling

import (
	"fmt"
	"testing"
)

func BenchmarkReport256(b *testing.B) {
	const n, batch = 60000, 256
	rng := newRand(1)
	tb := NewTable(n, 0, ScoreRankLog)
	const batches = 64
	ids := make([][]uint32, batches)
	losses := make([][]float64, batches)
	for i := range batches {
		ids[i] = make([]uint32, batch)
		losses[i] = make([]float64, batch)
		for j := range batch {
			ids[i][j] = uint32(rng.IntN(n))
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

func BenchmarkSplit(b *testing.B) {
	order := permutation(1280000, 1, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Split(order, 8); err != nil {
			b.Fatal(err)
		}
	}
}
