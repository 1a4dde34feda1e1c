package sampling

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"
)

// Defaults selected by a negative Config field (see Config).
const (
	// DefaultUniformFloor mixes one draw in ten from the uniform distribution.
	// It bounds how unlikely any sample can become (at least 0.1/n per draw,
	// whatever the scores) and so limits the damage of an extreme or corrupted
	// score, while costing little contrast: with scores in [ln 10, ln 73] and
	// a typical mean near 3.3, the most likely sample stays about 1.75 times
	// as likely as the least (1.86 without the floor).
	DefaultUniformFloor = 0.1
	// DefaultCoverageEpochs: every sample is trained at least once in any 5
	// consecutive epochs. Without a floor the least important samples, each
	// missed by an epoch's n draws with probability about one half, could go
	// unseen for many epochs, which costs accuracy; with 5, typically a few
	// percent of an epoch is forced.
	DefaultCoverageEpochs = 5
	// DefaultStrata cuts the samples into 8 importance strata for Boost:
	// coarse enough that a stratum holds a mix of resident and missing
	// samples for the boost to choose between, fine enough that a sample is
	// only ever traded for one of nearly the same importance.
	DefaultStrata = 8
	// PeerMaxWeight and PeerBoost are shade-peer's Config.MaxWeight and
	// Config.Boost unless told otherwise (a Config's zero value leaves both
	// off): no drawn sample weighs more than 4 times an average one, and
	// a sample cached in the mesh is 9 times as likely as one of its
	// stratum that is not.
	PeerMaxWeight = 4
	PeerBoost     = 8
)

// Config selects a job's sampling. Because zero is a meaningful explicit value
// for UniformFloor and CoverageEpochs, a negative value selects the default
// for those fields; see DefaultConfig for the recommended preset. The zero
// Config is plain uniform sampling (PADS off). MaxWeight, Boost and Strata
// only matter to PADS epochs drawn with Draw; with MaxWeight and Boost zero,
// orders are those of OrderVersion 1 as before they existed, and so are
// all orders with DrawSeed 0.
type Config struct {
	// Seed is the job's seed: orders are a function of (Seed, epoch).
	Seed uint64
	// Lambda is added to every score to give its weight, w = max(0, score +
	// lambda). 0 (the default) keeps the score's full contrast, which is
	// already modest (ln 73 / ln 10 ≈ 1.86); a positive lambda flattens the
	// distribution toward uniform, a negative one sharpens it (weights below
	// zero count as zero). Must be finite.
	Lambda float64
	// UniformFloor u mixes the importance distribution with the uniform one:
	// each draw picks sample i with probability (1-u)*w_i/sum(w) + u/n.
	// 0 is pure importance sampling, 1 is uniform sampling with replacement;
	// negative selects DefaultUniformFloor. Must be at most 1.
	UniformFloor float64
	// CoverageEpochs K: a sample not in any of the last K-1 epochs' orders is
	// forced into this epoch's, so every sample is trained at least once in
	// any K consecutive epochs (K = 1 makes every epoch a permutation).
	// 0 disables the floor; negative selects DefaultCoverageEpochs.
	CoverageEpochs int
	// PADS turns importance sampling on. Off, every epoch is a uniform
	// permutation, as with PyTorch's DistributedSampler(shuffle=True).
	PADS bool
	// Score is the kind of score the job's table holds. The sampler does not
	// consult it; it is here so that one Config describes a job, and the
	// table's owner passes it to NewTable. Must be a defined ScoreKind.
	Score ScoreKind
	// MaxWeight caps the importance weight of every drawn sample (see
	// Drawn): a sample not forced by the coverage floor is drawn with
	// probability at least 1/(MaxWeight*D) per draw, D being the epoch's
	// draws after the forced samples, so its weight 1/(D*q) is at most
	// MaxWeight. The probability this costs is taken from the other samples
	// in proportion. 0 (the default) is no cap; otherwise it must be finite
	// and at least 1 (1 flattens the draws to uniform over the samples not
	// forced).
	MaxWeight float64
	// Boost β makes draws cache-aware: a resident sample (one the caller
	// says is cached now) is made 1+β times as likely per draw as a missing
	// one of the same importance stratum (see Strata), and each stratum is
	// renormalised so that it keeps its total share of the draws:
	// importance is never traded for residency, only residency within equal
	// importance. The weights correct for the boost, so training stays
	// unbiased. 0 (the default) is off; must be finite and not negative.
	Boost float64
	// DrawSeed, if not 0, seeds the random numbers of a PADS epoch's draws
	// with replacement in place of Seed (the forced samples and the
	// shuffle still follow Seed). Draw k of an epoch then takes its column
	// of the alias table and its coin from (DrawSeed, epoch, k) alone, so
	// samplers that share a DrawSeed make coupled draws: where their
	// probabilities for a column agree, their k-th draws pick the same
	// sample, and two jobs of one dataset with similar importance read
	// many of the same samples in an epoch. Each sampler still draws
	// exactly its own distribution, so the weights are unchanged. 0 (the
	// default) draws from Seed's stream as in OrderVersion 1.
	DrawSeed uint64
	// Strata is the number of importance strata for Boost: the samples,
	// sorted by their probability before the boost (ties by id), are cut
	// into Strata groups of equal count (the first n%Strata one larger).
	// 0 or negative selects DefaultStrata; more than n counts as n.
	Strata int
}

