package mesh

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// doneLog counts, on the leader n0, the reports and dones that reach it
// by each method, and the (id, loss) pairs each carried.
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
		for _, m := range []peer.Method{wire.MethodReport, wire.MethodDone, wire.MethodReportDone} {
			inner := h[m]
			h[m] = func(ctx context.Context, from string, body []byte) (any, error) {
				var batches []wire.ReportBatch
				if m == wire.MethodReport {
					var req wire.ReportReq
					_ = msgpack.Unmarshal(body, &req)
					batches = req.Batches
				} else {
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

func (l *doneLog) count(m peer.Method) (calls, pairs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[m], l.pairs[m]
}

// TestDoneCarriesItsNodesReports: a rank on n1 reports three minibatches
// and finishes the epoch; n1 sends the leader n0 its queued reports with
// the done, in one request (MethodReportDone), and the leader has merged
// them when the done returns. A leader that does not know the method (an
// older build) gets the reports and then the done, as before; a leader
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
			slice, err := n1.client(t).Do(ctx, "SHADE.ORDER", "ds", 0, 0, 1).Int64Slice()
			if err != nil || len(slice) < batch*batches {
				t.Fatalf("SHADE.ORDER: %d ids, %v", len(slice), err)
			}
			for k := range batches {
				ids, losses := make([]uint32, batch), make([]float64, batch)
				for i := range ids {
					ids[i], losses[i] = uint32(slice[k*batch+i]), float64(i%5)+0.5
				}
				if err := n1.node.Report("ds", "", 0, ids, losses); err != nil {
					t.Fatal(err)
				}
			}
			if tc.refused {
				js := n1.node.ordered[0].def
				gen, _, _ := js.book.Head()
				req := &wire.DoneReq{Dataset: "ds", Gen: gen, Epoch: 0, Rank: 5, Node: "n1"}
				err := n1.node.reportDone(ctx, req, nil)
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
		})
	}
}
