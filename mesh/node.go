package mesh

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/internal/bytesize"
	"github.com/shade-mesh/shade/internal/flight"
	"github.com/shade-mesh/shade/internal/workers"
	"github.com/shade-mesh/shade/mesh/coalesce"
	"github.com/shade-mesh/shade/mesh/hedge"
	"github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/mesh/outbox"
	"github.com/shade-mesh/shade/mesh/readahead"
	"github.com/shade-mesh/shade/mesh/trace"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/policy"
	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/protocol/shm"
	"github.com/shade-mesh/shade/store"
	"github.com/shade-mesh/shade/transport"
)

// Errors a Node reports to trainers. Each carries a RESP error code.
var (
	ErrUnknownDataset = codedError{"ERR", "mesh: unknown dataset"}
	ErrBadIndex       = codedError{"ERR", "mesh: bad sample index"}
	ErrReadOnly       = codedError{"READONLY", "mesh: dataset samples are read-only"}
	ErrOrderTimeout   = codedError{"TIMEOUT", "mesh: order not published in time"}
	ErrWorldMismatch  = codedError{"ERR", "mesh: world size differs from the job's"}
	ErrEpoch          = codedError{"ERR", "mesh: epoch out of sequence"}
	ErrClosed         = codedError{"ERR", "mesh: node closed"}
	ErrBadReport      = codedError{"ERR", "mesh: bad report"}
	ErrUnknownJob     = codedError{"ERR", "mesh: unknown job"}
)

// codedError is a sentinel with a RESP error code; compare with errors.Is.
type codedError struct{ code, msg string }

func (e codedError) Error() string { return e.msg }
func (e codedError) Code() string  { return e.code }

// freeBit marks policy ids of free-form keys (SET by clients); sample ids
// carry the dataset's ordinal in bits 32..62 and the index below. A free
// key's id is its store hash (store.Hash) with this bit set, by which the
// node finds the key again in the store to evict it (evictFreeLocked): it
// keeps no copy of free keys' names.
const freeBit = policy.ID(1) << 63

// Node serves datasets from a byte-bounded off-heap cache. It is safe for
// concurrent use by many trainer connections.
//
// A Node composes parts that each own their state and lock: the cache and
// its policy (under polMu, here), leadership (who leads, the terms), the
// outbox (package outbox: what is yet to send), the read-ahead (package
// readahead), and per dataset its score table (package scores) and order
// book (package orders). The peer protocol's messages are package wire's.
type Node struct {
	cfg      Config
	store    *store.Store
	datasets map[string]*datasetState // fixed after New
	ordered  []*datasetState          // by ordinal
	jobsMu   sync.Mutex               // held while a job is started
	flight   flight.Group[read]
	// workers runs the reads through (flight's runs), the tries of
	// hedged reads (hedge.First) and an MGET's requests to other owners
	// (readElsewhere, Pool.Each) on goroutines kept from earlier reads:
	// all call deep (a request to a peer over QUIC, the source), and a
	// new goroutine grew its stack, and copied it, each time.
	workers workers.Pool

	// polMu serializes the policy and every mutation of the store, so the
	// policy's view of what is resident and the store's always agree. Reads
	// of the store take no node lock.
	polMu sync.Mutex
	pol   policy.Policy
	// hitMu guards pending: reads from memory the policy has not heard
	// of yet. It hears of them before it decides anything (lockPolicy),
	// once the socket has sent the replies that made them (Settle), or
	// once maxPendingHits wait. told is pending's spare, under polMu.
	hitMu   sync.Mutex
	pending []policy.ID
	told    []policy.ID
	scorer  policy.Scorer // pol, if it weighs importance; else nil
	room    room          // the admission's room, set under polMu (no allocation per admission)
	// victimKey is the key of the policy's victim, under polMu: its bytes
	// are kept from one eviction to the next.
	victimKey []byte
	trace     *trace.Writer // nil unless Config.TracePath

	freeHits, freeMisses, freeRejected atomic.Int64
	closed                             atomic.Bool

	// The mesh: nil for a standalone node.
	cluster *cluster
	lead    leadership
	kick    chan struct{}
	// reconcileMu keeps to one pass of the reconciler at a time: runLoops
	// runs it, and a pass started elsewhere (a test's) waits for the
	// loop's, so that a done is not repeated by both.
	reconcileMu sync.Mutex

	out        outbox.Outbox               // reports, scores and offers yet to send
	older      atomic.Pointer[olderLeader] // a leader that does not know MethodReportDone (reportDone)
	readAhead  *readahead.ReadAhead        // samples fetched ahead of local ranks' reads
	inflightMu sync.Mutex
	inflight   map[string]int64 // samples asked of each owner and not yet answered (asking)
	// fetchWait is how long a read waits for an owner before it also
	// asks the next (ClusterConfig.HedgeAfter), learned from the answers
	// to fetches of one sample.
	fetchWait hedge.Delay
	// mgetWait is the same wait for an MGET's request to an owner for
	// its share of the samples (readElsewhere), learned from the answers
	// to those: a request of 64 samples takes longer than one of a few.
	mgetWait hedge.Delay
	// fetches sends the reads of single samples from an owner, one at a
	// time or, where they come while one is in flight, together
	// (fetchOne).
	fetches coalesce.Group[fetchKey, fetchRef, wire.FetchItem]

	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup
}

