package mesh

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/mesh/hedge"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// fetchLog records, per node, the number of ids of each fetch request it
// takes in.
type fetchLog struct {
	mu    sync.Mutex
	asked map[string][]int
}

func (l *fetchLog) handlers(n *Node, h map[peer.Method]peerHandler) {
	fetch := h[wire.MethodFetchStream]
	h[wire.MethodFetchStream] = func(ctx context.Context, from string, body []byte) (any, error) {
		var req wire.FetchReq
		if err := msgpack.Unmarshal(body, &req); err == nil {
			l.mu.Lock()
			if l.asked == nil {
				l.asked = make(map[string][]int)
			}
			l.asked[n.Name()] = append(l.asked[n.Name()], len(req.IDs))
			l.mu.Unlock()
		}
		return fetch(ctx, from, body)
	}
}

// lacking makes the node named name answer every fetch that n0 (the
// tests' reader) sends it from its memory only, as if n0 had asked so,
// and counts the samples it has answered, found or not.
type lacking struct {
	name     string
	answered atomic.Int64
}

// handlers is a ClusterConfig.handlers that sets l up on its node.
func (l *lacking) handlers(n *Node, h map[peer.Method]peerHandler) {
	if n.Name() != l.name {
		return
	}
	fetch := h[wire.MethodFetchStream]
	h[wire.MethodFetchStream] = func(ctx context.Context, from string, body []byte) (any, error) {
		var req wire.FetchReq
		if err := msgpack.Unmarshal(body, &req); err != nil || from != "n0" {
			return fetch(ctx, from, body)
		}
		req.MemoryOnly = true
		b, err := msgpack.Marshal(&req)
		if err != nil {
			return nil, err
		}
		defer l.answered.Add(int64(len(req.IDs)))
		return fetch(ctx, from, b)
	}
}

// loggedMesh starts a mesh of 3 with two replicas and the given samples,
// no read-ahead, whose fetch requests log records; none is hedged or
// timed out (on a busy machine either asks again).
func loggedMesh(t *testing.T, samples int) (*testMesh, *fetchLog) {
	log := new(fetchLog)
	m := startMesh(t, 3, meshOpts{samples: samples, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.Prefetch = -1
		c.Cluster.HedgeAfter = -1
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.handlers = log.handlers
	}})
	return m, log
}

// reset forgets the requests logged so far.
func (l *fetchLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.asked)
}

func (l *fetchLog) of(node string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.asked[node])
}

// mgetOthers returns the keys of up to k samples of n's dataset that n
// does not own, and their ids.
func mgetOthers(n *Node, k int) (keys [][]byte, ids []int) {
	ds := n.ordered[0]
	for i := range ds.len {
		if len(ids) < k && !contains(n.ownersView(ds, uint32(i)), n.Name()) {
			keys, ids = append(keys, []byte(keyOfSample(ds, uint32(i)))), append(ids, i)
		}
	}
	return keys, ids
}

// readMGet reads keys with one MGet at n, and returns an error unless
// each is the file of its id.
func readMGet(m *testMesh, n *Node, keys [][]byte, ids []int) error {
	b := n.MGet(context.Background(), keys)
	defer b.Close()
	for i := range keys {
		v, found, err := b.Append(i, nil, nil)
		if err != nil || !found || !bytes.Equal(v, m.files[ids[i]]) {
			return fmt.Errorf("%s: found %v, %d bytes (%v), want the file's %d", keys[i], found, len(v), err, len(m.files[ids[i]]))
		}
	}
	return nil
}

// checkMGet fails t unless readMGet succeeds within a minute.
func checkMGet(t *testing.T, m *testMesh, n *Node, keys [][]byte, ids []int) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- readMGet(m, n, keys, ids) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the MGET still waits a minute later")
	}
}

// TestMGetAsksEachOwnerOnce: an MGET at a node of 100 samples it does not
// own, in a mesh of three with two replicas (so the two other nodes own
// every one of them, and hold them), asks each of the two for half of
// them in one request and gets every file's bytes from their memory.
func TestMGetAsksEachOwnerOnce(t *testing.T) {
	m, log := loggedMesh(t, 600)
	for _, p := range m.peers[1:] {
		if _, err := p.node.Warm(context.Background(), "ds"); err != nil {
			t.Fatal(err)
		}
	}
	reader := m.peers[0].node
	keys, ids := mgetOthers(reader, 100)
	if len(keys) != 100 {
		t.Fatalf("%s does not own %d samples, want 100", reader.Name(), len(keys))
	}
	before := reader.ordered[0].stats().Total
	log.reset() // warming asked co-owners for samples
	checkMGet(t, m, reader, keys, ids)
	for _, p := range m.peers[1:] {
		if got := log.of(p.node.Name()); len(got) != 1 || got[0] != 50 {
			t.Errorf("%s was asked for %v samples a request, want [50]", p.node.Name(), got)
		}
	}
	after := reader.ordered[0].stats().Total
	if hits, src := after.PeerHits-before.PeerHits, after.SourceReads-before.SourceReads; hits != 100 || src != 0 {
		t.Errorf("%d peer hits and %d source reads, want 100 and 0", hits, src)
	}
}

