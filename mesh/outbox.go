package mesh

import (
	"sync"
	"sync/atomic"

	"github.com/shade-mesh/shade/mesh/wire"
)

// maxQueuedReports bounds the minibatches a node holds while no leader
// answers; the oldest are dropped beyond it (they only nudge scores).
const maxQueuedReports = 100_000

// maxReportPairs bounds the (id, loss) pairs one forwarded report request
// carries; a request holds at least one minibatch.
const maxReportPairs = 1 << 16

// maxOfferBytes bounds the sample bytes queued for co-owners; beyond it
// an offer is dropped, and the co-owner reads the sample through itself
// when it is next asked for it.
const maxOfferBytes = 64 << 20

// maxOfferRequest bounds the sample bytes of one offer request; a request
// holds at least one sample.
const maxOfferRequest = 4 << 20

// queuedReport is a minibatch waiting for the leader, numbered so that a
// flush removes exactly what it sent.
type queuedReport struct {
	seq   uint64
	batch wire.ReportBatch
}

// outbox holds what a node has yet to send: minibatch reports for the
// leader, merged scores for the samples' owners (on the leader), and
// samples read from the source for their co-owners. The node's runLoops
// drains it every wire.FlushEvery. Its methods are safe for concurrent use
// and never block on the network.
type outbox struct {
	// mu guards the queues: reports and reportSeq, scores, and offers,
	// offerBytes and offering.
	mu         sync.Mutex
	reports    []queuedReport
	reportSeq  uint64
	scores     wire.ScoreQueue
	offers     map[string][]wire.OfferItem // co-owner -> samples to hand it
	offerBytes int                         // Value bytes in offers
	offering   map[string]bool             // co-owners with a request in flight

	reportsDropped atomic.Int64 // reports dropped beyond maxQueuedReports
	offersDropped  atomic.Int64 // offers dropped beyond maxOfferBytes or retries
}

// queueReport holds a minibatch for the leader, dropping the oldest beyond
// maxQueuedReports.
func (o *outbox) queueReport(b wire.ReportBatch) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.reports) >= maxQueuedReports {
		o.reports = o.reports[1:]
		o.reportsDropped.Add(1)
	}
	o.reportSeq++
	o.reports = append(o.reports, queuedReport{seq: o.reportSeq, batch: b})
}

// peekReports returns the oldest queued minibatches, up to about
// maxReportPairs pairs, and the number of the last; they stay queued until
// sentReports(last). ok is false if none is queued.
func (o *outbox) peekReports() (send []wire.ReportBatch, last uint64, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.reports) == 0 {
		return nil, 0, false
	}
	pairs := 0
	for _, q := range o.reports {
		if pairs >= maxReportPairs {
			break
		}
		send = append(send, q.batch)
		pairs += len(q.batch.IDs)
		last = q.seq
	}
	return send, last, true
}

// sentReports removes the queued minibatches up to number last.
func (o *outbox) sentReports(last uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := 0
	for i < len(o.reports) && o.reports[i].seq <= last {
		i++
	}
	o.reports = o.reports[i:]
}

// queuedReports is the number of minibatches waiting for the leader.
func (o *outbox) queuedReports() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.reports)
}

// queueScores queues samples of dataset whose merged scores their owners
// (as r places them) need, and returns those that self owns.
func (o *outbox) queueScores(r wire.Owners, self, dataset string, ids []uint32) (local []uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.scores.Add(r, self, dataset, ids, nil)
}

// takeScores empties the score queue and returns it (see
// wire.ScoreQueue.Take); nil if it was empty.
func (o *outbox) takeScores() map[string]map[string]map[uint32]struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.scores.Len() == 0 {
		return nil
	}
	return o.scores.Take()
}

// queueOffer queues item for each co-owner but self, dropping it for a
// co-owner beyond maxOfferBytes. item.Value is kept, not copied.
func (o *outbox) queueOffer(item wire.OfferItem, owners []string, self string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, co := range owners {
		if co == self {
			continue
		}
		if o.offerBytes+len(item.Value) > maxOfferBytes {
			o.offersDropped.Add(1)
			continue
		}
		if o.offers == nil {
			o.offers = make(map[string][]wire.OfferItem)
		}
		o.offers[co] = append(o.offers[co], item)
		o.offerBytes += len(item.Value)
	}
}

// takeOffers takes the next request's worth (at most maxOfferRequest
// bytes) of queued samples for each co-owner without a request in flight,
// and marks those co-owners as in flight until offered is called.
func (o *outbox) takeOffers() map[string][]wire.OfferItem {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out map[string][]wire.OfferItem
	for co, items := range o.offers {
		if len(items) == 0 || o.offering[co] {
			continue
		}
		size, k := 0, 0
		for k < len(items) && (k == 0 || size+len(items[k].Value) <= maxOfferRequest) {
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

// offered ends co's request in flight. If retry, the batch is queued again,
// each sample up to three tries in all and within maxOfferBytes; the rest
// are counted as dropped.
func (o *outbox) offered(co string, batch []wire.OfferItem, retry bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.offering, co)
	if !retry {
		return
	}
	for _, it := range batch {
		if it.Tries < 2 && o.offerBytes+len(it.Value) <= maxOfferBytes {
			it.Tries++
			o.offers[co] = append(o.offers[co], it)
			o.offerBytes += len(it.Value)
		} else {
			o.offersDropped.Add(1)
		}
	}
}

// offerBacklog is the bytes queued or in flight to co-owners: positive
// while any request is in flight.
func (o *outbox) offerBacklog() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.offering) > 0 {
		return o.offerBytes + 1
	}
	return o.offerBytes
}
