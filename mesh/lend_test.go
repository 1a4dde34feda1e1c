package mesh

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/transport"
)

// lendValue is version v of key k: the two numbers, then bytes derived
// from them, 8 to 40 KiB in all, so that GET lends it.
func lendValue(k, v int) []byte {
	return testsupport.AppendVersion(nil, k, uint64(v), 8<<10+(k*7919+v*104729)%(32<<10))
}

// TestLentGetsUnderEviction pipelines GETs, and sends MGETs, of values
// that the socket lends from the cache while other clients replace, delete
// and evict them: every reply is nil or exactly a version of its key,
// every loan is given back, and no cached value fails its checksum.
func TestLentGetsUnderEviction(t *testing.T) {
	const (
		keys     = 64
		readers  = 4
		writers  = 2
		rounds   = 150
		pipeline = 16
	)
	// About a third of the keys' values fit: SETs evict.
	p := startPeer(t, Config{CacheSize: 768 << 10}, transport.SocketConfig{})
	ctx := context.Background()
	key := func(k int) string { return fmt.Sprintf("lend:%d", k) }
	var wg sync.WaitGroup
	errs := make(chan error, readers+writers)
	for w := range writers {
		c := p.client(t)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range rounds * pipeline / 2 {
				k := rng.IntN(keys)
				var err error
				if i%5 == 4 {
					err = c.Del(ctx, key(k)).Err()
				} else {
					err = c.Set(ctx, key(k), lendValue(k, i), 0).Err()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for r := range readers {
		c := p.client(t)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			for range rounds {
				pipe := c.Pipeline()
				ks := make([]int, pipeline)
				cmds := make([]*redis.StringCmd, pipeline)
				for j := range ks {
					ks[j] = rng.IntN(keys)
					cmds[j] = pipe.Get(ctx, key(ks[j]))
				}
				if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
					errs <- err
					return
				}
				check := func(how string, k int, got []byte) error {
					if len(got) < 16 || int(binary.LittleEndian.Uint64(got)) != k ||
						!bytes.Equal(got, lendValue(k, int(binary.LittleEndian.Uint64(got[8:])))) {
						return fmt.Errorf("%s %s: %d bytes that are no version of it", how, key(k), len(got))
					}
					return nil
				}
				for j, cmd := range cmds {
					got, err := cmd.Bytes()
					if errors.Is(err, redis.Nil) {
						continue
					}
					if err == nil {
						err = check("GET", ks[j], got)
					}
					if err != nil {
						errs <- err
						return
					}
				}
				// The same keys by MGET, short enough for an event loop
				// to answer where every value is held.
				names := make([]string, 8)
				for j := range names {
					names[j] = key(ks[j])
				}
				vals, err := c.MGet(ctx, names...).Result()
				for j, v := range vals {
					if s, ok := v.(string); ok && err == nil {
						err = check("MGET", ks[j], []byte(s))
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := p.node.store.Stats()
	if st.Corrupt != 0 || st.Hits == 0 || st.Deletes == 0 {
		t.Fatalf("store: %d corrupt, %d hits, %d deletes", st.Corrupt, st.Hits, st.Deletes)
	}
	p.loansBack(t)
}

// TestLoansComeBackWhenTheClientLeaves: a client that pipelines GETs of
// lent values and hangs up without reading the replies leaves no loan out,
// so no cached block stays pinned.
func TestLoansComeBackWhenTheClientLeaves(t *testing.T) {
	p := startPeer(t, Config{CacheSize: 4 << 20}, transport.SocketConfig{})
	ctx := context.Background()
	c := p.client(t)
	for k := range 32 {
		if err := c.Set(ctx, fmt.Sprintf("lend:%d", k), lendValue(k, 1), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	for round := range 5 {
		conn, err := net.Dial("unix", p.path)
		if err != nil {
			t.Fatal(err)
		}
		var pipeline []byte
		for i := range 256 {
			key := fmt.Sprintf("lend:%d", (i+round)%32)
			pipeline = fmt.Appendf(pipeline, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n", len(key), key)
		}
		if _, err := conn.Write(pipeline); err != nil {
			t.Fatal(err)
		}
		// Read a little, so that the peer is writing lent values out, then
		// hang up.
		if _, err := conn.Read(make([]byte, 1024)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	testsupport.WaitFor(t, 10*time.Second, "the connections to close and every loan to come back", func() bool {
		return p.sock.Connections() == 0 && p.node.store.Stats().Loans == 0
	})
	if got, err := p.client(t).Get(ctx, "lend:3").Bytes(); err != nil || !bytes.Equal(got, lendValue(3, 1)) {
		t.Fatalf("GET after the hang-ups: %d bytes, %v", len(got), err)
	}
}

// TestMGetFromTheLoop sends MGETs of samples all held in memory, some
// shorter than transport.MinLent (copied into the reply) and some longer
// (lent), mixed with a free-form key, an absent one, an index out of
// range and a malformed one: an event loop answers them itself. Every
// reply must be exact, every read counted as a hit, and every loan given
// back.
func TestMGetFromTheLoop(t *testing.T) {
	dir, files := makeDataset(t, 40, 200, 2*transport.MinLent)
	p := startPeer(t, Config{CacheSize: 4 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	ctx := context.Background()
	c := p.client(t)
	free := bytes.Repeat([]byte("free"), 1500)
	if err := c.Set(ctx, "free", free, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if _, err := c.Get(ctx, fmt.Sprintf("ds/%d", i)).Bytes(); err != nil {
			t.Fatal(err)
		}
		if !p.node.store.Has(fmt.Appendf(nil, "ds/%d", i)) {
			t.Fatalf("ds/%d was not admitted", i)
		}
	}
	before := p.node.Snapshot().Datasets[0].Total
	rng := rand.New(rand.NewPCG(1, 2))
	sampleReads := 0
	for range 50 {
		keys := make([]string, 1+rng.IntN(30))
		for i := range keys {
			switch r := rng.IntN(20); r {
			case 0:
				keys[i] = "free"
			case 1:
				keys[i] = "absent"
			case 2:
				keys[i] = "ds/999"
			case 3:
				keys[i] = "ds/x"
			default:
				keys[i] = fmt.Sprintf("ds/%d", rng.IntN(len(files)))
				sampleReads++
			}
		}
		vals, err := c.MGet(ctx, keys...).Result()
		if err != nil {
			t.Fatalf("MGET %v: %v", keys, err)
		}
		for i, k := range keys {
			var want any
			switch {
			case k == "free":
				want = string(free)
			case k == "ds/x":
				if e, ok := vals[i].(error); !ok || !strings.Contains(e.Error(), "index") {
					t.Fatalf("MGET %s: %v, want an error", k, vals[i])
				}
				continue
			case strings.HasPrefix(k, "ds/") && k != "ds/999":
				var idx int
				fmt.Sscanf(k, "ds/%d", &idx)
				want = string(files[idx])
			}
			if vals[i] != want {
				t.Fatalf("MGET %s: %.20v, want %.20v", k, vals[i], want)
			}
		}
	}
	after := p.node.Snapshot().Datasets[0].Total
	if hits, misses := after.Hits-before.Hits, after.ColdMisses+after.CapacityMisses-before.ColdMisses-before.CapacityMisses; hits != int64(sampleReads) || misses != 0 {
		t.Errorf("%d hits and %d misses counted for %d reads of samples held", hits, misses, sampleReads)
	}
	p.loansBack(t)
}

// TestLongMGetLentInParts: an MGET of more values than a loop answers
// (256 KiB) goes to a goroutine, which lends the values of each chunk held
// in memory, as a loop does, and copies those of a part with a sample to
// read through. Lent values are still out while the client has
// not read them; every reply is exact and in its place, parts lent and
// copied in any mix, and every loan comes back.
func TestLongMGetLentInParts(t *testing.T) {
	dir, files := makeDataset(t, 30, 300<<10, 500<<10)
	p := startPeer(t, Config{CacheSize: 64 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	ctx := context.Background()
	c := p.client(t)
	if err := c.Set(ctx, "free", "a free-form value", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const held = 24 // samples 24.. are read through by the first MGET
	var keys []string
	for i := range held {
		keys = append(keys, fmt.Sprintf("ds/%d", i))
		if _, err := c.Get(ctx, keys[i]).Bytes(); err != nil {
			t.Fatal(err)
		}
	}

	// Unread, the first part's values stay lent.
	_, br := sendUnread(t, p, keys)
	readSamples(t, br, files, held)

	// Every sample, a free-form key and an absent one, shuffled: the
	// first time with samples to read through, then all held.
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 3 {
		keys := []string{"free", "absent"}
		for i := range files {
			keys = append(keys, fmt.Sprintf("ds/%d", i))
		}
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		vals, err := c.MGet(ctx, keys...).Result()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, k := range keys {
			var want any
			switch k {
			case "free":
				want = "a free-form value"
			case "absent":
			default:
				var idx int
				fmt.Sscanf(k, "ds/%d", &idx)
				want = string(files[idx])
			}
			if vals[i] != want {
				t.Fatalf("round %d: MGET %s: %.20v, want %.20v", round, k, vals[i], want)
			}
		}
	}
	p.loansBack(t)
}

// TestMGetGoesOnFromTheLoop: an event loop answers an MGET's first
// values held in memory itself and a goroutine goes on from the first
// value to read through: the reply is one array, every value exact and in
// its place, each read counted once, and every loan comes back. The same
// holds where the loop stops because the client does not read.
func TestMGetGoesOnFromTheLoop(t *testing.T) {
	dir, files := makeDataset(t, 60, 90<<10, 110<<10)
	p := startPeer(t, Config{CacheSize: 64 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	ctx := context.Background()
	c := p.client(t)
	key := func(i int) string { return fmt.Sprintf("ds/%d", i) }
	for i := range 50 {
		if _, err := c.Get(ctx, key(i)).Bytes(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(keys []string, vals []any) {
		t.Helper()
		for i, k := range keys {
			var idx int
			fmt.Sscanf(k, "ds/%d", &idx)
			if vals[i] != string(files[idx]) {
				t.Fatalf("MGET %s (place %d): %.20v, want %.20v", k, i, vals[i], files[idx])
			}
		}
	}
	// 1 MiB held, then a sample to read through, then held ones again.
	keys := []string{key(0), key(1), key(2), key(3), key(4), key(5), key(6), key(7), key(8), key(9), key(55), key(10), key(0)}
	before := p.node.Snapshot().Datasets[0].Total
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	check(keys, vals)
	after := p.node.Snapshot().Datasets[0].Total
	if hits, misses := after.Hits-before.Hits, after.ColdMisses+after.CapacityMisses-before.ColdMisses-before.CapacityMisses; hits != 12 || misses != 1 {
		t.Errorf("%d hits and %d misses counted, want 12 and 1", hits, misses)
	}
	// 50 held samples, 5 MiB, to a client that reads only once the loop
	// has handed the rest on (past 4 MiB waiting).
	keys = keys[:0]
	for i := range 50 {
		keys = append(keys, key(i))
	}
	raw, br := sendUnread(t, p, keys)
	readSamples(t, br, files, len(keys))
	// The connection still answers, in order.
	if _, err := raw.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("after the MGET: %q, %v", line, err)
	}
	p.loansBack(t)
}

// sendUnread sends MGET keys on a connection of its own, closed at the
// test's end, and waits until values are lent to the reply it has not
// read yet.
func sendUnread(t *testing.T, p *testPeer, keys []string) (net.Conn, *bufio.Reader) {
	t.Helper()
	raw, err := net.Dial("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	req := fmt.Appendf(nil, "*%d\r\n$4\r\nMGET\r\n", len(keys)+1)
	for _, k := range keys {
		req = fmt.Appendf(req, "$%d\r\n%s\r\n", len(k), k)
	}
	if _, err := raw.Write(req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "values lent to the unread reply", func() bool { return p.node.store.Stats().Loans > 0 })
	return raw, bufio.NewReader(raw)
}

// readSamples reads an MGET's reply of samples 0 to n-1: each must be
// files[i], exact.
func readSamples(t *testing.T, br *bufio.Reader, files [][]byte, n int) {
	t.Helper()
	if line, err := br.ReadString('\n'); err != nil || line != fmt.Sprintf("*%d\r\n", n) {
		t.Fatalf("reply header %q, %v", line, err)
	}
	for i := range n {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("$%d\r\n", len(files[i])) {
			t.Fatalf("value %d: header %q, %v", i, line, err)
		}
		v := make([]byte, len(files[i])+2)
		if _, err := io.ReadFull(br, v); err != nil || !bytes.Equal(v[:len(files[i])], files[i]) {
			t.Fatalf("value %d: wrong bytes (%v)", i, err)
		}
	}
}

// TestSetAroundTheLoopBound stores free-form values on both sides of the
// size an event loop stores itself (a longer one goes to a goroutine),
// pipelined with EXISTS and DEL, then reads them back in a pipeline of
// GETs: every reply is exact and in its place.
func TestSetAroundTheLoopBound(t *testing.T) {
	p := startPeer(t, Config{CacheSize: 8 << 20}, transport.SocketConfig{})
	ctx := context.Background()
	c := p.client(t)
	sizes := []int{0, 1, 4 << 10, 256<<10 - 1, 256 << 10, 256<<10 + 1, 1 << 20}
	for round := range 3 {
		value := func(i, n int) []byte { return bytes.Repeat([]byte{byte('a' + i + round)}, n) }
		pipe := c.Pipeline()
		var sets []*redis.StatusCmd
		for i, n := range sizes {
			sets = append(sets, pipe.Set(ctx, fmt.Sprintf("set:%d", i), value(i, n), 0))
		}
		exists := pipe.Exists(ctx, "set:0", "set:5", "absent")
		del := pipe.Del(ctx, "set:1", "absent")
		gone := pipe.Exists(ctx, "set:1")
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for i, n := range sizes {
			if err := sets[i].Err(); err != nil {
				t.Fatalf("SET of %d bytes: %v", n, err)
			}
		}
		if exists.Val() != 2 || del.Val() != 1 || gone.Val() != 0 {
			t.Fatalf("EXISTS %d (want 2), DEL %d (want 1), EXISTS after DEL %d (want 0)", exists.Val(), del.Val(), gone.Val())
		}
		pipe = c.Pipeline()
		var gets []*redis.StringCmd
		for i := range sizes {
			gets = append(gets, pipe.Get(ctx, fmt.Sprintf("set:%d", i)))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		for i, n := range sizes {
			got, err := gets[i].Bytes()
			if i == 1 { // deleted
				if !errors.Is(err, redis.Nil) {
					t.Fatalf("round %d: GET of a deleted key: %d bytes, %v", round, len(got), err)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, value(i, n)) {
				t.Fatalf("round %d: GET of the %d-byte value: %d bytes, %v", round, n, len(got), err)
			}
		}
	}
}

// TestOverwriteIsNeverAMiss sets one free-form key to two values in turn
// while another connection reads it: where the new value fits beside the
// old one, every read finds one of the two, never none. In a full cache
// the old value makes room for the new one: an overwrite is admitted as
// before and evicts nothing else. A SET too large for the cache is
// refused and leaves the old value.
func TestOverwriteIsNeverAMiss(t *testing.T) {
	ctx := context.Background()
	values := [][]byte{bytes.Repeat([]byte{'a'}, 4<<10), bytes.Repeat([]byte{'b'}, 4<<10)}
	t.Run("room beside", func(t *testing.T) {
		// Two loops: the setter's connection and the reader's are served
		// side by side.
		p := startPeer(t, Config{CacheSize: 8 << 20}, transport.SocketConfig{Loops: 2})
		setter, reader := p.client(t), p.client(t)
		if err := setter.Set(ctx, "k", values[0], 0).Err(); err != nil {
			t.Fatal(err)
		}
		const sets = 2000
		done := make(chan error, 1)
		go func() {
			for i := range sets {
				if err := setter.Set(ctx, "k", values[(i+1)%2], 0).Err(); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		reads, misses := 0, 0
		for finished := false; !finished; reads++ {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				finished = true
			default:
			}
			got, err := reader.Get(ctx, "k").Bytes()
			switch {
			case errors.Is(err, redis.Nil):
				misses++
			case err != nil:
				t.Fatal(err)
			case !bytes.Equal(got, values[0]) && !bytes.Equal(got, values[1]):
				t.Fatalf("read %d: %d bytes, neither value", reads, len(got))
			}
		}
		if misses > 0 {
			t.Fatalf("%d of %d reads during %d overwrites found no value", misses, reads, sets)
		}
	})
	t.Run("full", func(t *testing.T) {
		p := startPeer(t, Config{CacheSize: 64 << 10, Policy: "app"}, transport.SocketConfig{})
		c := p.client(t)
		var keys []string
		for i := 0; p.node.store.Fits(len("full:00"), len(values[0])); i++ {
			keys = append(keys, fmt.Sprintf("full:%02d", i))
			if err := c.Set(ctx, keys[i], values[0], 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Set(ctx, keys[0], values[1], 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(ctx, keys[0]).Bytes(); err != nil || !bytes.Equal(got, values[1]) {
			t.Fatalf("the overwritten key: %d bytes, %v", len(got), err)
		}
		if n := c.Exists(ctx, keys...).Val(); n != int64(len(keys)) {
			t.Fatalf("%d of the %d keys held after the overwrite", n, len(keys))
		}
		if err := c.Set(ctx, keys[0], make([]byte, 128<<10), 0).Err(); err == nil {
			t.Fatal("a SET larger than the cache was accepted")
		}
		if got, err := c.Get(ctx, keys[0]).Bytes(); err != nil || !bytes.Equal(got, values[1]) {
			t.Fatalf("after a refused SET: %d bytes, %v; want the old value", len(got), err)
		}
	})
}
