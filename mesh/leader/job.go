// Package leader holds the leader's state of each dataset's job and its
// decisions: the node each rank trains on, which ranks finished the newest
// epoch, when the next epoch's order is due, how an order is drawn and
// split among the ranks, how a new leader rebuilds a job from what the
// peers report, and whether an order received from a peer is sound.
//
// It sends nothing and starts no goroutine: package mesh gathers the
// peers' states, runs the timers a Job asks of Config.After, and installs
// and broadcasts the orders a Job hands to Config.Publish. leader imports
// only mesh/wire, sampling and zerolog; it must not import mesh,
// memberlist (mesh/member), QUIC (transport/peer), store or any other
// network package.
package leader

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/sampling"
)

var (
	// ErrBadRequest refuses a join or done that no job could take: a rank
	// outside its world, a world over Config.MaxWorld, a done for an epoch
	// not yet published.
	ErrBadRequest = errors.New("leader: bad request")
	// ErrWorldMismatch refuses a join with a world other than the job's.
	ErrWorldMismatch = errors.New("leader: world size differs from the job's")
)

// refusal is a request a Job refuses. errors.Is matches its kind; its text
// is the explanation alone, without a prefix, since mesh sends it to the
// asking node as the message of a coded wire error.
type refusal struct {
	kind error
	msg  string
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.kind }

