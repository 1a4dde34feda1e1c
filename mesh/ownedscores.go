package mesh

import (
	"context"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/wire"
)

// ownedChunk is how many samples followRingScores takes at a time, each
// chunk under the policy's lock once per job.
const ownedChunk = 4096

// sampleRuns calls fn with the ids of samples 0..n-1, ownedChunk at a
// time in one reused slice, until ctx ends.
func sampleRuns(ctx context.Context, n int, fn func(ids []uint32)) {
	ids := make([]uint32, ownedChunk)
	for start := 0; start < n && ctx.Err() == nil; start += ownedChunk {
		k := min(ownedChunk, n-start)
		for i := range k {
			ids[i] = uint32(start + i)
		}
		fn(ids[:k])
	}
}

// followRingScores brings this node's scores of ds's samples
// (jobState.owned, and the policy's weights of them) to the ring that
// ds serves now. The leader sends a sample's merged scores to the owners
// it has when it merges it (queueScores), so without this a member that
// comes to own a sample (a join, a leave, a count the mesh moved to, a
// restart) held no score of it until its next merge, and the policy
// weighed it by the job's mean meanwhile; one that stopped owning a
// sample kept its score.
//
// Samples it owns now and did not by the ring before take each job's
// scores from the node's own copy of the job's table (the leader's
// table on the leader, the replica it sends to every member on the
// others, or what the node saved), where the table has scored them and
// the node holds no score of them yet: a score the leader sent since is
// newer than any copy. Samples it no longer owns lose theirs. It runs in
// the background after each change of ds's ring, one pass at a time,
// each from the ring the last one brought the scores to, to the newest,
// until ctx ends (the node closes). sendRingScores does the leader's
// part: it sends members that gain samples the newest scores of them,
// which replace the copy's (a copy on a member that does not stand by
// to lead can be minutes old in a large mesh).
//
// While members' rings differ, a merge, or the scores the leader sends
// by a ring this node never held, may still reach a node that does not
// own the sample (it keeps the score until its ring drops it),
// and a first owner whose ring is behind the leader's passes scores on
// (wire.ScoresReq.Pass) to the owners it knows; a node whose ring drops
// a sample and takes it back before the leader's scores of it arrive
// holds its copy's. The sample's next merge mends either. Scores that
// merely arrive out of order are not an issue: of two, the node keeps
// the newer (scores.Stamps).
func (n *Node) followRingScores(ctx context.Context, ds *datasetState) {
	if n.scorer == nil {
		return // the policy weighs no scores: none are kept
	}
	ds.ownedPass.mu.Lock()
	defer ds.ownedPass.mu.Unlock()
	now, was := ds.ring.Load(), ds.ownedRing
	if now == nil || now == was {
		return
	}
	ds.ownedRing = now
	if !n.anyScores(ds) {
		return // a mesh forming: nothing merged, saved or sent yet
	}
	self := []string{n.cfg.Name}
	mineNow := n.placementOf(ds, now).OwnedBy(self)
	// On a first ring (was nil) every sample it owns counts as gained and
	// every other as lost: scores saved (--state-dir) or sent before it
	// had a ring are of samples of any owner.
	var mineWas func(ids []uint32, masks []uint64)
	if was != nil {
		mineWas = n.placementOf(ds, was).OwnedBy(self)
	}
	began := time.Now()
	jobs := ds.jobList()
	inNow, inWas := make([]uint64, ownedChunk), make([]uint64, ownedChunk)
	var gained, lost []uint32
	var gains, losses int
	sampleRuns(ctx, ds.len, func(ids []uint32) {
		mineNow(ids, inNow[:len(ids)])
		if mineWas != nil {
			mineWas(ids, inWas[:len(ids)])
		} else {
			for i := range ids {
				inWas[i] = ^inNow[i]
			}
		}
		gained, lost = gained[:0], lost[:0]
		for i, id := range ids {
			switch {
			case inNow[i] != 0 && inWas[i] == 0:
				gained = append(gained, id)
			case inNow[i] == 0 && inWas[i] != 0:
				lost = append(lost, id)
			}
		}
		for _, js := range jobs {
			n.moveOwnedScores(js, jobs, gained, lost)
		}
		gains, losses = gains+len(gained), losses+len(lost)
	})
	n.cfg.Logger.Debug().Str("dataset", ds.name).Int("gained", gains).Int("lost", losses).
		Dur("took", time.Since(began)).Msg("scores of the samples this node owns follow the ring")
}

// followRingScoresSoon starts a followRingScores of ds in the background
// (ringPass.soon): ring changes that come together (a mesh forming, many
// members failing at once) take one pass or two, not one each.
func (n *Node) followRingScoresSoon(ds *datasetState) {
	if n.scorer != nil {
		ds.ownedPass.soon(n, func(ctx context.Context) { n.followRingScores(ctx, ds) })
	}
}

