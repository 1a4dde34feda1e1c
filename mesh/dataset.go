package mesh

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/mesh/counters"
	"github.com/shade-mesh/shade/mesh/hedge"
	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/protocol/stats"
)

// datasetState is one served dataset: its source, its jobs and its
// counters.
type datasetState struct {
	name     string
	ordinal  int
	src      Source
	manifest *dataset.Manifest
	len      int

	ring atomic.Pointer[ring.Ring] // owners among members serving this version
	// samples holds the ring partition of every sample, hashed once when
	// the dataset's first ring is built (nil before, and on a standalone
	// node): see ownersView.
	samples atomic.Pointer[ring.Samples]
	// ownedRing is the ring the jobs' scores of the samples this node
	// owns (jobState.owned) were last brought to (followRingScores),
	// under ownedPass.mu.
	ownedPass ringPass
	ownedRing *ring.Ring
	// sentRing is, on the leader, the ring by whose owners it last sent
	// members the scores of their samples (sendRingScores), under
	// sentPass.mu: nil before it leads, and again when it takes over.
	sentPass ringPass
	sentRing *ring.Ring
	// first is the dataset's epoch 0 as its jobs draw it, prepared while
	// this node leads (prepareFirstOrders); nil before and elsewhere.
	first atomic.Pointer[firstOrder]

	// The jobs training on the dataset, by name: def, the default job
	// (""), is always there; named jobs come and go.
	def    *jobState
	jobsMu sync.RWMutex
	jobs   map[string]*jobState
	// retired holds, by job name, the generation of the job's latest
	// retirement (see noteRetired); retiredNames the names in the order
	// they were retired, the oldest forgotten past maxRetired. Guarded by
	// jobsMu.
	retired      map[string]uint64
	retiredNames []string

	resident atomic.Int64 // samples of this dataset in the cache
	// residentBits has bit i%64 of word i/64 set while the cache holds
	// sample i, as the policy has it: set at its admission, cleared when
	// the policy lets it go (admitted and left). Written under the node's
	// polMu, read without it (residentWords).
	residentBits []atomic.Uint64
	counters     *counters.Dataset // reads by epoch, source latency, deciles
	// sourceWait learns how long the source takes to answer, for the
	// hedging of a read through (Node.throughWait).
	sourceWait hedge.Delay
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

		residentBits: make([]atomic.Uint64, (m.Len()+63)/64),
	}
	ds.jobs = make(map[string]*jobState)
	ds.retired = make(map[string]uint64)
	return ds, nil
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

// countDecile counts one read (and hit) by the sample's importance decile
// in the default job's table.
func (ds *datasetState) countDecile(idx int, hit bool) {
	var d [1]int
	ds.def.scores.Deciles([]int{idx}, d[:])
	ds.counters.CountDecile(d[0], hit)
}

// countDeciles counts reads (and hits) of samples by importance decile.
// hit reports, per index, whether that read was served from memory.
func (ds *datasetState) countDeciles(idxs []int, hit func(i int) bool) {
	var deciles [64]int
	for start := 0; start < len(idxs); start += len(deciles) {
		part := idxs[start:min(start+len(deciles), len(idxs))]
		ds.def.scores.Deciles(part, deciles[:])
		for i := range part {
			ds.counters.CountDecile(deciles[i], hit(start+i))
		}
	}
}

// admitted notes that the cache now holds sample idx of ds; left that
// it no longer does. Called with the node's polMu held, where the
// policy's residency changes.
func (ds *datasetState) admitted(idx int) {
	ds.resident.Add(1)
	ds.residentBits[idx/64].Or(1 << (idx % 64))
}

func (ds *datasetState) left(idx int) {
	ds.resident.Add(-1)
	ds.residentBits[idx/64].And(^(1 << (idx % 64)))
}

// residentWords returns a bitmap of the dataset's samples that this
// node caches (bit i%64 of word i/64), a copy of what it keeps as the
// policy admits and lets samples go: no lookup of each sample, and no
// wait for the policy's lock. A sample admitted or let go while it is
// copied may be either.
func (n *Node) residentWords(ds *datasetState) []uint64 {
	words := make([]uint64, len(ds.residentBits))
	for i := range words {
		words[i] = ds.residentBits[i].Load()
	}
	return words
}

// residentSet is residentWords as a wire.DoneReq or wire.ResidentReq
// carries it: the list of the cached samples where shorter than the
// bitmap (a node of a large mesh caches its share, a few thousand of
// millions); the zero set when nothing is cached.
func (n *Node) residentSet(ds *datasetState) wire.ResidentSet {
	if ds.resident.Load() == 0 {
		return wire.ResidentSet{}
	}
	return wire.PackResident(n.residentWords(ds), ds.len)
}