func refuse(kind error, format string, args ...any) error {
	return &refusal{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Scores draws an epoch's order and its weights from a dataset's score
// table with a sampler, preferring the resident samples (a bitmap, nil
// for none), and says how many samples had a score; *scores.Table is one.
type Scores interface {
	Draw(s *sampling.Sampler, epoch int, resident []uint64) (d sampling.Drawn, scored int, err error)
}

// GroupedScores is Scores that may hand an order with the group of each
// of its places looked up already (sampling.GroupOrder): a mesh prepares
// each dataset's epoch 0, the same aligned permutation for every job of
// it, grouped by partition, before any job asks. A Job draws through
// DrawGrouped where it has a placement.
type GroupedScores interface {
	Scores
	// DrawGrouped is Draw, with the order's groups for where, or a nil
	// Grouped where it has none (the caller looks them up); a Grouped's
	// order is d.Order. The order and the Grouped may be the table's
	// own, shared: the caller reads them and does not write them.
	DrawGrouped(s *sampling.Sampler, epoch int, resident []uint64, where sampling.Placement) (d sampling.Drawn, g *sampling.Grouped, scored int, err error)
}

// Config is what a Job needs of its dataset and its node. Every field but
// Gen, Placement, Resident, EpochDeadline, Hold and Logger is required.
type Config struct {
	Dataset, Version string
	// Job names the dataset's job ("" for its default job); it is stamped
	// on every order.
	Job string
	// Gen is the job's first generation: 0 for a name not used before,
	// or the generation of its name's latest retirement, so that the
	// peers can tell this job's orders from delayed ones of the job
	// retired before it (which are older).
	Gen uint64
	// MaxWorld bounds the world size of a job.
	MaxWorld int
	// NewSampler returns a sampler in its initial state, for a new job
	// generation.
	NewSampler func() *sampling.Sampler
	Scores     Scores
	// Placement says which nodes own each sample as the mesh stands when
	// an order is drawn: each rank is given the samples its node owns
	// where it can (sampling.LocalitySplit). nil splits orders without
	// regard to owners (sampling.Split).
	Placement func() sampling.Placement
	// Resident returns a bitmap of the samples the draws should prefer as
	// this node sees them (bit i%64 of word i/64): those it caches now;
	// nil means none. The other nodes' cached samples come with their
	// ranks' dones.
	Resident func() []uint64
	// Term returns the leader's term, stamped on every order.
	Term func() uint64
	// Publish installs an order on this node and sends it to every peer;
	// scored is how many samples had a score when it was drawn (0 for the
	// empty order of a reset, whose Epoch is -1). A Job calls it with its
	// lock held, in the order it decides on orders: it must not block nor
	// call back into the Job, and it owns p.
	Publish func(p *wire.PublishMsg, scored int)
	// JoinWait is how long epoch 0 waits for every rank to join, from the
	// first; then it is published for the ranks that joined.
	JoinWait time.Duration
	// Ahead is how many epochs the orders run ahead of training, 0 or 1.
	// With 0, epoch e+1 is drawn once every rank finished e, from every
	// score reported by then. With 1, epochs 0 and 1 are published
	// together, and epoch e+2 once every rank finished e, from the scores
	// of epochs up to e: each order is known an epoch before it is read,
	// so the caches and the ranks see past the epoch's end.
	Ahead int
	// AheadAt, with Ahead 0, runs the job's orders an epoch ahead (as
	// Ahead 1) once the ranks waited for an order more than this share of
	// their time in AheadAfter epochs in a row: the order took the leader
	// more than AheadAt of the time from the start of its drawing to the
	// end of the epoch it was drawn for, and at least MinDraw.
	// Drawing ahead then hides the draw behind the epoch before. The
	// order of the epoch whose due may turn them ahead is drawn while the
	// ranks train the epoch before it, as an order ahead would be, in
	// case they turn (a speculation, let go if not), and that draw counts
	// as the next in the row: the order of epoch 1 is drawn while epoch 0
	// trains, and where both draws took too long, the ranks wait for
	// epoch 0's order alone. 0 never does.
	AheadAt float64
	// MinDraw is the shortest draw of an order that counts towards
	// AheadAt; 0 means MinAheadDraw.
	MinDraw time.Duration
	// DrawFirstAt is the fewest samples of a dataset whose epoch 0 is
	// drawn as soon as the first rank of a world of more joins, while the
	// others join: they then wait for its split among them alone. 0
	// means DefaultDrawFirstAt; below 0, never.
	DrawFirstAt int
	// Now tells the time, for AheadAt; nil means time.Now.
	Now func() time.Time
	// EpochDeadline publishes the next epoch this long after the first
	// rank finished the one being trained, without the ranks that have
	// not; 0 means never.
	EpochDeadline time.Duration
	// Hold says how long the publication of epoch, due now that every
	// rank finished the epoch before it, should wait for the dataset's
	// other jobs to catch up; 0 or less publishes now. A held epoch is
	// published when Release finds Hold at 0, or when the first wait
	// has passed, whichever comes first. nil never holds. A Job calls it
	// with its lock held: it must not block nor call into any Job.
	// Orders that run ahead are not held: their ranks hold the order of
	// the epoch before the one due already. Their start is held, if at
	// all, where they read it (the mesh answers their dones with a wait).
	Hold func(epoch int) time.Duration
	// After calls fn once d has passed, on a goroutine the caller owns; it
	// may drop fn if the node closes first. It must not block: a Job calls
	// it with its lock held. A Job also draws its orders ahead through it
	// (d 0), off the path of the done that made one due.
	After func(d time.Duration, fn func())
	// Logger receives the timers' publications, the switch to orders
	// ahead and errors; the Job names its dataset, not its job (the
	// caller names it as it shows it).
	Logger zerolog.Logger
}

const (
	// DefaultAheadAt is the share of the ranks' time that a node's
	// default Config.AheadAt lets them wait for orders (shade-peer
	// --order-ahead-at): at a rank on each of 1,000 peers on 1.28 M
	// samples the order takes 0.32-0.45 of the epoch
	// (test/results/scale.md).
	DefaultAheadAt = 0.1
	// MinAheadDraw is the shortest draw of an order that counts towards
	// orders ahead by default (Config.MinDraw): a shorter wait costs the
	// ranks less than the hits that orders drawn from older scores lose
	// (test/results/pads-v2.md).
	MinAheadDraw = 50 * time.Millisecond
	// DefaultDrawFirstAt is Config.DrawFirstAt's default: a draw of fewer
	// samples takes a few milliseconds (about 100 ns a sample: 123 ms at
	// 1.28 M on 2 cores, test/results/scale.md), not worth drawing apart.
	DefaultDrawFirstAt = 1 << 16
	// AheadAfter is how many epochs in a row must have waited too long
	// for their orders (Config.AheadAt): one draw slowed by a busy
	// machine does not turn orders ahead on.
	AheadAfter = 2
)

// Job is the leader's state of one dataset's job: who trains where, which
// ranks finished the newest epoch, and the sampler that draws the next.
// Only the leader has one; a new leader rebuilds it with Rebuild from the
// newest order (which carries the sampler's state) and what the peers
// report. Its methods are safe for concurrent use and block only while
// another holds the lock or Config.Publish runs.
type Job struct {
	cfg Config

	// mu guards every field below; it is held while an order is handed
	// to Config.Publish, so that no epoch is published twice, and while
	// it is drawn, but for an order drawn off the lock (drawing).
	mu     sync.Mutex
	gen    uint64
	world  int          // 0 until a rank joins
	latest int          // newest published epoch, -1 for none
	ranks  []string     // rank -> node, "" until known; len(ranks) == world
	done   map[int]bool // ranks that finished the epoch being trained, latest-ahead
	early  map[int]bool // ranks that finished the epoch after it (only with ahead)
	// ahead is how many epochs the orders run ahead of training:
	// Config.Ahead, 1 once Config.AheadAt turned it on, or after a
	// rebuild as the newest order says.
	ahead int
	// drawn is when the newest order's drawing began, and took how long
	// it took the leader to draw and hand it over (for Config.AheadAt).
	drawn   time.Time
	took    time.Duration
	slow    int // epochs in a row whose ranks waited too long (Config.AheadAt)
	sampler *sampling.Sampler
	// drawing is the order drawn now without the lock (drawOffLocked);
	// nil for none. An order ahead has the sampler meanwhile: nothing
	// else draws. spec is the speculation drawn last (speculateLocked),
	// until an order is published.
	drawing, spec *draft
	// first is epoch 0's order drawn as the ranks join, until it is
	// published (drawFirstLocked); nil for none.
	first    *firstDraw
	waiting  bool // the join wait of epoch 0 is armed
	deadline bool // the deadline of the epoch being trained is armed (or none is set)
	retired  bool // no longer the dataset's job: timers publish nothing
	held     bool // the publication of epoch latest+1 waits (Config.Hold)
	// holds counts the epochs held so far, heldFor the time they waited
	// in all (a held epoch's from heldAt, once its hold ends).
	holds   int
	heldFor time.Duration
	heldAt  time.Time
	// resident holds, per node, the dataset's samples it cached when its
	// rank last finished an epoch, checked.
	resident map[string]wire.ResidentSet
}

// New returns the job of generation cfg.Gen, with no rank and no order.
func New(cfg Config) *Job {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MinDraw == 0 {
		cfg.MinDraw = MinAheadDraw
	}
	if cfg.DrawFirstAt == 0 {
		cfg.DrawFirstAt = DefaultDrawFirstAt
	}
	return &Job{cfg: cfg, gen: cfg.Gen, latest: -1, done: make(map[int]bool), early: make(map[int]bool), sampler: cfg.NewSampler(),
		resident: make(map[string]wire.ResidentSet), ahead: cfg.Ahead}
}

// Join records that rank of world trains on node, which holds generation
// gen of the job up to epoch have. Epoch 0 is published once every rank
// has joined, or JoinWait after the first did. It reports behind when
// epoch 0 is published and node lacks the newest order: it may have
// missed the publication (a restart, a partition), and the caller sends
// it again. It refuses, with ErrBadRequest, a rank outside world or a
// world over MaxWorld and, with ErrWorldMismatch, a world other than the
// job's; an error from drawing epoch 0 is returned as is.
func (j *Job) Join(rank, world int, node string, gen uint64, have int) (behind bool, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.retired {
		return false, refuse(ErrBadRequest, "job %q of %s is retired", j.cfg.Job, j.cfg.Dataset)
	}
	if world < 1 || rank < 0 || rank >= world || world > j.cfg.MaxWorld {
		return false, refuse(ErrBadRequest, "rank %d of world %d (at most %d ranks)", rank, world, j.cfg.MaxWorld)
	}
	if j.world == 0 {
		j.world = world
		j.ranks = make([]string, world)
	}
	if j.world != world {
		return false, refuse(ErrWorldMismatch, "the job on %s has world %d, asked %d (SHADE.RESET %s starts a new job)",
			j.cfg.Dataset, j.world, world, j.cfg.Dataset)
	}
	j.ranks[rank] = node
	if j.latest >= 0 {
		return gen != j.gen || have < j.latest, nil
	}
	if len(j.missingLocked()) == 0 {
		return false, j.publishFirstLocked()
	}
	j.drawFirstLocked()
	j.armJoinWaitLocked()
	return false, nil
}

// firstDraw is epoch 0's order drawn while the ranks join
// (drawFirstLocked), not yet split among them: the copy of the sampler it
// is drawn with and, once drawn, the order, the sampler's state after it,
// how long it took, or the error; due says that epoch 0 is to be
// published as soon as it is drawn.
type firstDraw struct {
	sampler *sampling.Sampler
	drawn   bool
	u       unsplit
	took    time.Duration
	err     error
	due     bool
}

// drawFirstLocked draws epoch 0's order, off the lock, once the first
// rank of a world of more has joined, for a dataset of DrawFirstAt
// samples or more: a draw needs the ranks only to split the order among
// them, so the ranks still to join wait for the split alone, not for the
// draw, nor for the lookup of each place's group of owners, made with
// it (unsplit.group). It is drawn with a copy of the sampler, which
// becomes the job's once the order is published (a draw that fails
// leaves the sampler as it was, and epoch 0 is drawn whole when due).
// Nothing else draws meanwhile: epoch 0 comes first.
func (j *Job) drawFirstLocked() {
	if j.first != nil || j.cfg.DrawFirstAt < 0 || j.sampler.Len() < j.cfg.DrawFirstAt {
		return
	}
	f := &firstDraw{sampler: j.sampler.Clone()}
	j.first = f
	others := maps.Clone(j.resident)
	where := j.placementLocked()
	j.cfg.After(0, func() {
		start := j.cfg.Now()
		u, err := drawUnsplit(f.sampler, j.cfg.Scores, 0, j.residentOf(others, f.sampler.Len()), where)
		if err == nil && u.grouped == nil {
			u.group(where)
		}
		took := j.cfg.Now().Sub(start)
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.first != f {
			return // a reset, or epoch 0 published without it
		}
		f.drawn, f.u, f.took, f.err = true, u, took, err
		if err != nil {
			j.cfg.Logger.Warn().Err(err).Str("dataset", j.cfg.Dataset).Msg("drawing epoch 0 as the ranks join: it is drawn when due")
		}
		if f.due && !j.retired {
			if err := j.publishFirstLocked(); err != nil {
				j.cfg.Logger.Error().Err(err).Str("dataset", j.cfg.Dataset).Msg("publishing epoch 0")
			}
		}
	})
}

// publishFirstLocked publishes epoch 0 and, with Ahead, draws epoch 1
// after it, ahead (drawOffLocked): the ranks need not wait for both.
// Epoch 0 drawn as the ranks joined (drawFirstLocked) is split among them
// now, or, while it is being drawn, published once drawn.
func (j *Job) publishFirstLocked() error {
	f := j.first
	switch {
	case f != nil && !f.drawn:
		f.due = true
		return nil
	case f != nil && f.err == nil:
		start := j.cfg.Now()
		d, err := f.u.split(j.ranks, j.placementLocked())
		if err != nil {
			return fmt.Errorf("%w (epoch 0 of %s)", err, j.cfg.Dataset)
		}
		j.sampler = f.sampler
		// Its draw counts as if made now (Config.AheadAt): epoch 1's
		// will be drawn whole.
		j.installLocked(0, start.Add(-f.took), d)
	default:
		if err := j.publishLocked(0); err != nil {
			return err
		}
	}
	if j.ahead > 0 {
		j.drawOffLocked(false)
	} else {
		j.speculateLocked()
	}
	return nil
}

// training is the epoch whose dones decide the next publication.
func (j *Job) training() int { return j.latest - j.ahead }

// armJoinWaitLocked publishes epoch 0 JoinWait from now, for the ranks
// that joined by then, unless it is armed already.
func (j *Job) armJoinWaitLocked() {
	if j.waiting {
		return
	}
	j.waiting = true
	j.cfg.After(j.cfg.JoinWait, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.retired || j.latest >= 0 || j.world == 0 {
			return
		}
		if err := j.publishFirstLocked(); err != nil {
			j.cfg.Logger.Error().Err(err).Str("dataset", j.cfg.Dataset).Msg("publishing epoch 0")
		}
	})
}

// Done records that rank, which trains on node, finished epoch of
// generation gen, and that node then cached the samples of resident (the
// zero set if it did not say). Once every rank
// finished the epoch being trained (the newest, or with Ahead the one
// before it), or EpochDeadline after the first did (if set), the next
// epoch is published. A done of an older generation or epoch is ignored;
// one for an epoch not yet published, or a rank outside the world, is
// refused with ErrBadRequest, and so is a set that
// wire.ResidentSet.Check refuses for the dataset.
func (j *Job) Done(gen uint64, epoch, rank int, node string, resident wire.ResidentSet) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if gen != j.gen || epoch < j.training() {
		return nil // an old job or epoch: nothing to do
	}
	if epoch > j.latest || rank < 0 || rank >= j.world {
		return refuse(ErrBadRequest, "done for epoch %d rank %d; newest epoch is %d of world %d", epoch, rank, j.latest, j.world)
	}
	if err := resident.Check(j.sampler.Len()); err != nil {
		return refuse(ErrBadRequest, "%v", err)
	}
	if !resident.Empty() && node != "" {
		j.resident[node] = resident
	}
	if epoch == j.training() {
		j.done[rank] = true
	} else {
		j.early[rank] = true // with Ahead: it finished the next epoch too
	}
	if j.ranks[rank] == "" {
		j.ranks[rank] = node
	}
	if err := j.publishDueLocked(false); err != nil {
		return err
	}
	j.armDeadlineLocked()
	return nil
}

