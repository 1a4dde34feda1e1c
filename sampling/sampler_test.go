package sampling

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// skewedTable scores a tenth of n samples at 4.2 and the rest at 2.4, and
// leaves every seventh unscored.
func skewedTable(n int) *Table {
	tb := NewTable(n, 0, ScoreRankLog)
	for id := range n {
		if id%7 == 3 {
			continue
		}
		s := 2.4
		if id%10 == 0 {
			s = 4.2
		}
		_ = tb.Set(uint32(id), s)
	}
	return tb
}

func isPermutation(order []uint32, n int) bool {
	if len(order) != n {
		return false
	}
	seen := make([]bool, n)
	for _, id := range order {
		if int(id) >= n || seen[id] {
			return false
		}
		seen[id] = true
	}
	return true
}

func orders(t *testing.T, s *Sampler, tables []*Table) [][]uint32 {
	t.Helper()
	var out [][]uint32
	for e, tb := range tables {
		o, err := s.Order(e, tb)
		if err != nil {
			t.Fatalf("epoch %d: %v", e, err)
		}
		if len(o) != s.Len() {
			t.Fatalf("epoch %d: %d ids, want %d", e, len(o), s.Len())
		}
		out = append(out, o)
	}
	return out
}

func TestOrderDeterministic(t *testing.T) {
	const n, epochs = 2000, 6
	cfg := DefaultConfig()
	cfg.Seed = 42
	cfg.CoverageEpochs = 3

	// Tables evolve between epochs, as reports arrive; keep each epoch's
	// encoding so that another process can be handed the same contents.
	rng := newRand(9)
	live := skewedTable(n)
	var snaps [][]byte
	var tables []*Table
	for range epochs {
		snap, _ := live.MarshalBinary()
		snaps = append(snaps, snap)
		cp := NewTable(n, 0, ScoreRankLog)
		if err := cp.UnmarshalBinary(snap); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, cp)
		ids := make([]uint32, 256)
		losses := make([]float64, 256)
		for i := range ids {
			ids[i] = uint32(rng.IntN(n))
			losses[i] = rng.ExpFloat64()
		}
		if err := live.Report(ids, losses, rng); err != nil {
			t.Fatal(err)
		}
	}
	first := orders(t, NewSampler(n, cfg), tables)

	// "Any process": a fresh sampler and tables rebuilt from the encodings
	// (the running mean comes out of a different history) replay the same.
	var rebuilt []*Table
	for _, snap := range snaps {
		var tb Table
		if err := tb.UnmarshalBinary(snap); err != nil {
			t.Fatal(err)
		}
		rebuilt = append(rebuilt, &tb)
	}
	second := orders(t, NewSampler(n, cfg), rebuilt)
	for e := range first {
		if !slices.Equal(first[e], second[e]) {
			t.Fatalf("epoch %d: replayed order differs", e)
		}
	}
	if !isPermutation(first[0], n) {
		t.Fatalf("epoch 0 is not a permutation")
	}
	if isPermutation(first[1], n) {
		t.Fatalf("epoch 1 with PADS is a permutation: no draws with replacement?")
	}

	other := cfg
	other.Seed = 43
	third := orders(t, NewSampler(n, other), tables)
	for e := range first {
		if slices.Equal(first[e], third[e]) {
			t.Fatalf("epoch %d: seeds 42 and 43 give the same order", e)
		}
	}
	for e := 1; e < epochs; e++ {
		if slices.Equal(first[e], first[e-1]) {
			t.Fatalf("epochs %d and %d equal", e-1, e)
		}
	}
}

func TestOrderSequence(t *testing.T) {
	s := NewSampler(10, DefaultConfig())
	tb := NewTable(10, 0, ScoreRankLog)
	for _, e := range []int{1, -1} {
		if _, err := s.Order(e, tb); !errors.Is(err, ErrEpochOutOfSequence) {
			t.Fatalf("epoch %d first: %v", e, err)
		}
	}
	if _, err := s.Order(0, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range []int{0, 2, 5} {
		if _, err := s.Order(e, tb); !errors.Is(err, ErrEpochOutOfSequence) {
			t.Fatalf("epoch %d after 0: %v", e, err)
		}
	}
	if _, err := s.Order(1, NewTable(11, 0, ScoreRankLog)); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("wrong table: %v", err)
	}
	if _, err := s.Order(1, nil); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("nil table: %v", err)
	}
	if s.Next() != 1 {
		t.Fatalf("failed calls advanced the sampler to %d", s.Next())
	}
	if _, err := s.Order(1, tb); err != nil || s.Next() != 2 {
		t.Fatalf("epoch 1: %v, next %d", err, s.Next())
	}
}

