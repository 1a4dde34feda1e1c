package sampling

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
)

// ScoreKind selects how a Table turns one minibatch's losses into scores.
// The zero value is ScoreRankLog.
type ScoreKind uint8

const (
	// ScoreRankLog is SHADE's rank score, ln(10 + 63p) for the loss at
	// relative rank p of its minibatch (see RankScores): scores lie in
	// [ln 10, ln 73], and the neutral score is ln 41.5.
	ScoreRankLog ScoreKind = iota
	// ScoreMagnitude is a bounded gradient-norm proxy relative to its
	// minibatch (see MagnitudeScores): g = 1 - e^-loss, score = g/mean(g),
	// at most MaxMagnitudeScore. Scores lie in [0, 64], and the neutral
	// score is 1.
	ScoreMagnitude
)

// MaxMagnitudeScore caps a ScoreMagnitude score: one sample of a minibatch
// can be at most 64 times as important as the batch's mean.
const MaxMagnitudeScore = 64

// String is the name ParseScoreKind accepts: "rank" or "magnitude".
func (k ScoreKind) String() string {
	switch k {
	case ScoreRankLog:
		return "rank"
	case ScoreMagnitude:
		return "magnitude"
	}
	return "ScoreKind(" + strconv.Itoa(int(k)) + ")"
}

// valid reports whether k is one of the kinds defined above.
func (k ScoreKind) valid() bool { return k <= ScoreMagnitude }

// neutral is the effective score of every sample while nothing is scored.
func (k ScoreKind) neutral() float64 {
	if k == ScoreMagnitude {
		return 1
	}
	return neutralScore
}

// ParseScoreKind returns the kind named s, as String writes it ("rank" or
// "magnitude"); any other string fails with ErrBadConfig.
func ParseScoreKind(s string) (ScoreKind, error) {
	switch s {
	case "rank":
		return ScoreRankLog, nil
	case "magnitude":
		return ScoreMagnitude, nil
	}
	return 0, wrapf(ErrBadConfig, "score kind %q, want rank or magnitude", s)
}

// neutralScore is ln(10 + 63*0.5) = ln 41.5, the middle of the score range: the
// effective score of every sample while nothing is scored. It is a literal, not
// math.Log(41.5), so that it is the same bits on every architecture.
const neutralScore = 3.7256934272366529

// RankScores returns the score of each loss within its minibatch, in the same
// order as losses: the losses are ranked ascending, k = 0..m-1, and rank k gets
// ln(10 + 63*k/(m-1)) (ln 73 when m = 1). Equal losses take distinct ranks in an
// order drawn from rng; with distinct losses rng is not consulted, and a nil rng
// breaks ties by position. NaN sorts below every number (as cmp.Compare orders
// it); Table.Report refuses NaN before it gets here. The result is a new slice;
// losses is not modified.
func RankScores(losses []float64, rng *rand.Rand) []float64 {
	out := make([]float64, len(losses))
	for k, i := range rankOrder(losses, rng) {
		out[i] = rankScore(k, len(losses))
	}
	return out
}

// rankScore is the score of rank k (0-based, ascending loss) among m.
func rankScore(k, m int) float64 {
	p := 1.0
	if m > 1 {
		p = float64(k) / float64(m-1)
	}
	return math.Log(10 + float64(63*p))
}

// rankOrder returns the positions of losses sorted by ascending loss; each run
// of equal losses is shuffled with rng (left in position order if rng is nil).
// Losses compare as cmp.Compare does: NaNs equal each other and below -Inf,
// -0 equals +0.
func rankOrder(losses []float64, rng *rand.Rand) []int {
	var order []int
	if len(losses) <= packedPositions {
		order = packedRankOrder(losses)
	} else {
		order = keyedRankOrder(losses)
	}
	if rng != nil {
		for i := 0; i < len(order); {
			k, j := sortKey(losses[order[i]]), i+1
			for j < len(order) && sortKey(losses[order[j]]) == k {
				j++
			}
			if run := order[i:j]; len(run) > 1 {
				rng.Shuffle(len(run), func(x, y int) { run[x], run[y] = run[y], run[x] })
			}
			i = j
		}
	}
	return order
}

