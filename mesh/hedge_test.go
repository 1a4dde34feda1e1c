package mesh

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// stall makes the node named name hang: while holding is set, its fetch
// handlers take requests in, say so on entered (if it has room), and
// answer none until release closes (let), as a peer that hangs does. Its
// QUIC stack still acknowledges them. pings counts the MethodPing
// requests it answers. newStall makes one, released when the test ends.
type stall struct {
	name    string
	holding atomic.Bool
	entered chan struct{}
	release chan struct{}
	pings   atomic.Int64
	once    sync.Once
}

func newStall(t testing.TB, name string) *stall {
	s := &stall{name: name, entered: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(s.let)
	return s
}

// let answers the requests held, and any that come after.
func (s *stall) let() { s.once.Do(func() { close(s.release) }) }

// handlers is a ClusterConfig.handlers that sets the stall up on its node.
func (s *stall) handlers(n *Node, h map[peer.Method]peerHandler) {
	if n.Name() != s.name {
		return
	}
	for _, m := range []peer.Method{wire.MethodFetch, wire.MethodFetchStream} {
		h[m] = held(h[m], s.holding.Load, s.entered, s.release)
	}
	ping := h[wire.MethodPing]
	h[wire.MethodPing] = func(ctx context.Context, from string, body []byte) (any, error) {
		s.pings.Add(1)
		return ping(ctx, from, body)
	}
}

// TestReadsHedgePastAStalledOwner: a node whose first owner of a sample
// stalls, with the request timeout at ten minutes:
//   - a node that does not own the sample asks the other owner once the
//     hedge wait has passed, and gets the bytes from its memory;
//   - an owner reading the sample through does not read the source beside
//     the stalled owner, which it hears from (its QUIC stack acknowledges
//     the request): it waits for its answer, and the source is read once;
//     of two reads sharing that read through, one that gives up leaves
//     the other to get the bytes; and the reads waiting on the stalled
//     owner ping it about once an ack window between them.
//
// The wait is the default one, learned, which is DefaultMax before any
// answer.
func TestReadsHedgePastAStalledOwner(t *testing.T) {
	const stalled = "n1"
	st := newStall(t, stalled)
	m := startMesh(t, 3, meshOpts{samples: 200, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.Prefetch = -1
		c.Cluster.handlers = st.handlers
	}})
	node := func(name string) *Node {
		for _, p := range m.peers {
			if p.node.Name() == name {
				return p.node
			}
		}
		t.Fatalf("no node %s", name)
		return nil
	}
	// Samples whose first owner is the stalled node.
	ds := node(stalled).ordered[0]
	var ids []int
	other := ""
	for i := range ds.len {
		if owners := node(stalled).owners(ds, uint32(i)); owners[0] == stalled && (other == "" || owners[1] == other) {
			ids, other = append(ids, i), owners[1]
		}
	}
	if len(ids) < 10 {
		t.Fatalf("%d samples have the stalled node first and %s next, want 10", len(ids), other)
	}
	reader := ""
	for _, p := range m.peers {
		if n := p.node.Name(); n != stalled && n != other {
			reader = n
		}
	}
	key := func(n *Node, id int) []byte { return []byte(keyOfSample(n.ordered[0], uint32(id))) }
	get := func(name string, id int) <-chan []byte {
		out := make(chan []byte, 1)
		go func() {
			n := node(name)
			v, _, err := n.Get(context.Background(), key(n, id), nil)
			if err != nil {
				t.Errorf("read at %s: %v", name, err)
			}
			out <- v
		}()
		return out
	}
	within := func(what string, got <-chan []byte, id int) {
		t.Helper()
		select {
		case v := <-got:
			if !bytes.Equal(v, m.files[id]) {
				t.Fatalf("%s: %d bytes, want the file's %d", what, len(v), len(m.files[id]))
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s still waits a minute later", what)
		}
	}
	sourceReads := func() (n int64) {
		for _, p := range m.peers {
			n += p.node.ordered[0].stats().Total.SourceReads
		}
		return n
	}

	t.Run("not an owner", func(t *testing.T) {
		within("the other owner's read through", get(other, ids[0]), ids[0]) // now in its memory
		st.holding.Store(true)
		hedged := node(reader).ordered[0].counters.Current().Hedged.Load()
		within("a read at a node that owns no copy", get(reader, ids[0]), ids[0])
		if node(reader).ordered[0].counters.Current().Hedged.Load() == hedged {
			t.Fatal("no hedged request counted")
		}
	})
	t.Run("an owner waits for a live co-owner", func(t *testing.T) {
		for len(st.entered) > 0 {
			<-st.entered
		}
		before := sourceReads()
		// Two reads share one read through; the first gives up while the
		// stalled owner holds it.
		n := node(other)
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error, 1)
		go func() {
			_, _, err := n.Get(ctx, key(n, ids[1]), nil)
			gaveUp <- err
		}()
		<-st.entered // the shared read asks the stalled node first
		got := get(other, ids[1])
		cancel()
		if err := <-gaveUp; err == nil {
			t.Error("the first read was answered before it gave up")
		}
		// More reads through wait on the stalled owner beside it.
		pingsBefore, since := st.pings.Load(), time.Now()
		var more []<-chan []byte
		for _, id := range ids[2:10] {
			more = append(more, get(other, id))
		}
		// Past the hedge wait and the ack window, the reads still wait
		// for the stalled owner, and nobody read the source.
		select {
		case <-got:
			t.Fatal("the read through was answered while its first owner stalled")
		case <-time.After(3 * time.Second):
		}
		if n := sourceReads() - before; n != 0 {
			t.Fatalf("%d source reads beside a first owner that is alive", n)
		}
		// Each read looks every ackWindow; one that heard from the owner
		// since its last look (another read's ping answered) sends no
		// ping of its own: about one an ackWindow between them, not one
		// each.
		windows := int64(time.Since(since) / ackWindow)
		sent := st.pings.Load() - pingsBefore
		t.Logf("%d reads waiting %d ack windows sent %d pings", len(more)+1, windows, sent)
		if limit := windows + int64(len(more)); sent > limit {
			t.Errorf("%d reads waiting %d ack windows sent %d pings, want at most %d", len(more)+1, windows, sent, limit)
		}
		st.let()
		within("the read through once its first owner answers", got, ids[1])
		for i, c := range more {
			within("a read through once its first owner answers", c, ids[2+i])
		}
		if n, want := sourceReads()-before, int64(1+len(more)); n != want {
			t.Fatalf("%d source reads, want the first owner's %d", n, want)
		}
	})
}

