package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

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

// TestMGetIntoReusesBuffers: MGetInto puts each sample into the buffer of
// the same index where it has room, growing those too short, and returns
// a slice on dst's array; read through, held in shared memory, or over
// the socket alike, the bytes are the files'.
func TestMGetIntoReusesBuffers(t *testing.T) {
	d, sock := startToy(t)
	ctx := t.Context()
	ids := []int{3, 0, 17, 3, 9, 12}
	for _, o := range []Options{{Socket: sock}, {Socket: sock, NoSharedMemory: true}} {
		c := newClient(t, o)
		dst := make([][]byte, len(ids)+2, len(ids)+4) // longer than the batch
		for k := range dst {
			dst[k] = make([]byte, 0, 4000) // room for any sample of the dataset
		}
		dst[1] = make([]byte, 0, 1) // too short: grown
		bufs := make([]*byte, len(dst))
		for k := range dst {
			bufs[k] = unsafe.SliceData(dst[k])
		}
		for pass := range 3 { // read through, then held
			got, err := c.MGetInto(ctx, "toy", ids, dst)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ids) || unsafe.SliceData(got) != unsafe.SliceData(dst) {
				t.Fatalf("shared memory %v, pass %d: %d results, on dst's array %v", c.SharedMemory(), pass, len(got), unsafe.SliceData(got) == unsafe.SliceData(dst))
			}
			for k, id := range ids {
				if !bytes.Equal(got[k], d.Files[id]) {
					t.Fatalf("shared memory %v, pass %d: sample %d differs", c.SharedMemory(), pass, id)
				}
				if k != 1 && unsafe.SliceData(got[k]) != bufs[k] {
					t.Fatalf("shared memory %v, pass %d: sample %d not in its buffer", c.SharedMemory(), pass, id)
				}
			}
			dst = got
		}
	}
	c := newClient(t, Options{Socket: sock})
	if got, err := c.MGetInto(ctx, "toy", nil, make([][]byte, 3)); err != nil || len(got) != 0 {
		t.Fatalf("no ids: %d results, %v", len(got), err)
	}
	// A missing sample: no samples, the buffers kept past the length.
	dst := [][]byte{make([]byte, 0, 4000), make([]byte, 0, 4000)}
	got, err := c.MGetInto(ctx, "toy", []int{2, len(d.Files)}, dst)
	if !errors.Is(err, ErrNotFound) || len(got) != 0 || cap(got) < 2 || unsafe.SliceData(got[:2][1]) != unsafe.SliceData(dst[1]) {
		t.Fatalf("a missing sample: %d results, %v", len(got), err)
	}
	if got, err := c.MGet(ctx, "toy", []int{2, len(d.Files)}); got != nil || !errors.Is(err, ErrNotFound) {
		t.Fatalf("MGet of a missing sample: %d results, %v", len(got), err)
	}
}

// BenchmarkMGet reads batches of 64 samples of 100 KiB held in the peer's
// memory, copied out of it (shared memory), into fresh slices (MGet) and
// into the slices of the batch before (MGetInto). ns/op is per batch.
func BenchmarkMGet(b *testing.B) {
	const samples, size, batch = 512, 100 << 10, 64
	ds := testsupport.WriteDataset(b, testsupport.DatasetSpec{Samples: samples, MinSize: size, MaxSize: size, Seed: 1})
	sock := socketPath(b)
	testsupport.StartPeer(b, testsupport.PeerOptions{
		Bin: bins.Path("shade-peer"), Socket: sock,
		Args: []string{"--name", "client-bench", "--log-format", "json", "--cache-size", "256MiB", "--dataset", "ds=" + ds.Dir},
	})
	c, err := New(Options{Socket: sock})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if !c.SharedMemory() {
		b.Skip("the client could not map the peer's memory")
	}
	ctx := context.Background()
	if _, err := c.Warm(ctx, "ds"); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]int, batch)
	draw := func() {
		for i := range ids {
			ids[i] = rng.IntN(samples)
		}
	}
	b.Run("fresh", func(b *testing.B) {
		b.SetBytes(batch * size)
		for b.Loop() {
			draw()
			if _, err := c.MGet(ctx, "ds", ids); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("into", func(b *testing.B) {
		b.SetBytes(batch * size)
		var bufs [][]byte
		for b.Loop() {
			draw()
			if bufs, err = c.MGetInto(ctx, "ds", ids, bufs); err != nil {
				b.Fatal(err)
			}
		}
	})
}