// packedPositions is the most losses packedRankOrder sorts: a position
// takes the low 16 bits of its key.
const packedPositions = 1 << 16

// packedRankOrder returns the positions of losses, at most
// packedPositions of them, sorted by (sortKey, position). Each key's top
// 48 bits and its position are packed in one integer and the integers
// sorted as such (a minibatch of 256 in about a third of the time of a
// sort by a comparison function); keys that differ only in their low 16
// bits may then be out of order, and a pass of insertion by the whole
// keys puts them right (a few steps past the one compare each, where
// none are).
func packedRankOrder(losses []float64) []int {
	const low = packedPositions - 1
	packed := make([]uint64, len(losses))
	for i, l := range losses {
		packed[i] = sortKey(l)&^low | uint64(i)
	}
	slices.Sort(packed)
	before := func(v, w uint64) bool { // v's (key, position) below w's
		kv, kw := sortKey(losses[v&low]), sortKey(losses[w&low])
		return kv < kw || kv == kw && v&low < w&low
	}
	for i := 1; i < len(packed); i++ {
		v := packed[i]
		j := i
		for ; j > 0 && before(v, packed[j-1]); j-- {
			packed[j] = packed[j-1]
		}
		packed[j] = v
	}
	order := make([]int, len(packed))
	for i, v := range packed {
		order[i] = int(v & low)
	}
	return order
}

// keyedRankOrder is packedRankOrder for any number of losses: sorted by a
// comparison function of (sortKey, position).
func keyedRankOrder(losses []float64) []int {
	type rankKey struct {
		key uint64
		pos int
	}
	keyed := make([]rankKey, len(losses))
	for i, l := range losses {
		keyed[i] = rankKey{sortKey(l), i}
	}
	slices.SortFunc(keyed, func(a, b rankKey) int {
		if a.key != b.key {
			if a.key < b.key {
				return -1
			}
			return 1
		}
		return a.pos - b.pos
	})
	order := make([]int, len(keyed))
	for i, k := range keyed {
		order[i] = k.pos
	}
	return order
}

// MagnitudeScores returns the ScoreMagnitude score of each loss within its
// minibatch, in the same order as losses: g_i = 1 - e^-loss_i (a loss below 0
// counts as 0, so g is in [0, 1]), and s_i = g_i / mean(g), capped at
// MaxMagnitudeScore; if every g is 0 every score is 1. The mean's sum is
// exact for each binary exponent of the magnitudes, and those sums are
// added from the smallest exponent up (magnitudeSum), so the scores do not
// depend on the order of the losses. NaN counts as 0 here; Table.Report
// refuses it before it gets here.
// The result is a new slice; losses is not modified.
func MagnitudeScores(losses []float64) []float64 {
	out, mean := magnitudes(losses, new(magnitudeSum))
	for i, g := range out {
		out[i] = magnitudeScore(g, mean)
	}
	return out
}

// magnitude is g = 1 - e^-loss for loss >= 0, and 0 otherwise (NaN included).
func magnitude(loss float64) float64 {
	if !(loss > 0) {
		return 0
	}
	return -math.Expm1(-loss)
}

// magnitudes returns the magnitude of each loss, in a new slice, and
// their mean, whose sum (magnitudeSum) depends on the multiset of the
// magnitudes alone, not on the losses' positions. sum, empty, is where
// it is summed; it is left empty.
func magnitudes(losses []float64, sum *magnitudeSum) (g []float64, mean float64) {
	g = make([]float64, len(losses))
	for i, l := range losses {
		g[i] = magnitude(l)
		sum.add(g[i])
	}
	mean = sum.value() / float64(len(losses))
	sum.reset()
	return g, mean
}

