// Package ring assigns keys to owners by consistent hashing with bounded
// loads (github.com/buraksezer/consistent) over a fixed number of
// partitions.
//
// A Ring is an immutable snapshot of one membership view; lookups are a
// hash and a table read, safe from any number of goroutines and free of
// locks. On a membership change derive the next snapshot with Update, which
// edits the consistent instance behind the lineage and ranks again only
// the replicas a change can touch (about 1 ms for one member joining or
// leaving 1,000 on a 2-core machine, 3 ms at 16,381 partitions, 9 ms at
// 65,521) rather than building one with New (about 40-65 ms for 1,000
// members, 0.22-0.27 s at 65,521 partitions).
//
// consistent is v0.10.0 as patched in internal/consistent (its New sorts
// its circle once, not after every member: see PATCHES.md there), which
// gives upstream's table exactly. It panics or errors in several
// configurations; New and Update guard all of them (see New) and never
// panic.
package ring

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/shade-mesh/shade/internal/consistent"
)

// Defaults for the zero values of Config.
const (
	DefaultPartitions = 271
	DefaultReplicas   = 2
	DefaultLoad       = 1.25
)

// virtualNodes is how many points each member has on the hash circle
// (consistent's ReplicationFactor), the same for every ring size: a count
// that changed with the member count would redraw the whole circle when a
// member joins or leaves across the change (a join from 10 to 11 members
// moved 1.37x the ideal copies while the count went from 200 to 181
// points; 1.01x with a fixed count). A departed member's primaries go to
// the members after its points, and bounded loads push the overflow of a
// member at its cap further on, so few points make a few survivors take
// most of them and a join reshuffle other members' partitions: at 1,000
// members and 16 partitions per member, 60 points moved 1.26x the ideal
// copies on a join and left one survivor 3x the average share of a dead
// member's; 200 points 1.19x and 2x (mesh/ring TestFailureSpread). More
// points do not pay: 400 and 800 moved 1.08x and 1.12x on a join at 1,000
// members but left one survivor of 10 members 2.21x and 2.30x the average
// share of a dead member's copies. Where each member holds hundreds of
// partitions, though, a dead member's primaries go arc by arc, each of its
// points' arcs to the member after it, and at a few dozen members each
// survivor takes few arcs: at 32 members and 65,521 partitions the
// busiest took 1.88-2.34x the average with 200 points, 1.50-1.70x with
// 1,000 (test/results/scale.md, "A dead peer's data within 2x"). The
// count stays: another one changes every member's table, so every peer
// would have to change at once. The cost of points is the circle,
// M·points hashes in a sorted slice and a map: New O(M·points·log), an
// Update O(M·points) a member changed.
const virtualNodes = 200

// Errors returned by New and Update, wrapped with detail.
var (
	ErrConfig = errors.New("ring: invalid config")
	ErrMember = errors.New("ring: invalid member name")
	// ErrInternal means consistent failed in a way the guards did not
	// foresee; it is a bug.
	ErrInternal = errors.New("ring: consistent hashing failed")
)

// Config configures a Ring. The zero value of every field means its
// default; New fills defaults on a copy.
type Config struct {
	// Partitions is the fixed partition count keys hash into; 0 means 271.
	// Every member of one cluster must use the same value.
	Partitions int
	// Replicas is R, the number of owners of each key (primary included);
	// 0 means 2.
	Replicas int
	// Load is the bounded-load factor: no member owns more than about
	// Load times the average number of partitions. 0 means 1.25; values
	// below 1 are refused. New raises it just enough when rounding would
	// leave too little room for all partitions.
	Load float64
}

