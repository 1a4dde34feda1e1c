package mesh

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// doneLog counts, on the leader n0, the reports, dones and joins that
// reach it by each method, and the (id, loss) pairs each carried.
type doneLog struct {
	mu    sync.Mutex
	calls map[peer.Method]int
	pairs map[peer.Method]int
}

// handlers is a ClusterConfig.handlers that wraps n0's report and done
// methods to count them, and then removes those in drop (as a node that
// refuses them, or a build that does not know them).
func (l *doneLog) handlers(drop ...peer.Method) func(*Node, map[peer.Method]peerHandler) {
	return func(n *Node, h map[peer.Method]peerHandler) {
		if n.Name() != "n0" {
			return
		}
		for _, m := range []peer.Method{wire.MethodReport, wire.MethodDone, wire.MethodReportDone, wire.MethodJoin} {
			inner := h[m]
			h[m] = func(ctx context.Context, from string, body []byte) (any, error) {
				var batches []wire.ReportBatch
				switch m {
				case wire.MethodReport:
					var req wire.ReportReq
					_ = msgpack.Unmarshal(body, &req)
					batches = req.Batches
				case wire.MethodDone, wire.MethodReportDone:
					var req wire.DoneReq
					_ = msgpack.Unmarshal(body, &req)
					batches = req.Reports
				}
				l.mu.Lock()
				l.calls[m]++
				for _, b := range batches {
					l.pairs[m] += len(b.IDs)
				}
				l.mu.Unlock()
				return inner(ctx, from, body)
			}
		}
		for _, m := range drop {
			delete(h, m)
		}
	}
}

// reportEpoch0 has a rank of a world of one on p ask for epoch 0's order
// of job on dataset "ds", and report batches minibatches of batch
// samples of it.
func reportEpoch0(t *testing.T, p *testPeer, job string, batch, batches int) {
	t.Helper()
	slice, _, err := p.node.Order(context.Background(), "ds", job, 0, 0, 1)
	if err != nil || len(slice) < batch*batches {
		t.Fatalf("job %q: order of epoch 0: %d ids, %v", job, len(slice), err)
	}
	for k := range batches {
		ids, losses := slice[k*batch:(k+1)*batch], make([]float64, batch)
		for i := range losses {
			losses[i] = float64(i%5) + 0.5
		}
		if err := p.node.Report("ds", job, 0, ids, losses); err != nil {
			t.Fatal(err)
		}
	}
}

func (l *doneLog) count(m peer.Method) (calls, pairs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[m], l.pairs[m]
}

