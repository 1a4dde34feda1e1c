package sampling

import (
	"math/bits"
	"slices"
)

// Align reorders an epoch's order by a key that depends only on (seed,
// epoch) and the sample: the k-th copy of sample id in the order goes to
// the place of key(seed, epoch, id, k) among the order's keys. The order
// keeps its samples and copies, so what an epoch trains on and the
// weights are unchanged; only when each is read moves.
//
// Why: several jobs that read one dataset side by side draw their own
// orders. Aligned with the same seed, a sample that two jobs' orders of
// the same epoch both hold comes at about the same point of both epochs
// (its place is its key's rank among about the same number of uniform
// keys), so the second job reads it from the cache, just after the first
// brought it in, instead of from the source. The keys are uniform and
// independent of the draw: an aligned order is as random an ordering of
// its samples as the sampler's own shuffle.
//
// It takes O(n) time, a radix sort of the keys, and allocates about 24
// bytes a sample.
func Align(order []uint32, seed uint64, epoch int) {
	align(order, seed, epoch, procs(0))
}

// AlignedPermutation is a permutation epoch's order of n samples as
// DrawUnordered gives it (0..n-1), aligned with seed for epoch: the order
// of that epoch of every job that aligns with seed, before it is turned
// to where the job starts. A new slice.
func AlignedPermutation(n int, seed uint64, epoch int) []uint32 {
	order := identity(n)
	Align(order, seed, epoch)
	return order
}

// align is Align on up to workers goroutines (see parallel.go).
func align(order []uint32, seed uint64, epoch int, workers int) {
	n := len(order)
	if n < 2 {
		return
	}
	base := mix64(seed ^ mix64(uint64(epoch)+0x7f4a7c159e3779b9))
	largest := slices.Max(order)
	keys := make([]uint64, n)
	// Which copy of its sample each place holds, counted in one pass in
	// order; then the keys, hashed on every goroutine.
	if int(largest) < 4*n+1024 {
		// The copies of each sample counted in a table by id: the ids of
		// an order are below its dataset's size, about n.
		copies := make([]uint32, int(largest)+1)
		for i, id := range order {
			keys[i] = uint64(copies[id])
			copies[id]++
		}
	} else {
		copies := make(map[uint32]uint32)
		for i, id := range order {
			keys[i] = uint64(copies[id])
			copies[id]++
		}
	}
	w := spans(n, workers)
	parallel(n, w, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			keys[i] = mix64(base ^ mix64(uint64(order[i])<<20^keys[i]))
		}
	})
	// By key, and equal keys (two copies hashed alike, as good as never)
	// by id.
	radixSort(keys, order, make([]uint64, n), make([]uint32, n), new(radixCounts), uniformLow(n), w)
}

// uniformLow is the lowest digit a radix sort of n uniform keys passes
// over: the digits above it tell the keys apart but for runs of about 2
// keys, left to be sorted whole, so no pass is spent on digits that
// order little else (at 1.28 M keys, 2 passes instead of 3).
func uniformLow(n int) int {
	need := bits.Len(uint(n)) - 1 // bits for n/2 values
	return min(radixDigits-1, max(0, (64-need)/radixBits))
}
