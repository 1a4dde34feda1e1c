package policy

import (
	"cmp"
	"math"
	"runtime"
	"slices"
)

// OrderAware is APP made to read ahead: the leader publishes each epoch's
// order before the epoch runs, so the policy knows, for every item, where
// in the current epoch it is read next. It is APP's admission loop over a
// different key: Belady's next use first, importance second.
//
// Each resident has a key (next use, importance). Next use is the position
// in the current epoch's order of the item's next read, or "never" if the
// order holds no further read of it; importance is APP's (score, frequency,
// last use tick), with the same ghost table. A resident is a better victim
// than another if its next use is later, or, at the same next use (in
// practice: both never again this epoch), if it is less important. On a
// Miss for x, x gets the same kind of key; while x does not fit and the best
// victim is a better victim than x would be, that victim is evicted; x is
// then admitted if it fits, else served uncached. So:
//
//   - while x is read again this epoch, residents that are never read again
//     this epoch go first, least important first, then residents whose next
//     read comes after x's, furthest first (Belady within the epoch);
//   - x is not admitted if every resident that would have to go is read
//     again before x is (MIN's bypass);
//   - when x is never read again this epoch either, it may only displace
//     residents that are never read again and less important than x: this
//     is APP's admission gate, and without any order (no BeginEpoch yet)
//     OrderAware makes exactly APP's decisions.
//
// Why importance orders the residents that are never read again: the next
// epoch's order is not known, and PADS draws it with replacement from
// weights score+lambda, so the probability that an item is drawn next epoch,
// 1-(1-w/W)^N, and the expected number of its draws both increase with its
// score alone. Ranking these residents by score is thus ranking them by
// expected reuse value, without knowing lambda, W or N; frequency and last
// use break ties as in APP. Any resident read again this epoch is kept over
// one that is not: its reuse is certain and comes first, whereas the
// other's is only probable and comes after the epoch's end.
//
// Reads are matched to the order by id, not by position: the Hit or Miss for
// x consumes x's earliest unconsumed place in the order, whatever place the
// call has in the sequence, so ranks interleaving their slices differently
// from the published order lose nothing. A read of an id the order does not
// hold (or holds no more) counts as never read again this epoch. A place
// that is never read (a rank that skipped it) keeps its id's next use there
// until the next BeginEpoch, so such an item is kept longer than it should
// be, for at most the rest of the epoch.
//
// Time and space: Hit, Miss, SetScore and Remove take O(log n) for n
// residents (one heap re-key or pop per eviction); BeginEpoch takes O(L+n)
// for an order of L reads and keeps 4 bytes a read plus an entry of the
// cursor an id not resident (a resident's place is in its key; the
// cursor's entries lie outside the Go heap); AppendEpoch and
// MergeEpoch add a sort of the current order's U unconsumed places,
// O(U log U). An order longer than 2^31-1 reads is cut
// there; reads past the cut count as never read again.
type OrderAware struct {
	ghosts ghostTable
	heap   idHeap[orderKey]
	now    uint64
	def    float32
	epoch  int

	// The current order as chains of places: next[p] is the place of the
	// next read of the id read at place p, or -1; cursor[id] is the
	// earliest unconsumed place of id, which is not resident. An id with
	// none left has no entry. A resident's earliest unconsumed place is
	// its key's next, and it has no entry: its hit looks up nothing but
	// its place in the heap.
	next   []int32
	cursor cursors
	// fresh is the first place of the newest order appended
	// (AppendEpoch); the places before it are what was left of the
	// orders before, whose epochs were over when it came. 0 after
	// BeginEpoch and a merge beside other jobs.
	fresh int32

	transient func(ID) bool // Options.Transient, never nil
}

// cursors is OrderAware's cursor: the earliest unconsumed place of each
// id not resident that has one, in memory outside the Go heap (an entry
// for each sample an epoch's order reads, tens of millions at a large
// dataset's).
type cursors struct{ idMap[plusOne] }

// swap makes p id's place and returns the place it had, and whether it
// had one.
func (c *cursors) swap(id ID, p int32) (int32, bool) {
	sl, added := c.put(id, at(int(p)))
	if added {
		return 0, false
	}
	old := sl.v.index()
	sl.v = at(int(p))
	runtime.KeepAlive(c)
	return int32(old), true
}

// take removes id's place and returns it, and whether it had one.
func (c *cursors) take(id ID) (int32, bool) {
	sl, s := c.locate(id)
	if sl == nil {
		return 0, false
	}
	p := sl.v.index()
	c.remove(s, nil)
	return int32(p), true
}

// orderKey is what OrderAware keeps of a resident.
type orderKey struct {
	next int64 // place of the next read in the current order, or never
	imp  appKey
}

// evictsBefore reports whether a resident keyed a is a better victim than one
// keyed b: read again later, or at the same time (never) and less important.
func evictsBefore(a, b orderKey) bool {
	if a.next != b.next {
		return a.next > b.next
	}
	return a.imp.less(b.imp)
}