func TestConfig(t *testing.T) {
	c := NewSampler(1, Config{UniformFloor: -1, CoverageEpochs: -3}).Config()
	if c.UniformFloor != DefaultUniformFloor || c.CoverageEpochs != DefaultCoverageEpochs || c.Lambda != 0 {
		t.Fatalf("defaults not filled: %+v", c)
	}
	c = NewSampler(1, Config{}).Config()
	if c.UniformFloor != 0 || c.CoverageEpochs != 0 || c.PADS {
		t.Fatalf("zero config changed: %+v", c)
	}
	in := Config{UniformFloor: -1}
	NewSampler(1, in)
	if in.UniformFloor != -1 {
		t.Fatalf("caller's config written")
	}
	for _, bad := range []Config{
		{Lambda: math.NaN()}, {Lambda: math.Inf(-1)}, {UniformFloor: math.NaN()}, {UniformFloor: 1.5},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
		if _, err := NewSampler(3, bad).Order(0, nil); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: Order: %v", bad, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// Draw counts follow (1-u)*w_i/W + u/n. There is no forcing (K = 0), so the
// draws of one epoch are a multinomial sample and the counts over several
// epochs are too. The seeds are fixed, so the test is deterministic; the
// bounds (6 standard deviations of the chi-square statistic, 5 of each group
// total) would fail by chance less than once in 10^8 runs for any seed.
func TestDrawFrequencies(t *testing.T) {
	const n, epochs = 1000, 30
	for _, c := range []struct {
		name          string
		lambda, floor float64
	}{
		{"plain", 0, 0},
		{"floor", 0, 0.1},
		{"sharpened", -2, 0.05},
		{"flattened", 3, 0.5},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := NewTable(n, 0, ScoreRankLog)
			for id := range n {
				s := 2.5
				if id%2 == 0 {
					s = 4.0
				}
				_ = tb.Set(uint32(id), s)
			}
			var wsum float64
			w := make([]float64, n)
			for id := range n {
				w[id] = max(0, tb.Score(uint32(id))+c.lambda)
				wsum += w[id]
			}
			p := make([]float64, n)
			for id := range n {
				p[id] = (1-c.floor)*w[id]/wsum + c.floor/n
			}

			s := NewSampler(n, Config{Seed: 1234, PADS: true, Lambda: c.lambda, UniformFloor: c.floor})
			counts := make([]float64, n)
			if _, err := s.Order(0, tb); err != nil {
				t.Fatal(err)
			}
			for e := 1; e <= epochs; e++ {
				o, err := s.Order(e, tb)
				if err != nil {
					t.Fatal(err)
				}
				for _, id := range o {
					counts[id]++
				}
			}
			draws := float64(n * epochs)
			var chi2, hi, phi float64
			for id := range n {
				exp := draws * p[id]
				chi2 += (counts[id] - exp) * (counts[id] - exp) / exp
				if id%2 == 0 {
					hi += counts[id]
					phi += p[id]
				}
			}
			df := float64(n - 1)
			if limit := df + 6*math.Sqrt(2*df); chi2 > limit {
				t.Errorf("chi-square %.0f over %d cells, limit %.0f", chi2, n, limit)
			}
			sd := math.Sqrt(draws * phi * (1 - phi))
			if z := (hi - draws*phi) / sd; math.Abs(z) > 5 {
				t.Errorf("high group drawn %.0f times, expected %.0f (z = %.1f)", hi, draws*phi, z)
			}
			t.Logf("chi-square %.0f (df %d); high group %.0f, expected %.0f", chi2, n-1, hi, draws*phi)
		})
	}
}