// Ring is an immutable owner table. All methods are safe for concurrent use.
type Ring struct {
	cfg     Config
	members []string // sorted
	// owners[p*k:(p+1)*k] are partition p's k = min(R, M) distinct
	// owners, primary first: one array, no slice header a partition (at
	// 16,381 partitions 384 KiB less a ring than a slice each); nil when
	// the ring is empty.
	owners []string
	// at[i] is the index in members of owners[i], for OwnerMasks: owners
	// stays, as PartitionOwners hands out its slices without a copy.
	at []int32
	k  int
	b  *builder // shared with the rings Update derives; nil when empty
	// top[p*k:(p+1)*k] are the indexes in members of the k = min(R, M)
	// members of highest rendezvous score for partition p, highest first
	// (fillOwners): the replicas are the first R-1 of them but p's
	// primary. Update derives the next ring's from it.
	top []int32
}

// builder holds the consistent instance a lineage of rings is derived from.
// consistent builds in O(M·virtualNodes·log) and applies one Add or Remove
// in O(M·virtualNodes) (about 65 ms and 0.7 ms at 1,000 members), so Update
// edits the instance instead of starting over.
type builder struct {
	mu       sync.Mutex
	c        *consistent.Consistent
	internal int     // consistent's partition count, >= Partitions
	load     float64 // effective load factor handed to consistent
	points   int     // virtual nodes per member handed to consistent
	members  map[string]bool
}

// member is what consistent places on its circle. consistent hashes
// virtual node i of a member as String()+decimal(i), so plain names are
// ambiguous: "node-1" point 10 and "node-11" point 0 are both "node-110"
// and would collide. The '#' before the number makes the decomposition
// unique (the number after the last '#' is always the point index).
type member struct{ name, label string }

func (m member) String() string { return m.label }

func newMember(name string) member { return member{name: name, label: name + "#"} }

type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// New builds the ring of members. Duplicate names are collapsed; an empty
// name is refused. An empty member list gives a ring whose lookups return
// nil. Derive later rings with Update, which costs less.
//
// Guards around consistent v0.10.0, which never reach the caller as panics:
//   - more members than partitions: consistent's capacity per member is
//     ceil(floor(P/M)·Load), 0 when M > P, and it panics. The table is then
//     computed over P·2^k ≥ M internal partitions of which the first P are
//     used; each member still owns at most 2.
//   - a load factor too low for integer rounding (e.g. 1.0 when M does not
//     divide P) makes consistent panic; the factor is raised to the
//     smallest feasible value.
//   - GetClosestNForPartition errors when N > members; it is asked for
//     min(R, M).
//   - anything else consistent panics on is recovered into ErrInternal.
func New(cfg Config, members []string) (*Ring, error) {
	cfg, err := fill(cfg)
	if err != nil {
		return nil, err
	}
	names, err := sortedNames(members)
	if err != nil {
		return nil, err
	}
	r := &Ring{cfg: cfg, members: names}
	if len(names) == 0 {
		return r, nil
	}
	b := &builder{}
	if err := b.rebuild(cfg, names); err != nil {
		return nil, err
	}
	if err := r.fillOwners(b.c, nil); err != nil {
		return nil, err
	}
	r.b = b
	return r, nil
}

// Update returns the ring of members under r's Config; r is unchanged.
// The result equals New(r.Config(), members), but when few members change
// it costs O(changes·M·points) instead of New's O(M·points·log), by
// editing the consistent instance r was built from, and ranks the
// replicas again only where the change can touch them. Update may be called concurrently and on any
// ring of a lineage; calls on one lineage are serialized.
func (r *Ring) Update(members []string) (*Ring, error) {
	names, err := sortedNames(members)
	if err != nil {
		return nil, err
	}
	if r.b == nil || len(names) == 0 {
		return New(r.cfg, names)
	}
	next := &Ring{cfg: r.cfg, members: names, b: r.b}
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.edit(r.cfg, names) {
		if err := b.rebuild(r.cfg, names); err != nil {
			return nil, err
		}
	}
	if err := next.fillOwners(b.c, r); err != nil {
		return nil, err
	}
	return next, nil
}

