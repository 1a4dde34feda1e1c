package mesh

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

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
// (never re-encoded or copied per member, see wire.RelayParts). A relay
// answers once its whole group has the order, or when its request's time
// is up (the passing on goes on), so that a sender learns of a relay that
// died and hands its group to the group's next member.

// relayEach sends body, an encoded order, to the named members through
// relays.
func (n *Node) relayEach(names []string, body []byte) {
	for _, group := range wire.RelayGroups(names, n.cfg.Cluster.RelayFanout) {
		n.goBackground(func(ctx context.Context) { n.relayGroup(ctx, group, body) })
	}
}

// relayGroup delivers body, an encoded order, to every member of group:
// it hands it to the group's first member with the rest to pass on, and
// if that member does not answer, to the next, and so on. A member it
// could not reach is not asked again by the next (it may be dead); a node
// that missed an order asks the leader for it while its ranks wait (see
// Order).
func (n *Node) relayGroup(ctx context.Context, group []string, body []byte) {
	for i, head := range group {
		rest := group[i+1:]
		if len(rest) == 0 {
			n.sendWithRetries(ctx, head, wire.MethodPublish, msgpack.RawMessage(body))
			return
		}
		parts, err := wire.RelayParts(rest, wire.MethodPublish, body)
		if err != nil {
			n.cfg.Logger.Error().Err(err).Msg("encoding a relayed message")
			return
		}
		// The head answers once its group has the message: give it the
		// time of a call for each hop below it.
		hops := wire.RelayHops(len(rest), n.cfg.Cluster.RelayFanout)
		cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout*time.Duration(1+hops))
		err = n.cluster.callName(cctx, head, wire.MethodRelay, parts, nil)
		cancel()
		switch {
		case err == nil:
			return
		case ctx.Err() != nil:
			return
		case peer.CodeOf(err) == peer.CodeBadRequest:
			n.cfg.Logger.Warn().Err(err).Str("peer", head).Msg("relayed message refused")
			return
		}
		n.cfg.Logger.Debug().Err(err).Str("peer", head).Int("group", len(rest)).Msg("relay failed; handing the group to its next member")
	}
}

// serveRelay installs a relayed order and passes it on to req.To, in
// groups. It answers once every group has it or could not be reached,
// or when the request's time is up, whichever comes first; the passing on
// goes on in the background for the time its hops need.
func (n *Node) serveRelay(ctx context.Context, from string, req *wire.RelayMsg) (any, error) {
	if peer.Method(req.Method) != wire.MethodPublish {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("method %d cannot be relayed", req.Method)}
	}
	var p wire.PublishMsg
	if err := msgpack.Unmarshal(req.Body, &p); err != nil {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "relayed order: " + err.Error()}
	}
	to := slices.DeleteFunc(slices.Clone(req.To), func(name string) bool { return name == n.cfg.Name })
	if members := len(n.Members()); len(to) > members {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: fmt.Sprintf("relay to %d members; the mesh has %d", len(to), members)}
	}
	passed := make(chan struct{})
	n.goBackground(func(bctx context.Context) {
		defer close(passed)
		hops := wire.RelayHops(len(to), n.cfg.Cluster.RelayFanout)
		fctx, cancel := context.WithTimeout(bctx, n.cfg.Cluster.FetchTimeout*time.Duration(1+hops))
		defer cancel()
		var wg sync.WaitGroup
		for _, group := range wire.RelayGroups(to, n.cfg.Cluster.RelayFanout) {
			wg.Go(func() { n.relayGroup(fctx, group, req.Body) })
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
