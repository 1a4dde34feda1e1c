package policy

import (
	"math"
	"runtime"
)

// APP is SHADE's importance-aware admission and eviction policy, corrected.
//
// Residents sit in a min-heap keyed by (score, frequency, last use tick)
// ascending, so the top is the least important resident. A ghost table keeps
// (score, frequency) for every id ever seen and not resident, so importance
// and popularity survive eviction; of a transient id (Options.Transient)
// it keeps nothing. A resident's ghost entry moves into the heap as it is
// admitted: its frequency is counted in its key, and its score (or that
// it has none) is kept in its heap slot's tag, and both go back to the
// ghost table when it leaves the cache. A hit then looks up the resident
// alone, and a cached id has no entry in the ghost table besides.
//
// On a Miss for x, x's key is (its ghost score, or the default score if it was
// never scored; its ghost frequency+1; now). While x does not fit and the top
// is less important than x, the top is evicted; x is then admitted if it
// fits, else served uncached. Unlike SHADE's code, every admitted item enters
// the heap at once and so is evictable, and a score update re-keys a
// resident at once.
//
// The frequency counts every read of an id (hits and misses, admitted or
// not) and saturates at 2^32-1. Scores are kept as float32.
type APP struct {
	ghosts    ghostTable
	heap      idHeap[appKey]
	now       uint64
	def       float32
	transient func(ID) bool // Options.Transient, never nil
}

// ghost is what APP remembers of every id it has seen: 8 bytes, so that the
// table for millions of samples stays small. Its score is kept with its
// bits inverted, so that no ghost is zero, the ghost table's empty slot
// (inverted, zero would be a NaN with every bit set, which SetScore
// never stores); a never-scored id's score is unscored, a NaN.
type ghost struct {
	nscore uint32 // the score's float32 bits, inverted
	freq   uint32
}

// unscored is the score of a ghost never scored.
var unscored = math.Float32frombits(0x7fc00000)

// newGhost is the ghost entry of an id never scored, read freq times.
func newGhost(freq uint32) ghost { return ghost{nscore: ^math.Float32bits(unscored), freq: freq} }

func (g ghost) score() float32 { return math.Float32frombits(^g.nscore) }

func (g *ghost) setScore(s float32) { g.nscore = ^math.Float32bits(s) }

func (g ghost) scored() bool { s := g.score(); return s == s }

// ghostTable is APP's (and OrderAware's) memory of every id seen or scored
// that is not resident, but transient ones (Options.Transient), in memory
// outside the Go heap: an entry for each sample of each dataset a trainer
// reports the importance of.
type ghostTable struct{ idMap[ghost] }

func newGhostTable() ghostTable { return ghostTable{newIDMap[ghost](threeQuartersFull)} }

// touch counts one read of id, which is not resident, in its ghost entry,
// made where it has none, and returns the entry.
func (t *ghostTable) touch(id ID) ghost {
	sl, added := t.put(id, newGhost(1))
	if !added && sl.v.freq < math.MaxUint32 {
		sl.v.freq++
	}
	g := sl.v
	runtime.KeepAlive(t)
	return g
}

// touchKnown counts one read of id, which is not resident, in its ghost
// entry where it has one: a Hit, a read the policy did not decide on,
// does not bring back an id never seen, nor a transient one.
func (t *ghostTable) touchKnown(id ID) {
	if sl := t.find(id); sl != nil && sl.v.freq < math.MaxUint32 {
		sl.v.freq++
	}
	runtime.KeepAlive(t)
}

// left records g, the ghost entry of id, which has just left the cache:
// while it was resident, its key counted its reads and its heap slot's
// tag kept its score.
func (t *ghostTable) left(id ID, g ghost) {
	if sl, added := t.put(id, g); !added {
		sl.v = g
	}
	runtime.KeepAlive(t)
}

// admitted drops id's ghost entry, which has just moved into the heap with
// id.
func (t *ghostTable) admitted(id ID) {
	if sl, s := t.locate(id); sl != nil {
		t.remove(s, nil)
	}
}

// setScore records id's score (not NaN) and returns it as a float32.
func (t *ghostTable) setScore(id ID, score float64) float32 {
	s := float32(score)
	g := newGhost(0)
	g.setScore(s)
	if sl, added := t.put(id, g); !added {
		sl.v.setScore(s)
	}
	runtime.KeepAlive(t)
	return s
}

// key returns the importance key of a read of g's id at tick now, with def
// standing for a score never set.
func (g ghost) key(def float32, now uint64) appKey {
	k := appKey{score: def, freq: g.freq, last: now}
	if g.scored() {
		k.score = g.score()
	}
	return k
}

