// Package sampling holds Shade's per-sample importance scores and the samplers
// that turn them into epoch orders: PADS (importance sampling with replacement,
// SHADE FAST '23, corrected, with unbiasing weights and optional cache-aware
// draws) and plain uniform sampling equivalent to PyTorch's
// DistributedSampler.
//
// The package is a pure leaf: it touches no network, clock or global state.
// Every random choice comes from an injected *rand.Rand (score tie-breaking) or
// from a PCG stream derived from (job seed, epoch) (orders), so any process that
// holds the same inputs computes the same result.
//
// # Scores
//
// A trainer reports one minibatch at a time as (sample id, loss) pairs, and
// the table's [ScoreKind] turns the batch into scores. Under [ScoreRankLog],
// the default, [RankScores] ranks the m losses ascending, ties in random
// order, and gives the sample at rank k the score
//
//	s = ln(10 + 63 p),  p = k/(m-1)  (p = 1 when m = 1),
//
// which is SHADE's ln(rank+10) shape made independent of the batch size: scores
// lie in [ln 10, ln 73] ≈ [2.303, 4.290]. Under [ScoreMagnitude],
// [MagnitudeScores] gives each sample its share of a bounded gradient-norm
// proxy,
//
//	g = 1 - e^-max(0, loss),  s = min(64, g / mean(g over the batch)),
//
// (s = 1 for all when every g is 0), so that a sample's score tracks how much
// it would move the model rather than only where its loss ranks. [Table.Report]
// merges each score into the dataset's table by an exponential moving average,
//
//	score[id] = a*s + (1-a)*score[id],
//
// with a = [DefaultAlpha] unless configured. A sample never scored takes the
// running mean of the scored samples as its prior and as its effective score
// (while nothing is scored, the kind's neutral score: ln 41.5, the middle of
// the range, or 1, the batch mean), so a sample that has not been seen yet is
// neither favoured nor starved.
//
// # Orders
//
// [Sampler.Order] (or [Sampler.Draw], which adds weights) produces one
// epoch's full order of n sample ids. Epoch 0, and
// every epoch when PADS is off, is a uniform permutation. With PADS on, epoch
// e >= 1 draws n ids with replacement, sample i with probability
//
//	(1-u) * w_i / sum(w) + u/n,  w_i = max(0, score_i + lambda),
//
// where u is the uniform floor; samples not drawn in the last K-1 epochs are
// forced in first (the coverage floor), and the result is shuffled. [Split] and
// [UniformSlice] cut an order into equal per-rank slices the way
// DistributedSampler(drop_last=False) does: padded by wrapping around to the
// front, rank r takes positions r, r+world, r+2*world, ...
//
// # Weights and cache-aware draws
//
// Importance sampling pays only if it stays unbiased and if its draws do not
// defeat the cache. [Sampler.Draw] returns, beside the order, a weight per
// sample, ω_i = 1/c_i, where c_i is the sample's expected count in the epoch:
// multiplying each drawn sample's loss by its weight makes the epoch's sum an
// unbiased estimate of the sum over the whole dataset. With F samples forced
// by the coverage floor and D = n-F draws, sample i is drawn with probability
// q_i per draw and
//
//	c_i = forced_i + D*q_i.
//
// A permutation (epoch 0, PADS off, or K = 1) gives every weight 1. The q_i
// are built in three steps:
//
//  1. The mixture (1-u)*w_i/W + u/n, as for [Sampler.Order].
//  2. Cache-aware boost, with Config.Boost = β > 0 and a residency bitmap:
//     the samples are sorted by their step-1 probability (ties by id) and cut
//     into Config.Strata strata of equal count (default [DefaultStrata]); in
//     each stratum a resident sample's probability is multiplied by 1+β and
//     the stratum is scaled back to its former total. A stratum's share of
//     the draws, and so the importance each stratum gets, is unchanged: the
//     boost only prefers a cached sample to an uncached one of nearly the
//     same importance, and the weights undo the preference in expectation.
//  3. The weight cap, with Config.MaxWeight = M > 0: every sample not forced
//     gets q_i >= 1/(M*D) by water-filling (those below are raised to the
//     floor, the rest scaled down by one common factor so that the q_i sum
//     to 1, solved exactly after one sort of the candidates), so that its
//     weight 1/(D*q_i) is at most M. Forced samples need no floor: c_i >= 1.
//     A cap bounds the variance any one sample can add to a gradient, at the
//     price of drawing the least important samples more often.
//
// With Boost and MaxWeight zero, Draw's orders are Order's, bit for bit.
//
// # Reproducibility
//
// An order, and Draw's weights, are a pure function of (Config, epoch, the
// table's contents, the sampler's coverage state, the residency bitmap)
// under the algorithms of [OrderVersion]. Only
// integer operations and IEEE-754 additions, multiplications, divisions and
// conversions are used on that path (the boost's strata and the cap's
// candidates are ordered by an exact radix sort of the probabilities' bits,
// ties by id), and every product that feeds an addition is wrapped in an
// explicit float64(...) conversion, which the Go specification says forbids
// fusing it into an FMA; hence amd64, arm64 and the rest compute
// bit-identical probabilities, alias tables and importance weights. The running mean is
// kept as an exact per-exponent integer sum of the float32 scores, so it
// depends only on which scores the table holds, not on the history that
// produced them. Bounded integers, coins and shuffles are derived from PCG's
// Uint64 (coupled draws, from SplitMix64 counters) by this package rather
// than taken from rand.Rand's methods, so a Go upgrade cannot change an
// order either. Scores themselves use math.Log, whose
// last bit may differ between architectures; they are computed once, by the
// leader, and replicated verbatim (Table.Set, MarshalBinary), so that does not
// matter.
//
// # Concurrency
//
// Table and Sampler are not safe for concurrent use; the caller locks. All
// package-level functions are safe for concurrent use.
package sampling