// DefaultConfig is the recommended PADS preset: importance sampling with
// lambda 0, DefaultUniformFloor and DefaultCoverageEpochs. Set Seed.
func DefaultConfig() Config {
	return Config{
		PADS:           true,
		UniformFloor:   DefaultUniformFloor,
		CoverageEpochs: DefaultCoverageEpochs,
	}
}

// Validate reports a field out of range, wrapping ErrBadConfig.
func (c Config) Validate() error {
	if math.IsNaN(c.Lambda) || math.IsInf(c.Lambda, 0) {
		return wrapf(ErrBadConfig, "lambda %v not finite", c.Lambda)
	}
	if math.IsNaN(c.UniformFloor) || c.UniformFloor > 1 {
		return wrapf(ErrBadConfig, "uniform floor %v above 1", c.UniformFloor)
	}
	if !c.Score.valid() {
		return wrapf(ErrBadConfig, "score kind %d unknown", c.Score)
	}
	if c.MaxWeight != 0 && !(c.MaxWeight >= 1 && c.MaxWeight <= math.MaxFloat64) {
		return wrapf(ErrBadConfig, "max weight %v neither 0 nor finite and at least 1", c.MaxWeight)
	}
	if !(c.Boost >= 0 && c.Boost <= math.MaxFloat64) {
		return wrapf(ErrBadConfig, "boost %v not finite and non-negative", c.Boost)
	}
	return nil
}

// withDefaults returns a copy of c with negative fields replaced by defaults.
func (c Config) withDefaults() Config {
	if c.UniformFloor < 0 {
		c.UniformFloor = DefaultUniformFloor
	}
	if c.CoverageEpochs < 0 {
		c.CoverageEpochs = DefaultCoverageEpochs
	}
	if c.Strata <= 0 {
		c.Strata = DefaultStrata
	}
	return c
}

// Sampler produces one job's epoch orders over a dataset of n samples. It holds
// the coverage state (the last epoch each sample was drawn) and the next epoch
// to order, and reuses scratch space between epochs (about 24 bytes per sample
// with PADS on, 44 with Boost or MaxWeight set as well, 4 with PADS off). It
// is not safe for concurrent use.
type Sampler struct {
	cfg    Config
	cfgErr error
	n      int
	next   int     // the epoch Order accepts next
	last   []int32 // last epoch each sample was in an order; -1 never

	prob []float64 // scratch: scaled probabilities n*q_i while building the alias table
	work []uint32  // scratch: Vose's small and large worklists; before them, ids being sorted
	cols []column  // the alias table

	// Scratch of sortByProb, allocated on first use by Boost or MaxWeight.
	keys, keys2 []uint64
	ids2        []uint32
	counts      radixCounts

	// procs is how many goroutines a pass over the samples may use; 0
	// means GOMAXPROCS (see parallel.go).
	procs int
}

// column is one column of an alias table: a draw that lands on column i
// yields i if a uniform 32-bit coin is below accept, else alias. A column that
// always yields i has alias == i. Both halves share one 8-byte word, so a draw
// costs one cache miss.
type column struct {
	accept uint32
	alias  uint32
}

// NewSampler returns a sampler of n samples whose next epoch is 0. cfg is
// copied with its defaults filled in; a Config that fails Validate makes every
// Order fail with that error. It panics if n is negative or above
// math.MaxUint32.
func NewSampler(n int, cfg Config) *Sampler {
	if n < 0 || uint64(n) > math.MaxUint32 {
		panic("sampling: NewSampler: n out of range")
	}
	s := &Sampler{cfg: cfg.withDefaults(), cfgErr: cfg.Validate(), n: n, last: make([]int32, n)}
	for i := range s.last {
		s.last[i] = -1
	}
	return s
}

