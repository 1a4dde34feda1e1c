package mesh

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/sampling"
	"github.com/shade-mesh/shade/transport/peer"
)

// codeWorldMismatch is the mesh's own wire code for a rank that asks for a
// world size other than its job's.
const codeWorldMismatch peer.Code = 100

func isWorldMismatch(err error) bool {
	return errors.Is(err, ErrWorldMismatch) || peer.CodeOf(err) == codeWorldMismatch
}

// errNotLeader answers requests meant for the leader on any other node.
var errNotLeader = &peer.Error{Code: peer.CodeNotLeader, Msg: "mesh: not the leader"}

// leaderJob is the leader's state of one dataset's job: who trains, which
// ranks finished the newest epoch, and the sampler that draws the next.
// Only the leader has one; a new leader rebuilds it from the newest order
// (which carries the sampler's state) and from what the peers report.
type leaderJob struct {
	mu        sync.Mutex
	gen       uint64
	world     int      // 0 until a rank joins
	latest    int      // newest published epoch, -1 for none
	ranks     []string // rank -> node, "" until known
	done      map[int]bool
	sampler   *sampling.Sampler
	firstJoin time.Time
	firstDone time.Time
}

func (lj *leaderJob) pendingLocked() []int {
	var out []int
	for r := 0; r < lj.world; r++ {
		if !lj.done[r] {
			out = append(out, r)
		}
	}
	return out
}

func (lj *leaderJob) missingRanksLocked() []int {
	var out []int
	for r, node := range lj.ranks {
		if node == "" {
			out = append(out, r)
		}
	}
	return out
}

func (n *Node) newLeaderJob(ds *datasetState) *leaderJob {
	return &leaderJob{latest: -1, done: make(map[int]bool), sampler: sampling.NewSampler(ds.len, ds.samplingConfig(n.cfg))}
}

// jobToLead returns a dataset and its leader state, or errNotLeader on a
// node that does not lead now.
func (n *Node) jobToLead(name string) (*datasetState, *leaderJob, error) {
	ds, err := n.dataset(name)
	if err != nil {
		return nil, nil, err
	}
	lj := ds.leaderJob()
	if lj == nil {
		return nil, nil, errNotLeader
	}
	return ds, lj, nil
}

// leaderJoin records where a rank trains; epoch 0 is published once every
// rank has joined, or JoinWait after the first did.
func (n *Node) leaderJoin(req *wire.JoinReq) error {
	ds, lj, err := n.jobToLead(req.Dataset)
	if err != nil {
		return err
	}
	lj.mu.Lock()
	defer lj.mu.Unlock()
	if req.World < 1 || req.Rank < 0 || req.Rank >= req.World || req.World > n.cfg.MaxWorld {
		return &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("rank %d of world %d (at most %d ranks)", req.Rank, req.World, n.cfg.MaxWorld)}
	}
	if lj.world == 0 {
		lj.world = req.World
		lj.ranks = make([]string, req.World)
	}
	if lj.world != req.World {
		return &peer.Error{Code: codeWorldMismatch, Msg: fmt.Sprintf(
			"the job on %s has world %d, asked %d (SHADE.RESET %s starts a new job)", req.Dataset, lj.world, req.World, req.Dataset)}
	}
	lj.ranks[req.Rank] = req.Node
	if lj.latest >= 0 {
		// The rank's node asks because it lacks an order: it may have
		// missed the publication (a restart, a partition). Send it again.
		if req.Node != n.cfg.Name && n.cluster != nil && (req.Gen != lj.gen || req.Have < lj.latest) {
			n.sendNewestOrders(req.Node)
		}
		return nil
	}
	if len(lj.missingRanksLocked()) == 0 {
		return n.publishLocked(ds, lj, 0)
	}
	if lj.firstJoin.IsZero() {
		lj.firstJoin = time.Now()
		n.after(n.cfg.Cluster.JoinWait, func() { n.publishFirst(ds, lj) })
	}
	return nil
}

// publishFirst publishes epoch 0 when the join wait is over, for the ranks
// that joined so far.
func (n *Node) publishFirst(ds *datasetState, lj *leaderJob) {
	lj.mu.Lock()
	defer lj.mu.Unlock()
	if ds.leaderJob() != lj || lj.latest >= 0 || lj.world == 0 {
		return
	}
	if err := n.publishLocked(ds, lj, 0); err != nil {
		n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Msg("publishing epoch 0")
	}
}

