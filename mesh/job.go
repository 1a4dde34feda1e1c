package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"

	"github.com/shade-mesh/shade/sampling"
)

// job is the training job reading one dataset: its world size, the merged
// importance table, and the epochs' orders. On a single node the node is
// the job's leader.
type job struct {
	ds  *datasetState
	cfg Config

	mu       sync.Mutex
	world    int // 0 until the first SHADE.ORDER
	table    *sampling.Table
	sampler  *sampling.Sampler
	orders   map[int][][]uint32 // published epochs, the last KeepEpochs
	latest   int                // newest published epoch, -1 for none
	done     map[int]map[int]bool
	changed  chan struct{} // closed and replaced on every publication
	rng      *rand.Rand    // breaks ties between equal losses
	reports  int64
	reported int64 // samples reported
}

func newJob(ds *datasetState, cfg Config) *job {
	j := &job{
		ds:      ds,
		cfg:     cfg,
		table:   sampling.NewTable(ds.len, cfg.Alpha),
		rng:     rand.New(rand.NewPCG(cfg.Seed, uint64(ds.ordinal))),
		changed: make(chan struct{}),
	}
	j.resetLocked()
	return j
}

// samplingConfig translates the node's Config, where zero means default,
// into sampling's, where a negative value does.
func (j *job) samplingConfig() sampling.Config {
	c := sampling.Config{Seed: j.cfg.Seed, Lambda: j.cfg.Lambda, PADS: !j.cfg.Uniform}
	switch {
	case j.cfg.UniformFloor == 0:
		c.UniformFloor = -1
	case j.cfg.UniformFloor > 0:
		c.UniformFloor = j.cfg.UniformFloor
	}
	switch {
	case j.cfg.CoverageEpochs == 0:
		c.CoverageEpochs = -1
	case j.cfg.CoverageEpochs > 0:
		c.CoverageEpochs = j.cfg.CoverageEpochs
	}
	return c
}

// resetLocked forgets the job's world and epochs; scores stay.
func (j *job) resetLocked() {
	j.world = 0
	j.sampler = sampling.NewSampler(j.ds.len, j.samplingConfig())
	j.orders = make(map[int][][]uint32)
	j.latest = -1
	j.done = make(map[int]map[int]bool)
	close(j.changed)
	j.changed = make(chan struct{})
}

// publishLocked computes and publishes epoch's order.
func (j *job) publishLocked(epoch int) error {
	order, err := j.sampler.Order(epoch, j.table)
	if err != nil {
		return fmt.Errorf("mesh: order for epoch %d: %w", epoch, err)
	}
	slices, err := sampling.Split(order, j.world)
	if err != nil {
		return fmt.Errorf("mesh: split epoch %d: %w", epoch, err)
	}
	j.orders[epoch] = slices
	j.latest = epoch
	delete(j.orders, epoch-j.cfg.KeepEpochs)
	delete(j.done, epoch-j.cfg.KeepEpochs)
	close(j.changed)
	j.changed = make(chan struct{})
	j.cfg.Logger.Info().Str("dataset", j.ds.name).Int("epoch", epoch).Int("world", j.world).
		Int("scored", j.table.NumScored()).Msg("order published")
	return nil
}

// Order implements transport.Backend: it returns rank's slice of epoch's
// order, waiting until every rank has finished the epoch before.
func (n *Node) Order(ctx context.Context, name string, epoch, rank, world int) ([]uint32, error) {
	ds, err := n.dataset(name)
	if err != nil {
		return nil, err
	}
	if world < 1 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("%w: rank %d of world %d", ErrWorldMismatch, rank, world)
	}
	j := ds.job
	j.mu.Lock()
	if j.world == 0 {
		j.world = world
	}
	if j.world != world {
		w := j.world
		j.mu.Unlock()
		return nil, fmt.Errorf("%w: the job on %s has world %d, asked %d (SHADE.RESET %s starts a new job)",
			ErrWorldMismatch, name, w, world, name)
	}
	if j.latest < 0 && epoch == 0 {
		if err := j.publishLocked(0); err != nil {
			j.mu.Unlock()
			return nil, err
		}
	}
	for {
		if slices, ok := j.orders[epoch]; ok {
			j.mu.Unlock()
			ds.advance(epoch)
			return slices[rank], nil
		}
		if epoch <= j.latest {
			latest := j.latest
			j.mu.Unlock()
			return nil, fmt.Errorf("%w: epoch %d of %s is no longer kept (newest is %d)", ErrEpoch, epoch, name, latest)
		}
		waiting := j.pendingLocked()
		changed := j.changed
		j.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: epoch %d of %s; still waiting for SHADE.DONE of epoch %d from ranks %v",
				ErrOrderTimeout, epoch, name, epoch-1, waiting)
		}
		j.mu.Lock()
	}
}

// pendingLocked lists the ranks that have not finished the newest epoch.
func (j *job) pendingLocked() []int {
	var out []int
	for r := 0; r < j.world; r++ {
		if !j.done[j.latest][r] {
			out = append(out, r)
		}
	}
	return out
}

