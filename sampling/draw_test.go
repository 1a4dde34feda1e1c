package sampling

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// longTailTable scores n samples with a long tail, as ScoreMagnitude does:
// most near 1, a few up to 40 times that, a few near 0; every eleventh is
// unscored.
func longTailTable(n int) *Table {
	tb := NewTable(n, 0, ScoreMagnitude)
	rng := newRand(11)
	for id := range n {
		if id%11 == 5 {
			continue
		}
		s := 0.05 + rng.ExpFloat64()
		if id%13 == 0 {
			s *= 40
		}
		_ = tb.Set(uint32(id), s)
	}
	return tb
}

// everyThird marks samples 0, 3, 6, ... resident.
func everyThird(n int) []uint64 {
	b := make([]uint64, (n+63)/64)
	for id := 0; id < n; id += 3 {
		b[id/64] |= 1 << (id % 64)
	}
	return b
}

// refQ is a reference for the per-draw probabilities of a PADS epoch, written
// from the documentation with none of the sampler's code: the mixture, the
// boost within strata of equal count, and the floor by repeated
// water-filling. forced marks the samples the coverage floor forces, d the
// draws after them.
func refQ(tb *Table, cfg Config, bitmap []uint64, forced []bool, d int) []float64 {
	cfg = cfg.withDefaults()
	n := tb.Len()
	q := make([]float64, n)
	var wsum float64
	for id := range n {
		q[id] = max(0, tb.Score(uint32(id))+cfg.Lambda)
		wsum += q[id]
	}
	for id := range q {
		q[id] = (1-cfg.UniformFloor)*q[id]/wsum + cfg.UniformFloor/float64(n)
	}
	if cfg.Boost > 0 && bitmap != nil {
		byQ := make([]int, n)
		for i := range byQ {
			byQ[i] = i
		}
		slices.SortStableFunc(byQ, func(a, b int) int { return cmpFloat(q[a], q[b]) })
		strata := min(cfg.Strata, n)
		start := 0
		for j := range strata {
			size := n / strata
			if j < n%strata {
				size++
			}
			group := byQ[start : start+size]
			start += size
			var all, boosted float64
			for _, id := range group {
				all += q[id]
				if isResident(bitmap, uint32(id)) {
					q[id] *= 1 + cfg.Boost
				}
				boosted += q[id]
			}
			for _, id := range group {
				q[id] *= all / boosted
			}
		}
	}
	if m := cfg.MaxWeight; m > 0 {
		floor := 1 / (m * float64(d))
		pinned := make([]bool, n)
		for {
			var pinnedMass, rest float64
			for id := range n {
				if pinned[id] {
					pinnedMass += floor
				} else {
					rest += q[id]
				}
			}
			scale := (1 - pinnedMass) / rest
			more := false
			for id := range n {
				if !pinned[id] && !forced[id] && scale*q[id] < floor {
					pinned[id], more = true, true
				}
			}
			if !more {
				for id := range n {
					if pinned[id] {
						q[id] = floor
					} else {
						q[id] *= scale
					}
				}
				break
			}
		}
	}
	return q
}

// forcedNow returns which samples the sampler's next epoch forces, and the
// number of draws after them.
func forcedNow(s *Sampler) ([]bool, int) {
	forced := make([]bool, s.n)
	d := s.n
	if k := s.cfg.CoverageEpochs; k > 0 && s.cfg.PADS && s.next > 0 {
		for id, l := range s.last {
			if int64(l) <= int64(s.next)-int64(k) {
				forced[id] = true
				d--
			}
		}
	}
	return forced, d
}

func boostedConfig(seed uint64) Config {
	cfg := DefaultConfig()
	cfg.Seed = seed
	cfg.Boost = 3
	cfg.MaxWeight = 4
	return cfg
}

