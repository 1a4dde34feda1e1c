package outbox

import (
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
)

func TestReportsStayUntilSent(t *testing.T) {
	var o Outbox
	if _, ok := o.ClaimReports(); ok {
		t.Fatal("an empty outbox has reports")
	}
	for e := range 3 {
		o.QueueReport(wire.ReportBatch{Dataset: "ds", Epoch: e, IDs: []uint32{1}})
	}
	c, ok := o.ClaimReports()
	if !ok || len(c.Batches) != 3 {
		t.Fatalf("claim: %d batches, %v", len(c.Batches), ok)
	}
	o.QueueReport(wire.ReportBatch{Dataset: "ds", Epoch: 3})
	if c2, ok := o.ClaimReports(); !ok || len(c2.Batches) != 1 || c2.Batches[0].Epoch != 3 {
		t.Fatalf("a second claim took %+v, want the one queued after the first claim", c2.Batches)
	} else {
		o.Release(c2)
	}
	o.Sent(c, time.Now())
	if n := o.QueuedReports(); n != 1 {
		t.Fatalf("%d queued after the first three were sent, want 1", n)
	}
	// A request that failed: its reports go with the next claim, oldest
	// first.
	o.QueueReport(wire.ReportBatch{Dataset: "ds", Epoch: 4})
	c, _ = o.ClaimReports()
	o.Release(c)
	if c, _ = o.ClaimReports(); len(c.Batches) != 2 || c.Batches[0].Epoch != 3 || c.Batches[1].Epoch != 4 {
		t.Fatalf("after a failed request the next claim took %+v, want epochs 3 and 4", c.Batches)
	}
}

// TestClaimReportsOf: a done's claim takes its job's reports alone,
// oldest first; while another claim holds some of the job's, it takes
// none and waits for that claim to end (which another job's claim does
// not hold up); past a request's worth it says more are left.
func TestClaimReportsOf(t *testing.T) {
	var o Outbox
	j, k := wire.JobKey{Dataset: "ds", Job: "j"}, wire.JobKey{Dataset: "ds", Job: "k"}
	queue := func(job wire.JobKey, epoch, pairs int) {
		o.QueueReport(wire.ReportBatch{Dataset: job.Dataset, Job: job.Job, Epoch: epoch, IDs: make([]uint32, pairs), Losses: make(wire.F32s, pairs)})
	}
	queue(j, 0, 1)
	queue(k, 0, 1)
	queue(j, 1, 1)
	cj, more, busy := o.ClaimReportsOf(j)
	if busy != nil || more || len(cj.Batches) != 2 || cj.Batches[0].Job != "j" || cj.Batches[1].Epoch != 1 {
		t.Fatalf("job j's claim: %+v, more %v, busy %v; want its two reports", cj.Batches, more, busy != nil)
	}
	ck, _, busy := o.ClaimReportsOf(k)
	if busy != nil || len(ck.Batches) != 1 || ck.Batches[0].Job != "k" {
		t.Fatalf("job k's claim beside j's: %+v, busy %v", ck.Batches, busy != nil)
	}
	queue(j, 2, 1)
	c, _, busy := o.ClaimReportsOf(j)
	if busy == nil || len(c.Batches) != 0 {
		t.Fatalf("job j's second claim while the first is in flight: %+v, busy %v; want none, and to wait", c.Batches, busy != nil)
	}
	o.Sent(ck, time.Now())
	<-busy // any claim's end wakes it; it asks again
	if _, _, busy = o.ClaimReportsOf(j); busy == nil {
		t.Fatal("job j's claim went through while its first request is still in flight")
	}
	o.Release(cj)
	<-busy
	c, more, busy = o.ClaimReportsOf(j)
	if busy != nil || more || len(c.Batches) != 3 {
		t.Fatalf("job j's claim after its request failed: %d batches, more %v, busy %v; want all 3", len(c.Batches), more, busy != nil)
	}
	o.Sent(c, time.Now())
	if n := o.QueuedReports(); n != 0 {
		t.Fatalf("%d reports left, want none", n)
	}
	// More than a request's worth: a claim of about MaxReportPairs, and
	// more left.
	queue(j, 3, MaxReportPairs)
	queue(j, 3, 1)
	c, more, _ = o.ClaimReportsOf(j)
	if len(c.Batches) != 1 || !more {
		t.Fatalf("a request's worth and one more: %d batches claimed, more %v", len(c.Batches), more)
	}
	o.Sent(c, time.Now())
	if c, more, _ = o.ClaimReportsOf(j); len(c.Batches) != 1 || more {
		t.Fatalf("the rest: %d batches claimed, more %v", len(c.Batches), more)
	}
}

