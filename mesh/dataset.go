package mesh

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/mesh/orders"
	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/scores"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/protocol/stats"
	"github.com/shade-mesh/shade/sampling"
)

// datasetState is one served dataset: its source, its job and its
// counters.
type datasetState struct {
	name     string
	ordinal  int
	src      Source
	manifest *dataset.Manifest
	len      int

	// The job: the score table (the leader's, or a replica of it), the
	// orders this node holds, and the leader's state while this node leads.
	scores    *scores.Table
	book      *orders.Book
	lead      atomic.Pointer[leaderJob]
	ring      atomic.Pointer[ring.Ring] // owners among members serving this version
	reports   atomic.Int64
	reported  atomic.Int64
	sourceLat latencyHistogram
	// Reads and hits by importance decile: the sample's score at the time
	// of the read, in tenths of the score range ln(10)..ln(73).
	decileReads, decileHits [10]atomic.Int64

	resident atomic.Int64 // samples of this dataset in the cache

	// touched marks samples read at least once, to tell cold misses (first
	// access) from capacity misses (a later access that missed).
	touchMu sync.Mutex
	touched []uint64

	statsMu sync.Mutex
	epochs  []*epochCounters // by epoch, oldest first
	cur     atomic.Pointer[epochCounters]
}

func openDataset(ordinal int, dc DatasetConfig, cfg Config) (*datasetState, error) {
	if err := samplekey.ValidName(dc.Name); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	src := dc.Source
	if src == nil {
		if dc.Dir == "" {
			return nil, fmt.Errorf("%w: dataset %q has no directory", ErrConfig, dc.Name)
		}
		d, err := dataset.OpenDir(dc.Dir, nil)
		if err != nil {
			return nil, fmt.Errorf("mesh: dataset %q: %w", dc.Name, err)
		}
		src = d
	}
	if cfg.SourceThrottle.Enabled() {
		src = dataset.Throttle(src, cfg.SourceThrottle, nil)
	}
	m := src.Manifest()
	ds := &datasetState{
		name:     dc.Name,
		ordinal:  ordinal,
		src:      src,
		manifest: m,
		len:      m.Len(),
		touched:  make([]uint64, (m.Len()+63)/64),
	}
	ds.scores = scores.New(ds.len, cfg.Alpha, rand.New(rand.NewPCG(cfg.Seed, uint64(ordinal))))
	ds.book = orders.New(cfg.KeepEpochs)
	ds.advance(0)
	return ds, nil
}

func (ds *datasetState) leaderJob() *leaderJob      { return ds.lead.Load() }
func (ds *datasetState) setLeaderJob(lj *leaderJob) { ds.lead.Store(lj) }

func (ds *datasetState) headTerm() uint64 {
	_, _, t := ds.book.Head()
	return t
}

// samplingConfig translates the node's Config, where zero means default,
// into sampling's, where a negative value does.
func (ds *datasetState) samplingConfig(cfg Config) sampling.Config {
	c := sampling.Config{Seed: cfg.Seed, Lambda: cfg.Lambda, PADS: !cfg.Uniform}
	switch {
	case cfg.UniformFloor == 0:
		c.UniformFloor = -1
	case cfg.UniformFloor > 0:
		c.UniformFloor = cfg.UniformFloor
	}
	switch {
	case cfg.CoverageEpochs == 0:
		c.CoverageEpochs = -1
	case cfg.CoverageEpochs > 0:
		c.CoverageEpochs = cfg.CoverageEpochs
	}
	return c
}

// countRead counts a read that missed this node's memory: a hit if a peer
// served it from memory, else a miss.
func (ds *datasetState) countRead(idx int, fromMemory bool) {
	if fromMemory {
		ds.current().peerHits.Add(1)
		return
	}
	ds.countMiss(idx)
}

// countMiss counts a miss of sample idx as cold or capacity.
func (ds *datasetState) countMiss(idx int) {
	ds.touchMu.Lock()
	w, bit := idx/64, uint64(1)<<(idx%64)
	seen := ds.touched[w]&bit != 0
	ds.touched[w] |= bit
	ds.touchMu.Unlock()
	if seen {
		ds.current().capacityMisses.Add(1)
	} else {
		ds.current().coldMisses.Add(1)
	}
}

// epochCounters are one epoch's counters of one dataset on this node.
// Reads are attributed to the newest epoch whose order was requested (so
// the read-ahead of an epoch published but not yet asked for counts in the
// one before).
type epochCounters struct {
	epoch                      int
	hits                       atomic.Int64 // served from this node's memory
	peerHits                   atomic.Int64 // served from a peer's memory
	servedPeers                atomic.Int64 // reads this node answered for peers
	sourceFallbacks            atomic.Int64 // no owner answered: read the source
	checksumErrors             atomic.Int64
	coldMisses, capacityMisses atomic.Int64
	evictions, rejected        atomic.Int64
	sourceReads, sourceBytes   atomic.Int64
	sourceErrors               atomic.Int64
	prefetchHits               atomic.Int64 // misses served from the read-ahead buffer
}

func (ds *datasetState) current() *epochCounters { return ds.cur.Load() }

// advance makes epoch the one reads are counted against, if it is newer.
func (ds *datasetState) advance(epoch int) {
	ds.statsMu.Lock()
	defer ds.statsMu.Unlock()
	if c := ds.cur.Load(); c != nil && c.epoch >= epoch {
		return
	}
	c := &epochCounters{epoch: epoch}
	ds.epochs = append(ds.epochs, c)
	ds.cur.Store(c)
}

