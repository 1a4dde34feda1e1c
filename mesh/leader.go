package mesh

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/mesh/scores"
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

// errNoLeader is what a request for the leader fails with while the node
// knows of none.
var errNoLeader = &peer.Error{Code: peer.CodeUnavailable, Msg: "mesh: no leader"}

// jobConfig is the leader.Config of a job on this node: its orders are
// drawn from the job's score table with a sampler seeded by the node's
// seed and the job's name (its draws coupled with the dataset's other
// jobs' by one DrawSeed), preferring the samples the mesh caches, split
// preferring the samples' owners in a mesh, installed here and
// broadcast; its timers run on the node's background goroutines.
func (n *Node) jobConfig(js *jobState) leader.Config {
	ds := js.ds
	sc := n.cfg.samplingConfig()
	if js.name != "" {
		sc.Seed ^= xxhash.Sum64String(js.name)
	}
	var table leader.Scores = js.scores
	if !n.cfg.Uniform {
		// Every job of the dataset aligns its orders alike (a uniform
		// permutation keeps DistributedSampler's order), and unless jobs
		// are isolated draws from the dataset's random numbers, so that
		// jobs of similar importance draw many of the same samples.
		seed := n.alignSeed(ds)
		table = alignedScores{Table: js.scores, seed: seed, n: n, js: js}
		if !n.cfg.IsolateJobs {
			sc.DrawSeed = seed | 1 // not 0, which draws from the job's own seed
		}
	}
	cfg := leader.Config{
		Dataset: ds.name, Job: js.name, Gen: ds.retiredGen(js.name), Version: ds.manifest.Version, MaxWorld: n.cfg.MaxWorld, Scores: table, Term: n.lead.ownTerm,
		Ahead: n.cfg.OrderAhead, AheadAt: max(n.cfg.OrderAheadAt, 0), MinDraw: n.cfg.minAheadDraw, JoinWait: n.cfg.Cluster.JoinWait, EpochDeadline: n.cfg.Cluster.EpochDeadline, After: n.after,
		Logger:     n.cfg.Logger.With().Str("job", displayJob(js.name)).Logger(),
		NewSampler: func() *sampling.Sampler { return sampling.NewSampler(ds.len, sc) },
		// Every job of the dataset prefers the samples the mesh caches,
		// and only those: the jobs' draws are coupled (one DrawSeed), so
		// where their importance agrees they draw the same samples only
		// while their draw distributions agree, boost included.
		// Preferring also the samples of another job's order (measured:
		// test/results/many-jobs.md) spread each job's boost over its own
		// set, drew the jobs apart and read more from the source.
		Resident: func() []uint64 { return n.residentWords(ds) },
		Hold:     func(epoch int) time.Duration { return n.syncHold(js, epoch) },
		Publish: func(p *wire.PublishMsg, scored int) {
			js.published.Store(&publishMark{epoch: p.Epoch, at: time.Now()})
			if p.Epoch >= 0 {
				n.cfg.Logger.Info().Str("dataset", ds.name).Str("job", displayJob(js.name)).Int("epoch", p.Epoch).Uint64("term", p.Term).
					Int("world", p.World).Int("scored", scored).Msg("order published")
			}
			done := make(chan struct{})
			before := js.installed.Swap(&done)
			if p.Epoch < 0 { // the empty order of a reset: nothing to read
				n.installOrder(js, p)
				n.releaseHeld(js)
				close(done)
				n.publish(p, nil)
				return
			}
			// This node's ranks read the order once another member
			// holds it (or none could take it): a leader killed before
			// any did takes its order with it, and the order the next
			// leader draws for that epoch is then the only one a rank
			// has read. Orders are installed in the sequence they were
			// published, whatever the sequence of their deliveries.
			n.publish(p, func() {
				if before != nil {
					select {
					case <-*before:
					case <-n.ctx.Done():
						return
					}
				}
				n.installOrder(js, p)
				n.releaseHeld(js)
				close(done)
			})
		},
	}
	if n.locality() {
		cfg.Placement = func() sampling.Placement { return n.placement(ds) }
	}
	return cfg
}

// locality says whether the orders are split by where the samples are
// (leader.Config.Placement): in a mesh, unless turned off.
func (n *Node) locality() bool { return !n.cfg.Cluster.NoLocality && n.cluster != nil }

// alignSeed is the seed every job of ds aligns its orders with.
func (n *Node) alignSeed(ds *datasetState) uint64 { return n.cfg.Seed ^ uint64(ds.ordinal) }

