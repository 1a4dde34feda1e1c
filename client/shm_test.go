package client

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// TestSharedMemoryServesHits: a client on the peer's node maps its memory
// and copies held samples out of it; the bytes are the files'.
func TestSharedMemoryServesHits(t *testing.T) {
	if !sharedSupported {
		t.Skip("zero-copy reads need amd64")
	}
	d, sock := startToy(t)
	ctx := t.Context()
	c := newClient(t, Options{Socket: sock})
	if !c.SharedMemory() {
		t.Fatal("the client did not map the peer's memory")
	}
	ids := make([]int, len(d.Files))
	for i := range ids {
		ids[i] = i
	}
	for pass := range 2 { // the first reads through, the second hits
		got, err := c.MGet(ctx, "toy", ids)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ids {
			if !bytes.Equal(got[i], d.Files[i]) {
				t.Fatalf("pass %d: sample %d differs", pass, i)
			}
		}
	}
	if got, err := c.Get(ctx, "toy", 3); err != nil || !bytes.Equal(got, d.Files[3]) {
		t.Fatalf("Get = %d bytes, %v", len(got), err)
	}
	if n := c.shm.copied.Load(); n < int64(len(ids)) {
		t.Fatalf("%d samples copied from shared memory, want at least %d", n, len(ids))
	}

	plain := newClient(t, Options{Socket: sock, NoSharedMemory: true})
	if plain.SharedMemory() {
		t.Fatal("NoSharedMemory client mapped the memory")
	}
	got, err := plain.MGet(ctx, "toy", ids)
	if err != nil || !bytes.Equal(got[5], d.Files[5]) || plain.shm.copied.Load() != 0 {
		t.Fatalf("plain MGet: %v, copied %d", err, plain.shm.copied.Load())
	}
}

// TestSharedMemoryUnderEviction: readers copy samples out of the peer's
// memory while their own misses evict other samples from a cache far
// smaller than the dataset. Every byte is checked against the files.
func TestSharedMemoryUnderEviction(t *testing.T) {
	if !sharedSupported {
		t.Skip("zero-copy reads need amd64")
	}
	const n = 240
	ds := testsupport.WriteDataset(t, testsupport.DatasetSpec{
		Classes: []string{"0", "1", "2"}, Samples: n, MinSize: 1024, MaxSize: 7023, Seed: 3,
	})
	sock := socketPath(t)
	startPeer(t, sock, "--dataset", "ds="+ds.Dir, "--cache-size", "160KiB", "--policy", "lru")
	ctx := t.Context()
	c := newClient(t, Options{Socket: sock})
	if !c.SharedMemory() {
		t.Fatal("the client did not map the peer's memory")
	}
	if err := testsupport.Parallel(4, func(g int) error {
		r := rand.New(rand.NewPCG(uint64(g), 9))
		ids := make([]int, 16)
		for loop := range 150 {
			for j := range ids {
				ids[j] = r.IntN(40) // a hot set that mostly fits ...
				if j%4 == 0 {
					ids[j] = r.IntN(n) // ... and misses that evict it
				}
			}
			got, err := c.MGet(ctx, "ds", ids)
			if err != nil {
				return fmt.Errorf("loop %d: %w", loop, err)
			}
			for j, id := range ids {
				if err := ds.Check(id, got[j]); err != nil {
					return fmt.Errorf("loop %d: %w", loop, err)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	copied, moved := c.shm.copied.Load(), c.shm.moved.Load()
	t.Logf("copied from shared memory %d, moved before their copy (read again) %d", copied, moved)
	if copied == 0 {
		t.Fatal("no sample was copied from shared memory")
	}
}