func (c *epochCounters) snapshot() stats.Epoch {
	s := stats.Epoch{
		Epoch:          c.epoch,
		Hits:           c.hits.Load() + c.peerHits.Load(),
		LocalHits:      c.hits.Load(),
		PeerHits:       c.peerHits.Load(),
		ServedPeers:    c.servedPeers.Load(),
		SourceFallback: c.sourceFallbacks.Load(),
		ChecksumErrors: c.checksumErrors.Load(),
		ColdMisses:     c.coldMisses.Load(),
		CapacityMisses: c.capacityMisses.Load(),
		Evictions:      c.evictions.Load(),
		Rejected:       c.rejected.Load(),
		SourceReads:    c.sourceReads.Load(),
		SourceBytes:    c.sourceBytes.Load(),
		SourceErrors:   c.sourceErrors.Load(),
		PrefetchHits:   c.prefetchHits.Load(),
	}
	s.HitRatio = ratio(s.Hits, s.Hits+s.ColdMisses+s.CapacityMisses)
	return s
}

// addEpoch adds the counters of o to s.
func addEpoch(s *stats.Epoch, o stats.Epoch) {
	s.Hits += o.Hits
	s.LocalHits += o.LocalHits
	s.PeerHits += o.PeerHits
	s.ServedPeers += o.ServedPeers
	s.SourceFallback += o.SourceFallback
	s.ChecksumErrors += o.ChecksumErrors
	s.ColdMisses += o.ColdMisses
	s.CapacityMisses += o.CapacityMisses
	s.Evictions += o.Evictions
	s.Rejected += o.Rejected
	s.SourceReads += o.SourceReads
	s.SourceBytes += o.SourceBytes
	s.SourceErrors += o.SourceErrors
	s.PrefetchHits += o.PrefetchHits
	s.HitRatio = ratio(s.Hits, s.Hits+s.ColdMisses+s.CapacityMisses)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func (ds *datasetState) stats() stats.DatasetCounters {
	ds.statsMu.Lock()
	epochs := append([]*epochCounters(nil), ds.epochs...)
	ds.statsMu.Unlock()
	out := stats.DatasetCounters{
		Dataset:       ds.name,
		Version:       ds.manifest.Version,
		Samples:       ds.len,
		Resident:      ds.resident.Load(),
		Epoch:         ds.current().epoch,
		Total:         stats.Epoch{Epoch: -1},
		SourceLatency: ds.sourceLat.snapshot(),
		DecileReads:   make([]int64, 10),
		DecileHits:    make([]int64, 10),
	}
	for d := range ds.decileReads {
		out.DecileReads[d], out.DecileHits[d] = ds.decileReads[d].Load(), ds.decileHits[d].Load()
	}
	for _, c := range epochs {
		s := c.snapshot()
		out.Epochs = append(out.Epochs, s)
		addEpoch(&out.Total, s)
	}
	return out
}

func (n *Node) sampleHits() int64 {
	var t int64
	for _, ds := range n.ordered {
		t += ds.stats().Total.Hits
	}
	return t
}

func (n *Node) sampleMisses() int64 {
	var t int64
	for _, ds := range n.ordered {
		s := ds.stats().Total
		t += s.ColdMisses + s.CapacityMisses
	}
	return t
}

// latencyBounds are the upper bounds, in seconds, of the source latency
// histogram's buckets; a last bucket counts the rest.
var latencyBounds = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// latencyHistogram counts durations into fixed buckets without locks.
type latencyHistogram struct {
	counts [len(latencyBounds) + 1]atomic.Int64
	sumNs  atomic.Int64
}

func (h *latencyHistogram) observe(seconds float64) {
	i := 0
	for i < len(latencyBounds) && seconds > latencyBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(seconds * 1e9))
}

func (h *latencyHistogram) snapshot() stats.Histogram {
	out := stats.Histogram{Bounds: latencyBounds[:], Counts: make([]int64, len(h.counts)), Sum: float64(h.sumNs.Load()) / 1e9}
	for i := range h.counts {
		out.Counts[i] = h.counts[i].Load()
	}
	return out
}

// tableInfo describes this node's copy of the score table.
func (ds *datasetState) tableInfo() wire.TableInfo { return ds.scores.Info(ds.name) }

// countDecile counts one read (and hit) by the sample's importance decile.
func (ds *datasetState) countDecile(idx int, hit bool) {
	var d [1]int
	ds.scores.Deciles([]int{idx}, d[:])
	ds.decileReads[d[0]].Add(1)
	if hit {
		ds.decileHits[d[0]].Add(1)
	}
}

// countDeciles counts reads (and hits) of samples by importance decile.
// hit reports, per index, whether that read was served from memory.
func (ds *datasetState) countDeciles(idxs []int, hit func(i int) bool) {
	var deciles [64]int
	for start := 0; start < len(idxs); start += len(deciles) {
		part := idxs[start:min(start+len(deciles), len(idxs))]
		ds.scores.Deciles(part, deciles[:])
		for i := range part {
			ds.decileReads[deciles[i]].Add(1)
			if hit(start + i) {
				ds.decileHits[deciles[i]].Add(1)
			}
		}
	}
}