var _ transport.Backend = (*Node)(nil)

// New opens the datasets, maps the cache, joins the mesh if cfg.Cluster
// says so, and returns a serving node. Close leaves the mesh and releases
// the cache memory.
func New(cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	// The policy keeps nothing of a free-form key that leaves, nor of one
	// it refuses: what it remembers is then bounded by its residents and
	// the datasets' samples, however many names clients SET, and a free
	// key that comes back is as new.
	pol, err := policy.New(cfg.Policy, policy.Options{Transient: func(id policy.ID) bool { return id&freeBit != 0 }})
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	n := &Node{
		cfg:      cfg,
		datasets: make(map[string]*datasetState),
		pol:      pol,
		kick:     make(chan struct{}, 1),
		inflight: make(map[string]int64),
	}
	n.fetchWait.Fixed = cfg.Cluster.HedgeAfter
	n.mgetWait.Fixed = cfg.Cluster.HedgeAfter
	n.flight.Workers = &n.workers
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.fetches = coalesce.Group[fetchKey, fetchRef, wire.FetchItem]{
		Do: n.fetchBatch, Go: n.workers.Go, Base: n.ctx,
		MaxItems: maxFetchBatch, MaxWeight: maxFetchBatchBytes, Weight: func(r fetchRef) int64 { return r.size },
		MaxWait: fetchBatchWait,
	}
	n.readAhead = readahead.New(readahead.Config{
		Self: cfg.Name, Prefetch: cfg.Cluster.Prefetch, Memory: cfg.PrefetchMemory, SourceReads: cfg.SourceReads,
		BufferName: "shade-" + cfg.Name + "-readahead", Logger: cfg.Logger, HedgeAfter: cfg.Cluster.HedgeAfter,
	}, raHost{n})
	n.scorer, _ = pol.(policy.Scorer)
	for i, dc := range cfg.Datasets {
		ds, err := openDataset(i, dc, cfg)
		if err != nil {
			return nil, err
		}
		if _, dup := n.datasets[ds.name]; dup {
			return nil, fmt.Errorf("%w: dataset %q named twice", ErrConfig, ds.name)
		}
		n.datasets[ds.name] = ds
		n.ordered = append(n.ordered, ds)
		cfg.Logger.Info().Str("dataset", ds.name).Int("samples", ds.len).
			Str("bytes", bytesize.Format(ds.manifest.TotalBytes())).Str("version", ds.manifest.Version).
			Msg("dataset loaded")
	}
	giveBackOpeningGarbage()
	n.store, err = store.New(store.Config{Capacity: cfg.CacheSize, Name: "shade-" + cfg.Name})
	if err != nil {
		return nil, fmt.Errorf("mesh: cache: %w", err)
	}
	logPages(cfg.Logger, n.store.Stats(), n.store.Fd() >= 0)
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
			n.store.Close()
			return nil, fmt.Errorf("mesh: state directory: %w", err)
		}
	}
	if cfg.TracePath != "" {
		if n.trace, err = trace.Open(cfg.TracePath); err != nil {
			n.store.Close()
			return nil, err
		}
	}
	for _, ds := range n.ordered {
		ds.def = n.newJob(ds, "")
		n.startJob(ds.def)
	}
	if cfg.Cluster.GossipAddr == "" {
		// Standalone: this node owns every sample and leads every job.
		n.lead.setLeader(cfg.Name)
		n.lead.lead(1)
		for _, js := range n.allJobs() {
			js.setLeaderJob(leader.New(n.jobConfig(js)))
		}
		n.lead.setLeading(true)
		n.prepareFirstOrders()
		n.goBackground(n.runLoops)
		return n, nil
	}
	if err := n.startCluster(cfg.Cluster); err != nil {
		n.cancel()
		n.store.Close()
		return nil, err
	}
	n.goBackground(n.runLoops)
	return n, nil
}

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Close leaves the mesh (others see a graceful leave, not a failure),
// stops the node's goroutines and releases the cache. Callers stop serving
// trainers before they close.
func (n *Node) Close() error {
	if n.closed.Swap(true) {
		return nil
	}
	if c := n.cluster; c != nil {
		n.handOver(n.cfg.Cluster.DrainTimeout)
		if err := c.list.Leave(2 * time.Second); err != nil {
			n.cfg.Logger.Warn().Err(err).Msg("leaving the mesh")
		}
	}
	n.stop()
	n.saveScores()
	n.lockPolicy()
	defer n.polMu.Unlock()
	if err := n.trace.Close(); err != nil {
		n.cfg.Logger.Warn().Err(err).Msg("writing the access trace")
	}
	return n.store.Close()
}

