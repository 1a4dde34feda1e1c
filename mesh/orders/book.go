// Package orders holds a node's book of one dataset's job: the epoch
// orders the leader published (the newest and a few recent ones of its
// generation), the ranks that train on this node, and which of them
// finished the newest epoch. Waiters learn of every change through a
// channel, so no one polls.
//
// It owns no network and no leader state: the leader's own bookkeeping is
// package mesh/leader's. orders imports only mesh/wire; it must not import
// mesh, store, policy or any network package.
package orders

import (
	"sync"

	"github.com/shade-mesh/shade/mesh/wire"
)

// Book is what every node knows of one dataset's job. Its methods are safe
// for concurrent use; none blocks.
type Book struct {
	// mu guards every field below.
	mu      sync.Mutex
	latest  *wire.PublishMsg         // newest installed order
	kept    map[int]*wire.PublishMsg // recent epochs of latest's generation
	changed chan struct{}            // closed and replaced on every change
	local   map[int]int              // ranks training on this node: rank -> world
	done    map[int]bool             // local ranks that finished latest.Epoch
	prev    map[int]bool             // local ranks that finished latest.Epoch-1
	keep    int
	// installed, if set, is called with each order the book installs,
	// with the book locked: it must not block or call back into the book.
	installed func(p *wire.PublishMsg)
}

// New returns an empty book that keeps the orders of the newest keep
// epochs.
func New(keep int) *Book {
	return &Book{
		kept:    make(map[int]*wire.PublishMsg),
		changed: make(chan struct{}),
		local:   make(map[int]int),
		done:    make(map[int]bool),
		prev:    make(map[int]bool),
		keep:    keep,
	}
}

// OnInstall sets fn to be called with each order the book installs, with
// the book locked: fn must not block or call back into the book. Call it
// before the book is shared.
func (b *Book) OnInstall(fn func(p *wire.PublishMsg)) { b.installed = fn }

// Changes returns a channel that is closed at the book's next change (an
// install, a wake); take it before looking, so no change is missed.
func (b *Book) Changes() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// Wake tells waiters to look again (the leader changed).
func (b *Book) Wake() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.wakeLocked()
}

func (b *Book) wakeLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Install keeps p if it is newer than what the book holds and reports
// whether it did. A new generation forgets the local ranks; a new epoch
// forgets which of them were done, but for the epoch before it. An order
// of the newest's generation that is older than the newest but recent
// enough to keep, and not held yet, is kept too (orders published ahead
// come two at a time and may arrive out of turn); the newest stays. The
// whole order replaces this node's part of it (wire.PublishMsg.Part),
// newest or kept. The book keeps p, which the caller must not change
// afterwards.
func (b *Book) Install(p *wire.PublishMsg) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !p.Newer(b.latest) {
		old := b.kept[p.Epoch]
		if p.Gen != b.latest.Gen || p.Epoch <= b.latest.Epoch-b.keep || old != nil && (old.Term != p.Term || !p.Newer(old)) {
			return false // a kept order is replaced only by the whole of a part
		}
		b.kept[p.Epoch] = p
		if b.installed != nil {
			b.installed(p)
		}
		b.wakeLocked()
		return true
	}
	if b.latest == nil || p.Gen != b.latest.Gen {
		b.kept = make(map[int]*wire.PublishMsg)
		if b.latest != nil {
			b.local = make(map[int]int) // a new job: its ranks announce themselves again
		}
	}
	switch {
	case b.latest == nil || p.Gen != b.latest.Gen || p.Epoch > b.latest.Epoch+1:
		b.done, b.prev = make(map[int]bool), make(map[int]bool)
	case p.Epoch == b.latest.Epoch+1:
		b.done, b.prev = make(map[int]bool), b.done
	}
	b.latest = p
	if b.installed != nil {
		b.installed(p)
	}
	b.kept[p.Epoch] = p
	delete(b.kept, p.Epoch-b.keep)
	b.wakeLocked()
	return true
}

// Current returns the orders a rank may still ask for: the newest and,
// where orders run ahead of training, the one before it if the book holds
// it, oldest first. They are shared: read only.
func (b *Book) Current() []*wire.PublishMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.latest == nil {
		return nil
	}
	var out []*wire.PublishMsg
	for e := b.latest.TrainingEpoch(); e < b.latest.Epoch; e++ {
		if p := b.kept[e]; p != nil {
			out = append(out, p)
		}
	}
	return append(out, b.latest)
}

// Kept returns the order of epoch if the book holds it, nil otherwise. It
// is shared: read only.
func (b *Book) Kept(epoch int) *wire.PublishMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.kept[epoch]
}

