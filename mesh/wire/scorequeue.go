package wire

import "github.com/shade-mesh/shade/protocol/samplekey"

// Owners lists the owners of a sample key; *ring.Ring implements it.
// AppendOwners appends to dst and returns it; it must be safe to call
// while the caller holds its own locks.
type Owners interface {
	AppendOwners(dst []string, key []byte) []string
}

// JobKey names one job of one dataset: Job is "" for its default job.
type JobKey struct{ Dataset, Job string }

// ScoreQueue is the leader's queue of samples whose merged scores their
// owners need: per owner, per job, a set of sample ids. The zero value
// is empty and ready. A ScoreQueue is not safe for concurrent use: its
// owner guards it.
type ScoreQueue struct {
	q map[string]map[JobKey]map[uint32]struct{} // owner -> job -> ids
}

// Add queues the samples of one merged minibatch of a job for their
// owners as r places them, and returns the ids that self owns (its own
// share, which never crosses the wire; appended to local). It builds the
// key of each sample once into one reused buffer and looks each owner's
// set up once per call.
func (q *ScoreQueue) Add(r Owners, self string, job JobKey, ids []uint32, local []uint32) []uint32 {
	dataset := job.Dataset
	var (
		key    = make([]byte, 0, len(dataset)+11)
		owners []string
		sets   = make(map[string]map[uint32]struct{}) // owner -> its queued ids of dataset
	)
	for _, id := range ids {
		key = samplekey.Append(key[:0], dataset, int(id))
		owners = r.AppendOwners(owners[:0], key)
		for _, owner := range owners {
			if owner == self {
				local = append(local, id)
				continue
			}
			set := sets[owner]
			if set == nil {
				if q.q == nil {
					q.q = make(map[string]map[JobKey]map[uint32]struct{})
				}
				byJob := q.q[owner]
				if byJob == nil {
					byJob = make(map[JobKey]map[uint32]struct{})
					q.q[owner] = byJob
				}
				if set = byJob[job]; set == nil {
					set = make(map[uint32]struct{})
					byJob[job] = set
				}
				sets[owner] = set
			}
			set[id] = struct{}{}
		}
	}
	return local
}

// Len is the number of owners with queued samples.
func (q *ScoreQueue) Len() int { return len(q.q) }

// Take empties the queue and returns what it held: owner -> job -> set
// of sample ids. The caller owns the maps.
func (q *ScoreQueue) Take() map[string]map[JobKey]map[uint32]struct{} {
	taken := q.q
	q.q = nil
	return taken
}

// ScoreSource is a merged score table; *sampling.Table implements it. The
// caller holds whatever lock guards it across ScoresFor.
type ScoreSource interface {
	Score(id uint32) float64
	Mean() float64
}

// ScoresFor builds the scores message of one owner's queued samples of
// a job (one set of a Take), reading each sample's score and the running
// mean from t.
func ScoresFor(job JobKey, ids map[uint32]struct{}, t ScoreSource) *ScoresReq {
	req := &ScoresReq{Dataset: job.Dataset, Job: job.Job, IDs: make([]uint32, 0, len(ids)), Scores: make([]float64, 0, len(ids))}
	for id := range ids {
		req.IDs = append(req.IDs, id)
		req.Scores = append(req.Scores, t.Score(id))
	}
	req.Mean = t.Mean()
	return req
}