// Each weight is 1 over the expected count that the documented algorithm
// gives, with and without forced samples, for several configurations.
func TestDrawWeightsMatchReference(t *testing.T) {
	const n = 300
	tb := longTailTable(n)
	bitmap := everyThird(n)
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"mixture", Config{PADS: true, UniformFloor: -1, CoverageEpochs: 2}},
		{"boost", Config{PADS: true, UniformFloor: -1, CoverageEpochs: 2, Boost: 3}},
		{"cap", Config{PADS: true, CoverageEpochs: 2, MaxWeight: 2}},
		{"boost and cap", Config{PADS: true, UniformFloor: 0.05, CoverageEpochs: 2, Boost: 3, MaxWeight: 4, Strata: 5}},
		{"cap 1", Config{PADS: true, CoverageEpochs: 2, MaxWeight: 1, Boost: 1}},
		{"one stratum", Config{PADS: true, CoverageEpochs: 2, Boost: 9, Strata: 1, MaxWeight: 1.5}},
		{"strata beyond n", Config{PADS: true, CoverageEpochs: 2, Boost: 2, Strata: 1000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Seed = 3
			s := NewSampler(n, c.cfg)
			for e := range 4 { // epoch 3 forces what epoch 2 missed
				forced, d := forcedNow(s)
				got := mustDraw(t, s, e, tb, bitmap)
				if e == 0 {
					continue
				}
				nforced := 0
				for _, f := range forced {
					if f {
						nforced++
					}
				}
				if e == 3 && nforced == 0 {
					t.Fatalf("epoch 3 forced nothing; the test does not cover forcing")
				}
				q := refQ(tb, c.cfg, bitmap, forced, d)
				for id := range n {
					want := float64(d) * q[id]
					if forced[id] {
						want++
					}
					if w := float64(got.Weight[id]); math.Abs(w*want-1) > 1e-6 {
						t.Fatalf("epoch %d sample %d: weight %v, want 1/%v", e, id, w, want)
					}
				}
			}
		})
	}
}

// unbiasedness draws one epoch for each of seeds samplers, prepared by
// prepare, and checks that every sample's count times its weight averages 1.
// The tolerances come from the sampling error computed from the weights
// themselves: given the coverage state, a sample's count is forced_i plus a
// binomial(D, q_i) count, so count*ω has variance ω²·D·q(1-q); the epoch's
// total Σ count*ω is D draws of ω_X with X ~ q, variance D·(Σqω² - (Σqω)²).
// 5.5 standard deviations per sample and 5 for the total would, over the
// three cases' 600 samples, fail by chance about once in 40,000 runs (a
// sample's mean is a sum of 2,000 independent counts, near enough normal);
// the seeds are fixed, so the test is deterministic. A weight off by 5% for
// a third of the samples fails it.
func unbiasedness(t *testing.T, n, seeds int, tb *Table, bitmap []uint64, prepare func(seed uint64) (*Sampler, int)) {
	t.Helper()
	sum := make([]float64, n)
	vsum := make([]float64, n)
	var total, totalVar, maxW float64
	for seed := range uint64(seeds) {
		s, epoch := prepare(seed)
		forced, d := forcedNow(s)
		got, err := s.Draw(epoch, tb, bitmap)
		if err != nil {
			t.Fatal(err)
		}
		count := make([]float64, n)
		for _, id := range got.Order {
			count[id]++
		}
		var qw, qw2 float64
		for id, w32 := range got.Weight {
			w := float64(w32)
			if !(w > 0) || math.IsInf(w, 0) {
				t.Fatalf("seed %d: weight[%d] = %v", seed, id, w)
			}
			maxW = max(maxW, w)
			c := 1 / w
			if forced[id] {
				c--
			}
			q := c / float64(d)
			sum[id] += count[id] * w
			total += count[id] * w
			vsum[id] += w * w * float64(d) * q * (1 - q)
			qw += q * w
			qw2 += q * w * w
		}
		totalVar += float64(d) * (qw2 - qw*qw)
	}
	S := float64(seeds)
	worst := 0.0
	for id := range n {
		mean := sum[id] / S
		sd := math.Sqrt(vsum[id]) / S
		if z := math.Abs(mean-1) / sd; z > 5.5 {
			t.Errorf("sample %d: mean count×weight %.4f, sd %.4f (z = %.1f)", id, mean, sd, z)
		}
		worst = max(worst, math.Abs(mean-1))
	}
	mean := total / (S * float64(n))
	sd := math.Sqrt(totalVar) / (S * float64(n))
	if z := math.Abs(mean-1) / sd; z > 5 {
		t.Errorf("overall mean count×weight %.5f, sd %.5f (z = %.1f)", mean, sd, z)
	}
	t.Logf("overall mean %.5f (sd %.5f); worst sample off by %.3f; max weight %.3f", mean, sd, worst, maxW)
}