// TestClaimedReportDroppedBeyondTheBound: a report dropped beyond
// MaxQueuedReports while a claim holds it leaves the claim's count and
// the queue consistent: the claim's end removes or releases what is left
// of it, and no report stays claimed, or pending, by mistake.
func TestClaimedReportDroppedBeyondTheBound(t *testing.T) {
	var o Outbox
	for e := range 3 {
		o.QueueReport(wire.ReportBatch{Dataset: "ds", Epoch: e, IDs: []uint32{1}})
	}
	c, _ := o.ClaimReports() // epochs 0-2, in flight
	for e := 3; e < MaxQueuedReports+2; e++ {
		o.QueueReport(wire.ReportBatch{Dataset: "ds", Epoch: e, IDs: []uint32{1}})
	}
	if got, want := o.ReportsDropped(), int64(2); got != want {
		t.Fatalf("%d reports dropped, want %d", got, want)
	}
	o.Release(c) // epoch 2 is left of the claim
	c2, ok := o.ClaimReports()
	if !ok || c2.Batches[0].Epoch != 2 {
		t.Fatalf("after the release the oldest claimed is %+v, want epoch 2", c2.Batches[:1])
	}
	o.Sent(c2, time.Now())
	if n := claimedReports(&o); n != 0 {
		t.Fatalf("%d reports held by a claim with no claim in flight", n)
	}
	left := o.QueuedReports()
	for o.Pending() {
		c, _ := o.ClaimReports()
		o.Sent(c, time.Now())
	}
	if n := o.QueuedReports(); n != 0 || o.pairs != 0 || left == 0 {
		t.Fatalf("drained: %d left, %d pairs (had %d)", n, o.pairs, left)
	}
}

// claimedReports counts the queued reports a claim holds.
func claimedReports(o *Outbox) (n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, q := range o.reports {
		if q.claim != 0 {
			n++
		}
	}
	return n
}

