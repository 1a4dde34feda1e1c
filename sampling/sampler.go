package sampling

import (
	"math"
	"math/bits"
	"math/rand/v2"
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
)

// Config selects a job's sampling. Because zero is a meaningful explicit value
// for UniformFloor and CoverageEpochs, a negative value selects the default
// for those fields; see DefaultConfig for the recommended preset. The zero
// Config is plain uniform sampling (PADS off).
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
	return c
}

// Sampler produces one job's epoch orders over a dataset of n samples. It holds
// the coverage state (the last epoch each sample was drawn) and the next epoch
// to order, and reuses scratch space between epochs (about 24 bytes per sample
// with PADS on, 4 with it off). It is not safe for concurrent use.
type Sampler struct {
	cfg    Config
	cfgErr error
	n      int
	next   int     // the epoch Order accepts next
	last   []int32 // last epoch each sample was in an order; -1 never

	prob []float64 // scratch: scaled probabilities while building the alias table
	work []uint32  // scratch: Vose's small and large worklists
	cols []column  // the alias table
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

// Config is the sampler's configuration with defaults filled in.
func (s *Sampler) Config() Config { return s.cfg }

// Len is the number of samples.
func (s *Sampler) Len() int { return s.n }

// Next is the epoch the next call to Order must ask for.
func (s *Sampler) Next() int { return s.next }

// Order returns the full order of epoch (length Len(), before splitting by
// rank; a new slice owned by the caller) and advances the sampler. Epochs must
// be ordered in sequence 0, 1, 2, ...; any other epoch fails with
// ErrEpochOutOfSequence. Epoch 0, and every epoch with PADS off, is a uniform
// permutation of 0..n-1 (t is not consulted and may be nil). With PADS on,
// epoch e >= 1 draws from t's effective scores as described in Config; t must
// have Len() samples (ErrSizeMismatch). On error the sampler is unchanged.
//
// Two samplers with the same Config and coverage state produce the same order
// from tables with the same contents, on any architecture; replaying epochs
// 0..e-1 with the same tables, or restoring MarshalBinary's state, reproduces
// the state.
func (s *Sampler) Order(epoch int, t *Table) ([]uint32, error) {
	if s.cfgErr != nil {
		return nil, s.cfgErr
	}
	if epoch != s.next || epoch >= math.MaxInt32 {
		return nil, wrapf(ErrEpochOutOfSequence, "epoch %d, want %d", epoch, s.next)
	}
	var order []uint32
	if !s.cfg.PADS || epoch == 0 {
		order = permutation(s.n, s.cfg.Seed, epoch)
	} else {
		if t == nil || t.Len() != s.n {
			got := 0
			if t != nil {
				got = t.Len()
			}
			return nil, wrapf(ErrSizeMismatch, "table of %d samples for a sampler of %d", got, s.n)
		}
		order = s.pads(epoch, t)
	}
	for _, id := range order {
		s.last[id] = int32(epoch)
	}
	s.next++
	return order, nil
}

// pads draws epoch's order: forced samples first (ascending id), then draws
// from the alias table up to n, then one shuffle of the whole.
func (s *Sampler) pads(epoch int, t *Table) []uint32 {
	rng := newStream(s.cfg.Seed, epoch)
	order := make([]uint32, 0, s.n)
	if k := s.cfg.CoverageEpochs; k > 0 {
		cutoff := int64(epoch) - int64(k) // last <= cutoff: absent from epochs e-K+1..e-1
		for id, l := range s.last {
			if int64(l) <= cutoff {
				order = append(order, uint32(id))
			}
		}
	}
	if len(order) < s.n {
		s.buildAlias(t)
		n := uint64(s.n)
		for len(order) < s.n {
			i := uint32(rng.intn(n))
			if c := s.cols[i]; c.alias != i && rng.coin() >= c.accept {
				i = c.alias
			}
			order = append(order, i)
		}
	}
	rng.shuffle(order)
	return order
}

// buildAlias fills cols with Vose's alias table for the mixed distribution
// (1-u)*w_i/W + u/n. If the weights sum to zero or overflow the distribution is
// uniform. Acceptance probabilities are kept to 32 bits: no sample's
// probability is off by more than 2^-32/n.
func (s *Sampler) buildAlias(t *Table) {
	n := s.n
	if cap(s.prob) < n {
		s.prob = make([]float64, n)
		s.work = make([]uint32, n)
		s.cols = make([]column, n)
	}
	prob, work, cols := s.prob[:n], s.work[:n], s.cols[:n]

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
		for i, wt := range prob {
			prob[i] = float64(wt*scale) + u // rounded product: no FMA
		}
	} else {
		for i := range prob {
			prob[i] = 1
		}
	}

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

// permutation is the uniform permutation of 0..n-1 for (seed, epoch): the
// order of epoch 0, of every epoch with PADS off, and the basis of
// UniformSlice.
func permutation(n int, seed uint64, epoch int) []uint32 {
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(i)
	}
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
