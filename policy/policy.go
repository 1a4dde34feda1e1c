// Package policy holds the cache's admission and eviction policies behind one
// small interface, and a trace replayer that compares them.
//
// A policy sees only ids, sizes and a Room; it never holds sample bytes and
// imports no network or storage package. Policies are pure and deterministic:
// there are no clocks and no random sources, and time is a logical tick that
// each Hit or Miss advances. Replaying one trace twice gives the same figures.
//
// The policies are:
//
//   - "app": SHADE's importance-aware policy in its corrected form (see NewAPP);
//   - "order": APP's importance weighed with the next use of each item in the
//     published order of the current epoch (see NewOrderAware);
//   - "lru", "fifo", "lfu": the classic baselines;
//   - "minio": CoorDL's MinIO, which fills the cache once and never evicts;
//   - "none": admits nothing, the baseline without a cache;
//   - "min": Belady's offline MIN with bypass, built from the trace by NewMIN.
package policy

import (
	"errors"
	"fmt"
	"math"
)

// ID names one cached item. It is opaque to a policy; the node packs the
// dataset and the sample index into it.
type ID uint64

// Room is the cache's space as a policy sees it. The node implements it over
// the off-heap store; Budget implements it for simulations.
//
// A policy calls Room only from inside Miss. Evict may call back into the
// policy's Remove (a no-op: the victim is already forgotten) and Forget
// but never into Hit or Miss.
type Room interface {
	// Fits reports whether size more bytes for id can be stored now.
	Fits(id ID, size int64) bool
	// Evict removes a resident the policy chose as victim. The policy has
	// already forgotten it when Evict is called.
	Evict(id ID)
}

// Bounded is a Room that knows its total capacity in bytes. Policies look for
// it with a type assertion and refuse an item larger than the whole room
// before evicting anything, so one oversized read does not flush the cache.
// Over a plain Room such an item is found out only after every evictable
// resident has gone.
type Bounded interface {
	Room
	// Capacity is the room's total size in bytes.
	Capacity() int64
}

// Policy decides admission and eviction.
//
// Implementations are not safe for concurrent use: the node serializes calls.
// Hit and Miss each advance the policy's logical clock by one tick.
type Policy interface {
	// Name is the policy's name as New accepts it ("app", "lru", ...).
	Name() string
	// Hit records a read of a resident item. A Hit for an id that is not
	// resident only advances the clock (and, for APP and OrderAware, the id's
	// place in the order, and its frequency where they remember the id: a
	// Hit does not bring back an id never seen, or one they keep nothing
	// of once it leaves, Options.Transient).
	Hit(id ID)
	// Miss records a read of a non-resident item of size bytes. It may call
	// room.Evict for victims, and returns true if id is admitted: id is then
	// resident and the caller stores it. A Miss for an id that is already
	// resident counts as a Hit and returns true. A negative size is refused.
	Miss(id ID, size int64, room Room) bool
	// Remove forgets id because it left the cache for another reason
	// (deleted, corrupt, the store refused it). It is a no-op if id is not
	// resident. Remove does not call the Room.
	Remove(id ID)
	// Resident reports whether id is in the cache.
	Resident(id ID) bool
	// Len is the number of resident items.
	Len() int
}

// Hits tells p of a read of each of ids in turn, as p.Hit of each would.
// APP and OrderAware hint the CPU some hits ahead of each (the id's slot
// in their table of residents, then its entry in their heap): in a large
// cache those are out of the CPU's caches, and each hit would otherwise
// wait for them in turn.
func Hits(p Policy, ids []ID) {
	if h, ok := p.(interface{ hits([]ID) }); ok {
		h.hits(ids)
		return
	}
	for _, id := range ids {
		p.Hit(id)
	}
}

// Scorer is implemented by importance-aware policies.
type Scorer interface {
	// SetScore applies a cluster-wide importance update. A resident is
	// re-keyed at once; otherwise the ghost entry keeps the score for the
	// id's next admission. A NaN score is ignored.
	SetScore(id ID, score float64)
	// SetDefaultScore sets the score of ids never scored (the node passes
	// the running mean of its score table). It applies to ids admitted
	// afterwards; residents keep the score they were admitted with until
	// SetScore re-keys them. A NaN score is ignored.
	SetDefaultScore(score float64)
}

// OffHeap is implemented by policies whose tables lie in memory mapped
// outside the Go heap (APP, OrderAware, LFU, MIN: their heap and its id
// table).
type OffHeap interface {
	// OffHeapBytes is that memory, in bytes. Unlike the other methods
	// it may be called at any time, from any goroutine.
	OffHeapBytes() int64
}

