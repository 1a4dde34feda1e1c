package policy

import (
	"math"
)

// Budget is a byte-capacity Room for simulations: it remembers the size of
// each stored id. It is not safe for concurrent use.
type Budget struct {
	capacity  int64
	used      int64
	sizes     map[ID]int64
	evictions int64
}

var _ Bounded = (*Budget)(nil)

// NewBudget returns an empty Budget of capacity bytes.
func NewBudget(capacity int64) *Budget {
	return &Budget{capacity: capacity, sizes: make(map[ID]int64)}
}

// Fits reports whether size more bytes fit in the free space.
func (b *Budget) Fits(id ID, size int64) bool {
	return size >= 0 && size <= b.capacity-b.used
}

// Evict frees id's bytes; an id not stored is ignored.
func (b *Budget) Evict(id ID) {
	if s, ok := b.sizes[id]; ok {
		b.used -= s
		delete(b.sizes, id)
		b.evictions++
	}
}

// Admit records id as stored with size bytes, replacing an earlier size. It
// does not check Fits: the caller does (Replay admits only what a policy
// accepted).
func (b *Budget) Admit(id ID, size int64) {
	b.used += size - b.sizes[id]
	b.sizes[id] = size
}

// Used is the number of bytes stored.
func (b *Budget) Used() int64 { return b.used }

// Capacity is the Budget's size in bytes.
func (b *Budget) Capacity() int64 { return b.capacity }

// Len is the number of ids stored.
func (b *Budget) Len() int { return len(b.sizes) }

// Stored reports whether id is stored.
func (b *Budget) Stored(id ID) bool {
	_, ok := b.sizes[id]
	return ok
}

// Evictions is the number of ids Evict removed.
func (b *Budget) Evictions() int64 { return b.evictions }

// Access is one event of a trace: a read of ID of Size bytes; or, when
// HasScore is set, an importance update of ID to Score (no read; Size
// unused); or, when IsEpoch is set, the installation of epoch Epoch's order
// (no read; ID, Size and Score unused): the reads that follow, up to the
// next epoch event, are that order. IsEpoch wins over HasScore.
type Access struct {
	ID       ID
	Size     int64
	Score    float64
	HasScore bool
	Epoch    int
	IsEpoch  bool
}

// IsRead reports whether a is a read (neither a score nor an epoch event).
func (a Access) IsRead() bool { return !a.HasScore && !a.IsEpoch }

// Result is what one replay of a trace through a policy measured.
type Result struct {
	Policy    string
	Capacity  int64 // bytes
	Reads     int64
	Hits      int64
	Admitted  int64 // misses the policy admitted
	Rejected  int64 // misses served uncached
	Evictions int64
	HitRatio  float64 // Hits / Reads, 0 for no reads
}

// Replay runs trace through p over a fresh Budget of capacity bytes, the
// way the node drives a policy: a read of a resident is a Hit, any other read
// a Miss, and an admitted item is stored. Score events go to a Scorer policy,
// which also gets SetDefaultScore with the running mean of the score table
// (the latest score of every id scored so far) after each one, as the node
// does. At an epoch event a Lookahead policy gets BeginEpoch with the ids of
// the reads that follow, up to the next epoch event: the published order.
// Other policies ignore score and epoch events. p should be fresh.
func Replay(p Policy, trace []Access, capacity int64) Result {
	b := NewBudget(capacity)
	r := Result{Policy: p.Name(), Capacity: capacity}
	scorer, _ := p.(Scorer)
	ahead, _ := p.(Lookahead)
	var table scoreTable
	var order []ID
	for i, a := range trace {
		if a.IsEpoch {
			if ahead != nil {
				order = epochOrder(order[:0], trace[i+1:])
				ahead.BeginEpoch(a.Epoch, order)
			}
			continue
		}
		if a.HasScore {
			if scorer != nil {
				scorer.SetScore(a.ID, a.Score)
				if mean, ok := table.set(a.ID, a.Score); ok {
					scorer.SetDefaultScore(mean)
				}
			}
			continue
		}
		r.Reads++
		if p.Resident(a.ID) {
			r.Hits++
			p.Hit(a.ID)
			continue
		}
		if p.Miss(a.ID, a.Size, b) {
			r.Admitted++
			b.Admit(a.ID, a.Size)
		} else {
			r.Rejected++
		}
	}
	r.Evictions = b.Evictions()
	if r.Reads > 0 {
		r.HitRatio = float64(r.Hits) / float64(r.Reads)
	}
	return r
}

// epochOrder appends to dst the ids of rest's reads up to its first epoch
// event, and returns it.
func epochOrder(dst []ID, rest []Access) []ID {
	for _, a := range rest {
		if a.IsEpoch {
			break
		}
		if !a.HasScore {
			dst = append(dst, a.ID)
		}
	}
	return dst
}

// scoreTable keeps the latest score of each id and their running mean.
type scoreTable struct {
	scores map[ID]float64
	sum    float64
}

// set records id's score and returns the table's new mean; NaN is ignored.
func (t *scoreTable) set(id ID, s float64) (float64, bool) {
	if math.IsNaN(s) {
		return 0, false
	}
	if t.scores == nil {
		t.scores = make(map[ID]float64)
	}
	t.sum += s - t.scores[id]
	t.scores[id] = s
	return t.sum / float64(len(t.scores)), true
}

// Reads returns the ids of trace's reads in order, score and epoch events
// left out: the trace NewMIN wants.
func Reads(trace []Access) []ID {
	ids := make([]ID, 0, len(trace))
	for _, a := range trace {
		if a.IsRead() {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// WorkingSet returns the number of distinct ids read in trace and the sum of
// their sizes in bytes (the largest size read, for an id read with several).
func WorkingSet(trace []Access) (ids int, bytes int64) {
	sizes := make(map[ID]int64)
	for _, a := range trace {
		if !a.IsRead() {
			continue
		}
		if s, ok := sizes[a.ID]; !ok || a.Size > s {
			bytes += a.Size - s
			sizes[a.ID] = a.Size
		}
	}
	return len(sizes), bytes
}