// TestClaimReportsDue: in a mesh of up to 9 peers the reports are
// claimed at every flush; in a larger one they wait wire.ReportsEvery
// after the last were sent, unless MaxReportPairs pairs are queued;
// those not sent are claimed again at once.
func TestClaimReportsDue(t *testing.T) {
	var o Outbox
	queue := func(pairs int) {
		o.QueueReport(wire.ReportBatch{Dataset: "ds", IDs: make([]uint32, pairs), Losses: make(wire.F32s, pairs)})
	}
	start := time.Unix(1000, 0)
	queue(1)
	for i := range 2 {
		at := start.Add(time.Duration(i) * time.Millisecond)
		c, ok := o.ClaimReportsDue(at, 3)
		if !ok {
			t.Fatalf("3 peers: not claimed at flush %d", i)
		}
		o.Sent(c, at)
		queue(1)
	}
	// 1,000 peers: ReportsEvery is ReportsMaxWait.
	if got := wire.ReportsEvery(1000); got != wire.ReportsMaxWait {
		t.Fatalf("ReportsEvery(1000) = %v, want %v", got, wire.ReportsMaxWait)
	}
	sent := start.Add(time.Millisecond)
	if _, ok := o.ClaimReportsDue(sent.Add(wire.ReportsMaxWait-time.Millisecond), 1000); ok || !o.Pending() {
		t.Fatal("1,000 peers: claimed before ReportsMaxWait with one pair queued")
	}
	at := sent.Add(wire.ReportsMaxWait)
	c, ok := o.ClaimReportsDue(at, 1000)
	if !ok {
		t.Fatal("1,000 peers: not claimed ReportsMaxWait after the last were sent")
	}
	if o.Pending() {
		t.Fatal("pending with every report claimed by a request in flight")
	}
	// Not sent (the leader did not answer): claimed again at once.
	o.Release(c)
	if !o.Pending() {
		t.Fatal("not pending after the request with the reports failed")
	}
	c, ok = o.ClaimReportsDue(at.Add(time.Millisecond), 1000)
	if !ok || len(c.Batches) != 1 {
		t.Fatalf("1,000 peers: %d batches claimed again after a failed send, want the 1 kept", len(c.Batches))
	}
	sent = at.Add(time.Millisecond)
	o.Sent(c, sent)
	// A request's worth: at once.
	queue(MaxReportPairs - 1)
	if _, ok := o.ClaimReportsDue(sent.Add(time.Millisecond), 1000); ok {
		t.Fatal("1,000 peers: claimed one pair short of a request's worth")
	}
	queue(1)
	c, ok = o.ClaimReportsDue(sent.Add(time.Millisecond), 1000)
	if !ok || len(c.Batches) != 2 {
		t.Fatalf("1,000 peers: %d batches claimed with a request's worth, want 2", len(c.Batches))
	}
	sent = sent.Add(time.Millisecond)
	o.Sent(c, sent)
	queue(1)
	if _, ok := o.ClaimReportsDue(sent.Add(time.Millisecond), 1000); ok {
		t.Fatal("1,000 peers: the sent pairs still counted")
	}
	// A done sends them whenever (ClaimReportsOf); the wait counts from
	// then.
	c, _, _ = o.ClaimReportsOf(wire.JobKey{Dataset: "ds"})
	if len(c.Batches) != 1 {
		t.Fatal("ClaimReportsOf did not claim what was not due")
	}
	sent = sent.Add(2 * time.Millisecond)
	o.Sent(c, sent)
	queue(1)
	if _, ok := o.ClaimReportsDue(sent.Add(wire.ReportsMaxWait/2), 1000); ok {
		t.Fatal("1,000 peers: claimed half ReportsMaxWait after a done's send")
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
	c, _ := o.ClaimReports()
	if o.Pending() {
		t.Fatal("reports claimed by a request in flight are pending")
	}
	o.Release(c)
	if !o.Pending() || !ready(&o) {
		t.Fatal("reports of a request that failed: not pending, or not ready")
	}
	c, _ = o.ClaimReports()
	o.Sent(c, time.Now())
	if o.Pending() {
		t.Fatal("pending with every report sent")
	}

	where := wire.Placement{Groups: 1, Group: func(uint32) int { return 0 }, Owners: func(int) []string { return []string{"a"} }}
	o.QueueScores(where, "me", wire.JobKey{Dataset: "ds"}, wire.Merged{IDs: []uint32{3}, Scores: []float32{1.5}})
	if !ready(&o) || !o.Pending() {
		t.Fatal("scores queued: not ready, or not pending")
	}
	o.TakeScores(false)

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

// TestTakeScoresDue: in a mesh of up to 9 peers the scores are taken at
// every flush; in a larger one they wait wire.ScoresEvery after the last
// take, unless wire.ScoresPerOwner a member are queued, counted as sent:
// to every owner, or with pass to the first alone.
func TestTakeScoresDue(t *testing.T) {
	var o Outbox
	where := wire.Placement{Groups: 1, Group: func(uint32) int { return 0 }, Owners: func(int) []string { return []string{"a", "b"} }}
	ds := wire.JobKey{Dataset: "ds"}
	queue := func(n int) {
		ids, scores := make([]uint32, n), make([]float32, n)
		o.QueueScores(where, "me", ds, wire.Merged{IDs: ids, Scores: scores})
	}
	start := time.Unix(1000, 0)
	queue(1)
	if o.TakeScoresDue(start, 3, 2, false) == nil {
		t.Fatal("3 peers: one sample queued was not taken")
	}
	queue(1)
	if o.TakeScoresDue(start.Add(time.Millisecond), 3, 2, false) == nil {
		t.Fatal("3 peers: not taken a millisecond after the last take")
	}
	// 1,000 peers: ScoresEvery is ScoresMaxWait.
	if got := wire.ScoresEvery(1000); got != wire.ScoresMaxWait {
		t.Fatalf("ScoresEvery(1000) = %v, want %v", got, wire.ScoresMaxWait)
	}
	queue(1)
	at := start.Add(time.Millisecond)
	if o.TakeScoresDue(at.Add(wire.ScoresMaxWait-time.Millisecond), 1000, 2, false) != nil || !o.Pending() {
		t.Fatal("1,000 peers: taken before ScoresMaxWait with one sample queued")
	}
	if o.TakeScoresDue(at.Add(wire.ScoresMaxWait), 1000, 2, false) == nil {
		t.Fatal("1,000 peers: not taken ScoresMaxWait after the last take")
	}
	// Enough for each other member: at once.
	at = at.Add(wire.ScoresMaxWait)
	queue(wire.ScoresPerOwner*999/2 - 1)
	if o.TakeScoresDue(at.Add(time.Millisecond), 1000, 2, false) != nil {
		t.Fatal("1,000 peers: taken one sample short of enough")
	}
	queue(1)
	if o.TakeScoresDue(at.Add(time.Millisecond), 1000, 2, false) == nil || o.Pending() {
		t.Fatal("1,000 peers: not taken with enough for every member")
	}
	if o.TakeScoresDue(at.Add(time.Hour), 1000, 2, false) != nil {
		t.Fatal("an empty queue taken")
	}
	// The leader's queue (pass): each sample goes to its first owner
	// alone, so enough for each other member is twice as many samples at
	// two owners a sample.
	at = at.Add(time.Hour)
	queue(1)
	if o.TakeScoresDue(at, 1000, 2, true) == nil {
		t.Fatal("1,000 peers, passed on: not taken an hour after the last take")
	}
	queue(wire.ScoresPerOwner*999 - 1)
	if o.TakeScoresDue(at.Add(time.Millisecond), 1000, 2, true) != nil {
		t.Fatal("1,000 peers, passed on: taken one sample short of enough")
	}
	queue(1)
	if o.TakeScoresDue(at.Add(time.Millisecond), 1000, 2, true) == nil || o.Pending() {
		t.Fatal("1,000 peers, passed on: not taken with enough for every member")
	}
}

// TestScoresEvery: FlushEvery up to 9 members, in proportion beyond, at
// most ScoresMaxWait (and ReportsEvery so, at most ReportsMaxWait).
func TestScoresEvery(t *testing.T) {
	for _, c := range []struct {
		members int
		want    time.Duration
	}{{1, wire.FlushEvery}, {9, wire.FlushEvery}, {17, 2 * wire.FlushEvery}, {101, 100 * wire.FlushEvery / 8}, {1000, wire.ScoresMaxWait}} {
		if got := wire.ScoresEvery(c.members); got != c.want {
			t.Errorf("ScoresEvery(%d) = %v, want %v", c.members, got, c.want)
		}
		if got := wire.ReportsEvery(c.members); got != c.want {
			t.Errorf("ReportsEvery(%d) = %v, want %v", c.members, got, c.want)
		}
	}
}
