package mesh

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport"
	"github.com/shade-mesh/shade/transport/peer"
)

// TestRestartedLeaderAdoptsWhatItsPeersHold: the leader of three is
// killed and comes back empty under its name, so that it leads again
// (the lowest name): it adopts the newest order and the best score table
// its peers hold, and goes on from them. Where they are larger than a
// frame (MaxFrame 8 KiB; 4,000 samples: an order of about 20 KB, a
// table of about 16 KB) it gets them in parts; from peers that know no
// parts (MethodGetPart answered as an unknown method), whole.
func TestRestartedLeaderAdoptsWhatItsPeersHold(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples int
		frame   int
		noParts bool
	}{
		{name: "larger than a frame", samples: 4000, frame: 8 << 10},
		{name: "peers without parts", samples: 1200, noParts: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMesh(t, 3, meshOpts{samples: tc.samples, minSize: 1, maxSize: 8, configure: func(_ int, c *Config) {
				c.Cluster.MaxFrame = tc.frame
				if tc.noParts {
					c.Cluster.handlers = func(_ *Node, h map[peer.Method]peerHandler) { delete(h, wire.MethodGetPart) }
				}
			}})
			lead := m.leader(t)
			if lead.node.Name() != "n0" {
				t.Fatalf("leader %s, want n0", lead.node.Name())
			}
			orderFirstEpoch(t, m)
			scored, report := tableProbes(t, m, lead)
			report(0, tc.samples)
			waitFor(t, 10*time.Second, "the table on n1 and n2", func() bool {
				return scored("n1") == tc.samples && scored("n2") == tc.samples
			})
			newest := func(p *testPeer) *wire.PublishMsg { return p.node.ordered[0].def.book.Newest() }
			want := newest(m.byName("n1"))
			if want == nil || want.Epoch != 0 {
				t.Fatalf("n1's newest order: %+v, want epoch 0", want)
			}
			if tc.frame > 0 {
				body, err := want.Encode()
				b, _, terr := lead.node.ordered[0].def.scores.Marshal()
				if err != nil || terr != nil || len(body) <= tc.frame || len(b) <= tc.frame {
					t.Fatalf("an order of %d bytes (%v), a table of %d (%v): want both larger than a frame of %d", len(body), err, len(b), terr, tc.frame)
				}
			}

			cfg := lead.node.cfg
			lead.node.kill()
			n1 := m.byName("n1")
			waitFor(t, 20*time.Second, "n1 leads", func() bool { return n1.node.lead.leading() })
			cfg.Cluster.GossipAddr, cfg.Cluster.PeerAddr = "127.0.0.1:0", "127.0.0.1:0"
			cfg.Cluster.Seeds = []string{n1.node.GossipAddr()}
			back := startPeer(t, cfg, transport.SocketConfig{})
			waitFor(t, 30*time.Second, "the restarted n0 leads", func() bool { return back.node.lead.leading() })

			if got := back.node.ordered[0].def.tableInfo().Scored; got != tc.samples {
				t.Errorf("the restarted leader's table has %d scored samples, want %d", got, tc.samples)
			}
			got := newest(back)
			if got == nil || got.Epoch != want.Epoch || orderDigest(got) != orderDigest(want) {
				t.Fatalf("the restarted leader's newest order is %+v, want epoch %d as n1 holds it", got, want.Epoch)
			}
		})
	}
}

// TestPartsOfAnAnswerThatChanges: an answer that changes between its
// parts (here a newer order installed on the peer after a part is
// served) is asked for again from its first part, and the changed answer
// comes whole; one that changes after every part is given up after
// partTries tries (CodeStale); one larger than the serving memory is
// refused at its first part.
func TestPartsOfAnAnswerThatChanges(t *testing.T) {
	const samples, frame = 4000, 8 << 10
	var calls, changes atomic.Int64
	var huge atomic.Bool // n1 answers a part of an answer larger than any memory
	m := startMesh(t, 2, meshOpts{samples: samples, minSize: 1, maxSize: 8, configure: func(_ int, c *Config) {
		c.Cluster.MaxFrame = frame
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			if n.Name() != "n1" {
				return
			}
			get := h[wire.MethodGetPart]
			h[wire.MethodGetPart] = func(ctx context.Context, from string, body []byte) (any, error) {
				calls.Add(1)
				if huge.Load() {
					return &wire.GetPartResp{Size: 1 << 40, Sum: 1, Part: []byte{1}}, nil
				}
				resp, err := get(ctx, from, body)
				if changes.Add(-1) >= 0 {
					js := n.ordered[0].def
					next := *js.book.Newest()
					next.Epoch++
					js.book.Install(&next)
				}
				return resp, err
			}
		}
	}})
	orderFirstEpoch(t, m)
	n0, n1 := m.byName("n0"), m.byName("n1")
	ask := func(change int64) (*wire.PublishMsg, int64, error) {
		calls.Store(0)
		changes.Store(change)
		var pub wire.PublishMsg
		err := n0.node.getParts(context.Background(), "n1", wire.GetPartReq{Order: &wire.GetOrderReq{Dataset: "ds"}}, &pub, 5*time.Second)
		return &pub, calls.Load(), err
	}

	pub, parts, err := ask(0)
	want := n1.node.ordered[0].def.book.Newest()
	if err != nil || pub.Epoch != 0 || orderDigest(pub) != orderDigest(want) || parts < 2 {
		t.Fatalf("an unchanged answer: epoch %d in %d parts (%v); want epoch 0 as n1 holds it, in parts", pub.Epoch, parts, err)
	}
	pub, n, err := ask(1)
	if err != nil || pub.Epoch != 1 || orderDigest(pub) != orderDigest(want) || n != 2+parts {
		t.Fatalf("an answer changed after its first part: epoch %d after %d calls (%v); want epoch 1 after %d", pub.Epoch, n, err, 2+parts)
	}
	if _, n, err := ask(1 << 20); peer.CodeOf(err) != peer.CodeStale || n != 2*partTries {
		t.Fatalf("an answer that changes after every part: %d calls, %v; want CodeStale after %d", n, err, 2*partTries)
	}
	huge.Store(true)
	if _, n, err := ask(0); err == nil || n != 1 || n0.node.cluster.serving.Used() != 0 {
		t.Fatalf("an answer of 1 TiB: %d calls, %v, %d bytes of serving memory held; want refused at its first part, none held", n, err, n0.node.cluster.serving.Used())
	}
}
