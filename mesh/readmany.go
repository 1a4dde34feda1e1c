package mesh

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shade-mesh/shade/mesh/hedge"
	"github.com/shade-mesh/shade/mesh/readahead"
)

// readElsewhere reads the misses of an MGET that this node does not own
// (readsThrough is false for each; each item's owners set), as
// readMissing would read each, but each owner asked for its share at
// once rather than each sample on its own: a request (and its hedge)
// per owner where the per-sample path cost a hedged read, its goroutine,
// contexts and timer a sample.
//
// A sample the read-ahead holds or is fetching is taken from there, once
// the requests for the others are out. Each other sample is asked of
// its least loaded owner (samples already asked of each, this MGET's
// included), in requests of at most maxFetchBatch samples and
// maxFetchBatchBytes. A request that has not answered within
// Node.mgetWait is hedged: its samples are asked one at a time of their
// other owners (Node.fetches takes those together), and the first try to
// get them all is kept. The hedge does not read the source: where the
// other owners fail, the request is waited for, as a single read waits
// for its last owner. Samples an owner did not have are asked of the
// others, then read from the source; the source is read for those no
// owner had once every owner was asked. Every item of ms has what its
// read got (mgetItem.missed) when readElsewhere returns.
func (n *Node) readElsewhere(ctx context.Context, ms []*mgetItem) {
	var (
		claims  []readahead.Claim
		claimed []int // indices into ms of claims
		ask     = make([]int, 0, len(ms))
	)
	for i := range ms {
		if c, ok := n.readAhead.Claim(ms[i].ds, uint32(ms[i].idx)); ok {
			claims, claimed = append(claims, c), append(claimed, i)
		} else {
			ask = append(ask, i)
		}
	}
	reqs := n.planElsewhere(ms, ask)
	// The claimed samples are waited for beside the requests; those the
	// read-ahead did not get in time are read after them, one at a time.
	late := make(chan int, len(claims))
	if len(claims) > 0 {
		go func() {
			defer close(late)
			for k, c := range claims {
				m := ms[claimed[k]]
				v, mem, ok := c.Wait(ctx)
				if !ok {
					late <- claimed[k]
					continue
				}
				tookAhead(m.ds, mem)
				m.missed(v, mem, nil)
			}
		}()
	} else {
		close(late)
	}
	n.workers.Each(len(reqs), elsewhereAtOnce, func(k int) { n.askElsewhere(ctx, ms, reqs[k]) })
	var rest []int
	for i := range late {
		rest = append(rest, i)
	}
	n.workers.Each(len(rest), maxFetchBatch, func(k int) {
		m := ms[rest[k]]
		m.missed(n.readFromOwners(ctx, m.ds, m.idx, m.owners))
	})
}

// elsewhereAtOnce bounds the requests one readElsewhere has in flight:
// an MGET's part (4 MiB of values, transport.cmdMGet) of samples of a
// few hundred bytes is thousands of samples, and its requests go a few at
// a time rather than all at once.
const elsewhereAtOnce = 8

// elsewhereReq is one request readElsewhere sends: samples of one
// dataset asked of one owner.
type elsewhereReq struct {
	owner  string
	ds     *datasetState
	items  []int    // indices into the misses readElsewhere reads
	ids    []uint32 // their samples, in the same order
	bytes  int64    // their sizes in the manifest, added up
	hedged bool     // every sample has another owner to hedge to
}

