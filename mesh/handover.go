package mesh

import (
	"context"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/mesh/outbox"
	"github.com/shade-mesh/shade/mesh/wire"
)

// handOver runs before a graceful leave: a leader replicates its score
// tables to every peer at once (so the next leader loses no report), and
// every node offers the samples it caches to their owners in the ring
// without it, so the mesh keeps them resident. It gives up at the deadline;
// what was not handed over is read through again later.
func (n *Node) handOver(timeout time.Duration) {
	if n.cluster == nil || timeout <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, timeout)
	defer cancel()
	if n.lead.leading() {
		n.replicateNow(ctx)
	}
	offered := 0
	for _, ds := range n.ordered {
		r := ds.ring.Load()
		if r == nil {
			continue
		}
		var others []string
		for _, m := range r.Members() {
			if m != n.cfg.Name {
				others = append(others, m)
			}
		}
		if len(others) == 0 {
			continue
		}
		after, err := r.Update(others) // edits the lineage: cheaper than New
		if err != nil {
			continue
		}
		for id := 0; id < ds.len && ctx.Err() == nil; id++ {
			key := keyOfSample(ds, uint32(id))
			v, ok := n.store.Get(nil, []byte(key))
			if !ok {
				continue
			}
			n.offer(ds, uint32(id), v, knownSum{}, after.Owners([]byte(key)), true)
			offered++
			n.drainOffers(ctx, outbox.MaxOfferBytes/2)
		}
	}
	n.drainOffers(ctx, 0)
	n.cfg.Logger.Info().Int("samples", offered).Bool("complete", ctx.Err() == nil).Msg("handed cached samples over before leaving")
}

// drainOffers sends queued offers, each co-owner's next request as its
// last ends, until at most limit bytes are queued or in flight, or ctx
// ends.
func (n *Node) drainOffers(ctx context.Context, limit int) {
	ended := n.out.OfferEnded()
	for n.out.OfferBacklog() > limit && ctx.Err() == nil {
		n.flushOffers(ctx)
		select {
		case <-ended:
		case <-ctx.Done():
		}
	}
}

// replicateNow sends every score table to every other member and waits.
func (n *Node) replicateNow(ctx context.Context) {
	var wg sync.WaitGroup
	for _, js := range n.allJobs() {
		b, _, err := js.scores.Marshal()
		if err != nil {
			continue
		}
		req := &wire.ReplicateReq{Dataset: js.ds.name, Job: js.name, Version: js.ds.manifest.Version, Term: n.lead.ownTerm(), Table: b}
		var whole *wire.Assembly // a table that does not fit a frame goes in pieces
		if body, err := msgpack.Marshal(req); err == nil && len(body) > n.cfg.Cluster.frameRoom() {
			whole = wire.WholeAssembly(body, n.cfg.Cluster.RelayPiece)
		}
		for _, p := range n.cluster.alive() {
			if p.name == n.cfg.Name {
				continue
			}
			wg.Add(1)
			go func(p peerInfo) {
				defer wg.Done()
				if whole != nil {
					if !n.relayPieces(ctx, []string{p.name}, wire.MethodReplicate, whole) {
						n.cfg.Logger.Warn().Str("peer", p.name).Msg("replicating before leaving: not delivered")
					}
					return
				}
				if err := n.cluster.call(ctx, p, wire.MethodReplicate, req, nil); err != nil {
					n.cfg.Logger.Warn().Err(err).Str("peer", p.name).Msg("replicating before leaving")
				}
			}(p)
		}
	}
	wg.Wait()
}
