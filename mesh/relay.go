package mesh

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/budget"
	"github.com/shade-mesh/shade/internal/ctxsleep"
	"github.com/shade-mesh/shade/mesh/orders"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// An epoch's order is megabytes (4 bytes a sample, as much again for the
// weights, the sampler's state besides): sent to every member by the
// leader, it takes the leader's link for seconds at 1,000 members. In a
// mesh of more than Cluster.RelayFanout other members the leader hands it
// to that many instead, each with a group of the rest to pass it on to,
// and so on down: the order leaves every node at most RelayFanout times,
// and reaches everyone in wire.RelayHops hops. The order is encoded once
// (never re-encoded or copied per member, see wire.RelayParts).
//
// An order longer than Cluster.RelayPiece goes in pieces, and a relay
// passes each piece on as soon as it has it (relayPieces): the hops work
// at once, each on its own piece, instead of each waiting for the whole
// order. A relay answers a piece once it has it, and the last piece once
// its whole group has the order, or when its request's time is up (the
// passing on goes on), so that a sender learns of a relay that died and
// hands its group to the group's next member, sending it every piece
// again. A node that missed an order anyway asks the leader for it while
// its ranks wait (see Order).
//
// A relay hands each member it passes the order on to last, one with no
// members below it, its part of the order instead (wire.PublishMsg.Part,
// MethodPublishPart), and a relay with wire.PartsWithin its fanout
// members or fewer to pass the order on to hands them all their parts:
// the slices of the ranks on the member and the reads of the samples it
// owns, cut from the whole in one pass once the relay holds it
// (passGroups, partsOf). Such a member receives, decodes and scans 40
// KiB where the whole is 11 MiB at 1.28 M samples. A relay that would
// pass the whole on to such a relay hands it its group's part instead
// (wire.PublishMsg.Below: the slices and reads of the whole group, 385
// KiB for 17 members), which that relay installs as its own part and
// cuts the others' parts from (serveGroupPart). At 1,000 peers and
// fanout 4, 915 of the 999 members get parts, 64 their groups' parts,
// from 16 relays; the leader, the 4 members it sends to and the 16
// relays below them hold the whole order, which is what a new leader
// adopts (leader.States.NewestOrder); a rank that asks a member for a
// slice its part lacks gets the whole from the leader (Order). Epoch 0
// goes whole, and so do an order in pieces that the ranks wait for, one
// whose parts are likely larger than a piece, and a part larger than a
// piece (see partsFit and passGroups).
//
// A message larger than a frame (ClusterConfig.MaxFrame) can only travel
// in pieces, so an order that large goes this way to any number of
// members, and so does a score table the leader replicates (sendEach):
// the relay carries either method (relayable).

// relayEach sends body, an encoded message of method m (relayable), to
// the named members through relays, in pieces if it is longer than one.
// held is called at the first group whose relay answered that it
// delivered, or once every group's relaying has ended (see
// firstDelivery).
func (n *Node) relayEach(names []string, m peer.Method, body []byte, held func()) {
	var whole *wire.Assembly
	if len(body) > n.cfg.Cluster.RelayPiece {
		whole = wire.WholeAssembly(body, n.cfg.Cluster.RelayPiece)
	}
	groups := wire.RelayGroups(names, n.cfg.Cluster.RelayFanout)
	sent := firstDelivery(len(groups), held)
	for _, group := range groups {
		n.goBackground(func(ctx context.Context) {
			if whole != nil {
				sent(n.relayPieces(ctx, group, m, whole))
				return
			}
			sent(n.relayGroup(ctx, group, m, body))
		})
	}
}