// Head returns the newest order's generation, epoch (-1 for none) and term.
func (b *Book) Head() (gen uint64, epoch int, term uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.latest == nil {
		return 0, -1, 0
	}
	return b.latest.Gen, b.latest.Epoch, b.latest.Term
}

// Newest returns the newest order, nil for none. It is shared: read only.
func (b *Book) Newest() *wire.PublishMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.latest
}

// State reports what this node knows of dataset's job, for a new leader.
func (b *Book) State(dataset string) wire.JobState {
	b.mu.Lock()
	defer b.mu.Unlock()
	js := wire.JobState{Dataset: dataset, Epoch: -1}
	if b.latest != nil {
		js.Gen, js.Epoch, js.Term, js.Part = b.latest.Gen, b.latest.Epoch, b.latest.Term, b.latest.Part != ""
	}
	for r, w := range b.local {
		js.Ranks = append(js.Ranks, wire.RankWorld{Rank: r, World: w})
	}
	for r := range b.done {
		js.Done = append(js.Done, r)
	}
	for r := range b.prev {
		js.DonePrev = append(js.DonePrev, r)
	}
	return js
}

// Finished returns the newest order, the epoch being trained (the
// newest's, or the one before where orders run ahead) and the local ranks
// that finished it.
func (b *Book) Finished() (p *wire.PublishMsg, epoch int, ranks []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.latest == nil {
		return nil, -1, nil
	}
	done, epoch := b.done, b.latest.Epoch
	if b.latest.Ahead > 0 {
		done, epoch = b.prev, epoch-1
	}
	for r := range done {
		ranks = append(ranks, r)
	}
	return b.latest, epoch, ranks
}

// Ask is the book's answer to a rank asking for an epoch's order.
type Ask struct {
	// Order is the order asked for, if the book holds it.
	Order *wire.PublishMsg
	// World is the job's world when it differs from the one asked with
	// (the rank belongs to another job); 0 otherwise.
	World int
	// Gone is set when the epoch is older than the newest and no longer
	// kept; Gen and Have are the newest order's generation and epoch (-1
	// for none).
	Gone bool
	Gen  uint64
	Have int
	// ImpliedDone is set when asking counted as the rank's done of epoch
	// Have: a rank that asks for e+1 has finished e. Where orders run
	// Ahead (1), it counted as its done of Have-1 too.
	ImpliedDone bool
	Ahead       int
	// Changed is closed at the book's next change.
	Changed <-chan struct{}
}

// Ask records that rank of a job of world ranks trains on this node and
// asks for epoch's order. See Ask's fields for the answers.
func (b *Book) Ask(epoch, rank, world int) Ask {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.latest != nil && b.latest.World > 0 && b.latest.World != world {
		return Ask{World: b.latest.World}
	}
	b.local[rank] = world
	if p := b.kept[epoch]; p != nil {
		return Ask{Order: p}
	}
	a := Ask{Have: -1, Changed: b.changed}
	if b.latest != nil {
		a.Gen, a.Have = b.latest.Gen, b.latest.Epoch
	}
	if b.latest != nil && epoch <= b.latest.Epoch {
		a.Gone = true
		return a
	}
	if a.Have >= 0 && epoch == a.Have+1 {
		a.ImpliedDone, a.Ahead = true, b.latest.Ahead
		b.done[rank] = true
		if a.Ahead > 0 {
			b.prev[rank] = true
		}
	}
	return a
}

// DoneResult says what MarkDone did.
type DoneResult int

const (
	Recorded DoneResult = iota // the rank is done with the newest epoch
	NoOrder                    // the book holds no order yet
	BadRank                    // the rank is outside the newest order's world
	Ahead                      // the epoch is newer than the newest order
	Late                       // the epoch is older: the job has moved on
)

// MarkDone records that rank finished epoch if that is the newest order's
// epoch, or the one before where orders run ahead of training, and
// returns the newest order (nil with NoOrder).
func (b *Book) MarkDone(epoch, rank int) (*wire.PublishMsg, DoneResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.latest
	switch {
	case p == nil || p.Epoch < 0:
		return nil, NoOrder
	case rank < 0 || rank >= p.World:
		return p, BadRank
	case epoch > p.Epoch:
		return p, Ahead
	case epoch < p.TrainingEpoch():
		return p, Late
	case epoch < p.Epoch:
		b.prev[rank] = true
		return p, Recorded
	}
	b.done[rank] = true
	return p, Recorded
}
