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