// relayGroup delivers body, an encoded message of method m, to every
// member of group: it hands it to the group's first member with the rest
// to pass on, and if that member does not answer, to the next, and so
// on. A member it could not reach is not asked again by the next (it may
// be dead); a node that missed an order asks the leader for it while its
// ranks wait (see Order). It reports whether a member answered that it
// holds the message and passed it on.
func (n *Node) relayGroup(ctx context.Context, group []string, m peer.Method, body []byte) bool {
	for i, head := range group {
		rest := group[i+1:]
		if len(rest) == 0 {
			return n.sendWithRetries(ctx, head, m, msgpack.RawMessage(body))
		}
		parts, err := wire.RelayParts(rest, m, body)
		if err != nil {
			n.cfg.Logger.Error().Err(err).Msg("encoding a relayed message")
			return false
		}
		// The head answers once its group has the message: give it the
		// time of a call for each hop below it.
		hops := wire.RelayHops(len(rest), n.cfg.Cluster.RelayFanout)
		cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout*time.Duration(1+hops))
		err = n.cluster.callName(cctx, head, wire.MethodRelay, parts, nil)
		cancel()
		switch {
		case err == nil:
			return true
		case ctx.Err() != nil:
			return false
		case peer.CodeOf(err) == peer.CodeBadRequest:
			n.cfg.Logger.Warn().Err(err).Str("peer", head).Msg("relayed message refused")
			return false
		}
		n.cfg.Logger.Debug().Err(err).Str("peer", head).Int("group", len(rest)).Msg("relay failed; handing the group to its next member")
	}
	return false
}

// relayPieces delivers the order a assembles to every member of group,
// as relayGroup does, piece by piece: each piece goes to the group's head
// as soon as a has it. If the head fails, the group goes to its next
// member, which is sent every piece again; the group's last member, with
// no one after it, is tried a few times. A head that refuses the first
// piece (an older peer, which knows no pieces) is handed the whole order
// once a has it. It reports whether a member answered that it holds the
// order and passed it on.
func (n *Node) relayPieces(ctx context.Context, group []string, m peer.Method, a *wire.Assembly) bool {
	for i, head := range group {
		rest := group[i+1:]
		tries := 1
		if len(rest) == 0 {
			tries = sendTries
		}
		if ok, done := n.piecesToHead(ctx, group[i:], m, a, tries); done {
			return ok
		}
		if ctx.Err() != nil {
			return false
		}
		n.cfg.Logger.Debug().Str("peer", head).Int("group", len(rest)).Msg("relay failed; handing the group to its next member")
	}
	return false
}

