package sampling

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x5bd1e995)) }

func ln(x float64) float64 { return math.Log(x) }

func TestNeutralScoreIsLn41point5(t *testing.T) {
	if d := math.Abs(neutralScore - math.Log(41.5)); d > 1e-15 {
		t.Fatalf("neutralScore %v differs from ln 41.5 by %v", neutralScore, d)
	}
}

func TestRankScoresKnownValues(t *testing.T) {
	tests := []struct {
		name   string
		losses []float64
		want   []float64
	}{
		{"empty", nil, []float64{}},
		{"m=1", []float64{0.7}, []float64{ln(73)}},
		{"m=2", []float64{0.5, 0.1}, []float64{ln(73), ln(10)}},
		{"m=2 negative losses", []float64{-3, -1}, []float64{ln(10), ln(73)}},
		{"m=5", []float64{3, 1, 4, 1.5, 9}, []float64{ln(41.5), ln(10), ln(57.25), ln(25.75), ln(73)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.losses)
			got := RankScores(tt.losses, newRand(1))
			if len(got) != len(tt.want) {
				t.Fatalf("len %d, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if math.Abs(got[i]-tt.want[i]) > 1e-12 {
					t.Errorf("score[%d] = %v, want %v", i, got[i], tt.want[i])
				}
			}
			if !slices.Equal(in, tt.losses) {
				t.Errorf("losses modified")
			}
		})
	}
}

