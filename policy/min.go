package policy

import (
	"errors"
	"fmt"
	"math"
)

// ErrTraceDiverged is what MIN's Err reports when the reads it was given do
// not follow its trace.
var ErrTraceDiverged = errors.New("policy: reads diverged from the trace")

// never is the next use of an id that is not read again.
const never = math.MaxInt64

// MIN is Belady's offline policy with bypass. It knows the whole sequence of
// reads in advance: on a miss it evicts the resident whose next read is
// furthest in the future (never read again counts as infinitely far), and it
// does not admit the missed item at all if the item's own next read is
// further than that of every resident that would have to go. With equal
// sizes this is optimal; with variable sizes it is the usual greedy
// approximation (the optimum is NP-hard), and like APP it may evict some
// residents and still find that the item does not fit.
//
// Each Hit or Miss consumes the next read of the trace. A call whose id is
// not the trace's next read is treated as an id never read again, does not
// advance the position, and records the first such divergence for Err.
type MIN struct {
	trace []ID
	next  []int64 // next[i]: position of the next read of trace[i] after i, or never
	pos   int
	heap  idHeap[int64] // next use; the furthest is on top
	err   error
}

var _ Policy = (*MIN)(nil)

// NewMIN builds Belady's MIN for the given sequence of reads (score updates
// excluded; see Reads). The trace is copied.
func NewMIN(trace []ID) Policy {
	m := &MIN{
		trace: append([]ID(nil), trace...),
		next:  make([]int64, len(trace)),
		heap:  newIDHeap(func(a, b int64) bool { return a > b }),
	}
	releaseWith(m, m.heap.pools()...)
	seen := make(map[ID]int64)
	for i := len(trace) - 1; i >= 0; i-- {
		if n, ok := seen[trace[i]]; ok {
			m.next[i] = n
		} else {
			m.next[i] = never
		}
		seen[trace[i]] = int64(i)
	}
	return m
}

// Name returns "min".
func (m *MIN) Name() string { return "min" }

// Err returns the first divergence of the reads from the trace (wrapping
// ErrTraceDiverged), or nil.
func (m *MIN) Err() error { return m.err }

// advance consumes one read of id and returns its next use.
func (m *MIN) advance(id ID) int64 {
	if m.pos < len(m.trace) && m.trace[m.pos] == id {
		n := m.next[m.pos]
		m.pos++
		return n
	}
	if m.err == nil {
		if m.pos < len(m.trace) {
			m.err = fmt.Errorf("%w: read %d is of %d, the trace has %d", ErrTraceDiverged, m.pos, id, m.trace[m.pos])
		} else {
			m.err = fmt.Errorf("%w: read of %d after the trace's %d reads", ErrTraceDiverged, id, len(m.trace))
		}
	}
	return never
}

// Hit moves a resident's next use on.
func (m *MIN) Hit(id ID) {
	n := m.advance(id)
	if s, ok := m.heap.find(id); ok {
		m.heap.setSlot(s, n)
	}
}

// Miss implements Policy.Miss; see the type's comment for the rule.
func (m *MIN) Miss(id ID, size int64, room Room) bool {
	if m.heap.has(id) {
		m.Hit(id)
		return true
	}
	n := m.advance(id)
	if refuse(room, size) {
		return false
	}
	for !room.Fits(id, size) && m.heap.len() > 0 && m.heap.top().key > n {
		room.Evict(m.heap.pop().id)
	}
	if !room.Fits(id, size) {
		return false
	}
	m.heap.push(id, n, 0)
	return true
}

// Remove forgets id.
func (m *MIN) Remove(id ID) { m.heap.remove(id) }

// Resident reports whether id is in the cache.
func (m *MIN) Resident(id ID) bool { return m.heap.has(id) }

// Len is the number of residents.
func (m *MIN) Len() int { return m.heap.len() }

// OffHeapBytes implements OffHeap.
func (m *MIN) OffHeapBytes() int64 { return m.heap.bytes() }