// magnitudeSum is the sum of magnitudes (finite, in [0, 1]): a float64
// with biased exponent e and significand m (implicit bit included) is m *
// 2^(max(e,1)-1075), so hi[e], lo[e] hold the 128-bit integer sum of the
// significands of the values with exponent e, exactly. value adds those
// sums from the smallest exponent up, in a fixed order, so the result
// depends on the multiset only, as scoreSum's does. It replaces a sort of
// the batch's magnitudes summed in ascending order, which was half of a
// minibatch's merge (11-13 of 22-24 us for 256). The zero value is 0.
type magnitudeSum struct {
	hi, lo [1024]uint64 // a magnitude is at most 1: exponent 1023
	nz     [16]uint64   // bit e set iff exponent e has a value
}

func (s *magnitudeSum) add(x float64) {
	b := math.Float64bits(x)
	e := b >> 52 & 1023 // the sign is clear, and x <= 1
	m := b & (1<<52 - 1)
	if e != 0 {
		m |= 1 << 52
	}
	var carry uint64
	s.lo[e], carry = bits.Add64(s.lo[e], m, 0)
	s.hi[e] += carry
	s.nz[e/64] |= 1 << (e % 64)
}

// reset empties s, clearing only the exponents it holds: a minibatch's
// magnitudes take a few dozen of the 1,024, where a new sum cleared all
// 16 KiB (BenchmarkReport256/magnitude: 6.9-7.2 us against 7.4-7.7).
func (s *magnitudeSum) reset() {
	for w, word := range s.nz {
		for word != 0 {
			e := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			s.hi[e], s.lo[e] = 0, 0
		}
		s.nz[w] = 0
	}
}

func (s *magnitudeSum) value() float64 {
	return sumByExponent(s.nz[:], 1075, func(e int) float64 { return float64(s.hi[e])*0x1p64 + float64(s.lo[e]) })
}

// sumByExponent adds up the buckets of an exact sum of floating-point
// values kept by biased exponent (scoreSum, magnitudeSum): for each
// exponent e set in nz, from the smallest up, in a fixed order, the
// bucket's integer sum of significands, at(e), times 2^(max(e,1)-bias).
func sumByExponent(nz []uint64, bias int, at func(e int) float64) float64 {
	var total float64
	for w, word := range nz {
		for word != 0 {
			e := w*64 + bits.TrailingZeros64(word)
			word &= word - 1
			total += math.Ldexp(at(e), max(e, 1)-bias)
		}
	}
	return total
}

// magnitudeScore is the ScoreMagnitude score of magnitude g in a batch
// whose mean magnitude is mean.
func magnitudeScore(g, mean float64) float64 {
	if !(mean > 0) {
		return 1
	}
	return min(g/mean, MaxMagnitudeScore)
}

// sortKey maps a float64 to an integer in the same order as cmp.Compare: all
// NaNs to 0, below everything; -0 to the key of +0; otherwise the IEEE bits
// with the sign flipped, and all bits flipped for negatives.
func sortKey(x float64) uint64 {
	if x != x {
		return 0
	}
	if x == 0 {
		x = 0
	}
	b := math.Float64bits(x)
	if b>>63 != 0 {
		return ^b
	}
	return b | 1<<63
}

// DefaultAlpha is the merge weight a of the newest score when NewTable is given
// 0. With a = 0.5 the newest minibatch rank counts for half and older ranks
// decay geometrically: the rank of one minibatch is a noisy estimate of a
// sample's importance, so a single report should move it but not decide it,
// and a sample whose loss has fallen is demoted within two or three epochs.
const DefaultAlpha = 0.5