// planElsewhere groups the samples ms[ask] into requests: each to the
// least loaded of its owners, counting those this plan has given each,
// the ring's order breaking ties. A sample whose owner is alone goes in
// a request of its own kind, which is not hedged: the source is not
// raced against a slow owner.
func (n *Node) planElsewhere(ms []*mgetItem, ask []int) []*elsewhereReq {
	type group struct {
		owner  string
		ds     *datasetState
		hedged bool
	}
	var (
		reqs  []*elsewhereReq
		open  = make(map[group]*elsewhereReq)
		owned = make(map[string]int64)
	)
	n.inflightMu.Lock()
	defer n.inflightMu.Unlock()
	loadOf := func(o string) int64 {
		l, ok := owned[o]
		if !ok {
			l = n.inflight[o]
			owned[o] = l
		}
		return l
	}
	for k, i := range ask {
		m := ms[i]
		best := m.owners[0]
		for _, o := range m.owners[1:] {
			if loadOf(o) < loadOf(best) {
				best = o
			}
		}
		owned[best] = loadOf(best) + 1
		g := group{best, m.ds, len(m.owners) > 1}
		size := m.ds.manifest.Sizes.At(m.idx)
		r := open[g]
		if r == nil || len(r.ids) == maxFetchBatch || r.bytes+size > maxFetchBatchBytes {
			// Room for the rest of ask, up to a request's bound: one
			// allocation where appends would grow it several times.
			room := min(len(ask)-k, maxFetchBatch)
			r = &elsewhereReq{owner: best, ds: m.ds, hedged: g.hedged, items: make([]int, 0, room), ids: make([]uint32, 0, room)}
			open[g] = r
			reqs = append(reqs, r)
		}
		r.items, r.ids, r.bytes = append(r.items, i), append(r.ids, uint32(m.idx)), r.bytes+size
	}
	return reqs
}

// askElsewhere reads the samples of one request of readElsewhere into ms.
func (n *Node) askElsewhere(ctx context.Context, ms []*mgetItem, r *elsewhereReq) {
	type answer struct {
		v     []byte
		mem   bool
		found bool
	}
	tries := []func(context.Context) ([]answer, error){func(ctx context.Context) ([]answer, error) {
		defer n.asking(r.owner, len(r.ids))()
		start := time.Now()
		items, err := n.fetchFrom(ctx, r.owner, r.ds, r.ids, fetchMode{})
		if err != nil {
			return nil, err
		}
		n.mgetWait.Observe(time.Since(start))
		out := make([]answer, len(items))
		for k, it := range items {
			out[k] = answer{v: it.Value, mem: it.Hit, found: it.Found}
		}
		return out, nil
	}}
	// The hedge asks each sample's other owners, not the source: where
	// they all fail, it fails, and the request to r.owner is waited for.
	// What they answered is kept for when that request fails too.
	var alt []answer
	if r.hedged {
		alt = make([]answer, len(r.ids))
		tries = append(tries, func(ctx context.Context) ([]answer, error) {
			var failed atomic.Bool
			n.workers.Each(len(r.ids), maxFetchBatch, func(k int) {
				m := ms[r.items[k]]
				got, err := n.askOwners(ctx, m.ds, m.idx, without(m.owners, r.owner))
				if err != nil {
					failed.Store(true)
					return
				}
				alt[k] = answer{v: got.v, mem: got.mem, found: true}
			})
			if failed.Load() {
				return nil, errNotFound
			}
			return alt, nil
		})
	}
	answers, how, err := hedge.First(ctx, n.workers.Go, n.mgetWait.Get(), tries...)
	r.ds.counters.Current().Hedged.Add(int64(how.Hedged * len(r.ids)))
	if ctx.Err() != nil {
		for _, i := range r.items {
			ms[i].missed(nil, false, ctx.Err())
		}
		return
	}
	// Where every try failed, each has ended: the samples the hedge got
	// are kept, and the source is read for the others, every owner asked.
	// Where an owner answered that it did not have samples, the others
	// are asked for them, then the source.
	var rest []int // positions in r of samples still to read
	for k, i := range r.items {
		switch {
		case err != nil && alt != nil && alt[k].found:
			ms[i].missed(alt[k].v, alt[k].mem, nil)
		case err != nil || !answers[k].found:
			rest = append(rest, k)
		default:
			ms[i].missed(answers[k].v, answers[k].mem, nil)
		}
	}
	n.workers.Each(len(rest), maxFetchBatch, func(j int) {
		k := rest[j]
		m := ms[r.items[k]]
		owners := without(m.owners, r.owner)
		if err != nil {
			owners = nil // asked already, by the hedge (if any): the source
		}
		m.missed(n.readFromOwners(ctx, m.ds, m.idx, owners))
	})
}

// without returns owners but one, in their order; the slice is the
// caller's.
func without(owners []string, but string) []string {
	out := make([]string, 0, len(owners))
	for _, o := range owners {
		if o != but {
			out = append(out, o)
		}
	}
	return out
}

