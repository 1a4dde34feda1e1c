package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shade-mesh/shade/internal/nozero"
	"github.com/shade-mesh/shade/mesh/hedge"
	"github.com/shade-mesh/shade/mesh/ring"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/policy"
	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/protocol/shm"
	"github.com/shade-mesh/shade/sampling"
	"github.com/shade-mesh/shade/transport/peer"
)

// ErrChecksum reports a sample whose bytes did not match the checksum
// that came with them; the copy is discarded and the read goes elsewhere.
var ErrChecksum = errors.New("mesh: checksum mismatch")

// owners returns the members that own sample id of ds, primary first. A
// standalone node owns everything. The slice is the caller's.
func (n *Node) owners(ds *datasetState, id uint32) []string {
	return slices.Clone(n.ownersView(ds, id))
}

// ownersView is owners without a copy, for the loops that look up every
// sample of an order: the slice may be the ring's, and the caller must
// not modify it. Once the dataset's samples are hashed (hashSamples) a
// lookup is a table read, not a key formatted and hashed.
func (n *Node) ownersView(ds *datasetState, id uint32) []string {
	r := ds.ring.Load()
	if n.cluster == nil || r == nil {
		return []string{n.cfg.Name}
	}
	if s := ds.samples.Load(); s.Fits(r) && int(id) < s.Len() {
		return r.SampleOwners(s, id)
	}
	return r.Owners([]byte(keyOfSample(ds, id)))
}

// placement is where ds's samples are as this node's ring stands now, for
// the leader's locality split (sampling.LocalitySplit): the groups are the
// ring's partitions, a sample's read from the table of hashed samples
// once it is ready (a run of them in one loop, GroupEach; its key hashed
// until then).
func (n *Node) placement(ds *datasetState) sampling.Placement {
	return n.placementOf(ds, ds.ring.Load())
}

// placementOf is placement by ring r (nil: no ring yet).
func (n *Node) placementOf(ds *datasetState, r *ring.Ring) sampling.Placement {
	if n.cluster == nil || r == nil {
		self := []string{n.cfg.Name}
		return sampling.Placement{Groups: 1, Group: func(uint32) int { return 0 }, Owners: func(int) []string { return self }}
	}
	where := sampling.Placement{Groups: r.Config().Partitions, Owners: r.PartitionOwners, Masks: r.OwnerMasks, Key: r}
	if s := ds.samples.Load(); s.Fits(r) {
		where.Group = func(id uint32) int {
			if int(id) >= s.Len() {
				return -1 // not a sample of ds: the split refuses it
			}
			return s.Partition(id)
		}
		where.GroupEach = s.PartitionsOf
	} else {
		where.Group = func(id uint32) int { return r.Partition([]byte(keyOfSample(ds, id))) }
	}
	return where
}

// ownsSample returns a test of whether this node owns each of a run of
// samples of ds as the ring stands now (mask 1 where it does), for the
// loops over every read of an order (orders.Reads): each partition's
// owners are looked at once, and a sample's partition is a table read
// once the samples are hashed (see placement).
func (n *Node) ownsSample(ds *datasetState) func(ids []uint32, masks []uint64) {
	return n.placement(ds).OwnedBy([]string{n.cfg.Name})
}