func fill(cfg Config) (Config, error) {
	if cfg.Partitions == 0 {
		cfg.Partitions = DefaultPartitions
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = DefaultReplicas
	}
	if cfg.Load == 0 {
		cfg.Load = DefaultLoad
	}
	if cfg.Partitions < 0 {
		return cfg, fmt.Errorf("%w: partitions %d", ErrConfig, cfg.Partitions)
	}
	if cfg.Replicas < 0 {
		return cfg, fmt.Errorf("%w: replicas %d", ErrConfig, cfg.Replicas)
	}
	if math.IsNaN(cfg.Load) || math.IsInf(cfg.Load, 0) || cfg.Load < 1 {
		return cfg, fmt.Errorf("%w: load factor %v, want >= 1", ErrConfig, cfg.Load)
	}
	return cfg, nil
}

func sortedNames(members []string) ([]string, error) {
	names := make([]string, 0, len(members))
	for _, m := range members {
		if m == "" {
			return nil, fmt.Errorf("%w: empty name", ErrMember)
		}
		names = append(names, m)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// shape returns consistent's partition count, load factor and virtual
// nodes per member for m members: the smallest P·2^k that gives every member room for at least
// one partition, the smallest factor >= cfg.Load for which consistent's
// capacity per member, ceil(floor(internal/m)·factor), covers all of them.
// Both are pure functions of (cfg, m), so every peer computes the same
// table from the same members.
func shape(cfg Config, m int) (internal int, load float64, points int) {
	internal = cfg.Partitions
	for internal < m {
		internal *= 2
	}
	return internal, feasibleLoad(internal, m, cfg.Load), virtualNodes
}

// feasibleLoad requires parts >= members.
func feasibleLoad(parts, members int, load float64) float64 {
	q := parts / members
	need := (parts + members - 1) / members // capacity per member needed
	if l := float64(need) / float64(q); l > load {
		load = l
	}
	for !fits(parts, members, load) {
		load = math.Nextafter(load, math.Inf(1)) // float rounding only
	}
	return load
}

// fits reports whether consistent can place parts partitions on members
// with the load factor. Its scan then always finds room: the member with
// room has virtualNodes >= 2 points and the scan skips at most one point.
func fits(parts, members int, load float64) bool {
	return members > 0 && parts >= members &&
		int(math.Ceil(float64(parts/members)*load))*members >= parts
}

// rebuild replaces b's instance by a new one holding names.
func (b *builder) rebuild(cfg Config, names []string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			b.c = nil
			err = fmt.Errorf("%w: %v", ErrInternal, p)
		}
	}()
	b.internal, b.load, b.points = shape(cfg, len(names))
	ms := make([]consistent.Member, len(names))
	b.members = make(map[string]bool, len(names))
	for i, name := range names {
		ms[i] = newMember(name)
		b.members[name] = true
	}
	b.c = consistent.New(ms, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    b.internal,
		ReplicationFactor: b.points,
		Load:              b.load,
	})
	return nil
}

// edit moves b's instance to names by Add and Remove. It reports false,
// having changed nothing or left the instance unusable, when a rebuild is
// needed: consistent's partition count, load factor and points are fixed
// at creation, and every intermediate step must fit.
func (b *builder) edit(cfg Config, names []string) (ok bool) {
	if b.c == nil {
		return false
	}
	internal, load, points := shape(cfg, len(names))
	if internal != b.internal || load != b.load || points != b.points {
		return false
	}
	var add, remove []string
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
		if !b.members[n] {
			add = append(add, n)
		}
	}
	for n := range b.members {
		if !want[n] {
			remove = append(remove, n)
		}
	}
	if 10*(len(add)+len(remove)) > len(names) {
		// Many changes: one rebuild is cheaper than many edits. A
		// rebuild costs about as much as 65 members changed at 1,000
		// members (edits of 24, 50 and 100 changes took 13, 28 and 62
		// ms, a rebuild 37-44) and 25 at 100: a tenth stays within 1.4x
		// of the cheaper way at both.
		return false
	}
	// Add first so the count never drops below the target's; check that
	// every intermediate count fits before touching the instance.
	for m := len(b.members) + 1; m <= len(b.members)+len(add); m++ {
		if !fits(b.internal, m, b.load) {
			return false
		}
	}
	for m := len(b.members) + len(add) - 1; m >= len(names); m-- {
		if !fits(b.internal, m, b.load) {
			return false
		}
	}
	defer func() {
		if p := recover(); p != nil {
			b.c = nil // half edited: the caller rebuilds
			ok = false
		}
	}()
	for _, n := range add {
		b.c.Add(newMember(n))
		b.members[n] = true
	}
	for _, n := range remove {
		b.c.Remove(newMember(n).label)
		delete(b.members, n)
	}
	return true
}

