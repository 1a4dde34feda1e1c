package mesh

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/budget"
	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/orders"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// TestOrdersRelayedToEveryPeer publishes orders of a job through relays
// alone (no rank waits, so no node asks the leader for them): with a
// fanout of 1 the leader hands each order to one member, which passes it
// down a chain of the others. Every node installs every order, the same
// bytes; with a member of the chain killed, the order still reaches every
// live node, the member before the dead one handing its group to the next.
// The orders go whole, and in pieces of 256 bytes (about 20 an order),
// down the chain and down a tree of fanout 2. From epoch 1 on, a member
// with none below it gets its part of the order instead (the slices of
// the ranks on it, and the reads of the samples it owns) where the part
// is no larger than a piece: whole, not in pieces of 256 bytes; and the
// member before it in the chain its group's part (its own and the last
// one's), from which it cuts the last one's.
func TestOrdersRelayedToEveryPeer(t *testing.T) {
	for _, c := range []struct {
		name          string
		fanout, piece int
	}{{"whole", 1, 0}, {"pieces", 1, 256}, {"pieces-fanout-2", 2, 256}} {
		t.Run(c.name, func(t *testing.T) { testOrdersRelayed(t, c.fanout, c.piece) })
	}
}

func testOrdersRelayed(t *testing.T, fanout, piece int) {
	// The nodes' logs say which relay failed where a wait below does.
	logs := make([]*testsupport.Buffer, 5)
	m := startMesh(t, 5, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.RelayFanout, c.Cluster.RelayPiece = fanout, piece
		logs[i] = &testsupport.Buffer{}
		c.Logger = zerolog.New(logs[i]).Level(zerolog.DebugLevel).With().Str("node", c.Name).Logger()
	}})
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range logs {
				t.Log(l.String())
			}
		}
	})
	lead := m.leader(t)
	ds := lead.node.ordered[0]
	slice := func(epoch int) []uint32 {
		s := make([]uint32, 600)
		for i := range s {
			s[i] = uint32((epoch*7 + i) % 300)
		}
		return s
	}
	// Rank 0 trains on the last member of the chain, rank 1 on none.
	others := slices.DeleteFunc(lead.node.Members(), func(name string) bool { return name == lead.node.Name() })
	ranks := []string{others[len(others)-1], ""}
	var mu sync.Mutex
	published := map[int]*wire.PublishMsg{}
	publish := func(epoch int) *wire.PublishMsg {
		p := &wire.PublishMsg{Dataset: "ds", Job: "relayed", Version: ds.manifest.Version, Gen: 1, Epoch: epoch,
			Term: lead.node.lead.highest(), World: 2, Slices: []wire.U32s{slice(epoch + 100), slice(epoch)}, Ranks: ranks}
		if body, err := p.Encode(); err != nil || (piece > 0 && len(body) < 8*piece) {
			t.Fatalf("an order of %d bytes (%v): want several pieces of %d", len(body), err, piece)
		}
		mu.Lock()
		published[epoch] = p
		mu.Unlock()
		lead.node.publish(p, nil)
		return p
	}
	parts := map[string]bool{} // the members that held a part of an order
	has := func(p *testPeer, epoch int) bool {
		js := p.node.ordered[0].lookupJob("relayed")
		if js == nil {
			return false
		}
		o := js.book.Kept(epoch)
		if o == nil {
			return false
		}
		mu.Lock()
		whole := published[epoch]
		mu.Unlock()
		for r := range whole.Slices {
			mine := o.Part == "" || ranks[r] != "" && (ranks[r] == o.Part || slices.Contains(o.Below, ranks[r]))
			if o.HasSlice(r) != mine || o.HasSlice(r) && !slices.Equal(o.Slices[r], whole.Slices[r]) {
				t.Fatalf("%s holds epoch %d with slice %d %v (part of %q, below it %v): want %v", p.node.Name(), epoch, r, o.Slices[r], o.Part, o.Below, whole.Slices[r])
			}
		}
		if o.Part == "" {
			return true
		}
		// Its relay picked its reads out with the ring it had: the same
		// as the node's own while the views agree (before the kill), and
		// of a group's part those of the members below it too.
		var want []uint32
		owns := []func([]uint32, []uint64){p.node.ownsSample(ds)}
		for _, below := range o.Below {
			owns = append(owns, m.byName(below).node.ownsSample(ds))
		}
		orders.Reads(whole, func(ids []uint32, masks []uint64) {
			theirs := make([]uint64, len(ids))
			clear(masks)
			for _, own := range owns {
				own(ids, theirs)
				for k, m := range theirs {
					masks[k] |= m
				}
			}
		}, func(id uint32) { want = append(want, id) })
		if o.Part != p.node.Name() || epoch == 0 || o.Size != 1200 || epoch == 1 && !slices.Equal(o.Reads, want) {
			t.Fatalf("%s holds a part of epoch %d for %q, %d reads in all, its reads %v: want its own, 1,200, reads %v", p.node.Name(), epoch, o.Part, o.Size, o.Reads, want)
		}
		parts[p.node.Name()] = true
		return true
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

	// relayed publishes an epoch until every live node has it. A member
	// that another one's view lost for a moment (a node stalled past the
	// gossip's probes, on a loaded machine) may be left out of a relay by
	// design (it asks the leader when its ranks wait, which none does
	// here): only then is the order published again, once the views
	// agree; a relay that fails while they stay whole fails the test.
	relayed := func(epoch int, within time.Duration) {
		t.Helper()
		for try := 1; ; try++ {
			lives := memberLives(m.alive())
			publish(epoch)
			if _, err := testsupport.Poll(context.Background(), within, everyLiveHas(epoch)); err == nil {
				return
			}
			if !slices.ContainsFunc(lives, func(life context.Context) bool { return life.Err() != nil }) || try == 3 {
				t.Fatalf("epoch %d not relayed to every live peer within %v (try %d)", epoch, within, try)
			}
			t.Logf("a member left a view while epoch %d was relayed; publishing it again", epoch)
			waitFor(t, 20*time.Second, "the live nodes' views agree", func() bool { return m.converged(m.alive()) })
		}
	}

	relayed(0, 10*time.Second)
	for _, p := range m.alive() {
		if _, pieces := p.node.cluster.relays.held(); p != lead && (pieces > 0) != (piece > 0) {
			t.Fatalf("%s was sent %d pieces; orders in pieces of %d", p.node.Name(), pieces, piece)
		}
	}

	relayed(1, 10*time.Second)
	if last := others[len(others)-1]; piece == 0 && (!parts[last] || parts[others[0]]) || piece > 0 && len(parts) > 0 {
		t.Fatalf("members that held parts of epoch 1 in pieces of %d: %v; want %s, the last, among them, and not %s, a relay (in pieces, none)",
			piece, slices.Sorted(maps.Keys(parts)), last, others[0])
	}

	// Kill the second member of the order (with fanout 1 the leader hands
	// the order to the first, which passes it to the second; with 2, the
	// second heads a group of its own).
	chain := lead.node.Members()
	chain = slices.DeleteFunc(chain, func(name string) bool { return name == lead.node.Name() })
	m.byName(chain[1]).node.kill()
	relayed(2, 20*time.Second) // past the dead member
	// Once passed on, the pieces are let go (the last of them leave as
	// the calls to the dead member time out).
	waitFor(t, 30*time.Second, "every node lets go of the relayed pieces", func() bool {
		for _, p := range m.alive() {
			if held, _ := p.node.cluster.relays.held(); held != 0 {
				return false
			}
		}
		return true
	})
}

