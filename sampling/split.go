package sampling

import (
	"fmt"
	"slices"
)

// Split cuts an epoch's order into world disjoint slices of equal length, as
// PyTorch's DistributedSampler(drop_last=False) does: the order is padded to a
// multiple of world by wrapping around to its front (repeatedly when it is
// shorter than the padding, as when len(order) < world), and rank r takes
// positions r, r+world, r+2*world, ... of the padded order. Every slice has
// ceil(len(order)/world) ids; an empty order gives world empty slices. The
// slices share one new backing array but are capacity-limited, so appending to
// one never writes into another; order is not retained. world < 1 fails with
// ErrBadWorld.
func Split(order []uint32, world int) ([][]uint32, error) {
	if world < 1 {
		return nil, wrapf(ErrBadWorld, "world %d", world)
	}
	per := (len(order) + world - 1) / world
	backing := make([]uint32, per*world)
	out := make([][]uint32, world)
	for r := range out {
		out[r] = backing[r*per : (r+1)*per : (r+1)*per]
		strided(out[r], order, world, r)
	}
	return out, nil
}

// strided fills dst with positions rank, rank+world, ... of order padded by
// wrap-around.
func strided(dst, order []uint32, world, rank int) {
	pos := rank
	for k := range dst {
		dst[k] = order[pos%len(order)]
		pos += world
	}
}

// UniformSlice is rank's slice of epoch's uniform order, the equivalent of
// PyTorch's DistributedSampler(n, world, rank, shuffle=True, seed,
// drop_last=False) after set_epoch(epoch): a permutation of 0..n-1 drawn from
// (seed, epoch), padded by wrap-around to a multiple of world, of which rank
// takes indices[rank::world]; ceil(n/world) ids. It equals
// Split(order, world)[rank] for the order that a Sampler with PADS off (or any
// sampler at epoch 0) gives for (seed, epoch), so ranks may compute their own
// slices without a leader. It returns nil if n or epoch is negative, world < 1
// or rank is outside [0, world), and an empty slice if n is 0.
func UniformSlice(n, world, rank int, seed uint64, epoch int) []uint32 {
	if n < 0 || uint64(n) > 1<<32-1 || epoch < 0 || world < 1 || rank < 0 || rank >= world {
		return nil
	}
	dst := make([]uint32, (n+world-1)/world)
	if n > 0 {
		strided(dst, permutation(n, seed, epoch), world, rank)
	}
	return dst
}

// Placement says which nodes own each sample, for LocalitySplit. The
// samples fall into Groups groups that share their owners, as a ring's
// partitions do: Group gives a sample's group, in [0, Groups), and Owners
// a group's nodes. A split asks Owners once for each group it meets and
// does not keep the slice; it calls Group once per place of the order,
// from several goroutines at once.
type Placement struct {
	Groups int
	Group  func(id uint32) int
	Owners func(group int) []string
}

// LocalitySplit cuts an epoch's order into world slices of equal length,
// giving each drawn sample to a rank on one of its owners where one has
// room and is not ahead of the others, so that the rank's reads hit its
// own node's memory. The multiset of the epoch is unchanged; each slice
// keeps the order's sequence, and its k-th sample is from about place
// k*world of the order. The slices share one new backing array but are
// capacity-limited, as Split's are.
// rankNode[r] names the node rank r trains on ("" if unknown); where says
// which nodes own each sample. world < 1 fails with ErrBadWorld, a
// Placement without its functions or a group out of its range with
// ErrBadPlacement.
func LocalitySplit(order []uint32, world int, rankNode []string, where Placement) ([][]uint32, error) {
	return localitySplit(order, world, rankNode, where, procs(0))
}