func TestDrawUnbiased(t *testing.T) {
	const n, seeds = 200, 2000
	tb := longTailTable(n)
	bitmap := everyThird(n)
	t.Run("epoch 1", func(t *testing.T) {
		unbiasedness(t, n, seeds, tb, bitmap, func(seed uint64) (*Sampler, int) {
			s := NewSampler(n, boostedConfig(seed))
			if _, err := s.Order(0, tb); err != nil {
				t.Fatal(err)
			}
			return s, 1
		})
	})
	t.Run("forced by coverage", func(t *testing.T) {
		// K = 2: epoch 2 forces whatever epoch 1 missed, a different set
		// for each seed.
		unbiasedness(t, n, seeds, tb, bitmap, func(seed uint64) (*Sampler, int) {
			cfg := boostedConfig(seed)
			cfg.CoverageEpochs = 2
			s := NewSampler(n, cfg)
			for e := range 2 {
				if _, err := s.Draw(e, tb, bitmap); err != nil {
					t.Fatal(err)
				}
			}
			return s, 2
		})
	})
	t.Run("coupled draws", func(t *testing.T) {
		// DrawSeed in place of Seed's stream: the same marginals.
		unbiasedness(t, n, seeds, tb, bitmap, func(seed uint64) (*Sampler, int) {
			cfg := boostedConfig(seed)
			cfg.DrawSeed = seed + 1
			s := NewSampler(n, cfg)
			if _, err := s.Order(0, tb); err != nil {
				t.Fatal(err)
			}
			return s, 1
		})
	})
	t.Run("restored state", func(t *testing.T) {
		// One coverage state for every seed, restored with UnmarshalBinary:
		// samples 0..49 were last drawn in epoch 0 and are forced into
		// epoch 3 under K = 3.
		cfg := boostedConfig(0)
		cfg.CoverageEpochs = 3
		src := NewSampler(n, Config{})
		for e := range 3 {
			if _, err := src.Order(e, nil); err != nil {
				t.Fatal(err)
			}
		}
		for id := range n {
			src.last[id] = 2
			if id < 50 {
				src.last[id] = 0
			}
		}
		state, _ := src.MarshalBinary()
		unbiasedness(t, n, seeds, tb, bitmap, func(seed uint64) (*Sampler, int) {
			cfg.Seed = seed
			s := NewSampler(n, cfg)
			if err := s.UnmarshalBinary(state); err != nil {
				t.Fatal(err)
			}
			if forced, d := forcedNow(s); d != n-50 || !forced[49] || forced[50] {
				t.Fatalf("restored state forces %d samples", n-d)
			}
			return s, 3
		})
	})
}

func TestDrawWeightCap(t *testing.T) {
	const n = 500
	tb := longTailTable(n)
	bitmap := everyThird(n)
	for _, m := range []float64{1, 1.5, 4, 30} {
		cfg := boostedConfig(7)
		cfg.UniformFloor = 0 // the tail would reach weights in the hundreds
		cfg.CoverageEpochs = 2
		cfg.MaxWeight = m
		s := NewSampler(n, cfg)
		for e := range 6 {
			got, err := s.Draw(e, tb, bitmap)
			if err != nil {
				t.Fatal(err)
			}
			maxW := 0.0
			for id, w := range got.Weight {
				if !(w > 0) || math.IsInf(float64(w), 0) {
					t.Fatalf("MaxWeight %v epoch %d: weight[%d] = %v", m, e, id, w)
				}
				maxW = max(maxW, float64(w))
			}
			if maxW > m*(1+1e-6) {
				t.Fatalf("MaxWeight %v epoch %d: weight %v", m, e, maxW)
			}
			if e > 0 && m >= 4 && maxW < m*(1-1e-6) {
				t.Fatalf("MaxWeight %v epoch %d: largest weight %v; the cap does not bind", m, e, maxW)
			}
		}
	}
	// Without a cap the same configuration has weights far above it.
	cfg := boostedConfig(7)
	cfg.UniformFloor, cfg.MaxWeight = 0, 0
	s := NewSampler(n, cfg)
	_, _ = s.Order(0, tb)
	got, _ := s.Draw(1, tb, bitmap)
	if maxW := slices.Max(got.Weight); maxW < 30 {
		t.Fatalf("uncapped largest weight %v", maxW)
	}
}