// After the samples have been reported a few times, the most important tenth
// is drawn clearly more often than the least important tenth, with the
// default configuration.
func TestImportantSamplesDrawnMoreOften(t *testing.T) {
	const n, batch = 1000, 250
	rng := newRand(77)
	tb := NewTable(n, 0, ScoreRankLog)
	for range 3 { // three epochs of reports: loss grows with the id, plus noise
		perm := rng.Perm(n)
		for start := 0; start < n; start += batch {
			ids := make([]uint32, batch)
			losses := make([]float64, batch)
			for i, id := range perm[start : start+batch] {
				ids[i] = uint32(id)
				losses[i] = float64(id) + 100*rng.NormFloat64()
			}
			if err := tb.Report(ids, losses, rng); err != nil {
				t.Fatal(err)
			}
		}
	}
	byScore := make([]uint32, n)
	for i := range byScore {
		byScore[i] = uint32(i)
	}
	slices.SortFunc(byScore, func(a, b uint32) int { return cmpFloat(tb.Score(a), tb.Score(b)) })
	low, high := byScore[:n/10], byScore[n-n/10:]

	cfg := DefaultConfig()
	cfg.Seed = 5
	s := NewSampler(n, cfg)
	counts := make([]int, n)
	if _, err := s.Order(0, tb); err != nil {
		t.Fatal(err)
	}
	for e := 1; e <= 10; e++ {
		o, err := s.Order(e, tb)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range o {
			counts[id]++
		}
	}
	var lo, hi int
	for i := range low {
		lo += counts[low[i]]
		hi += counts[high[i]]
	}
	t.Logf("top tenth drawn %d times, bottom tenth %d (scores %.3f..%.3f vs %.3f..%.3f)",
		hi, lo, tb.Score(high[0]), tb.Score(high[len(high)-1]), tb.Score(low[0]), tb.Score(low[len(low)-1]))
	// Expected ratio about 1.45 (scores ≈ 4.16 vs 2.75, diluted by the
	// uniform floor); 1.25 is more than three standard deviations below it.
	if float64(hi) < 1.25*float64(lo) {
		t.Fatalf("top tenth drawn %d times, bottom tenth %d: want at least 1.25x", hi, lo)
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// With very skewed scores and no uniform floor, only the coverage floor brings
// the unimportant samples back: every sample appears in every window of K
// consecutive epochs.
func TestCoverageFloor(t *testing.T) {
	const n, epochs = 500, 24
	tb := NewTable(n, 0, ScoreRankLog)
	for id := range n {
		s := 0.0
		if id < 5 {
			s = 1e6
		}
		_ = tb.Set(uint32(id), s)
	}
	for _, k := range []int{1, 2, 3, 5, 8} {
		s := NewSampler(n, Config{Seed: uint64(k), PADS: true, UniformFloor: 0, CoverageEpochs: k})
		var seen [][]bool
		for e := range epochs {
			o, err := s.Order(e, tb)
			if err != nil {
				t.Fatal(err)
			}
			if len(o) != n {
				t.Fatalf("K=%d epoch %d: %d ids", k, e, len(o))
			}
			if k == 1 && !isPermutation(o, n) {
				t.Fatalf("K=1 epoch %d is not a permutation", e)
			}
			in := make([]bool, n)
			for _, id := range o {
				in[id] = true
			}
			seen = append(seen, in)
		}
		for start := 0; start+k <= epochs; start++ {
			for id := range n {
				found := false
				for e := start; e < start+k; e++ {
					found = found || seen[e][id]
				}
				if !found {
					t.Fatalf("K=%d: sample %d absent from epochs %d..%d", k, id, start, start+k-1)
				}
			}
		}
	}

	// Without the floor the same scores starve almost every sample.
	s := NewSampler(n, Config{Seed: 1, PADS: true})
	_, _ = s.Order(0, tb)
	missing := 0
	in := make([]bool, n)
	for e := 1; e <= 5; e++ {
		o, _ := s.Order(e, tb)
		for _, id := range o {
			in[id] = true
		}
	}
	for _, ok := range in {
		if !ok {
			missing++
		}
	}
	if missing < n-10 {
		t.Fatalf("without coverage only %d samples missing over 5 epochs; the test's skew is too weak", missing)
	}
}

func TestOrderEdgeCases(t *testing.T) {
	for _, n := range []int{0, 1, 2} {
		s := NewSampler(n, DefaultConfig())
		tb := NewTable(n, 0, ScoreRankLog)
		for e := range 4 {
			o, err := s.Order(e, tb)
			if err != nil || len(o) != n {
				t.Fatalf("n=%d epoch %d: %v, %d ids", n, e, err, len(o))
			}
		}
	}
	// All weights zero (lambda below every score, no floor): uniform draws.
	tb := NewTable(50, 0, ScoreRankLog)
	s := NewSampler(50, Config{PADS: true, Lambda: -100})
	_, _ = s.Order(0, tb)
	o, err := s.Order(1, tb)
	if err != nil || len(o) != 50 {
		t.Fatalf("zero weights: %v %d", err, len(o))
	}
	// Huge scores and lambda do not overflow into NaN probabilities.
	for id := range 50 {
		_ = tb.Set(uint32(id), math.MaxFloat32)
	}
	s = NewSampler(50, Config{PADS: true, Lambda: math.MaxFloat64})
	_, _ = s.Order(0, tb)
	if o, err := s.Order(1, tb); err != nil || len(o) != 50 {
		t.Fatalf("huge weights: %v %d", err, len(o))
	}
}

func TestPADSOffIsUniform(t *testing.T) {
	const n = 300
	tb := skewedTable(n)
	s := NewSampler(n, Config{Seed: 8, PADS: false, CoverageEpochs: 2})
	for e := range 4 {
		o, err := s.Order(e, tb)
		if err != nil {
			t.Fatal(err)
		}
		if !isPermutation(o, n) {
			t.Fatalf("epoch %d not a permutation", e)
		}
		if !slices.Equal(o, permutation(n, 8, e)) {
			t.Fatalf("epoch %d differs from the uniform permutation", e)
		}
	}
}

// An alias table reproduces its distribution: summing each column's
// acceptance and alias mass gives n*p_i, up to the 32-bit acceptance.
func TestAliasTableExact(t *testing.T) {
	const n = 257
	tb := NewTable(n, 0, ScoreRankLog)
	rng := newRand(4)
	for id := range n {
		if id%3 != 0 {
			_ = tb.Set(uint32(id), rng.Float64()*10)
		}
	}
	s := NewSampler(n, Config{PADS: true, Lambda: -1, UniformFloor: 0.2})
	s.fillProb(tb)
	s.buildAlias()
	mass := make([]float64, n)
	for i, c := range s.cols[:n] {
		p := float64(c.accept) / (1 << 32)
		if c.alias == uint32(i) {
			p = 1
		}
		mass[i] += p
		mass[c.alias] += 1 - p
	}
	var wsum float64
	for id := range n {
		wsum += max(0, tb.Score(uint32(id))-1)
	}
	for id := range n {
		want := n * (0.8*max(0, tb.Score(uint32(id))-1)/wsum + 0.2/n)
		if math.Abs(mass[id]-want) > 1e-7 {
			t.Fatalf("id %d: mass %v, want %v", id, mass[id], want)
		}
	}
}

// Orders are part of the protocol between peers (OrderVersion): this pins
// them. If it fails after a deliberate change to the algorithms, bump
// OrderVersion and record the new values; if it fails on another
// architecture, the arithmetic is not deterministic.
func TestOrderGolden(t *testing.T) {
	const n = 1000
	cfg := DefaultConfig()
	cfg.Seed = 1
	cfg.CoverageEpochs = 3
	tb := skewedTable(n)
	s := NewSampler(n, cfg)
	var got []uint32
	for e := range 4 {
		o, err := s.Order(e, tb)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, checksum(u32bytes(o)))
	}
	got = append(got, checksum(u32bytes(UniformSlice(n, 3, 1, 7, 2))))
	want := []uint32{0xe904636a, 0x5f0d15f3, 0xc6e1a144, 0xcd3d1a91, 0x894661ee}
	if OrderVersion != 2 || !slices.Equal(got, want) {
		t.Fatalf("orders of version %d hash to %#x, want %#x", OrderVersion, got, want)
	}
}

func u32bytes(v []uint32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	}
	return b
}
