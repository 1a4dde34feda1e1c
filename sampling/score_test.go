package sampling

import (
	"bytes"
	"errors"
	"math"
	"math/big"
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

// TestPackedRankOrder: the losses' positions sorted by (key, position)
// through keys packed with their positions are those a sort by a
// comparison function gives, over batches with equal losses, losses that
// differ only in their last bits (their packed keys equal), NaN, both
// zeros, both infinities and negatives; and for as many losses as a
// position's bits hold. It fails where the pass that puts the keys
// equal when packed in order is left out.
func TestPackedRankOrder(t *testing.T) {
	rng := newRand(7)
	special := []float64{math.NaN(), 0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), -1, 1}
	for trial := range 500 {
		n := 1 + rng.IntN(600)
		if trial == 0 {
			n = packedPositions
		}
		losses := make([]float64, n)
		for i := range losses {
			switch rng.IntN(5) {
			case 0: // a loss of the batch again
				losses[i] = losses[rng.IntN(i+1)]
			case 1: // one that differs from another in its last bits only
				b := math.Float64bits(losses[rng.IntN(i+1)])
				losses[i] = math.Float64frombits(b ^ uint64(rng.IntN(1<<16)))
			case 2:
				losses[i] = special[rng.IntN(len(special))]
			default:
				losses[i] = rng.NormFloat64() * 3
			}
		}
		if got, want := packedRankOrder(losses), keyedRankOrder(losses); !slices.Equal(got, want) {
			t.Fatalf("trial %d, %d losses: packed order %v, want %v", trial, n, got, want)
		}
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
	tb := NewTable(10, a, ScoreRankLog)
	if tb.Alpha() != a || NewTable(1, 0, ScoreRankLog).Alpha() != DefaultAlpha {
		t.Fatalf("alpha %v / default %v", tb.Alpha(), NewTable(1, 0, ScoreRankLog).Alpha())
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

	// A minibatch of another length is scored by its own ranks.
	mean, before3 := tb.Mean(), tb.Score(3)
	if err := tb.Report([]uint32{1, 3, 8}, []float64{3, 1, 2}, newRand(1)); err != nil {
		t.Fatal(err)
	}
	check(1, merge(ln(73), mean))
	check(3, merge(ln(10), before3))
	check(8, merge(ln(41.5), mean))
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
	a, b := NewTable(n, 0, ScoreRankLog), NewTable(n, 0, ScoreRankLog)
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
		tb := NewTable(8, a, ScoreRankLog)
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
	tb := NewTable(16, 0, ScoreRankLog)
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
	tb := NewTable(5, 0, ScoreRankLog)
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
	a := NewTable(n, 0.3, ScoreRankLog)
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
	b := NewTable(n, 0, ScoreRankLog)
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

func TestScoreKindNames(t *testing.T) {
	for _, k := range []ScoreKind{ScoreRankLog, ScoreMagnitude} {
		got, err := ParseScoreKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseScoreKind(%q) = %v, %v; want %v", k.String(), got, err, k)
		}
	}
	if ScoreRankLog.String() != "rank" || ScoreMagnitude.String() != "magnitude" || ScoreKind(7).String() != "ScoreKind(7)" {
		t.Errorf("names %q %q %q", ScoreRankLog, ScoreMagnitude, ScoreKind(7))
	}
	for _, bad := range []string{"", "Rank", "loss", "ScoreKind(7)"} {
		if _, err := ParseScoreKind(bad); !errors.Is(err, ErrBadConfig) {
			t.Errorf("ParseScoreKind(%q): %v", bad, err)
		}
	}
	if err := (Config{Score: 2}).Validate(); !errors.Is(err, ErrBadConfig) {
		t.Errorf("unknown kind in Config: %v", err)
	}
	if err := (Config{Score: ScoreMagnitude}).Validate(); err != nil {
		t.Errorf("magnitude in Config: %v", err)
	}
}

func TestMagnitudeScoresKnownValues(t *testing.T) {
	// g = 1 - e^-loss: 0 for loss <= 0, 1/2 for ln 2, 3/4 for ln 4.
	hundred := make([]float64, 100)
	hundred[7] = 50
	tests := []struct {
		name   string
		losses []float64
		want   []float64
	}{
		{"empty", nil, []float64{}},
		{"m=1", []float64{0.7}, []float64{1}},
		{"all zero", []float64{0, -2, 0}, []float64{1, 1, 1}},
		// mean g = 1.25/4 = 0.3125
		{"m=4", []float64{0, math.Ln2, 2 * math.Ln2, -1}, []float64{0, 1.6, 2.4, 0}},
		// g = [1/2, 1/2, 1]: mean 2/3
		{"ties", []float64{math.Ln2, math.Ln2, 800}, []float64{0.75, 0.75, 1.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MagnitudeScores(tt.losses)
			if len(got) != len(tt.want) {
				t.Fatalf("len %d, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if math.Abs(got[i]-tt.want[i]) > 1e-12 {
					t.Errorf("score[%d] = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
	// One sample of a hundred carries all the magnitude: 100, capped at 64.
	got := MagnitudeScores(hundred)
	if got[7] != MaxMagnitudeScore || got[0] != 0 {
		t.Fatalf("capped batch: %v, %v", got[7], got[0])
	}
}

func TestReportMagnitude(t *testing.T) {
	const a = 0.5
	tb := NewTable(8, a, ScoreMagnitude)
	if tb.Kind() != ScoreMagnitude || tb.Mean() != 1 || tb.Score(3) != 1 {
		t.Fatalf("empty magnitude table: kind %v mean %v score %v", tb.Kind(), tb.Mean(), tb.Score(3))
	}
	if NewTable(1, 0, ScoreRankLog).Mean() != neutralScore || new(Table).Kind() != ScoreRankLog {
		t.Fatalf("rank-log neutral score changed")
	}
	rng := newRand(9)
	if err := tb.Report([]uint32{1, 2}, []float64{math.Ln2, 2 * math.Ln2}, rng); err != nil {
		t.Fatal(err)
	}
	// g = 1/2, 3/4, mean 5/8: scores 0.8 and 1.2, merged with the prior 1.
	for id, want := range map[uint32]float64{1: 0.9, 2: 1.1} {
		if got := tb.Score(id); math.Abs(got-want) > 1e-6 {
			t.Errorf("score[%d] = %v, want %v", id, got, want)
		}
	}
	if math.Abs(tb.Mean()-1) > 1e-6 {
		t.Errorf("mean %v, want 1", tb.Mean())
	}
	// rng is not consulted, even for ties.
	if err := tb.Report([]uint32{4, 5, 6}, []float64{1, 1, 1}, rng); err != nil {
		t.Fatal(err)
	}
	if rng.Uint64() != newRand(9).Uint64() {
		t.Errorf("Report consulted rng for a magnitude table")
	}

	// The outcome does not depend on the order of the pairs, to the bit,
	// duplicate ids included.
	ids := []uint32{0, 3, 3, 5, 7, 1}
	losses := []float64{0.3, 2.5, 0.01, -1, 7, 0.3}
	x, y := NewTable(8, 0.3, ScoreMagnitude), NewTable(8, 0.3, ScoreMagnitude)
	_ = x.Set(3, 2)
	_ = y.Set(3, 2)
	if err := x.Report(ids, losses, nil); err != nil {
		t.Fatal(err)
	}
	perm := []int{4, 2, 0, 5, 1, 3}
	pid, plo := make([]uint32, len(ids)), make([]float64, len(ids))
	for i, j := range perm {
		pid[i], plo[i] = ids[j], losses[j]
	}
	if err := y.Report(pid, plo, newRand(1)); err != nil {
		t.Fatal(err)
	}
	if err := sameTable(x, y); err != nil {
		t.Fatal(err)
	}
	if err := checkTable(x); err != nil {
		t.Fatal(err)
	}
	// The kind survives UnmarshalBinary, which carries scores only.
	b, _ := x.MarshalBinary()
	if err := y.UnmarshalBinary(b); err != nil || y.Kind() != ScoreMagnitude {
		t.Fatalf("unmarshal: %v, kind %v", err, y.Kind())
	}
}

func TestNewTablePanicsOnUnknownKind(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewTable(1, 0, ScoreKind(2))
}

// TestReportDistinctAsRanked: a ScoreMagnitude batch without a repeated
// id is merged in position order (reportDistinct); the table must come out
// the same, to the bit, as merging it in rank order does (reportRanked).
// The batch's mean magnitude must not depend on the losses' positions
// (summed in position order it differs in some batches), and be within 4
// ulps of the exact mean. Batches mix equal losses, zero and negative losses, losses
// whose magnitudes round to 1, and batches with a repeated id (which
// Report merges in rank order).
func TestReportDistinctAsRanked(t *testing.T) {
	const n = 1000
	rng := newRand(11)
	fast, ranked := NewTable(n, 0, ScoreMagnitude), NewTable(n, 0, ScoreMagnitude)
	distinctBatches, orderMatters := 0, 0
	reused := new(magnitudeSum) // one sum for every batch: each leaves it empty
	for b := range 400 {
		size := 1 + rng.IntN(300)
		ids := make([]uint32, size)
		losses := make([]float64, size)
		perm := rng.Perm(n)
		for i := range ids {
			ids[i] = uint32(perm[i])
			switch rng.IntN(6) {
			case 0:
				losses[i] = 0
			case 1:
				losses[i] = -rng.Float64()
			case 2:
				losses[i] = 40 + rng.Float64() // magnitude 1
			case 3:
				losses[i] = float64(rng.IntN(3)) // equal losses
			default:
				losses[i] = rng.ExpFloat64()
			}
		}
		if b%5 == 0 && size > 1 {
			ids[size-1] = ids[0] // a repeated id
		} else {
			distinctBatches++
		}
		var inPlace float64
		exact := new(big.Float).SetPrec(2000)
		for _, l := range losses {
			inPlace += magnitude(l)
			exact.Add(exact, big.NewFloat(magnitude(l)))
		}
		_, got := magnitudes(losses, reused) // left empty for the next batch
		shuffled := slices.Clone(losses)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if _, again := magnitudes(shuffled, new(magnitudeSum)); again != got {
			t.Fatalf("batch %d: mean magnitude %v, %v with the losses shuffled", b, got, again)
		}
		want, _ := exact.Quo(exact, big.NewFloat(float64(size))).Float64()
		if math.Abs(got-want) > 4*math.Abs(math.Nextafter(want, 2)-want) {
			t.Fatalf("batch %d: mean magnitude %v, exactly %v", b, got, want)
		}
		if inPlace/float64(size) != got {
			orderMatters++
		}
		if err := fast.Report(ids, losses, nil); err != nil {
			t.Fatal(err)
		}
		ranked.reportRanked(ids, losses, nil)
		ranked.refreshMean()
		a, _ := fast.MarshalBinary()
		r, _ := ranked.MarshalBinary()
		if !bytes.Equal(a, r) || fast.Mean() != ranked.Mean() {
			t.Fatalf("batch %d: the table merged in position order differs from the one merged in rank order (means %v, %v)", b, fast.Mean(), ranked.Mean())
		}
	}
	if distinctBatches < 300 || orderMatters == 0 {
		t.Fatalf("only %d batches without a repeated id, %d whose mean summed in position order differs", distinctBatches, orderMatters)
	}
}

// TestTableCopyToSharesNothing: a copy holds the same scores, count and
// mean, and a merge into either table leaves the other as it was,
// whether the copy is new or reuses a table's memory.
func TestTableCopyToSharesNothing(t *testing.T) {
	src := NewTable(200, 0.5, ScoreMagnitude)
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 50 {
		if err := src.Set(uint32(i*3), float64(i)/7); err != nil {
			t.Fatal(err)
		}
	}
	for k, dst := range []*Table{nil, NewTable(200, 0.5, ScoreMagnitude), NewTable(10, 0.9, ScoreRankLog)} {
		cp := src.CopyTo(dst)
		want, _ := src.MarshalBinary()
		if got, _ := cp.MarshalBinary(); !bytes.Equal(got, want) || cp.NumScored() != src.NumScored() || cp.Mean() != src.Mean() || cp.Kind() != src.Kind() {
			t.Fatalf("the copy differs: %d scored, mean %v", cp.NumScored(), cp.Mean())
		}
		if err := cp.Report([]uint32{1, 2, 3}, []float64{0.1, 0.2, 5}, rng); err != nil {
			t.Fatal(err)
		}
		if got, _ := src.MarshalBinary(); !bytes.Equal(got, want) || src.Scored(1) {
			t.Fatal("a merge into the copy changed the table it copied")
		}
		if err := src.Set(uint32(199-k), 4); err != nil {
			t.Fatal(err)
		}
		if cp.Scored(uint32(199 - k)) {
			t.Fatal("a change to the table reached its copy")
		}
	}
}