// fillOwners reads the primaries from c and places the replicas; the
// caller holds c.
//
// Replicas are placed by rendezvous hashing, not by consistent: the
// replicas of partition p are the R-1 members other than its primary with
// the highest score(p, member), a hash of both. consistent v0.10.0 would
// give every partition of one primary the same successors
// (GetClosestNForPartition depends only on the primary), so one survivor
// took all of a dead peer's replica data. Under rendezvous hashing each
// partition ranks the members independently: a dead member's replica
// partitions each fall to their next-ranked member, spread evenly over the
// survivors, and a membership change moves only the replicas of the
// partitions where the changed member ranks (or ranked) among the top.
// A primary that changes keeps the replicas unless it was one of them.
//
// The ranking is kept (Ring.top) so that Update ranks again only what a
// change can touch: a partition whose top members all stay gains at most
// the members that join (a score each), and only the partitions where a
// departed member ranked among the top are ranked over every member.
func (r *Ring) fillOwners(c *consistent.Consistent, prev *Ring) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrInternal, p)
		}
	}()
	n := min(r.cfg.Replicas, len(r.members))
	index := make(map[string]int, len(r.members))
	seeds := make([]uint64, len(r.members))
	for i, m := range r.members {
		index[m] = i
		seeds[i] = xxhash.Sum64String(m)
	}
	r.top = r.rankAll(seeds, prev)
	// Every partition gets n owners: its primary and the n-1 best ranked
	// of the n ranked but the primary.
	flat := make([]string, 0, r.cfg.Partitions*n)
	at := make([]int32, 0, r.cfg.Partitions*n)
	for p := range r.cfg.Partitions {
		primary, ok := c.GetPartitionOwner(p).(member)
		if !ok {
			return fmt.Errorf("%w: partition %d has no owner", ErrInternal, p)
		}
		pi, ok := index[primary.name]
		if !ok {
			return fmt.Errorf("%w: partition %d owner %q is not a member", ErrInternal, p, primary.name)
		}
		// The replicas: the n-1 best ranked but the primary (n are
		// ranked, the primary among them or not).
		start := len(flat)
		flat, at = append(flat, primary.name), append(at, int32(pi))
		for _, i := range r.top[p*n : (p+1)*n] {
			if len(flat)-start == n {
				break
			}
			if int(i) != pi {
				flat, at = append(flat, r.members[i]), append(at, i)
			}
		}
	}
	r.owners, r.at, r.k = flat, at, n
	return nil
}

// rankAll returns, for each partition p, the indexes of the k = min(R, M)
// members of highest rendezvous score for p, highest first, at
// [p*k, (p+1)*k). Where prev (a ring of the same Config, or nil) ranked
// as many, each partition's ranking is derived from prev's (derive);
// otherwise, and for each partition where a member of prev's top left,
// every member is ranked.
func (r *Ring) rankAll(seeds []uint64, prev *Ring) []int32 {
	k := min(r.cfg.Replicas, len(r.members))
	top := make([]int32, r.cfg.Partitions*k)
	var moved []int32
	var added []int
	incremental := k > 0 && prev != nil && len(prev.top) == len(top)
	if incremental {
		moved, added = remap(prev.members, r.members)
	}
	sc := make([]uint64, k)
	best := make([]int, 0, k)
	for p := range r.cfg.Partitions {
		dst, seed := top[p*k:(p+1)*k], partitionSeed(p)
		if incremental && derive(dst, sc, prev.top[p*k:(p+1)*k], moved, added, seeds, seed) {
			continue
		}
		best = rank(best[:0], seeds, seed, k)
		for j, i := range best {
			dst[j] = int32(i)
		}
	}
	return top
}