func TestRankScoresTiesRandomized(t *testing.T) {
	losses := []float64{1, 1, 1, 1, 0.5, 2}
	base := RankScores(losses, newRand(1))
	// The untied entries are fixed regardless of the rng.
	if base[4] != ln(10) || base[5] != ln(73) {
		t.Fatalf("untied scores %v, %v", base[4], base[5])
	}
	differs := false
	for seed := uint64(2); seed < 20; seed++ {
		got := RankScores(losses, newRand(seed))
		if !slices.Equal(got[:4], base[:4]) {
			differs = true
		}
		a, b := slices.Clone(got), slices.Clone(base)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(a, b) {
			t.Fatalf("seed %d: multiset %v, want %v", seed, a, b)
		}
	}
	if !differs {
		t.Fatalf("tied losses got the same ranks under 19 seeds")
	}
	// Without an rng, ties keep their positions.
	want := []float64{ln(10 + 63*0.2), ln(10 + 63*0.4), ln(10 + 63*0.6), ln(10 + 63*0.8)}
	got := RankScores(losses, nil)
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("nil rng: score[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestReportMergeMath(t *testing.T) {
	const a = 0.25
	tb := NewTable(10, a)
	if tb.Alpha() != a || NewTable(1, 0).Alpha() != DefaultAlpha {
		t.Fatalf("alpha %v / default %v", tb.Alpha(), NewTable(1, 0).Alpha())
	}
	if tb.Mean() != neutralScore || tb.Score(0) != neutralScore || tb.NumScored() != 0 {
		t.Fatalf("empty table: mean %v score %v scored %d", tb.Mean(), tb.Score(0), tb.NumScored())
	}
	merge := func(s, prior float64) float64 { return float64(float32(a*s + (1-a)*prior)) }

	if err := tb.Report([]uint32{3, 7}, []float64{1, 2}, newRand(1)); err != nil {
		t.Fatal(err)
	}
	want3 := merge(ln(10), neutralScore)
	want7 := merge(ln(73), neutralScore)
	check := func(id uint32, want float64) {
		t.Helper()
		if got := tb.Score(id); math.Abs(got-want) > 1e-6 {
			t.Errorf("score[%d] = %v, want %v", id, got, want)
		}
		if !tb.Scored(id) {
			t.Errorf("id %d not scored", id)
		}
	}
	check(3, want3)
	check(7, want7)
	mean := (want3 + want7) / 2
	if tb.NumScored() != 2 || math.Abs(tb.Mean()-mean) > 1e-12 {
		t.Fatalf("scored %d mean %v, want 2, %v", tb.NumScored(), tb.Mean(), mean)
	}
	// An unscored sample's effective score is the running mean, not the minimum.
	if tb.Scored(0) || tb.Score(0) != tb.Mean() {
		t.Fatalf("unscored sample: scored %v score %v, mean %v", tb.Scored(0), tb.Score(0), tb.Mean())
	}

	// Sample 3 merges with its own score, sample 5 with the mean before the batch.
	if err := tb.Report([]uint32{5, 3}, []float64{1, 5}, newRand(1)); err != nil {
		t.Fatal(err)
	}
	check(3, merge(ln(73), want3))
	check(5, merge(ln(10), mean))
	check(7, want7)
	if tb.NumScored() != 3 {
		t.Fatalf("scored %d, want 3", tb.NumScored())
	}
}

func TestReportCreditsIDsNotPositions(t *testing.T) {
	const n = 200
	rng := newRand(3)
	ids := make([]uint32, 64)
	losses := make([]float64, 64)
	for i, id := range rng.Perm(n)[:64] {
		ids[i] = uint32(id)
		losses[i] = rng.Float64() * 10
	}
	a, b := NewTable(n, 0), NewTable(n, 0)
	for i := 0; i < 40; i++ { // some history, equal in both
		_ = a.Set(uint32(i), float64(i%7))
		_ = b.Set(uint32(i), float64(i%7))
	}
	top := ids[slices.Index(losses, slices.Max(losses))]
	topPrior := a.Score(top)
	if err := a.Report(ids, losses, newRand(1)); err != nil {
		t.Fatal(err)
	}
	perm := rng.Perm(len(ids))
	sid, slo := make([]uint32, len(ids)), make([]float64, len(ids))
	for i, j := range perm {
		sid[i], slo[i] = ids[j], losses[j]
	}
	if err := b.Report(sid, slo, newRand(99)); err != nil {
		t.Fatal(err)
	}
	for id := uint32(0); id < n; id++ {
		if a.Score(id) != b.Score(id) || a.Scored(id) != b.Scored(id) {
			t.Fatalf("id %d: %v/%v vs %v/%v", id, a.Score(id), a.Scored(id), b.Score(id), b.Scored(id))
		}
	}
	// The sample with the highest loss got the top rank's score.
	want := float64(float32(0.5*ln(73) + 0.5*topPrior))
	if math.Abs(a.Score(top)-want) > 1e-6 {
		t.Fatalf("top id %d score %v, want %v", top, a.Score(top), want)
	}
}

func TestReportDuplicateIDs(t *testing.T) {
	const a = 0.5
	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		tb := NewTable(8, a)
		ids := []uint32{4, 4}
		losses := []float64{1, 2}
		ids2 := []uint32{ids[order[0]], ids[order[1]]}
		losses2 := []float64{losses[order[0]], losses[order[1]]}
		if err := tb.Report(ids2, losses2, nil); err != nil {
			t.Fatal(err)
		}
		first := float64(float32(a*ln(10) + (1-a)*neutralScore))
		want := float64(float32(a*ln(73) + (1-a)*first))
		if got := tb.Score(4); math.Abs(got-want) > 1e-6 || tb.NumScored() != 1 {
			t.Fatalf("order %v: score %v scored %d, want %v, 1", order, got, tb.NumScored(), want)
		}
	}
}