// hashSamples computes the ring partition of every sample of ds, once, in
// the background (1.28 million samples took 37-41 ms and take 2.5 MB):
// the membership update that builds a dataset's first ring does not wait
// for it, and lookups hash each key until it is done.
func (n *Node) hashSamples(ds *datasetState, partitions int) {
	if s := ds.samples.Load(); s != nil && s.Partitions() == partitions {
		return
	}
	n.goBackground(func(context.Context) {
		s, err := ring.NewSamples(partitions, ds.len, func(dst []byte, i int) []byte { return samplekey.Append(dst, ds.name, i) })
		if err != nil {
			n.cfg.Logger.Error().Err(err).Str("dataset", ds.name).Msg("hashing the samples into partitions")
			return
		}
		// A table of a count the node has moved from meanwhile
		// (followMeshShape) is not kept; one of another count than the
		// ring's is never read (Samples.Fits).
		if n.cluster == nil || int(n.cluster.partitions.Load()) == partitions {
			ds.samples.Store(s)
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// readMissing reads a sample this node does not hold. An owner reads it
// through (its co-owners' memory, then the source) and caches it; any
// other node asks the owners, then reads the source itself. fromMemory
// reports whether some node served it from memory.
//
// A sample the read-ahead holds (see package readahead) is taken from there; an
// owner then offers it to its policy as a read-through would.
//
// Reads are hedged (package hedge): an owner that has not answered within
// Node.fetchWait is not waited for alone, the next owner is asked too, and
// the first answer is kept. A peer that died, or stalls, then costs a read
// that wait, not the time to find it dead.
//
// owners are the sample's owners (Node.owners): a copy readMissing may
// keep.
func (n *Node) readMissing(ctx context.Context, ds *datasetState, idx int, key []byte, owners []string) (v []byte, fromMemory bool, err error) {
	own := n.readsThrough(owners)
	if v, mem, ok := n.readAhead.Take(ctx, ds, uint32(idx)); ok {
		tookAhead(ds, mem)
		if own {
			n.keepAhead(ds, idx, key, v, mem, owners)
		}
		return v, mem, nil
	}
	if own {
		r, err := n.readThrough(ctx, ds, idx, key, owners, true, false)
		return r.v, r.mem, err
	}
	return n.readFromOwners(ctx, ds, idx, owners)
}

// tookAhead counts a read that the read-ahead served (mem: with bytes
// from a node's memory, which count as a peer hit, as without it).
func tookAhead(ds *datasetState, mem bool) {
	if !mem {
		ds.counters.Current().PrefetchHits.Add(1)
	}
}

// keepAhead offers a sample of this node's that the read-ahead served to
// the policy, and where it came from the source (not mem), to the other
// owners, as a read through would.
func (n *Node) keepAhead(ds *datasetState, idx int, key, v []byte, mem bool, owners []string) {
	if cached, sum := n.admit(sampleID(ds, idx), key, v, ds); cached && !mem {
		n.offer(ds, uint32(idx), v, sum, owners, false)
	}
}

// readFromOwners reads sample idx of ds, which this node does not own,
// from owners (askOwners), and from the source, uncached, where none
// answers. With no owners it reads the source.
func (n *Node) readFromOwners(ctx context.Context, ds *datasetState, idx int, owners []string) (v []byte, fromMemory bool, err error) {
	r, err := n.askOwners(ctx, ds, idx, owners)
	switch {
	case err == nil:
		return r.v, r.mem, nil
	case ctx.Err() != nil:
		return nil, false, ctx.Err()
	}
	// No owner answered: read the source, without caching what this node
	// does not own. The source is not raced against slow owners: it is
	// what the cache spares, and both owners slow at once is rare.
	ds.counters.Current().SourceFallbacks.Add(1)
	v, err = n.readSource(ds, idx)
	return v, false, err
}

// askOwners asks owners for sample idx of ds, hedged (package hedge),
// the least loaded first, and returns the first answer; with no owners,
// errNotFound.
func (n *Node) askOwners(ctx context.Context, ds *datasetState, idx int, owners []string) (read, error) {
	if len(owners) == 0 {
		return read{}, errNotFound
	}
	preferred := n.preferred(owners)
	tries := make([]func(context.Context) (read, error), len(preferred))
	for i, owner := range preferred {
		tries[i] = func(ctx context.Context) (read, error) {
			return n.fetchOne(ctx, owner, ds, idx, fetchMode{})
		}
	}
	r, how, err := hedge.First(ctx, n.workers.Go, n.fetchWait.Get(), tries...)
	ds.counters.Current().Hedged.Add(int64(how.Hedged))
	return r, err
}

// readsThrough reports whether this node reads a sample of owners
// through itself (readMissing): it is one of them, or there are none.
func (n *Node) readsThrough(owners []string) bool {
	return len(owners) == 0 || contains(owners, n.cfg.Name)
}

// read is a sample's bytes as a try of a hedged read got them: from a
// node's memory, or read from the source here.
type read struct {
	v      []byte
	mem    bool
	source bool
	sum    knownSum
}

// knownSum is a value's checksum (shm.Checksum) where it was worked out
// on the value's way here (an admission's copy, a fetch reply's check),
// so that what passes the value on does not read it again for it; ok is
// false where it was not.
type knownSum struct {
	v  uint64
	ok bool
}

// of returns the checksum of value, whose checksum k is if k.ok.
func (k knownSum) of(value []byte) uint64 {
	if k.ok {
		return k.v
	}
	return shm.Checksum(value)
}

// errNotFound is a try of a hedged read whose owner did not have the
// sample (or sent a copy that failed verification).
var errNotFound = errors.New("mesh: sample not found")

// fetchOne asks owner for sample idx, and teaches Node.fetchWait how long
// the answer took. The request goes at once where none is in flight to
// owner for ds (in mode); otherwise it waits for that one, and goes with
// the others that came meanwhile in one (Node.fetches).
func (n *Node) fetchOne(ctx context.Context, owner string, ds *datasetState, idx int, mode fetchMode) (read, error) {
	defer n.asking(owner, 1)()
	start := time.Now()
	it, err := n.fetches.Call(ctx, fetchKey{owner, ds, mode}, fetchRef{uint32(idx), ds.manifest.Sizes.At(idx)})
	if err != nil {
		return read{}, err
	}
	n.fetchWait.Observe(time.Since(start))
	if !it.Found {
		return read{}, errNotFound
	}
	// fetchFrom checked the value against its sum.
	return read{v: it.Value, mem: it.Hit, sum: knownSum{it.Sum, true}}, nil
}

// fetchKey is where Node.fetches sends a read: an owner, and the dataset
// and mode of its request.
type fetchKey struct {
	owner string
	ds    *datasetState
	mode  fetchMode
}

// fetchRef is a sample Node.fetches reads, and its size in the manifest.
type fetchRef struct {
	id   uint32
	size int64
}

// The bounds of a request of Node.fetches: as many samples as an MGET of
// a minibatch may miss, and bytes as the read-ahead asks an owner for at
// once. A read waits behind a request in flight to its owner at most
// fetchBatchWait after that request went: well above an answer from an
// owner's memory (0.1-1 ms under load here), well below a read through
// from a remote store, behind which reads waited for the whole read
// (a source of 5 ms latency: the 99th percentile of reads 31-34 ms
// without the bound, 15-19 ms with it, as before reads went together).
const (
	maxFetchBatch      = 64
	maxFetchBatchBytes = 4 << 20
	fetchBatchWait     = 2 * time.Millisecond
)

// fetchBatch is Node.fetches' request: one fetch of the samples refs from
// the owner of key.
func (n *Node) fetchBatch(ctx context.Context, key fetchKey, refs []fetchRef) ([]wire.FetchItem, error) {
	ids := make([]uint32, len(refs))
	for i, r := range refs {
		ids[i] = r.id
	}
	return n.fetchFrom(ctx, key.owner, key.ds, ids, key.mode)
}

// throughWait is how long a read through waits for a co-owner before it
// asks the next, or turns to the source. A co-owner asked to read through
// may read the source itself, so the learned wait covers a fetch and a
// source read. The source is read then only beside a co-owner not heard
// from (see coOwnerTry.whileAlive): the source is what the cache spares,
// and the mesh reads each sample from it once.
func (n *Node) throughWait(ds *datasetState) time.Duration {
	d := n.fetchWait.Get()
	if n.cfg.Cluster.HedgeAfter != 0 {
		return d // fixed, or never
	}
	return d + ds.sourceWait.Get()
}

// readSource reads sample idx from the dataset's source and counts it.
// The sample is read into a buffer of its size that is not cleared
// first (nozero): a Source appends exactly the sample's bytes or fails.
// The buffer has a byte to spare, which dataset.Dir asks for to see a
// file that grew.
func (n *Node) readSource(ds *datasetState, idx int) ([]byte, error) {
	start := time.Now()
	var dst []byte
	if idx >= 0 && idx < ds.len {
		dst = nozero.Bytes(int(ds.manifest.Sizes.At(idx)) + 1)
	}
	b, err := ds.src.Read(idx, dst)
	ds.counters.SourceLatency.Observe(time.Since(start))
	c := ds.counters.Current()
	if err != nil {
		c.SourceErrors.Add(1)
		return nil, fmt.Errorf("mesh: %s: %w", samplekey.Format(ds.name, idx), err)
	}
	c.SourceReads.Add(1)
	c.SourceBytes.Add(int64(len(b)))
	ds.sourceWait.Observe(time.Since(start))
	return b, nil
}

// readThrough reads a sample this node owns: from its own memory if
// another read has cached it since the caller looked, from a co-owner's
// memory if one has it, else from the source, and offers it to the
// policy. It returns the bytes with where they came from and their
// checksum where it was worked out on the way (read). Concurrent misses
// for one key collapse into one read; the result is shared between them:
// read only. With forward, an owner before this one in the ring's
// order is asked to read the sample through instead (see below); a node
// serving such a request passes forward false, so requests never loop.
// With asked, the caller has asked every co-owner already, as the read
// would (readThroughMany), and none had it: the read goes to the source.
//
// The shared read runs until it ends, or the node closes, whatever its
// callers: one that gives up (its ctx ends) stops waiting for it alone.
// A peer whose hedged request lost cancels it, and that must not fail
// the same read for this node's own trainers.
func (n *Node) readThrough(ctx context.Context, ds *datasetState, idx int, key []byte, owners []string, forward, asked bool) (read, error) {
	call := n.flight.Do(key, func() (read, error) {
		// A caller found the sample missing some time ago (an MGET's
		// misses are looked up before any is read); another read through
		// of it may have ended and cached it since. Read it again then
		// and the source would be read twice for one sample.
		if v, ok := n.store.Get(nil, key); ok {
			n.hits(sampleID(ds, idx))
			return read{v: v, mem: true}, nil
		}
		ctx := n.ctx
		// The first owner in the ring's order reads the source for all of
		// them: an owner after it asks it to read through instead of
		// reading the source too, so cold misses of one sample on several
		// owners at once cost one source read, as a node's own concurrent
		// misses do (the flight). Owners after this one are asked for
		// their memory only. Each is asked once the one before failed or
		// went throughWait without an answer (hedge.First), the source
		// last, and the first answer is kept; but the source is read
		// beside a co-owner still asked only once that co-owner is not
		// heard from (coOwnerTry.whileAlive).
		var (
			tries []func(context.Context) (read, error)
			tried []*coOwnerTry
		)
		before := forward
		for _, co := range owners {
			if co == n.cfg.Name {
				before = false
				continue
			}
			if n.cluster == nil || asked {
				continue
			}
			mode := fetchMode{memoryOnly: !before, first: before}
			t := newCoOwnerTry(n.cluster, co)
			tried = append(tried, t)
			tries = append(tries, func(ctx context.Context) (read, error) {
				defer close(t.ended)
				r, err := n.fetchOne(ctx, co, ds, idx, mode)
				r.mem = r.mem || mode.memoryOnly
				t.answered.Store(err == nil)
				return r, err
			})
		}
		tries = append(tries, func(ctx context.Context) (read, error) {
			// A co-owner still asked that is heard from is alive, only
			// slow: it may be reading the source itself, so wait for its
			// answer rather than read the source beside it. One not
			// heard from may have died: read the source now.
			for _, t := range tried {
				if err := t.whileAlive(ctx, n.cluster); err != nil {
					return read{}, err
				}
				if t.answered.Load() {
					// First has its answer, and is about to end this try.
					return read{}, errNotFound
				}
			}
			v, err := n.readSource(ds, idx)
			return read{v: v, source: true}, err
		})
		got, how, err := hedge.First(ctx, n.workers.Go, n.throughWait(ds), tries...)
		ds.counters.Current().Hedged.Add(int64(how.Hedged))
		if err != nil {
			return read{}, err
		}
		cached, sum := n.admit(sampleID(ds, idx), key, got.v, ds)
		if !got.sum.ok {
			got.sum = sum
		}
		if cached && got.source {
			n.offer(ds, uint32(idx), got.v, got.sum, owners, false)
		}
		return got, nil
	})
	select {
	case <-call.Done():
		res, err := call.Result()
		if err != nil {
			return read{}, err
		}
		return res, nil
	case <-ctx.Done():
		return read{}, ctx.Err()
	}
}

// coOwnerTry is a co-owner that a read through asks, with what this node
// had heard from it before: packets received on the connection to it
// (cluster.heard), recorded before the read's tries start.
type coOwnerTry struct {
	name      string
	at        time.Time
	heard     uint64
	connected bool
	ended     chan struct{} // closed when the request to it has ended
	answered  atomic.Bool   // it answered the sample
}

func newCoOwnerTry(c *cluster, name string) *coOwnerTry {
	t := &coOwnerTry{name: name, at: time.Now(), ended: make(chan struct{})}
	t.heard, t.connected = c.heard(name)
	return t
}

// ackWindow is how long a co-owner asked has to be heard from before it
// is taken for dead: a QUIC stack acknowledges a request within its ack
// delay (25 ms at most) and a round trip, and a busy host adds to both.
const ackWindow = 100 * time.Millisecond

// whileAlive waits while the request to the co-owner runs and the
// co-owner is there. It looks once ackWindow has passed since the request
// was recorded: a co-owner not heard from since then may have died, and
// whileAlive returns at once. One heard from is looked at again every
// ackWindow, since a peer that acknowledged the request may die before it
// answers: heard from in the meantime (any packet: an answer to another
// request, or to another read's ping), it is there; otherwise it is asked
// (cluster.answers), and whileAlive returns when it does not answer. So
// the reads waiting on one co-owner ping it about once an ackWindow
// between them, not once each. It returns when the request ends, or
// ctx's error if ctx ends first.
func (t *coOwnerTry) whileAlive(ctx context.Context, c *cluster) error {
	timer := time.NewTimer(time.Until(t.at.Add(ackWindow)))
	defer timer.Stop()
	if stop, err := t.until(ctx, timer.C); stop {
		return err
	}
	last, ok := c.heard(t.name)
	if !ok || t.connected && last <= t.heard || !t.connected && last == 0 {
		return nil // not heard from since it was asked
	}
	for {
		timer.Reset(ackWindow)
		if stop, err := t.until(ctx, timer.C); stop {
			return err
		}
		if now, _ := c.heard(t.name); now > last {
			last = now
			continue
		}
		if !c.answers(ctx, t.name, ackWindow) {
			return ctx.Err()
		}
		last, _ = c.heard(t.name)
	}
}

// until waits for tick, unless the request to the co-owner or ctx ends
// first: then it reports stop, and ctx's error.
func (t *coOwnerTry) until(ctx context.Context, tick <-chan time.Time) (stop bool, err error) {
	select {
	case <-t.ended:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	case <-tick:
		return false, nil
	}
}

// offer queues a sample read from the source for the other owners, so
// that it becomes resident on all of them. The runLoops flush sends the
// queue in batches. sum is the value's checksum where it is known.
// leaving marks the hand-over of a member about to leave (see
// wire.OfferItem.Leaving).
func (n *Node) offer(ds *datasetState, id uint32, value []byte, sum knownSum, owners []string, leaving bool) {
	if n.cluster == nil {
		return
	}
	item := wire.OfferItem{Dataset: ds.name, Version: ds.manifest.Version, ID: id, Sum: sum.of(value), Value: value, Leaving: leaving}
	n.out.QueueOffer(item, owners, n.cfg.Name)
}

// flushOffers sends each co-owner its queued samples, at most
// outbox.MaxOfferRequest bytes a request, one request per co-owner in flight.
func (n *Node) flushOffers(ctx context.Context) {
	for co, batch := range n.out.TakeOffers() {
		n.goBackground(func(ctx context.Context) {
			// The samples go to the stream as they lie (OfferReq.Parts).
			req := wire.OfferReq{Items: batch}
			parts, err := req.Parts()
			if err != nil {
				n.cfg.Logger.Error().Err(err).Str("owner", co).Msg("offers not encoded")
				n.out.Offered(co, batch, false)
				return
			}
			cctx, cancel := context.WithTimeout(ctx, 4*n.cfg.Cluster.FetchTimeout)
			err = n.cluster.callName(cctx, co, wire.MethodOffer, parts, nil)
			cancel()
			if err == nil || ctx.Err() != nil || peer.CodeOf(err) == peer.CodeBadRequest {
				n.out.Offered(co, batch, false)
				return
			}
			// Not delivered (a timeout, a peer restarting): queue the batch
			// again, up to three tries and within the byte bound.
			n.cfg.Logger.Debug().Err(err).Str("owner", co).Int("samples", len(batch)).Msg("offers not delivered; retrying")
			n.out.Offered(co, batch, true)
		})
	}
}

// serveOffer admits the samples of an offer, body, that a co-owner read
// from the source, each copied into the store from body as it lies
// (wire.DecodeOfferReq), which the transport keeps until this returns. A
// bad item is skipped; the first such error is returned after the rest
// are admitted.
func (n *Node) serveOffer(_ context.Context, _ string, body []byte) (any, error) {
	var req wire.OfferReq
	if err := wire.DecodeOfferReq(body, &req); err != nil {
		return nil, &peer.Error{Code: peer.CodeBadRequest, Msg: "mesh: " + err.Error()}
	}
	var first error
	for i := range req.Items {
		if err := n.admitOffered(&req.Items[i]); err != nil && first == nil {
			first = err
		}
	}
	return nil, first
}

func (n *Node) admitOffered(it *wire.OfferItem) error {
	ds, err := n.dataset(it.Dataset)
	if err != nil {
		return &peer.Error{Code: peer.CodeNotFound, Msg: err.Error()}
	}
	if it.Version != ds.manifest.Version {
		return &peer.Error{Code: peer.CodeStale, Msg: "dataset version differs"}
	}
	if int(it.ID) >= ds.len {
		return &peer.Error{Code: peer.CodeBadRequest, Msg: "id out of range"}
	}
	if int64(len(it.Value)) != ds.manifest.Sizes.At(int(it.ID)) {
		return &peer.Error{Code: peer.CodeBadRequest, Msg: "size differs from the manifest"}
	}
	if !it.Leaving && !contains(n.ownersView(ds, it.ID), n.cfg.Name) {
		// Offered under a ring one of us has not rebuilt yet: keeping it
		// would leave a copy no owner accounts for.
		return nil
	}
	key := []byte(keyOfSample(ds, it.ID))
	if n.store.Has(key) {
		return nil
	}
	// The value's checksum is checked as it is copied in; one not
	// admitted is not read.
	if err := n.admitSummed(sampleID(ds, int(it.ID)), key, it.Value, ds, it.Sum); err != nil {
		n.cfg.Logger.Warn().Str("key", string(key)).Msg("checksum mismatch: offered copy discarded")
		ds.counters.Current().ChecksumErrors.Add(1)
		return &peer.Error{Code: peer.CodeBadRequest, Msg: err.Error()}
	}
	return nil
}

// asking counts k samples asked of owner until done is called, for
// preferred: a read's while it waits for its request and while the
// request is in flight, so that reads spread over the owners by what
// each has yet to answer.
func (n *Node) asking(owner string, k int) (done func()) {
	n.inflightMu.Lock()
	n.inflight[owner] += int64(k)
	n.inflightMu.Unlock()
	return func() {
		n.inflightMu.Lock()
		n.inflight[owner] -= int64(k)
		n.inflightMu.Unlock()
	}
}

// preferred orders owners for a read: fewest samples asked of them by
// this node and not yet answered first (asking), the ring's order
// breaking ties. The slice is the caller's.
func (n *Node) preferred(owners []string) []string {
	out := slices.Clone(owners)
	var loadBuf [4]int64 // a sample has a few owners: no allocation
	load := loadBuf[:0]
	n.inflightMu.Lock()
	for _, o := range out {
		load = append(load, n.inflight[o])
	}
	n.inflightMu.Unlock()
	// Insertion sort: stable, and the lists are short.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && load[j] < load[j-1]; j-- {
			load[j], load[j-1] = load[j-1], load[j]
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// fetchMode says how an owner answers a fetch: from its memory only, or
// reading through; first asks it to read through itself (see
// wire.FetchReq.First).
type fetchMode struct{ memoryOnly, first bool }

// fetchFrom asks one owner for samples and verifies every value against
// its checksum and the manifest's size. Items that fail verification come
// back not Found.
func (n *Node) fetchFrom(ctx context.Context, owner string, ds *datasetState, ids []uint32, mode fetchMode) ([]wire.FetchItem, error) {
	cctx, cancel := context.WithTimeout(ctx, n.cfg.Cluster.FetchTimeout)
	defer cancel()
	req := &wire.FetchReq{Dataset: ds.name, Version: ds.manifest.Version, IDs: ids, MemoryOnly: mode.memoryOnly, First: mode.first}
	items, err := n.fetchStream(cctx, owner, ds, req)
	if peer.CodeOf(err) == peer.CodeBadRequest {
		// An owner that does not know MethodFetchStream (an older
		// build) answers it as a bad request; ask it the old way.
		var resp wire.FetchResp
		err = n.cluster.callName(cctx, owner, wire.MethodFetch, req, &resp)
		items = resp.Items
	}
	if err != nil {
		return nil, err
	}
	if len(items) != len(ids) {
		return nil, fmt.Errorf("mesh: %s answered %d items for %d ids", owner, len(items), len(ids))
	}
	for i := range items {
		it := &items[i]
		if !it.Found {
			continue
		}
		summed := it.Verified || shm.Checksum(it.Value) == it.Sum
		if !summed || int64(len(it.Value)) != ds.manifest.Sizes.At(int(ids[i])) {
			n.cfg.Logger.Warn().Str("owner", owner).Str("key", keyOfSample(ds, ids[i])).Msg("checksum mismatch: copy discarded")
			ds.counters.Current().ChecksumErrors.Add(1)
			*it = wire.FetchItem{}
		}
	}
	return items, nil
}

// fetchStream asks owner for samples with MethodFetchStream: the values
// come straight from the stream into one buffer, within the manifest's
// sizes of the ids asked for (see wire.ReadFetchValues).
func (n *Node) fetchStream(ctx context.Context, owner string, ds *datasetState, req *wire.FetchReq) ([]wire.FetchItem, error) {
	maxLen := make([]int64, len(req.IDs))
	for i, id := range req.IDs {
		if int(id) < ds.len && !req.Warm {
			maxLen[i] = ds.manifest.Sizes.At(int(id))
		}
	}
	var head wire.FetchHead
	var items []wire.FetchItem
	err := n.cluster.callRawName(ctx, owner, wire.MethodFetchStream, req, &head, func(r io.Reader, size int) error {
		var err error
		items, err = wire.ReadFetchValues(r, size, &head, maxLen)
		return err
	})
	return items, err
}

// serveFetch answers an owner's part of a read (MethodFetch): the values
// msgpack-encoded in the reply.
func (n *Node) serveFetch(ctx context.Context, from string, req *wire.FetchReq) (any, error) {
	items, release, err := n.answerFetch(ctx, from, req)
	if err != nil {
		return nil, err
	}
	defer release() // the transport counts the reply while it encodes and sends it
	return &wire.FetchResp{Items: items}, nil
}

// serveFetchStream answers an owner's part of a read (MethodFetchStream):
// the values go to the stream as they are, and the serving memory they
// take is held until the reply is sent.
func (n *Node) serveFetchStream(ctx context.Context, from string, req *wire.FetchReq) (any, error) {
	items, release, err := n.answerFetch(ctx, from, req)
	if err != nil {
		return nil, err
	}
	return wire.FetchRawReply(items, release), nil
}

// answerFetch reads the samples a fetch asks for, item by item in the
// order of its ids: from memory (copied into one buffer, back to back),
// else (unless MemoryOnly) read through. The bytes the values may take
// are reserved in the node's serving memory before any is read; release
// gives them back, once the values are no longer used. from, the node
// that asked, is not asked for the samples it asked for, nor offered
// them: it does not hold them, and keeps what this answer gives it.
func (n *Node) answerFetch(ctx context.Context, from string, req *wire.FetchReq) (items []wire.FetchItem, release func(), err error) {
	ds, err := n.dataset(req.Dataset)
	if err != nil {
		return nil, nil, &peer.Error{Code: peer.CodeNotFound, Msg: err.Error()}
	}
	if req.Version != ds.manifest.Version {
		return nil, nil, &peer.Error{Code: peer.CodeStale, Msg: fmt.Sprintf("dataset %s: version %s asked, %s here", ds.name, req.Version, ds.manifest.Version)}
	}
	// The values this reply will hold are reserved in the node's serving
	// memory before any is read: a peer cannot make this node hold more
	// than MaxPeerMemory of replies being built, however many requests it
	// sends at once (the transport counts them again while they are sent).
	// A reply that does not fit is refused; the caller reads elsewhere.
	var need int64
	for _, id := range req.IDs {
		if !req.Warm && int(id) < ds.len {
			need += ds.manifest.Sizes.At(int(id))
		}
	}
	// The reply must fit in one frame: samples past the frame's room are
	// answered with an error (the caller reads them elsewhere) instead of
	// being read into memory.
	room := int64(n.cfg.Cluster.frameRoom())
	need = min(need, room)
	if n.cluster == nil || !n.cluster.serving.TryReserve(need) {
		return nil, nil, &peer.Error{Code: peer.CodeUnavailable, Msg: fmt.Sprintf("mesh: no room for a reply of %d bytes (--max-peer-memory)", need)}
	}
	var once sync.Once
	release = func() { once.Do(func() { n.cluster.serving.Release(need) }) }
	items = make([]wire.FetchItem, len(req.IDs))
	// Values found in memory are copied into vals, back to back, so that
	// the reply sends runs of them with one write. vals is made at the
	// first value found: a fetch of samples read through (each a buffer of
	// its own) makes none.
	var vals *copyBuffer
	var misses []throughItem // items not in memory, to read through
	var missAt []int         // the index in the request of each of misses
	var keyBuf []byte        // the key of the item looked up; a miss keeps a copy
	var hit []policy.ID      // the items served from memory
	// Each sample is hinted to the store some reads before it is read
	// (hintKeysAhead), its key built in a buffer of its own.
	var aheadBuf []byte
	aheadKey := func(j int) []byte {
		if int(req.IDs[j]) >= ds.len {
			return nil
		}
		aheadBuf = samplekey.Append(aheadBuf[:0], ds.name, int(req.IDs[j]))
		return aheadBuf
	}
	for i, id := range req.IDs {
		n.hintKeysAhead(len(req.IDs), i, aheadKey)
		if int(id) >= ds.len {
			items[i].Err = "index out of range"
			continue
		}
		size := ds.manifest.Sizes.At(int(id))
		if !req.Warm {
			if room -= size; room < 0 {
				items[i].Err = "over the reply limit of one fetch"
				continue
			}
		}
		keyBuf = samplekey.Append(keyBuf[:0], ds.name, int(id))
		key := keyBuf
		it := &items[i]
		var held bool
		if req.Warm {
			held = n.store.View(key, func(v []byte, sum uint64) {
				if int64(len(v)) != size {
					it.Err = errSizeDiffers
					return
				}
				it.Found, it.Hit, it.Sum = true, true, sum
			})
		} else {
			// The value is copied into vals (or memory of its own where
			// vals has no room) and checked in the same pass
			// (store.CopyTo).
			var dst []byte
			sized, inVals := false, false
			sum, ok := n.store.CopyTo(key, func(vlen int) []byte {
				if sized = int64(vlen) == size; !sized {
					return nil
				}
				if vals == nil {
					vals = newCopyBuffer(int(need))
				}
				if dst, inVals = vals.reserve(vlen); !inVals {
					dst = nozero.Bytes(vlen)[:vlen]
				}
				return dst
			})
			held = ok
			switch {
			case !ok && inVals:
				vals.unreserve(len(dst)) // the copy failed its check: read it through
			case !ok:
			case !sized:
				it.Err = errSizeDiffers
			default:
				it.Found, it.Hit, it.Sum, it.Value = true, true, sum, dst
			}
		}
		if held {
			if it.Found {
				if hit == nil {
					hit = make([]policy.ID, 0, len(req.IDs)-i)
				}
				hit = append(hit, sampleID(ds, int(id)))
			}
			continue
		}
		if !req.MemoryOnly {
			misses = append(misses, throughItem{ds: ds, idx: int(id), key: slices.Clone(key)})
			missAt = append(missAt, i)
		}
	}
	// The policy hears of the values served from memory at once, before
	// the misses are read through (and admitted).
	if len(hit) > 0 {
		n.hits(hit...)
		ds.counters.Current().ServedPeers.Add(int64(len(hit)))
	}
	// The misses this node owns are read through, each co-owner asked for
	// its share at once (readThroughMany); any other (the asker's ring
	// differs from this node's) is read from the source, served and not
	// cached.
	var owned, stale []*throughItem
	for k := range misses {
		t := &misses[k]
		if owners := n.ownersView(ds, uint32(t.idx)); contains(owners, n.cfg.Name) {
			if contains(owners, from) {
				owners = without(owners, from)
			}
			t.owners = owners
			owned = append(owned, t)
		} else {
			stale = append(stale, t)
		}
	}
	n.readThroughMany(ctx, owned, !req.First)
	n.workers.Each(len(stale), n.cfg.SourceReads, func(k int) {
		t := stale[k]
		t.r.v, t.err = n.readSource(ds, t.idx)
	})
	for k := range misses {
		it, t := &items[missAt[k]], &misses[k]
		if t.err != nil {
			it.Err = t.err.Error()
			continue
		}
		v := t.r.v
		if int64(len(v)) != ds.manifest.Sizes.At(t.idx) {
			it.Err = errSizeDiffers
			continue
		}
		ds.counters.Current().ServedPeers.Add(1)
		it.Found, it.Sum = true, t.r.sum.of(v)
		if !req.Warm {
			it.Value = v
		}
	}
	// No socket settles another peer's reads once their reply is sent
	// (Backend.Settle): the policy hears of this fetch's at once.
	n.Settle()
	return items, release, nil
}

// copyBuffer is memory for values copied in whole, back to back, taken
// without being zeroed first (nozero), since the copies overwrite every
// byte of it: zeroing took a fifth of the CPU of a fetch reply of 256 x
// 100 KiB samples held in memory (BenchmarkAnswerFetch). It is taken at
// its full room at once and never moves, so each value's slice of it is
// the value's from the moment it is reserved.
type copyBuffer struct {
	b    []byte
	room int
}

// newCopyBuffer returns a buffer for n bytes of values.
func newCopyBuffer(n int) *copyBuffer {
	return &copyBuffer{b: nozero.Bytes(n), room: n}
}

// reserve takes the n bytes after the values before them, for a value
// about to be copied in whole, and returns them (their capacity theirs
// alone); or returns false, taking nothing, if they do not fit in the
// buffer's room.
func (c *copyBuffer) reserve(n int) (dst []byte, ok bool) {
	start := len(c.b)
	if start+n > c.room {
		return nil, false
	}
	c.b = c.b[:start+n]
	return c.b[start : start+n : start+n], true
}

// unreserve gives back the last n bytes reserved: a copy that failed its
// check.
func (c *copyBuffer) unreserve(n int) { c.b = c.b[:len(c.b)-n] }

// errSizeDiffers answers for a sample whose bytes here differ in length
// from the manifest: the caller would discard them.
const errSizeDiffers = "size differs from the manifest"

// prefetchSlice starts the read-ahead of a local rank's slice of a new
// order (see package readahead); calls for a slice already followed do
// nothing, and so does every call with the read-ahead off. Following a
// slice sorts it (and makes the read-ahead's buffer at the first): in
// the background, not in the rank's SHADE.ORDER.
func (n *Node) prefetchSlice(ds *datasetState, p *wire.PublishMsg, rank int) {
	if n.readAhead.On() {
		n.goBackground(func(context.Context) { n.readAhead.Follow(ds, p, rank) })
	}
}