// armDeadlineLocked arms the deadline of the epoch being trained once a
// rank finished it, unless it is armed already or none is set.
func (j *Job) armDeadlineLocked() {
	if d := j.cfg.EpochDeadline; d > 0 && !j.deadline && len(j.done) > 0 {
		j.deadline = true
		training := j.training()
		j.cfg.After(d, func() { j.deadlinePassed(training) })
	}
}

// publishDueLocked publishes the next epoch while every rank finished
// the one before it, unless Config.Hold holds it; with now, the first
// due epoch is published without asking. Where the orders run ahead, the
// ranks hold the due epoch's order already, and the one after it is
// drawn off this path (drawOffLocked). It publishes nothing while a draw
// off the lock runs, which goes on from where it left off once drawn.
func (j *Job) publishDueLocked(now bool) error {
	for len(j.done) == j.world && j.drawing == nil && (now || !j.holdLocked()) {
		now = false
		if j.ahead > 0 {
			j.drawOffLocked(false)
			return nil
		}
		ahead := j.aheadDueLocked()
		if sp := j.dueSpecLocked(); ahead && sp != nil {
			// Drawn while the ranks trained the epoch they just
			// finished, as an order ahead is: they need not wait.
			j.sampler = sp.sampler
			j.installLocked(sp.epoch, j.cfg.Now().Add(-sp.took), sp.d)
		} else if err := j.publishLocked(j.latest + 1); err != nil {
			return err
		}
		if ahead {
			// Every rank finished the epoch before the one just
			// published; the next is drawn now, ahead, and from here on
			// each order an epoch early.
			j.ahead = 1
			j.drawOffLocked(false)
			return nil
		}
		j.speculateLocked()
	}
	return nil
}

