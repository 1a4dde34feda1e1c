package wire

// Owners returns the owners of one dataset's sample by its index, primary
// first. The slice is the implementation's: the caller reads it and does
// not keep it. It must be safe to call while the caller holds its own
// locks.
type Owners func(id uint32) []string

// JobKey names one job of one dataset: Job is "" for its default job.
type JobKey struct{ Dataset, Job string }

// ScoreQueue is the leader's queue of samples whose merged scores their
// owners need: per job, per owner, the sample ids (a sample merged twice
// before the queue is taken is there twice). The
// zero value is empty and ready. A ScoreQueue is not safe for concurrent
// use: its owner guards it.
type ScoreQueue struct {
	q map[JobKey]map[string]*[]uint32 // job -> owner -> ids
}

// Add queues the samples of one merged minibatch of a job for their
// owners, as ownersOf places them, and returns the ids that self owns
// (its own share, which never crosses the wire; appended to local). Each
// sample costs one lookup of each of its owners' lists.
func (q *ScoreQueue) Add(ownersOf Owners, self string, job JobKey, ids []uint32, local []uint32) []uint32 {
	lists := q.q[job]
	for _, id := range ids {
		for _, owner := range ownersOf(id) {
			if owner == self {
				local = append(local, id)
				continue
			}
			list := lists[owner]
			if list == nil {
				if lists == nil {
					if q.q == nil {
						q.q = make(map[JobKey]map[string]*[]uint32)
					}
					lists = make(map[string]*[]uint32)
					q.q[job] = lists
				}
				list = new([]uint32)
				lists[owner] = list
			}
			*list = append(*list, id)
		}
	}
	return local
}

// Len is the number of owners with queued samples, counted once per job.
func (q *ScoreQueue) Len() int {
	n := 0
	for _, lists := range q.q {
		n += len(lists)
	}
	return n
}

// Take empties the queue and returns what it held: job -> owner -> the
// sample ids queued, in the order they were, repeats included. The caller
// owns the maps and slices.
func (q *ScoreQueue) Take() map[JobKey]map[string][]uint32 {
	if q.q == nil {
		return nil
	}
	taken := make(map[JobKey]map[string][]uint32, len(q.q))
	for job, lists := range q.q {
		byOwner := make(map[string][]uint32, len(lists))
		for owner, list := range lists {
			byOwner[owner] = *list
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
