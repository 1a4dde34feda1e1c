// Package coalesce sends requests for single items to one place together:
// a request made while another to the same place is in flight waits for
// it, and every request that waited goes in the next one, as a database
// commits the transactions that queued behind a log write in one write
// (group commit). A node reading samples one at a time from its peers
// (many trainers' reads, an MGET's misses) so pays a peer's per-request
// cost (a stream, its packets, the wake-ups on both ends) once a batch
// instead of once a sample; a request to an idle place goes alone at
// once, and waits for nothing. A request waits behind one in flight at
// most MaxWait after that one went: a place slow to answer (an owner
// reading the sample from a remote store) then gets the requests that
// came meanwhile in one request of their own rather than after its
// answer.
//
// The package owns no goroutine beyond the batches it runs (started by the
// caller's spawn), and imports no network package.
package coalesce

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Group sends the items asked of each place, its key, in batches: a call
// waits while a request to its key is in flight (at most MaxWait after
// the newest went), and the calls that waited go together. Set the fields
// before first use; the methods are safe for concurrent use, and a Group
// must not be copied after first use.
type Group[K comparable, Q, R any] struct {
	// Do asks key for qs (at least one) in one request and returns one
	// result per item, in order, or an error that is every item's. It
	// must return once ctx is done.
	Do func(ctx context.Context, key K, qs []Q) ([]R, error)
	// Go runs a batch on a goroutine; nil: a new goroutine.
	Go func(func())
	// Base is the context of the batches of items that waited, which no
	// one caller's context bounds: a batch ends when Base ends, or when
	// every caller of the batch has stopped waiting. nil means
	// context.Background.
	Base context.Context
	// MaxItems bounds a batch's items; 0 means 64. MaxWeight bounds the
	// sum of Weight over a batch's items, unless its first item alone
	// exceeds it; 0 (or a nil Weight) means no bound.
	MaxItems  int
	MaxWeight int64
	Weight    func(Q) int64
	// MaxWait bounds how long after the newest request to a key went a
	// call waits for it: then the calls waiting go in a request of their
	// own, beside it, and a call that comes later goes at once. 0 means
	// no bound: calls wait for a request in flight to return.
	MaxWait time.Duration

	mu    sync.Mutex
	lanes map[K]*lane[Q, R] // keys with requests in flight or calls waiting; under mu
}

// DefaultMaxItems is the most items of a batch where MaxItems is 0.
const DefaultMaxItems = 64

// lane is one key's requests: those in flight, and the calls waiting.
type lane[Q, R any] struct {
	waiting  []*call[Q, R] // in order of arrival
	inflight int           // requests in flight
	last     time.Time     // when the newest of them went
	timer    *time.Timer   // while calls wait, to send them MaxWait after last
}

// call is one caller's item, waiting for a batch.
type call[Q, R any] struct {
	q    Q
	r    R
	err  error
	done chan struct{} // closed once r and err are set
	// b is the batch that took the call, once one has; gone is set when
	// the caller stops waiting. Both under the Group's mu.
	b    *batch
	gone bool
}

// batch is a request of several calls in flight.
type batch struct {
	cancel context.CancelFunc
	live   int // calls of the batch still waited for; under the Group's mu
}

// Call asks key for q and returns its result, or the error of the
// request that carried it, or ctx's error if ctx ends first: a caller
// that stops waiting leaves its item's batch (a batch that no caller
// waits for any more is cancelled), and its result is dropped. With no
// request to key in flight, or none that went within MaxWait, q goes at
// once, alone, on this goroutine under ctx; otherwise it waits for the
// next batch, which leaves when a request in flight returns, or MaxWait
// after the newest went.
func (g *Group[K, Q, R]) Call(ctx context.Context, key K, q Q) (R, error) {
	g.mu.Lock()
	if g.lanes == nil {
		g.lanes = make(map[K]*lane[Q, R])
	}
	l := g.lanes[key]
	if l == nil {
		l = &lane[Q, R]{}
		g.lanes[key] = l
	}
	now := time.Now()
	if l.inflight == 0 || len(l.waiting) == 0 && g.MaxWait > 0 && now.Sub(l.last) >= g.MaxWait {
		l.inflight++
		l.last = now
		g.mu.Unlock()
		rs, err := g.do(ctx, key, []Q{q})
		g.returned(key, l)
		var r R
		if err == nil {
			r = rs[0]
		}
		return r, err
	}
	c := &call[Q, R]{q: q, done: make(chan struct{})}
	l.waiting = append(l.waiting, c)
	g.armLocked(key, l)
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.r, c.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	c.gone = true
	if c.b != nil {
		if c.b.live--; c.b.live == 0 {
			c.b.cancel()
		}
	}
	g.mu.Unlock()
	var zero R
	return zero, ctx.Err()
}

