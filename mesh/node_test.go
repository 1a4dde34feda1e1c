package mesh

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/policy"
	"github.com/shade-mesh/shade/protocol/stats"
	"github.com/shade-mesh/shade/store"
	"github.com/shade-mesh/shade/transport"
)

// makeDataset writes n files of pseudo-random sizes and bytes in an
// ImageFolder layout (10 classes) and returns the directory and the files'
// bytes in manifest order.
func makeDataset(t testing.TB, n, minSize, maxSize int) (string, [][]byte) {
	t.Helper()
	d := testsupport.WriteDataset(t, testsupport.DatasetSpec{Samples: n, MinSize: minSize, MaxSize: maxSize, Seed: 1})
	return d.Dir, d.Files
}

// testPeer is one node serving its trainer socket inside the test process.
type testPeer struct {
	node *Node
	sock *transport.SocketServer
	path string
}

func startPeer(t testing.TB, cfg Config, sc transport.SocketConfig) *testPeer {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	node, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Path == "" {
		sc.Path = filepath.Join(t.TempDir(), "shade.sock")
	}
	sock, err := transport.ListenSocket(sc, node)
	if err != nil {
		node.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sock.Close()
		node.Close()
	})
	return &testPeer{node: node, sock: sock, path: sc.Path}
}

// loansBack waits until every value the peer's socket lent has been given
// back: a connection gives its loans back once its replies are written,
// which may be just after the client read them.
func (p *testPeer) loansBack(t testing.TB) {
	t.Helper()
	testsupport.WaitFor(t, 10*time.Second, "every loan is given back", func() bool {
		return p.node.store.Stats().Loans == 0
	})
}

