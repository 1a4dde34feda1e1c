package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// TestLeaderGivesWayToALowerNamedTakeover: a member named below the
// leader, which the leader's membership does not show (as one that has
// just come back and asks its peers' state to take over), asks the
// leader for its state over the peer transport: the leader stops leading
// before it answers, and its answer names the newest order it published,
// whether or not that order was on its way while it was asked (the
// ranks' dones race the question). A member named above it does not make
// it give way. Once YieldWait passes without that member in its
// membership, it takes over again, with a higher term, and the ranks
// train on: both nodes hold the same order of the next epoch.
func TestLeaderGivesWayToALowerNamedTakeover(t *testing.T) {
	const world = 2
	tlsDir := t.TempDir()
	m := startMesh(t, 2, meshOpts{samples: 300, minSize: 20, maxSize: 60, replicas: 1, configure: func(i int, c *Config) {
		tls, err := peer.DevTLS(tlsDir, fmt.Sprintf("n%d", i))
		if err != nil {
			t.Fatal(err)
		}
		c.Cluster.TLS = tls
		c.Cluster.YieldWait = 300 * time.Millisecond
	}})
	lead := m.byName("n0")
	waitFor(t, 20*time.Second, "n0 leads", func() bool { return lead.node.lead.leading() })
	clients := []*redis.Client{lead.client(t), m.byName("n1").client(t)}
	trainEpochs(t, 1, world, m.files, func(r int) *redis.Client { return clients[r] }, func(int64) float64 { return 1 })
	m.waitNewest(t, 1)
	js := lead.node.ordered[0].def
	term := lead.node.lead.ownTerm()

	// askState asks the leader for its state as the member name would in
	// its takeover.
	askState := func(name string) wire.StateResp {
		t.Helper()
		tls, err := peer.DevTLS(tlsDir, name)
		if err != nil {
			t.Fatal(err)
		}
		w, err := peer.Listen(peer.Config{Name: name, ListenAddr: "127.0.0.1:0", TLS: tls}, peer.HandlerFunc(
			func(context.Context, string, peer.Method, []byte) (any, error) { return nil, nil }))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var resp wire.StateResp
		if err := w.Call(ctx, lead.node.cluster.wire.Addr(), lead.node.Name(), wire.MethodState, &wire.StateReq{Term: term}, &resp); err != nil {
			t.Fatalf("%s asking the leader's state: %v", name, err)
		}
		return resp
	}

	askState("n9")
	if !lead.node.lead.leading() {
		t.Fatal("the leader gave way to a member named above it")
	}

	// Both ranks finish epoch 1 while m0 asks: the leader publishes
	// epoch 2 before it gives way, or not at all.
	dones := make(chan error, world)
	for r := range world {
		go func() { dones <- clients[r].Do(context.Background(), "SHADE.DONE", "ds", 1, r).Err() }()
	}
	resp := askState("m0")
	if lead.node.lead.leading() || js.leaderJob() != nil {
		t.Fatal("the leader still leads after a member named below it asked for its state")
	}
	published := js.published.Load()
	var answered *wire.JobState
	for i := range resp.Jobs {
		if resp.Jobs[i].Dataset == "ds" && resp.Jobs[i].Job == "" {
			answered = &resp.Jobs[i]
		}
	}
	if answered == nil || published == nil {
		t.Fatalf("the answer names %+v of the default job; the leader's last order %+v", answered, published)
	}
	if answered.Epoch != published.epoch || answered.Term != term {
		t.Fatalf("the answer names epoch %d of term %d; the leader published epoch %d in term %d", answered.Epoch, answered.Term, published.epoch, term)
	}
	t.Logf("the leader gave way with epoch %d published", published.epoch)
	for range world {
		if err := <-dones; err != nil {
			t.Fatal(err)
		}
	}

	// m0 never shows up: the leader takes over again and epoch 2 comes.
	waitFor(t, 20*time.Second, "n0 leads again", func() bool { return lead.node.lead.leading() })
	if got := lead.node.lead.ownTerm(); got <= term {
		t.Fatalf("n0 leads again in term %d, not above %d", got, term)
	}
	m.waitNewest(t, 2)
	a, b := js.book.Newest(), m.byName("n1").node.ordered[0].def.book.Newest()
	if orderDigest(a) != orderDigest(b) {
		t.Fatalf("epoch 2 differs between the nodes: %s and %s", orderDigest(a), orderDigest(b))
	}
}