// Clone returns a sampler in the same state, configuration and coverage,
// that shares nothing with s: the two draw the same orders from the same
// tables, and a draw by one leaves the other as it was.
func (s *Sampler) Clone() *Sampler {
	return &Sampler{cfg: s.cfg, cfgErr: s.cfgErr, n: s.n, next: s.next, last: slices.Clone(s.last), procs: s.procs}
}

// Config is the sampler's configuration with defaults filled in.
func (s *Sampler) Config() Config { return s.cfg }

// Len is the number of samples.
func (s *Sampler) Len() int { return s.n }

// Next is the epoch the next call to Order or Draw must ask for.
func (s *Sampler) Next() int { return s.next }

// Drawn is one epoch's order and the importance weight of each sample.
type Drawn struct {
	// Order is the epoch's full order, as Order returns it.
	Order []uint32
	// Weight is indexed by sample id: ω_i = 1/E[count of i in Order], the
	// factor by which to multiply sample i's loss (or gradient) so that the
	// epoch's weighted sum is an unbiased estimate of the sum over the whole
	// dataset. It is 1 for every sample when the epoch is a permutation. A
	// sample no draw can yield (possible only with MaxWeight 0, UniformFloor
	// 0 and a zero weight) has Weight 0; it is not in Order. A weight beyond
	// float32's range is math.MaxFloat32.
	Weight []float32
}

// Order returns the full order of epoch (length Len(), before splitting by
// rank; a new slice owned by the caller) and advances the sampler; it is
// Draw(epoch, t, nil) without the weights. Epochs must be ordered in sequence
// 0, 1, 2, ...; any other epoch fails with ErrEpochOutOfSequence. Epoch 0,
// and every epoch with PADS off, is a uniform permutation of 0..n-1 (t is not
// consulted and may be nil). With PADS on, epoch e >= 1 draws from t's
// effective scores as described in Config; t must have Len() samples
// (ErrSizeMismatch). On error the sampler is unchanged.
//
// Two samplers with the same Config and coverage state produce the same order
// from tables with the same contents, on any architecture; replaying epochs
// 0..e-1 with the same tables, or restoring MarshalBinary's state, reproduces
// the state.
func (s *Sampler) Order(epoch int, t *Table) ([]uint32, error) {
	d, err := s.draw(epoch, t, nil, false, true)
	return d.Order, err
}

// Draw returns epoch's full order and the weight of every sample (new slices
// owned by the caller) and advances the sampler, as Order does; epochs,
// tables and errors are as for Order, and Draw(e, t, nil).Order equals
// Order(e, t). resident is a bitmap of the samples cached somewhere now, bit
// i%64 of word i/64 for sample i; a nil or short bitmap counts the samples
// beyond it as missing. It matters only with Boost > 0, and is not retained.
//
// With PADS on, epoch e >= 1 first forces the samples the coverage floor
// requires (F of them), then makes D = n-F draws with replacement, sample i
// with probability q_i per draw: the mixture of Config, then Boost's
// reweighting within strata, then MaxWeight's floor. Sample i's expected
// count is c_i = forced_i + D*q_i, and Weight[i] = 1/c_i. Like the order, the
// weights are a pure function of the inputs, the same on every architecture.
func (s *Sampler) Draw(epoch int, t *Table, resident []uint64) (Drawn, error) {
	return s.draw(epoch, t, resident, true, true)
}

// DrawUnordered is Draw for a caller that puts the order in an order of
// its own, one that depends only on which samples the order holds (as
// Align's does): the order holds Draw's samples, each as often, but not
// shuffled (a permutation is 0..n-1). The weights and the sampler's state
// are Draw's.
func (s *Sampler) DrawUnordered(epoch int, t *Table, resident []uint64) (Drawn, error) {
	return s.draw(epoch, t, resident, true, false)
}

// Permutes reports whether epoch is a permutation of the samples, each
// drawn once with weight 1: epoch 0, and every epoch with PADS off.
func (s *Sampler) Permutes(epoch int) bool { return !s.cfg.PADS || epoch == 0 }