// TestMGetHedgesPastAStalledOwner: an MGET's request to an owner that
// stalls is hedged: once the wait has passed, its samples are read from
// their other owner's memory, and the MGET gets every file's bytes while
// the stalled owner still holds the request.
func TestMGetHedgesPastAStalledOwner(t *testing.T) {
	st := newStall(t, "n1")
	m := startMesh(t, 3, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.HedgeAfter = 50 * time.Millisecond
		c.Cluster.Prefetch = -1
		c.Cluster.handlers = st.handlers
	}})
	if _, err := m.peers[2].node.Warm(context.Background(), "ds"); err != nil {
		t.Fatal(err)
	}
	reader := m.peers[0].node
	keys, ids := mgetOthers(reader, 64)
	st.holding.Store(true)
	before := reader.ordered[0].stats().Total
	checkMGet(t, m, reader, keys, ids)
	select {
	case <-st.entered:
	default:
		t.Fatalf("%s was not asked", st.name)
	}
	after := reader.ordered[0].stats().Total
	if hedged := after.Hedged - before.Hedged; hedged < 1 {
		t.Errorf("%d reads hedged, want some", hedged)
	}
	if hits, src := after.PeerHits-before.PeerHits, after.SourceReads-before.SourceReads; hits != 64 || src != 0 {
		t.Errorf("%d peer hits and %d source reads, want 64 and 0", hits, src)
	}
}

// TestMGetReadsElsewhereWhatAnOwnerLacks: an owner that answers an MGET's
// request with none of its samples (here it is asked for its memory only,
// and holds none) costs the MGET nothing but time: each sample is read
// from its other owner, which reads it through, and the bytes are right.
func TestMGetReadsElsewhereWhatAnOwnerLacks(t *testing.T) {
	l := &lacking{name: "n1"}
	m := startMesh(t, 3, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.Prefetch = -1
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.handlers = l.handlers
	}})
	reader := m.peers[0].node
	keys, ids := mgetOthers(reader, 64)
	checkMGet(t, m, reader, keys, ids)
	if l.answered.Load() == 0 {
		t.Fatalf("%s was not asked", l.name)
	}
	var src int64
	for _, p := range m.peers {
		src += p.node.ordered[0].stats().Total.SourceReads
	}
	if src != 64 {
		t.Errorf("%d source reads in the mesh, want 64 (each sample once)", src)
	}
}

// TestMGetBoundsItsRequests: an MGET of 1,200 small samples that other
// nodes own (about 19 requests of 64) has at most elsewhereAtOnce of them
// in flight at once. Each owner holds a request until more than that are
// in flight across the owners, or a tenth of a second has passed, so
// that requests sent past the bound are seen together.
func TestMGetBoundsItsRequests(t *testing.T) {
	var inflight, most atomic.Int64
	over := make(chan struct{})
	var once sync.Once
	m := startMesh(t, 3, meshOpts{samples: 4500, minSize: 10, maxSize: 20, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.Prefetch = -1
		// The requests held must be neither hedged nor timed out: either
		// sends the samples again, in requests of their own.
		c.Cluster.HedgeAfter = -1
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			fetch := h[wire.MethodFetchStream]
			h[wire.MethodFetchStream] = func(ctx context.Context, from string, body []byte) (any, error) {
				if from != "n0" {
					return fetch(ctx, from, body)
				}
				k := inflight.Add(1)
				defer inflight.Add(-1)
				for {
					if cur := most.Load(); k <= cur || most.CompareAndSwap(cur, k) {
						break
					}
				}
				if k > elsewhereAtOnce {
					once.Do(func() { close(over) })
				}
				t := time.NewTimer(100 * time.Millisecond)
				defer t.Stop()
				select {
				case <-over:
				case <-t.C:
				}
				return fetch(ctx, from, body)
			}
		}
	}})
	reader := m.peers[0].node
	keys, ids := mgetOthers(reader, 1200)
	if len(keys) != 1200 {
		t.Fatalf("%s does not own %d samples, want 1200", reader.Name(), len(keys))
	}
	checkMGet(t, m, reader, keys, ids)
	if got := most.Load(); got > elsewhereAtOnce || got < 2 {
		t.Errorf("%d requests in flight at most, want 2 to %d", got, elsewhereAtOnce)
	}
}