// memberLives returns, for each of ps and each other one of them, the
// context that ends when the first drops the second from its alive
// members (a member it does not have now: one that has ended).
func memberLives(ps []*testPeer) []context.Context {
	var lives []context.Context
	for _, p := range ps {
		for _, q := range ps {
			if p == q {
				continue
			}
			_, life, err := p.node.cluster.member(q.node.Name())
			if err != nil {
				ended, cancel := context.WithCancel(context.Background())
				cancel()
				life = ended
			}
			lives = append(lives, life)
		}
	}
	return lives
}

// relayBeforePieces is wire.RelayMsg as a peer from before pieces
// (a6bc942) decodes it: the head, the method and the whole order.
type relayBeforePieces struct {
	To     []string           `msgpack:"t"`
	Method uint16             `msgpack:"m"`
	Body   msgpack.RawMessage `msgpack:"b"`
}

// serveRelayBeforePieces is serveRelay as a peer from before pieces
// (a6bc942) runs it, transcribed: it takes only a whole order, refusing
// anything else as a bad request, installs it and passes it on whole.
func serveRelayBeforePieces(n *Node, ctx context.Context, from string, req *relayBeforePieces) (any, error) {
	if peer.Method(req.Method) != wire.MethodPublish {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("method %d cannot be relayed", req.Method)}
	}
	var p wire.PublishMsg
	if err := msgpack.Unmarshal(req.Body, &p); err != nil {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "relayed order: " + err.Error()}
	}
	to := slices.DeleteFunc(slices.Clone(req.To), func(name string) bool { return name == n.cfg.Name })
	passed := make(chan struct{})
	n.goBackground(func(bctx context.Context) {
		defer close(passed)
		hops := wire.RelayHops(len(to), n.cfg.Cluster.RelayFanout)
		fctx, cancel := context.WithTimeout(bctx, n.cfg.Cluster.FetchTimeout*time.Duration(1+hops))
		defer cancel()
		var wg sync.WaitGroup
		for _, group := range wire.RelayGroups(to, n.cfg.Cluster.RelayFanout) {
			wg.Go(func() { n.relayGroup(fctx, group, wire.MethodPublish, req.Body) })
		}
		wg.Wait()
	})
	_, err := n.servePublish(ctx, from, &p)
	select {
	case <-passed:
	case <-ctx.Done():
	}
	return nil, err
}