// throughItem is a sample readThroughMany reads through: one this node
// owns (owners holds its name) and does not hold. Its outcome (r, err)
// is set once, by the first of its reads to end (settle), and is the
// caller's once readThroughMany returns.
type throughItem struct {
	ds     *datasetState
	idx    int
	key    []byte
	owners []string // the sample's owners, in the ring's order: kept
	// asked and late belong to the goroutine that plans the item's next
	// read (readThroughMany hands items from one to the next whole).
	asked int           // co-owners asked so far (owners but this node, in order)
	late  []*throughReq // requests for it still out past their wait

	mu   sync.Mutex
	done bool // r and err are set
	r    read // what the read got, where err is nil
	err  error
}

// settle records what a read of the item got, unless another read of it
// ended first; it reports whether this one's was kept.
func (it *throughItem) settle(r read, err error) bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.done {
		return false
	}
	it.done, it.r, it.err = true, r, err
	return true
}

// settled reports whether a read of the item has ended.
func (it *throughItem) settled() bool {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.done
}

// readThroughMany reads samples this node owns through, as readThrough
// reads each (forward as there), but asks each co-owner for its share of
// them at once: the misses of an MGET, or of a fetch another peer sent
// this node, cost a request to each co-owner, not one a sample with its
// hedge, goroutines and timer. In a replicated mesh reading a cold
// dataset those per-sample asks were most of the requests between the
// peers (test/results/s3.md).
//
// The co-owners are asked in the ring's order, as readThrough asks them:
// one before this node (with forward) to read the sample through for
// it, the others for their memory. The samples whose next co-owner,
// dataset and mode are the same go in one request, of at most
// maxFetchBatch samples and maxFetchBatchBytes; a sample a co-owner
// answered is admitted here and settled. As soon as a request ends, or
// has gone throughWait without an answer, the samples it has not got go
// on to their next co-owner; a request past its wait goes on beside
// them, and the first answer for a sample is kept. A sample no co-owner
// had is read through (readThrough with asked): from the source, at most
// SourceReads at once, one source read for concurrent reads of a
// sample; but only once each request still out for it has ended or its
// co-owner is not heard from (coOwnerTry.whileAlive): a co-owner alive
// but slow may be reading the source itself. Every item is settled when
// readThroughMany returns, and no request of it is still out.
func (n *Node) readThroughMany(ctx context.Context, items []*throughItem, forward bool) {
	if len(items) == 0 {
		return // most fetches and MGETs have nothing to read through
	}
	// The requests past their wait (late) are given up once every item
	// is settled.
	ctx, cancel := context.WithCancel(ctx)
	var reads, late sync.WaitGroup
	defer late.Wait()
	defer cancel()
	sources := make(chan struct{}, n.cfg.SourceReads)
	source := func(it *throughItem) {
		defer func() { <-sources }()
		it.settle(n.readThrough(ctx, it.ds, it.idx, it.key, it.owners, forward, true))
	}
	var next func(items []*throughItem)
	next = func(items []*throughItem) {
		reqs, rest := n.planThrough(ctx, items, forward)
		// From here on each request's items are its own goroutine's.
		for _, r := range reqs {
			n.workers.GoIn(&reads, func() {
				n.askCoOwner(ctx, r, &late)
				next(r.items)
			})
		}
		for _, it := range rest {
			if len(it.late) > 0 {
				n.workers.GoIn(&reads, func() {
					for _, r := range it.late {
						<-r.settled
					}
					if it.settled() {
						return // a request still out answered it
					}
					if err := ctx.Err(); err != nil {
						it.settle(read{}, err)
						return
					}
					sources <- struct{}{}
					source(it)
				})
				continue
			}
			if err := ctx.Err(); err != nil {
				it.settle(read{}, err) // the caller gave up: no read for it alone
				continue
			}
			sources <- struct{}{}
			n.workers.GoIn(&reads, func() { source(it) })
		}
	}
	next(items)
	reads.Wait()
}

// throughReq is one request of readThroughMany: samples of one dataset
// asked of one co-owner in one mode.
type throughReq struct {
	co    string
	ds    *datasetState
	mode  fetchMode
	items []*throughItem
	ids   []uint32
	bytes int64
	// settled is closed, for a request past its wait, once it has ended
	// or its co-owner is not heard from.
	settled chan struct{}
}

