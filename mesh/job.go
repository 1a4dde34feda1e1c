package mesh

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/mesh/orders"
	"github.com/shade-mesh/shade/mesh/scores"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/samplekey"
)

// DefaultJob is the name trainers may give a dataset's default job, the
// one they get when they name none. Inside the mesh and on the wire it is
// the empty name.
const DefaultJob = "default"

// ErrTooManyJobs refuses a new job on a dataset that has Config.MaxJobs.
var ErrTooManyJobs = codedError{"ERR", "mesh: too many jobs"}

// jobState is one training job on a dataset: its score table (the
// leader's, or a replica of it), the orders this node holds, and the
// leader's state while this node leads. The dataset's samples and the
// node's cache are shared by all its jobs.
type jobState struct {
	ds   *datasetState
	name string // "" for the dataset's default job

	scores *scores.Table
	book   *orders.Book
	lead   atomic.Pointer[leader.Job]
	// installed, on the leader, is closed once the order it published
	// last is installed here: each order waits for the one before it, so
	// that orders published together (epochs 0 and 1 ahead) are installed
	// in their sequence though each waits for its own delivery.
	installed atomic.Pointer[chan struct{}]

	// lookMu orders the hand-over of orders to a Lookahead policy;
	// looked is the newest handed over, lookReads the reads it gave.
	lookMu    sync.Mutex
	looked    *wire.PublishMsg
	lookReads int

	// owned holds the job's newest scores of the samples this node owns,
	// by sample (NaN: none), as the ring stands (Node.followRingScores):
	// the policy weighs a sample by the sum over the jobs. Under
	// Node.polMu.
	owned []float32
	// stamps are those of the scores in owned, so that a score that
	// arrives after a newer one of its sample is dropped. Under
	// Node.polMu.
	stamps scores.Stamps
	mean   float64 // the job's running mean score, under Node.polMu
	// forgotten is set, under Node.polMu, once the job is dropped and
	// its scores forgotten (forgetJobScores): none are kept after.
	forgotten bool

	reports, reported atomic.Int64
	active            atomic.Int64 // unix nanoseconds of the job's last join, done, report or order here

	// On the leader, for aligning other jobs' orders with this one's
	// (alignedScores) and holding them for it (jobsync.go): what it knows
	// of the job's orders of the last few epochs drawn here, by epoch.
	// With orders ahead the ranks read the epoch before the last drawn.
	progMu sync.Mutex
	prog   map[int]*epochProgress

	// start holds the ranks trained here before they begin an epoch
	// whose order they hold, for the dataset's other jobs (awaitStart).
	startMu sync.Mutex
	start   startHold
	// heldStarts counts the ranks' starts of an epoch awaitStart held,
	// heldStartNanos the time they waited in all.
	heldStarts, heldStartNanos atomic.Int64
	// parts counts the orders installed here as this node's part of
	// them (wire.PublishMsg.Part), from a relay.
	parts atomic.Int64

	// published is when this node, as leader, last published one of the
	// job's orders, and that order's epoch (see recentlyPublished).
	published atomic.Pointer[publishMark]

	// reached holds, by rank trained here, the newest epoch whose done
	// reached the leader, and which leader took it (noteDoneReached).
	reachedMu sync.Mutex
	reached   map[int]doneMark

	// Reads of the job's trainers on this node: all, those served from
	// memory (here, a peer's or the read-ahead's), and those that went to
	// the source, with their bytes.
	reads, hits, sourceReads, sourceBytes atomic.Int64
}

// canonicalJob maps the name a trainer gives a job to the mesh's: ""
// and DefaultJob are the default job, "".
func canonicalJob(name string) string {
	if name == DefaultJob {
		return ""
	}
	return name
}

// checkJob returns the mesh's name of a job a trainer or peer names, or
// an error if the name could not name one.
func checkJob(name string) (string, error) {
	name = canonicalJob(name)
	if name == "" {
		return name, nil
	}
	if err := samplekey.ValidName(name); err != nil {
		return "", fmt.Errorf("%w: job name: %w", ErrConfig, err)
	}
	return name, nil
}

// displayJob is the name of a job in stats and logs.
func displayJob(name string) string {
	if name == "" {
		return DefaultJob
	}
	return name
}

func (js *jobState) touch() { js.active.Store(time.Now().UnixNano()) }

// publishMark is an epoch this node published an order of, and when.
type publishMark struct {
	epoch int
	at    time.Time
}

// recentlyPublished reports whether this node published the job's order
// of epoch less than within ago.
func (js *jobState) recentlyPublished(epoch int, within time.Duration) bool {
	m := js.published.Load()
	return m != nil && m.epoch == epoch && time.Since(m.at) < within
}

