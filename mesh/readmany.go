package mesh

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/shade-mesh/shade/internal/workers"
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
		ask     []int
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
	workers.Each(len(reqs), elsewhereAtOnce, func(k int) { n.askElsewhere(ctx, ms, reqs[k]) })
	var rest []int
	for i := range late {
		rest = append(rest, i)
	}
	workers.Each(len(rest), maxFetchBatch, func(k int) {
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
	for _, i := range ask {
		m := ms[i]
		best := m.owners[0]
		for _, o := range m.owners[1:] {
			if loadOf(o) < loadOf(best) {
				best = o
			}
		}
		owned[best] = loadOf(best) + 1
		g := group{best, m.ds, len(m.owners) > 1}
		size := m.ds.manifest.Sizes[m.idx]
		r := open[g]
		if r == nil || len(r.ids) == maxFetchBatch || r.bytes+size > maxFetchBatchBytes {
			r = &elsewhereReq{owner: best, ds: m.ds, hedged: g.hedged}
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
			workers.Each(len(r.ids), maxFetchBatch, func(k int) {
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
	workers.Each(len(rest), maxFetchBatch, func(j int) {
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