// stop ends the node's work: its context, the read-ahead, the membership
// and the peer transport, then waits for every background goroutine.
func (n *Node) stop() {
	n.cancel()
	n.readAhead.Close()
	if c := n.cluster; c != nil {
		c.list.Close()
		c.wire.Close()
	}
	n.bg.Wait()
	n.workers.Close()
}

// route classifies a key: a sample of a known dataset (ds non-nil), or a
// free-form key (ds nil). A key naming a known dataset with a malformed
// index is an error; an index past the end is reported by outOfRange.
func (n *Node) route(key []byte) (ds *datasetState, idx int, outOfRange bool, err error) {
	name, num, ok := samplekey.Split(key)
	if !ok {
		return nil, 0, false, nil
	}
	ds = n.datasets[string(name)] // no allocation for a map lookup
	if ds == nil {
		return nil, 0, false, nil
	}
	idx, ok = samplekey.ParseIndex(num)
	if !ok {
		return nil, 0, false, fmt.Errorf("%w: '%s' (want %s/<0..%d>)", ErrBadIndex, key, ds.name, ds.len-1)
	}
	if idx >= ds.len {
		return ds, idx, true, nil
	}
	return ds, idx, false, nil
}

func sampleID(ds *datasetState, idx int) policy.ID {
	return policy.ID(ds.ordinal+1)<<32 | policy.ID(idx)
}

func freeID(key []byte) policy.ID { return policy.ID(store.Hash(key)) | freeBit }

// room is the policy's view of the store's space for one admission.
type room struct {
	n              *Node
	keyLen, valLen int
}

func (r *room) Fits(policy.ID, int64) bool { return r.n.store.Fits(r.keyLen, r.valLen) }
func (r *room) Evict(id policy.ID)         { r.n.evictLocked(id) }

// evictLocked removes a victim chosen by the policy. Called with polMu held.
func (n *Node) evictLocked(id policy.ID) {
	if id&freeBit != 0 {
		n.evictFreeLocked(id)
		return
	}
	ds := n.ordered[int(id>>32)-1]
	n.victimKey = samplekey.Append(n.victimKey[:0], ds.name, int(uint32(id)))
	n.store.Delete(n.victimKey)
	ds.left(int(uint32(id)))
	ds.counters.Current().Evictions.Add(1)
}