// leaderDone records that a rank finished an epoch and publishes the next
// once all have (or EpochDeadline after the first did, if set).
func (n *Node) leaderDone(req *wire.DoneReq) error {
	ds, lj, err := n.jobToLead(req.Dataset)
	if err != nil {
		return err
	}
	lj.mu.Lock()
	defer lj.mu.Unlock()
	if req.Gen != lj.gen || req.Epoch < lj.latest {
		return nil // an old job or epoch: nothing to do
	}
	if req.Epoch > lj.latest || req.Rank < 0 || req.Rank >= lj.world {
		return &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("done for epoch %d rank %d; newest epoch is %d of world %d",
			req.Epoch, req.Rank, lj.latest, lj.world)}
	}
	lj.done[req.Rank] = true
	if lj.ranks[req.Rank] == "" {
		lj.ranks[req.Rank] = req.Node
	}
	if len(lj.done) == lj.world {
		return n.publishLocked(ds, lj, lj.latest+1)
	}
	if d := n.cfg.Cluster.EpochDeadline; d > 0 && lj.firstDone.IsZero() {
		lj.firstDone = time.Now()
		epoch := lj.latest
		n.after(d, func() {
			lj.mu.Lock()
			defer lj.mu.Unlock()
			if ds.leaderJob() == lj && lj.latest == epoch {
				n.cfg.Logger.Warn().Str("dataset", ds.name).Int("epoch", epoch).Ints("pending", lj.pendingLocked()).
					Msg("epoch deadline passed: publishing the next order without the pending ranks")
				if err := n.publishLocked(ds, lj, epoch+1); err != nil {
					n.cfg.Logger.Error().Err(err).Msg("publishing after the deadline")
				}
			}
		})
	}
	return nil
}

// publishLocked draws epoch's order, splits it among the ranks preferring
// each sample's owners, installs it here and sends it to every peer.
func (n *Node) publishLocked(ds *datasetState, lj *leaderJob, epoch int) error {
	order, scored, err := ds.scores.Order(lj.sampler, epoch)
	if err != nil {
		return fmt.Errorf("mesh: order for epoch %d of %s: %w", epoch, ds.name, err)
	}
	state, err := lj.sampler.MarshalBinary()
	if err != nil {
		return fmt.Errorf("mesh: sampler state: %w", err)
	}
	var slices [][]uint32
	if n.cfg.Cluster.NoLocality || n.cluster == nil {
		slices, err = sampling.Split(order, lj.world)
	} else {
		slices, err = sampling.LocalitySplit(order, lj.world, lj.ranks, func(id uint32) []string { return n.owners(ds, id) })
	}
	if err != nil {
		return fmt.Errorf("mesh: split epoch %d of %s: %w", epoch, ds.name, err)
	}
	pub := &wire.PublishMsg{
		Dataset: ds.name, Version: ds.manifest.Version, Gen: lj.gen, Epoch: epoch, Term: n.lead.ownTerm(),
		World: lj.world, Slices: slices, Sampler: state, Ranks: append([]string(nil), lj.ranks...),
	}
	lj.latest = epoch
	lj.done = make(map[int]bool)
	lj.firstDone = time.Time{}
	ds.book.Install(pub)
	n.cfg.Logger.Info().Str("dataset", ds.name).Int("epoch", epoch).Uint64("term", pub.Term).
		Int("world", lj.world).Int("scored", scored).Msg("order published")
	n.broadcast(wire.MethodPublish, pub)
	return nil
}

// leaderReset starts a new job generation for a dataset.
func (n *Node) leaderReset(req *wire.ResetReq) error {
	ds, lj, err := n.jobToLead(req.Dataset)
	if err != nil {
		return err
	}
	lj.mu.Lock()
	defer lj.mu.Unlock()
	gen := lj.gen + 1
	lj.gen, lj.world, lj.latest, lj.ranks = gen, 0, -1, nil
	lj.done = make(map[int]bool)
	lj.sampler = sampling.NewSampler(ds.len, ds.samplingConfig(n.cfg))
	lj.firstJoin, lj.firstDone = time.Time{}, time.Time{}
	// An empty order of the new generation tells every peer the old job
	// is over.
	pub := &wire.PublishMsg{Dataset: ds.name, Version: ds.manifest.Version, Gen: gen, Epoch: -1, Term: n.lead.ownTerm()}
	ds.book.Install(pub)
	n.broadcast(wire.MethodPublish, pub)
	return nil
}