// ringPass runs a pass over a dataset's samples that follows its ring,
// one at a time: the pass holds mu, and ring changes that come while one
// is due to start share it.
type ringPass struct {
	mu  sync.Mutex
	due atomic.Bool // a pass is due to start
}

// soon starts pass in the background, once the pass running now (if any)
// has ended, unless one is due to start already.
func (p *ringPass) soon(n *Node, pass func(ctx context.Context)) {
	if !p.due.CompareAndSwap(false, true) {
		return
	}
	n.goBackground(func(ctx context.Context) {
		p.mu.Lock() // after the pass running now, if any
		p.due.Store(false)
		p.mu.Unlock()
		pass(ctx)
	})
}

// anyScores reports whether any job of ds has scores: merged into its
// table (or the node's copy of it), or sent to this node.
func (n *Node) anyScores(ds *datasetState) bool {
	jobs := ds.jobList()
	for _, js := range jobs {
		if scored, _ := js.scores.Summary(); scored > 0 {
			return true
		}
	}
	n.polMu.Lock()
	defer n.polMu.Unlock()
	for _, js := range jobs {
		if js.owned != nil {
			return true
		}
	}
	return false
}

// ownedScoresMsg is how many samples' scores one message of
// sendRingScores carries: 128 KiB of ids and scores.
const ownedScoresMsg = 16384

// sendRingScoresSoon starts a sendRingScores of ds in the background
// (ringPass.soon). resend makes the pass send every member the scores of
// all its samples, as on taking over: this node cannot know what the
// leader before it sent.
func (n *Node) sendRingScoresSoon(ds *datasetState, resend bool) {
	if resend {
		ds.sentPass.mu.Lock() // after the pass running now, if any
		ds.sentRing = nil
		ds.sentPass.mu.Unlock()
	}
	ds.sentPass.soon(n, func(ctx context.Context) { n.sendRingScores(ctx, ds) })
}

// sendRingScores sends, while this node leads, each member of ds's ring
// every job's merged scores of the samples it has come to own since the
// ring of the last pass (ds.sentRing; all it owns where there was none),
// from the leader's tables, which hold the newest scores. The leader
// sends a sample's scores to its owners as it merges it, and a member
// that comes to own a sample otherwise takes its score from its copy of
// the table (followRingScores): a member that joins holds no copy, and a
// member that is not a standby holds one as old as --replicate-budget
// makes it, minutes in a mesh of a thousand peers. Each pass brings the
// members from the ring of the one before to the newest, one pass at a
// time, until ctx ends.
//
// Where both rings have one partition count, the partitions whose owners
// changed are found first, and one pass over the samples picks out
// theirs: after a member fails in a mesh of a thousand, about a hundred
// members take its copies, and each is sent the scores of the samples of
// those.
func (n *Node) sendRingScores(ctx context.Context, ds *datasetState) {
	ds.sentPass.mu.Lock()
	defer ds.sentPass.mu.Unlock()
	now, was := ds.ring.Load(), ds.sentRing
	if now == nil || now == was || !n.lead.leading() {
		return
	}
	ds.sentRing = now
	if !n.anyScores(ds) {
		return // nothing merged yet
	}
	jobs := ds.jobList()
	names, gained := n.gains(ctx, ds, was, now)
	for batch := range slices.Chunk(names, 64) {
		var wg sync.WaitGroup
		for _, name := range batch {
			if ids := gained[name]; len(ids) > 0 {
				wg.Go(func() { n.sendScoresOf(ctx, ds, jobs, name, ids) })
			}
		}
		wg.Wait()
	}
}