var (
	_ Policy    = (*OrderAware)(nil)
	_ OffHeap   = (*OrderAware)(nil)
	_ Scorer    = (*OrderAware)(nil)
	_ Lookahead = (*OrderAware)(nil)
)

// NewOrderAware returns an empty order-aware policy with no order: until
// the first BeginEpoch it behaves as APP. A zero or non-finite
// opts.DefaultScore means MiddleScore.
func NewOrderAware(opts Options) *OrderAware {
	def := opts.DefaultScore
	if def == 0 || math.IsNaN(def) || math.IsInf(def, 0) {
		def = MiddleScore
	}
	o := &OrderAware{
		ghosts:    newGhostTable(),
		heap:      newIDHeap(evictsBefore),
		def:       float32(def),
		epoch:     -1,
		cursor:    cursors{newIDMap[plusOne](threeQuartersFull)},
		transient: opts.transient(),
	}
	releaseWith(o, append(o.heap.pools(), o.ghosts.pool, o.cursor.pool)...)
	return o
}

// Name returns "order".
func (o *OrderAware) Name() string { return "order" }

// BeginEpoch implements Lookahead: it replaces the order and re-keys every
// resident by its first place in the new one.
func (o *OrderAware) BeginEpoch(epoch int, reads []ID) {
	o.epoch = epoch
	o.install(reads, 0)
}

// AppendEpoch implements Lookahead: the reads of the current order not yet
// consumed, in their order, then reads; every resident is re-keyed by its
// first place in that. Where the current order was itself appended to
// one before, what was left of that one is dropped: an order is appended
// when it is published ahead, once the epoch before the current one is
// over, and reads of an epoch over will not come (reads a rank skipped,
// or served without this node). Kept, they would pile up epoch after
// epoch, and keep their samples cached for nothing.
func (o *OrderAware) AppendEpoch(epoch int, reads []ID) {
	o.epoch = epoch
	left := o.unconsumed(o.fresh, len(reads))
	o.install(append(left, reads...), len(left))
}

// MergeEpoch implements Lookahead: the reads of the current order not yet
// consumed and reads, interleaved by their steps as Lookahead.MergeEpoch
// says; every resident is re-keyed by its first place in that.
func (o *OrderAware) MergeEpoch(epoch int, reads []ID, start, others int) {
	start, others = max(start, 0), max(others, 0)
	if others == 0 {
		if start > 0 {
			o.AppendEpoch(epoch, reads)
		} else {
			o.BeginEpoch(epoch, reads)
		}
		return
	}
	o.epoch = epoch
	o.install(interleave(o.unconsumed(0, 0), reads, start, others), 0)
}

// interleave returns left and reads merged by step: left[k] at step
// k/others, reads[i] at step start+i, left first on equal steps. It wants
// others >= 1 and start >= 0.
func interleave(left, reads []ID, start, others int) []ID {
	// The clamps keep others*step below 2^62 and change no step's rank:
	// every place comes before a read at step len(left) or later, and with
	// others >= len(left) every place but the first comes in (0, 1).
	start, others = min(start, len(left)), min(others, max(len(left), 1))
	out := make([]ID, 0, len(left)+len(reads))
	j := 0
	for i, id := range reads {
		if j < len(left) {
			lim := len(left)
			if s := start + i; s < len(left) {
				// Places k <= others*s come at step s or before.
				lim = min(lim, int(int64(others)*int64(s)+1))
			}
			out = append(out, left[j:lim]...)
			j = lim
		}
		out = append(out, id)
	}
	return append(out, left[j:]...)
}

// unconsumed returns the ids of the current order's places from place
// from on not yet consumed, in their order, with room for extra more.
func (o *OrderAware) unconsumed(from int32, extra int) []ID {
	type place struct {
		at int32
		id ID
	}
	var left []place
	chain := func(id ID, p int32) {
		for ; p >= 0; p = o.next[p] {
			if p >= from {
				left = append(left, place{p, id})
			}
		}
	}
	o.cursor.each(func(id ID, p plusOne) { chain(id, int32(p.index())) })
	o.heap.each(func(id ID, k orderKey) {
		if k.next != never {
			chain(id, int32(k.next))
		}
	})
	slices.SortFunc(left, func(a, b place) int { return cmp.Compare(a.at, b.at) })
	ids := make([]ID, 0, len(left)+extra)
	for _, p := range left {
		ids = append(ids, p.id)
	}
	return ids
}

// install makes reads the order, whose newest order appended begins at
// place fresh, and re-keys every resident by its first place in it.
func (o *OrderAware) install(reads []ID, fresh int) {
	if len(reads) > math.MaxInt32 {
		reads = reads[:math.MaxInt32]
	}
	o.fresh = int32(min(fresh, len(reads)))
	o.cursor.reset()
	if cap(o.next) < len(reads) {
		o.next = make([]int32, len(reads))
	}
	o.next = o.next[:len(reads)]
	for i := len(reads) - 1; i >= 0; i-- {
		if p, ok := o.cursor.swap(reads[i], int32(i)); ok {
			o.next[i] = p
		} else {
			o.next[i] = -1
		}
	}
	o.heap.rekeyAll(func(id ID, k orderKey) orderKey {
		k.next = never
		if p, ok := o.cursor.take(id); ok {
			k.next = int64(p)
		}
		return k
	})
}

