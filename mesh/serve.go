package mesh

import (
	"context"
	"math"
	"slices"
	"sync"

	"github.com/shade-mesh/shade/internal/prefetch"
	"github.com/shade-mesh/shade/mesh/readahead"
	"github.com/shade-mesh/shade/policy"
	"github.com/shade-mesh/shade/transport"
)

// Get implements the read of one key: AppendGet without a head.
func (n *Node) Get(ctx context.Context, key []byte, dst []byte) ([]byte, bool, error) {
	return n.AppendGet(ctx, key, dst, nil)
}

// AppendGet reads key as LendGet does, lending nothing: a cached value is
// copied from the cache memory into dst under the store's read lock for
// its shard and its checksum verified on the copy (store.Append); a value
// read through is appended from the buffer it was read into. head (nil:
// none) runs under that lock for a cached value. Hits, misses, the
// policy's hit, importance deciles and the trace are counted here once
// per call.
func (n *Node) AppendGet(ctx context.Context, key, dst []byte, head func(dst []byte, n int) []byte) ([]byte, bool, error) {
	r, _, found, _, err := n.get(ctx, key, dst, head, math.MaxInt, true)
	return r, found, err
}

// LendGet implements transport.Backend: AppendGet, except that a cached
// value of at least transport.MinLent bytes is lent in place, its
// checksum verified there (store.Lend). The trainer socket's GET reads
// this way.
func (n *Node) LendGet(ctx context.Context, key, dst []byte, head func(dst []byte, n int) []byte) ([]byte, transport.Loan, bool, error) {
	r, loan, found, _, err := n.get(ctx, key, dst, head, transport.MinLent, true)
	return r, loan, found, err
}

// LendHeld implements transport.Backend: LendGet where the answer needs no
// read from an owner or the source (a value held here, an unknown key, an
// index out of range); held is false, and nothing is done or counted,
// otherwise.
func (n *Node) LendHeld(ctx context.Context, key, dst []byte, head func(dst []byte, n int) []byte) ([]byte, transport.Loan, bool, bool, error) {
	return n.get(ctx, key, dst, head, transport.MinLent, false)
}

// Prefetch implements transport.Backend: it hints the cache memory
// (store.Prefetch).
func (n *Node) Prefetch(key []byte) { n.store.Prefetch(key) }

// hintAhead hints keys to the store for a loop that reads them in turn
// and is about to read keys[i] (hintKeysAhead).
func (n *Node) hintAhead(keys [][]byte, i int) {
	n.hintKeysAhead(len(keys), i, func(j int) []byte { return keys[j] })
}

// hintKeysAhead hints the store for a loop that reads count keys in turn
// and is about to read the i-th, key(j) being the j-th (nil: none to
// hint), in two steps (prefetch.Ahead): each key's place in the store's
// index (store.PrefetchIndex) about 2 x transport.PrefetchAhead reads
// before it, then its block (store.Prefetch, which looks the key up in
// that index) about transport.PrefetchAhead reads before it.
func (n *Node) hintKeysAhead(count, i int, key func(j int) []byte) {
	prefetch.Ahead(count, i, transport.PrefetchAhead,
		func(j int) {
			if k := key(j); k != nil {
				n.store.PrefetchIndex(k)
			}
		},
		func(j int) {
			if k := key(j); k != nil {
				n.store.Prefetch(k)
			}
		})
}