// DrawPermutation is DrawUnordered of a permutation epoch (Permutes) for a
// caller that has its order already, in an order of its own that depends
// on nothing but the samples (a dataset's epoch 0, aligned once for all
// of its jobs): order must hold every sample once, and is kept as the
// Drawn's Order, neither copied nor checked. The Drawn's Weight is nil:
// every weight is 1. The sampler's state is Draw's. An epoch that PADS
// draws fails with ErrNotPermutation, an order of another length with
// ErrSizeMismatch, an epoch out of sequence as Draw's; on error the
// sampler is unchanged.
func (s *Sampler) DrawPermutation(epoch int, order []uint32) (Drawn, error) {
	if err := s.drawable(epoch); err != nil {
		return Drawn{}, err
	}
	switch {
	case !s.Permutes(epoch):
		return Drawn{}, wrapf(ErrNotPermutation, "epoch %d is drawn by PADS", epoch)
	case len(order) != s.n:
		return Drawn{}, wrapf(ErrSizeMismatch, "an order of %d for a sampler of %d", len(order), s.n)
	}
	s.markPermutation(epoch)
	return Drawn{Order: order}, nil
}

// drawable says why epoch cannot be drawn now, if it cannot: the
// sampler's Config is invalid, or epoch is not the next one.
func (s *Sampler) drawable(epoch int) error {
	if s.cfgErr != nil {
		return s.cfgErr
	}
	if epoch != s.next || epoch >= math.MaxInt32 {
		return wrapf(ErrEpochOutOfSequence, "epoch %d, want %d", epoch, s.next)
	}
	return nil
}

// markPermutation records that every sample was drawn in epoch, a
// permutation, and moves on to the next.
func (s *Sampler) markPermutation(epoch int) {
	for i := range s.last {
		s.last[i] = int32(epoch)
	}
	s.next++
}

// draw is Draw, computing the weights only if weights is set, and
// shuffling the order only if shuffled is.
func (s *Sampler) draw(epoch int, t *Table, resident []uint64, weights, shuffled bool) (Drawn, error) {
	if err := s.drawable(epoch); err != nil {
		return Drawn{}, err
	}
	if s.Permutes(epoch) {
		var d Drawn
		if shuffled {
			d.Order = permutation(s.n, s.cfg.Seed, epoch)
		} else {
			d.Order = identity(s.n)
		}
		if weights {
			d.Weight = ones(s.n)
		}
		s.markPermutation(epoch) // every sample, in sequence
		return d, nil
	}
	if t == nil || t.Len() != s.n {
		got := 0
		if t != nil {
			got = t.Len()
		}
		return Drawn{}, wrapf(ErrSizeMismatch, "table of %d samples for a sampler of %d", got, s.n)
	}
	d := s.pads(epoch, t, resident, weights, shuffled)
	for _, id := range d.Order {
		s.last[id] = int32(epoch)
	}
	s.next++
	return d, nil
}

