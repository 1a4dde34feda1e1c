package mesh

import (
	"context"
	"errors"
	"testing"

	"github.com/shade-mesh/shade/transport/peer"
)

// TestFetchRepliesWithinPeerMemory: a fetch whose reply would not fit in
// the serving node's --max-peer-memory is refused with CodeUnavailable
// before any sample is read, the memory is given back, and a fetch that
// fits is served.
func TestFetchRepliesWithinPeerMemory(t *testing.T) {
	m := startMesh(t, 2, meshOpts{samples: 40, minSize: 8 << 10, maxSize: 8 << 10, replicas: 2,
		configure: func(_ int, c *Config) { c.Cluster.MaxPeerMemory = 64 << 10 }})
	a, b := m.peers[0].node, m.peers[1].node
	ds := a.ordered[0]
	ctx := context.Background()
	all := make([]uint32, 16) // 128 KiB of samples: over the 64 KiB
	for i := range all {
		all[i] = uint32(i)
	}
	_, err := a.fetchFrom(ctx, b.Name(), ds, all, fetchMode{})
	if !errors.Is(err, &peer.Error{Code: peer.CodeUnavailable}) {
		t.Fatalf("a fetch of 128 KiB against 64 KiB of peer memory: %v, want CodeUnavailable", err)
	}
	if used := b.cluster.serving.Used(); used != 0 {
		t.Fatalf("%d bytes still held after the refusal", used)
	}
	items, err := a.fetchFrom(ctx, b.Name(), ds, all[:4], fetchMode{})
	if err != nil {
		t.Fatalf("a fetch of 32 KiB: %v", err)
	}
	for i, it := range items {
		if !it.Found || string(it.Value) != string(m.files[i]) {
			t.Fatalf("sample %d: found %v, %d bytes, want the file's %d", i, it.Found, len(it.Value), len(m.files[i]))
		}
	}
}