// epochProgress is, on the leader, what it knows of a job's order of one
// epoch: where in the aligned key order it began (its phase), when it was
// drawn, and how far the job's ranks have read it: when the first of
// them reported a sample of it, and how many samples they reported.
type epochProgress struct {
	start    float64
	drawn    time.Time
	reported time.Time // zero until the first report
	done     int64
}

// keptProgress is how many epochs of progress a job keeps: the epoch
// drawn last, the one its ranks read (the one before with orders
// ahead), and the one before that, which the other jobs may still read.
const keptProgress = 3

// began notes that the job's order of epoch was drawn to begin at phase
// (a fraction of the aligned key order). It forgets the progress of
// epochs not kept, and of later ones (those of a generation before).
func (js *jobState) began(epoch int, phase float64) {
	js.progMu.Lock()
	defer js.progMu.Unlock()
	if js.prog == nil {
		js.prog = make(map[int]*epochProgress)
	}
	for e := range js.prog {
		if e > epoch || e <= epoch-keptProgress {
			delete(js.prog, e)
		}
	}
	js.prog[epoch] = &epochProgress{start: phase, drawn: time.Now()}
}

// noteReported counts n samples of epoch reported by the job's trainers.
func (js *jobState) noteReported(epoch, n int) {
	js.progMu.Lock()
	defer js.progMu.Unlock()
	if p := js.prog[epoch]; p != nil {
		if p.done == 0 {
			p.reported = time.Now()
		}
		p.done += int64(n)
	}
}

// progress is where in the aligned key order the job's order of epoch
// began, how many of its samples were reported, and when the ranks began
// reading it: their first report of it, or before any its drawing. ok is
// false if that order was not drawn here, or is no longer kept.
func (js *jobState) progress(epoch int) (start float64, done int64, at time.Time, ok bool) {
	js.progMu.Lock()
	defer js.progMu.Unlock()
	p := js.prog[epoch]
	if p == nil {
		return 0, 0, time.Time{}, false
	}
	at = p.drawn
	if p.done > 0 {
		at = p.reported
	}
	return p.start, p.done, at, true
}

// idle is how long the job has had no join, done, report or order here.
func (js *jobState) idle(now time.Time) time.Duration {
	return now.Sub(time.Unix(0, js.active.Load()))
}

func (js *jobState) leaderJob() *leader.Job { return js.lead.Load() }

// setLeaderJob makes lj (nil for none) the job's leader state and retires
// the one it replaces, so that its timers publish nothing.
func (js *jobState) setLeaderJob(lj *leader.Job) {
	if old := js.lead.Swap(lj); old != nil && old != lj {
		old.Retire()
	}
}

func (js *jobState) headTerm() uint64 {
	_, _, t := js.book.Head()
	return t
}

// state is what this node knows of the job, for a new leader.
func (js *jobState) state() wire.JobState {
	st := js.book.State(js.ds.name)
	st.Job = js.name
	return st
}

// tableInfo describes this node's copy of the job's score table.
func (js *jobState) tableInfo() wire.TableInfo {
	ti := js.scores.Info(js.ds.name)
	ti.Job = js.name
	return ti
}

// Head implements readahead.Dataset's Head for a job of the dataset: the
// newest order's generation and the epoch being trained: the newest
// order's, or where orders run ahead the one before it (-1 for none).
func (ds *datasetState) Head(job string) (gen uint64, epoch int) {
	js := ds.lookupJob(job)
	if js == nil {
		return 0, -1
	}
	p := js.book.Newest()
	if p == nil {
		return 0, -1
	}
	return p.Gen, p.TrainingEpoch()
}

// lookupJob returns the dataset's job of that name, or nil.
func (ds *datasetState) lookupJob(name string) *jobState {
	if name == "" {
		return ds.def
	}
	ds.jobsMu.RLock()
	defer ds.jobsMu.RUnlock()
	return ds.jobs[name]
}

// jobList returns the dataset's jobs, the default job first, then by name.
func (ds *datasetState) jobList() []*jobState {
	ds.jobsMu.RLock()
	out := make([]*jobState, 0, len(ds.jobs))
	for _, js := range ds.jobs {
		out = append(out, js)
	}
	ds.jobsMu.RUnlock()
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out
}

// jobCount is the number of the dataset's jobs, the default job counted.
func (ds *datasetState) jobCount() int {
	ds.jobsMu.RLock()
	defer ds.jobsMu.RUnlock()
	return len(ds.jobs)
}