func ones(n int) []float32 {
	w := make([]float32, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

// pads draws epoch's order: forced samples first (ascending id), then draws
// from the alias table up to n, then (if shuffled) one shuffle of the
// whole. With weights set it also returns each sample's weight.
func (s *Sampler) pads(epoch int, t *Table, resident []uint64, weights, shuffled bool) Drawn {
	rng := newStream(s.cfg.Seed, epoch)
	order := make([]uint32, 0, s.n)
	cutoff := int64(math.MinInt64) // last <= cutoff: forced
	if k := s.cfg.CoverageEpochs; k > 0 {
		cutoff = int64(epoch) - int64(k) // absent from epochs e-K+1..e-1
		for id, l := range s.last {
			if int64(l) <= cutoff {
				order = append(order, uint32(id))
			}
		}
	}
	d := s.n - len(order)
	var weight []float32
	switch {
	case weights && d == 0:
		weight = ones(s.n) // every sample forced: each is read once
	case weights:
		weight = make([]float32, s.n) // s.weights sets every one
	}
	if d > 0 {
		s.fillProb(t)
		if s.cfg.Boost > 0 && resident != nil {
			s.boost(resident)
		}
		if s.cfg.MaxWeight > 0 {
			s.capWeight(d, cutoff)
		}
		if weights {
			s.weights(weight, d, cutoff)
		}
		s.buildAlias()
		if s.cfg.DrawSeed != 0 {
			order = s.coupledDraws(order, epoch)
		} else {
			n := uint64(s.n)
			for len(order) < s.n {
				i := uint32(rng.intn(n))
				if c := s.cols[i]; c.alias != i && rng.coin() >= c.accept {
					i = c.alias
				}
				order = append(order, i)
			}
		}
	}
	if shuffled {
		rng.shuffle(order)
	}
	return Drawn{Order: order, Weight: weight}
}

// coupledDraws appends draws from the alias table to order until it holds
// n samples, draw k from counter-based random numbers of (DrawSeed, epoch,
// k): SplitMix64's k-th output picks the column (the high word of its
// product with n, off from uniform by at most n/2^64) and a second mix of
// it the coin. No draw's numbers depend on another draw or on the table,
// so samplers with one DrawSeed stay in step however their tables differ.
func (s *Sampler) coupledDraws(order []uint32, epoch int) []uint32 {
	const gamma = 0x9e3779b97f4a7c15 // SplitMix64's increment
	base := mix64(s.cfg.DrawSeed ^ mix64(uint64(epoch)+gamma))
	n := uint64(s.n)
	forced := len(order)
	order = order[:s.n]
	draws := order[forced:]
	cols := s.cols[:s.n]
	// Draw k+1 goes to place k: the spans are independent.
	parallel(len(draws), spans(len(draws), procs(s.procs)), func(_, lo, hi int) {
		for j := lo; j < hi; j++ {
			x := mix64(base + uint64(j+1)*gamma)
			col, _ := bits.Mul64(x, n)
			i := uint32(col)
			if c := cols[i]; c.alias != i && uint32(mix64(x^0xd1b54a32d192ed03)>>32) >= c.accept {
				i = c.alias
			}
			draws[j] = i
		}
	})
	return order
}

// fillProb sets prob to n times the mixed distribution, n*((1-u)*w_i/W +
// u/n), whose mean is 1. If the weights sum to zero or overflow the
// distribution is uniform.
func (s *Sampler) fillProb(t *Table) {
	n := s.n
	if cap(s.prob) < n {
		s.prob = make([]float64, n)
		s.work = make([]uint32, n)
		s.cols = make([]column, n)
	}
	prob := s.prob[:n]

	// Weights, summed in id order.
	lambda, mean := s.cfg.Lambda, t.Mean()
	var total float64
	for w, word := range t.scored {
		end := min(w*64+64, n)
		for i := w * 64; i < end; i++ {
			score := mean
			if word&(1<<(i%64)) != 0 {
				score = float64(t.scores[i])
			}
			wt := score + lambda
			if !(wt > 0) {
				wt = 0
			}
			prob[i] = wt
			total += wt
		}
	}

	// Scale so the mean column is 1: q_i = n*p_i = (1-u)*n*w_i/W + u.
	u := s.cfg.UniformFloor
	if total > 0 && !math.IsInf(total, 0) && u < 1 {
		scale := float64((1-u)*float64(n)) / total
		parallel(n, spans(n, procs(s.procs)), func(_, lo, hi int) {
			for i, wt := range prob[lo:hi] {
				prob[lo+i] = float64(wt*scale) + u // rounded product: no FMA
			}
		})
	} else {
		for i := range prob {
			prob[i] = 1
		}
	}
}

// buildAlias fills cols with Vose's alias table for prob (scaled to mean 1),
// consuming prob. Acceptance probabilities are kept to 32 bits: no sample's
// probability is off by more than 2^-32/n.
func (s *Sampler) buildAlias() {
	n := s.n
	prob, work, cols := s.prob[:n], s.work[:n], s.cols[:n]

	// Vose: small columns (q < 1) stacked from the front of work, large ones
	// from the back; each small column is topped up by a large one.
	small, large := 0, n
	for i, q := range prob {
		cols[i] = column{accept: math.MaxUint32, alias: uint32(i)}
		if q < 1 {
			work[small] = uint32(i)
			small++
		} else {
			large--
			work[large] = uint32(i)
		}
	}
	for small > 0 && large < n {
		small--
		l := work[small]
		g := work[large]
		// q_l < 1, so the product is below 2^32; a product is exact.
		cols[l] = column{accept: uint32(float64(prob[l] * 0x1p32)), alias: g}
		prob[g] = (prob[g] + prob[l]) - 1
		if prob[g] < 1 {
			large++
			work[small] = g
			small++
		}
	}
	// Whatever remains is 1 up to rounding and keeps its own column.
}

// isResident reports bit id of the bitmap b.
func isResident(b []uint64, id uint32) bool {
	w := id / 64
	return uint64(w) < uint64(len(b)) && b[w]&(1<<(id%64)) != 0
}

// boost multiplies the probability of each resident sample by 1+β within its
// stratum and renormalises the stratum to its former total. Strata are cut
// from the samples sorted by probability (ties by id); a stratum with no
// resident sample, or none missing, is left exactly as it was.
func (s *Sampler) boost(bitmap []uint64) {
	n := s.n
	sorted := s.work[:n]
	for i := range sorted {
		sorted[i] = uint32(i)
	}
	s.sortByProb(sorted)
	beta := s.cfg.Boost
	strata := min(max(s.cfg.Strata, 1), n) // a zero Sampler has Strata 0
	size, extra := n/strata, n%strata
	// Stratum j starts after j strata of size, the first extra of them
	// one longer. The strata are independent: one goroutine each, at
	// most procs at a time.
	bounds := func(j int) (start, end int) {
		start = j*size + min(j, extra)
		end = start + size
		if j < extra {
			end++
		}
		return start, end
	}
	parallel(strata, min(strata, spans(n, procs(s.procs))), func(_, lo, hi int) {
		for j := lo; j < hi; j++ {
			start, end := bounds(j)
			s.boostStratum(sorted[start:end], s.keys[start:end], bitmap, beta)
		}
	})
}

// boostStratum is boost's reweighting of one stratum, the ids in group,
// whose probabilities' bits are keys (sortByProb's, read in sequence).
func (s *Sampler) boostStratum(group []uint32, keys []uint64, bitmap []uint64, beta float64) {
	prob := s.prob
	var all, res float64
	for i, id := range group {
		p := math.Float64frombits(keys[i])
		all += p
		if isResident(bitmap, id) {
			res += p
		}
	}
	if res == 0 || res == all {
		return
	}
	// all = missing + res becomes c*(missing + (1+β)*res) = all.
	down := all / float64(all+float64(beta*res))
	up := float64((1 + beta) * down)
	for _, id := range group {
		if isResident(bitmap, id) {
			prob[id] = float64(prob[id] * up)
		} else {
			prob[id] = float64(prob[id] * down)
		}
	}
}

// capWeight enforces MaxWeight by water-filling: every sample not forced
// (last <= cutoff) gets at least floor = n/(MaxWeight*d) of prob (a per-draw
// probability of 1/(MaxWeight*d)), and the other samples are scaled down by
// one common factor so that prob keeps its sum n. Forced samples need no
// floor: their expected count is at least 1, so their weight at most 1.
//
// The factor a is the root of sum(max(floor, a*p_i) over unforced i) +
// a*sum(p_i over forced i) = n. Since pinning every unforced sample at the
// floor would add only d*floor = n/MaxWeight, a >= 1 - 1/MaxWeight, so only
// samples below floor/(1-1/MaxWeight) can end up pinned. Those candidates are
// sorted by probability (ties by id) and pinned in that order while the
// factor that the remaining samples would need leaves the next candidate
// below the floor; each pin lowers the factor, so the first candidate that
// stays above it ends the scan, and the result is exact, not iterated.
func (s *Sampler) capWeight(d int, cutoff int64) {
	n := s.n
	prob := s.prob[:n]
	m := s.cfg.MaxWeight
	nf := float64(n)
	floor := nf / float64(m*float64(d))
	limit := math.Inf(1)
	if lo := 1 - 1/m; lo > 0 {
		limit = floor / lo
	}
	var total float64
	for _, p := range prob {
		total += p // in id order, on one goroutine: its rounding is the order's
	}
	// The candidates, ascending: each span's gathered at its own start in
	// work, then moved up behind the spans before it.
	w := spans(n, procs(s.procs))
	found := make([]int, w)
	work, last := s.work[:n], s.last
	parallel(n, w, func(c, lo, hi int) {
		k := lo
		for i := lo; i < hi; i++ {
			if prob[i] < limit && int64(last[i]) > cutoff {
				work[k] = uint32(i)
				k++
			}
		}
		found[c] = k - lo
	})
	cand := work[:0]
	for c := range w {
		lo, _ := span(n, w, c)
		cand = append(cand, work[lo:lo+found[c]]...)
	}
	if len(cand) == 0 {
		return
	}
	s.sortByProb(cand)
	sorted := s.keys[:len(cand)] // prob[cand[k]]'s bits, read in sequence
	var pinned, a float64
	k := 0
	for ; ; k++ {
		a = 0
		if num, rest := nf-float64(float64(k)*floor), total-pinned; num > 0 && rest > 0 {
			a = num / rest
		}
		if k == len(cand) || float64(a*math.Float64frombits(sorted[k])) >= floor {
			break
		}
		pinned += math.Float64frombits(sorted[k])
	}
	if k == 0 {
		return // nothing below the floor
	}
	parallel(n, w, func(_, lo, hi int) {
		for i, p := range prob[lo:hi] {
			prob[lo+i] = float64(a * p)
		}
	})
	for _, id := range cand[:k] {
		prob[id] = floor
	}
}

// weights sets weight[i] to 1/c_i, c_i = forced_i + d*prob[i]/n the expected
// count of sample i in an epoch of d draws after the forced samples.
func (s *Sampler) weights(weight []float32, d int, cutoff int64) {
	perDraw := float64(d) / float64(s.n)
	prob, last := s.prob[:s.n], s.last
	parallel(s.n, spans(s.n, procs(s.procs)), func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			c := float64(perDraw * prob[i])
			if int64(last[i]) <= cutoff {
				c++
			}
			w := float32(math.MaxFloat32)
			switch {
			case c == 0:
				w = 0
			case 1/c < math.MaxFloat32:
				w = float32(1 / c)
			}
			weight[i] = w
		}
	})
}