// TestOrdersRelayedThroughAPeerBeforePieces: the head of a relay group
// is a peer from before pieces (its relay handler the one it ran). It
// refuses the first piece of an order; the leader then hands it the
// whole order, which it installs and passes on whole to its group, while
// the other group is sent pieces. Every node installs the order.
func TestOrdersRelayedThroughAPeerBeforePieces(t *testing.T) {
	var before sync.Map // names of the nodes that run the handler from before pieces
	var tookWhole atomic.Int64
	m := startMesh(t, 5, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.RelayFanout, c.Cluster.RelayPiece = 2, 256
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			current := h[wire.MethodRelay]
			old := serve(func(ctx context.Context, from string, req *relayBeforePieces) (any, error) {
				reply, err := serveRelayBeforePieces(n, ctx, from, req)
				if err == nil {
					tookWhole.Add(1)
				}
				return reply, err
			})
			h[wire.MethodRelay] = func(ctx context.Context, from string, body []byte) (any, error) {
				if _, ok := before.Load(n.Name()); ok {
					return old(ctx, from, body)
				}
				return current(ctx, from, body)
			}
		}
	}})
	lead := m.leader(t)
	var others []string
	for _, name := range lead.node.Members() {
		if name != lead.node.Name() {
			others = append(others, name)
		}
	}
	groups := wire.RelayGroups(others, 2) // as the leader cuts them
	if len(groups) != 2 || len(groups[0]) != 2 {
		t.Fatalf("relay groups %v: want two of two", groups)
	}
	oldHead := groups[0][0]
	before.Store(oldHead, true)

	ds := lead.node.ordered[0]
	slice := make([]uint32, 600)
	for i := range slice {
		slice[i] = uint32(i * 7 % 300)
	}
	p := &wire.PublishMsg{Dataset: "ds", Job: "mixed", Version: ds.manifest.Version, Gen: 1, Epoch: 0,
		Term: lead.node.lead.highest(), World: 1, Slices: []wire.U32s{slice}, Ranks: []string{""}}
	if body, err := p.Encode(); err != nil || len(body) < 8*256 {
		t.Fatalf("an order of %d bytes (%v): want several pieces", len(body), err)
	}
	lead.node.publish(p, nil)
	waitFor(t, 20*time.Second, "the order installed on every peer", func() bool {
		for _, name := range others {
			js := m.byName(name).node.ordered[0].lookupJob("mixed")
			if js == nil {
				return false
			}
			if o := js.book.Kept(0); o == nil || !slices.Equal(o.Slices[0], slice) {
				return false
			}
		}
		return true
	})
	if n := tookWhole.Load(); n != 1 {
		t.Errorf("the peer from before pieces took %d whole orders, want 1", n)
	}
	// Its group got the order whole (from it), the other group in pieces.
	for _, g := range groups {
		for _, name := range g {
			if name == oldHead {
				continue
			}
			_, pieces := m.byName(name).node.cluster.relays.held()
			if inPieces := g[0] != oldHead; (pieces > 0) != inPieces {
				t.Errorf("%s was sent %d pieces; want pieces %t", name, pieces, inPieces)
			}
		}
	}
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

// TestRelayBookChargesServingMemory: an order relayed in pieces is charged
// to the node's serving memory from its first piece; where it does not
// fit, the oldest orders in the book make room, but only if that is
// enough: memory the book does not hold is never freed by dropping its
// orders, and the piece is refused. An order that leaves the book gives
// its bytes back.
func TestRelayBookChargesServingMemory(t *testing.T) {
	serving := budget.New(100)
	book := relayBook{budget: serving}
	piece := func(size int, sum uint64) *wire.RelayMsg {
		return &wire.RelayMsg{Size: size, PieceSize: 16, Sum: sum, Piece: make([]byte, 16)}
	}
	ctx := context.Background()
	a, err := book.entry(ctx, piece(60, 1), time.Minute)
	if err != nil || serving.Used() != 60 {
		t.Fatalf("first order: %v, %d bytes charged", err, serving.Used())
	}
	if again, err := book.entry(ctx, piece(60, 1), time.Minute); err != nil || again != a || serving.Used() != 60 {
		t.Fatalf("a second piece of it: %v, same entry %v, %d bytes charged", err, again == a, serving.Used())
	}
	b, err := book.entry(ctx, piece(60, 2), time.Minute)
	if err != nil || serving.Used() != 60 || a.ctx.Err() == nil {
		t.Fatalf("second order: %v, %d bytes charged, the first still in the book: %v", err, serving.Used(), a.ctx.Err() == nil)
	}
	if held, _ := book.held(); held != 60 {
		t.Fatalf("the book holds %d bytes, want 60", held)
	}
	if !serving.TryReserve(40) { // a fetch reply being built
		t.Fatal("no room for the fetch reply")
	}
	if _, err := book.entry(ctx, piece(70, 3), time.Minute); !errors.Is(err, errRelayNoRoom) || b.ctx.Err() != nil {
		t.Fatalf("an order that dropping the book's would not make room for: %v; the book's order dropped: %v", err, b.ctx.Err() != nil)
	}
	b.cancel()
	waitFor(t, 10*time.Second, "the dropped order's bytes given back", func() bool { return serving.Used() == 40 })
	if held, _ := book.held(); held != 0 {
		t.Fatalf("the book holds %d bytes after its order left, want 0", held)
	}
}