// The boost moves probability between samples of one stratum only: each
// stratum's total is what it was without the boost.
func TestBoostKeepsStrataShares(t *testing.T) {
	const n = 1000
	tb := longTailTable(n)
	bitmap := everyThird(n)
	for _, strata := range []int{1, 3, 8, 999, 5000} {
		cfg := Config{PADS: true, UniformFloor: 0.1, Boost: 3, Strata: strata}
		s := NewSampler(n, cfg)
		s.fillProb(tb)
		before := slices.Clone(s.prob[:n])
		sorted := make([]uint32, n)
		for i := range sorted {
			sorted[i] = uint32(i)
		}
		slices.SortStableFunc(sorted, func(a, b uint32) int { return cmpFloat(before[a], before[b]) })
		s.boost(bitmap)
		after := s.prob[:n]
		k := min(strata, n)
		start, moved := 0, 0.0
		for j := range k {
			size := n / k
			if j < n%k {
				size++
			}
			var sb, sa float64
			for _, id := range sorted[start : start+size] {
				sb += before[id]
				sa += after[id]
				moved += math.Abs(after[id] - before[id])
				if isResident(bitmap, id) != (after[id] >= before[id]) && after[id] != before[id] {
					t.Fatalf("strata %d: sample %d moved the wrong way", strata, id)
				}
			}
			start += size
			if math.Abs(sa-sb) > 1e-12*sb {
				t.Fatalf("strata %d: stratum %d holds %v, was %v", strata, j, sa, sb)
			}
		}
		if strata <= 8 && moved == 0 {
			t.Fatalf("strata %d: the boost moved nothing", strata)
		}
	}
}

// The boost raises the share of draws that land on resident samples.
func TestBoostRaisesResidentShare(t *testing.T) {
	const n, seeds = 200, 300
	tb := longTailTable(n)
	bitmap := everyThird(n)
	share := func(boost float64) float64 {
		var res, all int
		for seed := range uint64(seeds) {
			cfg := DefaultConfig()
			cfg.Seed, cfg.Boost = seed, boost
			s := NewSampler(n, cfg)
			_, _ = s.Order(0, tb)
			got, err := s.Draw(1, tb, bitmap)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range got.Order {
				all++
				if isResident(bitmap, id) {
					res++
				}
			}
		}
		return float64(res) / float64(all)
	}
	plain, boosted := share(0), share(3)
	t.Logf("resident share of draws: %.3f plain, %.3f with boost 3", plain, boosted)
	// A third of the samples are resident; within a stratum boost 3 moves
	// their share from about 1/3 to about 2/3. The standard error of each
	// share is below 0.003.
	if boosted < plain+0.2 {
		t.Fatalf("resident share %.3f with boost, %.3f without", boosted, plain)
	}
}

func TestDrawDeterministic(t *testing.T) {
	const n = 2000
	tb := longTailTable(n)
	bitmap := everyThird(n)
	cfg := boostedConfig(99)
	cfg.CoverageEpochs = 3
	a, b := NewSampler(n, cfg), NewSampler(n, cfg)
	for e := range 6 {
		da, err := a.Draw(e, tb, bitmap)
		if err != nil {
			t.Fatal(err)
		}
		db, err := b.Draw(e, tb, slices.Clone(bitmap))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(da.Order, db.Order) || !slices.Equal(da.Weight, db.Weight) {
			t.Fatalf("epoch %d: two samplers drew differently", e)
		}
	}
}

