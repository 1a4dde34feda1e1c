// Package flight collapses concurrent calls for one key into one run, as
// golang.org/x/sync/singleflight's DoChan does, for a cache's miss path:
//
//   - A run goes to a worker of a workers.Pool (the group's own, or one it
//     shares), a goroutine that an earlier run left idle where one waits,
//     instead of a new goroutine each time, so that the run's deep calls
//     do not grow a new stack.
//   - Results are typed, and the key is looked up without a copy.
//
// Of this module it imports only internal/workers, a leaf.
package flight

import (
	"sync"

	"github.com/shade-mesh/shade/internal/workers"
)

// Group runs calls by key. The zero value is ready to use; a Group must
// not be copied after first use. All methods are safe for concurrent use.
type Group[T any] struct {
	// Workers, where set before first use, runs the calls: a pool the
	// group shares with other work, which its owner closes. Where nil,
	// the group runs them on a pool of its own.
	Workers *workers.Pool

	mu    sync.Mutex
	calls map[string]*Call[T]
	own   workers.Pool
}

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
		g.calls = make(map[string]*Call[T])
	}
	c := &Call[T]{done: make(chan struct{})}
	k := string(key)
	g.calls[k] = c
	g.mu.Unlock()
	g.pool().Go(func() {
		c.val, c.err = fn()
		g.mu.Lock()
		delete(g.calls, k)
		g.mu.Unlock()
		close(c.done)
	})
	return c
}

// pool is the pool the calls run on.
func (g *Group[T]) pool() *workers.Pool {
	if g.Workers != nil {
		return g.Workers
	}
	return &g.own
}

// Close ends the idle workers of the group's own pool (not a shared
// Workers); the runs under way finish. Do may still be called afterwards,
// each run then on a goroutine of its own.
func (g *Group[T]) Close() { g.own.Close() }