// sortByProb sorts ids, given in ascending order, by ascending prob[id],
// keeping ascending id among equals: a stable LSD radix sort of prob's IEEE
// bits (which order as the values do, prob being non-negative and never -0),
// radixBits at a time, skipping the digits every key shares. It leaves the
// sorted ids' prob bits in s.keys[:len(ids)], in the same order.
func (s *Sampler) sortByProb(ids []uint32) {
	m := len(ids)
	if m < 2 {
		return
	}
	if cap(s.keys) < s.n {
		s.keys = make([]uint64, s.n)
		s.keys2 = make([]uint64, s.n)
		s.ids2 = make([]uint32, s.n)
	}
	keys, prob := s.keys[:m], s.prob
	w := spans(m, procs(s.procs))
	parallel(m, w, func(_, lo, hi int) {
		for i, id := range ids[lo:hi] {
			keys[lo+i] = math.Float64bits(prob[id])
		}
	})
	radixSort(keys, ids, s.keys2[:m], s.ids2[:m], &s.counts, radixLow, w)
}

// radixSort sorts the pairs (keys[i], vals[i]) by key, then by val: an
// LSD radix sort of the keys' digits from digit low up, radixBits at a
// time, skipping the digits every key shares, after which the runs whose
// keys agree on those digits are sorted whole by (key, val). Low digits
// left to the runs save passes over all the pairs where the high digits
// already tell almost every key apart (uniform keys, or probabilities
// that differ in their leading bits); with low 0 the sort is stable, so
// pairs given in ascending val come out by (key, val) as well. keys2 and
// vals2 are scratch of the same length; rc is scratch too. The sorted
// pairs end in keys and vals.
//
// Each pass runs on up to workers goroutines, each over its own span of
// the pairs: a span's pairs of a digit go to the places after those of
// the spans before it, as one pass over them all would put them, so the
// result is the same for any workers.
func radixSort(keys []uint64, vals []uint32, keys2 []uint64, vals2 []uint32, rc *radixCounts, low, workers int) {
	m := len(keys)
	if m < 2 {
		return
	}
	w := spans(m, workers)
	counts := rc.get(w)
	if w == 1 {
		// One span: its counts of every digit hold through the passes,
		// which only move the pairs.
		count := counts[0]
		for _, k := range keys {
			for d := low; d < radixDigits; d++ {
				count[d][k>>(radixBits*d)&radixMask]++
			}
		}
	}
	src, dst := vals, vals2
	for d := low; d < radixDigits; d++ {
		shift := radixBits * d
		if w > 1 {
			// Each pass moves pairs between spans: count its digit anew.
			parallel(m, w, func(c, lo, hi int) {
				count := &counts[c][d]
				for _, k := range keys[lo:hi] {
					count[k>>shift&radixMask]++
				}
			})
		}
		first := keys[0] >> shift & radixMask
		var all uint32
		for _, count := range counts {
			all += count[d][first]
		}
		if all == uint32(m) {
			continue
		}
		var pos uint32
		for v := range 1 << radixBits {
			for _, count := range counts {
				k := count[d][v]
				count[d][v] = pos
				pos += k
			}
		}
		toKeys, toVals, from, keysNow := keys2[:m], dst[:m], src[:m], keys[:m]
		parallel(m, w, func(c, lo, hi int) {
			place := &counts[c][d]
			for i := lo; i < hi; i++ {
				k := keysNow[i]
				v := k >> shift & radixMask
				p := place[v]
				toKeys[p] = k
				toVals[p] = from[i]
				place[v] = p + 1
			}
		})
		keys, keys2 = keys2, keys
		src, dst = dst, src
	}
	if &src[0] != &vals[0] {
		copy(vals, src)
		copy(keys2, keys) // keys2 is the caller's keys here
		keys = keys2
	}
	if low == 0 {
		return
	}
	// The runs, each whole on one goroutine: a span starts at the first
	// run that begins in it.
	shift := radixBits * low
	runStart := func(i int) int {
		for i > 0 && i < m && keys[i]>>shift == keys[i-1]>>shift {
			i++
		}
		return i
	}
	starts := make([]int, w+1) // found before any run is sorted
	for c := range w {
		lo, _ := span(m, w, c)
		starts[c] = runStart(lo)
	}
	starts[w] = m
	parallel(w, w, func(c, _, _ int) {
		lo, hi := starts[c], starts[c+1]
		for i := lo; i < hi-1; {
			j := i + 1
			for j < hi && keys[j]>>shift == keys[i]>>shift {
				j++
			}
			if j-i > 1 {
				sortPairs(keys[i:j], vals[i:j])
			}
			i = j
		}
	})
}

