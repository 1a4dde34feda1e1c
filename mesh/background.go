package mesh

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/shade-mesh/shade/mesh/outbox"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// goBackground runs fn in a goroutine the node owns: Close cancels its
// context and waits for it.
func (n *Node) goBackground(fn func(ctx context.Context)) {
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		fn(n.ctx)
	}()
}

// after runs fn once d has passed, unless the node closes first.
func (n *Node) after(d time.Duration, fn func()) {
	n.goBackground(func(ctx context.Context) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
			fn()
		}
	})
}

// kickReconcile asks the reconciler to run now (on a leader change).
func (n *Node) kickReconcile() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// queueScores queues the samples of a minibatch just merged into a
// job's table for their owners, with their scores, read now: the merge
// has just touched them (read at the flush instead, each was a miss in
// the table, once for every owner).
func (n *Node) queueScores(js *jobState, ids []uint32) {
	r := js.ds.ring.Load()
	if n.cluster == nil || r == nil {
		n.applyLocalScores(js, ids) // every sample is this node's
		return
	}
	m, _ := js.scores.ScoresOf(ids, n.lead.ownTerm())
	local := n.out.QueueScores(n.placement(js.ds), n.cfg.Name, wire.JobKey{Dataset: js.ds.name, Job: js.name}, m)
	n.applyLocalScores(js, local)
}

// applyLocalScores re-keys this node's policy with the job's table's
// scores.
func (n *Node) applyLocalScores(js *jobState, ids []uint32) {
	if n.scorer == nil || len(ids) == 0 {
		return
	}
	m, mean := js.scores.ScoresOf(ids, n.lead.ownTerm())
	n.setScores(js, m, mean)
}

// setScores takes a job's new scores of samples this node owns and its
// running mean, and returns the scores it took: those at least as new
// as the ones it holds of their samples (scores.Stamps). The policy
// weighs each sample by the sum of its scores over the dataset's jobs (a
// job without a score of it counts its mean): the number of reads a
// sample can expect adds up over the jobs that draw it, so a sample that
// several jobs need is kept over one that only one does.
func (n *Node) setScores(js *jobState, m wire.Merged, mean float64) wire.Merged {
	ds := js.ds
	jobs := ds.jobList()
	n.lockPolicy()
	defer n.polMu.Unlock()
	js.mean = mean // the mean scores passed on go with (flushScores)
	m = js.stamps.Admit(m, ds.len)
	if n.scorer == nil || js.forgotten {
		return m
	}
	owned := js.ownedScores()
	for i, id := range m.IDs {
		owned[id] = m.Scores[i]
	}
	for _, id := range m.IDs {
		s := unionScore(jobs, id)
		n.scorer.SetScore(sampleID(ds, int(id)), s)
		n.trace.Score(sampleID(ds, int(id)), s)
	}
	n.scorer.SetDefaultScore(unionMean(jobs))
	return m
}

// unionScore is the policy's score of sample id: the sum over jobs of
// each job's score of it, or its mean where it has none. Called with
// Node.polMu held.
func unionScore(jobs []*jobState, id uint32) float64 {
	var sum float64
	for _, j := range jobs {
		switch {
		case j.owned != nil && !math.IsNaN(float64(j.owned[id])):
			sum += float64(j.owned[id])
		default:
			sum += j.mean
		}
	}
	return sum
}

// unionMean is the policy's score of samples no job has scored. Called
// with Node.polMu held.
func unionMean(jobs []*jobState) float64 {
	var sum float64
	for _, j := range jobs {
		sum += j.mean
	}
	return sum
}

// forgetJobScores takes a job that was dropped out of the policy's
// scores: every sample it scored is re-keyed by the jobs that remain.
// It takes the policy's lock a few thousand samples at a time.
func (n *Node) forgetJobScores(js *jobState) {
	if n.scorer == nil {
		return
	}
	ds := js.ds
	jobs := ds.jobList()
	const chunk = 4096
	for start := 0; start < ds.len; start += chunk {
		n.lockPolicy()
		owned := js.owned
		for id := start; owned != nil && id < min(start+chunk, ds.len); id++ {
			if !math.IsNaN(float64(owned[id])) {
				n.scorer.SetScore(sampleID(ds, id), unionScore(jobs, uint32(id)))
			}
		}
		n.polMu.Unlock()
		if owned == nil {
			break
		}
	}
	n.lockPolicy()
	n.scorer.SetDefaultScore(unionMean(jobs))
	js.owned, js.forgotten = nil, true
	n.polMu.Unlock()
}

