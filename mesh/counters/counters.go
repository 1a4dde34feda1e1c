// Package counters holds a node's read counters of one dataset: per epoch
// (hits, misses, source reads, evictions and the rest of stats.Epoch), the
// source latency histogram, and reads and hits by importance decile; and
// it turns them into the counters' part of a stats.DatasetCounters.
//
// It owns the counting only. Which read counts as what (a hit, a peer hit,
// a source fallback), which epoch reads belong to and a sample's decile
// are the caller's (package mesh) to decide. counters imports only
// protocol/stats and the standard library; it must not import mesh,
// store, policy, scores or any network package.
package counters

import (
	"sync"
	"sync/atomic"

	"github.com/shade-mesh/shade/protocol/stats"
)

// Deciles is the number of importance deciles counted: 0 is the least
// important.
const Deciles = 10

// Epoch is one epoch's counters of one dataset on a node. Its fields are
// safe for concurrent use; callers add to them directly.
type Epoch struct {
	epoch           int
	Hits            atomic.Int64 // served from this node's memory
	PeerHits        atomic.Int64 // served from a peer's memory
	ServedPeers     atomic.Int64 // reads this node answered for peers
	SourceFallbacks atomic.Int64 // no owner answered: read the source
	Hedged          atomic.Int64 // reads of a sample added, the one before being slow (package hedge): a batched request's samples each
	ChecksumErrors  atomic.Int64 // a peer's copy, read or offered, failed its checksum
	ColdMisses      atomic.Int64 // first read of a sample that missed
	CapacityMisses  atomic.Int64 // a later read that missed
	Evictions       atomic.Int64
	Rejected        atomic.Int64 // admissions the policy refused
	SourceReads     atomic.Int64
	SourceBytes     atomic.Int64
	SourceErrors    atomic.Int64
	PrefetchHits    atomic.Int64 // misses served from the read-ahead buffer
}

// Number is the epoch these counters belong to.
func (c *Epoch) Number() int { return c.epoch }

// Snapshot returns the counters as a stats.Epoch, with its hit ratio.
func (c *Epoch) Snapshot() stats.Epoch {
	s := stats.Epoch{
		Epoch:          c.epoch,
		LocalHits:      c.Hits.Load(),
		PeerHits:       c.PeerHits.Load(),
		ServedPeers:    c.ServedPeers.Load(),
		SourceFallback: c.SourceFallbacks.Load(),
		Hedged:         c.Hedged.Load(),
		ChecksumErrors: c.ChecksumErrors.Load(),
		ColdMisses:     c.ColdMisses.Load(),
		CapacityMisses: c.CapacityMisses.Load(),
		Evictions:      c.Evictions.Load(),
		Rejected:       c.Rejected.Load(),
		SourceReads:    c.SourceReads.Load(),
		SourceBytes:    c.SourceBytes.Load(),
		SourceErrors:   c.SourceErrors.Load(),
		PrefetchHits:   c.PrefetchHits.Load(),
	}
	s.Hits = s.LocalHits + s.PeerHits
	s.HitRatio = HitRatio(s)
	return s
}

// AddEpoch adds the counters of o to s (all but s.Epoch) and recomputes
// s's hit ratio.
func AddEpoch(s *stats.Epoch, o stats.Epoch) {
	s.Hits += o.Hits
	s.LocalHits += o.LocalHits
	s.PeerHits += o.PeerHits
	s.ServedPeers += o.ServedPeers
	s.SourceFallback += o.SourceFallback
	s.Hedged += o.Hedged
	s.ChecksumErrors += o.ChecksumErrors
	s.ColdMisses += o.ColdMisses
	s.CapacityMisses += o.CapacityMisses
	s.Evictions += o.Evictions
	s.Rejected += o.Rejected
	s.SourceReads += o.SourceReads
	s.SourceBytes += o.SourceBytes
	s.SourceErrors += o.SourceErrors
	s.PrefetchHits += o.PrefetchHits
	s.HitRatio = HitRatio(*s)
}

// HitRatio is hits / (hits + cold and capacity misses); 0 with no reads.
func HitRatio(s stats.Epoch) float64 {
	reads := s.Hits + s.ColdMisses + s.CapacityMisses
	if reads == 0 {
		return 0
	}
	return float64(s.Hits) / float64(reads)
}