// newJob makes the state of a job of ds on this node: a fresh score table
// whose sampler seed is the node's seed, the dataset's ordinal and the
// job's name; an empty order book. It is not yet registered.
func (n *Node) newJob(ds *datasetState, name string) *jobState {
	js := &jobState{ds: ds, name: name}
	seed := uint64(ds.ordinal)
	if name != "" {
		seed ^= xxhash.Sum64String(name)
	}
	js.scores = scores.New(ds.len, n.cfg.Alpha, n.cfg.Score, rand.New(rand.NewPCG(n.cfg.Seed, seed)))
	js.book = orders.New(n.cfg.KeepEpochs)
	js.touch()
	return js
}

// startJob registers js on its dataset and wires it to the node: saved
// scores, the order hook, and the leader's state if this node leads.
func (n *Node) startJob(js *jobState) {
	ds := js.ds
	js.book.OnInstall(func(p *wire.PublishMsg) {
		n.trace.Epoch(p.Epoch)
		n.orderInstalled(js, p)
	})
	ds.jobsMu.Lock()
	ds.jobs[js.name] = js
	ds.jobsMu.Unlock()
	if n.cfg.StateDir != "" {
		// Registered first: the policy weighs the scores over the jobs.
		if err := n.loadScores(js); err != nil {
			n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Str("job", displayJob(js.name)).Msg("saved scores unreadable: starting cold")
		}
	}
	if n.lead.leading() {
		// Not setLeaderJob: a rank's join may have found the job (it is
		// registered above) and started its leader state already
		// (jobToLead); replacing that would lose the join.
		js.lead.CompareAndSwap(nil, leader.New(n.jobConfig(js)))
	}
}

// job returns the dataset's job of that name; with create, a job the node
// does not know yet is started, up to Config.MaxJobs per dataset.
func (n *Node) job(ds *datasetState, name string, create bool) (*jobState, error) {
	name, err := checkJob(name)
	if err != nil {
		return nil, err
	}
	if js := ds.lookupJob(name); js != nil {
		return js, nil
	}
	if !create {
		return nil, fmt.Errorf("%w: no job %q of %s", ErrUnknownJob, name, ds.name)
	}
	n.jobsMu.Lock() // one job started at a time, so the count holds
	defer n.jobsMu.Unlock()
	if js := ds.lookupJob(name); js != nil {
		return js, nil
	}
	if ds.jobCount() >= n.cfg.MaxJobs {
		retired := "jobs are not retired (--job-idle)"
		if n.cfg.JobIdle > 0 {
			retired = fmt.Sprintf("a job idle for %s is retired", n.cfg.JobIdle)
		}
		return nil, fmt.Errorf("%w: %s has %d jobs (--max-jobs); %s", ErrTooManyJobs, ds.name, n.cfg.MaxJobs, retired)
	}
	js := n.newJob(ds, name)
	n.startJob(js)
	n.cfg.Logger.Info().Str("dataset", ds.name).Str("job", name).Msg("job started")
	return js, nil
}

// dropJob forgets a named job on this node: its orders, its share of the
// policy's importance and its reads ahead. Its scores are saved first
// where the node keeps state.
func (n *Node) dropJob(js *jobState) {
	ds := js.ds
	if js.name == "" {
		return // the default job is reset, never dropped
	}
	ds.jobsMu.Lock()
	if ds.jobs[js.name] != js {
		ds.jobsMu.Unlock()
		return
	}
	delete(ds.jobs, js.name)
	ds.jobsMu.Unlock()
	if old := js.lead.Swap(nil); old != nil {
		// The leader's own retirement drops the job from within its
		// publication, with the job's lock held.
		n.goBackground(func(context.Context) { old.Retire() })
	}
	js.book.Wake()
	if n.cfg.StateDir != "" {
		if err := js.scores.Save(n.scoresPath(js), ds.manifest.Version); err != nil {
			n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Str("job", js.name).Msg("saving a retired job's scores")
		}
	}
	n.forgetJobScores(js)
	n.cfg.Logger.Info().Str("dataset", ds.name).Str("job", js.name).Msg("job retired")
}

// maxRetired bounds how many retired job names a dataset remembers.
const maxRetired = 4096

// noteRetired remembers that the job name was retired with generation
// gen. An order of the job of an older generation that arrives later (a
// publication sent before the retirement and delayed, or retried) is then
// refused instead of starting the job again on this node, where nothing
// would retire it; and a job of the same name started later begins at
// generation gen (leader.Config.Gen), so that its orders are not refused.
func (ds *datasetState) noteRetired(name string, gen uint64) {
	ds.jobsMu.Lock()
	defer ds.jobsMu.Unlock()
	if old, ok := ds.retired[name]; ok {
		ds.retired[name] = max(old, gen)
		return
	}
	if len(ds.retiredNames) >= maxRetired {
		delete(ds.retired, ds.retiredNames[0])
		ds.retiredNames = ds.retiredNames[1:]
	}
	ds.retired[name] = gen
	ds.retiredNames = append(ds.retiredNames, name)
}

