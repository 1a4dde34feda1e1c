package mesh

import (
	"context"
	"math"
	"math/bits"
	"slices"
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
// until ctx ends (the node closes). sendOwnedScores does the leader's
// part.
//
// A merge the leader made while its ring and this node's differed may
// still reach a node that no longer owns the sample, or miss one that
// does: the sample's next merge mends it. Scores that merely arrive out
// of order are not an issue: of two, the node keeps the newer
// (scores.Stamps).
func (n *Node) followRingScores(ctx context.Context, ds *datasetState) {
	if n.scorer == nil {
		return // the policy weighs no scores: none are kept
	}
	ds.ownedMu.Lock()
	defer ds.ownedMu.Unlock()
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
// unless one is due to start already: ring changes that come together
// (a mesh forming, many members failing at once) take one pass or two,
// not one each.
func (n *Node) followRingScoresSoon(ds *datasetState) {
	if n.scorer == nil || !ds.ownedDue.CompareAndSwap(false, true) {
		return
	}
	n.goBackground(func(ctx context.Context) {
		ds.ownedMu.Lock() // after the pass running now, if any
		ds.ownedDue.Store(false)
		ds.ownedMu.Unlock()
		n.followRingScores(ctx, ds)
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
// sendOwnedScores carries: 128 KiB of ids and scores.
const ownedScoresMsg = 16384

// sendOwnedScores sends members that came to share ds (a join, a return,
// a move to this ring's count) every job's merged scores of the samples
// they own by ring r, from the leader's tables, in the background. The
// leader sends a sample's scores to its owners as it merges it, and a
// member that joins holds no copy of the tables yet (followRingScores
// finds none there), so without this it held no score of its samples
// until their next merges.
func (n *Node) sendOwnedScores(ds *datasetState, r *ring.Ring, names []string) {
	if len(names) == 0 {
		return
	}
	n.goBackground(func(ctx context.Context) {
		if !n.anyScores(ds) {
			return // nothing merged yet
		}
		jobs := ds.jobList()
		masks := make([]uint64, ownedChunk)
		for batch := range slices.Chunk(names, 64) { // a bit each in one pass
			owned := make([][]uint32, len(batch))
			theirs := n.placementOf(ds, r).OwnedBy(batch)
			sampleRuns(ctx, ds.len, func(ids []uint32) {
				theirs(ids, masks[:len(ids)])
				for i, id := range ids {
					for m := masks[i]; m != 0; m &= m - 1 {
						b := bits.TrailingZeros64(m)
						owned[b] = append(owned[b], id)
					}
				}
			})
			for b, name := range batch {
				n.sendScoresOf(ctx, ds, jobs, name, owned[b])
			}
		}
	})
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

// newMembers returns the members of ring now that ring was lacks.
func newMembers(was, now *ring.Ring) []string {
	old := was.Members()
	var out []string
	for _, m := range now.Members() {
		if _, found := slices.BinarySearch(old, m); !found {
			out = append(out, m)
		}
	}
	return out
}
