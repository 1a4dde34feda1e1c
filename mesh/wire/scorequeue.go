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

// ScoreQueue is the leader's queue of samples whose merged scores their
// owners need: per job, the sample ids by group of the dataset's
// placement (a ring partition: the samples of a group share their
// owners), a sample merged twice before the queue is taken there twice.
// A sample costs a lookup of its group and an append to the group's
// list; each group's owners are looked up when the queue is taken, not
// each sample's. The zero value is empty and ready. A ScoreQueue is not
// safe for concurrent use: its owner guards it.
type ScoreQueue struct {
	q map[JobKey]*jobScores
}

// jobScores is one job's part of a ScoreQueue.
type jobScores struct {
	where  Placement // as of the job's last Add
	self   string
	groups [][]uint32 // by group, the ids queued
	used   []int      // the groups with ids queued, in the order of their first
	mine   []int8     // by group: 0 unknown, 1 not self's, 2 self among its owners
}

// Add queues the samples of one merged minibatch of a job for their
// owners, as where places them, and returns the ids that self owns (its
// own share, which never crosses the wire; appended to local). The
// owners of each group are those of where's Owners when the queue is
// taken; whether self is among them is looked up once per group until
// then. A sample whose group is out of where's range is dropped.
func (q *ScoreQueue) Add(where Placement, self string, job JobKey, ids []uint32, local []uint32) []uint32 {
	js := q.q[job]
	if js == nil || len(js.groups) != where.Groups {
		if q.q == nil {
			q.q = make(map[JobKey]*jobScores)
		}
		old := js
		js = &jobScores{groups: make([][]uint32, where.Groups), mine: make([]int8, where.Groups)}
		q.q[job] = js
		if old != nil {
			// The placement's groups changed: what is queued is queued
			// again by the new ones (self's share was returned already).
			for _, g := range old.used {
				q.Add(where, self, job, old.groups[g], nil)
			}
		}
	}
	js.where, js.self = where, self
	for _, id := range ids {
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
// sample ids queued for it, group by group (in the order each group was
// first queued), repeats included; self's own share is left out, and an
// owner of nothing but that has no entry. The caller owns the maps and
// slices.
func (q *ScoreQueue) Take() map[JobKey]map[string][]uint32 {
	if q.q == nil {
		return nil
	}
	taken := make(map[JobKey]map[string][]uint32, len(q.q))
	for job, js := range q.q {
		byOwner := make(map[string][]uint32)
		for _, g := range js.used {
			for _, owner := range js.where.Owners(g) {
				if owner != js.self {
					byOwner[owner] = append(byOwner[owner], js.groups[g]...)
				}
			}
		}
		taken[job] = byOwner
	}
	q.q = nil
	return taken
}

// ScoreSource is a merged score table; *sampling.Table implements it. The
// caller holds whatever lock guards it across ScoresFor.
type ScoreSource interface {
	Score(id uint32) float64
	Mean() float64
}

// ScoresFor builds the scores message of one owner's queued samples of a
// job (one list of a Take), reading each sample's score and the running
// mean from t. A sample queued twice is sent twice, with the same score:
// rare (two ranks training it within one flush), and cheaper for the
// owner to apply twice than for the leader to find.
func ScoresFor(job JobKey, ids []uint32, t ScoreSource) *ScoresReq {
	req := &ScoresReq{Dataset: job.Dataset, Job: job.Job, IDs: ids, Scores: make([]float64, len(ids))}
	for i, id := range ids {
		req.Scores[i] = t.Score(id)
	}
	req.Mean = t.Mean()
	return req
}