// TestRelayedPiecesThatDoNotMakeTheOrder: pieces whose bytes do not hash
// to the order's sum, or make no msgpack value, are refused at the last
// piece, nothing is installed and nothing kept; a piece sent twice with
// other bytes is refused; the same pieces with the right sum install the
// order.
func TestRelayedPiecesThatDoNotMakeTheOrder(t *testing.T) {
	m := startMesh(t, 1, meshOpts{samples: 300})
	n := m.peers[0].node
	ds := n.ordered[0]
	p := &wire.PublishMsg{Dataset: "ds", Job: "pieces", Version: ds.manifest.Version, Gen: 1, Epoch: 0,
		Term: n.lead.highest(), World: 1, Slices: []wire.U32s{{5, 6, 7, 8, 9, 10, 11, 12, 13, 14}}, Ranks: []string{""}}
	body, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	const piece = 32
	pieces := func(sum uint64) []*wire.RelayMsg {
		var out []*wire.RelayMsg
		for off := 0; off < len(body); off += piece {
			out = append(out, &wire.RelayMsg{Method: uint16(wire.MethodPublish), Size: len(body), PieceSize: piece, Sum: sum,
				Off: off, Piece: body[off:min(off+piece, len(body))]})
		}
		return out
	}
	sum := xxhash.Sum64(body) // the order's sum, as the sender computes it (wire.WholeAssembly)
	installed := func() bool {
		js := ds.lookupJob("pieces")
		return js != nil && js.book.Kept(0) != nil
	}
	ctx := context.Background()
	wrong := pieces(sum + 1)
	for i, req := range wrong {
		_, err := n.serveRelay(ctx, "n9", req)
		if last := i == len(wrong)-1; last != (peer.CodeOf(err) == peer.CodeBadRequest) {
			t.Fatalf("piece %d of %d with the wrong sum: %v", i, len(wrong), err)
		}
	}
	if installed() {
		t.Fatal("an order whose pieces do not hash to its sum was installed")
	}
	waitFor(t, 10*time.Second, "the refused order let go", func() bool { held, _ := n.cluster.relays.held(); return held == 0 })

	// Bytes that hash to their sum but are no msgpack value (an array
	// that declares a billion elements) are refused as the transport
	// refuses such a frame, before anything decodes them.
	good := body
	body = append([]byte{0xdd, 0x40, 0, 0, 0}, make([]byte, len(good)-5)...)
	malformed := pieces(xxhash.Sum64(body))
	for i, req := range malformed {
		_, err := n.serveRelay(ctx, "n9", req)
		if last := i == len(malformed)-1; last != (peer.CodeOf(err) == peer.CodeBadRequest) || last && !strings.Contains(err.Error(), "malformed") {
			t.Fatalf("piece %d of %d of no msgpack value: %v", i, len(malformed), err)
		}
	}
	if installed() {
		t.Fatal("an order of no msgpack value was installed")
	}
	waitFor(t, 10*time.Second, "the malformed order let go", func() bool { held, _ := n.cluster.relays.held(); return held == 0 })
	body = good

	right := pieces(sum)
	if _, err := n.serveRelay(ctx, "n9", right[0]); err != nil {
		t.Fatal(err)
	}
	other := *right[0]
	other.Piece = slices.Clone(other.Piece)
	other.Piece[3] ^= 1
	if _, err := n.serveRelay(ctx, "n9", &other); peer.CodeOf(err) != peer.CodeBadRequest {
		t.Fatalf("a piece sent again with other bytes: %v", err)
	}
	for _, req := range right {
		if _, err := n.serveRelay(ctx, "n9", req); err != nil {
			t.Fatalf("piece at %d: %v", req.Off, err)
		}
	}
	if !installed() {
		t.Fatal("the order was not installed from its pieces")
	}
	waitFor(t, 10*time.Second, "the installed order's pieces let go", func() bool { held, _ := n.cluster.relays.held(); return held == 0 })
}

