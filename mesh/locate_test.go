package mesh

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/policy"
	"github.com/shade-mesh/shade/transport"
)

// heldHits wraps the node's policy: it counts the hits it is told of and,
// where hold is set, keeps each Hit waiting until hold is closed.
type heldHits struct {
	policy.Policy
	hits atomic.Int64
	hold chan struct{}
}

func (h *heldHits) Hit(id policy.ID) {
	h.hits.Add(1)
	if h.hold != nil {
		<-h.hold
	}
	h.Policy.Hit(id)
}

// heldPeer is a peer whose dataset of 40 samples of 1,000 bytes is all
// held, its policy wrapped in h.
func heldPeer(t *testing.T, h *heldHits, sc transport.SocketConfig) *testPeer {
	dir, _ := makeDataset(t, 40, 1000, 1000)
	p := startPeer(t, Config{CacheSize: 64 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, sc)
	if held, err := p.node.Warm(context.Background(), "ds"); err != nil || held != 40 {
		t.Fatalf("warmed %d of 40: %v", held, err)
	}
	h.wrap(p.node)
	return p
}

// wrap puts h around n's policy.
func (h *heldHits) wrap(n *Node) {
	n.polMu.Lock()
	h.Policy = n.pol
	n.pol = h
	n.polMu.Unlock()
}

// TestThePolicyHearsOfReadsLater: reads from memory (SHADE.LOCATE, an
// MGET's held prefix) reach the policy when Settle is called, before any
// decision the policy takes (here a SET's admission), or at once where
// maxPendingHits wait; never before.
func TestThePolicyHearsOfReadsLater(t *testing.T) {
	h := &heldHits{}
	p := heldPeer(t, h, transport.SocketConfig{})
	n, ctx := p.node, context.Background()
	keys := [][]byte{[]byte("ds/3"), []byte("ds/70"), []byte("ds/0"), []byte("ds/39")} // 70: no such sample
	_, locs := n.Locate(ctx, keys)
	for i, l := range locs {
		if held := i != 1; held != (l.Gen != 0) || held && l.Len != 1000 {
			t.Errorf("%s located at %+v", keys[i], l)
		}
	}
	held, ok := n.LendHeldPrefix(ctx, keys[2:3], 1<<20, nil)
	if !ok || len(held) != 1 || !held[0].Found {
		t.Fatalf("ds/0 not lent: %+v", held)
	}
	n.Return(held[0].Loan.Token)
	if got := h.hits.Load(); got != 0 {
		t.Fatalf("the policy heard of %d reads before they were settled", got)
	}
	n.Settle()
	if got := h.hits.Load(); got != 4 {
		t.Fatalf("the policy heard of %d reads once settled, want 4", got)
	}

	n.Locate(ctx, keys[:1])
	if _, err := n.Set([]byte("free"), []byte("value")); err != nil {
		t.Fatal(err)
	}
	if got := h.hits.Load(); got != 5 {
		t.Fatalf("the policy decided on a SET having heard of %d reads, want 5", got)
	}

	for range maxPendingHits {
		n.Locate(ctx, keys[:1])
	}
	if got := h.hits.Load(); got != 5+maxPendingHits {
		t.Fatalf("%d reads waiting: the policy heard of %d, want all %d", maxPendingHits, got-5, maxPendingHits)
	}
}

// TestRepliesSentBeforeThePolicyHears: over the socket, a trainer
// receives the reply of a GET, an MGET and a SHADE.LOCATE of samples held
// in memory while the policy is still taking in the reads (here kept
// waiting until the reply has come), from an event loop and from a
// connection's goroutine.
func TestRepliesSentBeforeThePolicyHears(t *testing.T) {
	for _, loops := range []int{1, -1} {
		for _, cmd := range [][]any{{"GET", "ds/5"}, {"MGET", "ds/5", "ds/6"}, {"SHADE.LOCATE", "ds/5", "ds/6"}} {
			t.Run(fmt.Sprintf("%s/loops=%d", cmd[0], loops), func(t *testing.T) {
				// hold is set before the policy is wrapped (under its lock),
				// which every Hit takes after.
				h := &heldHits{hold: make(chan struct{})}
				defer close(h.hold)
				p := heldPeer(t, h, transport.SocketConfig{Loops: loops})
				c := p.client(t)
				ctx := context.Background()
				if err := c.Ping(ctx).Err(); err != nil { // the connection made, its set-up answered
					t.Fatal(err)
				}
				reply := make(chan error, 1)
				go func() {
					v, err := c.Do(ctx, cmd...).Result()
					if err == nil && v == nil {
						err = fmt.Errorf("nil reply")
					}
					reply <- err
				}()
				select {
				case err := <-reply:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(20 * time.Second): // a guard against a hang, not a measurement
					t.Fatal("no reply while the policy takes in the reads")
				}
			})
		}
	}
}

// TestThePolicyHearsOfFetchesAtOnce: the reads from memory of another
// peer's fetch reach the policy by the time the answer is made, since no
// socket settles them.
func TestThePolicyHearsOfFetchesAtOnce(t *testing.T) {
	_, peers, _ := StartMeshForTest(t, 1, testsupport.DatasetSpec{Samples: 40, MinSize: 1000, MaxSize: 1000, Seed: 1}, 1, func(int, *Config) {})
	n := peers[0].Node
	if held, err := n.Warm(context.Background(), "ds"); err != nil || held != 40 {
		t.Fatalf("warmed %d of 40: %v", held, err)
	}
	h := &heldHits{}
	h.wrap(n)
	ds, err := n.dataset("ds")
	if err != nil {
		t.Fatal(err)
	}
	items, release, err := n.answerFetch(context.Background(), "", &wire.FetchReq{Dataset: "ds", Version: ds.manifest.Version, IDs: []uint32{1, 7, 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	for i, it := range items {
		if !it.Hit || len(it.Value) != 1000 {
			t.Fatalf("item %d not answered from memory: %+v", i, it.Err)
		}
	}
	if got := h.hits.Load(); got != 3 {
		t.Fatalf("the policy heard of %d of the fetch's 3 reads", got)
	}
}