// sendPieces sends head every piece of a, each once a has it, with rest
// for head to pass them on to. It reports whether the error, if any, came
// for the first piece.
func (n *Node) sendPieces(ctx context.Context, head string, rest []string, m peer.Method, a *wire.Assembly) (first bool, err error) {
	hops := wire.RelayHops(len(rest), n.cfg.Cluster.RelayFanout)
	for i := range a.Pieces() {
		if err := awaitPiece(ctx, a, i); err != nil {
			return i == 0, err
		}
		parts, err := wire.RelayPieceParts(rest, m, a, i)
		if err != nil {
			return i == 0, err
		}
		// The head answers a piece once it has it, and the last once its
		// group has the whole order: give that one a call's time for each
		// hop below it.
		timeout := n.cfg.Cluster.FetchTimeout
		if i == a.Pieces()-1 {
			timeout *= time.Duration(1 + hops)
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err = n.cluster.callName(cctx, head, wire.MethodRelay, parts, nil)
		cancel()
		if err != nil {
			return i == 0, err
		}
	}
	return false, nil
}

// awaitPiece waits until a has piece i.
func awaitPiece(ctx context.Context, a *wire.Assembly, i int) error {
	select {
	case <-a.Ready(i):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// piecesToHead sends every piece of a to group's first member, with the
// rest of group to pass them on to, trying up to tries times while the
// member stays in the mesh. done is false where the group is to go to its
// next member; otherwise ok reports whether the group has the order.
func (n *Node) piecesToHead(ctx context.Context, group []string, m peer.Method, a *wire.Assembly, tries int) (ok, done bool) {
	head, rest := group[0], group[1:]
	hctx, release, member := n.cluster.whileMember(ctx, head)
	if !member {
		return false, false
	}
	defer release()
	for try := 1; ; try++ {
		first, err := n.sendPieces(hctx, head, rest, m, a)
		switch {
		case err == nil:
			return true, true
		case ctx.Err() != nil:
			return false, true
		case peer.CodeOf(err) == peer.CodeBadRequest && first:
			if body, err := awaitWhole(ctx, a); err == nil {
				return n.relayGroup(ctx, group, m, body), true
			}
			return false, true
		case peer.CodeOf(err) == peer.CodeBadRequest:
			n.cfg.Logger.Warn().Err(err).Str("peer", head).Msg("relayed piece refused")
			return false, true
		}
		if try >= tries || !ctxsleep.Sleep(hctx, time.Duration(try)*n.cfg.Cluster.RetryEvery) {
			return false, false
		}
	}
}

// awaitWhole waits until a has every piece, and returns the order.
func awaitWhole(ctx context.Context, a *wire.Assembly) ([]byte, error) {
	for i := range a.Pieces() {
		if err := awaitPiece(ctx, a, i); err != nil {
			return nil, err
		}
	}
	body, _, err := a.Whole()
	return body, err
}

// relayable reports whether messages of method m may be relayed: an
// epoch's order, and a score table (for a table that does not fit a
// frame).
func relayable(m peer.Method) bool { return m == wire.MethodPublish || m == wire.MethodReplicate }

// decodeRelayed decodes a relayed message of method m (relayable), from
// member from; serve serves it here as it would be served sent directly.
// order is the message decoded, where it is an epoch's order that passed
// its check here (for the parts of it this node cuts), nil otherwise; it
// is shared: read only. The order is checked once, for both.
func (n *Node) decodeRelayed(from string, m peer.Method, body []byte) (serve func(context.Context) error, order *wire.PublishMsg, err error) {
	if m == wire.MethodReplicate {
		var r wire.ReplicateReq
		if err := msgpack.Unmarshal(body, &r); err != nil {
			return nil, nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "relayed score table: " + err.Error()}
		}
		return func(context.Context) error { return n.applyReplica(&r) }, nil, nil
	}
	var p wire.PublishMsg
	if err := msgpack.Unmarshal(body, &p); err != nil {
		return nil, nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "relayed order: " + err.Error()}
	}
	if p.Part != "" {
		return nil, nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "relayed order: " + p.Part + "'s part of an order is not passed on"}
	}
	if err := n.checkPublish(&p); err != nil {
		// Refused here; passed on all the same, whole (its members check it).
		return func(context.Context) error { return &peer.Error{Code: peer.CodeBadRequest, Msg: err.Error()} }, nil, nil
	}
	return func(context.Context) error {
		_, err := n.installPublished(from, &p)
		return err
	}, &p, nil
}

// passGroups passes a relayed message of method m on to members to, in
// groups, each passed on by relay, and returns once every group is done.
// Where the message is an epoch's order and cut says so (partsFit), a
// member with no others to pass it on to gets its part of it instead,
// and so does every member of to where they are wire.PartsWithin the
// fanout or fewer; a group whose head then hands all the rest their parts
// (wire.GroupWithin the fanout) gets a group's part
// (wire.PublishMsg.Below), which its head cuts their parts from. The
// parts are cut in one pass (partsOf) once order gives the order decoded.
// A member or group gets the whole instead where its head refuses the
// part (a build before parts, or before group parts; a group's head
// names the members below it that refused theirs), none was cut, or the
// part is larger than a relay piece (Cluster.RelayPiece, at most a
// frame): the whole, passed on piece by piece as they come, reaches a
// member a piece after this node has it, and a part that large would
// reach it later (once the whole is here, decoded and cut, its bytes
// after that). In a large mesh a part is a small share of the order (40
// KiB of 11 MiB at 1,000 peers, a group's of 17 members 385 KiB); in a
// mesh of a few peers, a member's ranks and samples are a large one.
func (n *Node) passGroups(ctx context.Context, to []string, cut bool, order func(context.Context) *wire.PublishMsg, relay func(group []string)) {
	fanout := n.cfg.Cluster.RelayFanout
	var wg sync.WaitGroup
	var cuts [][]string // each gets its part from here: a member's own, or its group's
	if cut && len(to) <= wire.PartsWithin(fanout) {
		for _, name := range to {
			cuts = append(cuts, []string{name})
		}
	} else {
		for _, group := range wire.RelayGroups(to, fanout) {
			if cut && len(group) <= wire.GroupWithin(fanout) {
				cuts = append(cuts, group)
				continue
			}
			wg.Go(func() { relay(group) })
		}
	}
	if len(cuts) > 0 {
		parts := n.partsOf(order(ctx), cuts)
		for i, group := range cuts {
			wg.Go(func() {
				whole := group // what gets the whole instead
				if parts != nil && parts[i].EncodedSize() <= n.cfg.Cluster.RelayPiece {
					whole = n.handPart(ctx, group, parts[i])
				}
				if len(whole) > 0 {
					relay(whole)
				}
			})
		}
	}
	wg.Wait()
}

