package mesh

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/orders"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// TestRanksTrainOnPartsOfTheOrder: a job of three ranks trains on a mesh
// of five whose leader relays every order down a chain (fanout 1): the
// last member of the chain, with no one to pass the order on to, gets
// its part of each epoch's order after epoch 0, and the relays and the
// leader hold it whole. Every rank reads the slice the leader drew for
// it, the rank on the last member from its part; the part holds that
// rank's slice alone and the reads of the samples the member owns, for
// its lookahead. A rank that then asks the last member for a slice its
// part lacks (a trainer moved there) gets the leader's whole order. A
// last member of a build before parts (which knows no MethodPublishPart)
// is sent the whole order, and its rank trains on it; so is one whose
// part is larger than a relay piece (8 KiB here: the whole goes piece
// by piece, and reaches it sooner).
func TestRanksTrainOnPartsOfTheOrder(t *testing.T) {
	t.Run("parts", func(t *testing.T) { testRanksTrainOnParts(t, false, 0) })
	t.Run("older-last-member", func(t *testing.T) { testRanksTrainOnParts(t, true, 0) })
	t.Run("part-over-a-piece", func(t *testing.T) { testRanksTrainOnParts(t, false, 24<<10) })
	t.Run("pieces-ahead", func(t *testing.T) { testRanksTrainOnParts(t, false, -12<<10) })
}