// TestReadsFromOneOwnerGoTogether: reads of samples at a node that owns
// none of them, made while its request to their owner is in flight, go to
// the owner in one request once that one is answered (Node.fetches), and
// each gets its own sample's bytes.
func TestReadsFromOneOwnerGoTogether(t *testing.T) {
	release := make(chan struct{})
	var holding atomic.Bool
	entered := make(chan struct{}, 1)
	var mu sync.Mutex
	var asked []int // how many ids each fetch request names, as the owner takes them in
	m := startMesh(t, 2, meshOpts{samples: 100, replicas: 1, configure: func(i int, c *Config) {
		c.Cluster.Prefetch = -1
		c.Cluster.HedgeAfter = -1                 // one owner a sample: nothing to hedge to
		c.Cluster.FetchTimeout = 10 * time.Minute // held until the reads queue, however slow the machine
		c.Cluster.handlers = func(n *Node, h map[peer.Method]peerHandler) {
			if n.Name() != "n1" {
				return
			}
			fetch := held(h[wire.MethodFetchStream], holding.Load, entered, release)
			h[wire.MethodFetchStream] = func(ctx context.Context, from string, body []byte) (any, error) {
				var req wire.FetchReq
				if err := msgpack.Unmarshal(body, &req); err == nil {
					mu.Lock()
					asked = append(asked, len(req.IDs))
					mu.Unlock()
				}
				return fetch(ctx, from, body)
			}
		}
	}})
	reader, owner := m.peers[0].node, m.peers[1].node
	// No bound on the wait (fetchBatchWait): the held request returns only
	// when the test lets it. Set before the node's first read.
	reader.fetches.MaxWait = 0
	ds := reader.ordered[0]
	var ids []int
	for i := range ds.len {
		if owners := reader.owners(ds, uint32(i)); len(owners) == 1 && owners[0] == owner.Name() {
			ids = append(ids, i)
		}
	}
	const reads = 9
	if len(ids) < reads {
		t.Fatalf("%s owns %d samples, want %d", owner.Name(), len(ids), reads)
	}
	holding.Store(true)
	var wg sync.WaitGroup
	read := func(id int) {
		wg.Go(func() {
			v, _, err := reader.Get(context.Background(), []byte(keyOfSample(ds, uint32(id))), nil)
			if err != nil || !bytes.Equal(v, m.files[id]) {
				t.Errorf("sample %d: %d bytes (%v), want the file's %d", id, len(v), err, len(m.files[id]))
			}
		})
	}
	read(ids[0])
	<-entered // the first read's request is in flight, and held
	key := fetchKey{owner.Name(), ds, fetchMode{}}
	for k, id := range ids[1:reads] {
		read(id)
		testsupport.WaitFor(t, 10*time.Second, "the read waits for the one in flight", func() bool { return reader.fetches.Waiting(key) == k+1 })
	}
	holding.Store(false)
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, reads - 1}; !slices.Equal(asked, want) {
		t.Fatalf("the owner was asked for %v samples a request, want %v", asked, want)
	}
}
