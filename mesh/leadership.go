package mesh

import (
	"sync"
	"sync/atomic"
	"time"
)

// leadership is a node's view of the mesh's leader: who leads, whether
// this node does, and the terms. Its reads take no lock: each field is an
// atomic read on every request path (reports, orders) and written only by
// the membership handler, the takeover it starts and a yield (Node.giveWay),
// and no reader needs two fields to agree. The writers that must agree (a
// takeover that completes or installs a job's leader, a yield) hold turn.
// The zero value has no leader and term 0.
type leadership struct {
	name       atomic.Value  // string: the leader's name; nil or "" for none
	leads      atomic.Bool   // this node leads (takeover complete)
	takingOver atomic.Bool   // a takeover is running
	term       atomic.Uint64 // this node's term while it leads
	maxTerm    atomic.Uint64 // the highest term seen
	yield      atomic.Pointer[yieldMark]

	// turn orders a takeover's steps that make this node lead (a job's
	// leader installed, leading set) against a yield, which stops it.
	turn sync.Mutex
}

// yieldMark is a yield: this node gives way to the member to, which is
// taking over, until its membership shows that member, or until.
type yieldMark struct {
	to    string
	until time.Time
}

// yieldTo makes this node give way to the member to until the time until.
func (l *leadership) yieldTo(to string, until time.Time) {
	l.yield.Store(&yieldMark{to: to, until: until})
}

// yieldingTo is the member this node gives way to at now; "" for none.
func (l *leadership) yieldingTo(now time.Time) string {
	if y := l.yield.Load(); y != nil && now.Before(y.until) {
		return y.to
	}
	return ""
}

// endYield ends the yield to the member to, if it is the one in force.
func (l *leadership) endYield(to string) {
	if y := l.yield.Load(); y != nil && y.to == to {
		l.yield.CompareAndSwap(y, nil)
	}
}

// leader is the current leader's name; "" while there is none.
func (l *leadership) leader() string {
	s, _ := l.name.Load().(string)
	return s
}

// setLeader records who leads now and returns who led before.
func (l *leadership) setLeader(name string) (old string) {
	old = l.leader()
	l.name.Store(name)
	return old
}

// leading reports whether this node acts as the leader now.
func (l *leadership) leading() bool { return l.leads.Load() }

// setLeading marks this node as leading (its takeover is complete) or not.
func (l *leadership) setLeading(v bool) { l.leads.Store(v) }

// startTakeover reports whether the caller may run a takeover: none runs
// now. The caller calls endTakeover when it is done.
func (l *leadership) startTakeover() bool { return !l.takingOver.Swap(true) }

// endTakeover ends the takeover that startTakeover allowed.
func (l *leadership) endTakeover() { l.takingOver.Store(false) }

// ownTerm is this node's term while it leads.
func (l *leadership) ownTerm() uint64 { return l.term.Load() }

// lead takes term as this node's own and raises the highest term seen to it.
func (l *leadership) lead(term uint64) {
	l.observe(term)
	l.term.Store(term)
}

// highest is the highest term this node has seen.
func (l *leadership) highest() uint64 { return l.maxTerm.Load() }

// observe raises the highest term seen to t.
func (l *leadership) observe(t uint64) {
	for {
		cur := l.maxTerm.Load()
		if t <= cur || l.maxTerm.CompareAndSwap(cur, t) {
			return
		}
	}
}