// LendHeldPrefix implements transport.Backend: it lends the value of
// every key of a prefix of keys held here in place, whatever its size,
// its checksum verified there (store.Lend), or lends nothing. The prefix
// ends before the key whose value would take the values past maxBytes: a
// sample's size is known from its manifest before it is lent, a
// free-form value's once it is found. It routes and lends the keys in
// turn, each hinted to the store some keys before it is lent (hintAhead),
// and stops, giving back what it lent, at the first sample not held here.
// Only when every key of the prefix is answered does it count the reads,
// as LendGet counts each, and record the hits for the policy in one call
// (Node.hits).
func (n *Node) LendHeldPrefix(ctx context.Context, keys [][]byte, maxBytes int, into []transport.Held) ([]transport.Held, bool) {
	if len(keys) == 0 {
		return into, true
	}
	if n.closed.Load() {
		return into, false // MGet answers every key ErrClosed
	}
	held, start := into, len(into)
	// The routes and the ids of a prefix of up to keysOnStack keys are
	// kept on the stack: it allocates nothing.
	var routeBuf [keysOnStack]heldRoute
	var idBuf [keysOnStack]policy.ID
	routes, ids := routeBuf[:0], idBuf[:0]
	bytes := 0
	for i, key := range keys {
		n.hintAhead(keys, i)
		var r heldRoute
		var h transport.Held
		r.ds, r.idx, r.out, h.Err = n.route(key)
		lend := h.Err == nil && !r.out
		if lend && r.ds != nil {
			size := int(r.ds.manifest.Sizes.At(r.idx))
			if i > 0 && bytes+size > maxBytes {
				break // the prefix ends before this sample
			}
			bytes += size
		}
		if lend {
			_, h.Loan.Value, h.Loan.Token, h.Found = n.store.Lend(nil, key, nil, 0)
		}
		if h.Found && r.ds == nil {
			if i > 0 && bytes+len(h.Loan.Value) > maxBytes {
				n.store.Return(h.Loan.Token)
				break // the prefix ends before this free-form value
			}
			bytes += len(h.Loan.Value)
		}
		// A sample not held here would have to be read from elsewhere.
		if lend && r.ds != nil && !h.Found {
			n.returnHeld(held[start:])
			return held[:start], false
		}
		held = append(held, h)
		routes = append(routes, r)
	}
	keys = keys[:len(routes)]
	for i, key := range keys {
		r, h := &routes[i], &held[start+i]
		switch {
		case h.Err != nil || r.out:
		case r.ds == nil && h.Found:
			n.freeHits.Add(1)
			ids = append(ids, freeID(key))
		case r.ds == nil:
			n.freeMisses.Add(1)
		default:
			n.traceRead(r.ds, r.idx, key)
			r.ds.counters.Current().Hits.Add(1)
			ids = append(ids, sampleID(r.ds, r.idx))
			r.ds.countDecile(r.idx, true)
			countJobRead(ctx, r.ds, r.idx, true)
		}
	}
	if len(ids) > 0 {
		n.hits(ids...)
	}
	return held, true
}

// keysOnStack is the most keys whose routes and ids LendHeldPrefix keeps
// on the stack (2 KiB of it).
const keysOnStack = 64

// heldRoute is where LendHeldPrefix found one key: as Node.route returns it.
type heldRoute struct {
	ds  *datasetState
	idx int
	out bool
}

// returnHeld gives back the values lent in held.
func (n *Node) returnHeld(held []transport.Held) {
	for i := range held {
		if held[i].Found {
			n.store.Return(held[i].Loan.Token)
		}
		held[i] = transport.Held{}
	}
}

// Return implements transport.Backend: it gives a lent value back to the
// store.
func (n *Node) Return(token uint64) { n.store.Return(token) }

// get reads key for AppendGet, LendGet and LendHeld, lending a cached
// value of at least minLent bytes. Without wait, it returns held false,
// having done and counted nothing, where the value must be read from an
// owner or the source.
func (n *Node) get(ctx context.Context, key, dst []byte, head func(dst []byte, n int) []byte, minLent int, wait bool) (result []byte, loan transport.Loan, found, held bool, err error) {
	if n.closed.Load() {
		return dst, loan, false, true, ErrClosed
	}
	ds, idx, out, err := n.route(key)
	if err != nil {
		return dst, loan, false, true, err
	}
	if ds == nil {
		r, v, token, ok := n.store.Lend(dst, key, head, minLent)
		if !ok {
			n.freeMisses.Add(1)
			return dst, loan, false, true, nil
		}
		n.freeHits.Add(1)
		n.hits(freeID(key))
		return r, transport.Loan{Value: v, Token: token}, true, true, nil
	}
	if out {
		return dst, loan, false, true, nil
	}
	r, v, token, ok := n.store.Lend(dst, key, head, minLent)
	if !ok && !wait {
		return dst, loan, false, false, nil
	}
	n.traceRead(ds, idx, key)
	if ok {
		ds.counters.Current().Hits.Add(1)
		n.hits(sampleID(ds, idx))
		ds.countDecile(idx, true)
		countJobRead(ctx, ds, idx, true)
		return r, transport.Loan{Value: v, Token: token}, true, true, nil
	}
	v, mem, err := n.readMissing(ctx, ds, idx, key, n.owners(ds, uint32(idx)))
	if err != nil {
		return dst, loan, false, true, err
	}
	ds.counters.Missed(idx, mem)
	ds.countDecile(idx, mem)
	countJobRead(ctx, ds, idx, mem)
	return appendValue(dst, v, head), loan, true, true, nil
}

