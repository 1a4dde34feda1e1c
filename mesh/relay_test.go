package mesh

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
)

// TestOrdersRelayedToEveryPeer publishes orders of a job through relays
// alone (no rank waits, so no node asks the leader for them): with a
// fanout of 1 the leader hands each order to one member, which passes it
// down a chain of the others. Every node installs every order, the same
// bytes; with a member of the chain killed, the order still reaches every
// live node, the member before the dead one handing its group to the next.
func TestOrdersRelayedToEveryPeer(t *testing.T) {
	m := startMesh(t, 5, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.RelayFanout = 1
	}})
	var lead *testPeer
	for _, p := range m.peers {
		if p.node.lead.leader() == p.node.Name() {
			lead = p
		}
	}
	if lead == nil {
		t.Fatal("no leader")
	}
	ds := lead.node.ordered[0]
	publish := func(epoch int) *wire.PublishMsg {
		p := &wire.PublishMsg{Dataset: "ds", Job: "relayed", Version: ds.manifest.Version, Gen: 1, Epoch: epoch,
			Term: lead.node.lead.highest(), World: 2, Slices: []wire.U32s{{1, 2, 3}, {4, 5, uint32(epoch)}}, Ranks: []string{"", ""}}
		lead.node.publish(p)
		return p
	}
	has := func(p *testPeer, epoch int) bool {
		js := p.node.ordered[0].lookupJob("relayed")
		if js == nil {
			return false
		}
		o := js.book.Kept(epoch)
		return o != nil && slices.Equal(o.Slices[1], []uint32{4, 5, uint32(epoch)})
	}
	everyLiveHas := func(epoch int) func() bool {
		return func() bool {
			for _, p := range m.alive() {
				if p != lead && !has(p, epoch) {
					return false
				}
			}
			return true
		}
	}

	publish(0)
	waitFor(t, 10*time.Second, "epoch 0 relayed to every peer", everyLiveHas(0))

	// Kill the second member of the chain (the leader hands the order to
	// the first, which passes it to the second).
	chain := lead.node.Members()
	chain = slices.DeleteFunc(chain, func(name string) bool { return name == lead.node.Name() })
	m.byName(chain[1]).node.kill()
	publish(1)
	waitFor(t, 20*time.Second, "epoch 1 relayed to every live peer past the dead one", everyLiveHas(1))
}

// TestSettledFetchWaitsForTheRelays: a node asking the leader for an
// order while its ranks wait (settled) is not sent one the leader has
// just published, which its relays are still passing on; asked for it
// outright (as a rank ahead of its order asks), the leader sends it.
func TestSettledFetchWaitsForTheRelays(t *testing.T) {
	m := startMesh(t, 2, meshOpts{samples: 300, configure: func(i int, c *Config) {
		c.Cluster.FetchTimeout = time.Minute // "just published" for the whole test
	}})
	var lead, other *testPeer
	for _, p := range m.peers {
		if p.node.lead.leader() == p.node.Name() {
			lead = p
		} else {
			other = p
		}
	}
	if lead == nil || other == nil {
		t.Fatal("no leader, or no other node")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := lead.node.Order(ctx, "ds", "settled", 0, 0, 1); err != nil {
		t.Fatal(err)
	}
	req := wire.GetOrderReq{Dataset: "ds", Job: "settled", Exact: true, Epoch: 0, Settled: true}
	if p := other.node.orderFromLeader(&req); p != nil {
		t.Fatalf("a settled fetch got epoch %d the moment it was published", p.Epoch)
	}
	req.Settled = false
	if p := other.node.orderFromLeader(&req); p == nil || p.Epoch != 0 || p.Job != "settled" {
		t.Fatalf("an outright fetch of the published epoch 0 got %+v", p)
	}
}