// TestGroupPartsRefused: a group's part relayed to a node that is not
// its member, or with members to pass parts on to that it does not name
// below its own, or of epoch 0, or that fails its check, or sent in
// pieces, is refused and nothing is installed; a sound one is installed
// as the node's own part.
func TestGroupPartsRefused(t *testing.T) {
	m := startMesh(t, 1, meshOpts{samples: 300})
	n := m.peers[0].node
	ds := n.ordered[0]
	sound := func() *wire.PublishMsg {
		return &wire.PublishMsg{Dataset: "ds", Job: "group", Version: ds.manifest.Version, Gen: 1, Epoch: 1, Term: n.lead.highest(), World: 3,
			Slices: []wire.U32s{{1, 2}, nil, {5, 6}}, Ranks: []string{n.Name(), "n8", "n7"}, Part: n.Name(), Below: []string{"n7"}, Size: 6, Reads: wire.U32s{1, 6}}
	}
	installed := func() *wire.PublishMsg {
		if js := ds.lookupJob("group"); js != nil {
			return js.book.Kept(1)
		}
		return nil
	}
	relay := func(p *wire.PublishMsg, to []string, piece bool) error {
		body, err := p.Encode()
		if err != nil {
			t.Fatal(err)
		}
		req := &wire.RelayMsg{To: to, Method: uint16(wire.MethodPublishPart), Body: body}
		if piece {
			req = &wire.RelayMsg{To: to, Method: uint16(wire.MethodPublishPart), Size: len(body), PieceSize: len(body), Sum: xxhash.Sum64(body), Piece: body}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = n.serveRelay(ctx, "n9", req)
		return err
	}
	for name, c := range map[string]struct {
		spoil func(p *wire.PublishMsg)
		to    []string
		piece bool
	}{
		"another's":  {func(p *wire.PublishMsg) { p.Part = "n9" }, []string{"n7"}, false},
		"not below":  {func(p *wire.PublishMsg) {}, []string{"n8"}, false},
		"epoch 0":    {func(p *wire.PublishMsg) { p.Epoch = 0 }, []string{"n7"}, false},
		"check":      {func(p *wire.PublishMsg) { p.Slices[1] = wire.U32s{3, 4} }, []string{"n7"}, false},
		"in a piece": {func(p *wire.PublishMsg) {}, []string{"n7"}, true},
	} {
		p := sound()
		c.spoil(p)
		if err := relay(p, c.to, c.piece); peer.CodeOf(err) != peer.CodeBadRequest {
			t.Errorf("%s: %v; want refused", name, err)
		}
		if installed() != nil {
			t.Fatalf("%s: installed", name)
		}
	}
	// n7 is no member: its part cannot be handed on, and the head says
	// nothing of it (a member that gets nothing asks the leader).
	if err := relay(sound(), []string{"n7"}, false); err != nil {
		t.Fatalf("a sound group's part: %v", err)
	}
	if got := installed(); got == nil || got.Part != n.Name() || !slices.Equal(got.Below, []string{"n7"}) || !got.HasSlice(2) || got.HasSlice(1) {
		t.Fatalf("a sound group's part installed as %+v", got)
	}
}

// TestLeaderServesAnOrderOnceAPeerHoldsIt: a rank on the leader's node
// is not given an epoch's order until another member has answered that
// it holds it. A leader killed before any member had the order then
// takes it with it, and the next leader's order of that epoch is the only
// one any rank read (chaos: a rank read the dead leader's epoch while the
// others read its successor's).
func TestLeaderServesAnOrderOnceAPeerHoldsIt(t *testing.T) {
	var hold sync.Map // name of a node whose publish handler waits for release
	entered, release := make(chan struct{}, 1), make(chan struct{})
	m := startMesh(t, 2, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.handlers = publishHeld(&hold, entered, release)
	}})
	lead := m.leader(t)
	other := m.follower(t)
	hold.Store(other.node.Name(), true)
	let := sync.OnceFunc(func() { close(release) })
	defer let() // a failed check must not leave the handler waiting

	c := lead.client(t)
	ordered := make(chan error, 1)
	go func() { ordered <- c.Do(context.Background(), "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "held").Err() }()
	<-entered // the order is drawn and on its way to the other member, which holds it back
	js := lead.node.ordered[0].lookupJob("held")
	if js == nil || js.book.Kept(0) != nil {
		t.Fatal("the leader installed epoch 0 for its rank before another member held it")
	}
	select {
	case err := <-ordered:
		t.Fatalf("the rank on the leader's node got epoch 0 before another member held it (%v)", err)
	default:
	}
	let()
	if err := <-ordered; err != nil {
		t.Fatal(err)
	}
	if js.book.Kept(0) == nil || other.node.ordered[0].lookupJob("held").book.Kept(0) == nil {
		t.Fatal("epoch 0 not installed on both nodes")
	}
}

// TestFirstDelivery: the leader's ranks read an order at the first send
// that delivered it, or, where none does, once every send has ended;
// never twice.
func TestFirstDelivery(t *testing.T) {
	calls := 0
	sent := firstDelivery(3, func() { calls++ })
	sent(false)
	sent(true)
	if calls != 1 {
		t.Fatalf("after a failed send and a delivery: %d calls, want 1", calls)
	}
	sent(true)
	if calls != 1 {
		t.Fatalf("after a second delivery: %d calls, want 1", calls)
	}
	calls = 0
	sent = firstDelivery(2, func() { calls++ })
	sent(false)
	if calls != 0 {
		t.Fatal("called with a send still under way")
	}
	sent(false)
	if calls != 1 {
		t.Fatalf("after every send failed: %d calls, want 1", calls)
	}
}

// TestLeaderInstallsOrdersInTheirSequence: with orders ahead, epochs 0
// and 1 are published together, and each is installed on the leader once
// delivered. Epoch 1 delivered first must still wait for epoch 0: a rank
// asking for epoch 0 between the two installs was told it was no longer
// kept (CI: TestOrdersAheadCarryWeightsToEveryPeer).
func TestLeaderInstallsOrdersInTheirSequence(t *testing.T) {
	var hold sync.Map // name of the node whose handler holds epoch 0 back
	release, delivered1 := make(chan struct{}), make(chan struct{}, 1)
	m := startMesh(t, 2, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.OrderAhead = 1
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			current := h[wire.MethodPublish]
			h[wire.MethodPublish] = func(ctx context.Context, from string, body []byte) (any, error) {
				var p wire.PublishMsg
				_, held := hold.Load(n.Name())
				if held && msgpack.Unmarshal(body, &p) == nil && p.Job == "seq" && p.Epoch == 0 {
					<-release
				}
				reply, err := current(ctx, from, body)
				if held && p.Job == "seq" && p.Epoch == 1 {
					delivered1 <- struct{}{}
				}
				return reply, err
			}
		}
	}})
	lead := m.leader(t)
	for _, p := range m.peers {
		if p != lead {
			hold.Store(p.node.Name(), true)
		}
	}
	let := sync.OnceFunc(func() { close(release) })
	defer let()

	c := lead.client(t)
	ordered := make(chan error, 1)
	go func() { ordered <- c.Do(context.Background(), "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "seq").Err() }()
	<-delivered1
	// Epoch 1 is delivered and epoch 0 held back: for a while, the leader
	// must not install epoch 1 (a bounded look, not a measure of speed).
	// Every install changes the book, so each is looked at.
	js := lead.node.ordered[0].lookupJob("seq")
	look := time.NewTimer(time.Second)
	defer look.Stop()
	for looking := true; looking; {
		changed := js.book.Changes()
		if js.book.Kept(1) != nil {
			t.Fatal("the leader installed epoch 1 before epoch 0")
		}
		select {
		case <-changed:
		case <-look.C:
			looking = false
		}
	}
	let()
	if err := <-ordered; err != nil {
		t.Fatalf("the rank on the leader's node asked for epoch 0: %v", err)
	}
	waitFor(t, 10*time.Second, "epochs 0 and 1 installed on the leader", func() bool {
		return js.book.Kept(0) != nil && js.book.Kept(1) != nil
	})
}

// TestAnOrderAheadThatComesLate: with orders ahead, epochs 0 and 1 are
// published together, and a peer may get epoch 1 first. A rank there
// asking for epoch 0 in between asks the leader for it, which holds it
// only once a member does: until it comes, the rank waits rather than
// being told that epoch 0 is no longer kept.
func TestAnOrderAheadThatComesLate(t *testing.T) {
	release, delivered1 := make(chan struct{}), make(chan struct{}, 1)
	asked := make(chan struct{}, 1)
	m := startMesh(t, 2, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.OrderAhead = 1
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			publish, getOrder := h[wire.MethodPublish], h[wire.MethodGetOrder]
			h[wire.MethodPublish] = func(ctx context.Context, from string, body []byte) (any, error) {
				var p wire.PublishMsg
				late := n.Name() == "n1" && msgpack.Unmarshal(body, &p) == nil && p.Job == "late"
				if late && p.Epoch == 0 {
					<-release
				}
				reply, err := publish(ctx, from, body)
				if late && p.Epoch == 1 {
					delivered1 <- struct{}{}
				}
				return reply, err
			}
			h[wire.MethodGetOrder] = func(ctx context.Context, from string, body []byte) (any, error) {
				var req wire.GetOrderReq
				// An order published ahead is asked for unsettled.
				if msgpack.Unmarshal(body, &req) == nil && req.Job == "late" && req.Exact && !req.Settled && req.Epoch == 0 {
					select {
					case asked <- struct{}{}:
					default:
					}
				}
				return getOrder(ctx, from, body)
			}
		}
	}})
	if lead := m.leader(t); lead.node.Name() != "n0" {
		t.Fatalf("leader %s, want n0", lead.node.Name())
	}
	let := sync.OnceFunc(func() { close(release) })
	defer let()
	// A rank on n0 starts the job; n1 holds epoch 1 and not epoch 0.
	c0 := m.peers[0].client(t)
	started := make(chan error, 1)
	go func() { started <- c0.Do(context.Background(), "SHADE.ORDER", "ds", 0, 0, 2, "JOB", "late").Err() }()
	c := m.peers[1].client(t)
	ordered := make(chan error, 1)
	go func() { ordered <- c.Do(context.Background(), "SHADE.ORDER", "ds", 0, 1, 2, "JOB", "late").Err() }()
	<-delivered1
	// The rank on n1 finds epoch 0 missing and asks the leader, which has
	// none: asked again, the rank is still waiting.
	for range 2 {
		select {
		case <-asked:
		case err := <-ordered:
			t.Fatalf("the rank on n1 got an answer before epoch 0 came: %v", err)
		}
	}
	let()
	if err := <-ordered; err != nil {
		t.Fatalf("the rank on n1 asked for epoch 0: %v", err)
	}
	if err := <-started; err != nil {
		t.Fatalf("the rank on n0 asked for epoch 0: %v", err)
	}
}