func TestReportValidation(t *testing.T) {
	tb := NewTable(16, 0)
	if err := tb.Report([]uint32{1, 2, 3}, []float64{0.3, 0.1, 0.2}, newRand(1)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		ids    []uint32
		losses []float64
		want   error
	}{
		{"nil", nil, nil, ErrBadBatch},
		{"empty", []uint32{}, []float64{}, ErrBadBatch},
		{"more ids", []uint32{1, 2}, []float64{1}, ErrBadBatch},
		{"more losses", []uint32{1}, []float64{1, 2}, ErrBadBatch},
		{"ids only", []uint32{1}, nil, ErrBadBatch},
		{"id = n", []uint32{1, 16}, []float64{1, 2}, ErrIDOutOfRange},
		{"id max", []uint32{math.MaxUint32, 1}, []float64{1, 2}, ErrIDOutOfRange},
		{"id bad last", []uint32{0, 1, 2, 3, 4, 99}, []float64{1, 2, 3, 4, 5, 6}, ErrIDOutOfRange},
		{"NaN", []uint32{1, 2}, []float64{1, math.NaN()}, ErrLossNotFinite},
		{"+Inf", []uint32{5, 2}, []float64{math.Inf(1), 1}, ErrLossNotFinite},
		{"-Inf last", []uint32{5, 6, 7}, []float64{1, 2, math.Inf(-1)}, ErrLossNotFinite},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := tb.MarshalBinary()
			mean, scored := tb.Mean(), tb.NumScored()
			err := tb.Report(tt.ids, tt.losses, newRand(2))
			if !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
			after, _ := tb.MarshalBinary()
			if !bytes.Equal(before, after) || tb.Mean() != mean || tb.NumScored() != scored {
				t.Fatalf("table changed by a refused batch")
			}
		})
	}
}

func TestSet(t *testing.T) {
	tb := NewTable(5, 0)
	if err := tb.Set(2, 3.5); err != nil {
		t.Fatal(err)
	}
	if !tb.Scored(2) || tb.Score(2) != 3.5 || tb.Mean() != 3.5 || tb.Score(0) != 3.5 {
		t.Fatalf("after Set: scored %v score %v mean %v", tb.Scored(2), tb.Score(2), tb.Mean())
	}
	if err := tb.Set(2, 1.5); err != nil { // replace
		t.Fatal(err)
	}
	if err := tb.Set(4, -0.0); err != nil {
		t.Fatal(err)
	}
	if tb.NumScored() != 2 || tb.Mean() != 0.75 || math.Signbit(tb.Score(4)) {
		t.Fatalf("scored %d mean %v score(4) %v", tb.NumScored(), tb.Mean(), tb.Score(4))
	}
	before, _ := tb.MarshalBinary()
	for _, c := range []struct {
		id    uint32
		score float64
		want  error
	}{
		{5, 1, ErrIDOutOfRange},
		{0, math.NaN(), ErrBadScore},
		{0, math.Inf(1), ErrBadScore},
		{0, -1e-9, ErrBadScore},
		{0, 1e39, ErrBadScore},
	} {
		if err := tb.Set(c.id, c.score); !errors.Is(err, c.want) {
			t.Errorf("Set(%d, %v) = %v, want %v", c.id, c.score, err, c.want)
		}
	}
	if after, _ := tb.MarshalBinary(); !bytes.Equal(before, after) {
		t.Fatalf("table changed by refused Set")
	}
	if tb.Scored(5) || tb.Scored(math.MaxUint32) {
		t.Fatalf("Scored out of range reports true")
	}
}

// The running mean is a function of the scores held, however they got there.
func TestMeanIsHistoryIndependent(t *testing.T) {
	const n = 3000
	rng := newRand(5)
	a := NewTable(n, 0.3)
	for range 200 {
		ids := make([]uint32, 128)
		losses := make([]float64, 128)
		for i := range ids {
			ids[i] = uint32(rng.IntN(n))
			losses[i] = rng.NormFloat64()
		}
		if err := a.Report(ids, losses, rng); err != nil {
			t.Fatal(err)
		}
	}
	var sum float64
	b := NewTable(n, 0)
	for _, id := range rng.Perm(n) { // install the same scores in another order
		if a.Scored(uint32(id)) {
			sum += a.Score(uint32(id))
			if err := b.Set(uint32(id), a.Score(uint32(id))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if a.Mean() != b.Mean() || a.NumScored() != b.NumScored() {
		t.Fatalf("mean %v vs %v (scored %d vs %d)", a.Mean(), b.Mean(), a.NumScored(), b.NumScored())
	}
	if naive := sum / float64(a.NumScored()); math.Abs(naive-a.Mean()) > 1e-12 {
		t.Fatalf("mean %v, naive %v", a.Mean(), naive)
	}
	if err := checkTable(a); err != nil {
		t.Fatal(err)
	}
}
