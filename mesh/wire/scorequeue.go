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
// owners: per job, the sample ids in the order merged, each with the
// score the merge gave it, read by the caller as it merged the
// minibatch (the table's memory of those samples is then in the cache;
// read again when the queue is taken, each sample's score was a miss
// per owner), and its group of the dataset's placement (a ring
// partition: the samples of a group share their owners). A sample
// merged twice before the queue is taken is queued twice, with the
// score of each merge. A sample costs a lookup of its group, a count
// and three appends to lists in merge order; each group's owners are
// looked up when the queue is taken, not each sample's (and, while the
// placement's Key stays, kept for the takes after), and the samples are
// then dealt to their owners' messages in one pass over the lists.
// (A list per group cost a cache miss or more a sample where the groups
// are many: 16,381 to 64,513 partitions for 1,000 peers.) The zero value is empty
// and ready. A ScoreQueue is not safe for concurrent use: its owner guards
// it.
type ScoreQueue struct {
	q map[JobKey]*jobScores
}

// jobScores is one job's part of a ScoreQueue.
type jobScores struct {
	where  Placement // as of the job's last Add
	self   string
	ids    []uint32  // queued, in the order merged
	scores []float32 // the score queued with each id, as the table keeps it
	seqs   []uint32  // the seq of each (Merged), 0 where it has none
	term   uint64    // the term of the stamped scores queued (Merged)
	groups []int32   // each id's group
	used   []int32   // the groups with ids queued, in the order of their first
	queued []int32   // by group, its ids queued
	// What is known of the groups' owners: kept while where.Key stays
	// (and is not nil), else forgotten at each take.
	key   any
	mine  []int8  // by group: 0 unknown, 1 not self's, 2 self among its owners
	at    []int32 // by group: where its owners' slots start in slots, plus one (0: not looked up)
	count []int32 // by group: how many
	slots []int32 // slots, each an owner other than self: 2 * its index of names, + 1 to keep
	// passed says whether the slots were found for a take that passes
	// scores on (see Take).
	passed bool
	names  []string
	slot   map[string]int32 // names' indexes
}

// forget drops what is known of the groups' owners.
func (js *jobScores) forget() {
	clear(js.mine)
	clear(js.at)
	js.slots, js.names, js.slot = js.slots[:0], js.names[:0], nil
}