// remap returns, for each of the sorted names old, its index in the
// sorted names now or -1 where it is not there, and the indexes in now of
// the names old lacks.
func remap(old, now []string) (moved []int32, added []int) {
	moved = make([]int32, len(old))
	i, j := 0, 0
	for i < len(old) || j < len(now) {
		switch {
		case j == len(now) || (i < len(old) && old[i] < now[j]):
			moved[i] = -1
			i++
		case i == len(old) || now[j] < old[i]:
			added = append(added, j)
			j++
		default:
			moved[i] = int32(j)
			i, j = i+1, j+1
		}
	}
	return moved, added
}

// derive sets dst, one partition's ranking under seed, from old, its
// ranking among the members before a change (moved and added as remap
// gives them; sc is scratch of len(dst)): the members of old, each at its
// new index, then each added member that ranks above the last. It
// reports false, dst and sc undefined, where a member of old is gone:
// the one that would replace it may be any member.
func derive(dst []int32, sc []uint64, old, moved []int32, added []int, seeds []uint64, seed uint64) bool {
	for j, i := range old {
		if moved[i] < 0 {
			return false
		}
		dst[j] = moved[i]
		sc[j] = mix(seed ^ seeds[moved[i]])
	}
	// moved keeps the members' order, so dst stays ranked as rank ranks:
	// by score, then by index (by name).
	last := len(dst) - 1
	for _, a := range added {
		v := mix(seed ^ seeds[a])
		if !above(v, a, sc[last], int(dst[last])) {
			continue
		}
		j := last
		for j > 0 && above(v, a, sc[j-1], int(dst[j-1])) {
			dst[j], sc[j] = dst[j-1], sc[j-1]
			j--
		}
		dst[j], sc[j] = int32(a), v
	}
	return true
}

// above reports whether the member of index i and score v ranks above the
// one of index j and score w: a higher score, or an equal one (equal
// hashes of names) and a lower index.
func above(v uint64, i int, w uint64, j int) bool {
	return v > w || v == w && i < j
}

// partitionSeed is the rendezvous seed of partition p.
func partitionSeed(p int) uint64 { return mix(uint64(p) + 0x9e3779b97f4a7c15) }

// mix is splitmix64's finalizer: a bijection of 64 bits that spreads every
// input bit over the output.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// rank appends to dst the indexes of the k members with the highest
// rendezvous scores mix(seed ^ seeds[i]), highest first; ties (equal
// scores need equal hashes of names) go to the lower index.
func rank(dst []int, seeds []uint64, seed uint64, k int) []int {
	if k <= 0 {
		return dst
	}
	var scores [8]uint64 // scores of dst, for k <= 8 without allocating
	sc := scores[:0]
	if k > len(scores) {
		sc = make([]uint64, 0, k)
	}
	for i, s := range seeds {
		v := mix(seed ^ s)
		if len(dst) == k && v <= sc[k-1] {
			continue
		}
		// insert v keeping sc descending; equal scores keep index order
		j := len(dst)
		if j < k {
			dst, sc = append(dst, 0), append(sc, 0)
		} else {
			j = k - 1
		}
		for j > 0 && sc[j-1] < v {
			dst[j], sc[j] = dst[j-1], sc[j-1]
			j--
		}
		dst[j], sc[j] = i, v
	}
	return dst
}

