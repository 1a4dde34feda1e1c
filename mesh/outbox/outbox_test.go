package outbox

import (
	"testing"

	"github.com/shade-mesh/shade/mesh/wire"
)

func TestReportsStayUntilSent(t *testing.T) {
	var o Outbox
	if _, _, ok := o.PeekReports(); ok {
		t.Fatal("an empty outbox has reports")
	}
	for e := range 3 {
		o.QueueReport(wire.ReportBatch{Dataset: "ds", Epoch: e, IDs: []uint32{1}})
	}
	send, last, ok := o.PeekReports()
	if !ok || len(send) != 3 || last != 3 {
		t.Fatalf("peek: %d batches up to %d", len(send), last)
	}
	o.QueueReport(wire.ReportBatch{Dataset: "ds", Epoch: 3})
	o.SentReports(last)
	if n := o.QueuedReports(); n != 1 {
		t.Fatalf("%d queued after the first three were sent, want 1", n)
	}
}

func TestOffersRetryThenDrop(t *testing.T) {
	var o Outbox
	o.QueueOffer(wire.OfferItem{ID: 7, Value: make([]byte, 10)}, []string{"me", "a", "b"}, "me")
	if got := o.OfferBacklog(); got != 20 {
		t.Fatalf("backlog %d, want 20", got)
	}
	batches := o.TakeOffers()
	if len(batches) != 2 || len(batches["a"]) != 1 {
		t.Fatalf("took %v", batches)
	}
	if o.TakeOffers() != nil {
		t.Fatal("took again while requests are in flight")
	}
	if got := o.OfferBacklog(); got != 1 {
		t.Fatalf("backlog with requests in flight %d, want 1", got)
	}
	o.Offered("b", batches["b"], false)
	for try := range 3 {
		o.Offered("a", batches["a"], true)
		batches = o.TakeOffers()
		if try < 2 && len(batches["a"]) != 1 {
			t.Fatalf("try %d: not queued again", try)
		}
	}
	if o.OffersDropped() != 1 {
		t.Fatalf("%d dropped after three tries, want 1", o.OffersDropped())
	}
}

// ready reports whether Queued can be received from, and receives.
func ready(o *Outbox) bool {
	select {
	case <-o.Queued():
		return true
	default:
		return false
	}
}

func TestQueuedSaysWhenThereIsSomethingToTake(t *testing.T) {
	var o Outbox
	if ready(&o) || o.Pending() {
		t.Fatal("an empty outbox is ready")
	}

	o.QueueReport(wire.ReportBatch{Dataset: "ds", IDs: []uint32{1}})
	o.QueueReport(wire.ReportBatch{Dataset: "ds", IDs: []uint32{2}})
	if !ready(&o) || ready(&o) {
		t.Fatal("two reports queued: want Queued ready once")
	}
	_, last, _ := o.PeekReports()
	if !o.Pending() {
		t.Fatal("reports peeked but not sent are not pending")
	}
	o.SentReports(last)
	if o.Pending() {
		t.Fatal("pending with every report sent")
	}

	where := wire.Placement{Groups: 1, Group: func(uint32) int { return 0 }, Owners: func(int) []string { return []string{"a"} }}
	o.QueueScores(where, "me", wire.JobKey{Dataset: "ds"}, []uint32{3}, []float64{1.5})
	if !ready(&o) || !o.Pending() {
		t.Fatal("scores queued: not ready, or not pending")
	}
	o.TakeScores()

	o.QueueOffer(wire.OfferItem{ID: 7, Value: []byte("x")}, []string{"a"}, "me")
	if !ready(&o) || !o.Pending() {
		t.Fatal("an offer queued: not ready, or not pending")
	}
	batch := o.TakeOffers()["a"]
	o.QueueOffer(wire.OfferItem{ID: 8, Value: []byte("y")}, []string{"a"}, "me")
	ready(&o)
	if o.Pending() {
		t.Fatal("an offer for a co-owner with a request in flight is pending")
	}
	select {
	case <-o.OfferEnded():
		t.Fatal("OfferEnded ready with the request still in flight")
	default:
	}
	o.Offered("a", batch, false)
	select {
	case <-o.OfferEnded():
	default:
		t.Fatal("the request ended: OfferEnded not ready")
	}
	if !ready(&o) || !o.Pending() {
		t.Fatal("the request in flight ended with an offer left: not ready, or not pending")
	}
	o.Offered("a", o.TakeOffers()["a"], false)
	if ready(&o) || o.Pending() {
		t.Fatal("ready, or pending, with nothing left")
	}
}
