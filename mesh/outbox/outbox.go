// Package outbox holds what a node has yet to send to other peers:
// minibatch reports for the leader, merged scores for the samples' owners
// (on the leader), and samples read from the source for their co-owners.
// It queues and bounds them; the node's loops take them out and send
// them. It owns no goroutine and no network: it imports only mesh/wire,
// and must not import mesh or any network package.
package outbox

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
)

// MaxQueuedReports bounds the minibatches a node holds while no leader
// answers; the oldest are dropped beyond it (they only nudge scores).
const MaxQueuedReports = 100_000

// MaxReportPairs bounds the (id, loss) pairs one forwarded report request
// carries; a request holds at least one minibatch.
const MaxReportPairs = 1 << 16

// MaxOfferBytes bounds the sample bytes queued for co-owners; beyond it
// an offer is dropped, and the co-owner reads the sample through itself
// when it is next asked for it.
const MaxOfferBytes = 64 << 20

// MaxOfferRequest bounds the sample bytes of one offer request; a request
// holds at least one sample.
const MaxOfferRequest = 4 << 20

// queuedReport is a minibatch waiting for the leader; claim is the
// number of the Claim that holds it for a request in flight, 0 for none.
type queuedReport struct {
	claim uint64
	batch wire.ReportBatch
}

// Claim is queued minibatches taken for one request to the leader. They
// stay queued, out of any other claim's reach, until the request ends:
// Sent removes them, Release (the request failed) leaves them to the
// next claim. The zero Claim holds nothing.
type Claim struct {
	Batches []wire.ReportBatch
	id      uint64
}

// Outbox is a node's queues of what it has yet to send. The node drains
// it wire.FlushEvery after something is queued, and only then: Queued
// says when something is, Pending whether anything is left to take.
// The zero value is empty and ready. Its methods are safe for concurrent
// use and never block.
type Outbox struct {
	// mu guards the queues: reports and their claims, scores, and
	// offers, offerBytes and offering; and the making of wake and ended.
	mu         sync.Mutex
	wake       chan struct{} // holds a value once something is queued; made at first use
	ended      chan struct{} // holds a value once an offer request has ended; made at first use
	reports    []queuedReport
	claimSeq   uint64
	claimEnded chan struct{} // closed when a claim ends; made at first wait
	pairs      int           // (id, loss) pairs in reports
	scores     wire.ScoreQueue
	offers     map[string][]wire.OfferItem // co-owner -> samples to hand it
	offerBytes int                         // Value bytes in offers
	offering   map[string]bool             // co-owners with a request in flight

	reportsDropped atomic.Int64 // reports dropped beyond MaxQueuedReports
	offersDropped  atomic.Int64 // offers dropped beyond MaxOfferBytes or retries

	scoresTaken time.Time // when TakeScoresDue last took the scores
	reportsSent time.Time // when Sent last ran
}

// Queued returns a channel that can be received from once something has
// been queued since the last receive, or a co-owner's offer request has
// ended with more queued for it. One receive stands for any number.
func (o *Outbox) Queued() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return lazyChan(&o.wake)
}

// Pending reports whether a drain would find anything to take: queued
// reports no claim holds, scores, or offers for a co-owner without a
// request in flight. Reports and offers waiting on a request in flight
// are not pending; Release and Offered signal Queued when it ends with
// them left.
func (o *Outbox) Pending() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.scores.Queued() > 0 {
		return true
	}
	for i := range o.reports {
		if o.reports[i].claim == 0 {
			return true
		}
	}
	for co, items := range o.offers {
		if len(items) > 0 && !o.offering[co] {
			return true
		}
	}
	return false
}

// OfferEnded returns a channel that can be received from once an offer
// request has ended (Offered was called) since the last receive: where
// OfferBacklog may have fallen.
func (o *Outbox) OfferEnded() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return lazyChan(&o.ended)
}

// signalLocked makes Queued ready, if it is not already.
func (o *Outbox) signalLocked() {
	notify(lazyChan(&o.wake))
}

// lazyChan returns *c, making it (with room for one value) if it is nil.
func lazyChan(c *chan struct{}) chan struct{} {
	if *c == nil {
		*c = make(chan struct{}, 1)
	}
	return *c
}

// notify makes c ready to receive from, if it is not already.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// ReportsDropped is the number of minibatches dropped beyond
// MaxQueuedReports.
func (o *Outbox) ReportsDropped() int64 { return o.reportsDropped.Load() }

// OffersDropped is the number of offers dropped beyond MaxOfferBytes or
// after their last try.
func (o *Outbox) OffersDropped() int64 { return o.offersDropped.Load() }

