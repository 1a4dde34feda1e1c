package mesh

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/policy"
	"github.com/shade-mesh/shade/store"
)

// readAhead keeps the samples that the ranks training on this node will
// read next in memory before they ask for them.
//
// When an order is installed, and when a rank asks for its slice of one
// (SHADE.ORDER), the node starts a cursor on the slice of each rank that
// trains on it. The rank's reads that miss the cache tell the cursor where
// the rank is (reads of resident samples need no help, and a run of them
// long enough to matter does not happen while the read-ahead is needed).
// A worker per cursor keeps the next Prefetch samples of the slice that
// are not resident in a buffer of their own, off-heap and bounded in bytes
// (PrefetchMemory): in batches from their owners over QUIC, or read
// through from the source with bounded parallelism. A read that finds its
// sample there takes the bytes and goes on as a read-through would: the
// policy decides on admission then, so the cache's hit ratio is the
// policy's own and the read just does not wait for the source. A read
// that finds its sample being fetched waits for that fetch rather than
// start another; a read that finds nothing reads as usual, so reads never
// wait for the read-ahead's queue.
//
// A cursor stops at the end of its slice, when its rank asks for a newer
// epoch, when a newer order of the dataset is installed, and when the node
// closes. Samples a cursor has passed by more than a margin are dropped
// from the buffer, read or not.
//
// The zero value is ready: maps and the buffer are made on first use.
// Lock order: an order book's lock, then readAhead.mu, then the stores'
// and a dataset's counters' locks.
type readAhead struct {
	fetched atomic.Int64 // samples put into the buffer
	unused  atomic.Int64 // samples dropped from it without being read

	mu      sync.Mutex
	init    bool
	buf     *store.Store // nil when it could not be made or the node closed
	entries map[policy.ID]*raEntry
	cursors map[cursorKey]*rankCursor
	bytes   int64         // charged bytes of entries, held or being fetched
	full    bool          // a worker found no room for its next entry
	changed chan struct{} // closed and replaced when cursors move or room frees
	workers sync.WaitGroup
}

type cursorKey struct {
	ds   *datasetState
	rank int
}

// raEntry is one sample in the buffer, or on its way there.
type raEntry struct {
	key    string
	charge int64
	uses   int           // cursor positions that hold it; under readAhead.mu
	ready  chan struct{} // closed when the fetch ended
	ok     bool          // the bytes are in the buffer; set before ready closes
	mem    bool          // they came from a node's memory, not the source
	taken  atomic.Bool
}

// rankCursor follows one local rank through its slice of one order.
type rankCursor struct {
	key    cursorKey
	gen    uint64
	epoch  int
	slice  []uint32
	where  []uint64 // id<<32 | position for every position, ascending
	pos    int      // one past the furthest position the rank was seen reading
	next   int      // the next position the worker looks at
	held   []int    // positions holding a use of an entry, ascending
	cancel context.CancelFunc
	done   bool
}

const (
	// raBehind is how far (in positions) a cursor keeps entries behind the
	// rank's position, and how far back a read still counts as the rank's:
	// the reads of one minibatch, and of the few a DataLoader's workers
	// have in flight, arrive in any order.
	raBehind = 256
	// raChunk is the most ids one fetch from an owner asks for.
	raChunk = 32
	// raBatchBytes bounds the sample bytes one fetch from an owner asks
	// for, so that a reply fits the frame buffers the peer transport keeps
	// for reuse (8 MiB); larger frames are grown afresh on both ends.
	raBatchBytes = 4 << 20
	// raRecheck is how often an idle worker looks for a newer order.
	raRecheck = 500 * time.Millisecond
)

func orderAfter(gen uint64, epoch int, ogen uint64, oepoch int) bool {
	if gen != ogen {
		return gen > ogen
	}
	return epoch > oepoch
}

// followOrder starts the read-ahead of rank's slice of order p, unless a
// cursor already follows that slice or a newer one. It never blocks on
// fetches.
func (n *Node) followOrder(ds *datasetState, p *wire.PublishMsg, rank int) {
	if n.cfg.Cluster.Prefetch <= 0 || p.Epoch < 0 || rank < 0 || rank >= len(p.Slices) || len(p.Slices[rank]) == 0 {
		return
	}
	ra := &n.readAhead
	ra.mu.Lock()
	defer ra.mu.Unlock()
	// Once the node is closing, the goroutine that releases the buffer
	// stops every cursor under this lock: start none after it.
	if n.ctx.Err() != nil || !n.initReadAheadLocked() {
		return
	}
	key := cursorKey{ds, rank}
	if c := ra.cursors[key]; c != nil && !orderAfter(p.Gen, p.Epoch, c.gen, c.epoch) {
		return
	}
	// Every cursor on an older order of this dataset is done: a new epoch
	// is published once every rank finished the last.
	for k, c := range ra.cursors {
		if k.ds == ds && orderAfter(p.Gen, p.Epoch, c.gen, c.epoch) {
			n.stopCursorLocked(c)
		}
	}
	slice := p.Slices[rank]
	c := &rankCursor{key: key, gen: p.Gen, epoch: p.Epoch, slice: slice, where: make([]uint64, len(slice))}
	for i, id := range slice {
		c.where[i] = uint64(id)<<32 | uint64(i)
	}
	slices.Sort(c.where)
	ctx, cancel := context.WithCancel(n.ctx)
	c.cancel = cancel
	ra.cursors[key] = c
	ra.workers.Add(1)
	n.goBackground(func(context.Context) {
		defer ra.workers.Done()
		defer cancel()
		n.runCursor(ctx, c)
	})
}