// handPart hands group its part of an order (one member's, or a group's
// to its head to cut the rest theirs from), and returns the members
// that are to get the whole instead: none once the part is delivered;
// the group where its head refuses it (a build before parts, or before
// group parts); those below a group's head that refused their parts (as
// it answers, wire.GroupPartResp); the rest of a group whose head could
// not be reached (it may be dead: it is not asked again). A member that
// gets nothing asks the leader for the order while its ranks wait (see
// Order).
func (n *Node) handPart(ctx context.Context, group []string, part *wire.PublishMsg) (whole []string) {
	head, rest := group[0], group[1:]
	if len(rest) == 0 {
		if peer.CodeOf(n.sendTo(ctx, head, wire.MethodPublishPart, part)) == peer.CodeBadRequest {
			return group
		}
		return nil
	}
	body, err := part.Encode()
	if err != nil {
		n.cfg.Logger.Error().Err(err).Msg("encoding a group's part of an order")
		return group
	}
	parts, err := wire.RelayParts(rest, wire.MethodPublishPart, body)
	if err != nil {
		n.cfg.Logger.Error().Err(err).Msg("encoding a group's part of an order")
		return group
	}
	// The head answers once its group has their parts: a call's time for
	// it, and one for the hop below.
	cctx, cancel := context.WithTimeout(ctx, 2*n.cfg.Cluster.FetchTimeout)
	defer cancel()
	var resp wire.GroupPartResp
	switch err := n.cluster.callName(cctx, head, wire.MethodRelay, parts, &resp); {
	case err == nil:
		return slices.DeleteFunc(resp.Whole, func(name string) bool { return !slices.Contains(rest, name) })
	case peer.CodeOf(err) == peer.CodeBadRequest:
		n.cfg.Logger.Debug().Err(err).Str("peer", head).Msg("a group's part refused; the group gets the whole")
		return group
	case ctx.Err() != nil:
		return nil
	default:
		n.cfg.Logger.Debug().Err(err).Str("peer", head).Int("group", len(rest)).Msg("a group's part not delivered; the rest get the whole")
		return rest
	}
}

// partsFit reports whether the parts of an order of size bytes are
// likely to fit a relay piece in this mesh (wire.PartsFit): a relay cuts
// them only then. An order relayed in pieces is cut only where it was
// drawn ahead, too (serveRelayPiece): the whole, passed on piece by piece
// as it comes, reaches a member a piece after its relay has it, and its
// part only once the relay has decoded the whole and cut the parts (at
// 1,000 peers, 10-20 ms more), which no rank waits for where the order
// was drawn ahead. Whole, an order reaches the members sooner as parts:
// fewer bytes after the hop.
func (n *Node) partsFit(size int) bool {
	return wire.PartsFit(size, n.cfg.Cluster.Replicas, len(n.Members()), n.cfg.Cluster.RelayPiece)
}