// Done implements transport.Backend: rank finished epoch. When every rank
// has, the next epoch's order is published.
func (n *Node) Done(name string, epoch, rank int) error {
	ds, err := n.dataset(name)
	if err != nil {
		return err
	}
	j := ds.job
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.world == 0 {
		return fmt.Errorf("%w: no job on %s yet (SHADE.ORDER starts one)", ErrEpoch, name)
	}
	if rank < 0 || rank >= j.world {
		return fmt.Errorf("%w: rank %d of world %d", ErrWorldMismatch, rank, j.world)
	}
	if epoch < j.latest {
		return nil // a late or repeated DONE: the job has moved on
	}
	if epoch > j.latest {
		return fmt.Errorf("%w: SHADE.DONE for epoch %d of %s, whose newest order is epoch %d", ErrEpoch, epoch, name, j.latest)
	}
	if j.done[epoch] == nil {
		j.done[epoch] = make(map[int]bool)
	}
	j.done[epoch][rank] = true
	if len(j.done[epoch]) < j.world {
		return nil
	}
	return j.publishLocked(epoch + 1)
}

// Report implements transport.Backend: one trained minibatch's losses,
// credited to the ids that were trained. The merged scores re-key the
// policy at once.
func (n *Node) Report(name string, epoch int, ids []uint32, losses []float64) error {
	ds, err := n.dataset(name)
	if err != nil {
		return err
	}
	j := ds.job
	j.mu.Lock()
	if err := j.table.Report(ids, losses, j.rng); err != nil {
		j.mu.Unlock()
		return fmt.Errorf("mesh: report for %s epoch %d: %w", name, epoch, err)
	}
	j.reports++
	j.reported += int64(len(ids))
	scores := make([]float64, len(ids))
	for i, id := range ids {
		scores[i] = j.table.Score(id)
	}
	mean := j.table.Mean()
	j.mu.Unlock()

	if n.scorer == nil {
		return nil
	}
	n.polMu.Lock()
	for i, id := range ids {
		n.scorer.SetScore(sampleID(ds, int(id)), scores[i])
	}
	n.scorer.SetDefaultScore(mean)
	n.polMu.Unlock()
	return nil
}

// Reset implements transport.Backend: the dataset's job starts over at
// epoch 0 with any world size; the importance table is kept.
func (n *Node) Reset(name string) error {
	ds, err := n.dataset(name)
	if err != nil {
		return err
	}
	ds.job.mu.Lock()
	ds.job.resetLocked()
	ds.job.mu.Unlock()
	return nil
}

// JobStats is a snapshot of a dataset's job.
type JobStats struct {
	World         int     `json:"world"`
	LatestEpoch   int     `json:"latest_epoch"`
	Reports       int64   `json:"reports"`
	ReportedIDs   int64   `json:"reported_samples"`
	ScoredSamples int     `json:"scored_samples"`
	MeanScore     float64 `json:"mean_score"`
	PendingRanks  []int   `json:"pending_ranks"`
}

func (j *job) stats() JobStats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return JobStats{
		World: j.world, LatestEpoch: j.latest, Reports: j.reports, ReportedIDs: j.reported,
		ScoredSamples: j.table.NumScored(), MeanScore: j.table.Mean(), PendingRanks: j.pendingLocked(),
	}
}

// NodeStats is what SHADE.STATS returns.
type NodeStats struct {
	Node          string         `json:"node"`
	Policy        string         `json:"policy"`
	PADS          bool           `json:"pads"`
	CacheCapacity int64          `json:"cache_capacity"`
	CacheUsed     int64          `json:"cache_used"`
	CacheEntries  int            `json:"cache_entries"`
	FreeKeys      FreeKeyStats   `json:"free_keys"`
	Datasets      []DatasetEntry `json:"datasets"`
}

// FreeKeyStats counts cache-aside use of free-form keys.
type FreeKeyStats struct {
	Hits     int64 `json:"hits"`
	Misses   int64 `json:"misses"`
	Rejected int64 `json:"rejected_admissions"`
}

// DatasetEntry is one dataset in NodeStats.
type DatasetEntry struct {
	DatasetStats
	Job JobStats `json:"job"`
}

// Stats implements transport.Backend: a JSON document of NodeStats, with
// one dataset or all of them.
func (n *Node) Stats(name string) ([]byte, error) {
	sel := n.ordered
	if name != "" {
		ds, err := n.dataset(name)
		if err != nil {
			return nil, err
		}
		sel = []*datasetState{ds}
	}
	st := n.store.Stats()
	out := NodeStats{
		Node: n.cfg.Name, Policy: n.pol.Name(), PADS: !n.cfg.Uniform,
		CacheCapacity: st.Capacity, CacheUsed: st.UsedBytes, CacheEntries: st.Entries,
		FreeKeys: FreeKeyStats{Hits: n.freeHits.Load(), Misses: n.freeMisses.Load(), Rejected: n.freeRejected.Load()},
	}
	for _, ds := range sel {
		out.Datasets = append(out.Datasets, DatasetEntry{DatasetStats: ds.stats(), Job: ds.job.stats()})
	}
	sort.Slice(out.Datasets, func(a, b int) bool { return out.Datasets[a].Dataset < out.Datasets[b].Dataset })
	return json.Marshal(out)
}
