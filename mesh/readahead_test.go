package mesh

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/mesh/counters"
	"github.com/shade-mesh/shade/mesh/readahead"
	"github.com/shade-mesh/shade/protocol/stats"
	"github.com/shade-mesh/shade/transport"
)

// readBatch MGETs the ids through c and checks every byte.
func readBatch(ctx context.Context, c *redis.Client, files [][]byte, ids []int64) error {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = "ds/" + strconv.FormatInt(id, 10)
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		return err
	}
	for i, id := range ids {
		if s, ok := vals[i].(string); !ok || s != string(files[id]) {
			return fmt.Errorf("wrong bytes for %s", keys[i])
		}
	}
	return nil
}

// cursorOf returns where the read-ahead cursor of rank is, if any.
func cursorOf(n *Node, rank int) (pos, next int, ok bool) {
	pos, next, _, ok = n.readAhead.Cursor(n.ordered[0], "", rank)
	return pos, next, ok
}

// aheadReady reports whether every sample of slice[from:to] is in the
// read-ahead buffer or the cache.
func aheadReady(n *Node, slice []int64, from, to int) bool {
	for _, id := range slice[from:to] {
		if !n.readAhead.Ready(n.ordered[0], uint32(id)) &&
			!n.store.Has([]byte(keyOfSample(n.ordered[0], uint32(id)))) {
			return false
		}
	}
	return true
}

// TestReadAheadKeepsTheWindowAheadOfReads reads a rank's slice in
// minibatches and checks, after each, that the node has seen where the
// rank is and holds the next window samples in memory, and that what the
// rank has passed is let go.
func TestReadAheadKeepsTheWindowAheadOfReads(t *testing.T) { keepsWindow(t, 0) }

// TestReadAheadFollowsOrdersPublishedAhead: the same where orders run an
// epoch ahead, so the newest order (epoch 1) is not the one being read.
func TestReadAheadFollowsOrdersPublishedAhead(t *testing.T) { keepsWindow(t, 1) }

func keepsWindow(t *testing.T, ahead int) {
	const samples, window, batch = 1200, 96, 40
	dir, files := makeDataset(t, samples, 100, 100)
	p := startPeer(t, Config{
		OrderAhead: ahead,
		CacheSize:  32 << 10, Seed: 5, // a few percent of the data: nearly every read misses
		Datasets:       []DatasetConfig{{Name: "ds", Dir: dir}},
		SourceThrottle: dataset.ThrottleConfig{Latency: time.Millisecond, Concurrency: 8},
		Cluster:        ClusterConfig{Prefetch: window, JoinWait: 100 * time.Millisecond},
	}, transport.SocketConfig{})
	ctx := context.Background()
	c, slice := firstSlice(t, p)
	if len(slice) != samples {
		t.Fatalf("slice of %d samples, want %d", len(slice), samples)
	}
	ra := p.node.readAhead
	charge := p.node.store.Charge(len("ds/1000"), 100)
	for start := 0; start < len(slice); start += batch {
		end := min(start+window, len(slice))
		waitFor(t, 10*time.Second, fmt.Sprintf("samples %d..%d read ahead", start, end), func() bool {
			return aheadReady(p.node, slice, start, end)
		})
		if err := readBatch(ctx, c, files, slice[start:min(start+batch, len(slice))]); err != nil {
			t.Fatal(err)
		}
		pos, next, ok := cursorOf(p.node, 0)
		if !ok {
			if start+batch >= len(slice) {
				break // the slice is read: the cursor may have stopped
			}
			t.Fatalf("no cursor after reading to %d", start+batch)
		}
		if want := min(start+batch, len(slice)); pos != want {
			t.Fatalf("after reading positions %d..%d the cursor is at %d", start, want-1, pos)
		}
		if next > pos+window {
			t.Fatalf("the worker looked at position %d, beyond the window %d..%d", next, pos, pos+window)
		}
		held := ra.Stats().Bytes
		if limit := int64(window+readahead.Behind+readahead.Chunk) * charge; held > limit {
			t.Fatalf("%d bytes held read ahead, want at most %d (window and margin behind)", held, limit)
		}
	}
	st := p.node.ordered[0].stats().Epochs[0]
	t.Logf("epoch 0: %d hits, %d served from the read-ahead, %d fetched into it, %d dropped unread",
		st.Hits, st.PrefetchHits, ra.Stats().Fetched, ra.Stats().Unused)
	if st.PrefetchHits < samples*9/10 {
		t.Errorf("%d of %d reads served from the read-ahead; want nearly all", st.PrefetchHits, samples)
	}
}