// applyScores takes the leader's merged scores of a job for samples this
// node owns.
func (n *Node) applyScores(req *wire.ScoresReq) error {
	ds, err := n.dataset(req.Dataset)
	if err != nil {
		return err
	}
	js, err := n.job(ds, req.Job, true)
	if err != nil {
		return err
	}
	scores := req.Singles()
	if len(req.IDs) != len(scores) {
		return fmt.Errorf("%w: %d ids, %d scores", ErrBadReport, len(req.IDs), len(scores))
	}
	if len(req.Seqs) != 0 && len(req.Seqs) != len(req.IDs) {
		return fmt.Errorf("%w: %d ids, %d stamps", ErrBadReport, len(req.IDs), len(req.Seqs))
	}
	for i, id := range req.IDs {
		if int(id) >= ds.len || !(scores[i] >= 0 && scores[i] < 1e6) {
			return fmt.Errorf("%w: score %v for sample %d", ErrBadReport, scores[i], id)
		}
	}
	m := wire.Merged{Term: req.Term, IDs: req.IDs, Scores: scores}
	if len(req.Seqs) > 0 {
		m.Seqs = req.Seqs
	}
	pass := req.Pass
	if pass <= 0 || pass > len(req.IDs) || n.cluster == nil {
		n.setScores(js, m, req.Mean)
		return nil
	}
	// Their first owner passes them on to the others (not back to this
	// node, and not passed on again: see flushScores), those it took.
	passed := n.setScores(js, m.Slice(0, pass), req.Mean)
	n.setScores(js, m.Slice(pass, len(m.IDs)), req.Mean)
	n.out.QueueScores(n.placement(ds), n.cfg.Name, wire.JobKey{Dataset: ds.name, Job: js.name}, passed)
	return nil
}

// applyReplica installs the leader's score table of a job, so this node
// can lead with it if the leader fails.
func (n *Node) applyReplica(req *wire.ReplicateReq) error {
	ds, err := n.dataset(req.Dataset)
	if err != nil {
		return err
	}
	if req.Version != ds.manifest.Version {
		return fmt.Errorf("mesh: replica of %s version %s; ours is %s", req.Dataset, req.Version, ds.manifest.Version)
	}
	if req.Term < n.lead.highest() {
		return nil // from a leader that has been replaced
	}
	js, err := n.job(ds, req.Job, true)
	if err != nil {
		return err
	}
	n.lead.observe(req.Term)
	return js.scores.Replace(req.Table, req.Term)
}

// runLoops is the node's background work in a mesh: forwarding reports,
// pushing scores, replicating tables and reconciling with the leader.
//
// The outbox is drained wire.FlushEvery after something is queued, so
// that what is queued meanwhile goes in the same requests, and only then:
// an idle node does not wake for it.
func (n *Node) runLoops(ctx context.Context) {
	// The first drain comes FlushEvery after start (what was queued before
	// the loop ran); after it, flushC is nil while nothing is queued.
	flush := time.NewTimer(wire.FlushEvery)
	defer flush.Stop()
	flushC := flush.C
	queued := n.out.Queued()
	// queuedC is nil while the flush is armed: what is queued meanwhile
	// goes with it, and does not wake this loop.
	var queuedC <-chan struct{}
	armFlush := func() {
		flush.Reset(wire.FlushEvery)
		flushC, queuedC = flush.C, nil
	}
	replicate := time.NewTicker(n.cfg.Cluster.ReplicateEvery)
	defer replicate.Stop()
	reconcile := time.NewTicker(2 * time.Second)
	defer reconcile.Stop()
	resident := time.NewTicker(n.cfg.Cluster.ResidentEvery)
	defer resident.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-queuedC:
			armFlush()
		case <-flushC:
			flushC = nil
			select { // this flush takes what the signal stood for
			case <-queued:
			default:
			}
			n.forwardReports(ctx)
			n.flushScores(ctx)
			n.flushOffers(ctx)
			if n.out.Pending() { // kept for want of a leader, or queued meanwhile
				armFlush()
			} else {
				queuedC = queued
			}
		case <-replicate.C:
			n.replicateTables(ctx)
		case <-reconcile.C:
			n.reconcile(ctx)
			n.retireIdle()
			n.dropStale()
		case <-resident.C:
			n.reportResident(ctx)
		case <-n.kick:
			n.reconcile(ctx)
		}
	}
}

// forwardReports sends queued minibatches to the leader in one request
// once due for a mesh of this size (outbox.ClaimReportsDue). The leader
// merges its own at once.
func (n *Node) forwardReports(ctx context.Context) {
	var c outbox.Claim
	var ok bool
	if n.lead.leading() || n.cluster == nil {
		c, ok = n.out.ClaimReports()
	} else {
		c, ok = n.out.ClaimReportsDue(time.Now(), n.cluster.size())
	}
	if ok {
		n.settle(c, n.sendReports(ctx, c.Batches))
	}
}