// planThrough groups the items not settled that have a co-owner left to
// ask into requests to that co-owner (see readThroughMany); rest are the
// others not settled, to read from the source (all of them in a node
// outside a mesh, or once ctx has ended).
func (n *Node) planThrough(ctx context.Context, items []*throughItem, forward bool) (reqs []*throughReq, rest []*throughItem) {
	type group struct {
		co   string
		ds   *datasetState
		mode fetchMode
	}
	open := make(map[group]*throughReq)
	for _, it := range items {
		if it.settled() {
			continue
		}
		co, mode, ok := n.coOwner(it.owners, it.asked, forward)
		if !ok || n.cluster == nil || ctx.Err() != nil {
			rest = append(rest, it)
			continue
		}
		g := group{co, it.ds, mode}
		size := it.ds.manifest.Sizes.At(it.idx)
		r := open[g]
		if r == nil || len(r.ids) == maxFetchBatch || r.bytes+size > maxFetchBatchBytes {
			r = &throughReq{co: co, ds: it.ds, mode: mode}
			open[g] = r
			reqs = append(reqs, r)
		}
		r.items, r.ids, r.bytes = append(r.items, it), append(r.ids, uint32(it.idx)), r.bytes+size
	}
	return reqs, rest
}

// coOwner returns the k-th co-owner among owners (this node left out, in
// the ring's order) and how readThrough asks it: one before this node,
// with forward, to read the sample through (first), any other for its
// memory. ok is false where there are k co-owners or fewer.
func (n *Node) coOwner(owners []string, k int, forward bool) (co string, mode fetchMode, ok bool) {
	before := forward
	for _, o := range owners {
		if o == n.cfg.Name {
			before = false
			continue
		}
		if k == 0 {
			return o, fetchMode{memoryOnly: !before, first: before}, true
		}
		k--
	}
	return "", fetchMode{}, false
}

// askCoOwner sends one request of readThroughMany, on a goroutine of
// late, and returns when it ends or has gone throughWait without an
// answer, as readThrough waits for each of its tries. A sample the
// co-owner answered (from its memory, or read through by it) is admitted
// and settled, unless another read of it ended first. A request past its
// wait goes on, and r.settled closes once it has ended or its co-owner
// is not heard from (coOwnerTry.whileAlive): the samples' source reads
// wait for that.
func (n *Node) askCoOwner(ctx context.Context, r *throughReq, late *sync.WaitGroup) {
	t := newCoOwnerTry(n.cluster, r.co)
	done := n.asking(r.co, len(r.ids))
	start := time.Now()
	n.workers.GoIn(late, func() {
		defer done()
		defer close(t.ended)
		got, err := n.fetchFrom(ctx, r.co, r.ds, r.ids, r.mode)
		if err != nil {
			return
		}
		if r.mode.memoryOnly {
			// An answer from memory: what Node.fetchWait learns (a
			// co-owner asked to read through answers after its source
			// reads, which throughWait adds).
			n.fetchWait.Observe(time.Since(start))
		}
		for k, it := range r.items {
			if !got[k].Found {
				continue
			}
			// fetchFrom checked the value against its sum.
			v := got[k].Value
			if it.settle(read{v: v, mem: got[k].Hit || r.mode.memoryOnly, sum: knownSum{got[k].Sum, true}}, nil) {
				n.admit(sampleID(it.ds, it.idx), it.key, v, it.ds)
			}
		}
	})
	for _, it := range r.items {
		it.asked++
	}
	var past <-chan time.Time
	if wait := n.throughWait(r.ds); wait >= 0 { // less: never
		timer := time.NewTimer(wait)
		defer timer.Stop()
		past = timer.C
	}
	select {
	case <-t.ended:
		return
	case <-ctx.Done():
		return
	case <-past:
	}
	r.ds.counters.Current().Hedged.Add(int64(len(r.ids)))
	r.settled = make(chan struct{})
	for _, it := range r.items {
		it.late = append(it.late, r)
	}
	n.workers.GoIn(late, func() {
		defer close(r.settled)
		_ = t.whileAlive(ctx, n.cluster) // ctx's end: the source reads see it
	})
}
