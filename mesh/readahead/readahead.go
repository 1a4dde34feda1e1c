// Package readahead keeps the samples that the ranks training on a node
// will read next in memory before they ask for them.
//
// When an order is installed, and when a rank asks for its slice of one
// (SHADE.ORDER), the node starts a cursor on the slice of each rank that
// trains on it (Follow, FollowPublished). The rank's reads that miss the
// cache tell the cursor where the rank is (Take; reads of resident samples
// need no help, and a run of them long enough to matter does not happen
// while the read-ahead is needed). A worker per cursor keeps the next
// Prefetch samples of the slice that are not resident in a buffer of
// their own, off-heap and bounded in bytes (Memory): in batches from
// their owners, or read through from the source with bounded parallelism.
// A read that finds its sample there takes the bytes and goes on as a
// read-through would: the policy decides on admission then, so the
// cache's hit ratio is the policy's own and the read just does not wait
// for the source. A read that finds its sample being fetched waits for
// that fetch rather than start another; a read that finds nothing reads
// as usual, so reads never wait for the read-ahead's queue.
//
// A cursor stops at the end of its slice, when its rank asks for a newer
// epoch, when a newer order of the dataset is installed, and when the
// read-ahead closes. Samples a cursor has passed by more than a margin are
// dropped from the buffer, read or not.
//
// The package owns its cursors, workers and buffer; it reaches owners,
// the source and the cache only through Host and Dataset, which the node
// implements. It imports mesh/wire, mesh/hedge, store (for its buffer) and
// protocol/shm (for the checksum of what it puts there), and must not
// import mesh, policy, the ring or any network package.
package readahead

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/mesh/hedge"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/protocol/shm"
	"github.com/shade-mesh/shade/store"
)

// Dataset is one dataset whose orders the read-ahead follows. Values are
// compared with ==: pass the same one for the same dataset.
type Dataset interface {
	// Key is the cache key of sample id.
	Key(id uint32) string
	// Size is the size in bytes of sample id.
	Size(id uint32) int64
	// Head is the generation of the newest order of job (a name of the
	// dataset's job, as in wire.PublishMsg.Job) the node holds and the
	// epoch its ranks are training: a cursor on an older epoch is done.
	// It may take the order book's lock (see the lock order on ReadAhead).
	Head(job string) (gen uint64, epoch int)
}

// Host is what the read-ahead needs of its node. Its methods are called
// concurrently from the workers, without the read-ahead's lock.
type Host interface {
	// Resident reports whether the node's cache holds key.
	Resident(key []byte) bool
	// Owners lists the owners of sample id; it includes the node itself
	// for a sample it owns, and only the node where there is no mesh.
	Owners(ds Dataset, id uint32) []string
	// Preferred orders owners, the least loaded first.
	Preferred(owners []string) []string
	// Fetch asks owner for samples ids (from its memory only if
	// memoryOnly), one item per id, in order.
	Fetch(ctx context.Context, owner string, ds Dataset, ids []uint32, memoryOnly bool) ([]wire.FetchItem, error)
	// ReadSource reads sample id from the dataset's source; the bytes are
	// the caller's.
	ReadSource(ds Dataset, id uint32) ([]byte, error)
}

// Config sets up a read-ahead.
type Config struct {
	// Self is the node's name, as Owners names it.
	Self string
	// Prefetch is how many positions ahead of its rank a cursor keeps;
	// zero or less turns the read-ahead off.
	Prefetch int
	// Memory bounds the bytes the buffer's entries are charged.
	Memory int64
	// SourceReads bounds the fetches one cursor has in flight.
	SourceReads int
	// BufferName names the buffer's off-heap memory.
	BufferName string
	// HedgeAfter bounds how long a read waits for a sample whose fetch is
	// under way (Take), from when the fetch began: past it, the read
	// gives up on the fetch and reads the sample itself. 0 learns it from
	// how long the read-ahead's fetches take (hedge.Delay: their 99th
	// percentile, 10 ms to 500 ms); negative waits for the fetch.
	HedgeAfter time.Duration
	Logger     zerolog.Logger
}

// Stats are the read-ahead's counters.
type Stats struct {
	Fetched int64 // samples put into the buffer
	Unused  int64 // of those, dropped without being read
	Bytes   int64 // bytes held or being fetched now
	GaveUp  int64 // reads that gave up on a fetch past Config.HedgeAfter
}