// evictFreeLocked removes the free-form key of policy id from the store,
// found by its hash: the id is the key's store hash with its top bit set,
// so the key is the one the store holds under either of the two hashes
// with the id's other bits (both, where two keys meet there: the policy
// counted them as one). A key the store holds there that is not free-form
// (a sample whose hash meets the id) stays. Called with polMu held.
func (n *Node) evictFreeLocked(id policy.ID) {
	for _, h := range [2]uint64{uint64(id &^ freeBit), uint64(id)} {
		key, ok := n.store.AppendKey(n.victimKey[:0], h)
		n.victimKey = key
		if !ok || freeID(key) != id {
			continue
		}
		if ds, _, _, err := n.route(key); ds == nil && err == nil {
			n.store.Delete(key)
		}
	}
}

// admit offers a value that was just read to the policy and stores it if
// admitted. It reports whether the value is now cached, and the value's
// checksum where it copied the value in (sum.ok), for what passes the
// value on. The policy decides, and the store makes room for the value,
// under polMu; the value is copied in and its checksum worked out, in
// one pass over the value as read (shm.Copy), after polMu is let go
// (store.Reserve), so that admissions on several cores copy at once, and
// the policy's other work (hits heard, other admissions decided) does not
// wait for them. A sample the policy evicts meanwhile is not cached (its
// reservation's Commit reports false).
func (n *Node) admit(id policy.ID, key, value []byte, ds *datasetState) (cached bool, sum knownSum) {
	n.lockPolicy()
	r, reserved, held := n.reserveLocked(id, key, len(value), ds)
	n.polMu.Unlock()
	if !reserved {
		return held, knownSum{}
	}
	sum = knownSum{shm.Copy(r.Value, value), true}
	return r.Commit(sum.v), sum
}

// admitSummed is admit for a value that came with its checksum, want (an
// offer from a co-owner): the copy into the store sums it, and a value
// whose sum is not want is given back unstored (ErrChecksum), and the
// policy forgets it, so the value is read once, not summed and then
// copied. A value the policy does not admit is not read at all.
func (n *Node) admitSummed(id policy.ID, key, value []byte, ds *datasetState, want uint64) error {
	n.lockPolicy()
	r, reserved, _ := n.reserveLocked(id, key, len(value), ds)
	n.polMu.Unlock()
	if !reserved {
		return nil
	}
	if shm.Copy(r.Value, value) == want {
		r.Commit(want)
		return nil
	}
	r.Abandon()
	n.lockPolicy()
	if !n.store.Has(key) { // not admitted again meanwhile
		n.forgetLocked(id, ds)
	}
	n.polMu.Unlock()
	return ErrChecksum
}

// reserveLocked is admit's part under polMu: reserved reports a
// reservation made for the value, to fill and commit; held, where none
// was made, whether the store already holds key (or another admission is
// filling it).
func (n *Node) reserveLocked(id policy.ID, key []byte, valueLen int, ds *datasetState) (r store.Reservation, reserved, held bool) {
	if n.closed.Load() {
		return r, false, false
	}
	if n.store.Has(key) {
		return r, false, true // another reader admitted it meanwhile
	}
	n.forgetLocked(id, ds) // the store lost it (corruption): forget it too
	r, reserved = n.roomLocked(id, key, valueLen, ds)
	return r, reserved, false
}

// forgetLocked removes id from the policy, where it holds it, for a value
// the store does not hold. Called with polMu held.
func (n *Node) forgetLocked(id policy.ID, ds *datasetState) {
	if n.pol.Resident(id) {
		n.pol.Remove(id)
		if ds != nil {
			ds.left(int(uint32(id)))
		}
	}
}

// roomLocked asks the policy to admit id, a value it does not hold, and
// where it does, reserves the value's room in the store (store.Reserve),
// beside any value the store holds for key until the reservation is
// committed. Called with polMu held.
func (n *Node) roomLocked(id policy.ID, key []byte, valueLen int, ds *datasetState) (store.Reservation, bool) {
	if n.closed.Load() {
		return store.Reservation{}, false
	}
	charge := n.store.Charge(len(key), valueLen)
	n.room = room{n: n, keyLen: len(key), valLen: valueLen}
	if !n.pol.Miss(id, charge, &n.room) {
		n.countRejected(ds)
		return store.Reservation{}, false
	}
	r, err := n.store.Reserve(key, valueLen)
	if err != nil {
		// Fits and Reserve share one allocator search under polMu, so
		// this is not expected; undo the admission rather than diverge.
		n.pol.Remove(id)
		n.countRejected(ds)
		n.cfg.Logger.Warn().Err(err).Msg("store refused an admitted sample")
		return store.Reservation{}, false
	}
	if ds != nil {
		ds.admitted(int(uint32(id)))
	}
	return r, true
}