// countJobRead counts a read of sample idx for the job ctx names (see
// transport.WithJob; none: the default job): a hit if it was served from
// memory, else a read of the source. A job this node does not know is
// not counted.
func countJobRead(ctx context.Context, ds *datasetState, idx int, fromMemory bool) {
	js := ds.lookupJob(canonicalJob(transport.JobOf(ctx)))
	if js == nil {
		return
	}
	js.reads.Add(1)
	if fromMemory {
		js.hits.Add(1)
		return
	}
	js.sourceReads.Add(1)
	js.sourceBytes.Add(ds.manifest.Sizes.At(idx))
}

// appendValue appends head's framing and v to dst.
func appendValue(dst, v []byte, head func([]byte, int) []byte) []byte {
	if head != nil {
		dst = head(dst, len(v))
	}
	return append(dst, v...)
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
		return int(ds.manifest.Sizes.At(idx))
	}
}

// MGet implements transport.Backend: it routes every key, records the
// hits of the keys held here (the policy hears of them before it admits
// the misses, lockPolicy, so that admitting them cannot evict this
// batch's hits first), reads the samples not held here in parallel
// (those this node owns through its co-owners, each asked for its share
// at once, then the source, at most SourceReads at once: readOwned; the
// others asked of their owners, each owner for its share at once:
// readElsewhere), and returns the batch; its Append copies each held
// value from the cache.
func (n *Node) MGet(ctx context.Context, keys [][]byte) transport.Batch {
	b := &mgetBatch{n: n, ctx: ctx, keys: keys, items: make([]mgetItem, len(keys))}
	if n.closed.Load() {
		for i := range b.items {
			b.items[i].err = ErrClosed
		}
		return b
	}
	var (
		held   = make([]policy.ID, 0, len(keys))
		misses []int
	)
	for i, key := range keys {
		it := &b.items[i]
		it.ds, it.idx, it.out, it.err = n.route(key)
		if it.err != nil || it.out {
			continue
		}
		if it.ds != nil {
			n.traceRead(it.ds, it.idx, key)
		}
		switch has := n.store.Has(key); {
		case has && it.ds == nil:
			held = append(held, freeID(key))
		case has:
			held = append(held, sampleID(it.ds, it.idx))
		case it.ds != nil:
			if misses == nil {
				misses = make([]int, 0, len(keys)-i)
			}
			misses = append(misses, i)
		}
	}
	if len(held) > 0 {
		n.hits(held...)
	}
	// A miss this node owns is read through (from the source, at worst:
	// readOwned). Those it does not own are asked of their owners, each
	// owner for its share at once (readElsewhere), beside.
	var (
		own    []int
		others []*mgetItem
	)
	for _, i := range misses {
		it := &b.items[i]
		if owners := n.ownersView(it.ds, uint32(it.idx)); n.readsThrough(owners) {
			own = append(own, i)
			it.owners = slices.Clone(owners) // readMissing's to keep
		} else {
			it.owners = owners
			if others == nil {
				others = make([]*mgetItem, 0, len(misses))
			}
			others = append(others, it)
		}
	}
	// The two go on together, the others' on a worker (whose stack has
	// grown on a read before), unless one is all there is.
	switch {
	case len(others) == 0:
		n.readOwned(ctx, b, own)
	case len(own) == 0:
		n.readElsewhere(ctx, others)
	default:
		var wg sync.WaitGroup
		n.workers.GoIn(&wg, func() { n.readElsewhere(ctx, others) })
		n.readOwned(ctx, b, own)
		wg.Wait()
	}
	return b
}

// readOwned reads the misses b.items[own] of an MGET, samples this node
// owns, as readMissing would read each, but through readThroughMany:
// each co-owner is asked for its share at once. Samples the read-ahead
// holds or is fetching are taken from it once the others are read; those
// it did not get in time are read after them.
func (n *Node) readOwned(ctx context.Context, b *mgetBatch, own []int) {
	var (
		claims       []readahead.Claim
		claimed, ask []int
	)
	for _, i := range own {
		if c, ok := n.readAhead.Claim(b.items[i].ds, uint32(b.items[i].idx)); ok {
			claims, claimed = append(claims, c), append(claimed, i)
		} else {
			ask = append(ask, i)
		}
	}
	n.readThroughItems(ctx, b, ask)
	var late []int
	for k, c := range claims {
		it := &b.items[claimed[k]]
		v, mem, ok := c.Wait(ctx)
		if !ok {
			late = append(late, claimed[k])
			continue
		}
		tookAhead(it.ds, mem)
		n.keepAhead(it.ds, it.idx, b.keys[claimed[k]], v, mem, it.owners)
		it.missed(v, mem, nil)
	}
	n.readThroughItems(ctx, b, late)
}

