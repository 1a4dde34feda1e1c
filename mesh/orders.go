package mesh

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/shade-mesh/shade/mesh/orders"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// Order implements transport.Backend: rank's slice of epoch's order of a
// job of a dataset ("" or DefaultJob: its default job) and the importance
// weight of each id in it (nil when all are 1). It announces the rank to
// the leader and waits until the order is published: epoch 0 once every
// rank has announced itself (or the join wait passed), epoch e+1 once
// every rank has finished e. Where orders run ahead, the order is held
// already, and a rank may wait for the dataset's other jobs to begin the
// epoch too (see awaitStart). A job the node does not know yet is started.
func (n *Node) Order(ctx context.Context, name, job string, epoch, rank, world int) ([]uint32, []float32, error) {
	ds, err := n.dataset(name)
	if err != nil {
		return nil, nil, err
	}
	if world < 1 || rank < 0 || rank >= world {
		return nil, nil, fmt.Errorf("%w: rank %d of world %d", ErrWorldMismatch, rank, world)
	}
	if world > n.cfg.MaxWorld {
		return nil, nil, fmt.Errorf("%w: world %d is over the limit of %d ranks", ErrWorldMismatch, world, n.cfg.MaxWorld)
	}
	js, err := n.job(ds, job, true)
	if err != nil {
		return nil, nil, err
	}
	js.touch()
	var joined string   // the leader this rank announced itself to
	asked := time.Now() // when the leader was last asked for the epoch
	for {
		if ds.lookupJob(js.name) != js {
			return nil, nil, fmt.Errorf("%w: job %s of %s was retired", ErrEpoch, displayJob(js.name), name)
		}
		a := js.book.Ask(epoch, rank, world)
		switch {
		case a.World != 0:
			return nil, nil, fmt.Errorf("%w: job %s of %s has world %d, asked %d (SHADE.RESET %s starts it over)",
				ErrWorldMismatch, displayJob(js.name), name, a.World, world, name)
		case a.Order != nil && !a.Order.HasSlice(rank):
			// This node holds its part of the order, without the rank's
			// slice: the rank came here after the order was drawn, or its
			// node was not known then. The whole is asked of the leader.
			if n.fetchExact(js, epoch, false); hasSlice(js.book.Kept(epoch), rank) {
				continue
			}
			select {
			case <-a.Changed:
			case <-time.After(n.cfg.Cluster.RetryEvery):
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("%w: epoch %d of %s job %s: this peer holds its part of the order, without rank %d's slice, and the leader did not send the whole", ErrOrderTimeout, epoch, name, displayJob(js.name), rank)
			}
			continue
		case a.Order != nil:
			if err := n.awaitStart(ctx, js, a.Order); err != nil {
				return nil, nil, err
			}
			ds.counters.Advance(epoch)
			n.prefetchSlice(ds, a.Order, rank)
			return a.Order.Slices[rank], a.Order.Weight(rank), nil
		case a.Gone && publishedAhead(js, epoch):
			// Published ahead with the order after it, it has not reached
			// this node yet, or was lost on the way: it is asked of the
			// leader (which may not have installed it yet either) until it
			// comes.
			if n.fetchExact(js, epoch, false); js.book.Kept(epoch) != nil {
				continue
			}
			select {
			case <-a.Changed:
			case <-time.After(n.cfg.Cluster.RetryEvery):
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("%w: epoch %d of %s job %s, published ahead, has not reached this peer", ErrOrderTimeout, epoch, name, displayJob(js.name))
			}
			continue
		case a.Gone:
			return nil, nil, fmt.Errorf("%w: epoch %d of %s job %s is no longer kept (newest is %d)", ErrEpoch, epoch, name, displayJob(js.name), a.Have)
		}
		gen, have, impliedDone, ahead, changed := a.Gen, a.Have, a.ImpliedDone, a.Ahead, a.Changed

		retry := time.After(n.cfg.Cluster.RetryEvery)
		leader := n.lead.leader()
		if impliedDone && js.doneReached(rank, gen, have, leader) {
			// Its SHADE.DONE of the newest epoch reached this leader:
			// the leader counted it and knows the rank's node, and would
			// learn nothing from a join or the done again.
			joined = leader
		}
		if leader != "" && leader != joined {
			err := n.toLeader(ctx, wire.MethodJoin, &wire.JoinReq{Dataset: name, Job: js.name, Rank: rank, World: world, Node: n.cfg.Name, Gen: gen, Have: have})
			if err == nil && impliedDone {
				// With orders ahead the rank has also finished the epoch
				// before: its done may have been lost with a leader. The
				// node's queued reports go with the first (reportDone).
				term := n.lead.highest()
				for e := max(0, have-ahead); e <= have && err == nil; e++ {
					if _, err = n.reportDone(ctx, n.doneReq(js, gen, e, rank), nil); err == nil {
						js.noteDoneReached(rank, gen, e, leader, term)
					}
				}
			}
			switch {
			case err == nil:
				joined = leader
			case isWorldMismatch(err):
				return nil, nil, fmt.Errorf("%w: %v", ErrWorldMismatch, err)
			}
		}
		select {
		case <-changed:
		case <-retry:
			if time.Since(asked) >= n.cfg.Cluster.FetchTimeout {
				// An order that did not reach this node (a relay that
				// died passing it on, say) is asked of the leader, once
				// it has had the time to come (settled).
				asked = time.Now()
				n.fetchExact(js, epoch, true)
			}
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w: epoch %d of %s job %s; %s", ErrOrderTimeout, epoch, name, displayJob(js.name), n.waitingFor(js))
		}
	}
}

