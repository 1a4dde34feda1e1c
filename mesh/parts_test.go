package mesh

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/budget"
	"github.com/shade-mesh/shade/internal/testsupport"
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

// TestPartsOfAnAnswerThatChanges: the peer cuts an answer's parts from
// the one snapshot it encoded for the first, held in its serving memory
// until the last part is served, so that an order installed between
// parts changes nothing in the answer. Where the peer no longer holds the
// snapshot (its life ended) and the answer changed, the part is refused
// (CodeStale) and the changed answer is asked for again from its first
// part; one that changes after every part is given up after partTries
// tries. An answer larger than the asker's serving memory is refused at
// its first part.
func TestPartsOfAnAnswerThatChanges(t *testing.T) {
	const samples, frame = 4000, 8 << 10
	var calls, changes atomic.Int64
	var forget atomic.Bool // n1 lets the snapshot go after each part
	var huge atomic.Bool   // n1 answers a part of an answer larger than any memory
	var heldMax atomic.Int64
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
				book := &n.cluster.parts
				if held := int64(book.heldBytes()); held > heldMax.Load() {
					heldMax.Store(held)
				}
				if forget.Load() {
					book.mu.Lock()
					a := book.held[from]
					book.mu.Unlock()
					if a != nil {
						book.done(from, a)
					}
				}
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
		heldMax.Store(0)
		var pub wire.PublishMsg
		err := n0.node.getParts(context.Background(), "n1", wire.GetPartReq{Order: &wire.GetOrderReq{Dataset: "ds"}}, &pub, 5*time.Second)
		return &pub, calls.Load(), err
	}
	newest := func() *wire.PublishMsg { return n1.node.ordered[0].def.book.Newest() }
	// servingFree: the serving memory is shared with fetch replies, which
	// the nodes' background reads may hold for a moment.
	servingFree := func(p *testPeer, when string) {
		t.Helper()
		serving := p.node.cluster.serving
		if _, err := testsupport.Poll(context.Background(), 10*time.Second, func() bool { return serving.Used() == 0 }); err != nil {
			t.Errorf("%s: %s holds %d bytes of serving memory; want none", when, p.node.Name(), serving.Used())
		}
	}
	nothingHeld := func(when string) {
		t.Helper()
		if b := n1.node.cluster.parts.heldBytes(); b != 0 {
			t.Errorf("%s: n1 holds %d bytes of answers; want none", when, b)
		}
		servingFree(n1, when)
	}

	want := newest()
	size := func() int64 {
		body, err := msgpack.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(body))
	}()
	pub, parts, err := ask(0)
	if err != nil || pub.Epoch != 0 || orderDigest(pub) != orderDigest(want) || parts < 2 {
		t.Fatalf("an unchanged answer: epoch %d in %d parts (%v); want epoch 0 as n1 holds it, in parts", pub.Epoch, parts, err)
	}
	if heldMax.Load() != size {
		t.Errorf("n1 held %d bytes while the parts were asked for; want the answer's %d", heldMax.Load(), size)
	}
	nothingHeld("after the last part")

	pub, n, err := ask(1)
	if err != nil || pub.Epoch != 0 || orderDigest(pub) != orderDigest(want) || n != parts {
		t.Fatalf("an answer changed after its first part: epoch %d after %d calls (%v); want the first part's epoch 0 after %d", pub.Epoch, n, err, parts)
	}
	if got := newest(); got.Epoch != 1 {
		t.Fatalf("n1's newest order is of epoch %d, want 1", got.Epoch)
	}
	nothingHeld("after an answer that changed")

	forget.Store(true)
	pub, n, err = ask(1)
	if err != nil || pub.Epoch != 2 || orderDigest(pub) != orderDigest(want) || n != 2+parts {
		t.Fatalf("an answer changed after its first part, let go: epoch %d after %d calls (%v); want epoch 2 after %d", pub.Epoch, n, err, 2+parts)
	}
	if _, n, err := ask(1 << 20); peer.CodeOf(err) != peer.CodeStale || n != 2*partTries {
		t.Fatalf("an answer that changes after every part: %d calls, %v; want CodeStale after %d", n, err, 2*partTries)
	}
	nothingHeld("after answers let go")
	huge.Store(true)
	if _, n, err := ask(0); err == nil || n != 1 {
		t.Fatalf("an answer of 1 TiB: %d calls, %v; want refused at its first part", n, err)
	}
	servingFree(n0, "an answer of 1 TiB refused")
}

