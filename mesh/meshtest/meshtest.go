// Package meshtest starts Shade nodes inside a test process, each with its
// trainer socket: one standalone node, or a mesh of k nodes on loopback
// that it waits on until they agree. It is the one in-process cluster
// harness: the tests of admin, shadectl and the deployment files use it
// directly; package mesh's own tests (which cannot import it, since it
// imports mesh) reach StartMesh through mesh.StartMeshForTest, which
// mesh/meshtest_hook_test.go sets.
//
// For tests only. Everything listens on 127.0.0.1 or on a Unix socket in
// a temporary directory; test cleanup closes every node and socket.
package meshtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/transport"
	"github.com/shade-mesh/shade/transport/peer"
)

// Options describe the nodes to start. The zero value of every field
// means its default.
type Options struct {
	// Node names a standalone node; in a mesh node i is Node followed by
	// i. "" means "n".
	Node string
	// Dataset is the one dataset's name; "" means "ds".
	Dataset string
	// Data is the dataset written for the nodes (testsupport's defaults:
	// 100 samples of 30 to 230 bytes in 10 classes).
	Data testsupport.DatasetSpec
	// CacheSize is each node's cache in bytes; 0 means 16 MiB.
	CacheSize int64
	// Replicas is R in a mesh; 0 means the mesh's default.
	Replicas int
	// Expect is the mesh's expected size; 0 means k.
	Expect int
	// RequirePass is the trainer sockets' password; "" means none.
	RequirePass string
	// TLSDir holds the mesh's development CA; "" means a new temporary
	// folder (two meshes with one TLSDir trust each other).
	TLSDir string
	// Configure, when set, adjusts node i's configuration last.
	Configure func(i int, c *mesh.Config, sc *transport.SocketConfig)
}

func (o Options) withDefaults() Options {
	if o.Node == "" {
		o.Node = "n"
	}
	if o.Dataset == "" {
		o.Dataset = "ds"
	}
	if o.CacheSize == 0 {
		o.CacheSize = 16 << 20
	}
	return o
}

// Peer is a node serving one dataset on its trainer socket.
type Peer struct {
	Node    *mesh.Node
	Server  *transport.SocketServer
	Socket  string               // the trainer socket's path
	Dataset string               // the dataset's name
	Data    *testsupport.Dataset // the dataset's samples, in manifest order

	password string
}

// Mesh is k nodes that see each other.
type Mesh struct {
	Peers []*Peer
	Data  *testsupport.Dataset

	opts Options // as StartMesh was given them, with defaults
}

// Start serves a new dataset from one standalone node.
func Start(tb testing.TB, o Options) *Peer {
	tb.Helper()
	o = o.withDefaults()
	data := testsupport.WriteDataset(tb, o.Data)
	cfg := mesh.Config{
		Name: o.Node, CacheSize: o.CacheSize,
		Datasets: []mesh.DatasetConfig{{Name: o.Dataset, Dir: data.Dir}},
	}
	sc := transport.SocketConfig{RequirePass: o.RequirePass}
	if o.Configure != nil {
		o.Configure(0, &cfg, &sc)
	}
	return start(tb, cfg, sc, o.Dataset, data)
}

// StartMesh starts k nodes on loopback, seeded from the first, all serving
// one new dataset, and waits until every node sees all k and they agree on
// a leader.
func StartMesh(tb testing.TB, k int, o Options) *Mesh {
	tb.Helper()
	o = o.withDefaults()
	if o.Expect == 0 {
		o.Expect = k
	}
	if o.TLSDir == "" {
		o.TLSDir = tb.TempDir()
	}
	m := &Mesh{Data: testsupport.WriteDataset(tb, o.Data), opts: o}
	for range k {
		m.Add(tb, nil)
	}
	m.WaitConverged(tb, m.Peers, 20*time.Second)
	return m
}