// draft is an order drawn off the lock (drawOffLocked): the epoch, the
// sampler it is drawn with, whether it is a speculation (speculateLocked)
// and, once drawn, the speculation's order and how long its draw took.
type draft struct {
	epoch   int
	sampler *sampling.Sampler
	spec    bool
	d       Drawn
	took    time.Duration
}

// drawOffLocked draws the order of epoch latest+1 on a goroutine of
// Config.After and without the lock: the done that made it due is
// answered at once, and the ranks' dones and the nodes' calls do not
// wait for the draw. An order ahead, which the ranks begin an epoch from
// now, is published once drawn, unless the job was reset or retired
// meanwhile; the dones that came in the while then count as they would
// have. A speculation (spec) is drawn with a copy of the sampler and
// kept for the next due epoch. A draw that fails is logged; an order
// ahead is tried again at the next done (the nodes repeat theirs), a
// speculation's epoch is drawn when due.
func (j *Job) drawOffLocked(spec bool) {
	if j.drawing != nil {
		return
	}
	dr := &draft{epoch: j.latest + 1, sampler: j.sampler, spec: spec}
	if spec {
		dr.sampler = j.sampler.Clone()
	}
	j.drawing = dr
	// The nodes' resident sets are replaced, never changed: the draw
	// reads them as they are now. This node's own (Config.Resident) is read
	// with the draw, off the lock: it waits for the node's cache policy,
	// which may be taking in the order published just before.
	ranks, where, others := slices.Clone(j.ranks), j.placementLocked(), maps.Clone(j.resident)
	j.cfg.After(0, func() {
		start := j.cfg.Now()
		d, err := Draw(dr.sampler, j.cfg.Scores, dr.epoch, ranks, where, j.residentOf(others, dr.sampler.Len()))
		took := j.cfg.Now().Sub(start)
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.drawing != dr {
			return // a reset or a publication let it go
		}
		j.drawing = nil
		if j.retired {
			return
		}
		switch {
		case err != nil:
			j.cfg.Logger.Error().Err(err).Str("dataset", j.cfg.Dataset).Int("epoch", dr.epoch).Bool("speculation", spec).
				Msg("drawing an order off the lock")
			if !spec {
				return
			}
		case spec:
			dr.d, dr.took = d, took
			j.spec = dr
		default:
			j.installLocked(dr.epoch, start, d)
			j.armDeadlineLocked()
		}
		if err := j.publishDueLocked(false); err != nil {
			j.cfg.Logger.Error().Err(err).Str("dataset", j.cfg.Dataset).Msg("publishing the next order")
		}
	})
}

