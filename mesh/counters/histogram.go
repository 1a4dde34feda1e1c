package counters

import (
	"sync/atomic"
	"time"

	"github.com/shade-mesh/shade/protocol/stats"
)

// latencyBounds are the upper bounds, in seconds, of the latency
// histogram's buckets; a last bucket counts the rest.
var latencyBounds = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// Histogram counts durations into fixed buckets, from 100µs to 1s, without
// locks. Its zero value is ready; it is safe for concurrent use.
type Histogram struct {
	counts [len(latencyBounds) + 1]atomic.Int64
	sumNs  atomic.Int64
}

// Observe counts one duration.
func (h *Histogram) Observe(d time.Duration) {
	seconds := d.Seconds()
	i := 0
	for i < len(latencyBounds) && seconds > latencyBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(seconds * 1e9))
}

// Snapshot returns the counts so far. Its Bounds must not be modified.
func (h *Histogram) Snapshot() stats.Histogram {
	out := stats.Histogram{Bounds: latencyBounds[:], Counts: make([]int64, len(h.counts)), Sum: float64(h.sumNs.Load()) / 1e9}
	for i := range h.counts {
		out.Counts[i] = h.counts[i].Load()
	}
	return out
}