// TestPartBook: the book's bounds, on its own. An answer is charged to
// the budget from its encoding until it leaves the book (its last part,
// its life's end, its member's next answer, the node's end); one larger
// than the budget is refused and nothing is held; answers are encoded one
// at a time.
func TestPartBook(t *testing.T) {
	bud := budget.New(1 << 20)
	b := &partBook{budget: bud}
	ctx := context.Background()
	answer := func(size int) func() ([]byte, error) {
		return func() ([]byte, error) { return make([]byte, size), nil }
	}
	check := func(when string, held, used int) {
		t.Helper()
		if b.heldBytes() != held || bud.Used() != int64(used) {
			t.Fatalf("%s: %d bytes held, %d charged; want %d and %d", when, b.heldBytes(), bud.Used(), held, used)
		}
	}

	a, err := b.encode(ctx, answer(1000))
	if err != nil {
		t.Fatal(err)
	}
	check("encoded", 0, 1000)
	life, end := context.WithCancel(ctx)
	b.hold(life, "m1", "k", a, time.Hour)
	check("held", 1000, 1000)
	if b.get("m1", "k", a.sum) != a || b.get("m1", "other", a.sum) != nil || b.get("m2", "k", a.sum) != nil || b.get("m1", "k", a.sum+1) != nil || b.get("m1", "k", 0) != nil {
		t.Fatal("get: the held answer is found by its member, request and sum only")
	}
	a2, _ := b.encode(ctx, answer(3000))
	b.hold(life, "m1", "k", a2, time.Hour)
	check("the member's next answer", 3000, 3000)
	b.done("m1", a) // the replaced answer again: nothing
	check("the replaced answer done again", 3000, 3000)
	b.done("m1", a2)
	b.done("m1", a2)
	check("done, twice", 0, 0)

	a, _ = b.encode(ctx, answer(500))
	b.hold(life, "m2", "k", a, time.Hour)
	a, _ = b.encode(ctx, answer(700))
	b.hold(ctx, "m3", "k", a, time.Millisecond)
	waitFor(t, 10*time.Second, "the answer whose life ended let go", func() bool { return b.heldBytes() == 500 && bud.Used() == 500 })
	end() // the node's end
	waitFor(t, 10*time.Second, "every answer let go", func() bool { return b.heldBytes() == 0 && bud.Used() == 0 })

	if _, err := b.encode(ctx, answer(2<<20)); peer.CodeOf(err) != peer.CodeUnavailable {
		t.Fatalf("an answer larger than the budget: %v; want CodeUnavailable", err)
	}
	if _, err := b.encode(ctx, func() ([]byte, error) { return nil, errors.New("no order") }); err == nil {
		t.Fatal("an encoding that failed gave an answer")
	}
	check("refused answers", 0, 0)

	// One encoding at a time: another waits, and gives up with its context.
	in, out, finished := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		a, err := b.encode(ctx, func() ([]byte, error) { close(in); <-out; return make([]byte, 10), nil })
		if err == nil {
			b.release(a)
		}
		finished <- err
	}()
	<-in
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.encode(gone, answer(10)); peer.CodeOf(err) != peer.CodeUnavailable {
		t.Fatalf("an encoding beside another: %v; want CodeUnavailable once its context ended", err)
	}
	close(out)
	if err := <-finished; err != nil {
		t.Fatalf("the first encoding: %v", err)
	}
	check("the end", 0, 0)
}
