package mesh

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/mesh/counters"
	"github.com/shade-mesh/shade/mesh/leader"
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
	scores   *scores.Table
	book     *orders.Book
	lead     atomic.Pointer[leader.Job]
	ring     atomic.Pointer[ring.Ring] // owners among members serving this version
	reports  atomic.Int64
	reported atomic.Int64

	resident atomic.Int64      // samples of this dataset in the cache
	counters *counters.Dataset // reads by epoch, source latency, deciles
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
		counters: counters.New(m.Len()),
	}
	ds.scores = scores.New(ds.len, cfg.Alpha, ds.samplingConfig(cfg).Score, rand.New(rand.NewPCG(cfg.Seed, uint64(ordinal))))
	ds.book = orders.New(cfg.KeepEpochs)
	return ds, nil
}

func (ds *datasetState) leaderJob() *leader.Job { return ds.lead.Load() }

// setLeaderJob makes lj (nil for none) the dataset's leader state and
// retires the one it replaces, so that its timers publish nothing.
func (ds *datasetState) setLeaderJob(lj *leader.Job) {
	if old := ds.lead.Swap(lj); old != nil && old != lj {
		old.Retire()
	}
}

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

// stats returns the dataset's counters as SHADE.STATS serves them.
func (ds *datasetState) stats() stats.DatasetCounters {
	out := ds.counters.Snapshot()
	out.Dataset, out.Version, out.Samples, out.Resident = ds.name, ds.manifest.Version, ds.len, ds.resident.Load()
	out.Encoding = ds.manifest.Encoding
	return out
}

func (n *Node) sampleHits() int64 {
	var t int64
	for _, ds := range n.ordered {
		t += ds.counters.Total().Hits
	}
	return t
}

func (n *Node) sampleMisses() int64 {
	var t int64
	for _, ds := range n.ordered {
		s := ds.counters.Total()
		t += s.ColdMisses + s.CapacityMisses
	}
	return t
}

// tableInfo describes this node's copy of the score table.
func (ds *datasetState) tableInfo() wire.TableInfo { return ds.scores.Info(ds.name) }

// countDecile counts one read (and hit) by the sample's importance decile.
func (ds *datasetState) countDecile(idx int, hit bool) {
	var d [1]int
	ds.scores.Deciles([]int{idx}, d[:])
	ds.counters.CountDecile(d[0], hit)
}

// countDeciles counts reads (and hits) of samples by importance decile.
// hit reports, per index, whether that read was served from memory.
func (ds *datasetState) countDeciles(idxs []int, hit func(i int) bool) {
	var deciles [64]int
	for start := 0; start < len(idxs); start += len(deciles) {
		part := idxs[start:min(start+len(deciles), len(idxs))]
		ds.scores.Deciles(part, deciles[:])
		for i := range part {
			ds.counters.CountDecile(deciles[i], hit(start+i))
		}
	}
}