// speculateLocked draws the order after the newest, off the lock, where
// the end of the newest's epoch may turn the orders ahead: the newest
// took MinDraw or more, and either the ranks waited too long for the
// orders of the AheadAfter-1 epochs before, or the newest is epoch 0's,
// whose epoch's length, and so whether the ranks wait, is not known
// before its end (there the speculation's own draw counts as the draw
// after epoch 0's: see aheadDueLocked). If they do turn, the ranks need
// not wait for that order either: it is drawn already, as an order ahead
// would be, from the scores up to the epoch before. If they do not, it
// is let go, and the sampler goes on as if it had never been drawn.
func (j *Job) speculateLocked() {
	if j.ahead == 0 && j.cfg.AheadAt > 0 && j.took >= j.cfg.MinDraw && (j.slow == AheadAfter-1 || j.latest == 0) {
		j.drawOffLocked(true)
	}
}

// aheadDueLocked reports whether the job's orders are to run ahead from
// the epoch due now: Config.Ahead asks for it (a rebuilt job whose newest
// order did not), or, by Config.AheadAt, the ranks waited too long for the
// newest order, whose epoch every rank has just finished, and for the
// orders of the AheadAfter-1 epochs before. A speculation of the due
// epoch (speculateLocked) that took too long by the same measure counts
// as the draw after the newest: at the end of epoch 0, epoch 0's draw and
// the speculation of epoch 1's make two in a row, and the ranks need not
// wait for epoch 1's order to learn that they would. The two are draws
// of their own, so a job's first draw, slower for one-off reasons, does
// not turn orders ahead alone. Called once per epoch due, it counts that
// epoch in j.slow (or resets the count), and logs the switch.
func (j *Job) aheadDueLocked() bool {
	switch {
	case j.ahead >= 1:
		return false
	case j.cfg.Ahead > j.ahead:
		return true
	case j.cfg.AheadAt <= 0 || j.drawn.IsZero():
		return false
	}
	cycle := j.cfg.Now().Sub(j.drawn)
	if !j.tooLong(j.took, cycle) {
		j.slow = 0
		return false
	}
	j.slow++
	if sp := j.dueSpecLocked(); j.slow < AheadAfter && sp != nil && j.tooLong(sp.took, cycle) {
		j.slow++
	}
	due := j.slow >= AheadAfter
	if due {
		j.cfg.Logger.Info().Str("dataset", j.cfg.Dataset).Int("epoch", j.latest+1).
			Dur("order_took", j.took).Dur("epoch_with_order", cycle).Float64("ahead_at", j.cfg.AheadAt).
			Msg("the ranks waited too long for the order: orders now run an epoch ahead")
	}
	return due
}

// dueSpecLocked is the speculation of the due epoch, latest+1, if one was
// drawn. A reset and every publication let a speculation go (j.spec), and
// a draw let go keeps none: one kept is of the due epoch of this
// generation.
func (j *Job) dueSpecLocked() *draft {
	if sp := j.spec; sp != nil && sp.epoch == j.latest+1 {
		return sp
	}
	return nil
}

// tooLong reports whether an order that took took to draw made the
// ranks wait too long (Config.AheadAt) in a cycle of its drawing and
// epoch: MinDraw or more, and over AheadAt of the cycle.
func (j *Job) tooLong(took, cycle time.Duration) bool {
	return took >= j.cfg.MinDraw && float64(took) > j.cfg.AheadAt*float64(cycle)
}

// holdLocked reports whether the due epoch, latest+1, waits: it is held
// already, or Config.Hold holds it now, and then a timer publishes it
// when the wait has passed.
func (j *Job) holdLocked() bool {
	if j.held {
		return true
	}
	if j.cfg.Hold == nil || j.ahead > 0 {
		return false
	}
	epoch := j.latest + 1
	d := j.cfg.Hold(epoch)
	if d <= 0 {
		return false
	}
	j.held, j.holds, j.heldAt = true, j.holds+1, j.cfg.Now()
	j.cfg.Logger.Debug().Str("dataset", j.cfg.Dataset).Int("epoch", epoch).Dur("at_most", d).
		Msg("holding an epoch for the dataset's other jobs")
	gen := j.gen
	j.cfg.After(d, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.retired || !j.held || j.gen != gen || j.latest+1 != epoch {
			return
		}
		j.unholdLocked()
		j.cfg.Logger.Debug().Str("dataset", j.cfg.Dataset).Int("epoch", epoch).
			Msg("publishing a held epoch: the other jobs did not catch up in time")
		if err := j.publishDueLocked(true); err != nil {
			j.cfg.Logger.Error().Err(err).Msg("publishing a held epoch")
		}
	})
	return true
}

// Release publishes a held epoch if Config.Hold no longer holds it: the
// node calls it when another job of the dataset moved on. It does
// nothing if no epoch is held.
func (j *Job) Release() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.retired || !j.held || j.cfg.Hold(j.latest+1) > 0 {
		return nil
	}
	j.unholdLocked()
	return j.publishDueLocked(true)
}

// unholdLocked ends the hold of the due epoch, if it is held, and counts
// its wait.
func (j *Job) unholdLocked() {
	if j.held {
		j.held = false
		j.heldFor += j.cfg.Now().Sub(j.heldAt)
	}
}

// NoteResident records that node caches the samples of set for
// generation gen of the job, for the draws that follow. A note of another
// generation is ignored; a set that wire.ResidentSet.Check refuses for
// the dataset is refused with ErrBadRequest.
func (j *Job) NoteResident(gen uint64, node string, set wire.ResidentSet) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := set.Check(j.sampler.Len()); err != nil {
		return refuse(ErrBadRequest, "%v", err)
	}
	if gen == j.gen && node != "" {
		j.resident[node] = set
	}
	return nil
}