// The new fields at zero change nothing: Draw's order is Order's, and a
// boost with no resident sample, or with every sample resident, is no boost.
func TestDrawOldConfigsUnchanged(t *testing.T) {
	const n = 1000
	tb := skewedTable(n)
	base := DefaultConfig()
	base.Seed = 1
	base.CoverageEpochs = 3
	none := make([]uint64, (n+63)/64)
	all := make([]uint64, (n+63)/64)
	for i := range all {
		all[i] = ^uint64(0)
	}
	for _, c := range []struct {
		name   string
		boost  float64
		bitmap []uint64
	}{
		{"no boost", 0, everyThird(n)},
		{"nil bitmap", 3, nil},
		{"none resident", 3, none},
		{"all resident", 3, all},
	} {
		cfg := base
		cfg.Boost = c.boost
		ref, s := NewSampler(n, base), NewSampler(n, cfg)
		for e := range 5 {
			want, err := ref.Order(e, tb)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Draw(e, tb, c.bitmap)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Order, want) {
				t.Fatalf("%s: epoch %d order differs from Order's", c.name, e)
			}
			if e == 0 && slices.ContainsFunc(got.Weight, func(w float32) bool { return w != 1 }) {
				t.Fatalf("%s: epoch 0 weights not all 1", c.name)
			}
		}
	}
	// PADS off: permutations, weights 1, whatever the new fields say.
	s := NewSampler(n, Config{Seed: 8, Boost: 5, MaxWeight: 2})
	for e := range 3 {
		got, err := s.Draw(e, tb, everyThird(n))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Order, permutation(n, 8, e)) || slices.ContainsFunc(got.Weight, func(w float32) bool { return w != 1 }) {
			t.Fatalf("PADS off epoch %d: not a plain permutation with weights 1", e)
		}
	}
	// K = 1 forces every sample every epoch: a permutation, weights 1.
	s = NewSampler(n, Config{Seed: 8, PADS: true, CoverageEpochs: 1, Boost: 5, MaxWeight: 2})
	for e := range 3 {
		got, _ := s.Draw(e, tb, everyThird(n))
		if !isPermutation(got.Order, n) || slices.ContainsFunc(got.Weight, func(w float32) bool { return w != 1 }) {
			t.Fatalf("K=1 epoch %d: not a permutation with weights 1", e)
		}
	}
}

// A sample that no draw can yield has weight 0 and is not in the order.
func TestDrawUndrawableSample(t *testing.T) {
	const n = 64
	tb := NewTable(n, 0, ScoreRankLog)
	for id := range n {
		_ = tb.Set(uint32(id), 5)
	}
	_ = tb.Set(9, 1) // weight max(0, 1-3) = 0
	s := NewSampler(n, Config{PADS: true, Lambda: -3})
	_, _ = s.Order(0, tb)
	got, err := s.Draw(1, tb, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Weight[9] != 0 || slices.Contains(got.Order, 9) {
		t.Fatalf("undrawable sample: weight %v, in order %v", got.Weight[9], slices.Contains(got.Order, 9))
	}
	// The others share 64 draws equally: expected count 64/63.
	if w := got.Weight[10]; math.Abs(float64(w)*64/63-1) > 1e-6 {
		t.Fatalf("weight of a drawable sample %v, want 63/64", w)
	}
}

func TestDrawConfigValidation(t *testing.T) {
	for _, bad := range []Config{
		{MaxWeight: 0.5}, {MaxWeight: -1}, {MaxWeight: math.NaN()}, {MaxWeight: math.Inf(1)},
		{Boost: -1}, {Boost: math.NaN()}, {Boost: math.Inf(1)},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
		if _, err := NewSampler(3, bad).Draw(0, nil, nil); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: Draw: %v", bad, err)
		}
	}
	for _, good := range []Config{{MaxWeight: 1}, {MaxWeight: 1e9, Boost: 1e9}, {Strata: -4}} {
		if err := good.Validate(); err != nil {
			t.Errorf("%+v: %v", good, err)
		}
	}
	if c := NewSampler(1, Config{Strata: -4}).Config(); c.Strata != DefaultStrata {
		t.Errorf("strata %d, want %d", c.Strata, DefaultStrata)
	}
	if c := NewSampler(1, Config{Strata: 3}).Config(); c.Strata != 3 {
		t.Errorf("strata %d, want 3", c.Strata)
	}
	// Draw refuses what Order refuses, and leaves the sampler as it was.
	s := NewSampler(10, DefaultConfig())
	if _, err := s.Draw(1, nil, nil); !errors.Is(err, ErrEpochOutOfSequence) {
		t.Fatalf("out of sequence: %v", err)
	}
	_, _ = s.Draw(0, nil, nil)
	if _, err := s.Draw(1, NewTable(9, 0, ScoreRankLog), nil); !errors.Is(err, ErrSizeMismatch) || s.Next() != 1 {
		t.Fatalf("size mismatch: %v, next %d", err, s.Next())
	}
}