// TestMGetHedgeDoesNotReadTheSource: where an MGET's request to one owner
// stalls and the other owner has none of its samples (it is asked for its
// memory only, and holds none), the hedge fails and the MGET waits for
// the stalled owner, as a single read waits for its last owner: the
// reader does not read the source beside it. Released, the owner answers
// (reading each sample through), and the bytes are right.
func TestMGetHedgeDoesNotReadTheSource(t *testing.T) {
	st, l := newStall(t, "n1"), &lacking{name: "n2"}
	m := startMesh(t, 3, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.HedgeAfter = 20 * time.Millisecond
		c.Cluster.Prefetch = -1
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			st.handlers(n, h)
			l.handlers(n, h)
		}
	}})
	reader := m.peers[0].node
	keys, ids := mgetOthers(reader, 64)
	st.holding.Store(true)
	done := make(chan error, 1)
	go func() { done <- readMGet(m, reader, keys, ids) }()
	<-st.entered
	// The lacking owner has answered, for none, every sample: its own
	// share, and the stalled owner's through the hedge.
	waitFor(t, time.Minute, "the other owner answers every sample", func() bool { return l.answered.Load() >= int64(len(keys)) })
	st.holding.Store(false)
	st.let()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	total := reader.ordered[0].stats().Total
	if total.SourceFallback != 0 || total.SourceReads != 0 {
		t.Errorf("the reader read the source: %d fallbacks, %d reads", total.SourceFallback, total.SourceReads)
	}
	if total.Hedged == 0 {
		t.Error("no read was hedged")
	}
}

// TestMGetKeepsWhatTheHedgeGot: where an MGET's request to one owner
// fails and the hedge to the other owner gets only some of its samples
// (the other is asked for its memory only, and holds half of the MGET's
// samples), the MGET keeps those, and reads the source for the others
// alone: each sample no owner holds is read from the source once.
func TestMGetKeepsWhatTheHedgeGot(t *testing.T) {
	const failing = "n1"
	l := &lacking{name: "n2"}
	m := startMesh(t, 3, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.Prefetch = -1
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			l.handlers(n, h)
			if n.Name() != failing {
				return
			}
			fetch := h[wire.MethodFetchStream]
			h[wire.MethodFetchStream] = func(ctx context.Context, from string, body []byte) (any, error) {
				if from == "n0" {
					return nil, &peer.Error{Code: peer.CodeUnavailable, Msg: "failing for the test"}
				}
				return fetch(ctx, from, body)
			}
		}
	}})
	reader, other := m.peers[0].node, m.peers[2].node
	keys, ids := mgetOthers(reader, 64)
	for _, key := range keys[:32] { // cached at the lacking owner
		if _, _, err := other.Get(context.Background(), key, nil); err != nil {
			t.Fatal(err)
		}
	}
	checkMGet(t, m, reader, keys, ids)
	st := reader.ordered[0].stats().Total
	if st.SourceFallback != 32 || st.PeerHits != 32 {
		t.Errorf("%d samples read from the source and %d from a peer's memory, want 32 and 32", st.SourceFallback, st.PeerHits)
	}
}

