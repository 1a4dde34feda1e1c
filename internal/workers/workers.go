// Package workers runs functions on goroutines that stay after their run,
// waiting a while for the next, instead of a new goroutine each time. A
// run that calls deep (a read through the source: the hedging, the
// source, the system calls; a request to a peer: QUIC's stream and its
// contexts) grows a new goroutine's stack, and copies it, on its way down
// every time; a kept goroutine has grown already.
//
// It is a leaf: it imports nothing of this module.
package workers

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// IdleFor is how long a worker waits for the next run before it ends,
// and MaxIdle the most workers that wait at once: past a burst the rest
// end as their runs do.
const (
	IdleFor = 10 * time.Second
	MaxIdle = 256
)

// Pool runs functions on its workers. The zero value is ready to use; a
// Pool must not be copied after first use. Its methods are safe for
// concurrent use.
type Pool struct {
	mu sync.Mutex
	// idlers are the workers waiting for a run, the latest last, each by
	// the channel it takes its next run from; under mu. A worker is
	// listed before it waits, so that a run handed to a listed worker
	// always reaches it. closed is set by Close, under mu.
	idlers []chan func()
	closed bool
	quit   chan struct{} // closed by Close; made on first use, under mu

	live atomic.Int64 // workers running or waiting now
}

// Go runs fn on the worker that began waiting last, or on a new one where
// none waits, and returns without waiting for it. fn must not panic.
func (p *Pool) Go(fn func()) {
	p.mu.Lock()
	p.init()
	var next chan func()
	if n := len(p.idlers); n > 0 {
		next = p.idlers[n-1]
		p.idlers[n-1] = nil
		p.idlers = p.idlers[:n-1]
	}
	p.mu.Unlock()
	if next != nil {
		next <- fn // its buffer takes it: the worker is the only receiver
		return
	}
	p.live.Add(1)
	go p.worker(fn)
}

// GoIn runs fn as Go does, counted in wg as wg.Go counts the goroutine
// it starts: wg.Add(1) now, wg.Done once fn returns.
func (p *Pool) GoIn(wg *sync.WaitGroup, fn func()) {
	wg.Add(1)
	p.Go(func() {
		defer wg.Done()
		fn()
	})
}

// init makes the channel Close closes; p.mu is held.
func (p *Pool) init() {
	if p.quit == nil {
		p.quit = make(chan struct{})
	}
}

// worker runs r, then each run handed to it, until it has waited IdleFor
// for one, MaxIdle others wait already, or the pool is closed.
func (p *Pool) worker(r func()) {
	defer p.live.Add(-1)
	next := make(chan func(), 1)
	var idle *time.Timer
	for {
		r()
		if !p.listIdle(next) {
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
		case <-p.quit:
			idle.Stop()
		}
		if p.unlistIdle(next) {
			return
		}
		// A run was handed to this worker as it stopped waiting: run it.
		r = <-next
	}
}

// listIdle lists a worker, by its channel, among the idle ones, unless
// MaxIdle are or the pool is closed.
func (p *Pool) listIdle(next chan func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idlers) >= MaxIdle {
		return false
	}
	p.idlers = append(p.idlers, next)
	return true
}

// unlistIdle takes a worker off the idle list; false where Go took it
// off already, and has handed it a run or is about to.
func (p *Pool) unlistIdle(next chan func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.idlers, next)
	if i < 0 {
		return false
	}
	p.idlers = slices.Delete(p.idlers, i, i+1)
	return true
}

// Idle is how many workers wait for a run now.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idlers)
}

// Close ends the idle workers; the runs under way finish. Go may still be
// called afterwards, each run then on a goroutine of its own.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
}

// Each calls fn(k) for every k in [0, n) on up to at goroutines, the
// caller's among them, each taking the next k once it is done with one
// (not a goroutine a call), and returns once every call has returned.
// One at a time (n or at 1, or below), the calls run on the caller's
// goroutine; with n 0 nothing is started.
func Each(n, at int, fn func(k int)) { each(n, at, fn, func(run func()) { go run() }) }

// Each is the package's Each with the goroutines besides the caller's
// taken from p's workers (Go), whose stacks have grown already.
func (p *Pool) Each(n, at int, fn func(k int)) { each(n, at, fn, p.Go) }

// each is Each, its goroutines started by spawn.
func each(n, at int, fn func(k int), spawn func(func())) {
	if min(n, at) <= 1 {
		for k := range n {
			fn(k)
		}
		return
	}
	var next atomic.Int64
	work := func() {
		for k := next.Add(1) - 1; k < int64(n); k = next.Add(1) - 1 {
			fn(int(k))
		}
	}
	var wg sync.WaitGroup
	for range min(n, at) - 1 {
		wg.Add(1)
		spawn(func() {
			defer wg.Done()
			work()
		})
	}
	work()
	wg.Wait()
}