func (p *testPeer) client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: p.path, Protocol: 2, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestGetReturnsTheManifestsFile(t *testing.T) {
	dir, files := makeDataset(t, 300, 100, 5000)
	p := startPeer(t, Config{CacheSize: 64 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	c := p.client(t)
	ctx := context.Background()
	for _, i := range []int{0, 123, 299} {
		for pass := 0; pass < 2; pass++ { // a miss read through, then a hit
			got, err := c.Get(ctx, "ds/"+strconv.Itoa(i)).Bytes()
			if err != nil {
				t.Fatalf("GET ds/%d: %v", i, err)
			}
			if !bytes.Equal(got, files[i]) {
				t.Fatalf("GET ds/%d pass %d: %d bytes differ from the file's %d", i, pass, len(got), len(files[i]))
			}
		}
	}
	keys := make([]string, 256)
	for i := range keys {
		keys[i] = "ds/" + strconv.Itoa((i*7)%300)
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v.(string) != string(files[(i*7)%300]) {
			t.Fatalf("MGET position %d (%s) returned the wrong bytes", i, keys[i])
		}
	}
	// Out of range and unknown datasets are nil, as missing keys in Redis.
	for _, k := range []string{"ds/300", "nope/1", "plain-key"} {
		if err := c.Get(ctx, k).Err(); !errors.Is(err, redis.Nil) {
			t.Errorf("GET %s: %v, want nil", k, err)
		}
	}
	var st stats.Node
	js, err := c.Do(ctx, "SHADE.STATS", "ds").Text()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	tot := st.Datasets[0].Total
	if tot.Hits == 0 || tot.ColdMisses != 300 && tot.ColdMisses == 0 || tot.SourceReads == 0 {
		t.Errorf("stats do not show hits and cold misses: %+v", tot)
	}
}

func TestBadInputGetsAnErrorAndTheDaemonGoesOn(t *testing.T) {
	dir, _ := makeDataset(t, 20, 10, 100)
	p := startPeer(t, Config{CacheSize: 1 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{MaxKeys: 100})
	c := p.client(t)
	ctx := context.Background()
	bad := [][]any{
		{"NOSUCHCOMMAND"},
		{"GET"},
		{"GET", "ds/abc"},
		{"GET", "ds/01"},
		{"GET", "ds/-1"},
		{"SET", "ds/3", "x"},
		{"SHADE.REPORT", "ds", "0", "1"},
		{"SHADE.REPORT", "ds", "x", "1", "0.5"},
		{"SHADE.REPORT", "ds", "0", "abc", "0.5"},
		{"SHADE.REPORT", "ds", "0", "1", "nan"},
		{"SHADE.REPORT", "ds", "0", "1", "inf"},
		{"SHADE.REPORT", "ds", "0", "1", "1e39"}, // beyond single precision
		packedReport(2, 0, -1e300),
		{"SHADE.REPORT", "ds", "0", "20", "0.5"},
		{"SHADE.REPORT", "nope", "0", "1", "0.5"},
		{"SHADE.ORDER", "ds", "0", "3", "3"},
		{"SHADE.ORDER", "ds", "0", "0", "0"},
		{"SHADE.ORDER", "nope", "0", "0", "1"},
		{"SHADE.ORDER", "ds", "0", "0", "1", "WITHWEIGHTS", "5"},
		{"SHADE.ORDER", "ds", "0", "0", "1", "5", "WITHWEIGHT"},
		{"SHADE.ORDER", "ds", "0", "0", "1", "5", "6", "WITHWEIGHTS"},
		{"SHADE.ORDER", "ds", "0", "0", "1", "PACKED", "PACKED"},
		packedReport(101, 0, 0.5), // over MaxKeys
		packedReport(2, 20, 0.5),  // an id out of range
		packedReport(2, 0, math.NaN()),
		{"SHADE.REPORT", "ds", "0", "PACKED", []byte{1, 0, 0, 0}, []byte{1, 2, 3}},
		{"SHADE.DONE", "ds", "0", "0"}, // no job yet
		{"SHADE.MANIFEST", "nope"},
		{"SHADE.STATS", "nope"},
		manyKeys(101),
	}
	for _, args := range bad {
		if err := c.Do(ctx, args...).Err(); err == nil || errors.Is(err, redis.Nil) {
			t.Errorf("%v: no error reply (err=%v)", args, err)
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("after %v the socket stopped answering: %v", args, err)
		}
	}
	// A loss beyond single precision is refused as such where it is
	// reported, not as the infinity it would become.
	if err := c.Do(ctx, "SHADE.REPORT", "ds", "0", "1", "1e39").Err(); err == nil || !strings.Contains(err.Error(), "beyond single precision") {
		t.Errorf("a loss of 1e39: %v, want it refused as beyond single precision", err)
	}
	// A report of a single pair is a valid minibatch.
	if n, err := c.Do(ctx, "SHADE.REPORT", "ds", "0", "3", "0.25").Int(); err != nil || n != 1 {
		t.Errorf("SHADE.REPORT of one pair: %d, %v", n, err)
	}
	// A refused report leaves the scores as they were: one sample scored.
	var st stats.Node
	js, _ := c.Do(ctx, "SHADE.STATS", "ds").Text()
	json.Unmarshal([]byte(js), &st)
	if st.Datasets[0].Job.ScoredSamples != 1 {
		t.Errorf("a refused report changed scores: %+v", st.Datasets[0].Job)
	}
}

// packedReport is a SHADE.REPORT PACKED of n pairs, each of id and loss.
func packedReport(n int, id uint32, loss float64) []any {
	var ids, losses []byte
	for range n {
		ids = binary.LittleEndian.AppendUint32(ids, id)
		losses = binary.LittleEndian.AppendUint64(losses, math.Float64bits(loss))
	}
	return []any{"SHADE.REPORT", "ds", "0", "PACKED", ids, losses}
}

// manyKeys is an MGET of n keys.
func manyKeys(n int) []any {
	out := make([]any, n+1)
	out[0] = "MGET"
	for i := 1; i <= n; i++ {
		out[i] = "ds/0"
	}
	return out
}

func TestCacheAsideAndRequirePass(t *testing.T) {
	p := startPeer(t, Config{CacheSize: 1 << 20}, transport.SocketConfig{RequirePass: "s3cret"})
	ctx := context.Background()
	c := p.client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("SET before AUTH: %v, want NOAUTH", err)
	}
	authed := redis.NewClient(&redis.Options{Network: "unix", Addr: p.path, Password: "s3cret", Protocol: 2})
	defer authed.Close()
	if err := authed.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := authed.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
	if n, _ := authed.Exists(ctx, "k", "missing").Result(); n != 1 {
		t.Errorf("EXISTS = %d, want 1", n)
	}
	if n, _ := authed.Del(ctx, "k").Result(); n != 1 {
		t.Errorf("DEL = %d, want 1", n)
	}
	if err := authed.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after DEL: %v", err)
	}
	wrong := redis.NewClient(&redis.Options{Network: "unix", Addr: p.path, Password: "nope", Protocol: 2})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil {
		t.Error("a wrong password was accepted")
	}
	fi, err := os.Stat(p.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want 0660", fi.Mode().Perm())
	}
}

// TestEpochsFollowReportedImportance drives 3 ranks through 3 epochs over
// the socket, as trainers do, reporting high losses for one tenth of the
// samples and low for another, and checks that epoch 1 draws the important
// tenth clearly more often.
func TestEpochsFollowReportedImportance(t *testing.T) {
	const n, world, epochs = 9000, 3, 3
	dir, files := makeDataset(t, n, 50, 400)
	p := startPeer(t, Config{CacheSize: 256 << 10, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}, Seed: 7}, transport.SocketConfig{})
	important := func(id int) bool { return id%10 == 0 }
	dull := func(id int) bool { return id%10 == 5 }

	drawn := make([][]int, epochs) // per epoch, draws per sample
	for e := range drawn {
		drawn[e] = make([]int, n)
	}
	var mu sync.Mutex
	if err := testsupport.Parallel(world, func(rank int) error {
		c := p.client(t)
		ctx := context.Background()
		for e := 0; e < epochs; e++ {
			ids, err := c.Do(ctx, "SHADE.ORDER", "ds", e, rank, world, 20000).Int64Slice()
			if err != nil {
				return fmt.Errorf("rank %d epoch %d order: %w", rank, e, err)
			}
			if len(ids) != n/world {
				return fmt.Errorf("rank %d epoch %d: slice of %d, want %d", rank, e, len(ids), n/world)
			}
			mu.Lock()
			for _, id := range ids {
				drawn[e][id]++
			}
			mu.Unlock()
			for start := 0; start < len(ids); start += 64 {
				batch := ids[start:min(start+64, len(ids))]
				keys := testsupport.Keys("ds", batch)
				vals, err := c.MGet(ctx, keys...).Result()
				if err != nil {
					return err
				}
				report := []any{"SHADE.REPORT", "ds", e}
				for i, id := range batch {
					if vals[i].(string) != string(files[id]) {
						return fmt.Errorf("wrong bytes for %s", keys[i])
					}
					loss := 0.5
					if important(int(id)) {
						loss = 5
					} else if dull(int(id)) {
						loss = 0.01
					}
					report = append(report, id, loss)
				}
				if err := c.Do(ctx, report...).Err(); err != nil {
					return err
				}
			}
			if err := c.Do(ctx, "SHADE.DONE", "ds", e, rank).Err(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Epoch 0 is a permutation: every sample once.
	for id, k := range drawn[0] {
		if k != 1 {
			t.Fatalf("epoch 0 drew sample %d %d times; want a permutation", id, k)
		}
	}
	// Under the null hypothesis (importance ignored) hi and lo are equal in
	// expectation with a standard deviation of about sqrt(hi+lo); demand
	// four of those, and a 15% margin. Seeds are fixed: no flakiness.
	var hi, lo int
	for id, k := range drawn[1] {
		if important(id) {
			hi += k
		} else if dull(id) {
			lo += k
		}
	}
	t.Logf("epoch 1 draws: important tenth %d, least important tenth %d", hi, lo)
	if float64(hi-lo) < 4*math.Sqrt(float64(hi+lo)) || float64(hi) < 1.15*float64(lo) {
		t.Errorf("epoch 1 drew the important tenth %d times and the least important %d: importance not followed", hi, lo)
	}
	// Ranks' slices are disjoint positions of one order: the total is n.
	total := 0
	for _, k := range drawn[2] {
		total += k
	}
	if total != n {
		t.Errorf("epoch 2 has %d draws, want %d", total, n)
	}
	var st stats.Node
	js, _ := p.client(t).Do(context.Background(), "SHADE.STATS", "ds").Text()
	json.Unmarshal([]byte(js), &st)
	if len(st.Datasets[0].Epochs) != epochs || st.Datasets[0].Job.LatestEpoch != epochs {
		t.Errorf("stats: %d epochs counted, latest order %d; want %d and %d", len(st.Datasets[0].Epochs), st.Datasets[0].Job.LatestEpoch, epochs, epochs)
	}
}

func TestOrderTimesOutWhileRanksTrain(t *testing.T) {
	dir, _ := makeDataset(t, 30, 10, 20)
	p := startPeer(t, Config{Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	c := p.client(t)
	ctx := context.Background()
	if err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 2).Err(); err != nil {
		t.Fatal(err)
	}
	c.Do(ctx, "SHADE.DONE", "ds", 0, 0)
	err := c.Do(ctx, "SHADE.ORDER", "ds", 1, 0, 2, 200).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "TIMEOUT") || !strings.Contains(err.Error(), "[1]") {
		t.Fatalf("order for epoch 1 with rank 1 still training: %v; want TIMEOUT naming rank 1", err)
	}
	if err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 3).Err(); err == nil {
		t.Error("a different world size was accepted without SHADE.RESET")
	}
	if err := c.Do(ctx, "SHADE.RESET", "ds").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "SHADE.ORDER", "ds", 0, 0, 3).Err(); err != nil {
		t.Errorf("after SHADE.RESET: %v", err)
	}
}

// TestResidentBitmapIsTheCache: the set a node sends with its dones names
// exactly the samples its cache holds, and none while it holds none.
func TestResidentBitmapIsTheCache(t *testing.T) {
	dir, files := makeDataset(t, 200, 10, 100)
	p := startPeer(t, Config{CacheSize: 1 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	ds, err := p.node.dataset("ds")
	if err != nil {
		t.Fatal(err)
	}
	if set := p.node.residentSet(ds); !set.Empty() {
		t.Fatalf("an empty cache sends %+v", set)
	}
	c := p.client(t)
	read := map[int]bool{0: true, 7: true, 8: true, 63: true, 64: true, 199: true}
	for id := range read {
		v, err := c.Get(context.Background(), fmt.Sprintf("ds/%d", id)).Bytes()
		if err != nil || !bytes.Equal(v, files[id]) {
			t.Fatalf("GET ds/%d: %v", id, err)
		}
	}
	// 6 samples of 200: a list of 7 bytes (the gap of 134 takes two),
	// shorter than the bitmap's 25.
	set := p.node.residentSet(ds)
	if err := set.Check(200); err != nil || len(set.Sparse) != 7 {
		t.Fatalf("set %+v for 6 samples of 200: %v", set, err)
	}
	sent := make([]uint64, 4)
	set.OrInto(sent)
	words := p.node.residentWords(ds)
	for id := range 200 {
		inSet := sent[id/64]&(1<<(id%64)) != 0
		inWords := words[id/64]&(1<<(id%64)) != 0
		if inSet != read[id] || inWords != read[id] {
			t.Errorf("sample %d: in the set %v, in words %v, read %v", id, inSet, inWords, read[id])
		}
	}
}

// TestNewRefusesNegativeBounds: a negative bound in the configuration is
// refused as a configuration error, not taken for a default or let panic.
func TestNewRefusesNegativeBounds(t *testing.T) {
	for name, c := range map[string]Config{
		"source reads":    {SourceReads: -1},
		"max world":       {MaxWorld: -1},
		"prefetch memory": {PrefetchMemory: -1},
	} {
		c.Name, c.CacheSize = "n", 1<<20
		if n, err := New(c); !errors.Is(err, ErrConfig) {
			if n != nil {
				n.Close()
			}
			t.Errorf("%s -1: New = %v, want ErrConfig", name, err)
		}
	}
}

// TestAdmissionsRacingEvictions: goroutines admit samples at once into a
// cache that holds a few of them, so that the policy chooses victims
// while other admissions are still copying their values in (an admission
// fills its room after letting the policy's lock go). Afterwards a sample
// is in the store exactly when the policy holds it, the dataset's count
// of resident samples is the store's, no room reserved is left out, and
// every value held is its file's.
func TestAdmissionsRacingEvictions(t *testing.T) {
	dir, files := makeDataset(t, 128, 4<<10, 8<<10)
	p := startPeer(t, Config{CacheSize: 128 << 10, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	n := p.node
	ds, err := n.dataset("ds")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 3000 {
				idx := (i*31 + g*7) % len(files)
				n.admit(sampleID(ds, idx), []byte(keyOfSample(ds, uint32(idx))), files[idx], ds)
			}
		})
	}
	wg.Wait()
	n.lockPolicy()
	defer n.polMu.Unlock()
	held := 0
	for idx := range files {
		key := []byte(keyOfSample(ds, uint32(idx)))
		inStore, inPolicy := n.store.Has(key), n.pol.Resident(sampleID(ds, idx))
		if inStore != inPolicy {
			t.Errorf("sample %d: in the store %v, in the policy %v", idx, inStore, inPolicy)
		}
		if v, ok := n.store.Get(nil, key); ok {
			held++
			if !bytes.Equal(v, files[idx]) {
				t.Errorf("sample %d: the store holds wrong bytes", idx)
			}
		}
	}
	st := n.store.Stats()
	if held == 0 || st.Entries != held || int(ds.resident.Load()) != held || st.Loans != 0 {
		t.Fatalf("%d samples held, %d entries, %d resident, %d loans out", held, st.Entries, ds.resident.Load(), st.Loans)
	}
}

// TestSetsRacingSetsAndEvictions: goroutines SET the same free-form keys
// at once, with values of their own, in a cache that holds a few of them
// (each SET copies its value in after letting the policy's lock go).
// Afterwards a key is in the store exactly when the policy holds it (an
// eviction finds the key by its id alone), each value held is one that
// was SET for its key, and the store's bytes in use are the values held: no room
// reserved is left out or lost.
func TestSetsRacingSetsAndEvictions(t *testing.T) {
	p := startPeer(t, Config{CacheSize: 256 << 10}, transport.SocketConfig{})
	n := p.node
	const keys, writers = 24, 4
	value := func(w, k int) []byte { return bytes.Repeat([]byte{byte(w*keys + k)}, 20_000+1000*k) }
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range 2000 {
				k := (i*7 + w) % keys
				if _, err := n.Set(fmt.Appendf(nil, "free:%d", k), value(w, k)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n.lockPolicy()
	defer n.polMu.Unlock()
	held, charged := 0, int64(0)
	for k := range keys {
		key := fmt.Appendf(nil, "free:%d", k)
		inStore, inPolicy := n.store.Has(key), n.pol.Resident(freeID(key))
		if inStore != inPolicy {
			t.Errorf("%s: in the store %v, in the policy %v", key, inStore, inPolicy)
		}
		got, ok := n.store.Get(nil, key)
		if !ok {
			continue
		}
		held++
		charged += n.store.Charge(len(key), len(got))
		if w := int(got[0]) - k; w%keys != 0 || !bytes.Equal(got, value(w/keys, k)) {
			t.Errorf("%s: the store holds %d bytes that no SET wrote", key, len(got))
		}
	}
	if st := n.store.Stats(); held == 0 || st.Entries != held || st.UsedBytes != charged || st.Loans != 0 {
		t.Fatalf("%d keys held (%d bytes), %d entries, %d bytes used, %d loans out", held, charged, st.Entries, st.UsedBytes, st.Loans)
	}
}

// TestEvictionFindsFreeKeysByHash: the node keeps no names of free-form
// keys; an eviction finds the key the store holds under its id's hash.
// A sample whose store hash gives a free key's id (a meeting of 63 hash
// bits, which the test makes by calling the eviction with the sample's
// hash) is not evicted by it: only a free-form key is.
func TestEvictionFindsFreeKeysByHash(t *testing.T) {
	dir, files := makeDataset(t, 4, 1000, 1000)
	p := startPeer(t, Config{Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	n := p.node
	ds, err := n.dataset("ds")
	if err != nil {
		t.Fatal(err)
	}
	sample := []byte(keyOfSample(ds, 1))
	if cached, _ := n.admit(sampleID(ds, 1), sample, files[1], ds); !cached {
		t.Fatal("sample not cached")
	}
	free := []byte("free:1")
	if ok, err := n.Set(free, []byte("value")); !ok || err != nil {
		t.Fatalf("Set = %v, %v", ok, err)
	}
	n.lockPolicy()
	n.evictFreeLocked(policy.ID(store.Hash(sample)) | freeBit)
	n.evictFreeLocked(freeID(free))
	n.polMu.Unlock()
	if !n.store.Has(sample) {
		t.Error("a sample went from the store by a free id its hash gives")
	}
	if n.store.Has(free) {
		t.Error("the free key stayed in the store when evicted by its id")
	}
}

// TestFreeKeysLeaveNothingBehind: a client that SETs ever new names (here
// 3,000 into a cache of about 60 values), DELs some, reads some, one of
// them heard of by the policy after its eviction, and has some refused
// (the cache full of keys read more often) leaves the policy remembering
// none of them (no ghost entry, resident or not): what a node keeps of
// free-form keys is bounded by its cache, not by the names its clients
// make up.
func TestFreeKeysLeaveNothingBehind(t *testing.T) {
	for _, name := range []string{"app", "order"} {
		t.Run(name, func(t *testing.T) {
			p := startPeer(t, Config{CacheSize: 64 << 10, Policy: name}, transport.SocketConfig{})
			n, c, ctx := p.node, p.client(t), context.Background()
			value := bytes.Repeat([]byte{'v'}, 1000)
			refused := 0
			for i := range 3000 {
				key := fmt.Sprintf("free:%d", i)
				if err := c.Set(ctx, key, value, 0).Err(); err != nil {
					t.Fatal(err)
				}
				if err := c.Get(ctx, fmt.Sprintf("free:%d", i-i%7)).Err(); err != nil && !errors.Is(err, redis.Nil) {
					t.Fatal(err)
				}
				switch {
				case i%5 == 0:
					if err := c.Del(ctx, key).Err(); err != nil {
						t.Fatal(err)
					}
				case i >= 2000 && !n.store.Has([]byte(key)):
					refused++
				}
			}
			// A read of a key made before its eviction, which the policy
			// hears of after (as a read on another connection may be).
			n.hits(freeID([]byte("free:0")))
			n.lockPolicy()
			defer n.polMu.Unlock()
			ghosts := n.pol.(interface{ Ghosts() int }).Ghosts()
			if refused == 0 || ghosts != 0 || n.pol.Len() != n.store.Len() {
				t.Fatalf("%d SETs refused; the policy remembers %d ids and holds %d, the store %d", refused, ghosts, n.pol.Len(), n.store.Len())
			}
		})
	}
}

// TestReadThroughOfACachedSample: a read through that starts after
// another has read the sample and cached it (an MGET looks all its
// misses up before it reads any of them) takes it from memory, and does
// not read the source again.
func TestReadThroughOfACachedSample(t *testing.T) {
	dir, files := makeDataset(t, 4, 1000, 1000)
	p := startPeer(t, Config{CacheSize: 64 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	n, ctx := p.node, context.Background()
	ds := n.ordered[0]
	key := []byte(keyOfSample(ds, 2))
	for i, wantMem := range []bool{false, true} {
		r, err := n.readThrough(ctx, ds, 2, key, n.owners(ds, 2), true, false)
		if err != nil || !bytes.Equal(r.v, files[2]) || r.mem != wantMem {
			t.Fatalf("read %d: %d bytes, from memory %v (%v); want the file's %d, from memory %v", i, len(r.v), r.mem, err, len(files[2]), wantMem)
		}
		if reads := ds.stats().Total.SourceReads; reads != 1 {
			t.Fatalf("after read %d: %d source reads, want 1", i, reads)
		}
	}
}

// TestOpeningGarbageGivenBack: heap memory held by what a node's start
// made and dropped (a bucket's listing), collected or not yet, goes back
// to the system before the cache is checked against the peer's limit.
func TestOpeningGarbageGivenBack(t *testing.T) {
	held := func() uint64 {
		s := []metrics.Sample{
			{Name: "/memory/classes/heap/objects:bytes"},
			{Name: "/memory/classes/heap/unused:bytes"},
			{Name: "/memory/classes/heap/free:bytes"},
		}
		metrics.Read(s)
		return s[0].Value.Uint64() + s[1].Value.Uint64() + s[2].Value.Uint64()
	}
	for _, collected := range []bool{false, true} {
		garbage := make([][]byte, 256)
		for i := range garbage {
			garbage[i] = make([]byte, 1<<20)
		}
		runtime.KeepAlive(garbage)
		garbage = nil
		if collected {
			runtime.GC()
		}
		before := held()
		if before < 200<<20 {
			t.Skipf("the runtime gave back the garbage first: the heap holds %d MiB", before>>20)
		}
		giveBackOpeningGarbage()
		if after := held(); after > 128<<20 {
			t.Fatalf("collected %v: the heap held %d MiB before giveBackOpeningGarbage, %d after", collected, before>>20, after>>20)
		}
	}
}
