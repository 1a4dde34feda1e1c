package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/shade-mesh/shade/mesh/leader"
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

// jobConfig is the leader.Config of a dataset's job on this node: its
// orders are drawn from the node's score table, split preferring the
// samples' owners in a mesh, installed here and broadcast; its timers run
// on the node's background goroutines.
func (n *Node) jobConfig(ds *datasetState) leader.Config {
	cfg := leader.Config{
		Dataset: ds.name, Version: ds.manifest.Version, MaxWorld: n.cfg.MaxWorld, Scores: ds.scores, Term: n.lead.ownTerm,
		Ahead: n.cfg.OrderAhead, JoinWait: n.cfg.Cluster.JoinWait, EpochDeadline: n.cfg.Cluster.EpochDeadline, After: n.after, Logger: n.cfg.Logger,
		NewSampler: func() *sampling.Sampler { return sampling.NewSampler(ds.len, n.cfg.samplingConfig()) },
		Resident:   func() []uint64 { return n.residentWords(ds) },
		Publish: func(p *wire.PublishMsg, scored int) {
			ds.book.Install(p)
			if p.Epoch >= 0 {
				n.cfg.Logger.Info().Str("dataset", ds.name).Int("epoch", p.Epoch).Uint64("term", p.Term).
					Int("world", p.World).Int("scored", scored).Msg("order published")
			}
			n.broadcast(wire.MethodPublish, p)
		},
	}
	if !n.cfg.Cluster.NoLocality && n.cluster != nil {
		cfg.Owners = func(id uint32) []string { return n.owners(ds, id) }
	}
	return cfg
}

// jobToLead returns a dataset's leader state, or errNotLeader on a node
// that does not lead now.
func (n *Node) jobToLead(name string) (*leader.Job, error) {
	ds, err := n.dataset(name)
	if err != nil {
		return nil, err
	}
	if lj := ds.leaderJob(); lj != nil {
		return lj, nil
	}
	return nil, errNotLeader
}

// refused turns a job's refusal into the coded error the asking node gets.
func refused(err error) error {
	switch {
	case errors.Is(err, leader.ErrWorldMismatch):
		return &peer.Error{Code: codeWorldMismatch, Msg: err.Error()}
	case errors.Is(err, leader.ErrBadRequest):
		return &peer.Error{Code: peer.CodeBadRequest, Msg: err.Error()}
	}
	return err
}

// leaderJoin records where a rank trains; epoch 0 is published once every
// rank has joined, or JoinWait after the first did.
func (n *Node) leaderJoin(req *wire.JoinReq) error {
	lj, err := n.jobToLead(req.Dataset)
	if err != nil {
		return err
	}
	behind, err := lj.Join(req.Rank, req.World, req.Node, req.Gen, req.Have)
	if behind && req.Node != n.cfg.Name && n.cluster != nil {
		n.sendNewestOrders(req.Node)
	}
	return refused(err)
}

// leaderDone records that a rank finished an epoch and publishes the next
// once all have (or EpochDeadline after the first did, if set).
func (n *Node) leaderDone(req *wire.DoneReq) error {
	lj, err := n.jobToLead(req.Dataset)
	if err != nil {
		return err
	}
	return refused(lj.Done(req.Gen, req.Epoch, req.Rank, req.Node, req.Resident))
}

// leaderResident records which samples a node without ranks caches.
func (n *Node) leaderResident(req *wire.ResidentReq) error {
	lj, err := n.jobToLead(req.Dataset)
	if err != nil {
		return err
	}
	return refused(lj.NoteResident(req.Gen, req.Node, req.Bits))
}

// leaderReset starts a new job generation for a dataset.
func (n *Node) leaderReset(req *wire.ResetReq) error {
	lj, err := n.jobToLead(req.Dataset)
	if err == nil {
		lj.Reset()
	}
	return err
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
	states := make(leader.States)
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
	maxTerm := states.MaxTerm(n.lead.highest())
	for _, ds := range n.ordered {
		maxTerm = max(maxTerm, ds.headTerm())
	}
	term := maxTerm + 1
	n.lead.lead(term)

	for _, ds := range n.ordered {
		n.adoptBestTable(ctx, ds, states)
	}
	for _, ds := range n.ordered {
		// Adopt the newest order anyone holds.
		if from := states.NewestOrder(ds.book.State(ds.name)); from != "" {
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
		pub := ds.book.Newest()
		lj, err := leader.Rebuild(n.jobConfig(ds), pub, n.cfg.Name, ds.book.State(ds.name), states)
		if err != nil {
			n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Msg("takeover: sampler state refused")
		}
		ds.setLeaderJob(lj)
		if pub != nil {
			n.broadcast(wire.MethodPublish, pub)
		}
		if err := lj.Resume(); err != nil {
			n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Msg("takeover: publishing")
		}
	}
	n.cfg.Logger.Info().Uint64("term", term).Int("peers", len(states)).Msg("leading")
}

// adoptBestTable replaces this node's score table with a peer's copy if
// that copy is better (a later leader's, or knowing more samples), so a
// node that restarts empty and takes over does not lose the cluster's
// importance, nor overwrite the replicas with its empty table.
func (n *Node) adoptBestTable(ctx context.Context, ds *datasetState, states leader.States) {
	own := ds.tableInfo()
	best, from := states.BestTable(ds.name, own)
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
	return leader.Check(p, ds.manifest.Version, ds.len, n.cfg.MaxWorld)
}

// keyOfSample is the store key of a sample.
func keyOfSample(ds *datasetState, id uint32) string {
	return samplekey.Format(ds.name, int(id))
}