// deadlinePassed publishes the next epoch without the ranks that have
// not finished epoch, if epoch is still the one being trained.
func (j *Job) deadlinePassed(epoch int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.retired || j.training() != epoch || j.drawing != nil && !j.drawing.spec {
		return // a draw ahead under way publishes the next epoch
	}
	j.drawing = nil // a speculation under way is let go
	j.cfg.Logger.Warn().Str("dataset", j.cfg.Dataset).Int("epoch", epoch).Ints("pending", j.pendingLocked()).
		Msg("epoch deadline passed: publishing the next order without the pending ranks")
	if err := j.publishLocked(j.latest + 1); err != nil {
		j.cfg.Logger.Error().Err(err).Msg("publishing after the deadline")
	}
}

// Retire stops the job's timers from publishing: it is no longer its
// dataset's (the node stepped down, or a takeover rebuilt the job).
func (j *Job) Retire() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.retired = true
}

// Reset starts a new generation of the job, with no rank and a fresh
// sampler, and publishes its empty order (Epoch -1), which tells every
// peer that the old job is over.
func (j *Job) Reset() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.resetLocked(false)
}

// End ends the job for good: it publishes the empty order of a new
// generation with Retired set, which tells every peer to drop the job,
// and stops the job's timers. Later calls do nothing.
func (j *Job) End() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.retired {
		return
	}
	j.resetLocked(true)
	j.retired = true
}

func (j *Job) resetLocked(end bool) {
	j.gen++
	j.world, j.latest, j.ranks = 0, -1, nil
	j.done, j.early = make(map[int]bool), make(map[int]bool)
	j.sampler = j.cfg.NewSampler()
	j.waiting, j.deadline = false, false
	j.drawing, j.spec, j.first = nil, nil, nil // a draw under way is let go
	j.unholdLocked()
	j.resident = make(map[string]wire.ResidentSet)
	// A new generation (a new world, maybe) decides afresh whether its
	// orders run ahead.
	j.ahead, j.drawn, j.took, j.slow = j.cfg.Ahead, time.Time{}, 0, 0
	j.cfg.Publish(&wire.PublishMsg{Dataset: j.cfg.Dataset, Job: j.cfg.Job, Version: j.cfg.Version, Gen: j.gen, Epoch: -1, Term: j.cfg.Term(), Retired: end}, 0)
}

// Training is the epoch whose dones decide the next publication (see
// Status.Training).
func (j *Job) Training() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.training()
}

// Ahead is how many epochs the job's orders run ahead of training: 0, or
// 1 by Config.Ahead or since Config.AheadAt turned it on.
func (j *Job) Ahead() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ahead
}

// Status is a Job's progress, as a value.
type Status struct {
	World  int // 0 until a rank joins
	Latest int // newest published epoch, -1 for none
	// Training is the epoch whose dones decide the next publication:
	// Latest, or with Config.Ahead the one before it.
	Training int
	// Pending lists the ranks that have not finished Training; Missing
	// the ranks whose node is not known yet.
	Pending, Missing []int
	// Resident names the other nodes whose cached samples the next
	// draw prefers, sorted.
	Resident []string
	// Holds is how many epochs Config.Hold held since the Job began, and
	// HeldFor how long they waited in all (an epoch held now counts once
	// its hold ends).
	Holds   int
	HeldFor time.Duration
}

// Status returns the job's progress now.
func (j *Job) Status() Status {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := Status{World: j.world, Latest: j.latest, Training: j.training(), Pending: j.pendingLocked(), Missing: j.missingLocked(),
		Holds: j.holds, HeldFor: j.heldFor}
	for node := range j.resident {
		st.Resident = append(st.Resident, node)
	}
	slices.Sort(st.Resident)
	return st
}

func (j *Job) pendingLocked() []int {
	var out []int
	for r := 0; r < j.world; r++ {
		if !j.done[r] {
			out = append(out, r)
		}
	}
	return out
}

func (j *Job) missingLocked() []int {
	var out []int
	for r, node := range j.ranks {
		if node == "" {
			out = append(out, r)
		}
	}
	return out
}

// publishLocked draws epoch's order, splits it among the ranks and hands
// it to Config.Publish.
func (j *Job) publishLocked(epoch int) error {
	start := j.cfg.Now()
	d, err := Draw(j.sampler, j.cfg.Scores, epoch, j.ranks, j.placementLocked(), j.residentOf(j.resident, j.sampler.Len()))
	if err != nil {
		return fmt.Errorf("%w (epoch %d of %s)", err, epoch, j.cfg.Dataset)
	}
	j.installLocked(epoch, start, d)
	return nil
}

// placementLocked is Config.Placement's now, nil where it is unset.
func (j *Job) placementLocked() *sampling.Placement {
	if j.cfg.Placement == nil {
		return nil
	}
	p := j.cfg.Placement()
	return &p
}

// installLocked makes d, epoch's order drawn from start on, the newest and
// hands it to Config.Publish.
func (j *Job) installLocked(epoch int, start time.Time, d Drawn) {
	pub := &wire.PublishMsg{
		Dataset: j.cfg.Dataset, Job: j.cfg.Job, Version: j.cfg.Version, Gen: j.gen, Epoch: epoch, Term: j.cfg.Term(), Ahead: j.ahead,
		World: j.world, Slices: wire.PackSlices(d.Slices), Weights: wire.PackWeights(d.Weights), Sampler: d.State, Ranks: append([]string(nil), j.ranks...),
	}
	scored := d.Scored
	j.latest = epoch
	j.done, j.early = j.early, make(map[int]bool) // the next epoch is being trained now
	j.deadline = false
	j.unholdLocked()
	j.cfg.Publish(pub, scored)
	j.drawn, j.took = start, j.cfg.Now().Sub(start)
	j.spec = nil  // drawn for this epoch or an older one
	j.first = nil // epoch 0 is out
}

// residentOf is the union of what Config.Resident gives and the samples
// cached on the other nodes (others: their sets, checked, when their
// ranks last finished an epoch), for a dataset of n samples; nil when no
// node said and Config.Resident is unset.
func (j *Job) residentOf(others map[string]wire.ResidentSet, n int) []uint64 {
	var own []uint64
	if j.cfg.Resident != nil {
		own = j.cfg.Resident()
	}
	return UnionResident(own, others, n)
}