// Table is one dataset's importance scores: a dense []float32 indexed by sample
// id and a bitset of which ids have ever been scored. Scores are finite and
// non-negative. Memory is about 4.1 bytes per sample.
//
// The zero Table has no samples, DefaultAlpha and ScoreRankLog; it is useful as the target of
// UnmarshalBinary. A Table is not safe for concurrent use: the caller locks,
// and read-only methods (Score, Scored, Mean, NumScored, Len, MarshalBinary)
// may share a read lock.
type Table struct {
	alpha     float64
	kind      ScoreKind
	scores    []float32
	scored    []uint64 // bit id%64 of word id/64
	numScored int
	sum       scoreSum
	mean      float64 // sum/numScored, valid while numScored > 0
	// ranked holds rankScore(k, len(ranked)) for each rank k, for the
	// length of the minibatch last scored by rank (reportRanked): made
	// anew for another length and never written after, so that copies
	// (CopyTo) may share it.
	ranked []float64
	// msum is where a minibatch's magnitudes are summed, kept empty
	// between reports (magnitudes); made at the first, never shared by
	// copies (CopyTo).
	msum *magnitudeSum
	// touched is where touch leaves what it read, so that its reads
	// are not left out.
	touched uint32
}

// NewTable returns a table of n samples, none scored, that scores reports as
// kind says and merges them with weight alpha on the newest score (0 selects
// DefaultAlpha). It panics if n is negative or above math.MaxUint32, alpha is
// not in [0, 1] or kind is not a defined ScoreKind: all are programming
// errors, not input.
func NewTable(n int, alpha float64, kind ScoreKind) *Table {
	if n < 0 || uint64(n) > math.MaxUint32 {
		panic("sampling: NewTable: n out of range")
	}
	if !(alpha >= 0 && alpha <= 1) {
		panic("sampling: NewTable: alpha not in [0, 1]")
	}
	if !kind.valid() {
		panic("sampling: NewTable: unknown score kind")
	}
	return &Table{
		alpha:  alpha,
		kind:   kind,
		scores: make([]float32, n),
		scored: make([]uint64, (n+63)/64),
	}
}

// Len is the number of samples; valid ids are 0..Len()-1.
func (t *Table) Len() int { return len(t.scores) }

// Alpha is the merge weight of the newest score.
func (t *Table) Alpha() float64 {
	if t.alpha == 0 {
		return DefaultAlpha
	}
	return t.alpha
}

// Kind is how the table scores a minibatch.
func (t *Table) Kind() ScoreKind { return t.kind }

// Report merges one trained minibatch: losses[i] is the loss of sample ids[i].
// Scores are credited to the ids, never to positions. The batch is scored as
// Kind says, by RankScores (rng breaks ties; nil breaks them by position) or
// by MagnitudeScores (rng is not consulted), and each sample's score s is
// merged as score = a*s + (1-a)*prior, where prior is the sample's current
// score, or, for a sample never scored, the running mean as it stood before
// this batch (so the order of the pairs within a batch does not matter).
//
// An id that occurs more than once is scored once per occurrence, and its
// merges are applied one after another in ascending loss order (rank order),
// each using the previous result as prior; with distinct losses (or, for
// ScoreMagnitude, always) the outcome is again independent of the order of
// the pairs.
//
// Report is all or nothing: an empty batch, len(ids) != len(losses) (both
// ErrBadBatch), an id >= Len() (ErrIDOutOfRange) or a NaN or infinite loss
// (ErrLossNotFinite) fails the whole batch and leaves the table unchanged.
// Report does not retain ids or losses.
func (t *Table) Report(ids []uint32, losses []float64, rng *rand.Rand) error {
	if err := t.checkBatch(ids, losses); err != nil {
		return err
	}
	t.touch(ids)
	if t.kind == ScoreMagnitude && distinct(ids) {
		t.reportDistinct(ids, losses)
	} else {
		t.reportRanked(ids, losses, rng)
	}
	t.refreshMean()
	return nil
}

// reportRanked merges a checked batch in rank order (ascending loss).
func (t *Table) reportRanked(ids []uint32, losses []float64, rng *rand.Rand) {
	a := t.Alpha()
	prior := t.Mean()
	var g []float64
	var mean float64
	if t.kind == ScoreMagnitude {
		rng = nil // equal losses have equal scores: ties need no breaking
		g, mean = magnitudes(losses, t.magnitudeSum())
	}
	order := rankOrder(losses, rng)
	if t.kind != ScoreMagnitude && len(t.ranked) != len(order) {
		t.ranked = make([]float64, len(order))
		for k := range t.ranked {
			t.ranked[k] = rankScore(k, len(order))
		}
	}
	for k, i := range order {
		var s float64
		if t.kind == ScoreMagnitude {
			s = magnitudeScore(g[i], mean)
		} else {
			s = t.ranked[k]
		}
		t.merge(ids[i], s, a, prior)
	}
}