// partsOf cuts the parts of order p, checked (the whole, or a group's
// part), for groups of members (orders.CutGroups: a group of one gets a
// member's part), each with the reads of the samples the ring gives its
// members now. It returns nil where p goes whole: none, a retirement,
// and epoch 0, which is drawn while ranks still announce themselves (its
// Ranks may not name their nodes yet).
func (n *Node) partsOf(p *wire.PublishMsg, groups [][]string) []*wire.PublishMsg {
	if p == nil || p.Epoch < 1 || p.Retired {
		return nil
	}
	ds, err := n.dataset(p.Dataset)
	if err != nil {
		return nil
	}
	where := n.placement(ds)
	var parts []*wire.PublishMsg
	for len(groups) > 0 {
		batch := groups[:min(len(groups), 64)] // orders.CutGroups' most
		groups = groups[len(batch):]
		parts = append(parts, orders.CutGroups(p, batch, where.OwnedByAny(batch))...)
	}
	return parts
}

// serveRelay serves a relayed message here (an order, or a score table:
// relayable) and passes it on to req.To, in groups. It answers once every
// group has it or could not be reached, or when the request's time is
// up, whichever comes first; the passing on goes on in the background for
// the time its hops need. A piece of a message goes to serveRelayPiece.
func (n *Node) serveRelay(ctx context.Context, from string, req *wire.RelayMsg) (any, error) {
	m := peer.Method(req.Method)
	group := m == wire.MethodPublishPart && !req.IsPiece() // a group's part (serveGroupPart)
	if !relayable(m) && !group {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("method %d cannot be relayed", req.Method)}
	}
	to := slices.DeleteFunc(slices.Clone(req.To), func(name string) bool { return name == n.cfg.Name })
	if members := len(n.Members()); len(to) > members {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("relay to %d members; the mesh has %d", len(to), members)}
	}
	if group {
		return n.serveGroupPart(ctx, from, req.Body, to)
	}
	if req.IsPiece() {
		return n.serveRelayPiece(ctx, from, req, to)
	}
	serve, order, err := n.decodeRelayed(from, m, req.Body)
	if err != nil {
		return nil, err
	}
	passed := make(chan struct{})
	n.goBackground(func(bctx context.Context) {
		defer close(passed)
		hops := wire.RelayHops(len(to), n.cfg.Cluster.RelayFanout)
		fctx, cancel := context.WithTimeout(bctx, n.cfg.Cluster.FetchTimeout*time.Duration(1+hops))
		defer cancel()
		cut := order != nil && n.partsFit(len(req.Body))
		n.passGroups(fctx, to, cut, func(context.Context) *wire.PublishMsg { return order },
			func(group []string) { n.relayGroup(fctx, group, m, req.Body) })
	})
	err = serve(ctx)
	select {
	case <-passed:
	case <-ctx.Done():
	}
	return nil, err
}

// serveGroupPart takes body, this node's group's part of an order
// (wire.PublishMsg.Below), relayed to it with the members it names below
// it to pass their parts on to (to, this node left out): it installs it
// as its own part, cuts theirs from it in one pass and hands them on
// (passGroups), and answers once they have them or could not be
// reached, or when the request's time is up, naming those that are to
// get the whole instead (builds before parts, who refuse theirs: its
// sender relays them the whole, wire.GroupPartResp). A part
// for another member, or without every member of to below it, is
// refused (its sender hands the group the whole instead), and so is one
// that fails its check.
func (n *Node) serveGroupPart(ctx context.Context, from string, body []byte, to []string) (any, error) {
	var p wire.PublishMsg
	if err := msgpack.Unmarshal(body, &p); err != nil {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "relayed part of an order: " + err.Error()}
	}
	if p.Part != n.cfg.Name || p.Epoch < 1 || p.Retired || slices.ContainsFunc(to, func(name string) bool { return !slices.Contains(p.Below, name) }) {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("a group's part of the order for %s epoch %d for %q, with %d members below it, relayed to %s for %d", p.Dataset, p.Epoch, p.Part, len(p.Below), n.cfg.Name, len(to))}
	}
	if err := n.checkPublish(&p); err != nil {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: err.Error()}
	}
	passed := make(chan struct{})
	var mu sync.Mutex
	var resp wire.GroupPartResp // read once passed is closed
	n.goBackground(func(bctx context.Context) {
		defer close(passed)
		fctx, cancel := context.WithTimeout(bctx, n.cfg.Cluster.FetchTimeout)
		defer cancel()
		// Those who are to get the whole get it from the sender, which
		// holds it: this node names them.
		n.passGroups(fctx, to, true, func(context.Context) *wire.PublishMsg { return &p }, func(group []string) {
			mu.Lock()
			resp.Whole = append(resp.Whole, group...)
			mu.Unlock()
		})
	})
	_, err := n.installPublished(from, &p)
	select {
	case <-passed:
	case <-ctx.Done():
		return nil, cmp.Or(err, ctx.Err())
	}
	return &resp, err
}