// TestPreferredOrdersByLoad: owners are ordered by the samples asked of
// them and not yet answered, fewest first, the ring's order kept between
// equals; the caller's list is left as it was.
func TestPreferredOrdersByLoad(t *testing.T) {
	n := &Node{inflight: map[string]int64{"a": 3, "b": 1, "c": 1, "e": 2}}
	owners := []string{"a", "b", "c", "d", "e"}
	if got, want := n.preferred(owners), []string{"d", "b", "c", "e", "a"}; !slices.Equal(got, want) {
		t.Errorf("preferred %v, want %v", got, want)
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(owners, want) {
		t.Errorf("the owners became %v", owners)
	}
	if got := n.preferred([]string{"c", "b"}); !slices.Equal(got, []string{"c", "b"}) {
		t.Errorf("preferred %v of two equals, want the ring's order", got)
	}
}

// TestMGetLearnsItsOwnWait: an MGET's requests teach the wait of MGET
// requests (Node.mgetWait), not the wait of single reads (Node.fetchWait):
// MGETs of samples held in their owners' memory go on until the first is
// learned (at most 400), and the second still knows no answer. One owner
// a sample: nothing is hedged, and warming the owners asks the reader
// nothing.
func TestMGetLearnsItsOwnWait(t *testing.T) {
	m := startMesh(t, 3, meshOpts{samples: 300, replicas: 1, configure: func(i int, c *Config) {
		c.Cluster.Prefetch = -1
	}})
	for _, p := range m.peers[1:] {
		if _, err := p.node.Warm(context.Background(), "ds"); err != nil {
			t.Fatal(err)
		}
	}
	reader := m.peers[0].node
	keys, ids := mgetOthers(reader, 64)
	mgets := 0
	for ; mgets < 400 && reader.mgetWait.Get() >= hedge.DefaultMax; mgets++ {
		checkMGet(t, m, reader, keys, ids)
	}
	if got := reader.mgetWait.Get(); got >= hedge.DefaultMax {
		t.Fatalf("the wait of MGET requests is %v after %d MGETs, want it learned (under %v)", got, mgets, hedge.DefaultMax)
	}
	if got := reader.fetchWait.Get(); got != hedge.DefaultMax {
		t.Errorf("the wait of single reads is %v after %d MGETs, want %v (nothing learned)", got, mgets, hedge.DefaultMax)
	}
}

// mgetOwned returns the keys of up to k samples of n's dataset that n
// owns and keep (if not nil) takes, given the sample's owners, and their
// ids.
func mgetOwned(n *Node, k int, keep func(owners []string) bool) (keys [][]byte, ids []int) {
	ds := n.ordered[0]
	for i := range ds.len {
		owners := n.ownersView(ds, uint32(i))
		if len(ids) < k && contains(owners, n.Name()) && (keep == nil || keep(owners)) {
			keys, ids = append(keys, []byte(keyOfSample(ds, uint32(i)))), append(ids, i)
		}
	}
	return keys, ids
}

// meshSourceReads is the source reads of every node of m.
func meshSourceReads(m *testMesh) (n int64) {
	for _, p := range m.peers {
		n += p.node.ordered[0].stats().Total.SourceReads
	}
	return n
}

// TestMGetAsksEachCoOwnerOnce: an MGET at a node of 48 samples it owns,
// none of them in any node's memory, in a mesh of three with two
// replicas, asks each co-owner in one request a mode (read the sample
// through for it where the co-owner comes first in the ring's order, its
// memory otherwise), not a request a sample; the co-owners reading
// through for it do not ask it back; the source is read once a sample,
// and the node holds every one after.
func TestMGetAsksEachCoOwnerOnce(t *testing.T) {
	m, log := loggedMesh(t, 300)
	reader := m.peers[0].node
	keys, ids := mgetOwned(reader, 48, nil)
	if len(keys) != 48 {
		t.Fatalf("%s owns %d samples, want 48", reader.Name(), len(keys))
	}
	before := meshSourceReads(m)
	checkMGet(t, m, reader, keys, ids)
	asked := 0
	for _, p := range m.peers[1:] {
		got := log.of(p.node.Name())
		if len(got) > 2 {
			t.Errorf("%s was asked in %d requests (%v samples each), want at most 2", p.node.Name(), len(got), got)
		}
		for _, k := range got {
			asked += k
		}
	}
	if asked != len(ids) {
		t.Errorf("the co-owners were asked for %d samples, want each of the %d once", asked, len(ids))
	}
	if got := log.of(reader.Name()); len(got) != 0 {
		t.Errorf("%s was asked back for %v samples", reader.Name(), got)
	}
	if n := meshSourceReads(m) - before; n != int64(len(ids)) {
		t.Errorf("%d source reads, want %d: one a sample", n, len(ids))
	}
	for _, k := range keys {
		if !reader.store.Has(k) {
			t.Errorf("%s does not hold %s after reading it through", reader.Name(), k)
		}
	}
}

// stalledMGet starts a mesh of 3 with two replicas whose node named
// stalled holds the fetches it takes in, and an MGET at n0 of 32 samples
// n0 owns with that node; it returns once the node holds the MGET's
// first request, with what the MGET will end with (readMGet).
func stalledMGet(t *testing.T, stalled string) (m *testMesh, st *stall, ids []int, done <-chan error) {
	t.Helper()
	st = newStall(t, stalled)
	m = startMesh(t, 3, meshOpts{samples: 300, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.Prefetch = -1
		c.Cluster.HedgeAfter = 50 * time.Millisecond
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.handlers = st.handlers
	}})
	reader := m.peers[0].node
	keys, ids := mgetOwned(reader, 32, func(owners []string) bool { return contains(owners, stalled) })
	if len(keys) != 32 {
		t.Fatalf("%s owns %d samples with %s, want 32", reader.Name(), len(keys), stalled)
	}
	st.holding.Store(true)
	end := make(chan error, 1)
	go func() { end <- readMGet(m, reader, keys, ids) }()
	<-st.entered
	return m, st, ids, end
}