// UnionResident ORs into own (a bitmap, bit i%64 of word i/64; nil for
// none), grown to a dataset of n samples, the samples of each set of
// others, which wire.ResidentSet.Check accepted for it, and returns it:
// the samples a draw prefers. Without others it returns own as it is.
func UnionResident(own []uint64, others map[string]wire.ResidentSet, n int) []uint64 {
	if len(others) == 0 {
		return own
	}
	if words := (n + 63) / 64; len(own) < words {
		own = append(own, make([]uint64, words-len(own))...)
	}
	for _, set := range others {
		set.OrInto(own)
	}
	return own
}

// Drawn is one epoch's order as Draw splits it among the ranks.
type Drawn struct {
	Slices  [][]uint32  // one slice per rank
	Weights [][]float32 // the importance weight of each id in Slices; nil when all are 1
	State   []byte      // the sampler's state after the draw
	Scored  int         // how many samples had a score
}

// Draw draws epoch's order from table with sampler, preferring the
// resident samples (a bitmap, nil for none), and splits it among the
// ranks, one slice per rank; ranks names the node each trains on. With a
// placement, each rank is given the samples its node owns where it can;
// without (nil), the order is split with sampling.Split. Each id's weight goes
// with it into its slice. It advances sampler, which the caller must not
// share meanwhile.
func Draw(sampler *sampling.Sampler, table Scores, epoch int, ranks []string, where *sampling.Placement, resident []uint64) (Drawn, error) {
	u, err := drawUnsplit(sampler, table, epoch, resident, where)
	if err != nil {
		return Drawn{}, err
	}
	return u.split(ranks, where)
}

// unsplit is an order drawn (drawUnsplit) and not yet split among the
// ranks: the draw, the sampler's state after it and how many samples had
// a score.
type unsplit struct {
	d      sampling.Drawn
	state  []byte
	scored int
	// grouped is the order with its places' groups looked up ahead
	// (group); nil where they are not.
	grouped *sampling.Grouped
}

// group looks up the group of each place of u's order in where ahead of
// the split (sampling.GroupOrder), most of a locality split's work that
// needs no rank. Where nil, or a placement that refuses the order, leaves
// u to be split whole, and the split says what is wrong.
func (u *unsplit) group(where *sampling.Placement) {
	if where == nil {
		return
	}
	if g, err := sampling.GroupOrder(u.d.Order, *where); err == nil {
		u.grouped = &g
	}
}

// drawUnsplit is Draw's first half, which needs no rank: it draws epoch's
// order from table with sampler, preferring the resident samples, and
// advances sampler, which the caller must not share meanwhile. Where
// table is GroupedScores and where is set, the order comes grouped for
// where if table has its groups (u.grouped; nil if not).
func drawUnsplit(sampler *sampling.Sampler, table Scores, epoch int, resident []uint64, where *sampling.Placement) (unsplit, error) {
	var u unsplit
	var err error
	if gs, ok := table.(GroupedScores); ok && where != nil {
		u.d, u.grouped, u.scored, err = gs.DrawGrouped(sampler, epoch, resident, *where)
	} else {
		u.d, u.scored, err = table.Draw(sampler, epoch, resident)
	}
	if err != nil {
		return unsplit{}, fmt.Errorf("leader: order: %w", err)
	}
	if u.state, err = sampler.MarshalBinary(); err != nil {
		return unsplit{}, fmt.Errorf("leader: sampler state: %w", err)
	}
	return u, nil
}

// split is Draw's second half: it splits the order among the ranks, as
// Draw says (with the groups looked up ahead where they fit where), each
// id's weight beside it, into new slices; u is left as it is.
func (u unsplit) split(ranks []string, where *sampling.Placement) (Drawn, error) {
	out := Drawn{Scored: u.scored, State: u.state}
	var err error
	switch {
	case where == nil:
		out.Slices, err = sampling.Split(u.d.Order, len(ranks))
	case u.grouped != nil && u.grouped.Fits(*where):
		out.Slices, err = u.grouped.Split(len(ranks), ranks, *where)
	default:
		out.Slices, err = sampling.LocalitySplit(u.d.Order, len(ranks), ranks, *where)
	}
	if err != nil {
		return Drawn{}, fmt.Errorf("leader: split: %w", err)
	}
	out.Weights = sampling.SliceWeights(out.Slices, u.d.Weight)
	return out, nil
}

