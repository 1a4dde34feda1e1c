package mesh

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/sampling"
	"github.com/shade-mesh/shade/transport"
	"github.com/shade-mesh/shade/transport/peer"
)

// testMesh is k whole nodes in this process, each with its trainer socket,
// started by the shared harness (mesh/meshtest) through StartMeshForTest.
type testMesh struct {
	peers []*testPeer
	files [][]byte
	dir   string
	add   func(tb testing.TB, configure func(c *Config)) HarnessPeer
}

type meshOpts struct {
	samples, minSize, maxSize int
	cacheSize                 int64
	replicas                  int
	configure                 func(i int, c *Config)
}

// HarnessPeer is one node that StartMeshForTest started.
type HarnessPeer struct {
	Node   *Node
	Server *transport.SocketServer
	Socket string
}

// StartMeshForTest is meshtest.StartMesh for this package's own tests:
// meshtest imports mesh, so they cannot import it, and
// meshtest_hook_test.go (package mesh_test) sets this variable. It
// returns the dataset, the nodes, and the mesh's meshtest.Mesh.Add.
var StartMeshForTest func(tb testing.TB, k int, data testsupport.DatasetSpec, replicas int,
	configure func(i int, c *Config)) (*testsupport.Dataset, []HarnessPeer,
	func(tb testing.TB, configure func(c *Config)) HarnessPeer)

// startMesh starts k nodes named n0, n1, ... seeded from the first, serving
// dataset "ds", and waits until every node sees all k and they agree on a
// leader.
func startMesh(t testing.TB, k int, o meshOpts) *testMesh {
	t.Helper()
	if o.samples == 0 {
		o.samples, o.minSize, o.maxSize = 600, 50, 800
	}
	data, peers, add := StartMeshForTest(t, k, testsupport.DatasetSpec{Samples: o.samples, MinSize: o.minSize, MaxSize: o.maxSize, Seed: 1},
		o.replicas, func(i int, c *Config) {
			if o.cacheSize != 0 {
				c.CacheSize = o.cacheSize
			}
			if o.configure != nil {
				o.configure(i, c)
			}
		})
	m := &testMesh{files: data.Files, dir: data.Dir, add: add}
	for _, p := range peers {
		m.peers = append(m.peers, &testPeer{node: p.Node, sock: p.Server, path: p.Socket})
	}
	return m
}

// addPeer starts one more node as startMesh starts node len(m.peers)
// (meshOpts.configure applies), then configure, when set; it returns once
// the node serves, without waiting for the mesh to converge.
func (m *testMesh) addPeer(t testing.TB, configure func(c *Config)) *testPeer {
	t.Helper()
	p := m.add(t, configure)
	tp := &testPeer{node: p.Node, sock: p.Server, path: p.Socket}
	m.peers = append(m.peers, tp)
	return tp
}

func (m *testMesh) alive() []*testPeer {
	var out []*testPeer
	for _, p := range m.peers {
		if !p.node.closed.Load() {
			out = append(out, p)
		}
	}
	return out
}

// converged reports whether the given nodes all see exactly each other,
// name the same leader, and agree on who shares dataset "ds" with whom.
func (m *testMesh) converged(ps []*testPeer) bool {
	nodes := make([]*Node, len(ps))
	for i, p := range ps {
		nodes[i] = p.node
	}
	return testsupport.SameView(nodes) && testsupport.SameSharing(nodes, "ds")
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testsupport.WaitFor(t, d, what, cond)
}

// leader returns the peer that leads (the one whose node names itself
// leader); it fails the test if none does.
func (m *testMesh) leader(tb testing.TB) *testPeer {
	tb.Helper()
	for _, p := range m.alive() {
		if p.node.lead.leader() == p.node.Name() {
			return p
		}
	}
	tb.Fatal("no leader")
	return nil
}

// follower returns a peer that is not the leader.
func (m *testMesh) follower(tb testing.TB) *testPeer {
	tb.Helper()
	lead := m.leader(tb)
	for _, p := range m.peers {
		if p != lead {
			return p
		}
	}
	tb.Fatal("no peer but the leader")
	return nil
}

// waitNewest waits until every peer's newest order of the default job
// of "ds" is epoch.
func (m *testMesh) waitNewest(t *testing.T, epoch int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("epoch %d on every peer", epoch), func() bool {
		for _, p := range m.peers {
			if _, e, _ := p.node.ordered[0].def.book.Head(); e != epoch {
				return false
			}
		}
		return true
	})
}

func (m *testMesh) byName(name string) *testPeer {
	for _, p := range m.peers {
		if p.node.Name() == name {
			return p
		}
	}
	return nil
}

// readAll MGETs every sample through p's socket and checks every byte.
func (m *testMesh) readAll(t testing.TB, c *redis.Client) {
	t.Helper()
	for start := 0; start < len(m.files); start += 200 {
		var keys []string
		for i := start; i < min(start+200, len(m.files)); i++ {
			keys = append(keys, "ds/"+strconv.Itoa(i))
		}
		vals, err := c.MGet(context.Background(), keys...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if s, ok := v.(string); !ok || s != string(m.files[start+i]) {
				t.Fatalf("%s: wrong bytes", keys[i])
			}
		}
	}
}