// Config returns the configuration with defaults filled in.
func (r *Ring) Config() Config { return r.cfg }

// Partition returns the partition key hashes into: xxhash64(key) mod P.
func (r *Ring) Partition(key []byte) int {
	return int(xxhash.Sum64(key) % uint64(r.cfg.Partitions))
}

// Owners returns the owners of key: up to R distinct member names, primary
// first, fewer when the ring has fewer members, nil when it has none. The
// slice is the caller's.
func (r *Ring) Owners(key []byte) []string {
	return r.OwnersOfPartition(r.Partition(key))
}

// AppendOwners appends the owners of key to dst and returns it; it does not
// allocate when dst has room.
func (r *Ring) AppendOwners(dst []string, key []byte) []string {
	return append(dst, r.of(r.Partition(key))...)
}

// OwnersOfPartition returns the owners of partition p as Owners does; nil
// when p is out of range or the ring is empty.
func (r *Ring) OwnersOfPartition(p int) []string {
	return slices.Clone(r.PartitionOwners(p))
}

// PartitionOwners returns the owners of partition p as OwnersOfPartition
// does, without a copy: the slice is the ring's, and the caller must not
// modify it. A dataset's placement (sampling.Placement) hands it to the
// leader's split and score queue (wire.ScoreQueue), which ask for every
// partition's owners: 16,381 to 64,513 of them at 1,000 peers.
func (r *Ring) PartitionOwners(p int) []string {
	if p < 0 || p >= r.cfg.Partitions || r.k == 0 {
		return nil
	}
	return r.of(p)
}

// OwnerMasks sets masks[p], for every partition p (masks is at least
// Partitions long), to the OR of bits[name] over p's owners; 0 where
// none of them is in bits, and everywhere in an empty ring. With the bits
// of a few members, it is the test of which of them own each partition,
// for the passes over every read of an order (sampling.Placement.Masks):
// a map lookup a member, then one pass over the owners by their indexes,
// where a lookup of each partition's owners by name would take a map
// lookup each (64,513 partitions of 2 owners: 2.6-3.0 ms).
func (r *Ring) OwnerMasks(bits map[string]uint64, masks []uint64) {
	masks = masks[:r.cfg.Partitions]
	if r.k == 0 {
		clear(masks)
		return
	}
	of := make([]uint64, len(r.members))
	for i, name := range r.members {
		of[i] = bits[name]
	}
	if r.k == 2 { // R=2, the default: the loop unrolled
		at := r.at[:2*len(masks)]
		for p := range masks {
			masks[p] = of[at[2*p]] | of[at[2*p+1]]
		}
		return
	}
	for p := range masks {
		var m uint64
		for _, i := range r.at[p*r.k : (p+1)*r.k] {
			m |= of[i]
		}
		masks[p] = m
	}
}

// of returns partition p's owners, in range, as the ring's slice (its
// capacity ends with them, so an append copies).
func (r *Ring) of(p int) []string { return r.owners[p*r.k : (p+1)*r.k : (p+1)*r.k] }

// Cap returns the bounded load: the most partitions one member may own as
// primary, ceil(floor(P'/M)·Load) for M members, where P' is consistent's
// partition count (P, or P·2^k when members outnumber partitions) and
// Load the factor New settled on; 0 for an empty ring. It is a pure
// function of the Config and the member count, so every peer computes the
// same.
//
// A membership change that changes Cap moves more than its share of
// primaries: when it falls (a join where floor(P/M) falls), every member
// at the cap hands on about one partition, and the partitions they hand on
// may push others on; when it rises, members at the cap take partitions
// back. At 16 partitions a member about a quarter of the members sit at
// the cap, so such a join at 1,000 members moves 8.8x the ideal copies
// rather than about 1.1x (TestCapChange; test/results/scale.md).
func (r *Ring) Cap() int { return capOf(r.cfg, len(r.members)) }