func (n *Node) countRejected(ds *datasetState) {
	if ds == nil {
		n.freeRejected.Add(1)
		return
	}
	ds.counters.Current().Rejected.Add(1)
}

// maxPendingHits is the most reads from memory a node keeps for its
// policy to hear of later (8 bytes each).
const maxPendingHits = 4096

// hits records that these ids were read from memory, for the policy to
// hear of before its next decision (lockPolicy), when the socket has sent
// their replies (Settle), or at once where maxPendingHits wait: a reply
// need not wait for the policy, whose re-keying is a read's costliest
// step. One that has left the policy meanwhile (a race with an eviction)
// is counted as the policy counts a read of an id it does not hold
// (policy.Policy.Hit): the read was made. The caller must not hold polMu.
func (n *Node) hits(ids ...policy.ID) {
	n.hitMu.Lock()
	n.pending = append(n.pending, ids...)
	full := len(n.pending) >= maxPendingHits
	n.hitMu.Unlock()
	if full {
		n.Settle()
	}
}

// Settle implements transport.Backend: the policy hears of the reads from
// memory recorded so far.
func (n *Node) Settle() {
	n.hitMu.Lock()
	none := len(n.pending) == 0
	n.hitMu.Unlock()
	if !none {
		n.lockPolicy()
		n.polMu.Unlock()
	}
}

// lockPolicy locks polMu and tells the policy of the reads recorded before
// (hits), so that whatever it decides next counts them. Every holder of
// polMu takes it here.
func (n *Node) lockPolicy() {
	n.polMu.Lock()
	n.hitMu.Lock()
	ids := n.pending
	n.pending = n.told[:0]
	n.hitMu.Unlock()
	policy.Hits(n.pol, ids)
	n.told = ids
}

// traceRead records a sample read if tracing is on; nothing is computed
// otherwise.
func (n *Node) traceRead(ds *datasetState, idx int, key []byte) {
	if n.trace != nil {
		n.trace.Read(sampleID(ds, idx), n.store.Charge(len(key), int(ds.manifest.Sizes.At(idx))))
	}
}

// Set implements transport.Backend for free-form keys. Dataset samples are
// read-only.
func (n *Node) Set(key, value []byte) (bool, error) {
	if n.closed.Load() {
		return false, ErrClosed
	}
	ds, _, _, err := n.route(key)
	if err != nil {
		return false, err
	}
	if ds != nil {
		return false, fmt.Errorf("%w: %s", ErrReadOnly, ds.name)
	}
	if n.store.Charge(len(key), len(value)) > n.cfg.CacheSize {
		return false, fmt.Errorf("%w: %d bytes", store.ErrTooLarge, len(value)) // the old value stays
	}
	id := freeID(key)
	n.lockPolicy()
	// The policy decides on the new value as on any it does not hold: the
	// old one leaves the policy first. Where the new value fits beside the
	// old one, the old one stays in the store until the new one is
	// committed (store.Reserve), so that a read meanwhile finds one or the
	// other, never none. Where it does not, the old one goes first, and its
	// room counts for the new one, as the policy would count it.
	if n.pol.Resident(id) {
		n.pol.Remove(id)
	}
	if !n.store.Fits(len(key), len(value)) {
		n.store.Delete(key)
	}
	r, ok := n.roomLocked(id, key, len(value), nil)
	if !ok {
		n.store.Delete(key) // refused: the old value goes too
		n.polMu.Unlock()
		return false, nil
	}
	n.polMu.Unlock()
	// The value is copied in after polMu is let go, as admit does. A
	// Commit that reports false was overtaken by a DEL, a later SET or an
	// eviction of the key, each after this SET.
	r.Commit(shm.Copy(r.Value, value))
	return true, nil
}

// Exists implements transport.Backend: whether the key is cached here.
func (n *Node) Exists(key []byte) bool {
	if n.closed.Load() {
		return false
	}
	return n.store.Has(key)
}