// memoryShare trains one rank on node 0 of a 2-node mesh (so part of its
// slice is owned by node 1) over a throttled source, with some compute per
// minibatch, and returns the share of its reads served from memory.
func memoryShare(t *testing.T, prefetch int) (share float64, st stats.Epoch) {
	const samples, batch = 1500, 50
	m := startMesh(t, 2, meshOpts{samples: samples, minSize: 200, maxSize: 200, replicas: 1,
		cacheSize: samples * 200 / 10, // 20% of the data over the mesh
		configure: func(i int, c *Config) {
			c.Cluster.Prefetch = prefetch
			c.SourceThrottle = dataset.ThrottleConfig{Latency: 3 * time.Millisecond, Concurrency: 16}
		}})
	ctx := context.Background()
	c := m.peers[0].client(t)
	for e := 0; e < 2; e++ {
		slice, err := c.Do(ctx, "SHADE.ORDER", "ds", e, 0, 1, 30000).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for start := 0; start < len(slice); start += batch {
			ids := slice[start:min(start+batch, len(slice))]
			if err := readBatch(ctx, c, m.files, ids); err != nil {
				t.Fatal(err)
			}
			report := []any{"SHADE.REPORT", "ds", e}
			for _, id := range ids {
				report = append(report, id, float64(id%7))
			}
			if err := c.Do(ctx, report...).Err(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(25 * time.Millisecond) // the minibatch's compute
		}
		if err := c.Do(ctx, "SHADE.DONE", "ds", e, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, es := range m.peers[0].node.ordered[0].stats().Epochs {
		counters.AddEpoch(&st, es)
	}
	reads := st.Hits + st.ColdMisses + st.CapacityMisses
	return float64(st.Hits+st.PrefetchHits) / float64(max(1, reads)), st
}

func TestReadAheadServesMoreReadsFromMemory(t *testing.T) {
	off, stOff := memoryShare(t, -1)
	on, stOn := memoryShare(t, 256)
	t.Logf("reads served from memory over 2 epochs at a 20%% cache: prefetch off %.1f%% (hits %d), on %.1f%% (hits %d, from the read-ahead %d)",
		100*off, stOff.Hits, 100*on, stOn.Hits, stOn.PrefetchHits)
	if on < off+0.3 {
		t.Errorf("with prefetch %.1f%% of reads came from memory, without %.1f%%: want at least 30 points more", 100*on, 100*off)
	}
	if stOn.PrefetchHits == 0 {
		t.Error("no read was served from the read-ahead")
	}
}

// TestReadAheadStopsForANewerEpoch checks that the read-ahead of the next
// epoch starts when it is published, that the cursor on the old epoch
// ends, and that its samples are let go.
func TestReadAheadStopsForANewerEpoch(t *testing.T) {
	dir, files := makeDataset(t, 400, 50, 50)
	p := startPeer(t, Config{
		CacheSize: 8 << 10, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}},
		Cluster: ClusterConfig{Prefetch: 64, JoinWait: 100 * time.Millisecond},
	}, transport.SocketConfig{})
	ctx := context.Background()
	c, slice := firstSlice(t, p)
	if err := readBatch(ctx, c, files, slice[:100]); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "SHADE.DONE", "ds", 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Epoch 1 is published once the only rank is done: the read-ahead
	// starts on its slice before the rank asks for it.
	ra := p.node.readAhead
	waitFor(t, 5*time.Second, "a cursor on epoch 1 before the rank asks", func() bool {
		_, next, epoch, ok := ra.Cursor(p.node.ordered[0], "", 0)
		return ok && epoch == 1 && next > 0
	})
	if _, err := c.Do(ctx, "SHADE.ORDER", "ds", 1, 0, 1, 30000).Int64Slice(); err != nil {
		t.Fatal(err)
	}
	_, _, epoch, _ := ra.Cursor(p.node.ordered[0], "", 0)
	n, _ := ra.Len()
	if epoch != 1 || n != 1 {
		t.Fatalf("cursors after epoch 1 was asked: %d, following epoch %d; want one, on epoch 1", n, epoch)
	}
	// Only epoch 1's window is held: at most the window's samples.
	waitFor(t, 5*time.Second, "epoch 0's samples let go", func() bool {
		_, entries := ra.Len()
		return entries <= 64
	})
}

// firstSlice asks p for epoch 0 of a one-rank job on "ds" and returns the
// client it asked with and the rank's slice.
func firstSlice(t *testing.T, p *testPeer) (*redis.Client, []int64) {
	t.Helper()
	c := p.client(t)
	slice, err := c.Do(context.Background(), "SHADE.ORDER", "ds", 0, 0, 1, 30000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	return c, slice
}