import "errors"

// OrderVersion names the algorithms that turn (seed, epoch, table, coverage
// state) into an order. It changes whenever a change to this package would
// change any order, so peers can refuse to mix versions. Version 2 added
// Config.DrawSeed's coupled draws; with DrawSeed 0 its orders are version
// 1's, bit for bit.
const OrderVersion = 2

// Sentinel errors; every error returned by this package wraps one of them.
var (
	// ErrIDOutOfRange: a sample id is not below the table's length.
	ErrIDOutOfRange = errors.New("sampling: id out of range")
	// ErrLossNotFinite: a reported loss is NaN or infinite.
	ErrLossNotFinite = errors.New("sampling: loss not finite")
	// ErrBadBatch: a reported batch is empty or its ids and losses differ in length.
	ErrBadBatch = errors.New("sampling: bad batch")
	// ErrBadScore: a score to install is negative, NaN, or too large for a float32.
	ErrBadScore = errors.New("sampling: bad score")
	// ErrEpochOutOfSequence: Sampler.Order was asked for an epoch other than the next one.
	ErrEpochOutOfSequence = errors.New("sampling: epoch out of sequence")
	// ErrNotPermutation: Sampler.DrawPermutation was asked for an epoch
	// that PADS draws, not a permutation.
	ErrNotPermutation = errors.New("sampling: epoch is not a permutation")
	// ErrSizeMismatch: a table, sampler or encoding covers a different number of samples.
	ErrSizeMismatch = errors.New("sampling: size mismatch")
	// ErrBadConfig: a Config field is out of its documented range.
	ErrBadConfig = errors.New("sampling: bad config")
	// ErrBadWorld: a world size below 1.
	ErrBadWorld = errors.New("sampling: bad world size")
	// ErrBadPlacement: a Placement without its functions, or that puts a
	// sample in a group outside its range.
	ErrBadPlacement = errors.New("sampling: bad placement")
	// ErrCorrupt: an encoding is truncated, of an unknown version, fails its
	// checksum or holds values out of range.
	ErrCorrupt = errors.New("sampling: corrupt encoding")
)