// alignedScores draws a job's orders from its table and aligns them with
// the dataset's seed (sampling.Align): the jobs of a dataset that train
// the same epoch side by side read their common samples at about the same
// time, so that one source read serves them all. A job that begins an
// epoch that another job is already reading starts its aligned order
// where the other is now (see phase), and wraps around.
type alignedScores struct {
	*scores.Table
	seed uint64
	n    *Node
	js   *jobState
}

func (a alignedScores) Draw(s *sampling.Sampler, epoch int, resident []uint64) (sampling.Drawn, int, error) {
	d, _, scored, err := a.draw(s, epoch, resident, nil)
	return d, scored, err
}

// DrawGrouped is Draw, with epoch 0's groups for where taken from the
// dataset's prepared epoch 0 where it has them (leader.GroupedScores).
func (a alignedScores) DrawGrouped(s *sampling.Sampler, epoch int, resident []uint64, where sampling.Placement) (sampling.Drawn, *sampling.Grouped, int, error) {
	return a.draw(s, epoch, resident, &where)
}

func (a alignedScores) draw(s *sampling.Sampler, epoch int, resident []uint64, where *sampling.Placement) (sampling.Drawn, *sampling.Grouped, int, error) {
	phase := 0.0
	if !a.n.cfg.IsolateJobs {
		phase = a.n.phase(a.js, epoch)
	}
	at := func(n int) int { return int(phase * float64(n)) }
	if f := a.js.ds.first.Load(); epoch == 0 && f != nil && len(f.order) == s.Len() {
		// The dataset's epoch 0, aligned already: the sampler only
		// marks it drawn, and no score is read.
		order, g := f.at(at(len(f.order)), where)
		d, err := s.DrawPermutation(epoch, order)
		if err != nil {
			return d, nil, 0, err
		}
		scored, _ := a.Table.Summary()
		a.js.began(epoch, phase)
		return d, g, scored, nil
	}
	// Aligned, the order is a function of which samples it holds: the
	// sampler need not shuffle it first.
	d, scored, err := a.Table.DrawUnordered(s, epoch, resident)
	if err != nil {
		return d, nil, scored, err
	}
	sampling.Align(d.Order, a.seed, epoch)
	rotate(d.Order, at(len(d.Order)))
	a.js.began(epoch, phase)
	return d, nil, scored, nil
}

// rotate rotates order left by k places, for 0 < k < len(order);
// other k leave it as it is.
func rotate(order []uint32, k int) {
	if k > 0 && k < len(order) {
		slices.Reverse(order[:k])
		slices.Reverse(order[k:])
		slices.Reverse(order)
	}
}

// phase is where in epoch's aligned key order the dataset's other jobs
// reading that epoch now, or about to (their orders run ahead), are, as a
// fraction: the share of its order the furthest of them has reported (its
// trainers report each minibatch as they train it) past where its own
// order began. Jobs that have read all of it are not counted. 0 if none
// is.
func (n *Node) phase(js *jobState, epoch int) float64 {
	now := time.Now()
	phase, furthest := 0.0, -1.0
	for _, o := range js.ds.jobList() {
		if o == js || o.idle(now) > activeWithin {
			continue
		}
		p := o.book.Kept(epoch)
		if p == nil {
			continue
		}
		total := p.Len()
		start, done, _, ok := o.progress(epoch)
		if !ok || total == 0 || done >= int64(total) {
			continue // not drawn here, or read already
		}
		// A job that has not begun the epoch yet (its order runs ahead)
		// will begin it at start, and this one with it (awaitStart).
		if read := float64(done) / float64(total); read > furthest {
			furthest, phase = read, math.Mod(start+read, 1)
		}
	}
	return phase
}

// activeWithin is how recently a job must have been heard from (a join,
// done, report or order) to count as training now.
const activeWithin = 15 * time.Second

// jobToLead returns a job's leader state, or errNotLeader on a node that
// does not lead now. With create, a job this node does not know yet is
// started (a trainer of a new job joins, or reports).
func (n *Node) jobToLead(dataset, job string, create bool) (*jobState, *leader.Job, error) {
	ds, err := n.dataset(dataset)
	if err != nil {
		return nil, nil, err
	}
	if !n.lead.leading() {
		return nil, nil, errNotLeader
	}
	js, err := n.job(ds, job, create)
	if err != nil {
		return nil, nil, &peer.Error{Code: peer.CodeNotFound, Msg: err.Error()}
	}
	if lj := js.leaderJob(); lj != nil {
		return js, lj, nil
	}
	// Started while this node took over: lead it from now on.
	lj := leader.New(n.jobConfig(js))
	if !js.lead.CompareAndSwap(nil, lj) {
		lj = js.leaderJob()
	}
	if lj == nil || !n.lead.leading() {
		return nil, nil, errNotLeader
	}
	return js, lj, nil
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
	js, lj, err := n.jobToLead(req.Dataset, req.Job, true)
	if err != nil {
		return err
	}
	js.touch()
	behind, err := lj.Join(req.Rank, req.World, req.Node, req.Gen, req.Have)
	if behind && req.Node != n.cfg.Name && n.cluster != nil {
		n.sendNewestOrders(req.Node)
	}
	return refused(err)
}