// serveRelayPiece takes a piece of a relayed order: it puts it in the
// order's assembly and, the first time it is asked to pass the order on
// to these members, starts passing every piece on to them as each comes
// in. It answers a piece once it has it; the order's last piece once the
// order is installed here and its groups have it (or could not be
// reached), or when the request's time is up.
func (n *Node) serveRelayPiece(ctx context.Context, from string, req *wire.RelayMsg, to []string) (any, error) {
	// The entry lasts for a call's time for each piece and each hop
	// below, and one more.
	hops := wire.RelayHops(len(to), n.cfg.Cluster.RelayFanout)
	pieces := (req.Size + max(req.PieceSize, 1) - 1) / max(req.PieceSize, 1)
	e, err := n.cluster.relays.entry(n.ctx, req, n.cfg.Cluster.FetchTimeout*time.Duration(1+hops+min(pieces, 64)))
	if errors.Is(err, errRelayNoRoom) {
		return nil, &peer.Error{Code: peer.CodeUnavailable, Msg: "relayed order: " + err.Error()}
	}
	if err == nil {
		err = e.a.Put(req)
	}
	if err != nil {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "relayed order: " + err.Error()}
	}
	m := peer.Method(req.Method)
	passed := e.passOn(to, func(ctx context.Context, done func()) {
		n.goBackground(func(context.Context) {
			defer done()
			order := func(ctx context.Context) *wire.PublishMsg {
				_, p, _ := e.decode(ctx, n, from, m)
				return p
			}
			cut := false
			if m == wire.MethodPublish && awaitPiece(ctx, e.a, 0) == nil {
				epoch, ahead, ok := wire.PeekOrder(e.a.Piece(0))
				cut = ok && epoch > 0 && ahead > 0 && n.partsFit(e.a.Size()) // epoch 0 goes whole (partsOf)
			}
			n.passGroups(ctx, to, cut, order, func(group []string) { n.relayPieces(ctx, group, m, e.a) })
		})
	})
	if req.Off+len(req.Piece) < req.Size {
		return nil, nil
	}
	serve, _, err := e.decode(ctx, n, from, m)
	if errors.Is(err, wire.ErrBadPiece) {
		e.cancel() // bytes that do not hash to the order's sum, or no msgpack value: none is kept, none passed on
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "relayed order: " + err.Error()}
	}
	if err != nil {
		return nil, err
	}
	err = serve(ctx)
	select {
	case <-passed:
		e.finish()
	case <-ctx.Done():
	}
	return nil, err
}

// relayBook holds the orders being relayed to a node in pieces, each for
// as long as passing it on may take. Each order's bytes are charged to
// the node's serving memory (ClusterConfig.MaxPeerMemory) from its first
// piece until it leaves the book; where they do not fit, the oldest
// orders in the book make room, if that is enough, and the piece is
// refused otherwise.
type relayBook struct {
	budget *budget.Budget // nil: nothing charged

	mu      sync.Mutex
	entries []*relayEntry // oldest first
	pieces  int           // pieces taken, ever
}

// errRelayNoRoom refuses a piece of an order the node has no memory for.
var errRelayNoRoom = errors.New("no room in the serving memory for a relayed order")

// relayEntry is one order being relayed to a node in pieces.
type relayEntry struct {
	a      *wire.Assembly
	ctx    context.Context // ends when the entry leaves the book
	cancel context.CancelFunc

	mu      sync.Mutex
	passing map[string]chan struct{} // by members passed on to; closed once they have the order

	decoded sync.Once // the whole order decoded, once: serve, order, err
	serve   func(context.Context) error
	order   *wire.PublishMsg
	err     error
}