// waitingFor explains, for a timeout, what an order is waiting on.
func (n *Node) waitingFor(js *jobState) string {
	if n.lead.leader() == "" {
		return "no leader: this peer does not see a majority of the mesh"
	}
	if lj := js.leaderJob(); lj != nil {
		st := lj.Status()
		if st.Latest < 0 {
			return fmt.Sprintf("waiting for ranks %v to ask for epoch 0", st.Missing)
		}
		return fmt.Sprintf("still waiting for SHADE.DONE of epoch %d from ranks %v", st.Training, st.Pending)
	}
	return fmt.Sprintf("waiting for leader %s to publish it", n.lead.leader())
}

// Done implements transport.Backend: rank finished epoch of a job. The
// node remembers it (and repeats it to a new leader) and tells the
// leader, waiting at most Cluster.FetchTimeout and no longer than ctx
// allows; a send that fails is repeated by the reconciler and not
// reported. Where the job's orders run ahead, the leader's answer may
// hold the rank's order of the next epoch for the dataset's other jobs
// (see awaitStart).
func (n *Node) Done(ctx context.Context, name, job string, epoch, rank int) error {
	ds, err := n.dataset(name)
	if err != nil {
		return err
	}
	js, err := n.job(ds, job, true)
	if err != nil {
		return err
	}
	js.touch()
	if gen, have, _ := js.book.Head(); have < epoch {
		// A peer that just restarted may not hold the order yet: ask the
		// leader for its newest before refusing.
		n.catchUp(js, gen, have)
	}
	p, res := js.book.MarkDone(epoch, rank)
	if (res == orders.NoOrder || res == orders.Ahead) && n.cluster != nil {
		p, res = n.awaitOrder(ctx, js, epoch, rank)
	}
	switch res {
	case orders.NoOrder:
		return fmt.Errorf("%w: no order of %s yet (SHADE.ORDER starts a job)", ErrEpoch, name)
	case orders.BadRank:
		return fmt.Errorf("%w: rank %d of world %d", ErrWorldMismatch, rank, p.World)
	case orders.Ahead:
		return fmt.Errorf("%w: SHADE.DONE for epoch %d of %s, whose newest order is epoch %d", ErrEpoch, epoch, name, p.Epoch)
	case orders.Late:
		return nil // late or repeated: the job has moved on
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
	defer cancel()
	// The node's queued reports go with the done, or first (reportDone).
	// A failed send is repeated by the reconciler; the trainer goes on.
	var resp wire.DoneResp
	term := n.lead.highest()
	if leader, err := n.reportDone(ctx, n.doneReq(js, p.Gen, epoch, rank), &resp); err == nil {
		js.noteDoneReached(rank, p.Gen, epoch, leader, term)
		js.holdStart(p.Gen, epoch, &resp)
	}
	return nil
}

// awaitOrder waits, up to Cluster.FetchTimeout, until the book holds the
// order of epoch, and then records rank's done of it. A rank's done comes
// after its order, but the node it reaches may not hold that order yet:
// one just restarted gets it from the leader, and one taking over as
// leader (the lowest name, back from a crash) adopts it from the members.
// It returns what MarkDone last said.
func (n *Node) awaitOrder(ctx context.Context, js *jobState, epoch, rank int) (*wire.PublishMsg, orders.DoneResult) {
	wait := time.NewTimer(n.cfg.Cluster.FetchTimeout)
	defer wait.Stop()
	for {
		changed := js.book.Changes()
		p, res := js.book.MarkDone(epoch, rank)
		if res != orders.NoOrder && res != orders.Ahead {
			return p, res
		}
		select {
		case <-changed:
		case <-wait.C:
			return p, res
		case <-ctx.Done():
			return p, res
		}
	}
}

// doneReq tells the leader that rank finished epoch of generation gen of
// a job, with the samples this node caches for cache-aware draws.
func (n *Node) doneReq(js *jobState, gen uint64, epoch, rank int) *wire.DoneReq {
	req := &wire.DoneReq{Dataset: js.ds.name, Job: js.name, Gen: gen, Epoch: epoch, Rank: rank, Node: n.cfg.Name}
	if n.cfg.Boost > 0 && !n.lead.leading() {
		set := n.residentSet(js.ds) // the leader reads its own cache itself
		req.Resident, req.Sparse = set.Bits, set.Sparse
	}
	return req
}

// Report implements transport.Backend: one trained minibatch's losses of
// a job, credited to the ids that were trained. Bad input is refused
// here; good input goes to the leader, which merges it into the job's
// cluster-wide table.
func (n *Node) Report(name, job string, epoch int, ids []uint32, losses []float64) error {
	ds, err := n.dataset(name)
	if err != nil {
		return err
	}
	js, err := n.job(ds, job, true)
	if err != nil {
		return err
	}
	if len(ids) == 0 || len(ids) != len(losses) {
		return fmt.Errorf("%w: report for %s needs id/loss pairs", ErrBadReport, name)
	}
	for i, id := range ids {
		if int(id) >= ds.len {
			return fmt.Errorf("%w: sample id %d out of range for %s (%d samples)", ErrBadReport, id, name, ds.len)
		}
		if math.IsNaN(losses[i]) || math.IsInf(losses[i], 0) {
			return fmt.Errorf("%w: loss %v for sample %d is not finite", ErrBadReport, losses[i], id)
		}
		if math.Abs(losses[i]) > math.MaxFloat32 {
			return fmt.Errorf("%w: loss %v for sample %d is beyond single precision", ErrBadReport, losses[i], id)
		}
	}
	// Losses are kept as singles, here and at the leader alike, so a
	// rank's reports merge the same on any node.
	batch := wire.ReportBatch{Dataset: name, Job: js.name, Epoch: epoch, IDs: append([]uint32(nil), ids...), Losses: wire.Narrow(losses)}
	js.touch()
	js.reports.Add(1)
	js.reported.Add(int64(len(ids)))
	if n.lead.leading() {
		return n.leaderReport([]wire.ReportBatch{batch})
	}
	n.out.QueueReport(batch)
	return nil
}

// Reset implements transport.Backend: a job of the dataset starts over at
// epoch 0 with any world size; its importance table is kept. A job the
// leader does not know has nothing to reset. During a leader failover it
// waits for the new leader, up to 30 seconds.
func (n *Node) Reset(name, job string) error {
	if _, err := n.dataset(name); err != nil {
		return err
	}
	job, err := checkJob(job)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Cluster.FetchTimeout)
		err := n.toLeader(ctx, wire.MethodReset, &wire.ResetReq{Dataset: name, Job: job})
		cancel()
		code := peer.CodeOf(err)
		if err == nil || code == peer.CodeBadRequest || code == peer.CodeNotFound || time.Now().After(deadline) || n.ctx.Err() != nil {
			if err != nil {
				return fmt.Errorf("mesh: reset %s: %w", name, err)
			}
			return nil
		}
		time.Sleep(n.cfg.Cluster.RetryEvery)
	}
}