// leaderDone records that a rank finished an epoch and publishes the next
// once all have (or EpochDeadline after the first did, if set). Where the
// job's orders run ahead, the answer holds the rank's start of the next
// epoch for the dataset's other jobs (see aheadHold).
func (n *Node) leaderDone(req *wire.DoneReq) (*wire.DoneResp, error) {
	js, lj, err := n.jobToLead(req.Dataset, req.Job, false)
	if err != nil {
		return nil, err
	}
	current := req.Epoch >= lj.Training()
	if current {
		js.touch() // not a done the reconciler repeats: the job goes on
	}
	// Orders that turn ahead with this done: the next was drawn when due,
	// and held for the other jobs (syncHold) if it was to be.
	ahead := lj.Ahead() > 0
	if err := lj.Done(req.Gen, req.Epoch, req.Rank, req.Node, req.ResidentSet()); err != nil {
		return nil, refused(err)
	}
	if !current || !ahead {
		return nil, nil
	}
	return n.aheadHold(js, req.Epoch), nil
}

// serveDone is leaderDone for a peer: the answer, if there is one (a nil
// *wire.DoneResp would be a non-nil answer, sent as an empty one).
func (n *Node) serveDone(_ context.Context, _ string, req *wire.DoneReq) (any, error) {
	resp, err := n.leaderDone(req)
	if resp == nil {
		return nil, err
	}
	return resp, err
}

// serveReportDone is serveDone for a done that carries its node's
// queued reports (MethodReportDone), merged first, as serveReport merges
// them. Once merged they are the node's no longer, so a refused done is
// said in the answer (DoneResp.Refused), and an error answer tells the
// node that nothing was merged.
func (n *Node) serveReportDone(_ context.Context, from string, req *wire.DoneReq) (any, error) {
	if !n.lead.leading() {
		return nil, errNotLeader
	}
	if err := n.leaderReport(req.Reports); err != nil {
		n.cfg.Logger.Warn().Err(err).Str("from", from).Msg("refused part of the reports sent with a done")
	}
	resp, err := n.leaderDone(req)
	if err != nil {
		return &wire.DoneResp{Refused: err.Error()}, nil
	}
	if resp == nil {
		return nil, nil
	}
	return resp, nil
}

// leaderResident records which samples a node without ranks caches.
func (n *Node) leaderResident(req *wire.ResidentReq) error {
	_, lj, err := n.jobToLead(req.Dataset, req.Job, false)
	if err != nil {
		return err
	}
	return refused(lj.NoteResident(req.Gen, req.Node, req.ResidentSet()))
}