// Add starts one more node, named and configured as StartMesh names and
// configures node len(m.Peers) (Options.Configure applies), then
// configure, when set. It is seeded from the first node and returns as
// soon as it serves; the caller waits for whatever it needs (see
// WaitConverged).
func (m *Mesh) Add(tb testing.TB, configure func(c *mesh.Config, sc *transport.SocketConfig)) *Peer {
	tb.Helper()
	o, i := m.opts, len(m.Peers)
	name := fmt.Sprintf("%s%d", o.Node, i)
	tlsCfg, err := peer.DevTLS(o.TLSDir, name)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := mesh.Config{
		Name: name, CacheSize: o.CacheSize, Seed: 7,
		Datasets: []mesh.DatasetConfig{{Name: o.Dataset, Dir: m.Data.Dir}},
		// Orders run ahead where a test asks for it, never because
		// a draw was slowed by the busy machine the tests run on.
		OrderAheadAt: -1,
		Cluster: mesh.ClusterConfig{
			GossipAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", TLS: tlsCfg, Profile: "local",
			Replicas: o.Replicas, Expect: o.Expect, JoinWait: time.Second,
			RetryEvery: 100 * time.Millisecond, FetchTimeout: time.Second, ReplicateEvery: 200 * time.Millisecond,
			DrainTimeout: 2 * time.Second, // bounds the hand-over at each test's cleanup
		},
	}
	if i > 0 {
		cfg.Cluster.Seeds = []string{m.Peers[0].Node.GossipAddr()}
	}
	sc := transport.SocketConfig{RequirePass: o.RequirePass, MaxOrderWait: time.Minute}
	if o.Configure != nil {
		o.Configure(i, &cfg, &sc)
	}
	if configure != nil {
		configure(&cfg, &sc)
	}
	p := start(tb, cfg, sc, o.Dataset, m.Data)
	m.Peers = append(m.Peers, p)
	return p
}

func start(tb testing.TB, cfg mesh.Config, sc transport.SocketConfig, dataset string, data *testsupport.Dataset) *Peer {
	tb.Helper()
	node, err := mesh.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if sc.Path == "" {
		// A short folder: a Unix socket path is limited to 108 bytes and
		// tb.TempDir() can be long.
		dir, err := os.MkdirTemp("", "shade-meshtest-")
		if err != nil {
			node.Close()
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(dir) })
		sc.Path = filepath.Join(dir, "shade.sock")
	}
	srv, err := transport.ListenSocket(sc, node)
	if err != nil {
		node.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		srv.Close()
		node.Close()
	})
	return &Peer{Node: node, Server: srv, Socket: sc.Path, Dataset: dataset, Data: data, password: sc.RequirePass}
}

// Converged reports whether the given peers all serve, see exactly each
// other, name one leader, and agree on who shares their datasets with
// whom (testsupport.SameSharing).
func Converged(ps []*Peer) bool {
	nodes := make([]*mesh.Node, len(ps))
	serving := map[string][]*mesh.Node{}
	for i, p := range ps {
		if !p.Node.Ready() {
			return false
		}
		nodes[i] = p.Node
		serving[p.Dataset] = append(serving[p.Dataset], p.Node)
	}
	if !testsupport.SameView(nodes) {
		return false
	}
	for ds, nodes := range serving {
		if !testsupport.SameSharing(nodes, ds) {
			return false
		}
	}
	return true
}

// WaitConverged waits (at most d) until Converged(ps), and returns how
// long that took.
func (m *Mesh) WaitConverged(tb testing.TB, ps []*Peer, d time.Duration) time.Duration {
	tb.Helper()
	return testsupport.WaitFor(tb, d, "every node sees the whole mesh and one leader", func() bool { return Converged(ps) })
}

// ByName returns the peer whose node is named name, or nil.
func (m *Mesh) ByName(name string) *Peer {
	for _, p := range m.Peers {
		if p.Node.Name() == name {
			return p
		}
	}
	return nil
}

// Client returns a go-redis client of the trainer socket (RESP2), with the
// socket's password, closed at cleanup.
func (p *Peer) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{
		Network: "unix", Addr: p.Socket, Password: p.password, Protocol: 2, ReadTimeout: 30 * time.Second,
	})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Key returns the key of sample i.
func (p *Peer) Key(i int) string { return testsupport.Key(p.Dataset, i) }