// ReadAhead follows the local ranks' slices of the published orders. Its
// methods are safe for concurrent use; Close stops its workers and waits
// for them.
//
// Lock order: an order book's lock, then ReadAhead.mu, then the stores'
// and a dataset's counters' locks.
type ReadAhead struct {
	cfg    Config
	host   Host
	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	fetched atomic.Int64 // samples put into the buffer
	unused  atomic.Int64 // samples dropped from it without being read
	gaveUp  atomic.Int64 // reads that did not wait for a fetch past wait
	// wait is how long a read waits for a fetch under way (Take),
	// learned from the fetches' times (fill).
	wait hedge.Delay

	// mu guards every field below, and the uses of every entry.
	mu      sync.Mutex
	init    bool
	closed  bool
	buf     *store.Store // nil when it could not be made or the read-ahead closed
	entries map[entryKey]*entry
	cursors map[cursorKey]*rankCursor
	bytes   int64         // charged bytes of entries, held or being fetched
	full    bool          // a worker found no room for its next entry
	changed chan struct{} // closed and replaced when cursors move or room frees
	workers sync.WaitGroup
}

// New returns a read-ahead that makes its buffer on first use.
func New(cfg Config, host Host) *ReadAhead {
	r := &ReadAhead{cfg: cfg, host: host}
	r.wait.Fixed = cfg.HedgeAfter
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

type cursorKey struct {
	ds   Dataset
	job  string
	rank int
}

type entryKey struct {
	ds Dataset
	id uint32
}

// entry is one sample in the buffer, or on its way there.
type entry struct {
	key    string
	charge int64
	uses   int           // cursor positions that hold it; under ReadAhead.mu
	ready  chan struct{} // closed when the fetch ended
	began  time.Time     // when the entry was made and its fetch queued
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
	// Behind is how far (in positions) a cursor keeps entries behind the
	// rank's position, and how far back a read still counts as the rank's:
	// the reads of one minibatch, and of the few a DataLoader's workers
	// have in flight, arrive in any order.
	Behind = 256
	// Chunk is the most ids one fetch from an owner asks for.
	Chunk = 32
	// batchBytes bounds the sample bytes one fetch from an owner asks
	// for, so that a reply fits the frame buffers the peer transport keeps
	// for reuse (8 MiB); larger frames are grown afresh on both ends.
	batchBytes = 4 << 20
	// recheck is how often an idle worker looks for a newer order.
	recheck = 500 * time.Millisecond
)

func orderAfter(gen uint64, epoch int, ogen uint64, oepoch int) bool {
	if gen != ogen {
		return gen > ogen
	}
	return epoch > oepoch
}

// On reports whether the read-ahead reads ahead at all (Config.Prefetch
// above 0): off, Follow and FollowPublished do nothing.
func (r *ReadAhead) On() bool { return r.cfg.Prefetch > 0 }

// Follow starts the read-ahead of rank's slice of order p of ds, unless a
// cursor already follows that slice or a newer one. It never blocks on
// fetches.
func (r *ReadAhead) Follow(ds Dataset, p *wire.PublishMsg, rank int) {
	if r.cfg.Prefetch <= 0 || p.Epoch < 0 || rank < 0 || rank >= len(p.Slices) || len(p.Slices[rank]) == 0 {
		return
	}
	key := cursorKey{ds, p.Job, rank}
	// The slice's places are sorted by sample before the lock is taken:
	// every read of a sample not cached claims it under the lock (Claim),
	// and waited for the sort (of 160,000 places, 20 ms and more). A
	// slice followed already (FollowPublished, then the rank's own ask)
	// is not sorted again.
	r.mu.Lock()
	followed := r.closed || r.followsLocked(key, p)
	r.mu.Unlock()
	if followed {
		return
	}
	slice := p.Slices[rank]
	where := sortedPlaces(slice)
	r.mu.Lock()
	defer r.mu.Unlock()
	// Once the read-ahead is closing, Close stops every cursor under this
	// lock: start none after it.
	if r.closed || !r.initLocked() || r.followsLocked(key, p) {
		return
	}
	// Every cursor on an order this dataset's ranks no longer train is
	// done: a new epoch is published once every rank finished the last
	// (or, with orders published ahead, the one before it).
	for k, c := range r.cursors {
		if k.ds == ds && k.job == p.Job && orderAfter(p.Gen, p.TrainingEpoch(), c.gen, c.epoch) {
			r.stopCursorLocked(c)
		}
	}
	c := &rankCursor{key: key, gen: p.Gen, epoch: p.Epoch, slice: slice, where: where}
	ctx, cancel := context.WithCancel(r.ctx)
	c.cancel = cancel
	r.cursors[key] = c
	r.workers.Go(func() {
		defer cancel()
		r.runCursor(ctx, c)
	})
}

// followsLocked reports whether a cursor follows the slice of key in
// order p or a newer one.
func (r *ReadAhead) followsLocked(key cursorKey, p *wire.PublishMsg) bool {
	c := r.cursors[key]
	return c != nil && !orderAfter(p.Gen, p.Epoch, c.gen, c.epoch)
}

// sortedPlaces returns id<<32 | i for each place i of slice, ascending (a
// rankCursor's where): a radix sort of the ids, a byte at a time from the
// lowest, each pass stable, so that the places of an id stay in their
// order. A pass over a byte that every id shares is skipped.
func sortedPlaces(slice []uint32) []uint64 {
	a, b := make([]uint64, len(slice)), make([]uint64, len(slice))
	for i, id := range slice {
		a[i] = uint64(id)<<32 | uint64(i)
	}
	var count [256]int
	for shift := 32; shift < 64; shift += 8 {
		count = [256]int{}
		for _, v := range a {
			count[byte(v>>shift)]++
		}
		if len(a) == 0 || count[byte(a[0]>>shift)] == len(a) {
			continue
		}
		sum := 0
		for d, n := range count {
			count[d] = sum
			sum += n
		}
		for _, v := range a {
			d := byte(v >> shift)
			b[count[d]] = v
			count[d]++
		}
		a, b = b, a
	}
	return a
}

// FollowPublished starts the read-ahead of the slices of a newly
// installed order whose ranks train on this node, before they ask for
// them: between epochs the ranks evaluate and wait for each other, and
// the start of their next slice can be in memory when they begin. It may
// be called with the order book locked; it does not touch the book.
func (r *ReadAhead) FollowPublished(ds Dataset, p *wire.PublishMsg) {
	for rank, node := range p.Ranks {
		if node == r.cfg.Self {
			r.Follow(ds, p, rank)
		}
	}
}

// initLocked makes the maps and the buffer on first use. It reports
// whether the read-ahead can run.
func (r *ReadAhead) initLocked() bool {
	if r.init {
		return r.buf != nil
	}
	r.init = true
	r.entries = make(map[entryKey]*entry)
	r.cursors = make(map[cursorKey]*rankCursor)
	r.changed = make(chan struct{})
	// Headers, alignment and fragmentation: an eighth more than the bytes
	// the entries are charged.
	limit := r.cfg.Memory
	buf, err := store.New(store.Config{Capacity: limit + limit/8, Name: r.cfg.BufferName})
	if err != nil {
		r.cfg.Logger.Warn().Err(err).Msg("no read-ahead buffer: prefetch off")
		return false
	}
	r.buf = buf
	return true
}

// Close stops every cursor, waits for the workers and releases the
// buffer. Follow starts nothing after it.
func (r *ReadAhead) Close() {
	r.cancel()
	r.mu.Lock()
	r.closed = true
	for _, c := range r.cursors {
		r.stopCursorLocked(c)
	}
	r.mu.Unlock()
	r.workers.Wait()
	r.mu.Lock()
	buf := r.buf
	r.buf = nil
	r.mu.Unlock()
	if buf != nil {
		buf.Close()
	}
}

// wakeLocked tells idle workers to look again.
func (r *ReadAhead) wakeLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// stopCursorLocked ends a cursor: its worker stops and its entries are
// released.
func (r *ReadAhead) stopCursorLocked(c *rankCursor) {
	if c.done {
		return
	}
	c.done = true
	c.cancel()
	r.releaseLocked(c, len(c.held))
	if r.cursors[c.key] == c {
		delete(r.cursors, c.key)
	}
	r.wakeLocked()
}

// releaseLocked gives up the first k positions c holds, dropping entries
// no cursor holds any more.
func (r *ReadAhead) releaseLocked(c *rankCursor, k int) {
	for _, p := range c.held[:k] {
		id := entryKey{c.key.ds, c.slice[p]}
		e := r.entries[id]
		if e == nil {
			continue
		}
		if e.uses--; e.uses > 0 {
			continue
		}
		delete(r.entries, id)
		r.bytes -= e.charge
		select {
		case <-e.ready:
			if e.ok {
				if r.buf != nil {
					r.buf.Delete([]byte(e.key))
				}
				if !e.taken.Load() {
					r.unused.Add(1)
				}
			}
		default: // still being fetched: its fill sees it dropped
		}
	}
	c.held = c.held[k:]
	if k > 0 && r.full {
		r.full = false
		r.wakeLocked() // a worker may be waiting for room
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

// observeLocked moves the cursor of the local rank that is reading sample
// id of ds, if any: the cursor whose position is nearest an occurrence of
// id in its slice, within Behind behind it and its window ahead.
func (r *ReadAhead) observeLocked(ds Dataset, id uint32) {
	if len(r.cursors) == 0 {
		return
	}
	ahead := r.cfg.Prefetch + Behind
	var best *rankCursor
	bestPos, bestDist := -1, 0
	for k, c := range r.cursors {
		if k.ds != ds {
			continue
		}
		p := c.find(id, c.pos-Behind)
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
	for k < len(best.held) && best.held[k] < best.pos-Behind {
		k++
	}
	r.releaseLocked(best, k)
	// Wake the worker once a whole request's worth of the window is free,
	// not on every read: fetches go out in batches.
	if best.pos+r.cfg.Prefetch-best.next >= Chunk || best.pos >= len(best.slice) {
		r.wakeLocked()
	}
}

// Take tells the read-ahead that sample id of ds is being read and
// returns it from the buffer, with whether those bytes came from a node's
// memory. If the sample is being fetched it waits for that fetch, or ctx,
// until the fetch has run Config.HedgeAfter: then it gives up on it, and
// the caller reads the sample itself (the fetch goes on). If the sample
// is not there at all it returns at once. The bytes are the caller's.
// Take is Claim, then the Claim's Wait.
func (r *ReadAhead) Take(ctx context.Context, ds Dataset, id uint32) (v []byte, fromMemory, ok bool) {
	c, ok := r.Claim(ds, id)
	if !ok {
		return nil, false, false
	}
	return c.Wait(ctx)
}

// Claim tells the read-ahead that sample id of ds is being read, as Take
// does, without waiting: ok is false where the read-ahead neither holds
// the sample nor is fetching it, and the caller reads it itself at once;
// otherwise the Claim's Wait takes it. A reader of many samples (an MGET)
// claims them all, reads at once those the read-ahead does not have, and
// only then waits for the rest.
func (r *ReadAhead) Claim(ds Dataset, id uint32) (c Claim, ok bool) {
	if r.cfg.Prefetch <= 0 {
		return Claim{}, false
	}
	r.mu.Lock()
	r.observeLocked(ds, id)
	e := r.entries[entryKey{ds, id}]
	buf := r.buf
	r.mu.Unlock()
	if e == nil || buf == nil {
		return Claim{}, false
	}
	return Claim{r: r, e: e, buf: buf}, true
}

// Claim is a sample the read-ahead holds or is fetching, claimed by a
// read (ReadAhead.Claim). The zero value is no sample.
type Claim struct {
	r   *ReadAhead
	e   *entry
	buf *store.Store
}

// Wait returns the claimed sample as Take does: it waits for its fetch,
// or ctx, until the fetch has run Config.HedgeAfter; ok is false where
// the fetch failed or was given up, and the caller reads the sample
// itself. The bytes are the caller's.
func (c Claim) Wait(ctx context.Context) (v []byte, fromMemory, ok bool) {
	r, e := c.r, c.e
	if e == nil {
		return nil, false, false
	}
	var giveUp <-chan time.Time
	if d := r.wait.Get(); d >= 0 && !isClosed(e.ready) { // most reads find the fetch done: no timer
		t := time.NewTimer(time.Until(e.began.Add(d)))
		defer t.Stop()
		giveUp = t.C
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, false, false
	case <-giveUp:
		if !isClosed(e.ready) { // both at once: take it
			r.gaveUp.Add(1)
			return nil, false, false
		}
	}
	if !e.ok {
		return nil, false, false
	}
	// If the entry was dropped meanwhile, Get finds nothing, or the bytes
	// of a newer entry for the same sample: the same bytes.
	v, ok = c.buf.Get(nil, []byte(e.key))
	if ok {
		e.taken.Store(true)
	}
	return v, e.mem, ok
}

// runCursor fetches the window ahead of c until c stops.
func (r *ReadAhead) runCursor(ctx context.Context, c *rankCursor) {
	slots := make(chan struct{}, r.cfg.SourceReads)
	var fetches sync.WaitGroup
	defer fetches.Wait()
	for ctx.Err() == nil {
		// The book's lock is taken before the read-ahead's when an order
		// is installed (FollowPublished): never the other way round.
		g, e := c.key.ds.Head(c.key.job)
		r.mu.Lock()
		if orderAfter(g, e, c.gen, c.epoch) {
			r.stopCursorLocked(c)
		}
		if c.done {
			r.mu.Unlock()
			return
		}
		batch := r.pickLocked(c)
		changed := r.changed
		r.mu.Unlock()
		if len(batch) == 0 {
			t := time.NewTimer(recheck)
			select {
			case <-ctx.Done():
			case <-changed:
			case <-t.C:
				// The rank read its whole slice and nothing moved since:
				// the last minibatch's reads are in.
				r.mu.Lock()
				if c.pos >= len(c.slice) {
					r.stopCursorLocked(c)
				}
				r.mu.Unlock()
			}
			t.Stop()
			continue
		}
		r.fetchAhead(ctx, c.key.ds, batch, slots, &fetches)
	}
}

// pickLocked takes the next positions of c's window whose samples are
// neither resident nor in the buffer: new entries, at most Chunk, within
// the buffer's byte limit. Positions whose sample is already in the buffer
// hold it for c too.
func (r *ReadAhead) pickLocked(c *rankCursor) []pending {
	ds := c.key.ds
	var batch []pending
	end := min(len(c.slice), c.pos+r.cfg.Prefetch)
	for p := max(c.next, c.pos); p < end && len(batch) < Chunk; p++ {
		id := c.slice[p]
		key := ds.Key(id)
		eid := entryKey{ds, id}
		e := r.entries[eid]
		if e == nil {
			if r.host.Resident([]byte(key)) {
				c.next = p + 1 // resident: the read will hit
				continue
			}
			charge := r.buf.Charge(len(key), int(ds.Size(id)))
			if r.bytes+charge > r.cfg.Memory {
				r.full = true
				break // full: wait until entries are read and passed
			}
			e = &entry{key: key, charge: charge, ready: make(chan struct{}), began: time.Now()}
			r.entries[eid] = e
			r.bytes += charge
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
	e  *entry
}

// fetchAhead starts the fetches of a batch, each in a slot: samples this
// node owns from a co-owner's memory (one request) or else the source,
// one read a slot; the others from their least loaded owner, a request of
// up to Chunk ids a slot. It returns once every fetch has started.
func (r *ReadAhead) fetchAhead(ctx context.Context, ds Dataset, batch []pending, slots chan struct{}, fetches *sync.WaitGroup) {
	var own []pending
	byOwner := make(map[string][]pending)
	for _, pe := range batch {
		owners := r.host.Owners(ds, pe.id)
		if len(owners) == 0 || slices.Contains(owners, r.cfg.Self) {
			own = append(own, pe)
			continue
		}
		o := r.host.Preferred(owners)[0]
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
			for k < len(list) && (k == 0 || size+ds.Size(list[k].id) <= batchBytes) {
				size += ds.Size(list[k].id)
				k++
			}
			part := list[:k]
			list = list[k:]
			if !acquire() {
				r.fail(part)
				continue
			}
			fetches.Go(func() {
				defer func() { <-slots }()
				r.fetchFromOwner(ctx, ds, owner, part)
			})
		}
	}
	if len(own) == 0 {
		return
	}
	own = r.fetchFromCoOwners(ctx, ds, own)
	for _, pe := range own {
		if !acquire() {
			r.fail([]pending{pe})
			continue
		}
		fetches.Go(func() {
			defer func() { <-slots }()
			v, err := r.host.ReadSource(ds, pe.id)
			r.fill(pe.e, v, false, err == nil)
		})
	}
}

// fetchFromOwner reads samples this node does not own from one owner (its
// memory, else its read-through) and puts them into the buffer.
func (r *ReadAhead) fetchFromOwner(ctx context.Context, ds Dataset, owner string, part []pending) {
	ids := make([]uint32, len(part))
	for i, pe := range part {
		ids[i] = pe.id
	}
	items, err := r.host.Fetch(ctx, owner, ds, ids, false)
	for i, pe := range part {
		if err != nil || !items[i].Found {
			r.fill(pe.e, nil, false, false)
			continue
		}
		r.fill(pe.e, items[i].Value, items[i].Hit, true)
	}
}

// fetchFromCoOwners asks each co-owner, one request per co-owner, for the
// owned samples it holds in memory, puts those into the buffer and returns
// the rest.
func (r *ReadAhead) fetchFromCoOwners(ctx context.Context, ds Dataset, own []pending) []pending {
	byCo := make(map[string][]pending)
	var rest []pending
	for _, pe := range own {
		co := ""
		for _, o := range r.host.Owners(ds, pe.id) {
			if o != r.cfg.Self {
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
		items, err := r.host.Fetch(ctx, co, ds, ids, true)
		for i, pe := range list {
			if err == nil && items[i].Found {
				r.fill(pe.e, items[i].Value, true, true)
				continue
			}
			rest = append(rest, pe)
		}
	}
	return rest
}

func (r *ReadAhead) fail(part []pending) {
	for _, pe := range part {
		r.fill(pe.e, nil, false, false)
	}
}

// fill ends an entry's fetch: the bytes go into the buffer if the entry
// is still held, and readers waiting on it are released. The room is
// reserved under mu, and the bytes are copied in and their checksum
// worked out without it (store.Reserve), so that Take, the cursors' moves
// and the other fills do not wait for a sample's copy. An entry released
// meanwhile is abandoned at the end; a newer entry of the same sample
// (released and picked again while this fetch ran) is the one whose
// reservation holds: the store removed this one's when it reserved again.
func (r *ReadAhead) fill(e *entry, v []byte, mem, ok bool) {
	if ok {
		r.wait.Observe(time.Since(e.began))
	}
	var res store.Reservation
	reserved := false
	r.mu.Lock()
	if ok && e.uses > 0 && r.buf != nil {
		var err error
		res, err = r.buf.Reserve([]byte(e.key), len(v))
		reserved = err == nil
	}
	if !reserved {
		close(e.ready)
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()

	sum := shm.Copy(res.Value, v)

	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case e.uses == 0 || r.buf == nil:
		res.Abandon()
	case res.Commit(sum):
		e.ok, e.mem = true, mem
		r.fetched.Add(1)
	}
	close(e.ready)
}

// Stats returns the read-ahead's counters and the bytes it holds now.
func (r *ReadAhead) Stats() Stats {
	r.mu.Lock()
	b := r.bytes
	r.mu.Unlock()
	return Stats{Fetched: r.fetched.Load(), Unused: r.unused.Load(), Bytes: b, GaveUp: r.gaveUp.Load()}
}

// Cursor describes the cursor that follows rank of job of ds, if any,
// for tests and diagnostics: the position after the furthest the rank was
// seen reading, the next position the worker looks at, and the epoch
// followed.
func (r *ReadAhead) Cursor(ds Dataset, job string, rank int) (pos, next, epoch int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cursors[cursorKey{ds, job, rank}]
	if c == nil {
		return 0, 0, 0, false
	}
	return c.pos, c.next, c.epoch, true
}

// Len returns the number of cursors and of entries held now.
func (r *ReadAhead) Len() (cursors, entries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cursors), len(r.entries)
}

// Ready reports whether sample id of ds is in the buffer, its fetch done
// and successful.
func (r *ReadAhead) Ready(ds Dataset, id uint32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.entries[entryKey{ds, id}]
	if e == nil {
		return false
	}
	select {
	case <-e.ready:
		return e.ok
	default:
		return false
	}
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