// TestLeaderServesAnOrderOnceItsOnlyPeerDies: the leader's ranks read an
// order once another member holds it, or once no member can. Here the
// only other member takes the order in and then crashes before it
// answers. The leader's rank must get the order once the member is found
// dead: the send to it ends then, its pauses between tries included
// (two minutes each here, and ten minutes a try), so the order must come
// before the first pause would end.
func TestLeaderServesAnOrderOnceItsOnlyPeerDies(t *testing.T) {
	var hold sync.Map // name of the node whose publish handler never answers
	entered := make(chan struct{}, 1)
	m := startMesh(t, 2, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.RetryEvery = 2 * time.Minute
		c.Cluster.handlers = publishHeld(&hold, entered, nil)
	}})
	lead := m.leader(t)
	other := m.follower(t)
	hold.Store(other.node.Name(), true)
	c := lead.client(t)
	ordered := make(chan error, 1)
	go func() { ordered <- c.Do(context.Background(), "SHADE.ORDER", "ds", 0, 0, 1, "JOB", "orphan").Err() }()
	<-entered
	other.node.kill()
	select {
	case err := <-ordered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the rank on the leader's node still waits for the order a minute after the only other member died")
	}
}

// TestCallEndsWhenTheMemberLeaves: a call to a member ends when the member
// leaves the alive members, with CodeUnavailable, however long its
// timeout: a crashed member never answers, and the caller has others.
func TestCallEndsWhenTheMemberLeaves(t *testing.T) {
	var hold sync.Map // name of the node whose publish handler never answers
	entered := make(chan struct{}, 1)
	m := startMesh(t, 2, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.FetchTimeout = 10 * time.Minute // the handler's bound too
		c.Cluster.handlers = publishHeld(&hold, entered, nil)
	}})
	a, b := m.peers[0].node, m.peers[1].node
	hold.Store(b.Name(), true)
	called := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		called <- a.cluster.callName(ctx, b.Name(), wire.MethodPublish, &wire.PublishMsg{Dataset: "ds", Job: "left"}, nil)
	}()
	<-entered
	a.cluster.mu.Lock()
	without := maps.Clone(a.cluster.members)
	delete(without, b.Name())
	a.cluster.setMembersLocked(without) // as refreshMembers does when b is found dead
	a.cluster.mu.Unlock()
	select {
	case err := <-called:
		if peer.CodeOf(err) != peer.CodeUnavailable {
			t.Fatalf("call to a member that left: %v, want CodeUnavailable", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a call to a member that left the mesh still runs a minute later")
	}
	if err := a.cluster.callName(context.Background(), b.Name(), wire.MethodPublish, &wire.PublishMsg{}, nil); peer.CodeOf(err) != peer.CodeUnavailable {
		t.Fatalf("call to a member no longer alive: %v, want CodeUnavailable", err)
	}
}

// publishHeld is a ClusterConfig.handlers: the publish handler of a node
// named in hold takes the order in, says so on entered (if it has room),
// and waits for release to close before it goes on; a nil release is
// never closed, and the handler then never answers. The other nodes'
// handlers are as they were.
func publishHeld(hold *sync.Map, entered chan<- struct{}, release <-chan struct{}) func(*Node, map[peer.Method]peerHandler) {
	return func(n *Node, h map[peer.Method]peerHandler) {
		h[wire.MethodPublish] = held(h[wire.MethodPublish], func() bool {
			_, ok := hold.Load(n.Name())
			return ok
		}, entered, release)
	}
}

// held wraps a peer handler: while holding reports true, a request says
// so on entered (if it has room) and waits for release to close, or for
// its context to end, before current answers it.
func held(current peerHandler, holding func() bool, entered chan<- struct{}, release <-chan struct{}) peerHandler {
	return func(ctx context.Context, from string, body []byte) (any, error) {
		if holding() {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return current(ctx, from, body)
	}
}

// TestOrdersLargerThanAFrame: in a mesh of three, fewer members than the
// relay fanout, an order that does not fit a frame (MaxFrame, here 16
// KiB) goes to each member in pieces: every rank, one on each node, gets
// its slice of the same order, and the slices make the epoch. The
// publish alone delivers it (a job with no ranks, so that no rank's
// joining again has the leader send it its newest orders); a member sent
// the newest orders (as when it comes back) gets it in pieces too, and so
// does a node that asks the leader for it (as it does while its ranks
// wait for an order that did not come).
func TestOrdersLargerThanAFrame(t *testing.T) {
	const samples, frame = 12000, 16 << 10
	m := startMesh(t, 3, meshOpts{samples: samples, minSize: 1, maxSize: 8, configure: func(i int, c *Config) {
		c.Cluster.MaxFrame = frame
	}})
	lead := m.leader(t)
	slices3 := orderFirstEpoch(t, m)
	js := lead.node.ordered[0].lookupJob("")
	pub := js.book.Kept(0)
	body, err := pub.Encode()
	if err != nil || len(body) <= frame {
		t.Fatalf("an order of %d bytes (%v): want more than a frame of %d", len(body), err, frame)
	}
	seen := make([]bool, samples)
	for rank, ids := range slices3 {
		if !slices.Equal(ids, u32sToInt64(pub.Slices[rank])) {
			t.Fatalf("rank %d's slice is not the leader's", rank)
		}
		for _, id := range ids {
			seen[id] = true
		}
	}
	if i := slices.Index(seen, false); i >= 0 {
		t.Fatalf("sample %d in no rank's slice", i)
	}
	for _, p := range m.peers {
		if _, pieces := p.node.cluster.relays.held(); p != lead && pieces == 0 {
			t.Fatalf("%s was sent no pieces", p.node.Name())
		}
	}

	// The publish alone, of a job no rank trains.
	big := &wire.PublishMsg{Dataset: "ds", Job: "big", Version: pub.Version, Gen: 1, Epoch: 0,
		Term: lead.node.lead.highest(), World: 3, Slices: pub.Slices, Ranks: []string{"", "", ""}}
	lead.node.publish(big, nil)
	hasBig := func(p *testPeer, epoch int) bool {
		js := p.node.ordered[0].lookupJob("big")
		return js != nil && js.book.Kept(epoch) != nil && slices.Equal(js.book.Kept(epoch).Slices[2], pub.Slices[2])
	}
	waitFor(t, 10*time.Second, "the published order on every other member", func() bool {
		for _, p := range m.peers {
			if p != lead && !hasBig(p, 0) {
				return false
			}
		}
		return true
	})

	// The newest orders, sent to a member that lacks one.
	other := m.follower(t)
	late := *big
	late.Epoch = 1
	ljs, err := lead.node.job(lead.node.ordered[0], "big", true)
	if err != nil {
		t.Fatal(err)
	}
	ljs.book.Install(&late)
	_, before := other.node.cluster.relays.held()
	lead.node.sendNewestOrders(other.node.Name())
	waitFor(t, 10*time.Second, "epoch 1 sent to the member", func() bool { return hasBig(other, 1) })
	if _, after := other.node.cluster.relays.held(); after <= before {
		t.Fatal("the newest order was not sent in pieces")
	}

	// An order a node asks the leader for, as while its ranks wait.
	missed := *big
	missed.Epoch = 2
	ljs.book.Install(&missed)
	ojs := other.node.ordered[0].lookupJob("big")
	other.node.fetchExact(ojs, 2, false)
	waitFor(t, 10*time.Second, "epoch 2 sent to the node that asked", func() bool { return hasBig(other, 2) })
}

// orderFirstEpoch has a rank on each peer ask for its slice of epoch 0
// of the default job of "ds", and returns the slices by rank.
func orderFirstEpoch(t *testing.T, m *testMesh) [][]int64 {
	t.Helper()
	world := len(m.peers)
	slices := make([][]int64, world)
	var wg sync.WaitGroup
	for rank, p := range m.peers {
		c := p.client(t)
		wg.Go(func() {
			ids, err := c.Do(context.Background(), "SHADE.ORDER", "ds", 0, rank, world).Int64Slice()
			if err != nil {
				t.Errorf("rank %d on %s: %v", rank, p.node.Name(), err)
			}
			slices[rank] = ids
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return slices
}

func u32sToInt64(ids []uint32) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// TestRelayBookTakesOrdersUpToItsMemory: the largest order the book takes
// is what the serving memory holds, not a frame: an order of more than 64
// MiB is taken with the default 256 MiB, and one larger than the serving
// memory is refused from its size alone, as a bad piece (it never fits).
func TestRelayBookTakesOrdersUpToItsMemory(t *testing.T) {
	serving := budget.New(peer.DefaultMaxRequestMemory)
	book := relayBook{budget: serving}
	ctx := context.Background()
	big := peer.DefaultMaxFrame + 1<<20
	e, err := book.entry(ctx, &wire.RelayMsg{Size: big, PieceSize: 1 << 20, Sum: 1, Piece: make([]byte, 1<<20)}, time.Minute)
	if err != nil || serving.Used() != int64(big) {
		t.Fatalf("an order of %d bytes: %v, %d bytes charged", big, err, serving.Used())
	}
	e.cancel()
	waitFor(t, 10*time.Second, "the order's bytes given back", func() bool { return serving.Used() == 0 })
	huge := int(peer.DefaultMaxRequestMemory) + 1
	if _, err := book.entry(ctx, &wire.RelayMsg{Size: huge, PieceSize: 1 << 20, Sum: 2, Piece: make([]byte, 1<<20)}, time.Minute); !errors.Is(err, wire.ErrBadPiece) || serving.Used() != 0 {
		t.Fatalf("an order larger than the serving memory: %v, %d bytes charged", err, serving.Used())
	}
}
