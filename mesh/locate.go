package mesh

import (
	"context"

	"github.com/shade-mesh/shade/policy"
	"github.com/shade-mesh/shade/transport"
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

// Locate implements transport.Backend. It is MGet, except that a sample
// held here is answered by where it lies in the cache's memory; the reads
// are counted as MGet counts them.
func (n *Node) Locate(ctx context.Context, keys [][]byte) (uint64, []transport.Result) {
	res := make([]transport.Result, len(keys))
	if n.closed.Load() {
		for i := range res {
			res[i].Err = ErrClosed
		}
		return n.store.ID(), res
	}
	var (
		hitIDs = make([]policy.ID, 0, len(keys))
		misses []int
		dss    = make([]*datasetState, len(keys))
		idxs   = make([]int, len(keys))
		mem    = make([]bool, len(keys))
	)
	for i, key := range keys {
		ds, idx, out, err := n.route(key)
		if err != nil {
			res[i].Err = err
			continue
		}
		dss[i], idxs[i] = ds, idx
		if out {
			continue
		}
		if ds != nil {
			n.traceRead(ds, idx, key)
		}
		if loc, ok := n.store.Locate(key); ok {
			res[i] = transport.Result{Found: true, Located: true, Loc: loc}
			mem[i] = true
			if ds == nil {
				n.freeHits.Add(1)
				hitIDs = append(hitIDs, freeID(key))
			} else {
				ds.current().hits.Add(1)
				hitIDs = append(hitIDs, sampleID(ds, idx))
			}
			continue
		}
		if ds == nil {
			n.freeMisses.Add(1)
			continue
		}
		misses = append(misses, i)
	}
	if len(hitIDs) > 0 {
		n.hits(hitIDs...)
	}
	n.readMisses(ctx, keys, misses, dss, idxs, res, mem)
	n.countMGetDeciles(dss, idxs, res, mem)
	return n.store.ID(), res
}