// Dataset is the read counters of one dataset on a node: its epochs, its
// source latency and its reads by decile. Its methods are safe for
// concurrent use; none blocks beyond a short lock.
//
// Reads are counted against the current epoch: the newest one Advance was
// given (so the read-ahead of an epoch published but not yet asked for
// counts in the one before).
type Dataset struct {
	// SourceLatency is the distribution of the dataset's source reads.
	SourceLatency Histogram

	// mu guards epochs and serialises Advance; cur is read without it.
	mu     sync.Mutex
	epochs []*Epoch // by epoch, oldest first; never empty
	cur    atomic.Pointer[Epoch]

	decileReads, decileHits [Deciles]atomic.Int64

	// touchMu guards touched: the samples read at least once, one bit
	// each, to tell cold misses (first read) from capacity misses.
	touchMu sync.Mutex
	touched []uint64
}

// New returns the counters of a dataset of the given number of samples,
// counting against epoch 0.
func New(samples int) *Dataset {
	d := &Dataset{touched: make([]uint64, (samples+63)/64)}
	d.Advance(0)
	return d
}

// Current returns the epoch reads are counted against now. It never
// returns nil.
func (d *Dataset) Current() *Epoch { return d.cur.Load() }

// Advance makes epoch the one reads are counted against, if it is newer
// than the current one; an older or equal epoch changes nothing.
func (d *Dataset) Advance(epoch int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.cur.Load(); c != nil && c.epoch >= epoch {
		return
	}
	c := &Epoch{epoch: epoch}
	d.epochs = append(d.epochs, c)
	d.cur.Store(c)
}

// Missed counts a read of sample idx that missed this node's memory: a
// peer hit if a peer served it from memory, else a cold miss on the
// sample's first read and a capacity miss after. idx must be below the
// samples given to New.
func (d *Dataset) Missed(idx int, fromPeerMemory bool) {
	if fromPeerMemory {
		d.Current().PeerHits.Add(1)
		return
	}
	d.touchMu.Lock()
	w, bit := idx/64, uint64(1)<<(idx%64)
	seen := d.touched[w]&bit != 0
	d.touched[w] |= bit
	d.touchMu.Unlock()
	if seen {
		d.Current().CapacityMisses.Add(1)
	} else {
		d.Current().ColdMisses.Add(1)
	}
}

// CountDecile counts one read of a sample of importance decile dec
// (0..Deciles-1), and a hit if it was served from memory.
func (d *Dataset) CountDecile(dec int, hit bool) {
	d.decileReads[dec].Add(1)
	if hit {
		d.decileHits[dec].Add(1)
	}
}

// Snapshot returns the counters' part of a stats.DatasetCounters: Epoch,
// Total, Epochs, SourceLatency, DecileReads and DecileHits. The caller
// fills in the dataset's name, version, size and resident samples.
func (d *Dataset) Snapshot() stats.DatasetCounters {
	d.mu.Lock()
	epochs := append([]*Epoch(nil), d.epochs...)
	d.mu.Unlock()
	out := stats.DatasetCounters{
		Epoch:         d.Current().epoch,
		Total:         stats.Epoch{Epoch: -1},
		SourceLatency: d.SourceLatency.Snapshot(),
		DecileReads:   make([]int64, Deciles),
		DecileHits:    make([]int64, Deciles),
	}
	for i := range d.decileReads {
		out.DecileReads[i], out.DecileHits[i] = d.decileReads[i].Load(), d.decileHits[i].Load()
	}
	for _, c := range epochs {
		s := c.Snapshot()
		out.Epochs = append(out.Epochs, s)
		AddEpoch(&out.Total, s)
	}
	return out
}

// Total returns the counters summed over every epoch; its Epoch is -1.
func (d *Dataset) Total() stats.Epoch {
	d.mu.Lock()
	epochs := append([]*Epoch(nil), d.epochs...)
	d.mu.Unlock()
	t := stats.Epoch{Epoch: -1}
	for _, c := range epochs {
		AddEpoch(&t, c.Snapshot())
	}
	return t
}