// endsWithin fails t unless done yields nil within a minute.
func endsWithin(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the MGET still waits a minute after %s", what)
	}
}

// TestMGetOwnedWaitsForALiveCoOwner: an MGET of samples a node owns with
// a co-owner that stalls (its QUIC stack still acknowledges, and it
// answers pings) waits for it rather than read the source beside it,
// and gets every file's bytes once it answers; the source is read once
// a sample.
func TestMGetOwnedWaitsForALiveCoOwner(t *testing.T) {
	m, st, ids, done := stalledMGet(t, "n1")
	before := meshSourceReads(m)
	select {
	case err := <-done:
		t.Fatalf("the MGET ended while its co-owner stalled: %v", err)
	case <-time.After(2 * time.Second): // past the hedge wait and many ack windows
	}
	if n := meshSourceReads(m) - before; n != 0 {
		t.Fatalf("%d source reads beside a co-owner that is alive", n)
	}
	st.let()
	endsWithin(t, done, "its co-owner answered")
	if n := meshSourceReads(m) - before; n != int64(len(ids)) {
		t.Errorf("%d source reads, want %d: one a sample", n, len(ids))
	}
}

// TestMGetOwnedPastAKilledCoOwner: an MGET of samples a node owns whose
// co-owner is killed while it holds the MGET's requests gets every
// file's bytes, from the source.
func TestMGetOwnedPastAKilledCoOwner(t *testing.T) {
	const victim = "n1"
	m, _, _, done := stalledMGet(t, victim)
	for _, p := range m.peers {
		if p.node.Name() == victim {
			p.node.kill()
		}
	}
	endsWithin(t, done, "its co-owner was killed")
}

// TestMGetOwnedHedgesToTheNextCoOwner: with three replicas, an MGET of
// samples a node owns whose first co-owner to ask stalls (alive: its QUIC
// stack acknowledges, and it answers pings) asks the next co-owner once
// the wait has passed, as a single read does, and gets every file's
// bytes from its memory while the stalled one still holds the request:
// no source is read. (The next co-owner holds the samples from a warm.)
func TestMGetOwnedHedgesToTheNextCoOwner(t *testing.T) {
	const stalled = "n1"
	st := newStall(t, stalled)
	m := startMesh(t, 3, meshOpts{samples: 300, replicas: 3, configure: func(i int, c *Config) {
		c.Cluster.Prefetch = -1
		c.Cluster.HedgeAfter = 50 * time.Millisecond
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.handlers = st.handlers
	}})
	if _, err := m.peers[2].node.Warm(context.Background(), "ds"); err != nil {
		t.Fatal(err)
	}
	reader := m.peers[0].node
	keys, ids := mgetOwned(reader, 32, func(owners []string) bool {
		co, _, _ := reader.coOwner(owners, 0, true)
		return co == stalled
	})
	if len(ids) != 32 {
		t.Fatalf("%s asks %s first for %d samples, want 32", reader.Name(), stalled, len(ids))
	}
	// Warming offered every sample to the other owners: the reader drops
	// them again.
	for _, k := range keys {
		if !reader.Delete(k) {
			t.Fatalf("%s does not hold %s after the warm", reader.Name(), k)
		}
	}
	st.holding.Store(true)
	before := meshSourceReads(m)
	done := make(chan error, 1)
	go func() { done <- readMGet(m, reader, keys, ids) }()
	<-st.entered
	endsWithin(t, done, "its first co-owner stalled")
	if n := meshSourceReads(m) - before; n != 0 {
		t.Errorf("%d source reads, want none: the next co-owner holds every sample", n)
	}
	if hedged := reader.ordered[0].stats().Total.Hedged; hedged < int64(len(ids)) {
		t.Errorf("%d reads hedged, want at least %d", hedged, len(ids))
	}
}