// readThroughItems reads b.items[at], misses this node owns, through
// readThroughMany, and records what each read got.
func (n *Node) readThroughItems(ctx context.Context, b *mgetBatch, at []int) {
	if len(at) == 0 {
		return
	}
	through := make([]*throughItem, len(at))
	for k, i := range at {
		it := &b.items[i]
		through[k] = &throughItem{ds: it.ds, idx: it.idx, key: b.keys[i], owners: it.owners}
	}
	n.readThroughMany(ctx, through, true)
	for k, t := range through {
		b.items[at[k]].missed(t.r.v, t.r.mem, t.err)
	}
}

// mgetBatch is one MGet's keys and what is known of them. Used by one
// goroutine at a time (the connection's).
type mgetBatch struct {
	n     *Node
	ctx   context.Context
	keys  [][]byte
	items []mgetItem
}

// mgetItem is one key of a batch.
type mgetItem struct {
	ds     *datasetState // nil: a free-form key
	idx    int
	out    bool   // an index past the dataset's end
	err    error  // a malformed key, or the read through failed
	read   bool   // read through when the batch began: value holds it
	value  []byte // the value read through
	mem    bool   // served from memory, here or a peer's (for deciles)
	served bool   // Append answered it with a value (for deciles)
	// owners of a miss: for one this node owns, a copy (readMissing);
	// for one other nodes own, the ring's view, read only
	// (readElsewhere).
	owners []string
}

// missed records what reading the item's sample, a miss, got. Items of
// one batch may record theirs concurrently, each its own.
func (it *mgetItem) missed(v []byte, mem bool, err error) {
	it.value, it.mem, it.err = v, mem, err
	if err == nil {
		it.ds.counters.Missed(it.idx, mem)
		it.read = true
	}
}

// Append implements transport.Batch.
func (b *mgetBatch) Append(i int, dst []byte, head func([]byte, int) []byte) ([]byte, bool, error) {
	it := &b.items[i]
	n, key := b.n, b.keys[i]
	switch {
	case it.err != nil:
		return dst, false, it.err
	case it.out:
		return dst, false, nil
	case it.read:
		it.served = true
		r := appendValue(dst, it.value, head)
		it.value = nil
		countJobRead(b.ctx, it.ds, it.idx, it.mem)
		return r, true, nil
	}
	r, ok := n.store.Append(dst, key, head)
	switch {
	case ok && it.ds == nil:
		n.freeHits.Add(1)
		return r, true, nil
	case ok:
		it.ds.counters.Current().Hits.Add(1)
		it.served, it.mem = true, true
		countJobRead(b.ctx, it.ds, it.idx, true)
		return r, true, nil
	case it.ds == nil:
		n.freeMisses.Add(1)
		return dst, false, nil
	}
	// Held when the batch began, gone since (evicted, or corrupt): read
	// it through now, alone.
	v, mem, err := n.readMissing(b.ctx, it.ds, it.idx, key, n.owners(it.ds, uint32(it.idx)))
	if err != nil {
		return dst, false, err
	}
	it.ds.counters.Missed(it.idx, mem)
	it.served, it.mem = true, mem
	countJobRead(b.ctx, it.ds, it.idx, mem)
	return appendValue(dst, v, head), true, nil
}

// Close implements transport.Batch: it counts the samples served by
// importance decile, one dataset at a time.
func (b *mgetBatch) Close() {
	var (
		first *datasetState
		idxs  = make([]int, 0, len(b.items))
		pos   = make([]int, 0, len(b.items))
	)
	for {
		first, idxs, pos = nil, idxs[:0], pos[:0]
		for i := range b.items {
			it := &b.items[i]
			if !it.served || (first != nil && it.ds != first) {
				continue
			}
			first = it.ds
			idxs = append(idxs, it.idx)
			pos = append(pos, i)
			it.served = false
		}
		if first == nil {
			return
		}
		first.countDeciles(idxs, func(j int) bool { return b.items[pos[j]].mem })
	}
}