// Epoch is the number of the epoch whose order is installed, or -1 before
// the first BeginEpoch.
func (o *OrderAware) Epoch() int { return o.epoch }

// consume takes the earliest unconsumed place in the order of id, which
// is not resident, and returns the place of its next read after that
// one, or never.
func (o *OrderAware) consume(id ID) int64 {
	sl, s := o.cursor.locate(id)
	if sl == nil {
		return never
	}
	n := o.after(int64(sl.v.index()))
	if n == never {
		o.cursor.remove(s, nil)
	} else {
		sl.v = at(int(n))
	}
	runtime.KeepAlive(o)
	return n
}

// after returns the place of the next read, after place p, of the id
// read at p; never if there is none, or if p is never.
func (o *OrderAware) after(p int64) int64 {
	if p == never || o.next[p] < 0 {
		return never
	}
	return int64(o.next[p])
}

// Hit records a read: the id's frequency and last use go up, its place in
// the order is consumed, and a resident is re-keyed by its next read.
func (o *OrderAware) Hit(id ID) {
	o.now++
	if s, ok := o.heap.find(id); ok {
		k := o.heap.keyOf(s)
		k.next = o.after(k.next)
		k.imp = k.imp.hit(o.now)
		o.heap.setSlot(s, k)
		return
	}
	o.consume(id)
	o.ghosts.touchKnown(id)
}

// hits is Hit of each of ids in turn, each hinted to the CPU some hits
// before (Hits).
func (o *OrderAware) hits(ids []ID) {
	for i, id := range ids {
		o.heap.hintAhead(ids, i)
		o.Hit(id)
	}
}

// Miss implements Policy.Miss; see the type's comment for the rule.
func (o *OrderAware) Miss(id ID, size int64, room Room) bool {
	if o.heap.has(id) {
		o.Hit(id)
		return true
	}
	o.now++
	g := newGhost(1)
	if !o.transient(id) {
		g = o.ghosts.touch(id)
	}
	k := orderKey{next: o.consume(id), imp: g.key(o.def, o.now)}
	if refuse(room, size) {
		return false
	}
	for !room.Fits(id, size) && o.heap.len() > 0 && evictsBefore(o.heap.top().key, k) {
		victim := o.heap.pop()
		o.left(victim)
		room.Evict(victim.id)
	}
	if !room.Fits(id, size) {
		return false
	}
	o.heap.push(id, k, g.nscore)
	if !o.transient(id) {
		o.ghosts.admitted(id)
	}
	o.cursor.take(id) // its place is its key's now
	return true
}

// left records what the resident kept of itself as it leaves the cache,
// unless it is transient: its reads, in its key, and its score, in its
// tag, into its ghost entry, and its earliest unconsumed place into
// cursor.
func (o *OrderAware) left(it heapItem[orderKey]) {
	if o.transient(it.id) {
		return
	}
	o.ghosts.left(it.id, ghost{nscore: it.tag, freq: it.key.imp.freq})
	if it.key.next != never {
		o.cursor.swap(it.id, int32(it.key.next))
	}
}

// Remove forgets a resident; its ghost entry and its places in the order
// stay.
func (o *OrderAware) Remove(id ID) {
	if it, ok := o.heap.remove(id); ok {
		o.left(it)
	}
}

// Resident reports whether id is in the cache.
func (o *OrderAware) Resident(id ID) bool { return o.heap.has(id) }

// Ghosts is the number of ids OrderAware remembers that it does not hold
// (every id seen or scored but residents and transient ones).
func (o *OrderAware) Ghosts() int { return o.ghosts.len() }

// Len is the number of residents.
func (o *OrderAware) Len() int { return o.heap.len() }

// OffHeapBytes implements OffHeap.
func (o *OrderAware) OffHeapBytes() int64 {
	return o.heap.bytes() + o.ghosts.bytes() + o.cursor.bytes()
}

// SetScore implements Scorer.
func (o *OrderAware) SetScore(id ID, score float64) {
	if math.IsNaN(score) {
		return
	}
	if slot, ok := o.heap.find(id); ok {
		var g ghost
		g.setScore(float32(score))
		slot.v.tag = g.nscore
		k := o.heap.keyOf(slot)
		k.imp.score = g.score()
		o.heap.setSlot(slot, k)
		return
	}
	o.ghosts.setScore(id, score)
}

// SetDefaultScore implements Scorer.
func (o *OrderAware) SetDefaultScore(score float64) {
	if math.IsNaN(score) {
		return
	}
	o.def = float32(score)
}