// leaderReset starts a new generation of a job; a job the leader does
// not know has nothing to reset.
func (n *Node) leaderReset(req *wire.ResetReq) error {
	ds, err := n.dataset(req.Dataset)
	if err != nil {
		return err
	}
	if n.lead.leading() && ds.lookupJob(canonicalJob(req.Job)) == nil {
		return nil
	}
	js, lj, err := n.jobToLead(req.Dataset, req.Job, false)
	if err == nil {
		js.touch()
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
		js, err := n.job(ds, b.Job, true)
		if err != nil {
			firstErr = errors.Join(firstErr, err)
			continue
		}
		js.touch()
		js.noteReported(b.Epoch, len(b.IDs))
		err = js.scores.Report(b.IDs, wire.Widen(b.Singles()), n.lead.ownTerm())
		if err != nil {
			firstErr = errors.Join(firstErr, fmt.Errorf("mesh: report for %s job %s epoch %d: %w", b.Dataset, displayJob(b.Job), b.Epoch, err))
			continue
		}
		n.queueScores(js, b.IDs)
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
	// Every job some peer knows is led from now on.
	for _, st := range states {
		for _, j := range st.Jobs {
			ds, err := n.dataset(j.Dataset)
			if err != nil {
				continue
			}
			if _, err := n.job(ds, j.Job, true); err != nil {
				n.cfg.Logger.Warn().Err(err).Str("dataset", j.Dataset).Str("job", displayJob(j.Job)).Msg("takeover: job not taken over")
			}
		}
	}
	jobs := n.allJobs()
	maxTerm := states.MaxTerm(n.lead.highest())
	for _, js := range jobs {
		maxTerm = max(maxTerm, js.headTerm())
	}
	term := maxTerm + 1
	n.lead.lead(term)

	for _, js := range jobs {
		n.adoptBestTable(ctx, js, states)
	}
	for _, js := range jobs {
		ds := js.ds
		// Adopt the newest order anyone holds.
		if from := states.NewestOrder(js.state()); from != "" {
			var pub wire.PublishMsg
			err := n.getParts(ctx, from, wire.GetPartReq{Order: &wire.GetOrderReq{Dataset: ds.name, Job: js.name}}, &pub, n.cfg.Cluster.FetchTimeout)
			if err == nil && n.checkPublish(&pub) == nil && pub.Job == js.name {
				js.book.Install(&pub)
			} else {
				n.cfg.Logger.Warn().Err(err).Str("peer", from).Str("dataset", ds.name).Str("job", displayJob(js.name)).Msg("takeover: newer order not fetched")
			}
		}
		js.touch() // its trainers get JobIdle from now to show up
		pub := js.book.Newest()
		lj, err := leader.Rebuild(n.jobConfig(js), pub, n.cfg.Name, js.state(), states)
		if err != nil {
			n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Str("job", displayJob(js.name)).Msg("takeover: sampler state refused")
		}
		n.lead.turn.Lock()
		yielding := n.lead.yieldingTo(time.Now())
		if yielding == "" {
			js.setLeaderJob(lj)
		}
		n.lead.turn.Unlock()
		if yielding != "" {
			// A member of a lower name took over meanwhile; a yield
			// after this point retires the jobs installed before it.
			n.cfg.Logger.Info().Str("to", yielding).Msg("takeover given up")
			return
		}
		if pub != nil {
			n.publish(pub, nil) // installed here already
		}
		if err := lj.Resume(); err != nil {
			n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Str("job", displayJob(js.name)).Msg("takeover: publishing")
		}
	}
	n.cfg.Logger.Info().Uint64("term", term).Int("peers", len(states)).Msg("leading")
}

// giveWay stops this node, which leads or takes over in its own view,
// from publishing, because from, a member of a lower name, asks for its
// state to take over: every membership elects from once gossip brings
// it, and until this node's does, two leaders would each publish their
// own order of the same epoch. Every job's leader is retired, and a
// takeover running here stops (see takeover); the orders published
// before are installed here before it returns (each once another member
// holds it, or none could take it; waited for FetchTimeout/2 at most), so
// that the answer names them and the new leader adopts them, as ranks
// may read them already. The yield ends once this node's membership shows
// from (which then leads here too), or ClusterConfig.YieldWait from now:
// a member that died at once is not waited for longer, and the membership
// is read again then.
func (n *Node) giveWay(ctx context.Context, from string) {
	wait := n.cluster.cfg.YieldWait
	n.lead.turn.Lock()
	n.lead.yieldTo(from, time.Now().Add(wait))
	n.stepDown()
	n.lead.turn.Unlock()
	n.cfg.Logger.Info().Str("to", from).Msg("giving way to a member taking over")
	n.after(wait, n.recheckMembers)

	deadline := time.NewTimer(n.cluster.cfg.FetchTimeout / 2)
	defer deadline.Stop()
	for _, js := range n.allJobs() {
		installed := js.installed.Load()
		if installed == nil {
			continue
		}
		select {
		case <-*installed:
		case <-deadline.C:
			n.cfg.Logger.Warn().Str("to", from).Msg("giving way: an order published here is not held yet")
			return
		case <-ctx.Done():
			return
		}
	}
}

// adoptBestTable replaces this node's score table of a job with a peer's
// copy if that copy is better (a later leader's, or knowing more
// samples), so a node that restarts empty and takes over does not lose
// the cluster's importance, nor overwrite the replicas with its empty
// table.
func (n *Node) adoptBestTable(ctx context.Context, js *jobState, states leader.States) {
	ds := js.ds
	own := js.tableInfo()
	best, from := states.BestTable(own)
	if from == "" {
		return
	}
	var resp wire.ReplicateReq
	if err := n.getParts(ctx, from, wire.GetPartReq{Table: &wire.GetTableReq{Dataset: ds.name, Job: js.name}}, &resp, 2*n.cfg.Cluster.FetchTimeout); err != nil {
		n.cfg.Logger.Warn().Err(err).Str("peer", from).Str("dataset", ds.name).Msg("takeover: better score table not fetched")
		return
	}
	if resp.Version != ds.manifest.Version || resp.Job != js.name {
		return
	}
	err := js.scores.Adopt(resp.Table, resp.Term)
	if err != nil {
		n.cfg.Logger.Warn().Err(err).Str("peer", from).Msg("takeover: score table refused")
		return
	}
	n.cfg.Logger.Info().Str("dataset", ds.name).Str("job", displayJob(js.name)).Str("from", from).Int("scored", best.Scored).Int("had", own.Scored).
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
