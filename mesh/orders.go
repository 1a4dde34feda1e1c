package mesh

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/shade-mesh/shade/transport/peer"
)

// orderBook is what every node knows of one dataset's job: the orders the
// leader published, and the ranks that train on this node. The leader's
// own state lives in leaderJob.
type orderBook struct {
	mu      sync.Mutex
	latest  *publishMsg         // newest installed order
	kept    map[int]*publishMsg // recent epochs of latest's generation
	changed chan struct{}       // closed and replaced on every change
	local   map[int]int         // ranks training on this node: rank -> world
	done    map[int]bool        // local ranks that finished latest.Epoch
	keep    int
	trace   *traceWriter // records installed epochs, if tracing
	// installed, if set, is called with each order the book installs,
	// with the book locked: it must not block or call back into the book.
	installed func(p *publishMsg)
}

func newOrderBook(keep int) *orderBook {
	return &orderBook{
		kept:    make(map[int]*publishMsg),
		changed: make(chan struct{}),
		local:   make(map[int]int),
		done:    make(map[int]bool),
		keep:    keep,
	}
}

// wakeLocked tells waiters to look again.
func (b *orderBook) wakeLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// install keeps p if it is newer than what the book holds.
func (b *orderBook) install(p *publishMsg) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !p.newer(b.latest) {
		return false
	}
	if b.latest == nil || p.Gen != b.latest.Gen {
		b.kept = make(map[int]*publishMsg)
		if b.latest != nil {
			b.local = make(map[int]int) // a new job: its ranks announce themselves again
		}
	}
	if b.latest == nil || p.Epoch != b.latest.Epoch || p.Gen != b.latest.Gen {
		b.done = make(map[int]bool)
	}
	b.latest = p
	b.trace.epoch(p.Epoch)
	if b.installed != nil {
		b.installed(p)
	}
	b.kept[p.Epoch] = p
	delete(b.kept, p.Epoch-b.keep)
	b.wakeLocked()
	return true
}

// head returns the newest order's generation and epoch (-1 for none).
func (b *orderBook) head() (gen uint64, epoch int, term uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.latest == nil {
		return 0, -1, 0
	}
	return b.latest.Gen, b.latest.Epoch, b.latest.Term
}

func (b *orderBook) newest() *publishMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.latest
}

// state reports what this node knows, for a new leader.
func (b *orderBook) state(ds string) jobState {
	b.mu.Lock()
	defer b.mu.Unlock()
	js := jobState{Dataset: ds, Epoch: -1}
	if b.latest != nil {
		js.Gen, js.Epoch, js.Term = b.latest.Gen, b.latest.Epoch, b.latest.Term
	}
	for r, w := range b.local {
		js.Ranks = append(js.Ranks, rankWorld{r, w})
	}
	for r := range b.done {
		js.Done = append(js.Done, r)
	}
	return js
}

// Order implements transport.Backend: rank's slice of epoch's order. It
// announces the rank to the leader and waits until the order is
// published: epoch 0 once every rank has announced itself (or the join
// wait passed), epoch e+1 once every rank has finished e.
func (n *Node) Order(ctx context.Context, name string, epoch, rank, world int) ([]uint32, error) {
	ds, err := n.dataset(name)
	if err != nil {
		return nil, err
	}
	if world < 1 || rank < 0 || rank >= world {
		return nil, fmt.Errorf("%w: rank %d of world %d", ErrWorldMismatch, rank, world)
	}
	if world > n.cfg.MaxWorld {
		return nil, fmt.Errorf("%w: world %d is over the limit of %d ranks", ErrWorldMismatch, world, n.cfg.MaxWorld)
	}
	b := ds.book
	var joined string // the leader this rank announced itself to
	for {
		b.mu.Lock()
		if b.latest != nil && b.latest.World > 0 && b.latest.World != world {
			w := b.latest.World
			b.mu.Unlock()
			return nil, fmt.Errorf("%w: the job on %s has world %d, asked %d (SHADE.RESET %s starts a new job)",
				ErrWorldMismatch, name, w, world, name)
		}
		b.local[rank] = world
		if p := b.kept[epoch]; p != nil {
			b.mu.Unlock()
			ds.advance(epoch)
			n.prefetchSlice(ds, p, rank)
			return p.Slices[rank], nil
		}
		if b.latest != nil && epoch <= b.latest.Epoch {
			latest := b.latest.Epoch
			b.mu.Unlock()
			return nil, fmt.Errorf("%w: epoch %d of %s is no longer kept (newest is %d)", ErrEpoch, epoch, name, latest)
		}
		gen, have := uint64(0), -1
		if b.latest != nil {
			gen, have = b.latest.Gen, b.latest.Epoch
		}
		// A rank that asks for epoch e+1 has finished epoch e: count it as
		// its SHADE.DONE, so a DONE lost with a failed leader is repeated.
		impliedDone := have >= 0 && epoch == have+1
		if impliedDone {
			b.done[rank] = true
		}
		changed := b.changed
		b.mu.Unlock()

		retry := time.After(n.cfg.Cluster.RetryEvery)
		if leader := n.leaderName(); leader != "" && leader != joined {
			err := n.toLeader(ctx, methodJoin, &joinReq{Dataset: name, Rank: rank, World: world, Node: n.cfg.Name, Gen: gen, Have: have})
			if err == nil && impliedDone {
				err = n.toLeader(ctx, methodDone, &doneReq{Dataset: name, Gen: gen, Epoch: have, Rank: rank, Node: n.cfg.Name})
			}
			switch {
			case err == nil:
				joined = leader
			case isWorldMismatch(err):
				return nil, fmt.Errorf("%w: %v", ErrWorldMismatch, err)
			}
		}
		select {
		case <-changed:
		case <-retry:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: epoch %d of %s; %s", ErrOrderTimeout, epoch, name, n.waitingFor(ds, epoch))
		}
	}
}

