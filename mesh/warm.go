package mesh

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/shade-mesh/shade/mesh/orders"
	"github.com/shade-mesh/shade/mesh/scores"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/policy"
)

// Score tables persist in Config.StateDir as <dataset>.scores for a
// dataset's default job and <dataset>@<job>.scores for a named one, in the
// format of package scores (scores.Magic). A table of another version is
// ignored.
func (n *Node) scoresPath(js *jobState) string {
	if js.name == "" {
		return filepath.Join(n.cfg.StateDir, js.ds.name+".scores")
	}
	return filepath.Join(n.cfg.StateDir, js.ds.name+"@"+js.name+".scores")
}

// loadScores installs a job's saved score table, if there is one of the
// same version.
func (n *Node) loadScores(js *jobState) error {
	ds := js.ds
	ids, sc, mean, ok, err := js.scores.Load(n.scoresPath(js), ds.manifest.Version, ds.len)
	var other *scores.VersionError
	switch {
	case errors.As(err, &other):
		n.cfg.Logger.Warn().Str("dataset", ds.name).Str("saved", other.Saved).Str("now", ds.manifest.Version).
			Msg("saved scores are of another version of the dataset: starting cold")
		return nil
	case err != nil:
		return fmt.Errorf("mesh: saved scores of %s: %w", ds.name, err)
	case !ok:
		return nil
	}
	// The policy judges admissions by these scores from the start.
	n.setScores(js, wire.Merged{IDs: ids, Scores: wire.Narrow(sc)}, mean)
	n.cfg.Logger.Info().Str("dataset", ds.name).Str("job", displayJob(js.name)).Int("scored", len(ids)).Msg("warm start: saved scores loaded")
	return nil
}

// saveScores writes the tables that changed since the last save (see
// scores.Table.Save).
func (n *Node) saveScores() {
	if n.cfg.StateDir == "" {
		return
	}
	for _, js := range n.allJobs() {
		if err := js.scores.Save(n.scoresPath(js), js.ds.manifest.Version); err != nil {
			n.cfg.Logger.Error().Err(err).Str("dataset", js.ds.name).Str("job", displayJob(js.name)).Msg("saving scores")
		}
	}
}

// Warm preloads a dataset into this node's share of the cache, the most
// important samples first (by the sum of the score tables of its jobs),
// until the cache is full or the policy refuses what remains. It returns how many samples it
// loaded. Samples this node does not own are left to their owners.
func (n *Node) Warm(ctx context.Context, name string) (int, error) {
	ds, err := n.dataset(name)
	if err != nil {
		return 0, err
	}
	var scores []float64
	for _, js := range ds.jobList() {
		s := js.scores.All(ds.len)
		if scores == nil {
			scores = s
			continue
		}
		for i := range scores {
			scores[i] += s[i]
		}
	}
	ids := make([]uint32, 0, ds.len)
	for i := 0; i < ds.len; i++ {
		ids = append(ids, uint32(i))
	}
	sort.SliceStable(ids, func(a, b int) bool { return scores[ids[a]] > scores[ids[b]] })
	loaded, refused := 0, 0
	capacity := n.store.Stats().Capacity
	for _, id := range ids {
		if ctx.Err() != nil || refused >= 64 {
			break
		}
		owners := n.owners(ds, id)
		if !contains(owners, n.cfg.Name) {
			continue
		}
		key := []byte(keyOfSample(ds, id))
		if n.store.Has(key) {
			continue
		}
		if _, err := n.readThrough(ctx, ds, int(id), key, owners, true, false); err != nil {
			return loaded, err
		}
		if n.store.Has(key) {
			loaded++
			refused = 0
		} else {
			refused++ // full: the policy keeps what it has
		}
		if n.store.Stats().UsedBytes >= capacity {
			break
		}
	}
	n.cfg.Logger.Info().Str("dataset", name).Int("loaded", loaded).Msg("warmed in importance order")
	return loaded, nil
}

