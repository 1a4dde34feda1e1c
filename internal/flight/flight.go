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
	"sync"
	"sync/atomic"
	"time"
)

// Group runs calls by key. The zero value is ready to use; a Group must
// not be copied after first use. All methods are safe for concurrent use.
type Group[T any] struct {
	mu    sync.Mutex
	calls map[string]*Call[T]

	// work hands a run to an idle worker; a worker waits on it for
	// IdleFor after each run, then ends.
	work chan func()
	quit chan struct{} // closed by Close
	once sync.Once

	live atomic.Int64 // workers running or waiting now
	idle atomic.Int64 // workers waiting for a run now
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
	g.mu.Unlock()
	g.run(func() {
		c.val, c.err = fn()
		g.mu.Lock()
		delete(g.calls, k)
		g.mu.Unlock()
		close(c.done)
	})
	return c
}

// init makes the map and channels; g.mu is held.
func (g *Group[T]) init() {
	g.calls = make(map[string]*Call[T])
	g.work = make(chan func())
	g.quit = make(chan struct{})
}

// run hands r to an idle worker, or to a new one where none waits.
func (g *Group[T]) run(r func()) {
	select {
	case g.work <- r:
	default:
		g.live.Add(1)
		go g.worker(r)
	}
}

// worker runs r, then each run handed to it, until it has waited IdleFor
// for one, MaxIdle others wait already, or the group is closed.
func (g *Group[T]) worker(r func()) {
	defer g.live.Add(-1)
	var idle *time.Timer
	for {
		r()
		if !g.waiting() {
			return
		}
		if idle == nil {
			idle = time.NewTimer(IdleFor)
		} else {
			idle.Reset(IdleFor)
		}
		select {
		case r = <-g.work:
			g.idle.Add(-1)
		case <-idle.C:
			g.idle.Add(-1)
			return
		case <-g.quit:
			g.idle.Add(-1)
			idle.Stop()
			return
		}
	}
}

// waiting counts a worker among the idle ones, unless MaxIdle are.
func (g *Group[T]) waiting() bool {
	for {
		n := g.idle.Load()
		if n >= MaxIdle {
			return false
		}
		if g.idle.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Close ends the idle workers; the runs under way finish. Do may still be
// called afterwards, each run then on a goroutine of its own.
func (g *Group[T]) Close() {
	g.mu.Lock()
	if g.calls == nil {
		g.init()
	}
	g.mu.Unlock()
	g.once.Do(func() { close(g.quit) })
}