// QueueReport holds a minibatch for the leader, dropping the oldest beyond
// MaxQueuedReports (a claimed one too: its request carries it anyway).
func (o *Outbox) QueueReport(b wire.ReportBatch) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.reports) >= MaxQueuedReports {
		o.pairs -= len(o.reports[0].batch.IDs)
		o.reports = o.reports[1:]
		o.reportsDropped.Add(1)
	}
	o.reports = append(o.reports, queuedReport{batch: b})
	o.pairs += len(b.IDs)
	o.signalLocked()
}

// ClaimReports claims the oldest minibatches no claim holds, up to about
// MaxReportPairs pairs; ok is false if there are none.
func (o *Outbox) ClaimReports() (c Claim, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, _ = o.claimLocked(func(*wire.ReportBatch) bool { return true })
	return c, c.id != 0
}

// ClaimReportsDue is ClaimReports once the reports are due for a mesh of
// members peers: wire.ReportsEvery(members) after they were last sent
// (Sent), or sooner once MaxReportPairs pairs are queued (what one
// request carries). Reports not yet due stay, and ok is false; so the
// leader's report requests do not grow with the mesh (see
// wire.ReportsEvery). In a mesh of up to 9 peers every call claims them.
func (o *Outbox) ClaimReportsDue(now time.Time, members int) (c Claim, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	every := wire.ReportsEvery(members)
	if every > wire.FlushEvery && o.pairs < MaxReportPairs && now.Sub(o.reportsSent) < every {
		return Claim{}, false
	}
	c, _ = o.claimLocked(func(*wire.ReportBatch) bool { return true })
	return c, c.id != 0
}

// ClaimReportsOf claims the oldest minibatches of job, up to about
// MaxReportPairs pairs, for a request that must reach the leader after
// every one of the job's queued before it (a done): more says that more
// of the job's are left unclaimed. While another claim holds some of the
// job's, it claims none, and busy is a channel closed when a claim ends:
// that request may still be on its way, and the leader must merge it
// first. With none of the job's queued, c is the zero Claim.
func (o *Outbox) ClaimReportsOf(job wire.JobKey) (c Claim, more bool, busy <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	of := func(b *wire.ReportBatch) bool { return b.Dataset == job.Dataset && b.Job == job.Job }
	for i := range o.reports {
		if q := &o.reports[i]; q.claim != 0 && of(&q.batch) {
			if o.claimEnded == nil {
				o.claimEnded = make(chan struct{})
			}
			return Claim{}, false, o.claimEnded
		}
	}
	c, more = o.claimLocked(of)
	return c, more, nil
}

// claimLocked claims the oldest unclaimed minibatches that of accepts,
// up to about MaxReportPairs pairs (at least one); more reports whether
// others it accepts are left. With none, c is the zero Claim.
func (o *Outbox) claimLocked(of func(*wire.ReportBatch) bool) (c Claim, more bool) {
	pairs := 0
	for i := range o.reports {
		q := &o.reports[i]
		if q.claim != 0 || !of(&q.batch) {
			continue
		}
		if pairs >= MaxReportPairs {
			more = true
			break
		}
		if c.id == 0 {
			o.claimSeq++
			c.id = o.claimSeq
		}
		q.claim = c.id
		c.Batches = append(c.Batches, q.batch)
		pairs += len(q.batch.IDs)
	}
	return c, more
}

// Sent removes the minibatches of c, sent at now: the leader has them.
func (o *Outbox) Sent(c Claim, now time.Time) {
	if c.id == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reportsSent = now
	o.reports = slices.DeleteFunc(o.reports, func(q queuedReport) bool {
		if q.claim != c.id {
			return false
		}
		o.pairs -= len(q.batch.IDs)
		return true
	})
	o.endClaimLocked()
}

// Release leaves the minibatches of c queued for the next claim: its
// request failed.
func (o *Outbox) Release(c Claim) {
	if c.id == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range o.reports {
		if q := &o.reports[i]; q.claim == c.id {
			q.claim = 0
		}
	}
	o.endClaimLocked()
	o.signalLocked()
}

// endClaimLocked wakes whoever waits for a claim to end.
func (o *Outbox) endClaimLocked() {
	if o.claimEnded != nil {
		close(o.claimEnded)
		o.claimEnded = nil
	}
}

// QueuedReports is the number of minibatches waiting for the leader.
func (o *Outbox) QueuedReports() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.reports)
}

// QueueScores queues samples of a job with their merged scores and
// stamps for their owners (as where places them; see
// wire.ScoreQueue.Add), and returns those that self owns.
func (o *Outbox) QueueScores(where wire.Placement, self string, job wire.JobKey, m wire.Merged) (local []uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(m.IDs) > 0 {
		o.signalLocked()
	}
	return o.scores.Add(where, self, job, m, nil)
}

