// Package hedge sends one read to several places in turn and keeps the
// first answer: a hedged request, as in Dean and Barroso's "The Tail at
// Scale". The next place is asked once the one before it has failed, or
// once it has gone a delay without an answer, so that a peer that has
// died, or stalls, costs a read the delay rather than a request timeout.
//
// The delay is learned (Delay): a high quantile of the latencies of recent
// answers, so that only the slowest few reads send a second request and
// the load they add stays small.
//
// The package owns no goroutine beyond a First call's tries (started by
// the caller's spawn, or its own), and imports no network package.
package hedge

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Delay.
const (
	// DefaultQuantile is the share of answers expected within the delay.
	// On a saturated 5-peer mesh, the 95th percentile sent a second
	// request for about 6% of the reads from peers, the 99th for 3%,
	// and the two waits were alike (20-30 ms).
	DefaultQuantile = 0.99
	// DefaultMin is the shortest delay: below it, the noise of a busy
	// host (a scheduler's turn, a collection) would send second requests.
	DefaultMin = 10 * time.Millisecond
	// DefaultMax is the longest delay, and the delay until Window answers
	// are known.
	DefaultMax = 500 * time.Millisecond
)

// window is how many recent latencies a Delay keeps, and learnEvery how
// many new ones it takes before its quantile is worked out again.
const (
	window     = 512
	learnEvery = 32
)

// Delay is how long to wait for an answer before asking the next place:
// the Quantile of the last 512 answers' latencies, within [Min, Max]; Max
// until 32 answers are known. The zero value uses the defaults. Set the
// fields before first use; its methods are safe for concurrent use, and a
// Delay must not be copied after first use.
type Delay struct {
	// Quantile in (0, 1); 0 means DefaultQuantile.
	Quantile float64
	// Min and Max bound the delay; 0 means DefaultMin and DefaultMax.
	Min, Max time.Duration
	// Fixed, when positive, is the delay whatever the latencies; when
	// negative, Get reports never (a negative delay).
	Fixed time.Duration

	// learnt is the quantile in nanoseconds, at least 1; 0 until
	// learnEvery answers are known. Get reads it without mu.
	learnt atomic.Int64

	// mu guards the fields below.
	mu    sync.Mutex
	lat   [window]time.Duration // ring of recent latencies
	n     int                   // latencies in lat, up to window
	next  int                   // where the next latency goes
	fresh int                   // latencies since learnt was worked out
	work  []time.Duration       // scratch for the quantile's selection
}

// Observe records the latency of one answer. Only answers count: a
// request that failed or was given up says nothing of how long an answer
// takes.
func (d *Delay) Observe(latency time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lat[d.next] = latency
	d.next = (d.next + 1) % window
	d.n = min(d.n+1, window)
	d.fresh++
	if d.fresh >= learnEvery {
		d.fresh = 0
		d.work = append(d.work[:0], d.lat[:d.n]...)
		q := d.Quantile
		if q <= 0 || q >= 1 {
			q = DefaultQuantile
		}
		d.learnt.Store(max(int64(nth(d.work, min(int(q*float64(d.n)), d.n-1))), 1))
	}
}

// nth returns the element that a sorted a would hold at k, reordering a
// (Hoare's selection, the pivot the median of the first, middle and last
// elements): in time linear in len(a) on average, where sorting the
// window, on a read through the source, took a twentieth of a peer's CPU.
func nth(a []time.Duration, k int) time.Duration {
	lo, hi := 0, len(a)-1
	for lo < hi {
		x, y, z := a[lo], a[lo+(hi-lo)/2], a[hi]
		p := max(min(x, y), min(max(x, y), z)) // the median of the three
		i, j := lo, hi
		for i <= j {
			for a[i] < p {
				i++
			}
			for a[j] > p {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		// a[lo..j] <= p <= a[i..hi], and a[j+1..i-1] == p.
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}

// Get returns the delay now: negative for never.
func (d *Delay) Get() time.Duration {
	if d.Fixed != 0 {
		return d.Fixed
	}
	lo, hi := d.Min, d.Max
	if lo <= 0 {
		lo = DefaultMin
	}
	if hi <= 0 {
		hi = DefaultMax
	}
	learnt := time.Duration(d.learnt.Load())
	if learnt == 0 {
		return hi
	}
	return min(max(learnt, lo), hi)
}

// Outcome says how a First call went.
type Outcome struct {
	// Index is the try whose answer was kept; -1 when none was.
	Index int
	// Hedged counts the tries started because the one before had gone
	// the delay without an answer (not because it failed): the requests
	// the hedging added.
	Hedged int
}

// First asks the tries in turn and returns the first value one of them
// returns without an error, and how it went. Try i starts once try
// i-1 has returned an error, or once delay has passed since try i-1
// started; a negative delay starts a try only when the one before has
// failed. Once a try succeeds, the context of every other try is
// cancelled and First returns at once: the tries still running end on
// their own, and what they return is dropped, so a try must not hand
// over anything that needs releasing.
//
// When every try fails, First returns the error of the last try, the one
// started last, whatever order the errors arrived in: where the tries go
// from the nearest place to the last resort, that error says why the last
// resort failed. When ctx ends first, First returns ctx's error. With no
// tries it returns ctx's error, or nil.
//
// A single try runs on the caller's goroutine; where there are more, each
// runs on a goroutine that spawn starts (spawn(run) must run run, and
// return without waiting for it), or on one of its own where spawn is
// nil. A spawn that hands runs to goroutines kept from earlier runs
// (internal/workers) spares each try that calls deep the growth of a new
// goroutine's stack on its way down.
func First[T any](ctx context.Context, spawn func(func()), delay time.Duration, tries ...func(context.Context) (T, error)) (T, Outcome, error) {
	var zero T
	out := Outcome{Index: -1}
	switch len(tries) {
	case 0:
		return zero, out, ctx.Err()
	case 1: // nothing to hedge with: no goroutine
		v, err := tries[0](ctx)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return zero, out, err
		}
		out.Index = 0
		return v, out, nil
	}
	type answer struct {
		v   T
		i   int
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(tries)) // never blocks a try
	start := func(i int) {
		run := func() {
			v, err := tries[i](ctx)
			answers <- answer{v, i, err}
		}
		if spawn == nil {
			go run()
			return
		}
		spawn(run)
	}
	var timer *time.Timer
	var tick <-chan time.Time
	arm := func() {
		if delay < 0 {
			return
		}
		if timer == nil {
			timer = time.NewTimer(delay)
			tick = timer.C
			return
		}
		timer.Reset(delay)
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	started, running := 0, 0
	next := func() { // starts the next try, if any is left
		if started < len(tries) {
			start(started)
			started++
			running++
			arm()
		}
	}
	next()
	var last error // of the latest try to fail, by its index
	lastIdx := -1
	for {
		select {
		case a := <-answers:
			running--
			if a.err == nil {
				out.Index = a.i
				return a.v, out, nil
			}
			if a.i > lastIdx {
				last, lastIdx = a.err, a.i
			}
			next()
			if running == 0 {
				return zero, out, last
			}
		case <-tick:
			if started < len(tries) {
				out.Hedged++
			}
			next()
		case <-ctx.Done():
			return zero, out, ctx.Err()
		}
	}
}
