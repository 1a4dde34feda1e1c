// Package gcfloor keeps the Go garbage collector from running far more
// often than a process needs when its live heap is small.
//
// A shade-peer keeps its samples off the Go heap, so its live heap is a
// few tens of MB, and the collector's default target (GOGC=100: collect
// once the heap has doubled) has it collect every few MB allocated. Some
// paths allocate that much per request: a sample read from the source
// is a buffer of its own, shared by every reader waiting for it. Reading
// samples of 100 KiB through from a dataset folder, the peer collected a
// hundred times a second, and zeroing, sweeping and the heap's locks took
// about a third of its CPU.
//
// A Floor sets the collector's percent after every collection so that the
// heap may grow to at least Floor.Bytes before the next one, and never
// below Floor.Base: where the live heap alone passes Bytes, the
// collector runs as GOGC=Base would have it. The garbage the heap may hold
// is so bounded by Bytes, a constant, where a fixed higher percent would
// multiply a large live heap (ghost tables of millions of samples).
// GOMEMLIMIT, where set, still bounds the heap from above.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// DefaultBytes is the least heap goal a zero Floor keeps.
const DefaultBytes = 64 << 20

// heapMinimum is the runtime's least heap goal at GOGC=100, which it
// scales by the percent (runtime.defaultHeapMinimum): a percent p gives
// a goal of at least heapMinimum*p/100, however small the live heap.
const heapMinimum = 4 << 20

// Floor is the least heap goal the collector is given. The zero value
// keeps DefaultBytes over GOGC=100.
type Floor struct {
	Bytes int64 // the least heap goal in bytes; 0: DefaultBytes
	Base  int   // the percent where the live heap alone passes Bytes; 0: 100

	// adjusted, where set, is called with each percent set and the
	// number of collections the runtime had completed when the live heap
	// it follows was read (tests).
	adjusted func(percent int, cycles uint64)
}

// Percent is the collector's percent that gives a live heap of live bytes,
// with roots bytes of stacks and globals to scan, a goal of floor bytes,
// and never less than base: the percent a Floor sets. The runtime's goal
// is live + (live + roots) * percent / 100, and at least
// heapMinimum * percent / 100, which bounds the percent for a small live
// heap.
func Percent(live, roots, floor int64, base int) int {
	p := (floor - live) * 100 / max(live+roots, 1)
	p = min(p, floor*100/heapMinimum)
	return int(max(p, int64(base)))
}

// Start sets the percent after every collection until stop is called;
// stop puts back Base. Before the first collection the runtime's own
// start applies (a 4 MB heap): the live heap is not known until then.
func (f Floor) Start() (stop func()) {
	if f.Bytes <= 0 {
		f.Bytes = DefaultBytes
	}
	if f.Base <= 0 {
		f.Base = 100
	}
	var stopped atomic.Bool
	var mu sync.Mutex // orders an adjustment against stop's reset
	// The live heap as the last collection marked it, and the stacks and
	// globals it scanned: what the runtime's goal is made of; and which
	// collection that was.
	sample := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	adjust := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped.Load() {
			return
		}
		metrics.Read(sample)
		var v [4]int64
		for i, s := range sample {
			if s.Value.Kind() == metrics.KindUint64 {
				v[i] = int64(s.Value.Uint64())
			}
		}
		p := Percent(v[0], v[1]+v[2], f.Bytes, f.Base)
		debug.SetGCPercent(p)
		if f.adjusted != nil {
			f.adjusted(p, uint64(v[3]))
		}
	}
	// A sentinel that nothing references is found by the next collection,
	// which runs its cleanup: a sentinel for the collection after, then
	// adjust. The sentinel comes first so that it is made before anything
	// adjust lets go on (a test's next collection) begins.
	var arm func()
	arm = func() {
		runtime.AddCleanup(new(sentinel), func(struct{}) {
			if !stopped.Load() {
				arm()
				adjust()
			}
		}, struct{}{})
	}
	arm()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped.CompareAndSwap(false, true) {
			debug.SetGCPercent(f.Base)
		}
	}
}

// sentinel holds a pointer so that it is never one of the tiny
// allocations the runtime packs together, whose cleanups may never run.
type sentinel struct {
	_ *byte
	_ [8]byte
}
