package sampling

import (
	"math"
	"slices"
	"testing"
)

// TestParallelDrawsAsSequential: a draw and an alignment on several
// goroutines give the same order, weights and sampler state, to the bit,
// as on one, over samples enough to cut every pass in spans: boosted and
// capped (the cap binding, with forced samples), coupled and not, with
// the draw's own shuffle and without. Five goroutines cut the spans
// unevenly, and at places the one-goroutine pass does not stop at.
func TestParallelDrawsAsSequential(t *testing.T) {
	const n = 5*minSpan + 777
	tb := longTailTable(n)
	resident := everyThird(n)
	for _, c := range []struct {
		name      string
		drawSeed  uint64
		unordered bool
	}{{"coupled", 9, true}, {"alias stream", 0, false}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := boostedConfig(3)
			cfg.UniformFloor, cfg.CoverageEpochs, cfg.DrawSeed = 0, 2, c.drawSeed
			one, many := NewSampler(n, cfg), NewSampler(n, cfg)
			one.procs, many.procs = 1, 5
			for e := range 4 {
				draw := (*Sampler).Draw
				if c.unordered {
					draw = (*Sampler).DrawUnordered
				}
				a, err := draw(one, e, tb, resident)
				if err != nil {
					t.Fatal(err)
				}
				b, err := draw(many, e, tb, resident)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(a.Order, b.Order) {
					t.Fatalf("epoch %d: orders differ", e)
				}
				for i := range a.Weight {
					if math.Float32bits(a.Weight[i]) != math.Float32bits(b.Weight[i]) {
						t.Fatalf("epoch %d: weight of %d is %v on one goroutine, %v on five", e, i, a.Weight[i], b.Weight[i])
					}
				}
				sa, _ := one.MarshalBinary()
				sb, _ := many.MarshalBinary()
				if !slices.Equal(sa, sb) {
					t.Fatalf("epoch %d: sampler states differ", e)
				}
				if top := slices.Max(a.Weight); e > 0 && top < float32(cfg.MaxWeight)*0.999 {
					t.Fatalf("epoch %d: the largest weight is %v, below the cap %v: the cap was not exercised", e, top, cfg.MaxWeight)
				}
				align(a.Order, 7, e, 1)
				align(b.Order, 7, e, 5)
				if !slices.Equal(a.Order, b.Order) {
					t.Fatalf("epoch %d: aligned orders differ", e)
				}
			}
		})
	}
}

// TestParallelRadixSort: the radix sort on several goroutines sorts as on
// one, for keys whose runs of equal high digits cross the spans' edges,
// keys that share digits (skipped passes), and both the stable sort and
// the one that leaves low digits to the runs.
func TestParallelRadixSort(t *testing.T) {
	const n = 4*minSpan + 123
	rng := newRand(5)
	for name, keyOf := range map[string]func(i int) uint64{
		"uniform":     func(int) uint64 { return rng.Uint64() },
		"long runs":   func(i int) uint64 { return uint64(i/5000)<<40 | rng.Uint64()&(1<<20-1) },
		"shared high": func(int) uint64 { return 0x3ff0<<48 | rng.Uint64()>>40 },
	} {
		for _, low := range []int{0, radixLow, 4, radixDigits - 1} {
			keys, vals := make([]uint64, n), make([]uint32, n)
			for i := range keys {
				keys[i], vals[i] = keyOf(i), uint32(i)
			}
			rng.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			k1, v1 := slices.Clone(keys), slices.Clone(vals)
			radixSort(k1, v1, make([]uint64, n), make([]uint32, n), new(radixCounts), low, 1)
			k3, v3 := slices.Clone(keys), slices.Clone(vals)
			radixSort(k3, v3, make([]uint64, n), make([]uint32, n), new(radixCounts), low, 3)
			if !slices.Equal(k1, k3) || !slices.Equal(v1, v3) {
				t.Fatalf("%s, low digit %d: three goroutines sort otherwise than one", name, low)
			}
			for i := 1; i < n; i++ {
				if k1[i-1] > k1[i] || k1[i-1] == k1[i] && v1[i-1] > v1[i] {
					t.Fatalf("%s, low digit %d: not sorted at %d", name, low, i)
				}
			}
		}
	}
}