// leaderReport merges minibatch losses into the cluster-wide table and
// queues the new scores for the samples' owners.
func (n *Node) leaderReport(batches []wire.ReportBatch) error {
	var firstErr error
	for _, b := range batches {
		ds, err := n.dataset(b.Dataset)
		if err != nil {
			firstErr = errors.Join(firstErr, err)
			continue
		}
		err = ds.scores.Report(b.IDs, b.Losses, n.lead.ownTerm())
		if err != nil {
			firstErr = errors.Join(firstErr, fmt.Errorf("mesh: report for %s epoch %d: %w", b.Dataset, b.Epoch, err))
			continue
		}
		n.queueScores(ds, b.IDs)
	}
	return firstErr
}

// takeover makes this node the leader: it learns what every peer knows,
// adopts the newest order any of them holds, rebuilds each job and
// re-publishes, so that no epoch is lost or published twice.
func (n *Node) takeover(ctx context.Context) {
	members := n.cluster.alive()
	states := make(map[string]*wire.StateResp)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range members {
		if m.name == n.cfg.Name {
			continue
		}
		wg.Add(1)
		go func(m peerInfo) {
			defer wg.Done()
			var resp wire.StateResp
			cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
			defer cancel()
			if err := n.cluster.call(cctx, m, wire.MethodState, &wire.StateReq{Term: n.lead.highest()}, &resp); err != nil {
				n.cfg.Logger.Warn().Err(err).Str("peer", m.name).Msg("takeover: peer state unknown")
				return
			}
			mu.Lock()
			states[m.name] = &resp
			mu.Unlock()
		}(m)
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	maxTerm := n.lead.highest()
	for _, s := range states {
		maxTerm = max(maxTerm, s.MaxTerm)
	}
	for _, ds := range n.ordered {
		maxTerm = max(maxTerm, ds.headTerm())
	}
	term := maxTerm + 1
	n.lead.lead(term)

	names := make([]string, 0, len(states))
	for name := range states {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, ds := range n.ordered {
		n.adoptBestTable(ctx, ds, names, states)
	}
	for _, ds := range n.ordered {
		// Adopt the newest order anyone holds.
		gen, epoch, t := ds.book.Head()
		var from string
		for _, name := range names {
			for _, js := range states[name].Jobs {
				if js.Dataset != ds.name {
					continue
				}
				cand := &wire.PublishMsg{Gen: js.Gen, Epoch: js.Epoch, Term: js.Term}
				if cand.Newer(&wire.PublishMsg{Gen: gen, Epoch: epoch, Term: t}) {
					gen, epoch, t, from = js.Gen, js.Epoch, js.Term, name
				}
			}
		}
		if from != "" {
			var pub wire.PublishMsg
			cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
			err := n.cluster.callName(cctx, from, wire.MethodGetOrder, &wire.GetOrderReq{Dataset: ds.name}, &pub)
			cancel()
			if err == nil && n.checkPublish(&pub) == nil {
				ds.book.Install(&pub)
			} else {
				n.cfg.Logger.Warn().Err(err).Str("peer", from).Str("dataset", ds.name).Msg("takeover: newer order not fetched")
			}
		}
		lj := n.newLeaderJob(ds)
		pub := ds.book.Newest()
		if pub != nil {
			lj.gen, lj.world, lj.latest = pub.Gen, pub.World, pub.Epoch
			lj.ranks = make([]string, pub.World)
			copy(lj.ranks, pub.Ranks)
			if pub.Epoch >= 0 {
				if err := lj.sampler.UnmarshalBinary(pub.Sampler); err != nil {
					n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Msg("takeover: sampler state refused")
				}
			}
		}
		merge := func(node string, js wire.JobState) {
			if js.Gen != lj.gen || js.Epoch != lj.latest {
				return
			}
			for _, rw := range js.Ranks {
				if rw.World < 1 || rw.World > n.cfg.MaxWorld {
					continue
				}
				if lj.world == 0 {
					lj.world, lj.ranks = rw.World, make([]string, rw.World)
				}
				if rw.World == lj.world && rw.Rank < lj.world {
					lj.ranks[rw.Rank] = node
				}
			}
			if lj.latest >= 0 {
				for _, r := range js.Done {
					if r >= 0 && r < lj.world {
						lj.done[r] = true
					}
				}
			}
		}
		merge(n.cfg.Name, ds.book.State(ds.name))
		for _, name := range names {
			for _, js := range states[name].Jobs {
				if js.Dataset == ds.name {
					merge(name, js)
				}
			}
		}
		lj.mu.Lock()
		ds.setLeaderJob(lj)
		if pub != nil {
			n.broadcast(wire.MethodPublish, pub)
		}
		switch {
		case lj.world > 0 && lj.latest >= 0 && len(lj.done) == lj.world:
			_ = n.publishLocked(ds, lj, lj.latest+1)
		case lj.world > 0 && lj.latest < 0:
			if len(lj.missingRanksLocked()) == 0 {
				_ = n.publishLocked(ds, lj, 0)
			} else {
				lj.firstJoin = time.Now()
				n.after(n.cfg.Cluster.JoinWait, func() { n.publishFirst(ds, lj) })
			}
		}
		lj.mu.Unlock()
	}
	n.cfg.Logger.Info().Uint64("term", term).Int("peers", len(states)).Msg("leading")
}

// adoptBestTable replaces this node's score table with a peer's copy if
// that copy is better (a later leader's, or knowing more samples), so a
// node that restarts empty and takes over does not lose the cluster's
// importance, nor overwrite the replicas with its empty table.
func (n *Node) adoptBestTable(ctx context.Context, ds *datasetState, names []string, states map[string]*wire.StateResp) {
	own := ds.tableInfo()
	best, from := own, ""
	for _, name := range names {
		for _, ti := range states[name].Tables {
			if ti.Dataset == ds.name && ti.Better(best) {
				best, from = ti, name
			}
		}
	}
	if from == "" {
		return
	}
	var resp wire.ReplicateReq
	cctx, cancel := context.WithTimeout(ctx, 2*n.cfg.Cluster.FetchTimeout)
	defer cancel()
	if err := n.cluster.callName(cctx, from, wire.MethodGetTable, &wire.GetTableReq{Dataset: ds.name}, &resp); err != nil {
		n.cfg.Logger.Warn().Err(err).Str("peer", from).Str("dataset", ds.name).Msg("takeover: better score table not fetched")
		return
	}
	if resp.Version != ds.manifest.Version {
		return
	}
	err := ds.scores.Adopt(resp.Table, resp.Term)
	if err != nil {
		n.cfg.Logger.Warn().Err(err).Str("peer", from).Msg("takeover: score table refused")
		return
	}
	n.cfg.Logger.Info().Str("dataset", ds.name).Str("from", from).Int("scored", best.Scored).Int("had", own.Scored).
		Msg("takeover: adopted the best score table")
}

// checkPublish validates an order received from a peer before it is used.
func (n *Node) checkPublish(p *wire.PublishMsg) error {
	ds, err := n.dataset(p.Dataset)
	if err != nil {
		return err
	}
	if p.Version != ds.manifest.Version {
		return fmt.Errorf("mesh: order for %s version %s; this node has version %s", p.Dataset, p.Version, ds.manifest.Version)
	}
	if p.Epoch < 0 {
		return nil
	}
	if p.World < 1 || p.World > n.cfg.MaxWorld || len(p.Slices) != p.World || len(p.Ranks) > p.World {
		return fmt.Errorf("mesh: order for %s epoch %d has %d slices for world %d", p.Dataset, p.Epoch, len(p.Slices), p.World)
	}
	for r, s := range p.Slices {
		if len(s) != len(p.Slices[0]) {
			return fmt.Errorf("mesh: order for %s epoch %d: slice %d has %d ids, slice 0 %d", p.Dataset, p.Epoch, r, len(s), len(p.Slices[0]))
		}
		for _, id := range s {
			if int(id) >= ds.len {
				return fmt.Errorf("mesh: order for %s epoch %d: id %d out of range", p.Dataset, p.Epoch, id)
			}
		}
	}
	return nil
}

// keyOfSample is the store key of a sample.
func keyOfSample(ds *datasetState, id uint32) string {
	return samplekey.Format(ds.name, int(id))
}
