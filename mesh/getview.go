package mesh

import "context"

// GetView implements transport.Backend: Get without the copy into a
// buffer. A cached value is lent to fn in place in the cache memory, after
// its checksum has been verified (unless the store was configured to skip
// that), under the store's read lock for its shard (see store.View); a value
// read through is lent from the buffer it was read into. Counts, policy
// hits, importance deciles and the trace are exactly those of Get.
func (n *Node) GetView(ctx context.Context, key []byte, fn func(value []byte)) (bool, error) {
	if n.closed.Load() {
		return false, ErrClosed
	}
	ds, idx, out, err := n.route(key)
	if err != nil {
		return false, err
	}
	lend := func(v []byte, _ uint64) { fn(v) }
	if ds == nil {
		if n.store.View(key, lend) {
			n.freeHits.Add(1)
			n.hits(freeID(key))
			return true, nil
		}
		n.freeMisses.Add(1)
		return false, nil
	}
	if out {
		return false, nil
	}
	n.traceRead(ds, idx, key)
	if n.store.View(key, lend) {
		ds.counters.Current().Hits.Add(1)
		n.hits(sampleID(ds, idx))
		ds.countDecile(idx, true)
		return true, nil
	}
	v, mem, err := n.readMissing(ctx, ds, idx, key)
	if err != nil {
		return false, err
	}
	ds.counters.Missed(idx, mem)
	ds.countDecile(idx, mem)
	fn(v)
	return true, nil
}

// ValueSize implements transport.Backend: the bytes of key's value as far
// as the node knows without reading it: a sample's size in its manifest, a
// free-form value's stored length, 0 for anything else.
func (n *Node) ValueSize(key []byte) int {
	ds, idx, out, err := n.route(key)
	switch {
	case err != nil || out:
		return 0
	case ds == nil:
		l, _ := n.store.ValueLen(key)
		return l
	default:
		return int(ds.manifest.Sizes[idx])
	}
}