// appKey orders residents by importance; the least important is least.
// APP and LFU (score always 0) share it.
type appKey struct {
	score float32
	freq  uint32
	last  uint64
}

func (a appKey) less(b appKey) bool {
	if a.score != b.score {
		return a.score < b.score
	}
	if a.freq != b.freq {
		return a.freq < b.freq
	}
	return a.last < b.last
}

func appLess(a, b appKey) bool { return a.less(b) }

// hit counts one read of a resident keyed k at tick now into its key.
func (k appKey) hit(now uint64) appKey {
	if k.freq < math.MaxUint32 {
		k.freq++
	}
	k.last = now
	return k
}

var (
	_ Policy  = (*APP)(nil)
	_ OffHeap = (*APP)(nil)
	_ Scorer  = (*APP)(nil)
)

// NewAPP returns an empty APP policy. A zero or non-finite
// opts.DefaultScore means MiddleScore.
func NewAPP(opts Options) *APP {
	def := opts.DefaultScore
	if def == 0 || math.IsNaN(def) || math.IsInf(def, 0) {
		def = MiddleScore
	}
	a := &APP{
		ghosts:    newGhostTable(),
		heap:      newIDHeap(appLess),
		def:       float32(def),
		transient: opts.transient(),
	}
	releaseWith(a, append(a.heap.pools(), a.ghosts.pool)...)
	return a
}

// Name returns "app".
func (a *APP) Name() string { return "app" }

// Hit counts a read of a resident: its frequency and last use go up and it
// is re-keyed.
func (a *APP) Hit(id ID) {
	a.now++
	if s, ok := a.heap.find(id); ok {
		a.heap.setSlot(s, a.heap.keyOf(s).hit(a.now))
		return
	}
	a.ghosts.touchKnown(id)
}

// hits is Hit of each of ids in turn, each hinted to the CPU some hits
// before (Hits).
func (a *APP) hits(ids []ID) {
	for i, id := range ids {
		a.heap.hintAhead(ids, i)
		a.Hit(id)
	}
}

// Miss implements Policy.Miss; see the type's comment for the rule.
func (a *APP) Miss(id ID, size int64, room Room) bool {
	if a.heap.has(id) {
		a.Hit(id)
		return true
	}
	a.now++
	g := newGhost(1)
	if !a.transient(id) {
		g = a.ghosts.touch(id)
	}
	if refuse(room, size) {
		return false
	}
	k := g.key(a.def, a.now)
	for !room.Fits(id, size) && a.heap.len() > 0 && a.heap.top().key.less(k) {
		victim := a.heap.pop()
		a.left(victim)
		room.Evict(victim.id)
	}
	if !room.Fits(id, size) {
		return false
	}
	a.heap.push(id, k, g.nscore)
	if !a.transient(id) {
		a.ghosts.admitted(id)
	}
	return true
}

// left moves what a resident kept of itself while cached (its reads, in
// its key, and its score, in its tag) into its ghost entry as it leaves
// the cache, unless it is transient.
func (a *APP) left(it heapItem[appKey]) {
	if !a.transient(it.id) {
		a.ghosts.left(it.id, ghost{nscore: it.tag, freq: it.key.freq})
	}
}

// Remove forgets a resident; its ghost entry stays.
func (a *APP) Remove(id ID) {
	if it, ok := a.heap.remove(id); ok {
		a.left(it)
	}
}

// Resident reports whether id is in the cache.
func (a *APP) Resident(id ID) bool { return a.heap.has(id) }

// Len is the number of residents.
func (a *APP) Len() int { return a.heap.len() }

// OffHeapBytes implements OffHeap.
func (a *APP) OffHeapBytes() int64 { return a.heap.bytes() + a.ghosts.bytes() }

// Ghosts is the number of ids APP remembers that it does not hold
// (every id seen or scored but residents and transient ones).
func (a *APP) Ghosts() int { return a.ghosts.len() }

// SetScore implements Scorer.
func (a *APP) SetScore(id ID, score float64) {
	if math.IsNaN(score) {
		return
	}
	if slot, ok := a.heap.find(id); ok {
		var g ghost
		g.setScore(float32(score))
		slot.v.tag = g.nscore
		k := a.heap.keyOf(slot)
		k.score = g.score()
		a.heap.setSlot(slot, k)
		return
	}
	a.ghosts.setScore(id, score)
}

// SetDefaultScore implements Scorer.
func (a *APP) SetDefaultScore(score float64) {
	if math.IsNaN(score) {
		return
	}
	a.def = float32(score)
}

// DefaultScore is the score given to never-scored ids admitted now.
func (a *APP) DefaultScore() float64 { return float64(a.def) }
