package mesh

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/protocol/stats"
	"github.com/shade-mesh/shade/transport"
)

// TestMGetCountsAsGets reads the same keys, some more than once, with a
// cache too small for all of them, from three nodes: one key at a time by
// AppendGet (with a head, as the socket frames a reply), in batches
// through MGet, and in batches as an event loop answers MGET: through
// LendHeldPrefix, a prefix at a time, and through MGet where it declines. Every value must be
// byte-exact and framed, the trace the same, and the reads, hits and
// free-key counts add up alike. (Which samples the policy keeps may
// differ: a batch tells the policy of its hits before it admits its
// misses.)
func TestMGetCountsAsGets(t *testing.T) {
	dir, files := makeDataset(t, 200, 1000, 9000)
	traces := t.TempDir()
	ctx := context.Background()
	open := func(name string) *Node {
		n, err := New(Config{Name: name, CacheSize: 400 << 10, TracePath: filepath.Join(traces, name),
			Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	byGet, byMGet, byLend := open("get"), open("mget"), open("lend")
	for _, n := range []*Node{byGet, byMGet, byLend} {
		if _, err := n.Set([]byte("free"), []byte("free value")); err != nil {
			t.Fatal(err)
		}
	}
	var keys [][]byte
	for i := 0; i < 600; i++ {
		idx := i * 97 % 230 // some out of range
		if i%2 == 0 {
			idx = i % 25 // a hot set
		}
		keys = append(keys, fmt.Appendf(nil, "ds/%d", idx))
	}
	keys = append([][]byte{[]byte("free"), []byte("absent"), []byte("nope/1"), []byte("ds/x")}, keys...)
	// Every third batch of 8 is read again at once, so that its samples
	// are held when it is (an event loop answers such a batch).
	var again [][]byte
	for start := 0; start < len(keys); start += 8 {
		part := keys[start:min(start+8, len(keys))]
		again = append(again, part...)
		if len(part) == 8 && start%24 == 0 {
			again = append(again, part...)
		}
	}
	keys = again
	head := func(dst []byte, n int) []byte { return fmt.Appendf(dst, "<%d>", n) }
	// want is key's framed value, or "" where it has none.
	want := func(key []byte) string {
		if string(key) == "free" {
			return "<10>free value"
		}
		idx, err := strconv.Atoi(string(bytes.TrimPrefix(key, []byte("ds/"))))
		if err != nil || !bytes.HasPrefix(key, []byte("ds/")) || idx >= len(files) {
			return ""
		}
		return fmt.Sprintf("<%d>%s", len(files[idx]), files[idx])
	}
	check := func(how string, key, got []byte, found bool, err error) {
		t.Helper()
		if w := want(key); string(got) != "pre"+w || found != (w != "") || (err != nil) != (string(key) == "ds/x") {
			t.Fatalf("%s %s: %d bytes, found %v, err %v; want %d bytes", how, key, len(got), found, err, len(w)+3)
		}
	}
	for _, key := range keys {
		got, found, err := byGet.AppendGet(ctx, key, []byte("pre"), head)
		check("AppendGet", key, got, found, err)
	}
	for start := 0; start < len(keys); start += 8 {
		part := keys[start:min(start+8, len(keys))]
		batch := byMGet.MGet(ctx, part)
		for i, key := range part {
			got, found, err := batch.Append(i, []byte("pre"), head)
			check("MGet", key, got, found, err)
		}
		batch.Close()
	}
	// The loop's way: a batch lent a prefix at a time, each prefix's
	// values all lent or the prefix declined. A prefix ends where its
	// values would pass maxBytes; the rest of a batch whose prefix was
	// declined is answered through MGet, as the socket answers it.
	var lent, prefixes, declined int
	var held []transport.Held
	for start := 0; start < len(keys); start += 8 {
		part := keys[start:min(start+8, len(keys))]
		maxBytes := 1 << 20
		if start%48 == 0 {
			maxBytes = 9000 // one sample at most
		}
		for len(part) > 0 {
			var ok bool
			held, ok = byLend.LendHeldPrefix(ctx, part, maxBytes, held[:0])
			if !ok {
				declined++
				if len(held) != 0 || byLend.store.Stats().Loans != 0 {
					t.Fatalf("a declined prefix left %d answers and %d loans", len(held), byLend.store.Stats().Loans)
				}
				batch := byLend.MGet(ctx, part)
				for i, key := range part {
					got, found, err := batch.Append(i, []byte("pre"), head)
					check("MGet after LendHeldPrefix", key, got, found, err)
				}
				batch.Close()
				break
			}
			if len(held) == 0 {
				t.Fatalf("LendHeldPrefix answered none of %d keys", len(part))
			}
			lent++
			if len(held) < len(part) {
				prefixes++
			}
			bytes := 0
			for i, h := range held {
				key := part[i]
				got := []byte("pre")
				if h.Found {
					got = append(head(got, len(h.Loan.Value)), h.Loan.Value...)
					bytes += len(h.Loan.Value)
					byLend.Return(h.Loan.Token)
				}
				check("LendHeldPrefix", key, got, h.Found, h.Err)
			}
			if len(held) > 1 && bytes > maxBytes {
				t.Fatalf("a prefix of %d keys lent %d bytes, more than %d", len(held), bytes, maxBytes)
			}
			part = part[len(held):]
		}
	}
	if lent == 0 || prefixes == 0 || declined == 0 || byLend.store.Stats().Loans != 0 {
		t.Errorf("LendHeldPrefix answered %d prefixes (%d short of their batch) and declined %d; %d loans out", lent, prefixes, declined, byLend.store.Stats().Loans)
	}
	a, b, c := byGet.Snapshot(), byMGet.Snapshot(), byLend.Snapshot()
	reads := func(st stats.Node) []int64 {
		d := st.Datasets[0]
		var deciles int64
		for _, r := range d.DecileReads {
			deciles += r
		}
		return []int64{d.Total.Hits + d.Total.ColdMisses + d.Total.CapacityMisses, deciles, st.FreeKeys.Hits, st.FreeKeys.Misses}
	}
	if ra, rb, rc := reads(a), reads(b), reads(c); !slices.Equal(ra, rb) || !slices.Equal(ra, rc) {
		t.Errorf("reads, decile reads, free hits and misses: by AppendGet %v, by MGet %v, by LendHeldPrefix %v", ra, rb, rc)
	}
	for _, st := range []stats.Node{a, b, c} {
		if d := st.Datasets[0]; d.Total.Hits == 0 || d.Total.Evictions == 0 || st.FreeKeys.Hits != 2 || st.FreeKeys.Misses != 4 { // the first batch, with the free keys, is read twice
			t.Errorf("the reads did not cover hits, evictions and free keys: %+v", st)
		}
	}
	byGet.Close()
	byMGet.Close()
	byLend.Close()
	ta, err := os.ReadFile(filepath.Join(traces, "get"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mget", "lend"} {
		tb, err := os.ReadFile(filepath.Join(traces, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ta, tb) || len(ta) == 0 {
			t.Errorf("traces of get and %s differ (%d and %d bytes)", name, len(ta), len(tb))
		}
	}
}

// TestSocketReadsUnderEviction: trainers read through the socket, by MGET
// (replies long enough to be written out between values) and by pipelined
// GETs, while their own misses evict what the others are reading from a
// cache of a few samples. Every value must be the file's bytes.
func TestSocketReadsUnderEviction(t *testing.T) {
	dir, files := makeDataset(t, 160, 1000, 60000)
	p := startPeer(t, Config{CacheSize: 512 << 10, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	ctx := context.Background()
	err := testsupport.Parallel(4, func(r int) error {
		c := p.client(t)
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		for round := 0; round < 30; round++ {
			ids := make([]int, 48)
			for i := range ids {
				ids[i] = rng.IntN(len(files))
			}
			keys := make([]string, len(ids))
			for i, id := range ids {
				keys[i] = "ds/" + strconv.Itoa(id)
			}
			vals, err := c.MGet(ctx, keys...).Result()
			if err != nil {
				return err
			}
			for i, v := range vals {
				if s, ok := v.(string); !ok || s != string(files[ids[i]]) {
					return fmt.Errorf("MGET %s: wrong bytes", keys[i])
				}
			}
			// Short enough for an event loop to answer where it holds
			// every value.
			vals, err = c.MGet(ctx, keys[:8]...).Result()
			if err != nil {
				return err
			}
			for i, v := range vals {
				if s, ok := v.(string); !ok || s != string(files[ids[i]]) {
					return fmt.Errorf("short MGET %s: wrong bytes", keys[i])
				}
			}
			pipe := c.Pipeline()
			gets := make([]*redis.StringCmd, 16)
			for i := range gets {
				gets[i] = pipe.Get(ctx, keys[i])
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			for i, g := range gets {
				if g.Val() != string(files[ids[i]]) {
					return fmt.Errorf("GET %s: wrong bytes", keys[i])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := p.node.Snapshot(); st.Datasets[0].Total.Evictions == 0 || st.Datasets[0].Total.Hits == 0 {
		t.Errorf("the reads did not both hit and evict: %+v", st.Datasets[0].Total)
	}
	p.loansBack(t)
}

// gatedSource is a directory source whose reads wait, until gate is
// closed, and count how many are under way at once.
type gatedSource struct {
	*dataset.Dir
	gate     chan struct{}
	inflight atomic.Int64
	most     atomic.Int64
	started  chan struct{} // one send a read
}

func (s *gatedSource) Read(i int, dst []byte) ([]byte, error) {
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	s.started <- struct{}{}
	<-s.gate
	return s.Dir.Read(i, dst)
}

// TestMGetReadsMissesWithinSourceReads: an MGET of 64 samples none of
// which is held reads them all, right, with SourceReads (4) source reads
// under way at once and never more.
func TestMGetReadsMissesWithinSourceReads(t *testing.T) {
	data := testsupport.WriteDataset(t, testsupport.DatasetSpec{Samples: 64, MinSize: 100, MaxSize: 400, Seed: 3})
	dir, err := dataset.OpenDir(data.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := &gatedSource{Dir: dir, gate: make(chan struct{}), started: make(chan struct{}, 64)}
	n, err := New(Config{Name: "n", CacheSize: 1 << 20, SourceReads: 4,
		Datasets: []DatasetConfig{{Name: "ds", Source: src}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	keys := make([][]byte, 64)
	for i := range keys {
		keys[i] = []byte(testsupport.Key("ds", i))
	}
	done := make(chan transport.Batch)
	go func() { done <- n.MGet(context.Background(), keys) }()
	for k := range 4 { // four reads wait at the gate
		select {
		case <-src.started:
		case <-time.After(20 * time.Second): // a guard against a hang, not a measure
			t.Fatalf("%d source reads began, want 4", k)
		}
	}
	close(src.gate)
	b := <-done
	defer b.Close()
	for i := range keys {
		v, found, err := b.Append(i, nil, nil)
		if err != nil || !found {
			t.Fatalf("sample %d: found %v, %v", i, found, err)
		}
		if err := data.Check(i, v); err != nil {
			t.Fatal(err)
		}
	}
	if most := src.most.Load(); most != 4 {
		t.Fatalf("%d source reads under way at once, want 4 (SourceReads)", most)
	}
}