func TestMeshServesIdenticalBytesAndKeepsROwners(t *testing.T) {
	m := startMesh(t, 5, meshOpts{samples: 1000, replicas: 2})
	for _, p := range m.peers {
		m.readAll(t, p.client(t))
	}
	// Owners that read from the source offer the sample to co-owners in
	// the background; wait until every sample is on exactly R nodes.
	var counts map[int]int
	defer func() {
		if t.Failed() {
			t.Logf("residency (copies: samples) at the end: %v", counts)
		}
	}()
	waitFor(t, 30*time.Second, "every sample is resident on exactly 2 owners", func() bool {
		counts = map[int]int{}
		ok := true
		for i := range m.files {
			key := []byte("ds/" + strconv.Itoa(i))
			c := 0
			for _, p := range m.peers {
				if p.node.store.Has(key) {
					c++
				}
			}
			counts[c]++
			ok = ok && c == 2
		}
		return ok
	})
	var local, peerHits, sourceReads int64
	for _, p := range m.peers {
		tot := p.node.ordered[0].stats().Total
		local += tot.LocalHits
		peerHits += tot.PeerHits
		sourceReads += tot.SourceReads
	}
	t.Logf("after one pass from each of 5 peers: residency %v; local hits %d, peer hits %d, source reads %d", counts, local, peerHits, sourceReads)
	if sourceReads > int64(len(m.files))*2 {
		t.Errorf("%d source reads for %d samples: concurrent misses were not collapsed onto owners", sourceReads, len(m.files))
	}
}

func TestNonLeaderKilledUnderLoadLosesNoRead(t *testing.T) {
	m := startMesh(t, 5, meshOpts{samples: 800, replicas: 2})
	leader := m.peers[0].node.Leader()
	var victim *testPeer
	for _, p := range m.peers {
		if p.node.Name() != leader && victim == nil && p.node.Name() != "n0" {
			victim = p
		}
	}
	var reads, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range m.peers {
		if p == victim {
			continue
		}
		c := p.client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(len(p.path)), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				keys := make([]string, 64)
				idx := make([]int, 64)
				for i := range keys {
					idx[i] = rng.IntN(len(m.files))
					keys[i] = "ds/" + strconv.Itoa(idx[i])
				}
				vals, err := c.MGet(context.Background(), keys...).Result()
				if err != nil {
					failed.Add(64)
					t.Errorf("MGET failed: %v", err)
					continue
				}
				for i, v := range vals {
					reads.Add(1)
					if s, ok := v.(string); !ok || s != string(m.files[idx[i]]) {
						if failed.Add(1) <= 5 {
							t.Errorf("via %s, %s: got %T %.40v, want the file's %d bytes", p.node.Name(), keys[i], v, v, len(m.files[idx[i]]))
						}
					}
				}
			}
		}()
	}
	// The kill comes under load, and the load goes on after every survivor
	// has noticed it.
	readsAtLeast := func(n int64) func() bool { return func() bool { return reads.Load() >= n } }
	waitFor(t, 30*time.Second, "the readers have made 1,000 reads", readsAtLeast(1000))
	killed := time.Now()
	victim.node.kill()
	survivors := m.alive()
	seen := make(map[string]time.Duration)
	waitFor(t, 10*time.Second, "every survivor marks the killed peer dead", func() bool {
		for _, p := range survivors {
			if _, ok := seen[p.node.Name()]; !ok && !slices.Contains(p.node.Members(), victim.node.Name()) {
				seen[p.node.Name()] = time.Since(killed)
			}
		}
		return len(seen) == len(survivors)
	})
	waitFor(t, 30*time.Second, "the readers have made 1,000 more reads", readsAtLeast(reads.Load()+1000))
	close(stop)
	wg.Wait()
	var slowest time.Duration
	for _, d := range seen {
		slowest = max(slowest, d)
	}
	t.Logf("killed %s: %d reads, %d failed; survivors noticed within %v (%v)", victim.node.Name(), reads.Load(), failed.Load(), slowest, seen)
	if failed.Load() != 0 {
		t.Errorf("%d failed or wrong reads", failed.Load())
	}
}

