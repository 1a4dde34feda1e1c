package sampling

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
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
// a group's nodes, a slice its callers only read (it may be the ring's
// own). A split asks Owners once for each group it meets and does not
// keep the slice; it looks up the group of each place of the order, from
// several goroutines at once. All must be safe for concurrent use.
type Placement struct {
	Groups int
	Group  func(id uint32) int
	// GroupEach, where not nil, is Group of a run of samples: groups[k]
	// = Group(ids[k]) for each k (groups is as long as ids), and must
	// agree with Group. The passes over many samples (GroupOrder,
	// LocalitySplit, the tests OwnedBy and OwnedByAny, wire.ScoreQueue)
	// call it a run at a time where they would call Group for each: a
	// loop of table reads with nothing between them, whose misses
	// overlap (ring.Samples.PartitionsOf), where a call of Group for
	// each held a few at a time (GroupOrder of 1.28 M samples: 6-7 ms
	// against 11-15).
	GroupEach func(ids []uint32, groups []int32)
	Owners    func(group int) []string
	// Masks, where not nil, sets masks[g] for every group g (masks is
	// Groups long) to the OR of bits[name] over g's owners, as Owners
	// gives them (ring.Ring.OwnerMasks). The tests OwnedBy and
	// OwnedByAny then find every group's owners at once, in one pass by
	// the owners' indexes; without it each group's, by name, as a pass
	// first meets it. It must be safe for concurrent use.
	Masks func(bits map[string]uint64, masks []uint64)
	// Key, where not nil, names the owners: placements with equal Keys
	// have the same Groups, and each group the same Owners, so a user
	// may keep what it found of a group's owners while the Key stays
	// (wire.ScoreQueue does). It must be comparable: a ring's pointer
	// (a ring never changes).
	Key any
}

// groupRun is how many samples' groups a pass over many looks up in one
// call of GroupsOf, into an array of that length.
const groupRun = 256

// GroupsOf sets groups[k] to the group of ids[k] for each k (groups is
// as long as ids): by w.GroupEach where it is set, else by w.Group.
func (w Placement) GroupsOf(ids []uint32, groups []int32) {
	if w.GroupEach != nil {
		w.GroupEach(ids, groups)
		return
	}
	for k, id := range ids {
		g := w.Group(id)
		if g != int(int32(g)) {
			g = -1 // out of any range, not wrapped into one
		}
		groups[k] = int32(g)
	}
}

// OwnedBy returns, for passes over many samples, a test of which of
// names (at most 64) own each of a run of samples: it sets bit i of
// masks[k] where names[i] owns ids[k] (masks is as long as ids). Every
// group's owners are found as the test is made, where w has Masks;
// otherwise each group's are looked at once, at its first sample (or
// once by each of the goroutines that meet it first together). A sample
// of a group outside 0..Groups-1 is owned by none. The test is safe for
// concurrent use, and then calls Owners from several goroutines at once.
func (w Placement) OwnedBy(names []string) func(ids []uint32, masks []uint64) {
	if len(names) > 64 {
		panic("sampling: OwnedBy of more than 64 names")
	}
	bit := make(map[string]uint64, len(names))
	for i, name := range names {
		bit[name] |= 1 << i
	}
	return w.ownedBy(bit)
}

// OwnedByAny is OwnedBy of sets of names (at most 64 sets): bit i is set
// where any of sets[i] owns the sample.
func (w Placement) OwnedByAny(sets [][]string) func(ids []uint32, masks []uint64) {
	if len(sets) > 64 {
		panic("sampling: OwnedByAny of more than 64 sets")
	}
	bit := make(map[string]uint64)
	for i, set := range sets {
		for _, name := range set {
			bit[name] |= 1 << i
		}
	}
	return w.ownedBy(bit)
}