// Delete implements transport.Backend: drops a key from the cache (a
// dataset sample stays in its dataset and is read through again).
func (n *Node) Delete(key []byte) bool {
	if n.closed.Load() {
		return false
	}
	ds, idx, out, err := n.route(key)
	if err != nil || out {
		return false
	}
	n.lockPolicy()
	defer n.polMu.Unlock()
	if !n.store.Delete(key) {
		return false
	}
	if ds == nil {
		id := freeID(key)
		n.pol.Remove(id)
		return true
	}
	n.pol.Remove(sampleID(ds, idx))
	ds.left(idx)
	return true
}

// DBSize implements transport.Backend: the number of cached entries.
func (n *Node) DBSize() int {
	if n.closed.Load() {
		return 0
	}
	return n.store.Len()
}

// Manifest implements transport.Backend.
func (n *Node) Manifest(name string) (transport.Names, error) {
	ds, err := n.dataset(name)
	if err != nil {
		return nil, err
	}
	return ds.manifest.Names, nil
}

// giveBackOpeningGarbage returns to the system the heap memory that
// opening the datasets used and no longer needs, where the heap holds
// over 64 MiB (live or not: the collection it forces tells them apart;
// one with 63 MB live took about a millisecond here). A bucket's
// listing of 1,000,000 objects (its pages, the objects, its saved copy)
// left 0.3-0.6 GB of the heap held where the manifest keeps 75 MB; the
// collector gives memory back only at its own pace after a collection,
// which an idle peer may not run for a long time, and until then it
// counts in the peer's memory (and in the check of the cache against the
// peer's limit, store.New, which comes next).
func giveBackOpeningGarbage() {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"}, // live and dead objects
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	var held uint64
	for _, m := range s {
		if m.Value.Kind() == metrics.KindUint64 {
			held += m.Value.Uint64()
		}
	}
	if held > 64<<20 {
		debug.FreeOSMemory()
	}
}

func (n *Node) dataset(name string) (*datasetState, error) {
	ds := n.datasets[name]
	if ds == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownDataset, name)
	}
	return ds, nil
}

// warnPagesFrom is the cache size from which logPages warns of a cache in
// 4 KiB pages: the pages of a smaller one fit in the CPU's TLB anyway.
const warnPagesFrom = 64 << 20

// logPages reports the cache's memory and how much of it the kernel mapped
// in huge pages (store.Stats.HugePageBytes). A cache in 4 KiB pages only
// is a warning that names the kernel setting to change: shmem_enabled for
// a memfd (shared), enabled for the anonymous memory without one.
func logPages(log zerolog.Logger, st store.Stats, shared bool) {
	ev, msg := log.Info(), "cache mapped"
	if st.HugePageBytes == 0 && st.Capacity >= warnPagesFrom {
		setting := "shmem_enabled to advise"
		if !shared {
			setting = "enabled to madvise"
		}
		ev, msg = log.Warn(), "cache mapped in 4 KiB pages, whose TLB misses slow the reads of values out of the CPU's caches; "+
			"for 2 MiB pages set /sys/kernel/mm/transparent_hugepage/"+setting+" and restart"
	}
	ev.Str("size", bytesize.Format(st.Capacity)).Str("huge_pages", bytesize.Format(st.HugePageBytes)).Msg(msg)
}

// Info implements transport.Backend.
func (n *Node) Info() []string {
	st := n.store.Stats()
	return []string{
		"node:" + n.cfg.Name,
		"policy:" + n.pol.Name(),
		"pads:" + strconv.FormatBool(!n.cfg.Uniform),
		"cache_capacity:" + strconv.FormatInt(st.Capacity, 10),
		"cache_used:" + strconv.FormatInt(st.UsedBytes, 10),
		"cache_huge_page_bytes:" + strconv.FormatInt(st.HugePageBytes, 10),
		"cache_entries:" + strconv.Itoa(st.Entries),
		"datasets:" + strconv.Itoa(len(n.ordered)),
		"keyspace_hits:" + strconv.FormatInt(n.freeHits.Load()+n.sampleHits(), 10),
		"keyspace_misses:" + strconv.FormatInt(n.freeMisses.Load()+n.sampleMisses(), 10),
	}
}
