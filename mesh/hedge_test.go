package mesh

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/transport/peer"
)

// fetchStalled is a ClusterConfig.handlers: the fetch handlers of the node
// named stalled take requests in, say so on entered (if it has room), and
// answer none until release closes, as a peer that hangs, or has died and
// is not yet found dead, does.
func fetchStalled(stalled string, entered chan<- struct{}, release <-chan struct{}) func(*Node, map[peer.Method]peerHandler) {
	return func(n *Node, h map[peer.Method]peerHandler) {
		if n.Name() != stalled {
			return
		}
		for _, m := range []peer.Method{wire.MethodFetch, wire.MethodFetchStream} {
			h[m] = held(h[m], func() bool { return true }, entered, release)
		}
	}
}

// TestReadsHedgePastAStalledOwner: a read whose first owner never answers
// (and stays alive, so it is never found dead) is answered by the next
// owner, or the source, once the hedge wait has passed, with the file's
// bytes; the request timeout is ten minutes. The wait is the default one,
// learned, which is DefaultMax before any answer.
func TestReadsHedgePastAStalledOwner(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	entered := make(chan struct{}, 1)
	const stalled = "n1"
	m := startMesh(t, 3, meshOpts{samples: 200, replicas: 2, configure: func(i int, c *Config) {
		c.Cluster.FetchTimeout = 10 * time.Minute
		c.Cluster.Prefetch = -1
		c.Cluster.handlers = fetchStalled(stalled, entered, release)
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
	// A sample whose first owner is the stalled node, and which neither
	// other node holds yet.
	ds := node(stalled).ordered[0]
	id, other := -1, ""
	for i := range ds.len {
		if owners := node(stalled).owners(ds, uint32(i)); owners[0] == stalled {
			id, other = i, owners[1]
			break
		}
	}
	if id < 0 {
		t.Fatal("no sample has the stalled node first")
	}
	reader := ""
	for _, p := range m.peers {
		if n := p.node.Name(); n != stalled && n != other {
			reader = n
		}
	}
	read := func(t *testing.T, name string, id int) {
		t.Helper()
		n := node(name)
		ds := n.ordered[0]
		before := ds.counters.Current().Hedged.Load()
		done := make(chan struct{})
		var v []byte
		var err error
		go func() {
			defer close(done)
			v, _, err = n.Get(context.Background(), []byte(keyOfSample(ds, uint32(id))), nil)
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("a read at %s of a sample whose first owner stalls still waits a minute later", name)
		}
		if err != nil || !bytes.Equal(v, m.files[id]) {
			t.Fatalf("read at %s: %d bytes, %v; want the file's %d bytes", name, len(v), err, len(m.files[id]))
		}
		if ds.counters.Current().Hedged.Load() == before {
			t.Fatalf("read at %s: no hedged request counted", name)
		}
	}
	// A node that does not own the sample asks the stalled owner first
	// (the ring's order breaks the tie of no load), then the other owner.
	t.Run("not an owner", func(t *testing.T) { read(t, reader, id) })
	// The other owner asks the stalled one to read it through, then reads
	// the source itself. Samples of its own not read yet, so that they are
	// not already in its cache from the read above.
	var mine []int
	for i := range ds.len {
		if owners := node(other).owners(ds, uint32(i)); i != id && owners[0] == stalled && owners[1] == other {
			mine = append(mine, i)
		}
	}
	if len(mine) < 2 {
		t.Fatal("fewer than two samples owned by the stalled node first and the other owner next")
	}
	t.Run("owner", func(t *testing.T) { read(t, other, mine[0]) })
	// Two reads of one sample at the owner share one read through. The
	// first gives up while the stalled node holds that read: the second
	// still gets the bytes. (A peer's hedged request that lost is
	// cancelled the same way.)
	t.Run("a reader gives up", func(t *testing.T) {
		for len(entered) > 0 {
			<-entered
		}
		n := node(other)
		key := []byte(keyOfSample(n.ordered[0], uint32(mine[1])))
		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error, 1)
		go func() {
			_, _, err := n.Get(ctx, key, nil)
			gaveUp <- err
		}()
		<-entered // the shared read asks the stalled node first
		second := make(chan []byte, 1)
		go func() {
			v, _, err := n.Get(context.Background(), key, nil)
			if err != nil {
				t.Errorf("the second read: %v", err)
			}
			second <- v
		}()
		cancel()
		if err := <-gaveUp; err == nil {
			t.Log("the first read was answered before it gave up")
		}
		if v := <-second; !bytes.Equal(v, m.files[mine[1]]) {
			t.Fatalf("the second read got %d bytes, want the file's %d", len(v), len(m.files[mine[1]]))
		}
	})
}