// ownedBy is OwnedBy with each owner's bits in bit (read only).
func (w Placement) ownedBy(bit map[string]uint64) func(ids []uint32, masks []uint64) {
	var of func(groups []int32, masks []uint64) // masks[k] for groups[k]
	if w.Masks != nil {
		owners := make([]uint64, w.Groups)
		w.Masks(bit, owners)
		of = func(groups []int32, masks []uint64) {
			for k, g := range groups {
				if uint(g) < uint(len(owners)) {
					masks[k] = owners[g]
				} else {
					masks[k] = 0
				}
			}
		}
	} else {
		owners := make([]atomic.Uint64, w.Groups)
		known := make([]atomic.Bool, w.Groups) // owners[g] is set
		of = func(groups []int32, masks []uint64) {
			for k, g := range groups {
				if uint(g) >= uint(len(owners)) {
					masks[k] = 0
					continue
				}
				if !known[g].Load() {
					var m uint64
					for _, owner := range w.Owners(int(g)) {
						m |= bit[owner]
					}
					owners[g].Store(m)
					known[g].Store(true)
				}
				masks[k] = owners[g].Load()
			}
		}
	}
	var runs sync.Pool // of *[groupRun]int32: a run's groups
	return func(ids []uint32, masks []uint64) {
		groups, _ := runs.Get().(*[groupRun]int32)
		if groups == nil {
			groups = new([groupRun]int32)
		}
		defer runs.Put(groups)
		for len(ids) > 0 {
			n := min(len(ids), len(groups))
			w.GroupsOf(ids[:n], groups[:n])
			of(groups[:n], masks[:n])
			ids, masks = ids[n:], masks[n:]
		}
	}
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
// ErrBadPlacement. It is GroupOrder and Grouped.Split in one.
func LocalitySplit(order []uint32, world int, rankNode []string, where Placement) ([][]uint32, error) {
	return localitySplit(order, world, rankNode, where, procs(0))
}

// localitySplit is LocalitySplit on up to workers goroutines.
func localitySplit(order []uint32, world int, rankNode []string, where Placement, workers int) ([][]uint32, error) {
	if world < 1 {
		return nil, fmt.Errorf("%w: %d", ErrBadWorld, world)
	}
	g, err := groupOrder(order, where, workers)
	if err != nil {
		return nil, err
	}
	return g.split(world, rankNode, where, workers, true)
}

// Grouped is an order with the group of each of its places looked up
// (GroupOrder), to be split among ranks once they are known
// (Grouped.Split): most of a split's work that needs no rank, done
// ahead, as a leader draws an epoch's order before its ranks have all
// joined. The zero Grouped is an empty order of no group.
type Grouped struct {
	order  []uint32
	groups []uint32 // groups[i] is order[i]'s
	met    []uint64 // bit g: group g has a place
	n      int      // the placement's Groups
}

// GroupOrder looks up the group of each place of order (where.GroupsOf,
// on every core), for Grouped.Split. It keeps order, which the caller must
// not change while the Grouped is used. A Placement without its
// functions or a group out of its range fails with ErrBadPlacement.
func GroupOrder(order []uint32, where Placement) (Grouped, error) {
	return groupOrder(order, where, procs(0))
}

// groupOrder is GroupOrder on up to workers goroutines.
func groupOrder(order []uint32, where Placement, workers int) (Grouped, error) {
	if where.Groups < 0 || where.Group == nil || where.Owners == nil {
		return Grouped{}, fmt.Errorf("%w: %d groups, group function set %t, owners function set %t",
			ErrBadPlacement, where.Groups, where.Group != nil, where.Owners != nil)
	}
	g := Grouped{order: order, groups: make([]uint32, len(order)), n: where.Groups}
	// Each span marks the groups it meets.
	w := spans(len(order), workers)
	bad := make([]int, w)
	met := make([][]uint64, w)
	parallel(len(order), w, func(c, lo, hi int) {
		bad[c] = -1
		met[c] = make([]uint64, (where.Groups+63)/64)
		// The groups first, in a pass of their own: each is a lookup at
		// random in a table of megabytes, and with nothing waiting on
		// them they overlap, where the marking below, at an address each
		// one's result gives, held them one at a time.
		var run [groupRun]int32
		for i := lo; i < hi; i += len(run) {
			n := min(len(run), hi-i)
			where.GroupsOf(order[i:i+n], run[:n])
			for k, grp := range run[:n] {
				if uint(grp) >= uint(where.Groups) {
					grp = -1 // out of range, as uint32: caught below
				}
				g.groups[i+k] = uint32(grp)
			}
		}
		for i, grp := range g.groups[lo:hi] {
			if grp >= uint32(where.Groups) {
				bad[c] = lo + i
				return
			}
			met[c][grp/64] |= 1 << (grp % 64)
		}
	})
	for _, i := range bad {
		if i >= 0 {
			id := order[i]
			return Grouped{}, fmt.Errorf("%w: sample %d in group %d of %d", ErrBadPlacement, id, where.Group(id), where.Groups)
		}
	}
	for _, m := range met[1:] {
		for j, word := range m {
			met[0][j] |= word
		}
	}
	g.met = met[0]
	return g, nil
}

// Order is the grouped order, which g keeps: the caller must not change
// it while g is used.
func (g Grouped) Order() []uint32 { return g.order }

// Rotated returns the order rotated left by k places (k modulo its
// length), its places' groups with them, in new arrays: the Grouped
// GroupOrder would give of order[k:] followed by order[:k], without
// looking a group up (the groups met, never written after GroupOrder,
// are shared). g is left as it is. A job whose order starts where
// another job of its dataset is (a phase) takes a grouped order prepared
// once this way.
func (g Grouped) Rotated(k int) Grouped {
	return Grouped{order: Rotated(g.order, k), groups: Rotated(g.groups, k), met: g.met, n: g.n}
}

// Rotated returns a new slice of s rotated left by k places (k modulo
// len(s)): s[k:] followed by s[:k]. s is left as it is.
func Rotated(s []uint32, k int) []uint32 {
	n := len(s)
	out := make([]uint32, n)
	if n == 0 {
		return out
	}
	if k %= n; k < 0 {
		k += n
	}
	copy(out, s[k:])
	copy(out[n-k:], s[:k])
	return out
}

// Fits reports whether where has the groups g was grouped into, as Split
// needs.
func (g Grouped) Fits(where Placement) bool { return where.Groups == g.n }

// Split is LocalitySplit of the grouped order: where's owners are asked
// now, and must group the samples as the placement that grouped them
// did (the same Groups; a ring's partitions are, whatever its members).
// A placement of other Groups, or without Owners, fails with
// ErrBadPlacement; world < 1 with ErrBadWorld. g is left as it is.
func (g Grouped) Split(world int, rankNode []string, where Placement) ([][]uint32, error) {
	if world < 1 {
		return nil, fmt.Errorf("%w: %d", ErrBadWorld, world)
	}
	if where.Owners == nil || !g.Fits(where) {
		return nil, fmt.Errorf("%w: grouped into %d groups, split with %d, owners function set %t",
			ErrBadPlacement, g.n, where.Groups, where.Owners != nil)
	}
	return g.split(world, rankNode, where, procs(0), false)
}

// split is Split on up to workers goroutines; mine says that g is used
// once, so that its groups may be overwritten.
func (g Grouped) split(world int, rankNode []string, where Placement, workers int, mine bool) ([][]uint32, error) {
	order := g.order
	per := (len(order) + world - 1) / world
	padded := order
	for len(padded) < per*world { // wrap around, as DistributedSampler pads
		padded = append(padded[:len(padded):len(padded)], order[:min(len(order), per*world-len(padded))]...)
	}
	// Each place's group; the dealing below writes each place's rank
	// over its group: of[i] is place i's group, then its rank.
	of := g.groups
	if !mine || len(padded) > len(order) {
		of = make([]uint32, len(padded))
		for k := 0; k < len(of); k += len(order) {
			copy(of[k:], g.groups)
		}
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
	filled := make([]int, world+1) // and rank world, no rank, never with room (dealer.pair)
	filled[world] = noRoom
	// The rank a sample goes to when none on its owners may take it is
	// found without looking at every rank each time (at a rank on each of
	// 1,000 nodes, that scan was most of the split).
	open := leastFilled{filled: filled[:world]}
	// The candidates of group g, the ranks on its owners, are
	// cand[first[g]:first[g+1]]: one array the dealing reads, not a
	// slice of its own per group. Owners is asked for the groups met.
	first := make([]int, g.n+1)
	var cand []int32
	for grp := range g.n {
		first[grp] = len(cand)
		if g.met[grp/64]&(1<<(grp%64)) != 0 {
			for _, owner := range where.Owners(grp) {
				cand = append(cand, ranksOn[owner]...)
			}
		}
	}
	first[g.n] = len(cand)
	// Most groups have at most two candidates (a rank on each of a
	// sample's two owners): theirs are packed in one word, a missing one
	// being rank world, which never has room, so that the dealing reads
	// one word and two fills and compares them without a branch. A group
	// with more is marked many, its candidates read from cand.
	pair := make([]uint64, g.n)
	for grp := range g.n {
		c := cand[first[grp]:first[grp+1]]
		switch len(c) {
		case 0:
			pair[grp] = uint64(world) | uint64(world)<<32
		case 1:
			pair[grp] = uint64(c[0]) | uint64(world)<<32
		case 2:
			pair[grp] = uint64(c[0]) | uint64(c[1])<<32
		default:
			pair[grp] = many | uint64(grp)
		}
	}
	// The dealing is sequential, but only decides: each place's rank goes
	// in of, and each span of places notes where its ranks' slices stand
	// at its start. The samples are then put in the slices span by span
	// on other cores, so the dealing touches the ranks' fills and the
	// places in sequence and none of the slices' scattered memory.
	backing := make([]uint32, per*world)
	out := make([][]uint32, world)
	for r := range out {
		out[r] = backing[r*per : (r+1)*per : (r+1)*per]
	}
	// scatter puts the samples of places [lo, hi), dealt, in their
	// ranks' slices, from where the slices stood before them (next, the
	// goroutine's own).
	scatter := func(lo, hi int, next []int) {
		for i, p := range of[lo:hi] {
			r := int32(p)
			out[r][next[r]] = padded[lo+i]
			next[r]++
		}
	}
	d := dealer{filled: filled, open: open, cand: cand, first: first, pair: pair,
		per: per, slack: slack, places: len(padded), next: len(padded)}
	if workers <= 1 || len(padded) < 2*minSpan {
		d.deal(of, 0, len(padded))
		scatter(0, len(padded), make([]int, world+1))
		return out, nil
	}
	// On more cores, each span's samples are put in the slices while the
	// next span is dealt: the spans are more than the cores, so that the
	// last one's, after the dealing, is short.
	w := max(workers, len(padded)/minSpan)
	var wg sync.WaitGroup
	for c := range w {
		next := slices.Clone(filled)
		lo, hi := span(len(padded), w, c)
		d.deal(of, lo, hi)
		wg.Go(func() { scatter(lo, hi, next) })
	}
	wg.Wait()
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

// dealer is the sequential part of a locality split: it deals the places of
// an order to ranks, in sequence, one span after another.
type dealer struct {
	filled []int       // samples dealt to each rank, and noRoom for rank world
	open   leastFilled // over filled without rank world
	cand   []int32     // the candidates of group g: cand[first[g]:first[g+1]]
	first  []int
	pair   []uint64 // group g's two candidates, or many with g
	// A rank may hold min(per, share+slack) samples once i+1 places are
	// dealt, its share being (i+1)*per/places; the share is kept by steps
	// (next is (share+1)*places), not divided out at every place.
	per, slack  int
	places      int
	share, next int
}

// deal gives each place of of[lo:hi], which holds its group, to a rank,
// and writes the rank over the group: the least filled candidate with
// room, else the least filled rank of all.
func (d *dealer) deal(of []uint32, lo, hi int) {
	filled := d.filled
	share, next := d.share, d.next
	for i := lo; i < hi; i++ {
		for (i+1)*d.per >= next {
			share++
			next += d.places
		}
		room := min(d.per, share+d.slack)
		p := d.pair[of[i]]
		var best int32
		var least int
		if p&many == 0 {
			c0, c1 := int32(p), int32(p>>32)
			f0, f1 := filled[c0], filled[c1]
			diff := f1 - f0
			lt := diff >> 63 // -1 where f1 < f0, else 0: no branch to mispredict
			best = c0 ^ (c0^c1)&int32(lt)
			least = f0 + diff&lt
		} else {
			best, least = -1, room
			g := uint32(p)
			for _, r := range d.cand[d.first[g]:d.first[g+1]] {
				if f := filled[r]; f < least {
					best, least = r, f
				}
			}
		}
		if least >= room {
			best = int32(d.open.least())
		}
		filled[best]++
		of[i] = uint32(best)
	}
	d.share, d.next = share, next
}

// noRoom is the fill of rank world, which no rank is: above any room, and
// far enough below math.MaxInt that fills subtract without overflow.
const noRoom = 1 << 40

// many marks a group with more than two candidates in dealer.pair.
const many = 1 << 63

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
	// The scan is on locals, kept in registers: through l, each step
	// would store the cursor back.
	filled, fill, c := l.filled, l.fill, l.cursor
	for {
		for ; c < len(filled); c++ {
			if filled[c] == fill {
				l.fill, l.cursor = fill, c
				return c
			}
		}
		fill++
		c = 0
	}
}

// SliceWeights gives each id of each slice its weight, weight[id], as an
// epoch's order is split with its weights (Drawn.Weight); nil when every
// weight is 1, or weight is nil. The slices of weights share one new
// backing array but are capacity-limited, as Split's are; ranks' slices
// are filled on several goroutines, a span of ranks each (each read of a
// weight is at random in weight).
func SliceWeights(slices [][]uint32, weight []float32) [][]float32 {
	if allOnes(weight) {
		return nil
	}
	total := 0
	for _, s := range slices {
		total += len(s)
	}
	backing := make([]float32, total)
	out := make([][]float32, len(slices))
	at := 0
	for r, s := range slices {
		out[r] = backing[at : at+len(s) : at+len(s)]
		at += len(s)
	}
	parallel(len(slices), min(spans(total, procs(0)), max(1, len(slices))), func(_, lo, hi int) {
		for r := lo; r < hi; r++ {
			w := out[r]
			for i, id := range slices[r] {
				w[i] = weight[id]
			}
		}
	})
	return out
}

// allOnes reports whether every weight is 1 (or there is none).
func allOnes(w []float32) bool {
	for _, x := range w {
		if x != 1 {
			return false
		}
	}
	return true
}