// orderInstalled reacts to a new order of a job: its epoch 0 warms the
// cache if importance is known, a policy that looks ahead (the order
// policy) learns the reads this node will serve in the epoch, and the
// read-ahead starts on the slices of the ranks that train here. Called
// with the order book locked: the work runs in the background.
func (n *Node) orderInstalled(js *jobState, p *wire.PublishMsg) {
	js.touch()
	if p.Epoch == 0 {
		n.warmOnFirstEpoch(js)
	}
	if p.Ahead == 0 && n.readAhead.On() {
		// Published ahead, an order is read only after the current one:
		// its read-ahead starts when a rank asks for it. Following the
		// ranks' slices sorts each (and makes the read-ahead's buffer at
		// the first): not while the book is locked, which the ranks'
		// orders wait for.
		n.goBackground(func(context.Context) { n.readAhead.FollowPublished(js.ds, p) })
	}
	if _, ok := n.pol.(policy.Lookahead); ok && p.Epoch >= 0 {
		n.goBackground(func(context.Context) { n.lookahead(js, p) })
	}
}

// lookahead gives the policy the epoch's reads of samples this node owns,
// in the order they are expected: the ranks read their slices side by
// side, so position k of every slice comes before position k+1 of any.
// Alone on the node, an order published ahead goes behind the reads of
// the current one still to come, and any other replaces them. Beside
// other jobs (of any dataset), whose orders the policy holds too, the
// job's reads are merged with theirs, every job reading at the same pace.
// A job's orders are handed over in epoch order: one older than the
// newest handed over is dropped.
func (n *Node) lookahead(js *jobState, p *wire.PublishMsg) {
	la, _ := n.pol.(policy.Lookahead)
	ds := js.ds
	js.lookMu.Lock()
	defer js.lookMu.Unlock()
	if js.looked != nil && !p.Newer(js.looked) {
		return
	}
	appendTo := p.Ahead > 0 && js.looked != nil && js.looked.Gen == p.Gen && js.looked.Epoch == p.Epoch-1
	start := 0
	if appendTo {
		start = js.lookReads
	}
	js.looked = p
	// A node owns about R/N of a mesh's samples: the reads grow as they
	// are found, not sized for the whole order (10 MB of IDs an epoch at
	// 1.28 M samples, on every node).
	var reads []policy.ID
	orders.Reads(p, n.ownsSample(ds), func(id uint32) { reads = append(reads, sampleID(ds, int(id))) })
	js.lookReads = len(reads)
	var newest []*wire.PublishMsg
	for _, o := range n.allJobs() {
		if o != js {
			newest = append(newest, o.book.Newest())
		}
	}
	others := mergePace(p, appendTo, newest)
	n.lockPolicy()
	defer n.polMu.Unlock()
	la.MergeEpoch(p.Epoch, reads, start, others)
}

// warmOnFirstEpoch preloads a dataset when a job's epoch 0 arrives and the
// node already knows the job's importance (saved scores, or an earlier
// run of the job).
func (n *Node) warmOnFirstEpoch(js *jobState) {
	ds := js.ds
	scored, _ := js.scores.Summary()
	if scored == 0 || n.cfg.NoWarm {
		return
	}
	n.goBackground(func(ctx context.Context) {
		if _, err := n.Warm(ctx, ds.name); err != nil {
			n.cfg.Logger.Warn().Err(err).Str("dataset", ds.name).Msg("warm start")
		}
	})
}

// mergePace is the others of policy.Lookahead.MergeEpoch for a job's order
// p: how many jobs read the policy's order still to come side by side,
// one read per job per step. others holds the newest order of each other
// job on the node (nil for none yet); appendTo says that p goes behind
// the job's own reads of the order before it, still to come.
//   - A job whose orders run ahead holds its current epoch's reads and the
//     next epoch's there, so it reads all along.
//   - A job drawn when due holds only its current epoch. One that reads
//     p's epoch or a later one reads all along (the orders of a dataset's
//     epoch are aligned, sampling.Align); one finishing the epoch before
//     has a short tail left, and is not counted.
//
// With appendTo the job reads its own reads beside theirs, and counts as
// one more; else the merge paces the others as at least one job while any
// has reads there. 0 means no other job has an order: p is appended or
// begun.
func mergePace(p *wire.PublishMsg, appendTo bool, others []*wire.PublishMsg) int {
	n, reading := 0, 0
	for _, q := range others {
		if q == nil || q.Epoch < 0 {
			continue
		}
		n++
		if q.Ahead > 0 || q.TrainingEpoch() >= p.TrainingEpoch() {
			reading++
		}
	}
	if n == 0 {
		return 0
	}
	if appendTo {
		return reading + 1
	}
	return max(1, reading)
}
