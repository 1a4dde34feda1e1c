package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/protocol/stats"
)

// procMesh is k shade-peer processes on loopback.
type procMesh struct {
	peers []*testsupport.Peer
	names []string
	ds    *testsupport.Dataset
}

func startProcMesh(t *testing.T, k, samples int, extra ...string) *procMesh {
	t.Helper()
	ds := testsupport.WriteDataset(t, testsupport.DatasetSpec{Samples: samples, Seed: 5})
	tls := t.TempDir()
	m := &procMesh{ds: ds}
	seed := ""
	for i := 0; i < k; i++ {
		name := fmt.Sprintf("n%d", i)
		gossip := testsupport.LoopbackAddr(t)
		if i == 0 {
			seed = gossip
		}
		args := append([]string{"--name", name, "--dataset", "ds=" + ds.Dir, "--cache-size", "64MiB",
			"--gossip-addr", gossip, "--peer-addr", testsupport.LoopbackAddr(t), "--seeds", seed,
			"--dev-tls-dir", tls, "--gossip-profile", "local", "--expect", strconv.Itoa(k), "--join-wait", "2s"}, extra...)
		m.peers = append(m.peers, startPeer(t, args...))
		m.names = append(m.names, name)
	}
	m.waitMembers(t, m.peers, 20*time.Second)
	return m
}

func peerStats(sock string) (stats.Node, error) {
	var st stats.Node
	c := redisClient(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	js, err := c.Do(ctx, "SHADE.STATS").Text()
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(js), &st)
}

// waitMembers waits (at most d) until every given peer sees exactly them
// and shares its datasets with exactly them (a joining peer advertises
// its datasets a moment after it joins), and returns how long that took.
func (m *procMesh) waitMembers(t testing.TB, ps []*testsupport.Peer, d time.Duration) time.Duration {
	t.Helper()
	var want []string
	for _, p := range ps {
		want = append(want, m.names[slices.Index(m.peers, p)])
	}
	slices.Sort(want)
	return testsupport.WaitFor(t, d, fmt.Sprintf("the peers see exactly the members %v", want), func() bool {
		for _, p := range ps {
			st, err := peerStats(p.Socket)
			if err != nil || !slices.Equal(st.Members, want) || !st.SharesWith(want) {
				return false
			}
		}
		return true
	})
}

func TestMeshProcessesServeIdenticalBytesOnROwners(t *testing.T) {
	m := startProcMesh(t, 5, 10000)
	ctx := context.Background()
	n := m.ds.Len()
	for _, p := range m.peers {
		c := redisClient(p.Socket)
		for start := 0; start < n; start += 500 {
			ids := make([]int, 0, 500)
			for i := start; i < min(start+500, n); i++ {
				ids = append(ids, i)
			}
			vals, err := c.MGet(ctx, testsupport.Keys("ds", ids)...).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := testsupport.CheckValues(m.ds, ids, vals); err != nil {
				t.Fatalf("via %s: %v", p.Socket, err)
			}
		}
		c.Close()
	}
	// Every sample resident on exactly R = 2 peers (offers to co-owners
	// are asynchronous: wait for them).
	var hist map[int]int
	defer func() {
		if t.Failed() {
			t.Logf("residency (copies: samples) at the end: %v", hist)
		}
	}()
	testsupport.WaitFor(t, 15*time.Second, "every sample is resident on exactly 2 peers", func() bool {
		counts := make([]int, n)
		for _, p := range m.peers {
			c := redisClient(p.Socket)
			pipe := c.Pipeline()
			cmds := make([]*redis.IntCmd, n)
			for i := range n {
				cmds[i] = pipe.Exists(ctx, testsupport.Key("ds", i))
			}
			_, err := pipe.Exec(ctx)
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			for i, cmd := range cmds {
				counts[i] += int(cmd.Val())
			}
		}
		hist = map[int]int{}
		for _, c := range counts {
			hist[c]++
		}
		return hist[2] == n
	})
	t.Logf("residency after one pass from each of 5 peers: %v (copies: samples)", hist)
	for i, p := range m.peers {
		st, err := peerStats(p.Socket)
		if err != nil {
			t.Fatal(err)
		}
		tot := st.Datasets[0].Total
		t.Logf("%s: local hits %d, peer hits %d, source reads %d", m.names[i], tot.LocalHits, tot.PeerHits, tot.SourceReads)
	}
}