// publishedAhead reports whether epoch's order of a job, which this node
// does not hold, was published with the newest it holds, which runs
// ahead of it: the ranks still train epoch.
func publishedAhead(js *jobState, epoch int) bool {
	newest := js.book.Newest()
	return newest != nil && newest.Ahead > 0 && epoch >= newest.TrainingEpoch() && epoch < newest.Epoch
}

// hasSlice reports whether p, if any, holds rank's slice.
func hasSlice(p *wire.PublishMsg, rank int) bool { return p != nil && p.HasSlice(rank) }

// fetchExact asks the leader for epoch's order of a job and installs it,
// if the leader has it (and, if settled, published it a request's time
// ago or more: see wire.GetOrderReq). Best effort.
func (n *Node) fetchExact(js *jobState, epoch int, settled bool) {
	p := n.orderFromLeader(&wire.GetOrderReq{Dataset: js.ds.name, Job: js.name, Exact: true, Epoch: epoch, Settled: settled})
	if p != nil && p.Job == js.name && p.Epoch == epoch {
		n.lead.observe(p.Term)
		n.installOrder(js, p)
	}
}

// catchUp asks the leader for its newest order of a job and installs it
// if it is newer than what this node holds (gen, have). Best effort.
func (n *Node) catchUp(js *jobState, gen uint64, have int) {
	p := n.orderFromLeader(&wire.GetOrderReq{Dataset: js.ds.name, Job: js.name})
	if p != nil && p.Job == js.name && p.Newer(&wire.PublishMsg{Gen: gen, Epoch: have}) {
		n.lead.observe(p.Term)
		n.installOrder(js, p)
	}
}

// orderFromLeader asks the leader, if it is another node, for the order
// req names and returns it once checked; nil if there is none or it
// fails the check.
func (n *Node) orderFromLeader(req *wire.GetOrderReq) *wire.PublishMsg {
	leader := n.lead.leader()
	if n.cluster == nil || leader == "" || leader == n.cfg.Name {
		return nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Cluster.FetchTimeout)
	defer cancel()
	var p wire.PublishMsg
	if err := n.cluster.callName(ctx, leader, wire.MethodGetOrder, req, &p); err != nil || n.checkPublish(&p) != nil {
		return nil
	}
	return &p
}