// followPublished starts the read-ahead of the slices of a newly
// installed order whose ranks train on this node, before they ask for
// them: between epochs the ranks evaluate and wait for each other, and
// the start of their next slice can be in memory when they begin. Called
// with the order book locked; it does not touch the book.
func (n *Node) followPublished(ds *datasetState, p *wire.PublishMsg) {
	for rank, node := range p.Ranks {
		if node == n.cfg.Name {
			n.followOrder(ds, p, rank)
		}
	}
}

// initReadAheadLocked makes the maps and the buffer on first use, and the
// goroutine that releases the buffer when the node closes. It reports
// whether the read-ahead can run.
func (n *Node) initReadAheadLocked() bool {
	ra := &n.readAhead
	if ra.init {
		return ra.buf != nil
	}
	ra.init = true
	if n.ctx.Err() != nil {
		return false
	}
	ra.entries = make(map[policy.ID]*raEntry)
	ra.cursors = make(map[cursorKey]*rankCursor)
	ra.changed = make(chan struct{})
	// Headers, alignment and fragmentation: an eighth more than the bytes
	// the entries are charged.
	limit := n.cfg.PrefetchMemory
	buf, err := store.New(store.Config{Capacity: limit + limit/8, Name: "shade-" + n.cfg.Name + "-readahead"})
	if err != nil {
		n.cfg.Logger.Warn().Err(err).Msg("no read-ahead buffer: prefetch off")
		return false
	}
	ra.buf = buf
	n.goBackground(func(ctx context.Context) {
		<-ctx.Done()
		ra.mu.Lock()
		for _, c := range ra.cursors {
			n.stopCursorLocked(c)
		}
		ra.mu.Unlock()
		ra.workers.Wait()
		ra.mu.Lock()
		ra.buf = nil
		ra.mu.Unlock()
		buf.Close()
	})
	return true
}

// wakeLocked tells idle workers to look again.
func (ra *readAhead) wakeLocked() {
	close(ra.changed)
	ra.changed = make(chan struct{})
}

// stopCursorLocked ends a cursor: its worker stops and its entries are
// released.
func (n *Node) stopCursorLocked(c *rankCursor) {
	ra := &n.readAhead
	if c.done {
		return
	}
	c.done = true
	c.cancel()
	n.releaseLocked(c, len(c.held))
	if ra.cursors[c.key] == c {
		delete(ra.cursors, c.key)
	}
	ra.wakeLocked()
}

// releaseLocked gives up the first k positions c holds, dropping entries
// no cursor holds any more.
func (n *Node) releaseLocked(c *rankCursor, k int) {
	ra := &n.readAhead
	for _, p := range c.held[:k] {
		id := sampleID(c.key.ds, int(c.slice[p]))
		e := ra.entries[id]
		if e == nil {
			continue
		}
		if e.uses--; e.uses > 0 {
			continue
		}
		delete(ra.entries, id)
		ra.bytes -= e.charge
		select {
		case <-e.ready:
			if e.ok {
				if ra.buf != nil {
					ra.buf.Delete([]byte(e.key))
				}
				if !e.taken.Load() {
					ra.unused.Add(1)
				}
			}
		default: // still being fetched: its fill sees it dropped
		}
	}
	c.held = c.held[k:]
	if k > 0 && ra.full {
		ra.full = false
		ra.wakeLocked() // a worker may be waiting for room
	}
}

// find returns the first position >= from at which c's slice holds id,
// or -1.
func (c *rankCursor) find(id uint32, from int) int {
	target := uint64(id)<<32 | uint64(max(from, 0))
	i, _ := slices.BinarySearch(c.where, target)
	if i < len(c.where) && uint32(c.where[i]>>32) == id {
		return int(uint32(c.where[i]))
	}
	return -1
}