// TakeScoresDue takes the score queue as TakeScores does once it is due
// for a mesh of members peers with replicas owners a sample:
// wire.ScoresEvery(members) after it was last taken, or sooner once it
// holds wire.ScoresPerOwner samples for each other member on average,
// counted as they are sent: to each of their owners, or with pass to
// their first owner alone (counted once for every owner, the leader's
// messages carried half of ScoresPerOwner at two owners a sample). A
// queue not yet due stays, and TakeScoresDue returns nil; so the
// leader's messages to owners, and what waits for them, grow with the
// mesh: a few a second to each of 1,000 peers and under a second's
// scores, where every FlushEvery would be 40,000 messages a second. pass
// is wire.ScoreQueue.Take's: the leader's scores are passed on by their
// first owners.
func (o *Outbox) TakeScoresDue(now time.Time, members, replicas int, pass bool) map[wire.JobKey]map[string]*wire.ScoresReq {
	o.mu.Lock()
	defer o.mu.Unlock()
	queued := o.scores.Queued()
	if queued == 0 {
		return nil
	}
	// Up to FlushEvery, every flush takes them (the flush that comes
	// FlushEvery after a queueing may find a little less since the last).
	every := wire.ScoresEvery(members)
	copies := max(replicas, 1) // each sample goes to its owners...
	if pass {
		copies = 1 // ...or to its first owner alone, to pass on
	}
	enough := queued*copies >= wire.ScoresPerOwner*max(members-1, 1)
	if every > wire.FlushEvery && !enough && now.Sub(o.scoresTaken) < every {
		return nil
	}
	o.scoresTaken = now
	return o.scores.Take(pass)
}

// TakeScores empties the score queue and returns it (see
// wire.ScoreQueue.Take); nil if it held nothing for another node. Taken
// empty, the queue lets go of the lists of the jobs that queued nothing.
func (o *Outbox) TakeScores(pass bool) map[wire.JobKey]map[string]*wire.ScoresReq {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.scores.Take(pass)
}

// QueueOffer queues item for each co-owner but self, dropping it for a
// co-owner beyond MaxOfferBytes. item.Value is kept, not copied.
func (o *Outbox) QueueOffer(item wire.OfferItem, owners []string, self string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	queued := false
	for _, co := range owners {
		if co == self {
			continue
		}
		if o.offerBytes+len(item.Value) > MaxOfferBytes {
			o.offersDropped.Add(1)
			continue
		}
		if o.offers == nil {
			o.offers = make(map[string][]wire.OfferItem)
		}
		o.offers[co] = append(o.offers[co], item)
		o.offerBytes += len(item.Value)
		queued = true
	}
	if queued {
		o.signalLocked()
	}
}

// TakeOffers takes the next request's worth (at most MaxOfferRequest
// bytes) of queued samples for each co-owner without a request in flight,
// and marks those co-owners as in flight until Offered is called.
func (o *Outbox) TakeOffers() map[string][]wire.OfferItem {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out map[string][]wire.OfferItem
	for co, items := range o.offers {
		if len(items) == 0 || o.offering[co] {
			continue
		}
		size, k := 0, 0
		for k < len(items) && (k == 0 || size+len(items[k].Value) <= MaxOfferRequest) {
			size += len(items[k].Value)
			k++
		}
		if out == nil {
			out = make(map[string][]wire.OfferItem)
		}
		out[co] = items[:k:k]
		o.offers[co] = items[k:]
		o.offerBytes -= size
		if o.offering == nil {
			o.offering = make(map[string]bool)
		}
		o.offering[co] = true
	}
	return out
}

// Offered ends co's request in flight. If retry, the batch is queued again,
// each sample up to three tries in all and within MaxOfferBytes; the rest
// are counted as dropped. If samples are left queued for co, Queued is
// signalled.
func (o *Outbox) Offered(co string, batch []wire.OfferItem, retry bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.offering, co)
	notify(lazyChan(&o.ended))
	defer func() {
		if len(o.offers[co]) > 0 {
			o.signalLocked()
		}
	}()
	if !retry {
		return
	}
	for _, it := range batch {
		if it.Tries < 2 && o.offerBytes+len(it.Value) <= MaxOfferBytes {
			it.Tries++
			o.offers[co] = append(o.offers[co], it)
			o.offerBytes += len(it.Value)
		} else {
			o.offersDropped.Add(1)
		}
	}
}

// OfferBacklog is the bytes queued or in flight to co-owners: positive
// while any request is in flight.
func (o *Outbox) OfferBacklog() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.offering) > 0 {
		return o.offerBytes + 1
	}
	return o.offerBytes
}