// TestLeadersOwnDoneWithoutAnAnswer: a done the leader's own node
// reports with no answer wanted (a rank on it that joins again, its
// epoch implied done: Order) is served here, not sent; where orders run
// ahead the leader has an answer, and took the nil one for a place to
// put it, and crashed (chaos, with the leader's node holding a rank).
// Another node's such done is sent, and its answer read.
func TestLeadersOwnDoneWithoutAnAnswer(t *testing.T) {
	m := startMesh(t, 2, meshOpts{samples: 400, configure: func(_ int, c *Config) { c.OrderAhead = 1 }})
	lead := m.leader(t)
	ctx := context.Background()
	// Two jobs: the other has trained all but a few samples of epoch 0
	// when the default job's done of it comes, so the leader's answer
	// has the default job wait for it before its next epoch begins.
	if _, _, err := lead.node.Order(ctx, "ds", "", 0, 0, 1); err != nil {
		t.Fatal(err)
	}
	slice, _, err := lead.node.Order(ctx, "ds", "other", 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	trained := slices.Clone(slice[:len(slice)-4])
	if err := lead.node.Report("ds", "other", 0, trained, make([]float64, len(trained))); err != nil {
		t.Fatal(err)
	}
	gen, _, _ := lead.node.ordered[0].def.book.Head()
	req := &wire.DoneReq{Dataset: "ds", Gen: gen, Epoch: 0, Rank: 0, Node: lead.node.Name()}
	if _, err := lead.node.reportDone(ctx, req, nil); err != nil {
		t.Fatal(err)
	}
	// Another node's done with no answer wanted and no reports to carry
	// goes as a done alone, and the leader's answer, whatever it is, is
	// not decoded into nothing (it failed so, the done counted all the
	// same, and the rank's node sent its join and done again and again).
	n1 := m.byName("n1")
	if _, _, err := n1.node.Order(ctx, "ds", "third", 0, 0, 1); err != nil {
		t.Fatal(err)
	}
	js := n1.node.ordered[0].lookupJob("third")
	gen, _, _ = js.book.Head()
	if _, err := n1.node.reportDone(ctx, &wire.DoneReq{Dataset: "ds", Job: "third", Gen: gen, Epoch: 0, Rank: 0, Node: "n1"}, nil); err != nil {
		t.Fatalf("n1's done with no answer wanted: %v", err)
	}
}

// TestDoneCarriesItsNodesReports: a rank on n1 reports three minibatches
// and finishes the epoch; n1 sends the leader n0 its queued reports with
// the done, in one request (MethodReportDone), and the leader has merged
// them when the done returns. A leader that does not know the method (an
// older build) gets the reports and then the done, as before, and the
// next done goes so without asking it the method again; a leader
// that refuses the done keeps the reports merged, and n1 does not hold
// them to send again. Every pair reaches the leader once.
func TestDoneCarriesItsNodesReports(t *testing.T) {
	const batch, batches = 64, 3
	for _, tc := range []struct {
		name string
		// drop: n0's methods removed. Without MethodReport, n1's own
		// flush of the reports fails and keeps them (nothing else
		// forwards them), so only the done can carry them.
		drop    []peer.Method
		refused bool // a done for a rank outside the world
	}{
		{name: "carried", drop: []peer.Method{wire.MethodReport}},
		{name: "older leader", drop: []peer.Method{wire.MethodReportDone}},
		{name: "done refused", drop: []peer.Method{wire.MethodReport}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &doneLog{calls: map[peer.Method]int{}, pairs: map[peer.Method]int{}}
			m := startMesh(t, 2, meshOpts{samples: 400, minSize: 1, maxSize: 8, configure: func(_ int, c *Config) {
				c.Cluster.handlers = log.handlers(tc.drop...)
			}})
			lead, n1 := m.leader(t), m.byName("n1")
			if lead.node.Name() != "n0" {
				t.Fatalf("leader %s, want n0", lead.node.Name())
			}
			ctx := context.Background()
			reportEpoch0(t, n1, "", batch, batches)
			if tc.refused {
				js := n1.node.ordered[0].def
				gen, _, _ := js.book.Head()
				req := &wire.DoneReq{Dataset: "ds", Gen: gen, Epoch: 0, Rank: 5, Node: "n1"}
				_, err := n1.node.reportDone(ctx, req, nil)
				if err == nil || !strings.Contains(err.Error(), "refused the done") {
					t.Fatalf("a done for rank 5 of world 1: %v, want the leader's refusal", err)
				}
			} else if err := n1.node.Done(ctx, "ds", "", 0, 0); err != nil {
				t.Fatal(err)
			}

			if got := lead.node.ordered[0].def.tableInfo().Scored; got != batch*batches {
				t.Errorf("the leader has %d samples scored when the done returns, want %d", got, batch*batches)
			}
			if q := n1.node.out.QueuedReports(); q != 0 {
				t.Errorf("n1 still holds %d minibatches for the leader", q)
			}
			carriedCalls, carried := log.count(wire.MethodReportDone)
			reportCalls, reported := log.count(wire.MethodReport)
			switch tc.name {
			case "older leader":
				if carried != 0 || reported != batch*batches {
					t.Errorf("the reports reached an older leader %d pairs carried, %d reported in %d requests; want all %d reported", carried, reported, reportCalls, batch*batches)
				}
				if calls, _ := log.count(wire.MethodDone); calls == 0 {
					t.Error("the done did not reach the older leader as a MethodDone")
				}
			default:
				if carriedCalls != 1 || carried != batch*batches || reported != 0 {
					t.Errorf("%d dones carried %d pairs, %d reported; want one done with all %d", carriedCalls, carried, reported, batch*batches)
				}
			}
			if tc.refused {
				return
			}
			waitFor(t, 10*time.Second, "epoch 1 on n1", func() bool {
				p := n1.node.ordered[0].def.book.Newest()
				return p != nil && p.Epoch == 1
			})
			if tc.name != "older leader" {
				return
			}
			// n1 remembers that the leader does not know the method: the
			// next done is not offered to it, and fails nothing.
			failed := func() (errs uint64) {
				for _, p := range n1.node.PeerStats() {
					if p.Name == "n0" {
						errs += p.Errors
					}
				}
				return errs
			}
			before := failed()
			slice, _, err := n1.node.Order(ctx, "ds", "", 1, 0, 1)
			if err != nil || len(slice) < batch {
				t.Fatalf("order of epoch 1: %d ids, %v", len(slice), err)
			}
			if err := n1.node.Report("ds", "", 1, slice[:batch], make([]float64, batch)); err != nil {
				t.Fatal(err)
			}
			if err := n1.node.Done(ctx, "ds", "", 1, 0); err != nil {
				t.Fatal(err)
			}
			if n := failed() - before; n != 0 {
				t.Errorf("%d requests to the older leader failed with epoch 1's done, want none", n)
			}
			if _, got := log.count(wire.MethodReport); got != batch*(batches+1) {
				t.Errorf("the older leader has %d pairs reported, want %d", got, batch*(batches+1))
			}
		})
	}
}