// observeLocked moves the cursor of the local rank that is reading sample idx
// of ds, if any: the cursor whose position is nearest an occurrence of idx
// in its slice, within raBehind behind it and its window ahead.
func (n *Node) observeLocked(ds *datasetState, idx int) {
	ra := &n.readAhead
	if len(ra.cursors) == 0 {
		return
	}
	ahead := n.cfg.Cluster.Prefetch + raBehind
	var best *rankCursor
	bestPos, bestDist := -1, 0
	for k, c := range ra.cursors {
		if k.ds != ds {
			continue
		}
		p := c.find(uint32(idx), c.pos-raBehind)
		if p < 0 || p >= c.pos+ahead {
			continue
		}
		dist := max(p-c.pos, c.pos-p)
		if best == nil || dist < bestDist {
			best, bestPos, bestDist = c, p, dist
		}
	}
	if best == nil || bestPos < best.pos {
		return // a late read of a batch the cursor has passed
	}
	best.pos = bestPos + 1
	k := 0
	for k < len(best.held) && best.held[k] < best.pos-raBehind {
		k++
	}
	n.releaseLocked(best, k)
	// Wake the worker once a whole request's worth of the window is free,
	// not on every read: fetches go out in batches.
	if best.pos+n.cfg.Cluster.Prefetch-best.next >= raChunk || best.pos >= len(best.slice) {
		ra.wakeLocked()
	}
}

// takeReadAhead tells the read-ahead that sample idx of ds is being read
// (see observeLocked) and returns it from the buffer, with whether those
// bytes came from a node's memory. If the sample is being
// fetched it waits for that fetch (or ctx); if it is not there at all it
// returns at once. The bytes are the caller's.
func (n *Node) takeReadAhead(ctx context.Context, ds *datasetState, idx int) (v []byte, fromMemory, ok bool) {
	if n.cfg.Cluster.Prefetch <= 0 {
		return nil, false, false
	}
	ra := &n.readAhead
	ra.mu.Lock()
	n.observeLocked(ds, idx)
	e := ra.entries[sampleID(ds, idx)]
	buf := ra.buf
	ra.mu.Unlock()
	if e == nil || buf == nil {
		return nil, false, false
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, false, false
	}
	if !e.ok {
		return nil, false, false
	}
	// If the entry was dropped meanwhile, Get finds nothing, or the bytes
	// of a newer entry for the same sample: the same bytes.
	v, ok = buf.Get(nil, []byte(e.key))
	if ok {
		e.taken.Store(true)
	}
	return v, e.mem, ok
}

// runCursor fetches the window ahead of c until c stops.
func (n *Node) runCursor(ctx context.Context, c *rankCursor) {
	ra := &n.readAhead
	slots := make(chan struct{}, n.cfg.SourceReads)
	var fetches sync.WaitGroup
	defer fetches.Wait()
	for ctx.Err() == nil {
		// The book's lock is taken before the read-ahead's when an order
		// is installed (followPublished): never the other way round.
		g, e, _ := c.key.ds.book.Head()
		ra.mu.Lock()
		if orderAfter(g, e, c.gen, c.epoch) {
			n.stopCursorLocked(c)
		}
		if c.done {
			ra.mu.Unlock()
			return
		}
		batch := n.pickLocked(c)
		changed := ra.changed
		ra.mu.Unlock()
		if len(batch) == 0 {
			t := time.NewTimer(raRecheck)
			select {
			case <-ctx.Done():
			case <-changed:
			case <-t.C:
				// The rank read its whole slice and nothing moved since:
				// the last minibatch's reads are in.
				ra.mu.Lock()
				if c.pos >= len(c.slice) {
					n.stopCursorLocked(c)
				}
				ra.mu.Unlock()
			}
			t.Stop()
			continue
		}
		n.fetchAhead(ctx, c.key.ds, batch, slots, &fetches)
	}
}

// pickLocked takes the next positions of c's window whose samples are
// neither resident nor in the buffer: new entries, at most raChunk, within
// the buffer's byte limit. Positions whose sample is already in the buffer
// hold it for c too.
func (n *Node) pickLocked(c *rankCursor) []pending {
	ra := &n.readAhead
	ds := c.key.ds
	var batch []pending
	end := min(len(c.slice), c.pos+n.cfg.Cluster.Prefetch)
	for p := max(c.next, c.pos); p < end && len(batch) < raChunk; p++ {
		id := c.slice[p]
		key := keyOfSample(ds, id)
		sid := sampleID(ds, int(id))
		e := ra.entries[sid]
		if e == nil {
			if n.store.Has([]byte(key)) {
				c.next = p + 1 // resident: the read will hit
				continue
			}
			charge := ra.buf.Charge(len(key), int(ds.manifest.Sizes[id]))
			if ra.bytes+charge > n.cfg.PrefetchMemory {
				ra.full = true
				break // full: wait until entries are read and passed
			}
			e = &raEntry{key: key, charge: charge, ready: make(chan struct{})}
			ra.entries[sid] = e
			ra.bytes += charge
			batch = append(batch, pending{id, e})
		}
		e.uses++
		c.held = append(c.held, p)
		c.next = p + 1
	}
	return batch
}