// sendReports sends minibatches to the leader (MethodReport); a leader
// merges its own, and those it refuses are dropped.
func (n *Node) sendReports(ctx context.Context, batches []wire.ReportBatch) error {
	if n.lead.leading() {
		if err := n.leaderReport(batches); err != nil {
			n.cfg.Logger.Warn().Err(err).Msg("queued report refused")
		}
		return nil
	}
	leader := n.lead.leader()
	if leader == "" || leader == n.cfg.Name || n.cluster == nil {
		return errNoLeader // keep them until there is one
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
	defer cancel()
	return n.cluster.callName(ctx, leader, wire.MethodReport, &wire.ReportReq{Batches: batches}, nil)
}

// settle ends the claim c on queued reports: they are gone once sent, and
// stay for the next try if err says the send failed.
func (n *Node) settle(c outbox.Claim, err error) {
	if err != nil {
		n.out.Release(c)
		return
	}
	n.out.Sent(c, time.Now())
}

// reportDone tells the leader of a rank's done (req) after the node's
// queued reports of the rank's job, so that the leader has merged them
// before the done counts and the next order does not depend on when they
// would have been sent. A node that does not lead sends both in one
// request (MethodReportDone), where they were two; a leader from before it
// (CodeBadRequest) is sent the reports and then the done, as was done
// before. The reports stay queued unless the leader answered that it
// merged them. While a request in flight holds some of the job's queued
// reports (outbox.ClaimReportsOf), the done waits for it to end; other
// jobs' reports, and their requests, neither wait for it nor hold it up.
// It returns the leader that counted the done, and puts the leader's
// answer in resp (nil: none wanted; the answer is read all the same).
func (n *Node) reportDone(ctx context.Context, req *wire.DoneReq, resp *wire.DoneResp) (leader string, err error) {
	if resp == nil {
		resp = new(wire.DoneResp) // the answer is read, and dropped
	}
	var c outbox.Claim
	for {
		claim, more, busy := n.out.ClaimReportsOf(wire.JobKey{Dataset: req.Dataset, Job: req.Job})
		if busy != nil {
			select {
			case <-busy:
				continue
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		if !more {
			c = claim
			break
		}
		// More than a request's worth: the oldest go first, alone.
		err := n.sendReports(ctx, claim.Batches)
		n.settle(claim, err)
		if err != nil {
			return n.lead.leader(), err
		}
	}
	leader = n.lead.leader()
	remote := n.cluster != nil && !n.lead.leading() && leader != "" && leader != n.cfg.Name
	if len(c.Batches) > 0 && remote && !n.isOlderLeader(leader) {
		carried := *req
		carried.Reports = c.Batches
		var answer wire.DoneResp
		err = n.cluster.callName(ctx, leader, wire.MethodReportDone, &carried, &answer)
		if peer.CodeOf(err) != peer.CodeBadRequest {
			n.settle(c, err) // on an error the reports stay for the next try
			switch {
			case err != nil:
				return leader, err
			case answer.Refused != "":
				return leader, fmt.Errorf("mesh: %s refused the done: %s", leader, answer.Refused)
			}
			if resp != nil {
				*resp = answer
			}
			return leader, nil
		}
		n.older.Store(&olderLeader{name: leader, until: time.Now().Add(olderLeaderFor)})
	}
	// Nothing to carry, nobody to carry it to, or a leader from before
	// MethodReportDone: the reports in a request of their own, then the
	// done.
	if len(c.Batches) > 0 {
		n.settle(c, n.sendReports(ctx, c.Batches))
	}
	return leader, n.askLeader(ctx, wire.MethodDone, req, resp)
}

// olderLeaderFor is how long a leader that answered MethodReportDone as
// unknown (a build from before it) is sent a done's reports and the done
// as two requests without asking it again: a minute, so that one
// restarted with a newer build is asked again soon, and one that is not
// costs a failed request a minute.
const olderLeaderFor = time.Minute

// olderLeader is a leader that answered MethodReportDone as unknown, and
// until when it is taken not to know it.
type olderLeader struct {
	name  string
	until time.Time
}

// isOlderLeader reports whether leader answered MethodReportDone as unknown
// within olderLeaderFor.
func (n *Node) isOlderLeader(leader string) bool {
	o := n.older.Load()
	return o != nil && o.name == leader && time.Now().Before(o.until)
}

// flushScores sends each owner the merged scores of its queued samples,
// once they are due for a mesh of this size (outbox.TakeScoresDue).
func (n *Node) flushScores(ctx context.Context) {
	if n.cluster == nil {
		return // every sample is this node's: none were queued
	}
	leading := n.lead.leading()
	q := n.out.TakeScoresDue(time.Now(), n.cluster.size(), n.cluster.cfg.Replicas, leading)
	for key, byOwner := range q {
		ds, err := n.dataset(key.Dataset)
		if err != nil {
			continue
		}
		js := ds.lookupJob(key.Job)
		if js == nil {
			continue // retired meanwhile
		}
		var mean float64
		if leading {
			_, mean = js.scores.Summary()
		} else {
			// Scores this node passes on: the leader's running mean,
			// which came with them.
			n.lockPolicy()
			mean = js.mean
			n.polMu.Unlock()
		}
		for owner, req := range byOwner {
			req.Mean = mean
			n.goBackground(func(ctx context.Context) {
				cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
				defer cancel()
				if err := n.cluster.callName(cctx, owner, wire.MethodScores, req, nil); err != nil {
					n.cfg.Logger.Debug().Err(err).Str("owner", owner).Msg("scores not delivered")
				}
			})
		}
	}
}

// replicateTables saves changed score tables and, on the leader, sends
// them on: every change to the standbys (the members that lead next), and
// to every other member as often as ReplicateBudget allows. A table of a
// large dataset is megabytes, and a thousand members each getting it twice
// a second would take more than the leader's link.
func (n *Node) replicateTables(ctx context.Context) {
	n.saveScores()
	if !n.lead.leading() || n.cluster == nil {
		return
	}
	var others []string
	for _, p := range n.cluster.alive() { // sorted by name: the next leaders first
		if p.name != n.cfg.Name {
			others = append(others, p.name)
		}
	}
	standbys := others[:min(len(others), wire.TableStandbys)]
	for _, js := range n.allJobs() {
		b, toAll, due, err := js.scores.DueReplication(time.Now(), len(others), n.cfg.Cluster.ReplicateBudget)
		if !due {
			continue
		}
		if err != nil {
			n.cfg.Logger.Error().Err(err).Msg("score table")
			continue
		}
		req := &wire.ReplicateReq{Dataset: js.ds.name, Job: js.name, Version: js.ds.manifest.Version, Term: n.lead.ownTerm(), Table: b}
		if toAll {
			n.sendEach(others, wire.MethodReplicate, req)
		} else {
			n.sendEach(standbys, wire.MethodReplicate, req)
		}
	}
}

// reportResident tells the leader, for each job, which of its samples
// this node caches, where draws are cache-aware. A node with ranks says so
// with their dones too, fresher at the epoch's end; this reaches a new
// leader, and counts the caches of nodes without ranks.
func (n *Node) reportResident(ctx context.Context) {
	if n.cfg.Boost <= 0 || n.lead.leading() || n.lead.leader() == "" {
		return
	}
	for _, ds := range n.ordered {
		var set wire.ResidentSet // the dataset's, for each of its jobs
		for _, js := range ds.jobList() {
			p := js.book.Newest()
			if p == nil || p.Epoch < 0 {
				continue
			}
			if set.Empty() {
				if set = n.residentSet(ds); set.Empty() {
					break
				}
			}
			cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
			_ = n.toLeader(cctx, wire.MethodResident, &wire.ResidentReq{Dataset: ds.name, Job: js.name, Gen: p.Gen, Node: n.cfg.Name, Bits: set.Bits, Sparse: set.Sparse})
			cancel()
		}
	}
}

// reconcile repeats to the leader what it may have missed: local ranks
// that finished the newest epoch (also on the leader's own node, where a
// DONE may have arrived while it was taking over), unless the done
// reached this leader since it last took over (jobState.doneCounted):
// ranks that wait for the others to finish would otherwise be repeated
// every pass, a request into the leader from every peer every two
// seconds. Waiting ranks announce themselves from their own loop. One
// pass runs at a time.
func (n *Node) reconcile(ctx context.Context) {
	n.reconcileMu.Lock()
	defer n.reconcileMu.Unlock()
	for _, js := range n.allJobs() {
		p, epoch, done := js.book.Finished()
		if p == nil || epoch < 0 {
			continue
		}
		for _, r := range done {
			leader, term := n.lead.leader(), n.lead.highest()
			if js.doneCounted(r, p.Gen, epoch, leader, term) {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
			// Without the cache's bitmap: reportResident repeats that.
			err := n.toLeader(cctx, wire.MethodDone, &wire.DoneReq{Dataset: js.ds.name, Job: js.name, Gen: p.Gen, Epoch: epoch, Rank: r, Node: n.cfg.Name})
			cancel()
			if err == nil {
				js.noteDoneReached(r, p.Gen, epoch, leader, term)
			}
		}
	}
}