// Add queues the samples of one merged minibatch of a job for their
// owners, as where places them, each with its merged score and stamp (it
// panics where m.Scores, or m.Seqs if not nil, is shorter than m.IDs),
// and returns the ids that self owns (its own share, which never crosses
// the wire; appended to local). The owners of each group are those of
// where's Owners when the queue is taken; whether self is among them is
// looked up once per group until then, or, while where's Key stays, once
// for as long. A sample whose group is out of where's range is dropped.
// Stamped scores of an earlier term than the job's queued ones are
// dropped, and those queued are dropped for scores of a later term: a
// leader that takes over sends every owner its scores.
func (q *ScoreQueue) Add(where Placement, self string, job JobKey, m Merged, local []uint32) []uint32 {
	ids, scores := m.IDs, m.Scores[:len(m.IDs)]
	if m.Seqs != nil {
		m.Seqs = m.Seqs[:len(ids)]
	}
	js := q.q[job]
	if js != nil && m.HasStamps() && m.Term != js.term {
		if m.Term < js.term {
			return local
		}
		js.drop()
		js.term = m.Term
	}
	if js == nil || len(js.mine) != where.Groups {
		if q.q == nil {
			q.q = make(map[JobKey]*jobScores)
		}
		old := js
		n := where.Groups
		js = &jobScores{queued: make([]int32, n), mine: make([]int8, n), at: make([]int32, n), count: make([]int32, n), key: where.Key, term: m.Term}
		q.q[job] = js
		if old != nil {
			// The placement's groups changed: what is queued is queued
			// again by the new ones (self's share was returned already).
			js.term = old.term
			q.Add(where, self, job, Merged{Term: old.term, IDs: old.ids, Scores: old.scores, Seqs: old.seqs}, nil)
		}
	}
	if where.Key != js.key || self != js.self {
		js.forget()
		js.key = where.Key
	}
	js.where, js.self = where, self
	// The groups first, in a pass of their own (where.GroupsOf): each is
	// a lookup at random in a table of megabytes (a sample's partition),
	// and with nothing waiting on them the lookups overlap, where the
	// counting below, at an address each one's result gives, held them
	// one at a time. They are written where the ids' groups go, and the
	// pass below keeps those of the ids it queues.
	start := len(js.groups)
	js.groups = slices.Grow(js.groups, len(ids))[:start+len(ids)]
	where.GroupsOf(ids, js.groups[start:])
	kept := start
	seqs, seq := m.Seqs, m.Seq
	for i, id := range ids {
		g := int(js.groups[start+i])
		if uint(g) >= uint(len(js.mine)) {
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
		if js.queued[g] == 0 {
			js.used = append(js.used, int32(g))
		}
		js.queued[g]++
		js.ids = append(js.ids, id)
		js.scores = append(js.scores, scores[i])
		if seqs != nil {
			seq = seqs[i]
		}
		js.seqs = append(js.seqs, seq)
		js.groups[kept] = int32(g)
		kept++
	}
	js.groups = js.groups[:kept]
	return local
}

// Queued is the number of samples queued, each counted once however many
// owners it has.
func (q *ScoreQueue) Queued() int {
	n := 0
	for _, js := range q.q {
		n += len(js.ids)
	}
	return n
}

// Take empties the queue and returns what it held: job -> owner -> the
// scores message of the samples queued for it, in the order they were
// merged, repeats included, each with its score; Mean is left for the
// caller, who sends the running mean as it stands then. Self's own share
// is left out, and an owner of nothing but that has no entry. The caller
// owns the maps and messages. The queue keeps its lists' memory for what
// is queued next.
//
// With pass (the leader's queue), the samples of a group that self does
// not own and that has more than one owner go to its first owner alone,
// to pass on to the others (ScoresReq.Pass): the leader sends each such
// sample once, not once per owner. Without it every owner is sent its
// samples itself (a member passing scores on: never passed on twice).
func (q *ScoreQueue) Take(pass bool) map[JobKey]map[string]*ScoresReq {
	if q.q == nil {
		return nil
	}
	taken := make(map[JobKey]map[string]*ScoresReq, len(q.q))
	for job, js := range q.q {
		if len(js.ids) == 0 {
			delete(q.q, job) // nothing since the last take: its memory goes
			continue
		}
		if byOwner := js.take(job, pass); len(byOwner) > 0 {
			taken[job] = byOwner
		}
	}
	if len(taken) == 0 {
		return nil
	}
	return taken
}

// take is Take for one job with samples queued: each group's owners
// other than self get a slot (where not known already): an owner's slot
// 2k to pass the samples on, 2k+1 to keep them, k its index in names.
// The samples each slot gets are counted from its groups', which places
// each owner's part in one array of ids and one of scores for all, those
// to pass on first; a pass over the samples puts each in its owners'
// parts. Each owner's message is its part of the two arrays
// (capacity-limited).
func (js *jobScores) take(job JobKey, pass bool) map[string]*ScoresReq {
	if pass != js.passed {
		js.forget() // the groups' slots depend on it
		js.passed = pass
	}
	if js.slot == nil {
		js.slot = make(map[string]int32)
	}
	for _, g := range js.used {
		if js.at[g] != 0 {
			continue
		}
		start := len(js.slots)
		owners := js.where.Owners(int(g))
		first := pass && len(owners) > 1 && !slices.Contains(owners, js.self)
		for _, owner := range owners {
			if owner == js.self {
				continue
			}
			k, ok := js.slot[owner]
			if !ok {
				k = int32(len(js.names))
				js.slot[owner] = k
				js.names = append(js.names, owner)
			}
			if first {
				js.slots = append(js.slots, 2*k) // it passes them on to the others
				break
			}
			js.slots = append(js.slots, 2*k+1)
		}
		js.at[g], js.count[g] = int32(start)+1, int32(len(js.slots)-start)
	}
	// next[s] is where slot s's next sample goes: its part's start, once
	// the counts are summed.
	slots := 2 * len(js.names)
	next := make([]int, slots+1)
	for _, g := range js.used {
		for _, s := range js.slotsOf(g) {
			next[s+1] += int(js.queued[g])
		}
	}
	for s := range slots {
		next[s+1] += next[s]
	}
	byOwner := make(map[string]*ScoresReq)
	ids, scores, seqs := make(U32s, next[slots]), make(F32s, next[slots]), make(U32s, next[slots])
	for k, owner := range js.names {
		if lo, hi := next[2*k], next[2*k+2]; hi > lo {
			byOwner[owner] = &ScoresReq{Dataset: job.Dataset, Job: job.Job, IDs: ids[lo:hi:hi], Scores: scores[lo:hi:hi],
				Pass: next[2*k+1] - lo, Term: js.term, Seqs: seqs[lo:hi:hi]}
		}
	}
	for i, g := range js.groups {
		id, score, seq := js.ids[i], js.scores[i], js.seqs[i]
		for _, s := range js.slotsOf(g) {
			p := next[s]
			ids[p], scores[p], seqs[p] = id, score, seq
			next[s] = p + 1
		}
	}
	js.drop()
	if js.key == nil {
		js.forget()
	}
	return byOwner
}

// drop empties the job's queue.
func (js *jobScores) drop() {
	for _, g := range js.used {
		js.queued[g] = 0
	}
	js.ids, js.scores, js.seqs, js.groups, js.used = js.ids[:0], js.scores[:0], js.seqs[:0], js.groups[:0], js.used[:0]
}

// slotsOf is group g's slots, once take has looked its owners up.
func (js *jobScores) slotsOf(g int32) []int32 {
	return js.slots[js.at[g]-1:][:js.count[g]]
}