type pending struct {
	id uint32
	e  *raEntry
}

// fetchAhead starts the fetches of a batch, each in a slot: samples this
// node owns from a co-owner's memory (one request) or else the source,
// one read a slot; the others from their least loaded owner, a request of
// up to raChunk ids a slot. It returns once every fetch has started.
func (n *Node) fetchAhead(ctx context.Context, ds *datasetState, batch []pending, slots chan struct{}, fetches *sync.WaitGroup) {
	var own []pending
	byOwner := make(map[string][]pending)
	for _, pe := range batch {
		owners := n.owners(ds, pe.id)
		if n.cluster == nil || len(owners) == 0 || contains(owners, n.cfg.Name) {
			own = append(own, pe)
			continue
		}
		o := n.preferred(owners)[0]
		byOwner[o] = append(byOwner[o], pe)
	}
	acquire := func() bool {
		select {
		case slots <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for owner, list := range byOwner {
		for len(list) > 0 {
			k, size := 0, int64(0)
			for k < len(list) && (k == 0 || size+ds.manifest.Sizes[list[k].id] <= raBatchBytes) {
				size += ds.manifest.Sizes[list[k].id]
				k++
			}
			part := list[:k]
			list = list[k:]
			if !acquire() {
				n.failAhead(part)
				continue
			}
			fetches.Go(func() {
				defer func() { <-slots }()
				n.fetchFromOwner(ctx, ds, owner, part)
			})
		}
	}
	if len(own) == 0 {
		return
	}
	own = n.fetchFromCoOwners(ctx, ds, own)
	for _, pe := range own {
		if !acquire() {
			n.failAhead([]pending{pe})
			continue
		}
		fetches.Go(func() {
			defer func() { <-slots }()
			v, err := n.readSource(ds, int(pe.id))
			n.fillAhead(pe.e, v, false, err == nil)
		})
	}
}

// fetchFromOwner reads samples this node does not own from one owner (its
// memory, else its read-through) and puts them into the buffer.
func (n *Node) fetchFromOwner(ctx context.Context, ds *datasetState, owner string, part []pending) {
	ids := make([]uint32, len(part))
	for i, pe := range part {
		ids[i] = pe.id
	}
	items, err := n.fetchFrom(ctx, owner, ds, ids, false)
	for i, pe := range part {
		if err != nil || !items[i].Found {
			n.fillAhead(pe.e, nil, false, false)
			continue
		}
		n.fillAhead(pe.e, items[i].Value, items[i].Hit, true)
	}
}

// fetchFromCoOwners asks each co-owner, one request per co-owner, for the
// owned samples it holds in memory, puts those into the buffer and returns
// the rest.
func (n *Node) fetchFromCoOwners(ctx context.Context, ds *datasetState, own []pending) []pending {
	if n.cluster == nil {
		return own
	}
	byCo := make(map[string][]pending)
	var rest []pending
	for _, pe := range own {
		co := ""
		for _, o := range n.owners(ds, pe.id) {
			if o != n.cfg.Name {
				co = o
				break
			}
		}
		if co == "" {
			rest = append(rest, pe)
			continue
		}
		byCo[co] = append(byCo[co], pe)
	}
	for co, list := range byCo {
		ids := make([]uint32, len(list))
		for i, pe := range list {
			ids[i] = pe.id
		}
		items, err := n.fetchFrom(ctx, co, ds, ids, true)
		for i, pe := range list {
			if err == nil && items[i].Found {
				n.fillAhead(pe.e, items[i].Value, true, true)
				continue
			}
			rest = append(rest, pe)
		}
	}
	return rest
}

func (n *Node) failAhead(part []pending) {
	for _, pe := range part {
		n.fillAhead(pe.e, nil, false, false)
	}
}

// fillAhead ends an entry's fetch: the bytes go into the buffer if the
// entry is still held, and readers waiting on it are released.
func (n *Node) fillAhead(e *raEntry, v []byte, mem, ok bool) {
	ra := &n.readAhead
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if ok && e.uses > 0 && ra.buf != nil {
		if err := ra.buf.Put([]byte(e.key), v); err == nil {
			e.ok, e.mem = true, mem
			ra.fetched.Add(1)
		}
	}
	close(e.ready)
}

// stats returns the read-ahead's counters and the bytes it holds now.
func (ra *readAhead) stats() ReadAheadStats {
	ra.mu.Lock()
	b := ra.bytes
	ra.mu.Unlock()
	return ReadAheadStats{Fetched: ra.fetched.Load(), Unused: ra.unused.Load(), Bytes: b}
}
