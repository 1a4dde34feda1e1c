package mesh

import (
	"context"

	"github.com/shade-mesh/shade/policy"
	"github.com/shade-mesh/shade/protocol/shm"
)

// SharedArena implements transport.Backend: a read-only descriptor of the
// cache's memory, for a trainer on this node to map.
func (n *Node) SharedArena() (fd int, size int64, id uint64, err error) {
	if n.closed.Load() {
		return -1, 0, 0, ErrClosed
	}
	fd, err = n.store.SharedFd()
	if err != nil {
		return -1, 0, 0, err
	}
	return fd, n.store.Size(), n.store.ID(), nil
}

// Locate implements transport.Backend: where each held sample lies in the
// cache's memory. A sample found is a read, counted and traced as a hit of
// GET would be; the others are not counted here, because the trainer reads
// them next with MGET, which reads them through and counts them. Each key
// is hinted to the store some reads ahead (hintAhead): finding a sample
// reads its block's header.
func (n *Node) Locate(ctx context.Context, keys [][]byte) (uint64, []shm.Location) {
	locs := make([]shm.Location, len(keys))
	if n.closed.Load() {
		return n.store.ID(), locs
	}
	hitIDs := make([]policy.ID, 0, len(keys))
	for i, key := range keys {
		n.hintAhead(keys, i)
		ds, idx, out, err := n.route(key)
		if err != nil || out {
			continue
		}
		loc, ok := n.store.Locate(key)
		if !ok {
			continue
		}
		locs[i] = loc
		if ds == nil {
			n.freeHits.Add(1)
			hitIDs = append(hitIDs, freeID(key))
			continue
		}
		n.traceRead(ds, idx, key)
		ds.counters.Current().Hits.Add(1)
		ds.countDecile(idx, true)
		countJobRead(ctx, ds, idx, true)
		hitIDs = append(hitIDs, sampleID(ds, idx))
	}
	if len(hitIDs) > 0 {
		n.hits(hitIDs...)
	}
	return n.store.ID(), locs
}