// waitingFor explains, for a timeout, what an order is waiting on.
func (n *Node) waitingFor(ds *datasetState, epoch int) string {
	if n.leaderName() == "" {
		return "no leader: this peer does not see a majority of the mesh"
	}
	if lj := ds.leaderJob(); lj != nil {
		lj.mu.Lock()
		defer lj.mu.Unlock()
		if lj.latest < 0 {
			return fmt.Sprintf("waiting for ranks %v to ask for epoch 0", lj.missingRanksLocked())
		}
		return fmt.Sprintf("still waiting for SHADE.DONE of epoch %d from ranks %v", lj.latest, lj.pendingLocked())
	}
	return fmt.Sprintf("waiting for leader %s to publish it", n.leaderName())
}

// Done implements transport.Backend: rank finished epoch. The node
// remembers it (and repeats it to a new leader) and tells the leader.
func (n *Node) Done(name string, epoch, rank int) error {
	ds, err := n.dataset(name)
	if err != nil {
		return err
	}
	b := ds.book
	if gen, have, _ := b.head(); have < epoch {
		// A peer that just restarted may not hold the order yet: ask the
		// leader for its newest before refusing.
		n.catchUp(ds, gen, have)
	}
	b.mu.Lock()
	if b.latest == nil || b.latest.Epoch < 0 {
		b.mu.Unlock()
		return fmt.Errorf("%w: no order of %s yet (SHADE.ORDER starts a job)", ErrEpoch, name)
	}
	p := b.latest
	if rank < 0 || rank >= p.World {
		b.mu.Unlock()
		return fmt.Errorf("%w: rank %d of world %d", ErrWorldMismatch, rank, p.World)
	}
	if epoch > p.Epoch {
		b.mu.Unlock()
		return fmt.Errorf("%w: SHADE.DONE for epoch %d of %s, whose newest order is epoch %d", ErrEpoch, epoch, name, p.Epoch)
	}
	if epoch < p.Epoch {
		b.mu.Unlock()
		return nil // late or repeated: the job has moved on
	}
	b.done[rank] = true
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Cluster.FetchTimeout)
	defer cancel()
	// A failed send is repeated by the reconciler; the trainer goes on.
	_ = n.toLeader(ctx, methodDone, &doneReq{Dataset: name, Gen: p.Gen, Epoch: epoch, Rank: rank, Node: n.cfg.Name})
	return nil
}

// Report implements transport.Backend: one trained minibatch's losses,
// credited to the ids that were trained. Bad input is refused here; good
// input goes to the leader, which merges it into the cluster-wide table.
func (n *Node) Report(name string, epoch int, ids []uint32, losses []float64) error {
	ds, err := n.dataset(name)
	if err != nil {
		return err
	}
	if len(ids) == 0 || len(ids) != len(losses) {
		return fmt.Errorf("%w: report for %s needs id/loss pairs", ErrBadReport, name)
	}
	for i, id := range ids {
		if int(id) >= ds.len {
			return fmt.Errorf("%w: sample id %d out of range for %s (%d samples)", ErrBadReport, id, name, ds.len)
		}
		if math.IsNaN(losses[i]) || math.IsInf(losses[i], 0) {
			return fmt.Errorf("%w: loss %v for sample %d is not finite", ErrBadReport, losses[i], id)
		}
	}
	batch := reportBatch{Dataset: name, Epoch: epoch, IDs: append([]uint32(nil), ids...), Losses: append([]float64(nil), losses...)}
	ds.reports.Add(1)
	ds.reported.Add(int64(len(ids)))
	if n.leading() {
		return n.leaderReport([]reportBatch{batch})
	}
	n.queueReport(batch)
	return nil
}

// Reset implements transport.Backend: the dataset's job starts over at
// epoch 0 with any world size; the importance table is kept. During a
// leader failover it waits for the new leader, up to 30 seconds.
func (n *Node) Reset(name string) error {
	if _, err := n.dataset(name); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Cluster.FetchTimeout)
		err := n.toLeader(ctx, methodReset, &resetReq{Dataset: name})
		cancel()
		code := peer.CodeOf(err)
		if err == nil || code == peer.CodeBadRequest || code == peer.CodeNotFound || time.Now().After(deadline) || n.ctx.Err() != nil {
			if err != nil {
				return fmt.Errorf("mesh: reset %s: %w", name, err)
			}
			return nil
		}
		time.Sleep(n.cfg.Cluster.RetryEvery)
	}
}

// catchUp asks the leader for its newest order of a dataset and installs
// it if it is newer than what this node holds (gen, have). Best effort.
func (n *Node) catchUp(ds *datasetState, gen uint64, have int) {
	leader := n.leaderName()
	if n.cluster == nil || leader == "" || leader == n.cfg.Name {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Cluster.FetchTimeout)
	defer cancel()
	var p publishMsg
	if err := n.cluster.callName(ctx, leader, methodGetOrder, &getOrderReq{Dataset: ds.name}, &p); err != nil {
		return
	}
	if n.checkPublish(&p) == nil && p.newer(&publishMsg{Gen: gen, Epoch: have}) {
		n.observeTerm(p.Term)
		ds.book.install(&p)
	}
}