// decode waits until the entry's order is whole and decodes it, once
// (decodeRelayed, from member from, of method m), for serving it here
// and for cutting the parts of it this node passes on.
func (e *relayEntry) decode(ctx context.Context, n *Node, from string, m peer.Method) (serve func(context.Context) error, order *wire.PublishMsg, err error) {
	body, err := awaitWhole(ctx, e.a)
	if err != nil {
		return nil, nil, err
	}
	e.decoded.Do(func() { e.serve, e.order, e.err = n.decodeRelayed(from, m, body) })
	return e.serve, e.order, e.err
}

// entry returns the entry of the order req is a piece of, making it (to
// last life, within parent) if the book has none.
func (b *relayBook) entry(parent context.Context, req *wire.RelayMsg, life time.Duration) (*relayEntry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pieces++
	for _, e := range b.entries {
		if e.a.Matches(req) {
			return e, nil
		}
	}
	a, err := wire.NewAssembly(req.Size, req.PieceSize, req.Sum, b.limit())
	if err != nil {
		return nil, err
	}
	if err := b.reserve(int64(a.Size())); err != nil {
		return nil, err
	}
	e := &relayEntry{a: a, passing: make(map[string]chan struct{})}
	e.ctx, e.cancel = context.WithTimeout(parent, life)
	context.AfterFunc(e.ctx, func() { b.drop(e) })
	b.entries = append(b.entries, e)
	return e, nil
}

// limit is the largest order the book takes: all of the serving memory
// it is charged to (an order larger than a frame comes in pieces for
// that reason); one frame where there is no budget.
func (b *relayBook) limit() int {
	if b.budget == nil || b.budget.Limit() <= 0 {
		return peer.DefaultMaxFrame
	}
	return int(min(b.budget.Limit(), math.MaxInt))
}

// reserve charges size bytes to the budget, the oldest entries leaving
// the book to make room where that is enough; b.mu is held.
func (b *relayBook) reserve(size int64) error {
	if b.budget == nil || b.budget.TryReserve(size) {
		return nil
	}
	if limit := b.budget.Limit(); limit > 0 && b.budget.Used()-int64(b.bytesLocked())+size > limit {
		return errRelayNoRoom // the book's own orders are not what fills it
	}
	for len(b.entries) > 0 {
		old := b.entries[0]
		b.entries = b.entries[1:]
		b.budget.Release(int64(old.a.Size()))
		old.cancel()
		if b.budget.TryReserve(size) {
			return nil
		}
	}
	return errRelayNoRoom
}

// held is the bytes of the orders in the book, and how many pieces the
// node was ever sent.
func (b *relayBook) held() (bytes, pieces int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytesLocked(), b.pieces
}

// bytesLocked is the bytes of the orders in the book; b.mu is held.
func (b *relayBook) bytesLocked() (bytes int) {
	for _, e := range b.entries {
		bytes += e.a.Size()
	}
	return bytes
}

// drop takes e out of the book and gives its bytes back, if it is there.
func (b *relayBook) drop(e *relayEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(b.entries, e); i >= 0 {
		b.entries = slices.Delete(b.entries, i, i+1)
		if b.budget != nil {
			b.budget.Release(int64(e.a.Size()))
		}
	}
}

// passOn starts the passing on of the entry's order to members to with
// start, the first time it is asked for these members, and returns a
// channel closed once they have it (start calls done then).
func (e *relayEntry) passOn(to []string, start func(ctx context.Context, done func())) <-chan struct{} {
	key := strings.Join(to, "\x00")
	e.mu.Lock()
	defer e.mu.Unlock()
	if ch, ok := e.passing[key]; ok {
		return ch
	}
	ch := make(chan struct{})
	e.passing[key] = ch
	start(e.ctx, func() {
		close(ch)
		e.finish()
	})
	return ch
}

// finish takes the entry out of the book once its order is complete and
// every passing on of it is over.
func (e *relayEntry) finish() {
	if !e.a.Complete() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.passing {
		select {
		case <-c:
		default:
			return // a passing on still runs
		}
	}
	e.cancel()
}
