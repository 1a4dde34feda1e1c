package wire

import (
	"slices"

	"github.com/shade-mesh/shade/sampling"
)

// JobKey names one job of one dataset: Job is "" for its default job.
type JobKey struct{ Dataset, Job string }

// Placement says which nodes own each sample of a dataset: its samples in
// groups that share their owners (a ring's partitions), as the leader's
// split takes them. Both functions must be safe to call while the caller
// holds its own locks.
type Placement = sampling.Placement

// ScoreQueue is the leader's queue of merged scores for the samples'
// owners: per job, the sample ids by group of the dataset's placement (a
// ring partition: the samples of a group share their owners), each with
// the score the merge gave it, read by the caller as it merged the
// minibatch (the table's memory of those samples is then in the cache;
// read again when the queue is taken, each sample's score was a miss
// per owner). A sample merged twice before the queue is taken is queued
// twice, with the score of each merge. A sample costs a lookup of its
// group and an append to the group's lists; each group's owners are
// looked up when the queue is taken, not each sample's. The zero value
// is empty and ready. A ScoreQueue is not safe for concurrent use: its
// owner guards it.
type ScoreQueue struct {
	q map[JobKey]*jobScores
}

// jobScores is one job's part of a ScoreQueue.
type jobScores struct {
	where  Placement // as of the job's last Add
	self   string
	groups [][]uint32  // by group, the ids queued
	scores [][]float64 // by group, the score queued with each id
	used   []int       // the groups with ids queued, in the order of their first
	mine   []int8      // by group: 0 unknown, 1 not self's, 2 self among its owners
}

// Add queues the samples of one merged minibatch of a job for their
// owners, as where places them, each with its merged score (scores[i]
// is ids[i]'s; it panics where scores is shorter than ids), and returns
// the ids that self owns (its own share, which never crosses the wire;
// appended to local). The owners of each group are those of where's
// Owners when the queue is taken; whether self is among them is looked
// up once per group until then. A sample whose group is out of where's
// range is dropped.
func (q *ScoreQueue) Add(where Placement, self string, job JobKey, ids []uint32, scores []float64, local []uint32) []uint32 {
	scores = scores[:len(ids)]
	js := q.q[job]
	if js == nil || len(js.groups) != where.Groups {
		if q.q == nil {
			q.q = make(map[JobKey]*jobScores)
		}
		old := js
		js = &jobScores{groups: make([][]uint32, where.Groups), scores: make([][]float64, where.Groups), mine: make([]int8, where.Groups)}
		q.q[job] = js
		if old != nil {
			// The placement's groups changed: what is queued is queued
			// again by the new ones (self's share was returned already).
			for _, g := range old.used {
				q.Add(where, self, job, old.groups[g], old.scores[g], nil)
			}
		}
	}
	js.where, js.self = where, self
	for i, id := range ids {
		g := where.Group(id)
		if uint(g) >= uint(len(js.groups)) {
			continue
		}
		if js.mine[g] == 0 {
			js.mine[g] = 1
			if slices.Contains(where.Owners(g), self) {
				js.mine[g] = 2
			}
		}
		if js.mine[g] == 2 {
			local = append(local, id)
		}
		if len(js.groups[g]) == 0 {
			js.used = append(js.used, g)
		}
		js.groups[g] = append(js.groups[g], id)
		js.scores[g] = append(js.scores[g], scores[i])
	}
	return local
}

// Queued is the number of samples queued, each counted once however many
// owners it has.
func (q *ScoreQueue) Queued() int {
	n := 0
	for _, js := range q.q {
		for _, g := range js.used {
			n += len(js.groups[g])
		}
	}
	return n
}

// Take empties the queue and returns what it held: job -> owner -> the
// scores message of the samples queued for it, group by group (in the
// order each group was first queued), repeats included, each with its
// score; Mean is left for the caller, who sends the running mean as it
// stands then. Self's own share is left out, and an owner of nothing
// but that has no entry. The caller owns the maps and messages. The
// queue keeps its lists' memory for what is queued next.
func (q *ScoreQueue) Take() map[JobKey]map[string]*ScoresReq {
	if q.q == nil {
		return nil
	}
	taken := make(map[JobKey]map[string]*ScoresReq, len(q.q))
	for job, js := range q.q {
		if len(js.used) == 0 {
			delete(q.q, job) // nothing since the last take: its memory goes
			continue
		}
		// Each owner's message is made to its size at once.
		owners := make([][]string, len(js.used))
		sizes := make(map[string]int)
		for i, g := range js.used {
			owners[i] = js.where.Owners(g)
			for _, owner := range owners[i] {
				if owner != js.self {
					sizes[owner] += len(js.groups[g])
				}
			}
		}
		byOwner := make(map[string]*ScoresReq, len(sizes))
		for owner, n := range sizes {
			byOwner[owner] = &ScoresReq{Dataset: job.Dataset, Job: job.Job, IDs: make(U32s, 0, n), Scores: make(F64s, 0, n)}
		}
		for i, g := range js.used {
			for _, owner := range owners[i] {
				if req := byOwner[owner]; req != nil {
					req.IDs = append(req.IDs, js.groups[g]...)
					req.Scores = append(req.Scores, js.scores[g]...)
				}
			}
			js.groups[g], js.scores[g], js.mine[g] = js.groups[g][:0], js.scores[g][:0], 0
		}
		js.used = js.used[:0]
		if len(byOwner) > 0 {
			taken[job] = byOwner
		}
	}
	if len(taken) == 0 {
		return nil
	}
	return taken
}