// reportDistinct merges a checked ScoreMagnitude batch in which no id
// occurs twice, as reportRanked would, without sorting the batch: with
// every id once, no merge depends on another, so merging in position
// order gives the same table.
func (t *Table) reportDistinct(ids []uint32, losses []float64) {
	a := t.Alpha()
	prior := t.Mean()
	g, mean := magnitudes(losses, t.magnitudeSum())
	for i, id := range ids {
		t.merge(id, magnitudeScore(g[i], mean), a, prior)
	}
}

// touch reads the score of each id before the merge does. In a table
// larger than the cache each is a miss; read here, one after another
// with nothing waiting on them, the misses overlap, where in the merge
// each waited on the one before (the exact sum's bucket of a sample's
// old score is written at an address that depends on the score read).
func (t *Table) touch(ids []uint32) {
	var sink uint32
	for _, id := range ids {
		sink |= math.Float32bits(t.scores[id])
	}
	t.touched = sink
}

// magnitudeSum returns the table's empty sum of magnitudes (msum).
func (t *Table) magnitudeSum() *magnitudeSum {
	if t.msum == nil {
		t.msum = new(magnitudeSum)
	}
	return t.msum
}

// merge merges score s of sample id with weight a on it: the prior is its
// current score, or prior where it has none.
func (t *Table) merge(id uint32, s, a, prior float64) {
	old := prior
	if t.Scored(id) {
		old = float64(t.scores[id])
		t.sum.add(t.scores[id], -1)
	} else {
		t.scored[id/64] |= 1 << (id % 64)
		t.numScored++
	}
	// Both products are rounded before the addition: no FMA.
	v := float32(float64(a*s) + float64((1-a)*old))
	t.scores[id] = v
	t.sum.add(v, 1)
}

// distinct reports whether no id occurs twice in ids: for a minibatch of
// up to 256 by a set of open addressing on the stack, for a longer one by
// sorting a copy.
func distinct(ids []uint32) bool {
	if len(ids) <= 256 {
		var set [512]uint32 // id+1; 0 is empty (an id is below math.MaxUint32)
		for _, id := range ids {
			for h := (id * 0x9e3779b1) >> 23; ; h = (h + 1) & 511 {
				if set[h] == 0 {
					set[h] = id + 1
					break
				}
				if set[h] == id+1 {
					return false
				}
			}
		}
		return true
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return false
		}
	}
	return true
}

func (t *Table) checkBatch(ids []uint32, losses []float64) error {
	if len(ids) == 0 && len(losses) == 0 {
		return wrapf(ErrBadBatch, "empty batch")
	}
	if len(ids) != len(losses) {
		return wrapf(ErrBadBatch, "%d ids but %d losses", len(ids), len(losses))
	}
	for i, id := range ids {
		if uint64(id) >= uint64(len(t.scores)) {
			return wrapf(ErrIDOutOfRange, "id %d at position %d, table of %d samples", id, i, len(t.scores))
		}
	}
	for i, l := range losses {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			return wrapf(ErrLossNotFinite, "loss %v of id %d at position %d", l, ids[i], i)
		}
	}
	return nil
}

// CopyTo makes dst a copy of t, reusing dst's memory where it is large
// enough, and returns it; a nil dst gets a new table. The copy shares
// nothing with t: merges into either leave the other as it was.
func (t *Table) CopyTo(dst *Table) *Table {
	if dst == nil {
		dst = new(Table)
	}
	scores, scored := dst.scores, dst.scored
	*dst = *t
	dst.msum = nil
	dst.scores = append(scores[:0], t.scores...)
	dst.scored = append(scored[:0], t.scored...)
	return dst
}