// testRanksTrainOnParts runs TestRanksTrainOnPartsOfTheOrder's case:
// piece above 0 is a relay piece too small for the last member's part;
// below 0, minus a piece that parts fit while orders go in pieces, and
// orders drawn ahead (OrderAhead 1).
func testRanksTrainOnParts(t *testing.T, older bool, piece int) {
	var before sync.Map // names of the nodes of a build before parts
	samples, ahead := 400, 0
	switch {
	case piece > 0:
		samples = 6000
	case piece < 0:
		samples, ahead, piece = 3000, 1, -piece
	}
	m := startMesh(t, 5, meshOpts{samples: samples, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.RelayFanout, c.Cluster.RelayPiece, c.OrderAhead = 1, piece, ahead
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			current := h[wire.MethodPublishPart]
			h[wire.MethodPublishPart] = func(ctx context.Context, from string, body []byte) (any, error) {
				if _, ok := before.Load(n.Name()); ok {
					return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "unknown method"} // as transport/peer answers one
				}
				return current(ctx, from, body)
			}
		}
	}})
	lead := m.leader(t)
	chain := slices.DeleteFunc(lead.node.Members(), func(name string) bool { return name == lead.node.Name() })
	last := m.byName(chain[len(chain)-1])
	if older {
		before.Store(last.node.Name(), true)
	}
	getsWhole := older || piece > 0 && ahead == 0     // the last member gets whole orders
	on := []*testPeer{last, m.byName(chain[0]), lead} // rank r trains on on[r]
	if piece > 0 && ahead == 0 {
		// Two ranks on the last member: its part, 4,000 ids and 2,400
		// reads, is over a piece, though the order's parts are likely to
		// fit one (an even share: 2,000 ids and 2,400 reads).
		on[1] = last
	}
	const world, epochs = 3, 3
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	got := make([][][]uint32, epochs) // by epoch, rank
	for e := range got {
		got[e] = make([][]uint32, world)
	}
	if err := testsupport.Parallel(world, func(r int) error {
		for e := range epochs {
			slice, _, err := on[r].node.Order(ctx, "ds", "parts", e, r, world)
			if err != nil {
				return err
			}
			got[e][r] = slices.Clone(slice)
			if err := on[r].node.Done(ctx, "ds", "parts", e, r); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	if _, pieces := m.byName(chain[len(chain)-2]).node.cluster.relays.held(); ahead > 0 && pieces == 0 {
		t.Fatalf("the last member's relay was sent no pieces: orders of %d samples, pieces of %d bytes", samples, piece)
	}
	leadJob := lead.node.ordered[0].lookupJob("parts")
	lastJob := last.node.ordered[0].lookupJob("parts")
	if n := lastJob.parts.Load(); getsWhole && n != 0 || !getsWhole && n < epochs-1 {
		t.Fatalf("%s counts %d orders received as its part", last.node.Name(), n)
	}
	for e := range epochs {
		whole := leadJob.book.Kept(e)
		if whole == nil || whole.Part != "" {
			t.Fatalf("the leader holds epoch %d as %+v; want the whole order", e, whole)
		}
		for r := range world {
			if !slices.Equal(got[e][r], whole.Slices[r]) {
				t.Fatalf("rank %d read %d ids in epoch %d, not the leader's slice of %d", r, len(got[e][r]), e, len(whole.Slices[r]))
			}
		}
		part := lastJob.book.Kept(e)
		if e == 0 || getsWhole {
			if part.Part != "" {
				t.Fatalf("%s holds a part of epoch %d; want it whole", last.node.Name(), e)
			}
			continue
		}
		if part.Part != last.node.Name() || !part.HasSlice(0) || part.HasSlice(1) || part.HasSlice(2) || part.Size != whole.Len() || len(part.Sampler) != 0 {
			t.Fatalf("%s holds epoch %d as a part for %q with slices %v, %d reads in all, %d bytes of sampler state; want its own, rank 0's slice alone, %d reads",
				last.node.Name(), e, part.Part, []bool{part.HasSlice(0), part.HasSlice(1), part.HasSlice(2)}, part.Size, len(part.Sampler), whole.Len())
		}
		var want []uint32
		orders.Reads(whole, last.node.ownsSample(last.node.ordered[0]), func(id uint32) { want = append(want, id) })
		if !slices.Equal(part.Reads, want) {
			t.Fatalf("%s's part of epoch %d has %d reads of its samples; want %d", last.node.Name(), e, len(part.Reads), len(want))
		}
		if relay := m.byName(chain[0]).node.ordered[0].lookupJob("parts").book.Kept(e); relay.Part != "" {
			t.Fatalf("%s, a relay, holds a part of epoch %d", chain[0], e)
		}
	}

	if getsWhole {
		return
	}
	// The newest epoch, published once every rank finished the one
	// before: rank 1 asks for it on the last member, whose part lacks it.
	newest := leadJob.book.Newest()
	if p := lastJob.book.Kept(newest.Epoch); p == nil || p.Part == "" {
		waitFor(t, 10*time.Second, "the newest epoch's part on the last member", func() bool {
			p := lastJob.book.Kept(newest.Epoch)
			return p != nil && p.Part != ""
		})
	}
	slice, _, err := last.node.Order(ctx, "ds", "parts", newest.Epoch, 1, world)
	if err != nil || !slices.Equal(slice, newest.Slices[1]) {
		t.Fatalf("rank 1 asking %s for epoch %d: %d ids (%v); want the leader's slice of %d", last.node.Name(), newest.Epoch, len(slice), err, len(newest.Slices[1]))
	}
	if p := lastJob.book.Kept(newest.Epoch); p.Part != "" {
		t.Fatalf("%s still holds its part of epoch %d after a rank asked for a slice it lacks", last.node.Name(), newest.Epoch)
	}
}

// TestNewLeaderAdoptsTheWholeOverItsPart: the leader relays with fanout
// 2 to groups {n1, n2} and {n3, n4}, so n2 and n4 hold their parts of
// each order after epoch 0, n1 and n3 the whole. With the leader and n1
// killed, n2, now the lowest name, takes over: it adopts the newest
// order whole from n3 (a part is never adopted, nor kept over the whole),
// with the sampler's state in it, and the job trains on: the ranks' next
// epoch is drawn and reaches all three.
func TestNewLeaderAdoptsTheWholeOverItsPart(t *testing.T) {
	m := startMesh(t, 5, meshOpts{samples: 400, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.RelayFanout = 2
	}})
	lead := m.leader(t)
	if lead.node.Name() != "n0" {
		t.Fatalf("leader %s, want n0", lead.node.Name())
	}
	on := []*testPeer{m.byName("n2"), m.byName("n3"), m.byName("n4")} // rank r trains on on[r]
	const world = 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	train := func(epoch int) {
		t.Helper()
		if err := testsupport.Parallel(world, func(r int) error {
			if _, _, err := on[r].node.Order(ctx, "ds", "takeover", epoch, r, world); err != nil {
				return err
			}
			return on[r].node.Done(ctx, "ds", "takeover", epoch, r)
		}); err != nil {
			t.Fatalf("epoch %d: %v", epoch, err)
		}
	}
	train(0)
	train(1)
	book := func(p *testPeer) *orders.Book { return p.node.ordered[0].lookupJob("takeover").book }
	waitFor(t, 10*time.Second, "epoch 2 on n2, its part, and on the leader", func() bool {
		p := book(m.byName("n2")).Kept(2)
		return p != nil && p.Part == "n2" && book(lead).Kept(2) != nil
	})
	want := book(lead).Kept(2)

	lead.node.kill()
	m.byName("n1").node.kill()
	waitFor(t, 30*time.Second, "n2 leading", func() bool {
		n2 := m.byName("n2").node
		return n2.lead.leading() && n2.ordered[0].lookupJob("takeover").leaderJob() != nil
	})
	got := book(m.byName("n2")).Kept(2)
	if got == nil || got.Part != "" || !slices.EqualFunc(got.Slices, want.Slices, slices.Equal) || !bytes.Equal(got.Sampler, want.Sampler) {
		t.Fatalf("n2 leads with epoch 2 as %+v; want the whole order n0 drew", got)
	}
	train(2)
	waitFor(t, 10*time.Second, "epoch 3 on the ranks' nodes", func() bool {
		for _, p := range on {
			if book(p).Kept(3) == nil {
				return false
			}
		}
		return true
	})
	if err := testsupport.Parallel(world, func(r int) error {
		slice, _, err := on[r].node.Order(ctx, "ds", "takeover", 3, r, world)
		if err == nil && !slices.Equal(slice, book(m.byName("n2")).Kept(3).Slices[r]) {
			err = fmt.Errorf("rank %d read %d ids of epoch 3, not the slice n2 drew", r, len(slice))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRelayHandsItsWholeGroupTheirParts: in a mesh of nine at fanout 2
// the leader hands each order to two heads of four members each; a head
// with no more than fanout² (4) members to pass it on to hands each of
// them its part, so two members hold the order whole and six their parts,
// each part the slice of the rank on it and the reads of its samples.
// Relayed in pieces (of 2 KiB, two an order), the parts are cut for an
// order published ahead, which no rank waits for; one the ranks wait
// for goes on whole, piece by piece, to every member.
func TestRelayHandsItsWholeGroupTheirParts(t *testing.T) {
	for _, c := range []struct {
		name         string
		piece, ahead int
		parts        bool
	}{{"whole", 0, 0, true}, {"pieces-ahead", 2 << 10, 1, true}, {"pieces-waited", 2 << 10, 0, false}} {
		t.Run(c.name, func(t *testing.T) { testRelayHandsItsGroupParts(t, c.piece, c.ahead, c.parts) })
	}
}

func testRelayHandsItsGroupParts(t *testing.T, piece, ahead int, cut bool) {
	m := startMesh(t, 9, meshOpts{samples: 900, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.RelayFanout, c.Cluster.RelayPiece = 2, piece
	}})
	lead := m.leader(t)
	waitFor(t, 20*time.Second, "every node sees the nine", func() bool { return m.converged(m.alive()) })
	others := slices.DeleteFunc(lead.node.Members(), func(name string) bool { return name == lead.node.Name() })
	p := epochOneOrder(lead, "group", others, 100, 900)
	p.Ahead = ahead
	if body, err := p.Encode(); err != nil || piece > 0 && len(body) <= piece {
		t.Fatalf("an order of %d bytes (%v); want more than a piece of %d", len(body), err, piece)
	}
	lead.node.publish(p, nil)
	var holders, parts []string
	waitFor(t, 20*time.Second, "epoch 1 on every other node", func() bool {
		holders, parts = nil, nil
		for r, name := range others {
			js := m.byName(name).node.ordered[0].lookupJob("group")
			if js == nil || js.book.Kept(1) == nil {
				return false
			}
			got := js.book.Kept(1)
			if !slices.Equal(got.Slices[r], p.Slices[r]) {
				t.Fatalf("%s holds slice %d as %v, want %v", name, r, got.Slices[r], p.Slices[r])
			}
			if got.Part == "" {
				holders = append(holders, name)
			} else {
				parts = append(parts, name)
			}
		}
		return true
	})
	heads := []string{wire.RelayGroups(others, 2)[0][0], wire.RelayGroups(others, 2)[1][0]}
	if cut && (!slices.Equal(holders, heads) || len(parts) != 6) {
		t.Fatalf("whole on %v, parts on %v; want whole on the heads %v alone", holders, parts, heads)
	}
	if !cut && len(parts) != 0 {
		t.Fatalf("parts on %v of an order the ranks wait for, relayed in pieces; want it whole on every member", parts)
	}
}

// TestRelayHandsAGroupItsPart: in a mesh of five at fanout 1 the leader
// hands each order down a chain n1, n2, n3, n4. n2, which holds the
// whole, would pass it on to n3 for n4 alone: it hands n3 its group's
// part instead (the slices of the ranks on n3 and n4, the reads of their
// samples, Below naming n4), which n3 installs as its own and cuts n4's
// part from. A last member of a build before parts refuses its part: n3
// names it in its answer and n2 relays it the whole. A head of a build
// before group parts refuses the group's part: n2 relays the group the
// whole, and n3 hands n4 its part as a relay of the whole does.
func TestRelayHandsAGroupItsPart(t *testing.T) {
	for _, c := range []struct {
		name   string
		before string // the node of a build before parts, or before group parts
	}{{"group", ""}, {"older-member", "n4"}, {"older-head", "n3"}} {
		t.Run(c.name, func(t *testing.T) { testRelayHandsAGroupItsPart(t, c.before) })
	}
}

func testRelayHandsAGroupItsPart(t *testing.T, before string) {
	m := startMesh(t, 5, meshOpts{samples: 800, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.RelayFanout = 1
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			if n.Name() != before {
				return
			}
			part, relay := h[wire.MethodPublishPart], h[wire.MethodRelay]
			unknown := &peer.Error{Code: peer.CodeBadRequest, Msg: "unknown method"} // as transport/peer answers one
			h[wire.MethodPublishPart] = func(ctx context.Context, from string, body []byte) (any, error) {
				if before == "n4" {
					return nil, unknown
				}
				return part(ctx, from, body)
			}
			h[wire.MethodRelay] = func(ctx context.Context, from string, body []byte) (any, error) {
				var req wire.RelayMsg
				if err := msgpack.Unmarshal(body, &req); err == nil && peer.Method(req.Method) == wire.MethodPublishPart {
					return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("method %d cannot be relayed", req.Method)}
				}
				return relay(ctx, from, body)
			}
		}
	}})
	lead := m.leader(t)
	if lead.node.Name() != "n0" {
		t.Fatalf("leader %s, want n0", lead.node.Name())
	}
	waitFor(t, 20*time.Second, "every node sees the five", func() bool { return m.converged(m.alive()) })
	chain := []string{"n1", "n2", "n3", "n4"}
	p := epochOneOrder(lead, "chain", chain, 200, 800)
	lead.node.publish(p, nil)
	held := make(map[string]*wire.PublishMsg)
	waitFor(t, 20*time.Second, "epoch 1 on every other node", func() bool {
		for _, name := range chain {
			js := m.byName(name).node.ordered[0].lookupJob("chain")
			if js == nil || js.book.Kept(1) == nil {
				return false
			}
			held[name] = js.book.Kept(1)
		}
		return true
	})
	for r, name := range chain {
		if !slices.Equal(held[name].Slices[r], p.Slices[r]) {
			t.Fatalf("%s holds slice %d as %v, want %v", name, r, held[name].Slices[r], p.Slices[r])
		}
	}
	readsOf := func(name string, whole *wire.PublishMsg) []uint32 {
		var reads []uint32
		node := m.byName(name).node
		orders.Reads(whole, node.ownsSample(node.ordered[0]), func(id uint32) { reads = append(reads, id) })
		return reads
	}
	want := map[string]string{"n1": "whole", "n2": "whole", "n3": "group", "n4": "part"}
	switch before {
	case "n4":
		want["n4"] = "whole"
	case "n3":
		want["n3"] = "whole"
	}
	for _, name := range chain {
		got := held[name]
		kind := "whole"
		switch {
		case got.Part == name && slices.Equal(got.Below, []string{"n4"}):
			kind = "group"
		case got.Part == name && len(got.Below) == 0:
			kind = "part"
		case got.Part != "":
			kind = "another's part"
		}
		if kind != want[name] {
			t.Fatalf("%s holds epoch 1 as %s (part for %q, below it %v); want %s", name, kind, got.Part, got.Below, want[name])
		}
	}
	if g := held["n3"]; want["n3"] == "group" {
		// The group's: the slices of n3's and n4's ranks, and the reads
		// of the samples either owns, in read order.
		for r := range chain {
			if in := r >= 2; g.HasSlice(r) != in || len(g.Slices[r]) != 0 != in {
				t.Fatalf("n3's group's part: rank %d's slice %v", r, g.Slices[r])
			}
		}
		var reads []uint32
		for _, id := range g.Reads {
			if !slices.Contains(readsOf("n3", p), id) && !slices.Contains(readsOf("n4", p), id) {
				t.Fatalf("n3's group's part reads id %d, which neither n3 nor n4 owns", id)
			}
			reads = append(reads, id)
		}
		n3, n4 := readsOf("n3", p), readsOf("n4", p)
		if len(reads) < max(len(n3), len(n4)) || len(reads) > len(n3)+len(n4) {
			t.Fatalf("n3's group's part has %d reads; n3 owns %d of the order's, n4 %d", len(reads), len(n3), len(n4))
		}
	}
	if got := held["n4"]; want["n4"] == "part" && !slices.Equal(got.Reads, readsOf("n4", p)) {
		t.Fatalf("n4's part has %d reads of its samples; want %d", len(got.Reads), len(readsOf("n4", p)))
	}
}

// epochOneOrder is an order of epoch 1 of job on lead's dataset "ds" of
// samples samples, for a rank on each of nodes: rank r's slice is the
// perRank ids from r*perRank on, wrapping.
func epochOneOrder(lead *testPeer, job string, nodes []string, perRank, samples int) *wire.PublishMsg {
	p := &wire.PublishMsg{Dataset: "ds", Job: job, Version: lead.node.ordered[0].manifest.Version, Gen: 1, Epoch: 1,
		Term: lead.node.lead.highest(), World: len(nodes), Ranks: nodes}
	for r := range nodes {
		s := make(wire.U32s, perRank)
		for i := range s {
			s[i] = uint32((r*perRank + i) % samples)
		}
		p.Slices = append(p.Slices, s)
	}
	return p
}
