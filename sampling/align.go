package sampling

import "slices"

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
// It takes O(n log n) for an order of n samples and allocates 16 bytes a
// sample.
func Align(order []uint32, seed uint64, epoch int) {
	type keyed struct {
		key uint64
		id  uint32
	}
	base := mix64(seed ^ mix64(uint64(epoch)+0x7f4a7c159e3779b9))
	copies := make(map[uint32]uint32)
	ks := make([]keyed, len(order))
	for i, id := range order {
		k := copies[id]
		copies[id] = k + 1
		ks[i] = keyed{key: mix64(base ^ mix64(uint64(id)<<20^uint64(k))), id: id}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return int(a.id) - int(b.id)
	})
	for i, k := range ks {
		order[i] = k.id
	}
}