// do is Do, with a result for every item or an error.
func (g *Group[K, Q, R]) do(ctx context.Context, key K, qs []Q) ([]R, error) {
	rs, err := g.Do(ctx, key, qs)
	if err == nil && len(rs) != len(qs) {
		return nil, fmt.Errorf("coalesce: %d results for %d items", len(rs), len(qs))
	}
	return rs, err
}

// Waiting returns how many calls wait for a batch to key.
func (g *Group[K, Q, R]) Waiting(key K) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.lanes[key]; l != nil {
		return len(l.waiting)
	}
	return 0
}

// returned is told that a request to key on l has returned: the calls
// waiting go in the next batch, or, with none and nothing in flight, l is
// retired.
func (g *Group[K, Q, R]) returned(key K, l *lane[Q, R]) {
	g.mu.Lock()
	l.inflight--
	start := g.sendLocked(key, l)
	g.mu.Unlock()
	start()
}

// armLocked sets l's timer, unless it is set, to send the calls waiting
// MaxWait after l's newest request went. Called with mu held.
func (g *Group[K, Q, R]) armLocked(key K, l *lane[Q, R]) {
	if g.MaxWait <= 0 || l.timer != nil || len(l.waiting) == 0 {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(time.Until(l.last.Add(g.MaxWait)), func() {
		g.mu.Lock()
		if l.timer != t { // stopped (a batch left) after it fired
			g.mu.Unlock()
			return
		}
		l.timer = nil
		start := g.sendLocked(key, l)
		g.mu.Unlock()
		start()
	})
	l.timer = t // before mu is let go, which the function waits for
}

// sendLocked takes the next batch of the calls waiting on l and returns
// what starts it on a goroutine of its own, to be called once mu is let
// go, and sets l's timer for the calls left; with no call waiting and
// nothing in flight it retires l, and what it returns does nothing.
// Called with mu held.
func (g *Group[K, Q, R]) sendLocked(key K, l *lane[Q, R]) (start func()) {
	calls := g.takeLocked(l)
	if len(calls) == 0 {
		if l.inflight == 0 && g.lanes[key] == l {
			if l.timer != nil {
				l.timer.Stop()
				l.timer = nil
			}
			delete(g.lanes, key)
		}
		return func() {}
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.inflight++
	l.last = time.Now()
	g.armLocked(key, l) // for the calls past the batch's bounds
	base := g.Base
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithCancel(base)
	b := &batch{cancel: cancel, live: len(calls)}
	for _, c := range calls {
		c.b = b
	}
	run := func() {
		defer cancel()
		qs := make([]Q, len(calls))
		for i, c := range calls {
			qs[i] = c.q
		}
		rs, err := g.do(ctx, key, qs)
		for i, c := range calls {
			if err == nil {
				c.r = rs[i]
			}
			c.err = err
			close(c.done)
		}
		g.returned(key, l)
	}
	if g.Go != nil {
		return func() { g.Go(run) }
	}
	return func() { go run() }
}

// takeLocked takes the next batch's calls off l: the first waiting, then
// as many more as the bounds allow, skipping callers gone. Called with mu
// held.
func (g *Group[K, Q, R]) takeLocked(l *lane[Q, R]) []*call[Q, R] {
	maxItems := g.MaxItems
	if maxItems <= 0 {
		maxItems = DefaultMaxItems
	}
	var calls []*call[Q, R]
	var weight int64
	k := 0
	for ; k < len(l.waiting) && len(calls) < maxItems; k++ {
		c := l.waiting[k]
		if c.gone {
			continue
		}
		if g.MaxWeight > 0 && g.Weight != nil {
			w := g.Weight(c.q)
			if len(calls) > 0 && weight+w > g.MaxWeight {
				break
			}
			weight += w
		}
		calls = append(calls, c)
	}
	l.waiting = slices.Delete(l.waiting, 0, k)
	return calls
}