// sortByProb orders by value, then id, as a comparison sort does.
func TestSortByProb(t *testing.T) {
	rng := newRand(3)
	for _, n := range []int{0, 1, 2, 7, 1000, 5000} {
		s := NewSampler(n, Config{PADS: true})
		s.prob = make([]float64, n)
		for i := range s.prob {
			switch rng.IntN(4) {
			case 0:
				s.prob[i] = float64(rng.IntN(3)) // ties, zero included
			case 1:
				s.prob[i] = rng.Float64() * 1e-300
			default:
				s.prob[i] = rng.ExpFloat64() * 1e6
			}
		}
		ids := make([]uint32, 0, n)
		for i := range n {
			if i%5 != 2 {
				ids = append(ids, uint32(i))
			}
		}
		want := slices.Clone(ids)
		slices.SortStableFunc(want, func(a, b uint32) int { return cmpFloat(s.prob[a], s.prob[b]) })
		s.sortByProb(ids)
		if !slices.Equal(ids, want) {
			t.Fatalf("n=%d: radix order differs from the comparison sort", n)
		}
	}
}

// Draws are part of the protocol between peers, like orders: this pins
// boosted, capped epochs' orders and weights (see TestOrderGolden), with
// the sampler's own stream and with coupled draws (DrawSeed).
func TestDrawGolden(t *testing.T) {
	const n = 1000
	tb := longTailTable(n)
	for _, c := range []struct {
		coverage int
		drawSeed uint64
		want     []uint32
	}{
		{2, 0, []uint32{0xe904636a, 0xc73242b8, 0xe235c87d, 0xf6e7e5c8, 0x3951a636, 0xe47b2f48, 0xfb10282a, 0x1a2b981b}},
		{-1, 77, []uint32{0xe904636a, 0xc73242b8, 0xd51ea3c7, 0xf6e7e5c8, 0x8a7e49bb, 0xf6e7e5c8, 0x548532d8, 0xf6e7e5c8}},
	} {
		cfg := boostedConfig(1)
		cfg.CoverageEpochs, cfg.DrawSeed = c.coverage, c.drawSeed
		s := NewSampler(n, cfg)
		var got []uint32
		for e := range 4 {
			d, err := s.Draw(e, tb, everyThird(n))
			if err != nil {
				t.Fatal(err)
			}
			wbits := make([]uint32, n)
			for i, w := range d.Weight {
				wbits[i] = math.Float32bits(w)
			}
			got = append(got, checksum(u32bytes(d.Order)), checksum(u32bytes(wbits)))
		}
		if OrderVersion != 2 || !slices.Equal(got, c.want) {
			t.Errorf("draws of version %d with DrawSeed %d hash to %#x, want %#x", OrderVersion, c.drawSeed, got, c.want)
		}
	}
}