// sortPairs sorts a run of (key, val) pairs by key, then val, in place:
// by insertion while it is short, else by sort.Sort over both slices.
func sortPairs(keys []uint64, vals []uint32) {
	if len(keys) > 24 {
		sort.Sort(pairs{keys, vals})
		return
	}
	for i := 1; i < len(keys); i++ {
		k, v := keys[i], vals[i]
		j := i
		for ; j > 0 && (keys[j-1] > k || keys[j-1] == k && vals[j-1] > v); j-- {
			keys[j], vals[j] = keys[j-1], vals[j-1]
		}
		keys[j], vals[j] = k, v
	}
}

// pairs sorts (key, val) pairs held in two slices by key, then val.
type pairs struct {
	keys []uint64
	vals []uint32
}

func (p pairs) Len() int { return len(p.keys) }
func (p pairs) Less(i, j int) bool {
	return p.keys[i] < p.keys[j] || p.keys[i] == p.keys[j] && p.vals[i] < p.vals[j]
}
func (p pairs) Swap(i, j int) {
	p.keys[i], p.keys[j] = p.keys[j], p.keys[i]
	p.vals[i], p.vals[j] = p.vals[j], p.vals[i]
}

// radixSort's digits: six of 11 bits cover a 64-bit key. The sorts of
// probabilities and of Align's keys pass over the top three (bits 33 to
// 63) and leave the rest to the runs those share.
const (
	radixBits   = 11
	radixDigits = (64 + radixBits - 1) / radixBits
	radixMask   = 1<<radixBits - 1
	radixLow    = 3
)