// doneLoggedMesh starts three nodes whose leader n0 counts the reports,
// dones and joins that reach it (doneLog).
func doneLoggedMesh(t *testing.T) (*testMesh, *doneLog) {
	t.Helper()
	log := &doneLog{calls: map[peer.Method]int{}, pairs: map[peer.Method]int{}}
	m := startMesh(t, 3, meshOpts{samples: 400, minSize: 1, maxSize: 8, configure: func(_ int, c *Config) {
		c.Cluster.handlers = log.handlers()
	}})
	if lead := m.leader(t); lead.node.Name() != "n0" {
		t.Fatalf("leader %s, want n0", lead.node.Name())
	}
	return m, log
}

// TestWaitingRankDoesNotRepeatItsDone: two ranks, on n1 and n2, train six
// epochs, each reporting a minibatch and sending SHADE.DONE before it
// asks for the next epoch's order, which the rank that finishes first
// waits for. A rank whose done reached the leader does not announce
// itself again while it waits (a join, and its done repeated, as asking
// for the next epoch implies it): the leader n0 takes one join a rank,
// for epoch 0, and every done reaches it.
func TestWaitingRankDoesNotRepeatItsDone(t *testing.T) {
	const epochs = 6
	m, log := doneLoggedMesh(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for rank, name := range []string{"n1", "n2"} {
		p := m.byName(name)
		c := p.client(t)
		wg.Go(func() {
			for epoch := range epochs {
				slice, err := c.Do(ctx, "SHADE.ORDER", "ds", epoch, rank, 2).Int64Slice()
				if err != nil || len(slice) == 0 {
					t.Errorf("%s: SHADE.ORDER of epoch %d: %d ids, %v", name, epoch, len(slice), err)
					return
				}
				ids, losses := make([]uint32, len(slice)), make([]float64, len(slice))
				for i, id := range slice {
					ids[i], losses[i] = uint32(id), 1.5
				}
				if err := p.node.Report("ds", "", epoch, ids, losses); err != nil {
					t.Error(err)
					return
				}
				if err := c.Do(ctx, "SHADE.DONE", "ds", epoch, rank).Err(); err != nil {
					t.Errorf("%s: SHADE.DONE of epoch %d: %v", name, epoch, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if joins, _ := log.count(wire.MethodJoin); joins != 2 {
		t.Errorf("the leader took %d joins, want 2 (a rank each, for epoch 0)", joins)
	}
	carried, _ := log.count(wire.MethodReportDone)
	plain, _ := log.count(wire.MethodDone)
	if carried+plain < 2*epochs {
		t.Errorf("the leader took %d dones (%d carrying reports), want the ranks' %d", carried+plain, carried, 2*epochs)
	}
}

// TestImpliedDoneCarriesItsNodesReports: a rank on n1 reports three
// minibatches and asks for the next epoch's order without SHADE.DONE,
// which says it finished the epoch. n1 sends the leader n0 its queued
// reports with that done: n0 does not serve MethodReport here, so that
// n1's own flush of the reports fails and only the done can carry them.
// When the next order comes, the leader has merged every pair once and n1
// holds none.
func TestImpliedDoneCarriesItsNodesReports(t *testing.T) {
	const batch, batches = 64, 3
	log := &doneLog{calls: map[peer.Method]int{}, pairs: map[peer.Method]int{}}
	m := startMesh(t, 2, meshOpts{samples: 400, minSize: 1, maxSize: 8, configure: func(_ int, c *Config) {
		c.Cluster.handlers = log.handlers(wire.MethodReport)
	}})
	lead, n1 := m.leader(t), m.byName("n1")
	if lead.node.Name() != "n0" {
		t.Fatalf("leader %s, want n0", lead.node.Name())
	}
	ctx := context.Background()
	reportEpoch0(t, n1, "", batch, batches)
	if _, err := n1.client(t).Do(ctx, "SHADE.ORDER", "ds", 1, 0, 1).Int64Slice(); err != nil {
		t.Fatalf("SHADE.ORDER of epoch 1 without SHADE.DONE of epoch 0: %v", err)
	}
	if got := lead.node.ordered[0].def.tableInfo().Scored; got != batch*batches {
		t.Errorf("the leader has %d samples scored when epoch 1 comes, want %d", got, batch*batches)
	}
	if q := n1.node.out.QueuedReports(); q != 0 {
		t.Errorf("n1 still holds %d minibatches for the leader", q)
	}
	if _, carried := log.count(wire.MethodReportDone); carried != batch*batches {
		t.Errorf("dones carried %d pairs, want %d", carried, batch*batches)
	}
}

// TestDoneWaitsOnlyForItsJob: jobs j and k train one rank each on n1.
// k's done, carrying k's reports, is held at the leader n0 (as a done
// that ends an epoch waits there for the next order's draw); j's done,
// sent meanwhile from the same node, carries j's reports and returns
// without waiting for it, and k's reports stay queued on n1 until k's
// done is answered. n0 does not serve MethodReport here, so that only
// the dones carry the reports.
func TestDoneWaitsOnlyForItsJob(t *testing.T) {
	const batch, batches = 64, 2
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m := startMesh(t, 2, meshOpts{samples: 400, minSize: 1, maxSize: 8, configure: func(_ int, c *Config) {
		c.Cluster.FetchTimeout = time.Minute // k's done is held, not timed out
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			if n.Name() != "n0" {
				return
			}
			delete(h, wire.MethodReport)
			inner := h[wire.MethodReportDone]
			h[wire.MethodReportDone] = func(ctx context.Context, from string, body []byte) (any, error) {
				var req wire.DoneReq
				if err := msgpack.Unmarshal(body, &req); err == nil && req.Job == "k" {
					once.Do(func() { close(arrived) })
					<-release
				}
				return inner(ctx, from, body)
			}
		}
	}})
	lead, n1 := m.leader(t), m.byName("n1")
	if lead.node.Name() != "n0" {
		t.Fatalf("leader %s, want n0", lead.node.Name())
	}
	ctx := context.Background()
	for _, job := range []string{"j", "k"} {
		reportEpoch0(t, n1, job, batch, batches)
	}
	scored := func(job string) int { return lead.node.ordered[0].lookupJob(job).tableInfo().Scored }

	kDone := make(chan error, 1)
	go func() { kDone <- n1.node.Done(ctx, "ds", "k", 0, 0) }()
	<-arrived
	jDone := make(chan error, 1)
	go func() { jDone <- n1.node.Done(ctx, "ds", "j", 0, 0) }()
	select {
	case err := <-jDone:
		if err != nil {
			t.Fatalf("job j's done: %v", err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("job j's done waited for job k's, held at the leader")
	}
	if got := scored("j"); got != batch*batches {
		t.Errorf("job j: the leader has %d samples scored when its done returns, want %d", got, batch*batches)
	}
	if q := n1.node.out.QueuedReports(); q != batches {
		t.Errorf("n1 holds %d minibatches while k's done is held, want k's %d", q, batches)
	}
	close(release)
	if err := <-kDone; err != nil {
		t.Fatalf("job k's done: %v", err)
	}
	if got := scored("k"); got != batch*batches {
		t.Errorf("job k: the leader has %d samples scored when its done returns, want %d", got, batch*batches)
	}
	if q := n1.node.out.QueuedReports(); q != 0 {
		t.Errorf("n1 still holds %d minibatches for the leader", q)
	}
}

// TestReconcilerRepeatsOnlyUncountedDones: rank 0 on n1 finishes epoch 0
// while rank 1 on n2 has not; the reconciler on n1 does not repeat the
// done that reached the leader n0, however often it runs, until n1 sees a
// later term (a leader that took over again under its name): then once.
func TestReconcilerRepeatsOnlyUncountedDones(t *testing.T) {
	m, log := doneLoggedMesh(t)
	ctx := context.Background()
	n1, n2 := m.byName("n1"), m.byName("n2")
	c1, c2 := n1.client(t), n2.client(t)
	var wg sync.WaitGroup
	for rank, c := range []*redis.Client{c1, c2} {
		wg.Go(func() {
			if err := c.Do(ctx, "SHADE.ORDER", "ds", 0, rank, 2).Err(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := c1.Do(ctx, "SHADE.DONE", "ds", 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	dones := func() int {
		plain, _ := log.count(wire.MethodDone)
		carried, _ := log.count(wire.MethodReportDone)
		return plain + carried
	}
	if got := dones(); got != 1 {
		t.Fatalf("the leader took %d dones, want rank 0's", got)
	}
	for range 3 {
		n1.node.reconcile(ctx)
	}
	if got := dones(); got != 1 {
		t.Fatalf("after three passes of n1's reconciler the leader took %d dones, want 1: it repeated a counted one", got)
	}
	n1.node.lead.observe(n1.node.lead.highest() + 1)
	for range 3 {
		n1.node.reconcile(ctx)
	}
	if got := dones(); got != 2 {
		t.Fatalf("after a later term and three passes the leader took %d dones, want 2: rank 0's, repeated once", got)
	}
}