// Check validates an order received from a peer before it is used: its
// dataset version, and for an epoch's order a world of 1 to maxWorld
// ranks with one slice each, slices of equal length, no more rank nodes
// than ranks, ids below samples, and either no weights or one finite
// positive weight per id. A member's part (wire.PublishMsg.Part) holds
// the slices of its ranks alone (a group's part, those of the members
// Below it too: at most wire.MaxBelow, each once), and reads of ids below
// samples.
func Check(p *wire.PublishMsg, version string, samples, maxWorld int) error {
	if p.Version != version {
		return fmt.Errorf("leader: order for %s version %s; this node has version %s", p.Dataset, p.Version, version)
	}
	if p.Epoch < 0 {
		return nil
	}
	if p.Ahead < 0 || p.Ahead > 1 {
		return fmt.Errorf("leader: order for %s epoch %d runs %d epochs ahead (at most 1)", p.Dataset, p.Epoch, p.Ahead)
	}
	if p.World < 1 || p.World > maxWorld || len(p.Slices) != p.World || len(p.Ranks) > p.World {
		return fmt.Errorf("leader: order for %s epoch %d has %d slices for world %d", p.Dataset, p.Epoch, len(p.Slices), p.World)
	}
	if len(p.Weights) != 0 && len(p.Weights) != p.World {
		return fmt.Errorf("leader: order for %s epoch %d has %d weight slices for world %d", p.Dataset, p.Epoch, len(p.Weights), p.World)
	}
	if err := checkBelow(p); err != nil {
		return err
	}
	first := -1 // the first slice p holds (all of a whole order; a part's own)
	for r, s := range p.Slices {
		if !p.HasSlice(r) {
			if len(s) != 0 || len(p.Weights) != 0 && len(p.Weights[r]) != 0 {
				return fmt.Errorf("leader: %s's part of the order for %s epoch %d holds the slice of rank %d, on %q", p.Part, p.Dataset, p.Epoch, r, rankNode(p, r))
			}
			continue
		}
		if first < 0 {
			first = r
		}
		if len(s) != len(p.Slices[first]) {
			return fmt.Errorf("leader: order for %s epoch %d: slice %d has %d ids, slice %d %d", p.Dataset, p.Epoch, r, len(s), first, len(p.Slices[first]))
		}
		if len(p.Weights) != 0 {
			if len(p.Weights[r]) != len(s) {
				return fmt.Errorf("leader: order for %s epoch %d: slice %d has %d ids and %d weights", p.Dataset, p.Epoch, r, len(s), len(p.Weights[r]))
			}
			if i := firstNotPositive(p.Weights[r]); i >= 0 {
				return fmt.Errorf("leader: order for %s epoch %d: weight %v is not a positive number", p.Dataset, p.Epoch, p.Weights[r][i])
			}
		}
		if i := firstOutOfRange(s, samples); i >= 0 {
			return fmt.Errorf("leader: order for %s epoch %d: id %d out of range", p.Dataset, p.Epoch, s[i])
		}
	}
	if p.Part == "" {
		return nil
	}
	if p.Size < 0 || first >= 0 && p.Size != len(p.Slices[first])*p.World {
		return fmt.Errorf("leader: %s's part of the order for %s epoch %d: %d reads in all, for slices of %d ids", p.Part, p.Dataset, p.Epoch, p.Size, len(p.Slices[max(first, 0)]))
	}
	if i := firstOutOfRange(p.Reads, samples); i >= 0 {
		return fmt.Errorf("leader: %s's part of the order for %s epoch %d: read of id %d out of range", p.Part, p.Dataset, p.Epoch, p.Reads[i])
	}
	return nil
}

// firstOutOfRange returns the index of the first id of ids not below
// samples, or -1 where all are. Every member checks every id of each
// order it takes whole (1.28 M at 1,000 peers, a relay before it cuts
// the parts below it), so the common case, all in range, is one pass
// without a branch on each value (largestLess); only a list that fails
// is looked at again.
func firstOutOfRange(ids []uint32, samples int) int {
	if len(ids) == 0 || uint64(samples) > math.MaxUint32 || int(largestLess(ids, 0)) < samples {
		return -1 // every uint32 is below a count past 2^32
	}
	return slices.IndexFunc(ids, func(id uint32) bool { return int(id) >= samples })
}

// firstNotPositive returns the index of the first weight of w that is not
// a finite number above zero, or -1 where all are: as firstOutOfRange,
// one pass without a branch on each value. A float32 is finite and
// above zero exactly where its bits less one, unsigned, are below those
// of +Inf less one: zero wraps to the top, a sign bit, +Inf and NaN's
// bits are all at or above it.
func firstNotPositive(w []float32) int {
	const inf = 0x7f800000
	bits := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
	if len(w) == 0 || largestLess(bits, 1) < inf-1 {
		return -1
	}
	return slices.IndexFunc(w, func(v float32) bool { return !(v > 0) || math.IsInf(float64(v), 0) })
}

// largestLess returns the largest of v-sub over vals (not empty),
// unsigned, wrapping below zero: four lanes of conditional moves
// (BenchmarkCheck 1.4-1.6 ms; with slices.Max's one lane, 2.8).
func largestLess(vals []uint32, sub uint32) uint32 {
	var m0, m1, m2, m3 uint32
	rest := vals
	for len(rest) >= 4 {
		m0, m1, m2, m3 = max(m0, rest[0]-sub), max(m1, rest[1]-sub), max(m2, rest[2]-sub), max(m3, rest[3]-sub)
		rest = rest[4:]
	}
	for _, v := range rest {
		m0 = max(m0, v-sub)
	}
	return max(m0, m1, m2, m3)
}

// checkBelow checks the members a part names Below its own: on a part
// alone, at most wire.MaxBelow, each named once, none empty or the part's own.
func checkBelow(p *wire.PublishMsg) error {
	if len(p.Below) == 0 {
		return nil
	}
	if p.Part == "" {
		return fmt.Errorf("leader: the whole order for %s epoch %d names %d members below a part", p.Dataset, p.Epoch, len(p.Below))
	}
	if len(p.Below) > wire.MaxBelow {
		return fmt.Errorf("leader: %s's part of the order for %s epoch %d names %d members below it (at most %d)", p.Part, p.Dataset, p.Epoch, len(p.Below), wire.MaxBelow)
	}
	seen := make(map[string]bool, len(p.Below))
	for _, m := range p.Below {
		if m == "" || m == p.Part || seen[m] {
			return fmt.Errorf("leader: %s's part of the order for %s epoch %d names %q below it twice, or none", p.Part, p.Dataset, p.Epoch, m)
		}
		seen[m] = true
	}
	return nil
}

// rankNode is the node p says rank r trains on, "" if unknown.
func rankNode(p *wire.PublishMsg, r int) string {
	if r < len(p.Ranks) {
		return p.Ranks[r]
	}
	return ""
}