// retiredGen returns the generation of the latest retirement of job name
// this node remembers, 0 for none.
func (ds *datasetState) retiredGen(name string) uint64 {
	ds.jobsMu.RLock()
	defer ds.jobsMu.RUnlock()
	return ds.retired[name]
}

// knownJob returns a job this node knows, or an error that says why not.
func (n *Node) knownJob(dataset, job string) (*jobState, error) {
	ds, err := n.dataset(dataset)
	if err != nil {
		return nil, err
	}
	return n.job(ds, job, false)
}

// allJobs returns every job of every dataset, dataset by dataset.
func (n *Node) allJobs() []*jobState {
	var out []*jobState
	for _, ds := range n.ordered {
		out = append(out, ds.jobList()...)
	}
	return out
}

// retireIdle ends, on the leader, every job whose trainers have been
// silent for Config.JobIdle: a named job is retired on every peer, the
// default job is reset (its world and epochs freed, its scores kept).
func (n *Node) retireIdle() {
	if n.cfg.JobIdle <= 0 || !n.lead.leading() {
		return
	}
	now := time.Now()
	for _, js := range n.allJobs() {
		if js.idle(now) < n.cfg.JobIdle {
			continue
		}
		lj := js.leaderJob()
		if lj == nil {
			continue
		}
		if js.name == "" {
			if p := js.book.Newest(); p != nil && p.Epoch >= 0 {
				n.cfg.Logger.Info().Str("dataset", js.ds.name).Dur("idle", js.idle(now)).Msg("default job idle: reset")
				lj.Reset()
			}
			js.touch()
			continue
		}
		lj.End() // publishes the retirement, which drops the job here too
	}
}

// dropStale forgets, on a node that does not lead, a named job that holds
// no order and has been silent for Config.JobIdle: a trainer asked for
// it but the leader never published it.
func (n *Node) dropStale() {
	if n.cfg.JobIdle <= 0 || n.lead.leading() {
		return
	}
	now := time.Now()
	for _, js := range n.allJobs() {
		if js.name != "" && js.book.Newest() == nil && js.idle(now) >= n.cfg.JobIdle {
			n.dropJob(js)
		}
	}
}

// doneMark is a rank's done that reached the leader: its job's
// generation and epoch, the leader's name, and the highest term this node
// had seen then (leadership.highest).
type doneMark struct {
	gen    uint64
	epoch  int
	leader string
	term   uint64
}

// noteDoneReached records that rank's done of epoch of generation gen
// reached leader, which counted it (Node.Done, the reconciler), while term
// was the highest this node had seen.
func (js *jobState) noteDoneReached(rank int, gen uint64, epoch int, leader string, term uint64) {
	js.reachedMu.Lock()
	defer js.reachedMu.Unlock()
	if js.reached == nil {
		js.reached = make(map[int]doneMark)
	}
	if m, ok := js.reached[rank]; !ok || m.gen != gen || m.epoch <= epoch {
		js.reached[rank] = doneMark{gen: gen, epoch: epoch, leader: leader, term: term}
	}
}

// doneCounted reports whether rank's done of epoch of generation gen, or
// of a later epoch, reached leader while term was the highest this node
// had seen: the reconciler has nothing to repeat to it. A leader of
// another name, or one that took over again since (a restart under its
// name, a step down and back), is told again.
func (js *jobState) doneCounted(rank int, gen uint64, epoch int, leader string, term uint64) bool {
	js.reachedMu.Lock()
	defer js.reachedMu.Unlock()
	m, ok := js.reached[rank]
	return ok && m.covers(gen, epoch, leader) && m.term == term
}

// doneReached reports whether rank's done of epoch of generation gen,
// or of a later epoch, reached leader (noteDoneReached). A rank that
// waits for the next order then has nothing to tell that leader: it knows
// the rank's node and counted the done (Order). A leader of the same
// name that restarted meanwhile learns the dones from every peer's state
// as it takes over, and the reconciler repeats them.
func (js *jobState) doneReached(rank int, gen uint64, epoch int, leader string) bool {
	js.reachedMu.Lock()
	defer js.reachedMu.Unlock()
	m, ok := js.reached[rank]
	return ok && m.covers(gen, epoch, leader)
}

// covers reports whether the done of m is of epoch of generation gen, or
// of a later epoch, and reached leader.
func (m doneMark) covers(gen uint64, epoch int, leader string) bool {
	return leader != "" && m.leader == leader && m.gen == gen && m.epoch >= epoch
}
