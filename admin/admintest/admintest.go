// Package admintest starts Shade nodes with their trainer sockets inside a
// test process: one standalone node, or a small mesh on loopback. It serves
// the tests of the admin listener, shadectl's cluster commands and the
// deployment files.
package admintest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/protocol/samplekey"
	"github.com/shade-mesh/shade/transport"
	"github.com/shade-mesh/shade/transport/peer"
)

// Config describes the peers to start. The zero value of every field means
// its default.
type Config struct {
	// Node is the node's name; "" means "node-a". In a mesh, nodes are
	// named Node-0, Node-1, ...
	Node string
	// Dataset is the one dataset's name; "" means "toy".
	Dataset string
	// Samples is the dataset's size; 0 means 40.
	Samples int
	// CacheSize is each node's cache in bytes; 0 means 8 MiB.
	CacheSize int64
	// Replicas is R in a mesh; 0 means the mesh's default (2).
	Replicas int
	// RequirePass is the trainer sockets' password; "" means none.
	RequirePass string
}

func (c Config) withDefaults() Config {
	if c.Node == "" {
		c.Node = "node-a"
	}
	if c.Dataset == "" {
		c.Dataset = "toy"
	}
	if c.Samples == 0 {
		c.Samples = 40
	}
	if c.CacheSize == 0 {
		c.CacheSize = 8 << 20
	}
	return c
}

// Peer is a node serving one dataset on a trainer socket in a temporary
// directory. Test cleanup closes both.
type Peer struct {
	Node    *mesh.Node
	Socket  string   // the trainer socket's path
	Dataset string   // the dataset's name
	Files   [][]byte // the samples' bytes, in manifest order

	password string
}

// Start serves a new dataset (see WriteDataset) from a new standalone node.
func Start(t testing.TB, cfg Config) *Peer {
	t.Helper()
	cfg = cfg.withDefaults()
	dir, files := WriteDataset(t, cfg.Dataset, cfg.Samples)
	return start(t, mesh.Config{
		Name:      cfg.Node,
		CacheSize: cfg.CacheSize,
		Datasets:  []mesh.DatasetConfig{{Name: cfg.Dataset, Dir: dir}},
	}, cfg, files)
}

// StartMesh starts k nodes on loopback, seeded from the first, all serving
// one new dataset, and waits until every node sees all k and they agree on
// a leader.
func StartMesh(t testing.TB, k int, cfg Config) []*Peer {
	t.Helper()
	cfg = cfg.withDefaults()
	dir, files := WriteDataset(t, cfg.Dataset, cfg.Samples)
	tlsDir := t.TempDir()
	var peers []*Peer
	for i := range k {
		name := fmt.Sprintf("%s-%d", cfg.Node, i)
		tlsCfg, err := peer.DevTLS(tlsDir, name)
		if err != nil {
			t.Fatal(err)
		}
		mc := mesh.Config{
			Name: name, CacheSize: cfg.CacheSize,
			Datasets: []mesh.DatasetConfig{{Name: cfg.Dataset, Dir: dir}},
			Cluster: mesh.ClusterConfig{
				GossipAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", TLS: tlsCfg, Profile: "local",
				Replicas: cfg.Replicas, Expect: k, JoinWait: time.Second,
				RetryEvery: 100 * time.Millisecond, FetchTimeout: time.Second, ReplicateEvery: 200 * time.Millisecond,
			},
		}
		if i > 0 {
			mc.Cluster.Seeds = []string{peers[0].Node.GossipAddr()}
		}
		peers = append(peers, start(t, mc, cfg, files))
	}
	WaitFor(t, 20*time.Second, "every node sees the whole mesh and one leader", func() bool {
		var want []string
		for _, p := range peers {
			want = append(want, p.Node.Name())
		}
		slices.Sort(want)
		leader := peers[0].Node.Leader()
		for _, p := range peers {
			if !slices.Equal(p.Node.Members(), want) || p.Node.Leader() != leader || leader == "" || !p.Node.Ready() {
				return false
			}
		}
		return true
	})
	return peers
}

func start(t testing.TB, mc mesh.Config, cfg Config, files [][]byte) *Peer {
	t.Helper()
	node, err := mesh.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	// A short directory: a Unix socket path is limited to 108 bytes and
	// t.TempDir() can be long.
	sockDir, err := os.MkdirTemp("", "shade-admintest-")
	if err != nil {
		node.Close()
		t.Fatal(err)
	}
	path := filepath.Join(sockDir, "shade.sock")
	sock, err := transport.ListenSocket(transport.SocketConfig{Path: path, RequirePass: cfg.RequirePass}, node)
	if err != nil {
		node.Close()
		os.RemoveAll(sockDir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sock.Close()
		node.Close()
		os.RemoveAll(sockDir)
	})
	return &Peer{Node: node, Socket: path, Dataset: cfg.Dataset, Files: files, password: cfg.RequirePass}
}

// WriteDataset writes n small files in torchvision's ImageFolder layout (4
// class folders) into t.TempDir() and returns the folder and the files'
// bytes in manifest order.
func WriteDataset(t testing.TB, name string, n int) (string, [][]byte) {
	t.Helper()
	dir := t.TempDir()
	const classes = 4
	perClass := (n + classes - 1) / classes
	files := make([][]byte, 0, n)
	// Manifest order is class folders by name, then files by name: files
	// are dealt to classes in blocks so that it is creation order.
	for i := range n {
		class := filepath.Join(dir, fmt.Sprintf("class%d", i/perClass))
		if err := os.MkdirAll(class, 0o755); err != nil {
			t.Fatal(err)
		}
		data := fmt.Appendf(nil, "sample %04d of %s:", i, name)
		data = append(data, bytes.Repeat([]byte{byte(i)}, 100+i)...)
		if err := os.WriteFile(filepath.Join(class, fmt.Sprintf("%04d.bin", i)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, data)
	}
	return dir, files
}

// Client returns a go-redis client of the trainer socket (RESP2), with the
// socket's password, closed at cleanup.
func (p *Peer) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Network: "unix", Addr: p.Socket, Password: p.password, Protocol: 2, ReadTimeout: 30 * time.Second,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// Key returns the key of sample i.
func (p *Peer) Key(i int) string { return samplekey.Format(p.Dataset, i) }

// WaitFor polls cond until it holds, failing the test after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