// Score is the effective score of a sample: its merged score if it was ever
// scored, else the running mean (Mean). It panics if id >= Len().
func (t *Table) Score(id uint32) float64 {
	if uint64(id) >= uint64(len(t.scores)) {
		panic("sampling: Table.Score: id out of range")
	}
	if t.scored[id/64]&(1<<(id%64)) != 0 {
		return float64(t.scores[id])
	}
	return t.Mean()
}

// Scored reports whether the sample has a score of its own; false for an id
// out of range.
func (t *Table) Scored(id uint32) bool {
	if uint64(id) >= uint64(len(t.scores)) {
		return false
	}
	return t.scored[id/64]&(1<<(id%64)) != 0
}

// Mean is the running mean of the scored samples' scores: the effective score
// of every sample not yet scored. While nothing is scored it is the kind's
// neutral score: ln 41.5, the middle of the range, for ScoreRankLog, and 1,
// the batch mean, for ScoreMagnitude. It depends only on the scores the table holds
// (it is computed from an exact sum), never on the history that produced them.
func (t *Table) Mean() float64 {
	if t.numScored == 0 {
		return t.kind.neutral()
	}
	return t.mean
}

// NumScored is the number of samples with a score of their own.
func (t *Table) NumScored() int { return t.numScored }

// Set installs score as the sample's merged score, verbatim (rounded to
// float32), and marks it scored; this is how a replica or a new leader
// receives the leader's merged table one sample at a time. It refuses an id
// >= Len() (ErrIDOutOfRange) and a score that is NaN, negative or beyond
// math.MaxFloat32 (ErrBadScore), leaving the table unchanged.
func (t *Table) Set(id uint32, score float64) error {
	if uint64(id) >= uint64(len(t.scores)) {
		return wrapf(ErrIDOutOfRange, "id %d, table of %d samples", id, len(t.scores))
	}
	if !(score >= 0 && score <= math.MaxFloat32) {
		return wrapf(ErrBadScore, "score %v of id %d", score, id)
	}
	v := float32(score)
	if v == 0 {
		v = 0 // never store -0: the exact sum keys on the bit pattern
	}
	if t.Scored(id) {
		t.sum.add(t.scores[id], -1)
	} else {
		t.scored[id/64] |= 1 << (id % 64)
		t.numScored++
	}
	t.scores[id] = v
	t.sum.add(v, 1)
	t.refreshMean()
	return nil
}

func (t *Table) refreshMean() {
	if t.numScored > 0 {
		t.mean = t.sum.value() / float64(t.numScored)
	} else {
		t.mean = 0
	}
}

// scoreSum is the exact sum of a multiset of non-negative finite float32
// values: a float32 with biased exponent e and significand m (implicit bit
// included) is m * 2^(max(e,1)-150), so acc[e] holds the integer sum of the
// significands of the values with exponent e. A significand is below 2^24 and
// a table holds at most 2^32 values, so no bucket can overflow. Adding and
// removing are O(1); value is O(number of distinct exponents in use), a
// handful for real scores.
type scoreSum struct {
	acc [255]int64
	nz  [4]uint64 // bit e set iff acc[e] != 0
}

func (s *scoreSum) add(x float32, sign int64) {
	b := math.Float32bits(x)
	e := b >> 23 // sign bit is clear: scores are never negative nor -0
	m := int64(b & (1<<23 - 1))
	if e != 0 {
		m |= 1 << 23
	}
	s.acc[e] += sign * m
	if s.acc[e] != 0 {
		s.nz[e/64] |= 1 << (e % 64)
	} else {
		s.nz[e/64] &^= 1 << (e % 64)
	}
}

// value rounds the exact sum to float64, adding the buckets from the smallest
// exponent up, in a fixed order, so the result depends on the multiset only.
func (s *scoreSum) value() float64 {
	return sumByExponent(s.nz[:], 150, func(e int) float64 { return float64(s.acc[e]) })
}