// localitySplit is LocalitySplit on up to workers goroutines.
func localitySplit(order []uint32, world int, rankNode []string, where Placement, workers int) ([][]uint32, error) {
	if world < 1 {
		return nil, fmt.Errorf("%w: %d", ErrBadWorld, world)
	}
	if where.Groups < 0 || where.Group == nil || where.Owners == nil {
		return nil, fmt.Errorf("%w: %d groups, group function set %t, owners function set %t",
			ErrBadPlacement, where.Groups, where.Group != nil, where.Owners != nil)
	}
	per := (len(order) + world - 1) / world
	padded := order
	for len(padded) < per*world { // wrap around, as DistributedSampler pads
		padded = append(padded[:len(padded):len(padded)], order[:min(len(order), per*world-len(padded))]...)
	}
	// The ranks on each group's owners, looked up once per group: a
	// sample's candidates are then a slice read, not a lookup of its
	// owners' names (at a rank on each of 1,000 nodes, those lookups
	// were half the split).
	ranksOn := make(map[string][]int32)
	for r, node := range rankNode {
		if node != "" {
			ranksOn[node] = append(ranksOn[node], int32(r))
		}
	}
	// The places of the order are dealt in its sequence, each rank kept
	// within slack of its share of the places dealt so far: a sample goes
	// to the least filled rank on one of its owners that is not ahead,
	// else to the least filled rank of all. So each slice keeps the
	// order's sequence and the slices advance through the order side by
	// side: ranks that read their slices in step read the order's samples
	// at about the times the order has them (which sampling.Align lines
	// up across jobs), and a rank whose node owns more than its share
	// takes its own samples all through the epoch, not all at its start.
	slack := max(1, per/64)
	filled := make([]int, world)
	// The rank a sample goes to when none on its owners may take it is
	// found without looking at every rank each time (at a rank on each of
	// 1,000 nodes, that scan was most of the split).
	open := leastFilled{filled: filled}
	// Each place's group, looked up on every core first; each span marks
	// the groups it meets. The dealing below writes each place's rank
	// over its group: of[i] is place i's group, then its rank.
	of := make([]int32, len(padded))
	w := spans(len(padded), workers)
	bad := make([]int, w)
	met := make([][]uint64, w)
	parallel(len(padded), w, func(c, lo, hi int) {
		bad[c] = -1
		met[c] = make([]uint64, (where.Groups+63)/64)
		for i := lo; i < hi; i++ {
			g := where.Group(padded[i])
			if uint(g) >= uint(where.Groups) {
				bad[c] = i
				return
			}
			of[i] = int32(g)
			met[c][g/64] |= 1 << (g % 64)
		}
	})
	for _, i := range bad {
		if i >= 0 {
			id := padded[i]
			return nil, fmt.Errorf("%w: sample %d in group %d of %d", ErrBadPlacement, id, where.Group(id), where.Groups)
		}
	}
	// The candidates of group g, the ranks on its owners, are
	// cand[first[g]:first[g+1]]: one array the dealing reads, not a
	// slice of its own per group.
	for _, m := range met[1:] {
		for j, word := range m {
			met[0][j] |= word
		}
	}
	first := make([]int, where.Groups+1)
	var cand []int32
	for g := range where.Groups {
		first[g] = len(cand)
		if met[0][g/64]&(1<<(g%64)) != 0 {
			for _, owner := range where.Owners(g) {
				cand = append(cand, ranksOn[owner]...)
			}
		}
	}
	first[where.Groups] = len(cand)
	// The dealing is sequential, but only decides: each place's rank goes
	// in of, and each span of places notes where its ranks' slices stand
	// at its start. The samples are then put in the slices span by span
	// on every core, so the dealing touches the ranks' fills and the
	// places in sequence and none of the slices' scattered memory.
	at := make([][]int, w) // at[c][r]: rank r's samples dealt before span c
	// A rank may hold min(per, share+slack) samples once i+1 places are
	// dealt, its share being (i+1)*per/len(padded); the share is kept
	// by steps, not divided out at every place.
	share, next := 0, len(padded) // next: (share+1)*len(padded)
	for c := range w {
		at[c] = slices.Clone(filled)
		lo, hi := span(len(padded), w, c)
		for i := lo; i < hi; i++ {
			for (i+1)*per >= next {
				share++
				next += len(padded)
			}
			room := min(per, share+slack)
			g := of[i]
			best, least := int32(-1), room // the least filled candidate with room
			for _, r := range cand[first[g]:first[g+1]] {
				if f := filled[r]; f < least {
					best, least = r, f
				}
			}
			if best < 0 {
				best = int32(open.least())
			}
			filled[best]++
			of[i] = best
		}
	}
	backing := make([]uint32, per*world)
	out := make([][]uint32, world)
	for r := range out {
		out[r] = backing[r*per : (r+1)*per : (r+1)*per]
	}
	parallel(len(padded), w, func(c, lo, hi int) {
		next := at[c]
		for i, r := range of[lo:hi] {
			out[r][next[r]] = padded[lo+i]
			next[r]++
		}
	})
	return out, nil
}

// OwnersPlacement is the Placement of owners given sample by sample:
// each of n samples is a group of its own. It suits small orders and
// tests; a ring's partitions make far fewer groups.
func OwnersPlacement(n int, owners func(id uint32) []string) Placement {
	return Placement{
		Groups: n,
		Group:  func(id uint32) int { return int(id) },
		Owners: func(g int) []string { return owners(uint32(g)) },
	}
}

// leastFilled finds the least filled rank (the lowest of those that tie)
// by a cursor over the ranks in order at the lowest fill any rank has.
// Fills only grow, so a rank the cursor has passed holds more than that
// fill for good, and the cursor need not look back until no rank is left
// at it: then the lowest fill is one more, and the cursor starts over.
// Over a whole split the cursor passes each rank once per fill level,
// per*world steps in all, as many as the samples dealt.
type leastFilled struct {
	filled []int // samples each rank holds; shared with the caller
	fill   int   // no rank holds fewer
	cursor int   // every rank before it holds more than fill
}

// least returns the rank that holds the fewest samples, the lowest of
// those that tie. Some rank must have room: then the least filled has.
func (l *leastFilled) least() int {
	for {
		for ; l.cursor < len(l.filled); l.cursor++ {
			if l.filled[l.cursor] == l.fill {
				return l.cursor
			}
		}
		l.fill++
		l.cursor = 0
	}
}
