package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// freePort returns a port free for both TCP and UDP on 127.0.0.1 (gossip
// uses both; QUIC uses UDP).
func freePort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// writeDataset writes n small files in an ImageFolder layout and returns
// the directory and the bytes in manifest order.
func writeDataset(t *testing.T, n int) (string, [][]byte) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ds")
	rng := rand.New(rand.NewPCG(5, 6))
	type file struct {
		rel  string
		data []byte
	}
	files := make([]file, n)
	for i := range files {
		class := fmt.Sprintf("c%d", i%10)
		os.MkdirAll(filepath.Join(dir, class), 0o755)
		data := make([]byte, 30+rng.IntN(200))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		rel := class + "/" + fmt.Sprintf("%05d", i)
		if err := os.WriteFile(filepath.Join(dir, rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
		files[i] = file{rel, data}
	}
	sort.Slice(files, func(a, b int) bool { return files[a].rel < files[b].rel })
	out := make([][]byte, n)
	for i, f := range files {
		out[i] = f.data
	}
	return dir, out
}

// procMesh is k shade-peer processes on loopback.
type procMesh struct {
	peers []*peerProc
	names []string
	files [][]byte
}

func startProcMesh(t *testing.T, k, samples int, extra ...string) *procMesh {
	t.Helper()
	dir, files := writeDataset(t, samples)
	tls := t.TempDir()
	m := &procMesh{files: files}
	seed := ""
	for i := 0; i < k; i++ {
		name := fmt.Sprintf("n%d", i)
		gossip := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		if i == 0 {
			seed = gossip
		}
		args := append([]string{"--name", name, "--dataset", "ds=" + dir, "--cache-size", "64MiB",
			"--gossip-addr", gossip, "--peer-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--seeds", seed,
			"--dev-tls-dir", tls, "--gossip-profile", "local", "--expect", strconv.Itoa(k), "--join-wait", "2s"}, extra...)
		m.peers = append(m.peers, startPeer(t, args...))
		m.names = append(m.names, name)
	}
	m.waitMembers(t, m.peers, 20*time.Second)
	return m
}

type stats struct {
	Members  []string `json:"members"`
	Datasets []struct {
		Total struct {
			Hits        int64 `json:"hits"`
			LocalHits   int64 `json:"local_hits"`
			PeerHits    int64 `json:"peer_hits"`
			SourceReads int64 `json:"source_reads"`
		} `json:"total"`
		Job struct {
			Leader      string `json:"leader"`
			LatestEpoch int    `json:"latest_epoch"`
		} `json:"job"`
	} `json:"datasets"`
}

func peerStats(sock string) (stats, error) {
	var st stats
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

// waitMembers waits until every given peer sees exactly them.
func (m *procMesh) waitMembers(t *testing.T, ps []*peerProc, d time.Duration) time.Duration {
	t.Helper()
	var want []string
	for _, p := range ps {
		want = append(want, m.names[slices.Index(m.peers, p)])
	}
	slices.Sort(want)
	start := time.Now()
	for {
		ok := true
		for _, p := range ps {
			st, err := peerStats(p.socket)
			if err != nil || !slices.Equal(st.Members, want) {
				ok = false
				break
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("peers did not converge on members %v within %v", want, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMeshProcessesServeIdenticalBytesOnROwners(t *testing.T) {
	m := startProcMesh(t, 5, 10000)
	ctx := context.Background()
	for _, p := range m.peers {
		c := redisClient(p.socket)
		for start := 0; start < len(m.files); start += 500 {
			keys := make([]string, 0, 500)
			for i := start; i < min(start+500, len(m.files)); i++ {
				keys = append(keys, "ds/"+strconv.Itoa(i))
			}
			vals, err := c.MGet(ctx, keys...).Result()
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if s, ok := v.(string); !ok || s != string(m.files[start+i]) {
					t.Fatalf("%s via %s: wrong bytes", keys[i], p.socket)
				}
			}
		}
		c.Close()
	}
	// Every sample resident on exactly R = 2 peers (offers to co-owners
	// are asynchronous: wait for them).
	deadline := time.Now().Add(15 * time.Second)
	for {
		counts := make([]int, len(m.files))
		for _, p := range m.peers {
			c := redisClient(p.socket)
			pipe := c.Pipeline()
			cmds := make([]*redis.IntCmd, len(m.files))
			for i := range m.files {
				cmds[i] = pipe.Exists(ctx, "ds/"+strconv.Itoa(i))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			for i, cmd := range cmds {
				counts[i] += int(cmd.Val())
			}
			c.Close()
		}
		hist := map[int]int{}
		for _, c := range counts {
			hist[c]++
		}
		if hist[2] == len(m.files) {
			t.Logf("residency after one pass from each of 5 peers: %v (copies: samples)", hist)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("residency %v; want every sample on exactly 2 peers", hist)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, p := range m.peers {
		st, err := peerStats(p.socket)
		if err != nil {
			t.Fatal(err)
		}
		tot := st.Datasets[0].Total
		t.Logf("%s: local hits %d, peer hits %d, source reads %d", m.names[i], tot.LocalHits, tot.PeerHits, tot.SourceReads)
	}
}

func TestMeshProcessKilledUnderLoad(t *testing.T) {
	m := startProcMesh(t, 5, 3000)
	st, _ := peerStats(m.peers[0].socket)
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
		go func(i int, p *peerProc) {
			defer wg.Done()
			c := redisClient(p.socket)
			defer c.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				idx := make([]int, 64)
				keys := make([]string, 64)
				for j := range keys {
					idx[j] = rng.IntN(len(m.files))
					keys[j] = "ds/" + strconv.Itoa(idx[j])
				}
				vals, err := c.MGet(context.Background(), keys...).Result()
				if err != nil {
					failed.Add(64)
					continue
				}
				for j, v := range vals {
					reads.Add(1)
					if s, ok := v.(string); !ok || s != string(m.files[idx[j]]) {
						failed.Add(1)
					}
				}
			}
		}(i, p)
	}
	time.Sleep(time.Second)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	took := m.waitMembers(t, survivors, 10*time.Second)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("SIGKILL %s under load: %d reads, %d failed or wrong; all survivors marked it dead within %v",
		m.names[len(m.peers)-1], reads.Load(), failed.Load(), took)
	if failed.Load() != 0 {
		t.Errorf("%d reads failed or returned wrong bytes", failed.Load())
	}
	if took > 2*time.Second {
		t.Errorf("survivors took %v to mark the killed peer dead, want within 2s", took)
	}
	if reads.Load() == 0 {
		t.Error("no reads were made")
	}
}

func TestMeshLeaderKilledMidEpoch(t *testing.T) {
	const world = 3
	m := startProcMesh(t, 4, 3000)
	st, _ := peerStats(m.peers[0].socket)
	leader := slices.Index(m.names, st.Datasets[0].Job.Leader)
	if leader < 0 {
		t.Fatalf("no leader: %+v", st)
	}
	var trainers []*peerProc
	for i, p := range m.peers {
		if i != leader {
			trainers = append(trainers, p)
		}
	}
	ctx := context.Background()
	clients := make([]*redis.Client, world)
	for r := range clients {
		clients[r] = redisClient(trainers[r].socket)
		defer clients[r].Close()
	}
	var wg sync.WaitGroup
	errs := make(chan error, world)
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			ids, err := clients[r].Do(ctx, "SHADE.ORDER", "ds", 0, r, world, 30000).Int64Slice()
			if err != nil {
				errs <- err
				return
			}
			for start := 0; start < len(ids); start += 100 {
				batch := ids[start:min(start+100, len(ids))]
				keys := make([]string, len(batch))
				report := []any{"SHADE.REPORT", "ds", 0}
				for i, id := range batch {
					keys[i] = "ds/" + strconv.FormatInt(id, 10)
					report = append(report, id, float64(id%7))
				}
				vals, err := clients[r].MGet(ctx, keys...).Result()
				if err != nil {
					errs <- err
					return
				}
				for i, v := range vals {
					if s, ok := v.(string); !ok || s != string(m.files[batch[i]]) {
						errs <- fmt.Errorf("wrong bytes for %s", keys[i])
						return
					}
				}
				if err := clients[r].Do(ctx, report...).Err(); err != nil {
					errs <- err
					return
				}
			}
		}(r)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // let the leader replicate the merged scores
	if err := m.peers[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-m.peers[leader].done
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
		c := redisClient(p.socket)
		got := make([][]int64, world)
		for r := 0; r < world; r++ {
			got[r], _ = c.Do(ctx, "SHADE.ORDER", "ds", 1, r, world, 1000).Int64Slice()
		}
		c.Close()
		if d := digest(got); d != want {
			t.Errorf("%s holds a different epoch 1 order (%s, want %s)", p.socket, d, want)
		}
	}
	t.Logf("leader %s killed by SIGKILL mid-epoch; every rank had epoch 1's order %v later (order %s on every survivor)",
		m.names[leader], took, want)
	if took > 5*time.Second {
		t.Errorf("epoch 1 came %v after the kill, want within 5s", took)
	}
}