// CapFor returns the Cap of a ring of cfg with members members, without
// building one: what a join or a leave would make it. It fails with
// ErrConfig as New does.
func CapFor(cfg Config, members int) (int, error) {
	cfg, err := fill(cfg)
	if err != nil {
		return 0, err
	}
	return capOf(cfg, max(members, 0)), nil
}

// capOf is Cap for a filled Config.
func capOf(cfg Config, members int) int {
	if members == 0 {
		return 0
	}
	internal, load, _ := shape(cfg, members)
	return int(math.Ceil(float64(internal/members) * load))
}

// Advised returns the partition count the README advises for a mesh of
// members peers: 16,381 up to 256 peers, the smallest prime of at least
// 64.5 a peer above that, at most 65,521 (above 65,536 partitions each
// dataset's table of sample partitions takes 4 bytes a sample, not 2).
//
// The half keeps the bounded load (Cap) as the mesh grows or shrinks by a
// few peers: floor(P/M) stays 64 for M from P/65 to P/64, about 0.8% of
// the mesh either side (1,000 peers: 993 to 1,007). The smallest prime of
// at least 64 a peer, advised before, sat at that range's top, where every
// join lowered the cap: at 1,000 peers, with 64,007, a join moved 1.39x
// its share of copies (1.54x at worst) where 64,513 moves 1.02x (1.17x),
// and at 500 peers 1.33x against 1.08x (shadectl scale --only ring).
//
// Two measures ask for partitions. When a member dies, its copies go
// where hashes send them, a few dozen draws over the survivors at the
// default 271: the busiest survivor took up to 2.5x the average at 10
// members and 3.9x at 16, where with 16,381 it took at most 1.36x and
// 1.77x (TestFailureSpreadSmallMesh: four name formats, every member dead
// in turn). And a join that lowers the bounded load (Cap) moves a
// partition more for each member at it, a quarter of the members at 16
// partitions a member, about 5% at 64 (TestCapChange). More partitions
// cost ring updates and builds: at 1,000 members 8-9 ms and 0.22-0.27 s
// at 65,521, where 16,381 take 3 ms and 0.08-0.1 s (BenchmarkUpdate,
// BenchmarkNew); up to 256 members 16,381 take under 6 ms to update.
func Advised(members int) int {
	const small, most = 16381, 65521
	if members <= 256 {
		return small
	}
	p := (129*members + 1) / 2 // 64.5 a peer, rounded up
	if p >= most {
		return most
	}
	for !prime(p) {
		p++
	}
	return min(p, most)
}

// FewPartitions reports whether partitions is under a quarter of
// Advised(members) in a mesh of at least 8 members: where a dead
// member's data goes to one survivor at over about 2x the average share
// (the default 271 from 8 members: up to 2.0x at 8, 2.5x at 10) or a join
// moves several times its share. 4,099 partitions, a quarter of 16,381,
// kept the busiest survivor to 1.46x at 10 members.
func FewPartitions(partitions, members int) bool {
	return members >= 8 && 4*partitions < Advised(members)
}

// prime reports whether n is prime, by trial division (n is under 2^17).
func prime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// AtCap returns how many members own Cap partitions as primary: the
// members that hand one on when a change lowers the cap.
func (r *Ring) AtCap() int {
	limit := r.Cap()
	if limit == 0 {
		return 0
	}
	n := 0
	for _, c := range r.Load() {
		if c == limit {
			n++
		}
	}
	return n
}

// Members returns the member names, sorted. The slice is the caller's.
func (r *Ring) Members() []string { return slices.Clone(r.members) }

// Load returns how many partitions each member owns as primary; every
// member is present, possibly with 0. The map is the caller's.
func (r *Ring) Load() map[string]int {
	load := make(map[string]int, len(r.members))
	for _, m := range r.members {
		load[m] = 0
	}
	for p := 0; r.k > 0 && p < r.cfg.Partitions; p++ {
		load[r.owners[p*r.k]]++
	}
	return load
}