// trainEpoch runs one epoch of a rank of a job ("" for the default job)
// through its node's socket: ORDER, MGET in batches (bytes checked),
// REPORT with losses given by loss(id).
func trainEpoch(ctx context.Context, c *redis.Client, files [][]byte, job string, epoch, rank, world int, loss func(int64) float64) ([]int64, error) {
	ids, err := c.Do(ctx, append([]any{"SHADE.ORDER", "ds", epoch, rank, world, 30000}, testsupport.JobArgs(job)...)...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("job %q rank %d epoch %d order: %w", job, rank, epoch, err)
	}
	for start := 0; start < len(ids); start += 50 {
		batch := ids[start:min(start+50, len(ids))]
		keys := testsupport.Keys("ds", batch)
		vals, err := c.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, err
		}
		report := []any{"SHADE.REPORT", "ds", epoch}
		for i, id := range batch {
			if s, ok := vals[i].(string); !ok || s != string(files[id]) {
				return nil, fmt.Errorf("wrong bytes for %s", keys[i])
			}
			report = append(report, id, loss(id))
		}
		if err := c.Do(ctx, append(report, testsupport.JobArgs(job)...)...).Err(); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// trainEpochs trains epochs 0 .. epochs-1 with world ranks at once, rank
// r through clientOf(r); every rank ends each epoch with SHADE.DONE.
func trainEpochs(t *testing.T, epochs, world int, files [][]byte, clientOf func(r int) *redis.Client, loss func(int64) float64) {
	t.Helper()
	ctx := context.Background()
	for e := 0; e < epochs; e++ {
		var wg sync.WaitGroup
		for r := 0; r < world; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := clientOf(r)
				if _, err := trainEpoch(ctx, c, files, "", e, r, world, loss); err != nil {
					t.Error(err)
					return
				}
				if err := c.Do(ctx, "SHADE.DONE", "ds", e, r).Err(); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
}

func orderDigest(p *wire.PublishMsg) string {
	h := sha256.New()
	for _, s := range p.Slices {
		for _, id := range s {
			h.Write([]byte{byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24)})
		}
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}

func TestLeaderKilledMidEpochNextOrderPublished(t *testing.T) {
	const world = 3
	m := startMesh(t, 4, meshOpts{samples: 9000, minSize: 20, maxSize: 60, replicas: 2})
	leader := m.byName(m.peers[0].node.Leader())
	var trainers []*testPeer // the ranks train on the three other nodes
	for _, p := range m.peers {
		if p != leader {
			trainers = append(trainers, p)
		}
	}
	important := func(id int64) float64 {
		switch id % 10 {
		case 0:
			return 5
		case 5:
			return 0.01
		}
		return 0.5
	}
	ctx := context.Background()
	clients := make([]*redis.Client, world)
	for r := range clients {
		clients[r] = trainers[r].client(t)
	}
	if err := testsupport.Parallel(world, func(r int) error {
		_, err := trainEpoch(ctx, clients[r], m.files, "", 0, r, world, important)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Reports are merged by the leader and replicated every 200ms; let one
	// replication pass, then kill the leader before any rank is done.
	waitFor(t, 30*time.Second, "the score table is replicated", func() bool {
		ds := trainers[0].node.ordered[0]
		scored, _ := ds.def.scores.Summary()
		return scored > 8900
	})
	killed := time.Now()
	leader.node.kill()
	for r := 0; r < world; r++ {
		if err := clients[r].Do(ctx, "SHADE.DONE", "ds", 0, r).Err(); err != nil {
			t.Fatalf("rank %d DONE: %v", r, err)
		}
	}
	var digests []string
	waitFor(t, 10*time.Second, "epoch 1 is published on every survivor", func() bool {
		digests = digests[:0]
		for _, p := range trainers {
			pub := p.node.ordered[0].def.book.Newest()
			if pub == nil || pub.Epoch != 1 {
				return false
			}
			digests = append(digests, orderDigest(pub))
		}
		return true
	})
	took := time.Since(killed)
	newLeader := trainers[0].node.Leader()
	t.Logf("leader %s killed; %s published epoch 1 %v later; digests %v", leader.node.Name(), newLeader, took, digests)
	for _, d := range digests[1:] {
		if d != digests[0] {
			t.Fatalf("epoch 1 differs between peers: %v", digests)
		}
	}
	// The scores reported before the kill shape epoch 1.
	var hi, lo int
	for _, s := range trainers[0].node.ordered[0].def.book.Newest().Slices {
		for _, id := range s {
			switch id % 10 {
			case 0:
				hi++
			case 5:
				lo++
			}
		}
	}
	t.Logf("epoch 1 draws: important tenth %d, least important tenth %d", hi, lo)
	if float64(hi-lo) < 3*math.Sqrt(float64(hi+lo)) {
		t.Errorf("epoch 1 ignores the scores reported before the kill: %d vs %d", hi, lo)
	}
	// Training goes on under the new leader.
	if err := testsupport.Parallel(world, func(r int) error {
		_, err := trainEpoch(ctx, clients[r], m.files, "", 1, r, world, important)
		return err
	}); err != nil {
		t.Error(err)
	}
}

// localShare trains 3 ranks, one per node, for epochs and returns the
// share of hits served from the rank's own node's memory.
func localShare(t *testing.T, noLocality bool) float64 {
	const world, epochs = 3, 3
	m := startMesh(t, 3, meshOpts{samples: 1500, minSize: 20, maxSize: 100, replicas: 1, configure: func(i int, c *Config) {
		c.Cluster.NoLocality = noLocality
		c.Cluster.Prefetch = -1
	}})
	trainEpochs(t, epochs, world, m.files, func(r int) *redis.Client { return m.peers[r].client(t) },
		func(int64) float64 { return 1 })
	var local, remote int64
	for _, p := range m.peers {
		for _, es := range p.node.ordered[0].stats().Epochs {
			if es.Epoch > 0 {
				local += es.LocalHits
				remote += es.PeerHits
			}
		}
	}
	return float64(local) / float64(max(1, local+remote))
}

func TestLocalityAwareSplitServesHitsLocally(t *testing.T) {
	with := localShare(t, false)
	without := localShare(t, true)
	t.Logf("share of hits served from the local peer's memory, 3 nodes, 3 ranks, R=1: locality-aware %.1f%%, plain split %.1f%%", 100*with, 100*without)
	if with < 0.9 {
		t.Errorf("locality-aware split served %.1f%% of hits locally, want at least 90%%", 100*with)
	}
}

func TestStrangerCertificateCannotFetchOrPublish(t *testing.T) {
	m := startMesh(t, 2, meshOpts{samples: 100})
	stranger, err := peer.DevTLS(t.TempDir(), "n9") // another CA
	if err != nil {
		t.Fatal(err)
	}
	w, err := peer.Listen(peer.Config{Name: "n9", ListenAddr: "127.0.0.1:0", TLS: stranger}, peer.HandlerFunc(
		func(context.Context, string, peer.Method, []byte) (any, error) { return nil, nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	target := m.peers[1].node
	addr := target.cluster.wire.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var resp wire.FetchResp
	if err := w.Call(ctx, addr, target.Name(), wire.MethodFetch, &wire.FetchReq{Dataset: "ds", Version: target.ordered[0].manifest.Version, IDs: []uint32{1}}, &resp); err == nil {
		t.Fatal("a peer with a certificate from another CA fetched a sample")
	}
	before := target.ordered[0].def.book.Newest()
	pub := &wire.PublishMsg{Dataset: "ds", Version: target.ordered[0].manifest.Version, Gen: 99, Epoch: 0, Term: 99, World: 1, Slices: []wire.U32s{{1}}}
	if err := w.Call(ctx, addr, target.Name(), wire.MethodPublish, pub, nil); err == nil {
		t.Fatal("a peer with a certificate from another CA published an order")
	}
	if after := target.ordered[0].def.book.Newest(); after != before {
		t.Fatal("an order from a stranger was installed")
	}
}

func TestTwoMeshesInOneProcessDoNotInterfere(t *testing.T) {
	a := startMesh(t, 2, meshOpts{samples: 200, minSize: 10, maxSize: 50})
	b := startMesh(t, 2, meshOpts{samples: 300, minSize: 60, maxSize: 90})
	for _, p := range append(a.peers, b.peers...) {
		if got := p.node.Members(); len(got) != 2 {
			t.Fatalf("%s sees %v; want only its own mesh", p.node.Name(), got)
		}
	}
	a.readAll(t, a.peers[1].client(t))
	b.readAll(t, b.peers[1].client(t))
	if v, _ := a.peers[0].client(t).Get(context.Background(), "ds/250").Result(); v != "" {
		t.Fatal("mesh a served a sample past its dataset's end")
	}
}

// TestOrdersAheadCarryWeightsToEveryPeer: with orders published an epoch
// ahead, magnitude scores, a weight cap and cache-aware draws, a 3-node
// mesh trains 4 epochs; the leader has published epoch 5 (two past the
// last finished), and every peer holds the same order and weights for
// each epoch, weights within the cap.
func TestOrdersAheadCarryWeightsToEveryPeer(t *testing.T) {
	const world, epochs = 3, 4
	m := startMesh(t, 3, meshOpts{samples: 600, minSize: 20, maxSize: 100, replicas: 1, cacheSize: 16 << 10, configure: func(i int, c *Config) {
		c.OrderAhead = 1
		c.Score = sampling.ScoreMagnitude
		c.MaxWeight, c.Boost = 4, 3
		c.Cluster.Prefetch = -1
	}})
	trainEpochs(t, epochs, world, m.files, func(r int) *redis.Client { return m.peers[r].client(t) },
		func(id int64) float64 { return float64(id%7) / 2 })
	m.waitNewest(t, epochs+1)
	weighted := 0
	for e := epochs - 2; e <= epochs+1; e++ {
		var want string
		for _, p := range m.peers {
			a := p.node.ordered[0].def.book.Ask(e, 0, world)
			if a.Order == nil {
				t.Fatalf("%s lacks epoch %d", p.node.Name(), e)
			}
			got := orderDigest(a.Order) + fmt.Sprint(a.Order.Weights)
			if want == "" {
				want = got
			} else if got != want {
				t.Errorf("epoch %d differs on %s", e, p.node.Name())
			}
			for _, ws := range a.Order.Weights {
				for _, w := range ws {
					if !(w > 0) || w > 4.0001 {
						t.Fatalf("epoch %d: weight %v outside (0, 4]", e, w)
					}
				}
			}
			if a.Order.Ahead != 1 {
				t.Errorf("epoch %d published %d ahead", e, a.Order.Ahead)
			}
			if len(a.Order.Weights) > 0 {
				weighted++
			}
		}
	}
	if weighted == 0 {
		t.Error("no order carried weights")
	}
}

// TestNodeWithoutRanksReportsItsCache: where draws are cache-aware, a node
// that caches samples for ranks elsewhere tells the leader what it holds
// on a timer, so the draws count its cache too.
func TestNodeWithoutRanksReportsItsCache(t *testing.T) {
	const world = 2
	m := startMesh(t, 3, meshOpts{samples: 300, minSize: 20, maxSize: 100, replicas: 1, configure: func(i int, c *Config) {
		c.Boost = 3
		c.Cluster.ResidentEvery = 50 * time.Millisecond
		c.Cluster.Prefetch = -1
	}})
	// Ranks train on the leader and on one other node; the third only
	// serves what it owns.
	var lead *testPeer
	var others []*testPeer
	for _, p := range m.peers {
		if p.node.lead.leading() {
			lead = p
		} else {
			others = append(others, p)
		}
	}
	if lead == nil || len(others) != 2 {
		t.Fatalf("no single leader: %d others", len(others))
	}
	onNodes := []*testPeer{lead, others[0]}
	idle := others[1].node.Name()
	trainEpochs(t, 1, world, m.files, func(r int) *redis.Client { return onNodes[r].client(t) },
		func(int64) float64 { return 1 })
	ds := lead.node.ordered[0]
	waitFor(t, 10*time.Second, "the leader to count "+idle+"'s cache", func() bool {
		lj := ds.def.leaderJob()
		return lj != nil && slices.Contains(lj.Status().Resident, idle)
	})
	if st := ds.def.leaderJob().Status(); slices.Contains(st.Resident, lead.node.Name()) {
		t.Errorf("the leader counts its own cache as a peer's: %v", st.Resident)
	}
}

// TestMergedScoresReachEveryOwner: ranks on three nodes train an epoch
// and report a loss for every sample; the leader merges them and sends
// each sample's merged score to its owners (queued by ring partition,
// wire.ScoreQueue). Every node must then hold, for every sample it owns
// and for no other, the leader's score of it: the leader's own share
// applied on the leader, the others' sent to them.
func TestMergedScoresReachEveryOwner(t *testing.T) {
	scoredMesh(t, 3, nil, ownedCheck{})
}

// scoredMesh starts a mesh of world nodes (configure as meshOpts's),
// trains an epoch of a rank on each, and waits until every node holds the
// merged scores of the samples it owns.
func scoredMesh(t *testing.T, world int, configure func(i int, c *Config), check ownedCheck) *testMesh {
	t.Helper()
	m := startMesh(t, world, meshOpts{samples: 600, minSize: 20, maxSize: 100, replicas: 2, configure: configure})
	trainEpochs(t, 1, world, m.files, func(r int) *redis.Client { return m.peers[r].client(t) },
		func(id int64) float64 { return 0.1 + float64(id%13) })
	waitScoresOwned(t, m, check)
	return m
}

// TestScoresFollowTheRing: once the merged scores have reached their
// owners, a member dies and then one joins; after each, every member
// holds, for every sample it owns by the new ring, the leader's score of
// it, and none of the samples it no longer owns: the survivors take the
// dead member's samples' scores from their copies of the leader's table,
// and the leader sends the joining member those of its samples.
func TestScoresFollowTheRing(t *testing.T) {
	m := scoredMesh(t, 4, nil, ownedCheck{})
	lead := m.leader(t)
	waitFor(t, 10*time.Second, "every member's copy of the leader's table", func() bool {
		want := tableScores(lead)
		for _, p := range m.peers {
			if tableScores(p) != want {
				return false
			}
		}
		return true
	})
	var victim *testPeer
	for _, p := range m.peers {
		if p != lead {
			victim = p
		}
	}
	victim.node.kill()
	waitFor(t, 10*time.Second, "the survivors' rings without the dead member", func() bool { return m.converged(m.alive()) })
	waitScoresOwned(t, m, ownedCheck{})
	m.addPeer(t, nil)
	waitFor(t, 10*time.Second, "the rings with the joining member", func() bool { return m.converged(m.alive()) })
	waitScoresOwned(t, m, ownedCheck{})
}

// TestNewOwnersGetFreshScores: in a mesh whose copies of the leader's
// table reach members other than the standbys (the two next in line to
// lead) rarely, as --replicate-budget allows in a large mesh (here a
// byte a second: once), a member that comes to own samples holds the
// leader's newest scores of them, not its copy's older ones: when a
// member dies, the leader sends each member that gains samples their
// scores; when the leader dies, the new one sends every member those of
// all its samples once it leads.
func TestNewOwnersGetFreshScores(t *testing.T) {
	const world = 5
	// Five members under load: one may flap, and merges made while rings
	// differ can leave scores of samples a member does not own (see
	// Node.followRingScores); the check is of the samples each owns.
	lax := ownedCheck{leftovers: true}
	m := scoredMesh(t, world, func(_ int, c *Config) { c.Cluster.ReplicateBudget = 1 }, lax)
	waitFor(t, 10*time.Second, "every member's first copy of the table", func() bool {
		for _, p := range m.peers {
			if sc, _ := p.node.ordered[0].def.scores.Summary(); sc == 0 {
				return false
			}
		}
		return true
	})
	// Other losses: every merged score changes, and the copies of the
	// members that do not stand by keep the scores of before.
	if err := testsupport.Parallel(world, func(r int) error {
		c := m.peers[r].client(t)
		if _, err := trainEpoch(context.Background(), c, m.files, "", 1, r, world, func(id int64) float64 { return 30 - float64(id%7) }); err != nil {
			return err
		}
		return c.Do(context.Background(), "SHADE.DONE", "ds", 1, r).Err()
	}); err != nil {
		t.Fatal(err)
	}
	waitScoresOwned(t, m, lax)
	lead := m.leader(t)
	stale := m.peers[1+wire.TableStandbys:] // n3, n4: not next in line to lead
	for _, p := range stale {
		if tableScores(p) == tableScores(lead) {
			t.Fatalf("%s holds the leader's newest table", p.node.Name())
		}
	}
	stale[0].node.kill() // n3: n4, with its old copy, takes some of its samples
	waitFor(t, 10*time.Second, "the survivors' rings without the dead member", func() bool { return m.converged(m.alive()) })
	waitScoresOwned(t, m, lax)
	lead.node.kill() // n0: n4 takes some of its samples, and n1 leads
	waitFor(t, 10*time.Second, "the survivors' rings without the leader", func() bool { return m.converged(m.alive()) })
	waitScoresOwned(t, m, lax)
}

// TestScoresOutOfOrder: a member keeps the newer of two scores of a
// sample that reach it out of order (by their stamps, wire.Merged), and
// refuses a message whose stamps do not match its samples.
func TestScoresOutOfOrder(t *testing.T) {
	m := scoredMesh(t, 3, nil, ownedCheck{})
	p := m.follower(t)
	ds := p.node.ordered[0]
	var id uint32
	for !contains(p.node.owners(ds, id), p.node.Name()) {
		id++
	}
	term := m.leader(t).node.lead.ownTerm() + 100
	held := func() float32 {
		p.node.polMu.Lock()
		defer p.node.polMu.Unlock()
		return ds.def.owned[id]
	}
	for _, c := range []struct {
		term uint64
		seq  uint32
		give float32
		want float32
	}{
		{term, 50, 5, 5},
		{term, 40, 6, 5},    // older: dropped
		{term, 50, 7, 7},    // the same merge: taken
		{term + 1, 1, 8, 8}, // a later leader's
		{term, 1000, 9, 8},  // an earlier leader's: dropped
		{term + 1, 2, 10, 10},
	} {
		req := &wire.ScoresReq{Dataset: "ds", IDs: wire.U32s{id}, Scores: wire.F32s{c.give}, Term: c.term, Seqs: wire.U32s{c.seq}}
		if err := p.node.applyScores(req); err != nil {
			t.Fatal(err)
		}
		if got := held(); got != c.want {
			t.Fatalf("after score %v of term %d seq %d: holds %v, want %v", c.give, c.term, c.seq, got, c.want)
		}
	}
	bad := &wire.ScoresReq{Dataset: "ds", IDs: wire.U32s{id, id + 1}, Scores: wire.F32s{1, 2}, Term: term + 1, Seqs: wire.U32s{3}}
	if err := p.node.applyScores(bad); !errors.Is(err, ErrBadReport) || held() != 10 {
		t.Fatalf("two scores with one stamp: %v, holds %v; want ErrBadReport and 10", err, held())
	}
}

// TestScoresFollowACountMove: two members of a new mesh hold scores
// when three given 271 partitions join, and the two move to 271 (every
// sample's owners change): then every member holds the leader's score of
// each sample it owns, the three joining ones too. A member may keep
// scores of samples it does not own: the leader's rings pass through
// members seen one at a time, and what it sent a member by a ring that
// member never held is not dropped (see Node.followRingScores).
func TestScoresFollowACountMove(t *testing.T) {
	m := scoredMesh(t, 2, nil, ownedCheck{})
	for range 3 {
		m.addPeer(t, func(c *Config) { c.Cluster.Partitions = 271 })
	}
	waitFor(t, 30*time.Second, "all five sharing the dataset at 271 partitions", func() bool {
		for _, p := range m.peers {
			if r := p.node.ordered[0].ring.Load(); r.Config().Partitions != 271 || len(r.Members()) != 5 {
				return false
			}
		}
		return m.converged(m.peers)
	})
	waitScoresOwned(t, m, ownedCheck{leftovers: true})
}

// TestSavedScoresFollowTheRing: a member started with scores saved by
// another (--state-dir: a peer restarted under another name, or its
// folder moved) loads them for every sample, and once it has a ring keeps
// those of the samples it owns and forgets the others.
func TestSavedScoresFollowTheRing(t *testing.T) {
	const world = 3
	state := t.TempDir()
	m := scoredMesh(t, world, func(i int, c *Config) {
		if i == world-1 {
			c.StateDir = state
		}
	}, ownedCheck{})
	if err := m.peers[world-1].node.Close(); err != nil { // saves its copy of the table
		t.Fatal(err)
	}
	m.addPeer(t, func(c *Config) { c.StateDir = state })
	waitFor(t, 10*time.Second, "the rings with the new member", func() bool { return m.converged(m.alive()) })
	waitScoresOwned(t, m, ownedCheck{})
}

// tableScores is p's copy of the table of "ds"'s default job: the
// samples it has scored and their scores.
func tableScores(p *testPeer) string {
	ds := p.node.ordered[0]
	m, _ := ds.def.scores.ScoredOf(allIDs(ds.len), 0)
	return fmt.Sprint(m.IDs, m.Scores)
}

func allIDs(n int) []uint32 {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(i)
	}
	return ids
}

// ownedCheck relaxes waitScoresOwned where merges cross ring changes
// (see Node.followRingScores).
type ownedCheck struct {
	leftovers bool // a node may hold scores of samples it does not own
	anyScore  bool // an owned sample's score may be an earlier merge's
}

// sameScore reports whether a node's score of a sample matches the
// leader's: both none or, where any, both some; else the same value.
func sameScore(got float32, want float64, anyScore bool) bool {
	if math.IsNaN(float64(got)) || math.IsNaN(want) || anyScore {
		return math.IsNaN(float64(got)) == math.IsNaN(want)
	}
	return got == float32(want)
}

// waitScoresOwned waits until every live node holds, for every sample it
// owns, the leader's merged score of it (none where the leader has none),
// and none of any other sample, unless check relaxes it.
func waitScoresOwned(t *testing.T, m *testMesh, check ownedCheck) {
	t.Helper()
	lead := m.leader(t)
	mismatch := func(p *testPeer) string {
		want := make([]float64, len(m.files))
		for i := range want {
			want[i] = math.NaN()
		}
		scored, _ := lead.node.ordered[0].def.scores.ScoredOf(allIDs(len(m.files)), 0)
		for i, id := range scored.IDs {
			want[id] = float64(scored.Scores[i])
		}
		n := p.node
		ds := n.ordered[0]
		n.polMu.Lock()
		defer n.polMu.Unlock()
		owned := ds.def.owned
		for id := range m.files {
			mine := contains(n.owners(ds, uint32(id)), n.Name())
			switch {
			case owned == nil:
				return "no scores"
			case !mine && !check.leftovers && !math.IsNaN(float64(owned[id])):
				return fmt.Sprintf("a score of sample %d, which it does not own", id)
			case mine && !sameScore(owned[id], want[id], check.anyScore):
				return fmt.Sprintf("score %v of sample %d, the leader's is %v", owned[id], id, want[id])
			}
		}
		return ""
	}
	for _, p := range m.alive() {
		var why string
		if _, err := testsupport.Poll(context.Background(), 10*time.Second, func() bool {
			why = mismatch(p)
			return why == ""
		}); err != nil {
			t.Fatalf("%s does not hold the merged scores of its samples: %s", p.node.Name(), why)
		}
	}
}

// TestOwnersByHashedSamples checks that once a mesh forms, every node has
// hashed the dataset's samples into the ring's partitions and that the
// owners it finds through them are, sample for sample, those the ring gives
// for the sample's key, on every node; the view is the ring's own slice.
// The leader's placement of the samples (for its locality split) and the
// node's test of its own samples (for the lookahead) agree with them, and
// the placement refuses an id past the dataset.
func TestOwnersByHashedSamples(t *testing.T) {
	m := startMesh(t, 3, meshOpts{samples: 700, replicas: 2})
	waitFor(t, 10*time.Second, "every node's samples hashed", func() bool {
		for _, p := range m.peers {
			if p.node.ordered[0].samples.Load() == nil {
				return false
			}
		}
		return true
	})
	for _, p := range m.peers {
		ds := p.node.ordered[0]
		r := ds.ring.Load()
		s := ds.samples.Load()
		if !s.Fits(r) || s.Len() != len(m.files) {
			t.Fatalf("%s: samples hashed for %v, want %d samples in the ring's partitions", p.node.Name(), s, len(m.files))
		}
		for i := range m.files {
			want := r.Owners([]byte("ds/" + strconv.Itoa(i)))
			if got := p.node.owners(ds, uint32(i)); !slices.Equal(got, want) || len(want) != 2 {
				t.Fatalf("%s: sample %d owned by %v, the ring says %v", p.node.Name(), i, got, want)
			}
		}
		if a, b := p.node.ownersView(ds, 5), r.SampleOwners(s, 5); &a[0] != &b[0] {
			t.Fatalf("%s: ownersView copied the ring's owners", p.node.Name())
		}
		where, ours := p.node.placement(ds), p.node.ownsSample(ds)
		ids := make([]uint32, len(m.files))
		for i := range ids {
			ids[i] = uint32(i)
		}
		masks, groups := make([]uint64, len(ids)), make([]int32, len(ids))
		ours(ids, masks)
		where.GroupsOf(ids, groups)
		for i := range m.files {
			if want := contains(p.node.owners(ds, uint32(i)), p.node.Name()); (masks[i] == 1) != want {
				t.Fatalf("%s: ownsSample(%d) = %t, its owners say %t", p.node.Name(), i, !want, want)
			}
			g := where.Group(uint32(i))
			if int(groups[i]) != g {
				t.Fatalf("%s: sample %d in group %d, of a run of samples in %d", p.node.Name(), i, g, groups[i])
			}
			if want := p.node.owners(ds, uint32(i)); g < 0 || g >= where.Groups || !slices.Equal(where.Owners(g), want) {
				t.Fatalf("%s: sample %d placed in group %d of %d, owned by %v; its owners are %v", p.node.Name(), i, g, where.Groups, where.Owners(g), want)
			}
		}
		past := []uint32{0, uint32(len(m.files))}
		where.GroupsOf(past, groups[:2])
		if where.GroupEach == nil || groups[1] != -1 {
			t.Fatalf("%s: an id past the dataset in group %d of a run of samples (a table read: %t), want -1", p.node.Name(), groups[1], where.GroupEach != nil)
		}
		if _, err := sampling.LocalitySplit(past, 2, []string{"a", "b"}, where); !errors.Is(err, sampling.ErrBadPlacement) {
			t.Fatalf("%s: a split of an id past the dataset: %v, want ErrBadPlacement", p.node.Name(), err)
		}
	}
}

// TestOrdersTurnAheadWhenRanksWait: with OrderAheadAt, a 3-node mesh
// whose ranks wait too long for every order (any draw counts here) turns
// its orders ahead after epoch 0, whose order and the speculation of
// epoch 1's, drawn while it trains, make two draws in a row: epoch 1 is
// published as before, epoch 2 with it, and from then on each an epoch
// early. Every peer holds the same orders across the change, and the
// ranks train on through it.
func TestOrdersTurnAheadWhenRanksWait(t *testing.T) {
	const world, epochs = 3, 6
	m := startMesh(t, 3, meshOpts{samples: 600, minSize: 20, maxSize: 100, replicas: 1, configure: func(i int, c *Config) {
		c.OrderAheadAt, c.minAheadDraw = 1e-9, time.Nanosecond
		c.KeepEpochs = 10 // the orders from before the change too
		c.Cluster.Prefetch = -1
	}})
	trainEpochs(t, epochs, world, m.files, func(r int) *redis.Client { return m.peers[r].client(t) },
		func(id int64) float64 { return float64(id%7) / 2 })
	m.waitNewest(t, epochs+1)
	for e := 1; e <= epochs+1; e++ {
		var want string
		for _, p := range m.peers {
			a := p.node.ordered[0].def.book.Ask(e, 0, world)
			if a.Order == nil {
				t.Fatalf("%s lacks epoch %d", p.node.Name(), e)
			}
			if got := orderDigest(a.Order); want == "" {
				want = got
			} else if got != want {
				t.Errorf("epoch %d differs on %s", e, p.node.Name())
			}
			if wantAhead := min(e-1, 1); a.Order.Ahead != wantAhead {
				t.Errorf("epoch %d published %d ahead on %s, want %d", e, a.Order.Ahead, p.node.Name(), wantAhead)
			}
		}
	}
}

// TestDoneWaitsForItsOrder: a rank's done that reaches a node before the
// order the rank finished (the node just restarted, or is taking over as
// leader: chaos, a done refused by n0 back from a SIGKILL) waits for that
// order, up to a fetch's time, instead of being refused at once; a done
// whose order never comes is refused once that time is up.
func TestDoneWaitsForItsOrder(t *testing.T) {
	m := startMesh(t, 2, meshOpts{samples: 300, replicas: 2})
	n := m.follower(t).node
	ds := n.ordered[0]
	js, err := n.job(ds, "late", true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Done(context.Background(), "ds", "late", 0, 0) }()
	select {
	case err := <-done:
		t.Fatalf("the done was answered (%v) before its order came", err)
	case <-time.After(200 * time.Millisecond): // a bounded look, within the fetch's second
	}
	n.installOrder(js, &wire.PublishMsg{Dataset: "ds", Job: "late", Version: ds.manifest.Version, Epoch: 0, Term: 1, World: 1,
		Slices: wire.PackSlices([][]uint32{{0, 1, 2}})})
	if err := <-done; err != nil {
		t.Fatalf("the done, once its order came: %v", err)
	}
	if err := n.Done(context.Background(), "ds", "never", 0, 0); !errors.Is(err, ErrEpoch) {
		t.Fatalf("a done whose order never comes: %v, want ErrEpoch", err)
	}
}