// gains returns the members of ring now, but this node, that own samples
// of ds by now that they did not by ring was, and those samples: every
// sample each owns where was is nil. Where ds's samples are hashed for
// both rings' partition count, it looks at each partition's owners and
// then passes over the samples once; else (a move to another count) it
// tests each sample's owners by both rings, for 64 members a pass.
func (n *Node) gains(ctx context.Context, ds *datasetState, was, now *ring.Ring) ([]string, map[string][]uint32) {
	gained := make(map[string][]uint32)
	if s := ds.samples.Load(); s.Fits(now) && (was == nil || s.Fits(was)) {
		// One count: each partition whose owners changed, and who gained
		// it (a run of gainers, 1 + its index in runs; 0 where none).
		slot := make([]int32, now.Config().Partitions)
		var runs [][]string
		for p := range slot {
			var before []string
			if was != nil {
				before = was.PartitionOwners(p)
			}
			var got []string
			for _, o := range now.PartitionOwners(p) {
				if o != n.cfg.Name && !slices.Contains(before, o) {
					got = append(got, o)
				}
			}
			if got != nil {
				runs = append(runs, got)
				slot[p] = int32(len(runs))
			}
		}
		parts := make([]int32, ownedChunk)
		sampleRuns(ctx, ds.len, func(ids []uint32) {
			s.PartitionsOf(ids, parts[:len(ids)])
			for k, id := range ids {
				if r := slot[parts[k]]; r != 0 {
					for _, name := range runs[r-1] {
						gained[name] = append(gained[name], id)
					}
				}
			}
		})
		return slices.Sorted(maps.Keys(gained)), gained
	}
	var names []string
	for _, m := range now.Members() {
		if m != n.cfg.Name {
			names = append(names, m)
		}
	}
	masks, before := make([]uint64, ownedChunk), make([]uint64, ownedChunk)
	for batch := range slices.Chunk(names, 64) { // a bit each in one pass
		theirs := n.placementOf(ds, now).OwnedBy(batch)
		var theirsWas func(ids []uint32, masks []uint64)
		if was != nil {
			theirsWas = n.placementOf(ds, was).OwnedBy(batch)
		}
		sampleRuns(ctx, ds.len, func(ids []uint32) {
			theirs(ids, masks[:len(ids)])
			if theirsWas != nil {
				theirsWas(ids, before[:len(ids)])
			}
			for i, id := range ids {
				m := masks[i]
				if theirsWas != nil {
					m &^= before[i]
				}
				for ; m != 0; m &= m - 1 {
					name := batch[bits.TrailingZeros64(m)]
					gained[name] = append(gained[name], id)
				}
			}
		})
	}
	return names, gained
}

// sendScoresOf sends member name the jobs' merged scores of samples ids,
// in messages of ownedScoresMsg samples, one after another; it gives up
// at the first that fails.
func (n *Node) sendScoresOf(ctx context.Context, ds *datasetState, jobs []*jobState, name string, ids []uint32) {
	for _, js := range jobs {
		for part := range slices.Chunk(ids, ownedScoresMsg) {
			m, mean := js.scores.ScoredOf(part, n.lead.ownTerm())
			if len(m.IDs) == 0 {
				continue
			}
			req := &wire.ScoresReq{Dataset: ds.name, Job: js.name, IDs: m.IDs, Scores: m.Scores, Mean: mean, Term: m.Term, Seqs: m.Stamps()}
			cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
			err := n.cluster.callName(cctx, name, wire.MethodScores, req, nil)
			cancel()
			if err != nil {
				n.cfg.Logger.Debug().Err(err).Str("member", name).Str("dataset", ds.name).Msg("scores of its samples not delivered")
				return
			}
		}
	}
}

// moveOwnedScores takes a job's scores of samples this node has come to
// own (gained) from the node's copy of its table, where it holds none yet
// (see followRingScores), and forgets those of samples it no longer owns
// (lost), weighing each of those by the dataset's jobs as a sample none
// scored. jobs are the dataset's jobs.
func (n *Node) moveOwnedScores(js *jobState, jobs []*jobState, gained, lost []uint32) {
	copied, mean := js.scores.ScoredOf(gained, 0) // not stamped: a copy
	gained, scores := copied.IDs, copied.Scores
	if len(gained) == 0 && len(lost) == 0 {
		return
	}
	ds := js.ds
	n.lockPolicy()
	defer n.polMu.Unlock()
	if js.forgotten {
		return // dropped meanwhile
	}
	if js.owned == nil {
		if len(gained) == 0 {
			return // nothing to forget
		}
		js.mean = mean // the leader has sent none yet, nor its mean
	}
	owned := js.ownedScores()
	for i, id := range gained {
		if !math.IsNaN(float64(owned[id])) {
			continue // sent by the leader since: newer than the copy
		}
		owned[id] = scores[i]
		s := unionScore(jobs, id)
		n.scorer.SetScore(sampleID(ds, int(id)), s)
		n.trace.Score(sampleID(ds, int(id)), s)
	}
	for _, id := range lost {
		if !math.IsNaN(float64(owned[id])) {
			owned[id] = float32(math.NaN())
			n.scorer.SetScore(sampleID(ds, int(id)), unionScore(jobs, id))
		}
	}
	n.scorer.SetDefaultScore(unionMean(jobs))
}

// ownedScores returns js.owned, made (every sample without a score) if
// it is nil. Called with Node.polMu held.
func (js *jobState) ownedScores() []float32 {
	if js.owned == nil {
		js.owned = make([]float32, js.ds.len)
		for i := range js.owned {
			js.owned[i] = float32(math.NaN())
		}
	}
	return js.owned
}