// FuzzDraw checks Draw's invariants on arbitrary scores, configurations and
// residency: a full order of valid ids, weights that are 1/E[count] for a
// distribution of D draws (the expected counts of the draws sum to D), and,
// with a cap, every weight in (0, MaxWeight].
func FuzzDraw(f *testing.F) {
	f.Add([]byte("\x40\x03\x04\x08\x01\x02scores and residency"))
	f.Add([]byte("\x07\x00\x00\x00\x00\x00"))
	f.Add([]byte("\xff\xff\x01\x01\x03\x00\xff\x00\x00\x80\x7f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 6 {
			return
		}
		n := int(data[0])%150 + 1
		cfg := Config{
			Seed:           uint64(data[1]),
			PADS:           true,
			Boost:          float64(data[2]%16) / 2,
			MaxWeight:      []float64{0, 1, 1.25, 2, 4, 100}[data[3]%6],
			Strata:         int(data[4]%12) - 1,
			CoverageEpochs: int(data[5]%4) - 1,
			UniformFloor:   float64(data[1]%3) / 4,
			Lambda:         -float64(data[2]>>4) / 4,
		}
		if data[4]&0x80 != 0 {
			cfg.DrawSeed = uint64(data[5]) + 1
		}
		rest := data[6:]
		tb := NewTable(n, 0, ScoreMagnitude)
		bitmap := make([]uint64, (n+63)/64)
		for id := range n {
			if id >= len(rest) {
				break
			}
			b := rest[id]
			if b&1 != 0 {
				bitmap[id/64] |= 1 << (id % 64)
			}
			if b&2 != 0 {
				_ = tb.Set(uint32(id), float64(b>>2)/4) // 0 to 15.75, ties likely
			}
		}
		s := NewSampler(n, cfg)
		for e := range 4 {
			forced, d := forcedNow(s)
			got := mustDraw(t, s, e, tb, bitmap)
			for _, id := range got.Order {
				if int(id) >= n {
					t.Fatalf("id %d", id)
				}
			}
			if e == 0 {
				continue
			}
			var drawn float64
			for id, w32 := range got.Weight {
				w := float64(w32)
				if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 || (w == 0 && (cfg.MaxWeight > 0 || slices.Contains(got.Order, uint32(id)))) {
					t.Fatalf("epoch %d: weight[%d] = %v", e, id, w)
				}
				if cfg.MaxWeight > 0 && w > cfg.MaxWeight*(1+1e-6) {
					t.Fatalf("epoch %d: weight[%d] = %v above %v", e, id, w, cfg.MaxWeight)
				}
				if forced[id] && w > 1 {
					t.Fatalf("epoch %d: forced sample %d has weight %v", e, id, w)
				}
				if w > 0 {
					c := 1 / w
					if forced[id] {
						c--
					}
					drawn += c
				}
			}
			if d > 0 && math.Abs(drawn-float64(d)) > 1e-5*float64(d) {
				t.Fatalf("epoch %d: expected counts of the draws sum to %v, want %d", e, drawn, d)
			}
		}
	})
}

// mustDraw draws epoch e with s and fails the test on an error or on an
// order or weights not of the sampler's length.
func mustDraw(t testing.TB, s *Sampler, e int, tb *Table, resident []uint64) Drawn {
	t.Helper()
	got, err := s.Draw(e, tb, resident)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Order) != s.Len() || len(got.Weight) != s.Len() {
		t.Fatalf("epoch %d: %d ids, %d weights for %d samples", e, len(got.Order), len(got.Weight), s.Len())
	}
	return got
}

// Samplers of different seeds that share a DrawSeed draw the same samples
// where their tables agree: with equal tables every sample's count in the
// epoch is the same, and with tables that differ by noise they share far
// more draws than independent samplers do.
func TestCoupledDraws(t *testing.T) {
	const n = 5000
	a := longTailTable(n)
	b := NewTable(n, 0, ScoreMagnitude)
	rng := newRand(5)
	for id := range n {
		if a.Scored(uint32(id)) {
			_ = b.Set(uint32(id), a.Score(uint32(id))*(0.7+0.6*rng.Float64()))
		}
	}
	counts := func(seed, drawSeed uint64, tb *Table) []int {
		cfg := boostedConfig(seed)
		cfg.DrawSeed = drawSeed
		s := NewSampler(n, cfg)
		if _, err := s.Order(0, tb); err != nil {
			t.Fatal(err)
		}
		d, err := s.Draw(1, tb, everyThird(n))
		if err != nil {
			t.Fatal(err)
		}
		c := make([]int, n)
		for _, id := range d.Order {
			c[id]++
		}
		return c
	}
	shared := func(x, y []int) int {
		m := 0
		for i := range x {
			m += min(x[i], y[i])
		}
		return m
	}
	if x, y := counts(1, 9, a), counts(2, 9, a); !slices.Equal(x, y) {
		t.Fatalf("equal tables, one DrawSeed: %d of %d draws shared, want all", shared(x, y), n)
	}
	coupled := shared(counts(1, 9, a), counts(2, 9, b))
	independent := shared(counts(1, 0, a), counts(2, 0, b))
	t.Logf("draws shared by two samplers of noisy tables: coupled %d, independent %d of %d", coupled, independent, n)
	if 2*(n-coupled) > n-independent {
		t.Errorf("coupled draws differ in %d of %d, independent in %d: want at most half as many", n-coupled, n, n-independent)
	}
}