func TestMeshProcessKilledUnderLoad(t *testing.T) {
	m := startProcMesh(t, 5, 3000)
	st, _ := peerStats(m.peers[0].Socket)
	leader := st.Datasets[0].Job.Leader
	victim := m.peers[len(m.peers)-1]
	if m.names[len(m.peers)-1] == leader {
		t.Fatalf("the victim %s is the leader", leader)
	}
	survivors := m.peers[:len(m.peers)-1]
	var reads, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range survivors {
		wg.Add(1)
		go func(i int, p *testsupport.Peer) {
			defer wg.Done()
			c := redisClient(p.Socket)
			defer c.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				idx := make([]int, 64)
				for j := range idx {
					idx[j] = rng.IntN(m.ds.Len())
				}
				vals, err := c.MGet(context.Background(), testsupport.Keys("ds", idx)...).Result()
				if err != nil {
					failed.Add(64)
					continue
				}
				for j, v := range vals {
					reads.Add(1)
					if m.ds.CheckValue(idx[j], v) != nil {
						failed.Add(1)
					}
				}
			}
		}(i, p)
	}
	// The kill comes under load, and the load goes on after the survivors
	// have noticed it.
	readsAtLeast := func(n int64) func() bool { return func() bool { return reads.Load() >= n } }
	testsupport.WaitFor(t, 30*time.Second, "the readers have made 2,000 reads", readsAtLeast(2000))
	victim.Kill()
	took := m.waitMembers(t, survivors, 10*time.Second)
	testsupport.WaitFor(t, 30*time.Second, "the readers have made 2,000 more reads", readsAtLeast(reads.Load()+2000))
	close(stop)
	wg.Wait()
	t.Logf("SIGKILL %s under load: %d reads, %d failed or wrong; all survivors marked it dead within %v",
		m.names[len(m.peers)-1], reads.Load(), failed.Load(), took)
	if failed.Load() != 0 {
		t.Errorf("%d reads failed or returned wrong bytes", failed.Load())
	}
	if reads.Load() == 0 {
		t.Error("no reads were made")
	}
}

func TestMeshLeaderKilledMidEpoch(t *testing.T) {
	const world = 3
	m := startProcMesh(t, 4, 3000)
	st, _ := peerStats(m.peers[0].Socket)
	leader := slices.Index(m.names, st.Datasets[0].Job.Leader)
	if leader < 0 {
		t.Fatalf("no leader: %+v", st)
	}
	var trainers []*testsupport.Peer
	for i, p := range m.peers {
		if i != leader {
			trainers = append(trainers, p)
		}
	}
	ctx := context.Background()
	clients := make([]*redis.Client, world)
	for r := range clients {
		clients[r] = redisClient(trainers[r].Socket)
		defer clients[r].Close()
	}
	if err := testsupport.Parallel(world, func(r int) error {
		ids, err := clients[r].Do(ctx, "SHADE.ORDER", "ds", 0, r, world, 30000).Int64Slice()
		if err != nil {
			return err
		}
		for start := 0; start < len(ids); start += 100 {
			batch := ids[start:min(start+100, len(ids))]
			report := []any{"SHADE.REPORT", "ds", 0}
			for _, id := range batch {
				report = append(report, id, float64(id%7))
			}
			vals, err := clients[r].MGet(ctx, testsupport.Keys("ds", batch)...).Result()
			if err != nil {
				return err
			}
			if err := testsupport.CheckValues(m.ds, batch, vals); err != nil {
				return err
			}
			if err := clients[r].Do(ctx, report...).Err(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The leader replicates the merged scores in the background: kill it
	// once the survivors hold them.
	testsupport.WaitFor(t, 30*time.Second, "every survivor holds the merged scores", func() bool {
		for _, p := range trainers {
			st, err := peerStats(p.Socket)
			if err != nil || st.Datasets[0].Job.ScoredSamples < m.ds.Len()*9/10 {
				return false
			}
		}
		return true
	})
	killed := time.Now()
	m.peers[leader].Kill()
	for r := 0; r < world; r++ {
		if err := clients[r].Do(ctx, "SHADE.DONE", "ds", 0, r).Err(); err != nil {
			t.Fatalf("rank %d DONE: %v", r, err)
		}
	}
	// Every rank gets epoch 1's order; every survivor holds the same one.
	slicesOf := make([][]int64, world)
	for r := 0; r < world; r++ {
		ids, err := clients[r].Do(ctx, "SHADE.ORDER", "ds", 1, r, world, 10000).Int64Slice()
		if err != nil {
			t.Fatalf("rank %d epoch 1 order: %v", r, err)
		}
		slicesOf[r] = ids
	}
	took := time.Since(killed)
	digest := func(ss [][]int64) string {
		h := sha256.New()
		for _, s := range ss {
			fmt.Fprint(h, s, ";")
		}
		return fmt.Sprintf("%x", h.Sum(nil)[:8])
	}
	want := digest(slicesOf)
	for _, p := range trainers {
		c := redisClient(p.Socket)
		got := make([][]int64, world)
		for r := 0; r < world; r++ {
			got[r], _ = c.Do(ctx, "SHADE.ORDER", "ds", 1, r, world, 1000).Int64Slice()
		}
		c.Close()
		if d := digest(got); d != want {
			t.Errorf("%s holds a different epoch 1 order (%s, want %s)", p.Socket, d, want)
		}
	}
	t.Logf("leader %s killed by SIGKILL mid-epoch; every rank had epoch 1's order %v later (order %s on every survivor)",
		m.names[leader], took, want)
}