// Lookahead is implemented by policies that use the published order of the
// epoch that is starting.
type Lookahead interface {
	// BeginEpoch installs epoch's order: the ids of the epoch's reads, in
	// the order they will be read. The Hit and Miss calls that follow, up
	// to the next BeginEpoch, are taken to be those reads. A repeated or
	// older epoch number replaces the order all the same (an order that
	// was installed again). reads belongs to the caller; the policy keeps
	// no reference to it.
	BeginEpoch(epoch int, reads []ID)
	// AppendEpoch installs the order of epoch, published while the
	// current one is still being read: the current order's reads not yet
	// taken by a Hit or Miss stay first, in their order, and reads follow
	// them. Where the current order was appended too, the reads left of
	// the order before it are dropped: that epoch is over. reads belongs
	// to the caller.
	AppendEpoch(epoch int, reads []ID)
	// MergeEpoch installs the order of epoch of one job among several that
	// read the cache side by side. The current order's reads not yet taken
	// (those of the other jobs, and any this job left) are read by others
	// jobs at one read per job per step; reads are this job's, at one read
	// per step, beginning after start steps (the job's reads of an order
	// installed before and still to come: 0 when reads is the job's next
	// order to read). The two are interleaved by their steps: an
	// unconsumed place k (0-based in the current order's order) comes at
	// step k/others, read i at step start+i; on equal steps the current
	// order's places come first. With others == 0, MergeEpoch is
	// AppendEpoch when start > 0 and BeginEpoch otherwise. A negative start
	// or others counts as 0. reads belongs to the caller.
	MergeEpoch(epoch int, reads []ID, start, others int)
}

// Options tunes New. The zero value is the default.
type Options struct {
	// DefaultScore is the initial score of never-scored ids for importance-
	// aware policies. Zero means ln(10+63*0.5), the middle of the score range
	// s = ln(10+63p), p in [0, 1].
	DefaultScore float64
	// Transient reports the ids that APP and OrderAware keep nothing of
	// once they leave the cache, nor of a Miss they refuse: no ghost
	// entry, resident or not, and no place in the order. A cache's
	// free-form keys are: their names are its clients', unbounded, and
	// one that comes back is as new. Nil means none.
	Transient func(ID) bool
}

// transient is o.Transient, or a function that reports no id where it
// is nil.
func (o Options) transient() func(ID) bool {
	if o.Transient != nil {
		return o.Transient
	}
	return func(ID) bool { return false }
}

// MiddleScore is ln(10+63*0.5), the score of percentile 0.5 and the default
// of Options.DefaultScore.
const MiddleScore = 3.7256934272366524

// Errors returned by New.
var (
	ErrUnknownPolicy = errors.New("policy: unknown policy")
	ErrNeedsTrace    = errors.New("policy: policy needs the trace")
	ErrBadOptions    = errors.New("policy: bad options")
)

// Names lists the policies New builds, in the order a report shows them.
// Belady's MIN ("min") is not among them: it needs the trace (NewMIN).
func Names() []string {
	return []string{"app", "order", "lru", "fifo", "lfu", "minio"}
}

// New builds the online policy called name: "app", "order", "lru", "fifo",
// "lfu", "minio", or "none" (admits nothing: a node that caches nothing,
// the baseline of reading every sample from its source). An unknown name
// gives an error wrapping ErrUnknownPolicy; "min" gives one wrapping
// ErrNeedsTrace.
func New(name string, opts Options) (Policy, error) {
	if math.IsNaN(opts.DefaultScore) || math.IsInf(opts.DefaultScore, 0) {
		return nil, fmt.Errorf("%w: default score %v", ErrBadOptions, opts.DefaultScore)
	}
	switch name {
	case "app":
		return NewAPP(opts), nil
	case "order":
		return NewOrderAware(opts), nil
	case "lru":
		return NewLRU(), nil
	case "fifo":
		return NewFIFO(), nil
	case "lfu":
		return NewLFU(), nil
	case "minio":
		return NewMinIO(), nil
	case "none":
		return None{}, nil
	case "min":
		return nil, fmt.Errorf("%w: %q is offline, build it with NewMIN", ErrNeedsTrace, name)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownPolicy, name)
}

// refuse reports whether an item of size bytes can never be admitted into
// room: a negative size, or one larger than a Bounded room's capacity.
func refuse(room Room, size int64) bool {
	if size < 0 {
		return true
	}
	b, ok := room.(Bounded)
	return ok && size > b.Capacity()
}
