// Package flight collapses concurrent calls for one key into one run, as
// golang.org/x/sync/singleflight's DoChan does, for a cache's miss path:
//
//   - A run goes to a goroutine that an earlier run left idle, where one
//     waits, instead of a new goroutine each time. A read through the
//     source calls deep (the hedging, the source, the system calls), and a
//     new goroutine's stack is grown, and copied, on its way down every
//     time; a kept one has grown already.
//   - Results are typed, and the key is looked up without a copy.
//
// It is a leaf: it imports nothing of this module.
package flight

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Group runs calls by key. The zero value is ready to use; a Group must
// not be copied after first use. All methods are safe for concurrent use.
type Group[T any] struct {
	mu    sync.Mutex
	calls map[string]*Call[T]

	// idlers are the workers waiting for a run, the latest last, each by
	// the channel it takes its next run from; under mu. A worker is
	// listed before it waits, so that a run handed to a listed worker
	// always reaches it. closed is set by Close, under mu.
	idlers []chan func()
	closed bool
	quit   chan struct{} // closed by Close

	live atomic.Int64 // workers running or waiting now
}

// IdleFor is how long a worker waits for the next run before it ends,
// and MaxIdle the most workers that wait at once: past a burst of misses
// the rest end as their runs do.
const (
	IdleFor = 10 * time.Second
	MaxIdle = 256
)

// Call is one run of a function for a key, shared by every caller that
// asked for that key while it ran.
type Call[T any] struct {
	done chan struct{}
	val  T
	err  error
}

// Done is closed once the run has returned.
func (c *Call[T]) Done() <-chan struct{} { return c.done }

// Result returns what the run returned; call it once Done is closed.
func (c *Call[T]) Result() (T, error) { return c.val, c.err }

// Do returns the call running for key, starting fn for it where none
// runs: fn runs once on a worker goroutine whatever the callers do, and
// every caller that asked for key until it returns shares its result.
// A call that has returned is forgotten: the next Do for key runs fn
// again. fn must not panic.
func (g *Group[T]) Do(key []byte, fn func() (T, error)) *Call[T] {
	g.mu.Lock()
	if c, ok := g.calls[string(key)]; ok { // no copy of key to look it up
		g.mu.Unlock()
		return c
	}
	if g.calls == nil {
		g.init()
	}
	c := &Call[T]{done: make(chan struct{})}
	k := string(key)
	g.calls[k] = c
	next := g.takeIdlerLocked()
	g.mu.Unlock()
	r := func() {
		c.val, c.err = fn()
		g.mu.Lock()
		delete(g.calls, k)
		g.mu.Unlock()
		close(c.done)
	}
	if next != nil {
		next <- r // its buffer takes it: the worker is the only receiver
	} else {
		g.live.Add(1)
		go g.worker(r)
	}
	return c
}

// init makes the map and the channel Close closes; g.mu is held.
func (g *Group[T]) init() {
	g.calls = make(map[string]*Call[T])
	g.quit = make(chan struct{})
}

// takeIdlerLocked takes the worker that began waiting last off the idle
// list and returns its channel, or nil where none waits; g.mu is held.
func (g *Group[T]) takeIdlerLocked() chan func() {
	n := len(g.idlers)
	if n == 0 {
		return nil
	}
	next := g.idlers[n-1]
	g.idlers[n-1] = nil
	g.idlers = g.idlers[:n-1]
	return next
}

// worker runs r, then each run handed to it, until it has waited IdleFor
// for one, MaxIdle others wait already, or the group is closed.
func (g *Group[T]) worker(r func()) {
	defer g.live.Add(-1)
	next := make(chan func(), 1)
	var idle *time.Timer
	for {
		r()
		if !g.listIdle(next) {
			return
		}
		if idle == nil {
			idle = time.NewTimer(IdleFor)
		} else {
			idle.Reset(IdleFor)
		}
		select {
		case r = <-next:
			continue
		case <-idle.C:
		case <-g.quit:
			idle.Stop()
		}
		if g.unlistIdle(next) {
			return
		}
		// A run was handed to this worker as it stopped waiting: run it.
		r = <-next
	}
}

// listIdle lists a worker, by its channel, among the idle ones, unless
// MaxIdle are or the group is closed.
func (g *Group[T]) listIdle(next chan func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || len(g.idlers) >= MaxIdle {
		return false
	}
	g.idlers = append(g.idlers, next)
	return true
}

// unlistIdle takes a worker off the idle list; false where Do took it
// off already, and has handed it a run or is about to.
func (g *Group[T]) unlistIdle(next chan func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.idlers, next)
	if i < 0 {
		return false
	}
	g.idlers = slices.Delete(g.idlers, i, i+1)
	return true
}

// Close ends the idle workers; the runs under way finish. Do may still be
// called afterwards, each run then on a goroutine of its own.
func (g *Group[T]) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.calls == nil {
		g.init()
	}
	if !g.closed {
		g.closed = true
		close(g.quit)
	}
}