// identity is 0..n-1.
func identity(n int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(i)
	}
	return p
}

// permutation is the uniform permutation of 0..n-1 for (seed, epoch): the
// order of epoch 0, of every epoch with PADS off, and the basis of
// UniformSlice.
func permutation(n int, seed uint64, epoch int) []uint32 {
	p := identity(n)
	newStream(seed, epoch).shuffle(p)
	return p
}

// stream is the random source of one (seed, epoch). Its bounded integers,
// floats and shuffle are defined here on top of PCG's Uint64, rather than taken
// from rand.Rand, so that they are part of OrderVersion and not of the Go
// release.
type stream struct{ src *rand.PCG }

func newStream(seed uint64, epoch int) stream {
	// Two well-mixed, unrelated words, so that neighbouring seeds and epochs
	// start far apart in PCG's state space.
	s1 := mix64(seed ^ mix64(uint64(epoch)+0x9e3779b97f4a7c15))
	s2 := mix64(s1 ^ 0xd1b54a32d192ed03 ^ uint64(epoch))
	return stream{rand.NewPCG(s1, s2)}
}

// mix64 is SplitMix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// intn is uniform in [0, n), n > 0 (Lemire's multiply-and-reject).
func (r stream) intn(n uint64) uint64 {
	hi, lo := bits.Mul64(r.src.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.src.Uint64(), n)
		}
	}
	return hi
}

// coin is uniform over the 32-bit integers.
func (r stream) coin() uint32 {
	return uint32(r.src.Uint64() >> 32)
}

// shuffle is Fisher-Yates from the back.
func (r stream) shuffle(p []uint32) {
	for i := len(p) - 1; i > 0; i-- {
		j := r.intn(uint64(i + 1))
		p[i], p[j] = p[j], p[i]
	}
}
