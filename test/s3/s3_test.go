// Package s3 tests a mesh of real shade-peer processes over a dataset in an
// S3-compatible object store (a real Versity S3 Gateway on loopback): every
// sample byte-exact through every peer, and each object read from the store
// at most once while the mesh keeps it cached.
package s3

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/internal/s3test"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "shade-s3-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "../../cmd/shade-peer", "../../cmd/shadectl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// writeDataset writes n small files CLASS/NNNNN.bin and returns the folder
// and the bytes in manifest (key) order.
func writeDataset(t *testing.T, n int) (string, [][]byte) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ds")
	rng := rand.New(rand.NewPCG(7, 8))
	type file struct {
		rel  string
		data []byte
	}
	files := make([]file, n)
	for i := range files {
		class := fmt.Sprintf("c%d", i%10)
		os.MkdirAll(filepath.Join(dir, class), 0o755)
		data := make([]byte, 20+rng.IntN(400))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		files[i] = file{class + "/" + fmt.Sprintf("%05d.bin", i), data}
		if err := os.WriteFile(filepath.Join(dir, files[i].rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.rel, b.rel) })
	out := make([][]byte, n)
	for i, f := range files {
		out[i] = f.data
	}
	return dir, out
}

// freePort returns a port free for both TCP and UDP on 127.0.0.1.
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
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

type peer struct {
	cmd    *exec.Cmd
	socket string
	log    *bytes.Buffer
	done   chan error
}

// startPeer runs shade-peer with the gateway's credentials in its
// environment and waits until its socket answers; Cleanup kills it by PID.
func startPeer(t *testing.T, env []string, args ...string) *peer {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "shade.sock")
	p := &peer{socket: sock, log: new(bytes.Buffer), done: make(chan error, 1)}
	p.cmd = exec.Command(filepath.Join(binDir, "shade-peer"), append([]string{"--socket", sock, "--log-format", "json",
		"--admin-addr", "off"}, args...)...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test process
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("shade-peer log:\n%s", p.log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := client(sock)
		pong, err := c.Ping(context.Background()).Result()
		c.Close()
		if err == nil && pong == "PONG" {
			return p
		}
		select {
		case err := <-p.done:
			t.Fatalf("shade-peer exited before serving: %v\n%s", err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("shade-peer did not serve %s within 30s\n%s", sock, p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func client(sock string) *redis.Client {
	return redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Protocol: 2, MaxRetries: -1})
}

func members(sock string) []string {
	c := client(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	js, err := c.Do(ctx, "SHADE.STATS").Text()
	if err != nil {
		return nil
	}
	var st struct {
		Members []string `json:"members"`
	}
	json.Unmarshal([]byte(js), &st)
	return st.Members
}

// bucketMesh is k shade-peer processes over a bucket of n objects.
type bucketMesh struct {
	g     *s3test.Gateway
	peers []*peer
	files [][]byte
}

const meshBucket = "shade-e2e"

// startBucketMesh uploads n small objects with shadectl into a fresh
// gateway and starts k peers serving them as dataset "ds" (R = 2).
func startBucketMesh(t *testing.T, n, k int) *bucketMesh {
	t.Helper()
	g := s3test.Start(t)
	dir, files := writeDataset(t, n)
	env := []string{"AWS_ACCESS_KEY_ID=" + g.AccessKey, "AWS_SECRET_ACCESS_KEY=" + g.SecretKey,
		"AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_CONFIG_FILE=/nonexistent"}
	url := "s3://" + meshBucket + "/fmnist/train"
	up := exec.Command(filepath.Join(binDir, "shadectl"), "dataset", "upload", dir, url,
		"--s3-endpoint", g.Endpoint, "--s3-path-style")
	up.Env = append(os.Environ(), env...)
	var upErr bytes.Buffer
	up.Stderr = &upErr
	out, err := up.Output()
	if err != nil {
		t.Fatalf("shadectl dataset upload: %v\n%s", err, upErr.Bytes())
	}
	t.Logf("%s", bytes.TrimSpace(out))

	tls := t.TempDir()
	m := &bucketMesh{g: g, files: files}
	var names []string
	seed := ""
	for i := range k {
		name := fmt.Sprintf("n%d", i)
		gossip := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		if i == 0 {
			seed = gossip
		}
		m.peers = append(m.peers, startPeer(t, env, "--name", name, "--dataset", "ds="+url,
			"--s3-endpoint", g.Endpoint, "--s3-path-style", "--state-dir", t.TempDir(), "--cache-size", "64MiB",
			"--gossip-addr", gossip, "--peer-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--seeds", seed,
			"--dev-tls-dir", tls, "--gossip-profile", "local", "--expect", strconv.Itoa(k), "--replicas", "2"))
		names = append(names, name)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range m.peers {
		for !slices.Equal(members(p.socket), names) {
			if time.Now().After(deadline) {
				t.Fatalf("peers did not converge on members %v: %v", names, members(p.socket))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return m
}

// readAll reads every sample through peer pi in MGETs of 250 and checks
// the bytes; safe to run on several peers at once.
func (m *bucketMesh) readAll(pass, pi int) error {
	c := client(m.peers[pi].socket)
	defer c.Close()
	for start := 0; start < len(m.files); start += 250 {
		keys := make([]string, 0, 250)
		for i := start; i < min(start+250, len(m.files)); i++ {
			keys = append(keys, "ds/"+strconv.Itoa(i))
		}
		vals, err := c.MGet(context.Background(), keys...).Result()
		if err != nil {
			return fmt.Errorf("pass %d, peer %d: %w", pass, pi, err)
		}
		for i, v := range vals {
			if s, ok := v.(string); !ok || s != string(m.files[start+i]) {
				return fmt.Errorf("pass %d: %s via peer %d: wrong bytes", pass, keys[i], pi)
			}
		}
	}
	return nil
}

// getHistogram returns, from the gateway's access log, how many objects
// were fetched how many times, and fails t unless every object was.
func (m *bucketMesh) getHistogram(t *testing.T) (map[int]int, map[string]int) {
	t.Helper()
	gets := m.g.GetCounts(t, meshBucket)
	hist := map[int]int{}
	for _, c := range gets {
		hist[c]++
	}
	if len(gets) != len(m.files) {
		t.Errorf("%d objects read from the store, want all %d", len(gets), len(m.files))
	}
	return hist, gets
}

// TestMeshOverBucketReadsEachObjectOnce reads every sample through each of
// 3 peers in turn, twice: each object is fetched from the store once.
func TestMeshOverBucketReadsEachObjectOnce(t *testing.T) {
	m := startBucketMesh(t, 3000, 3)
	for pass := range 2 {
		for pi := range m.peers {
			if err := m.readAll(pass, pi); err != nil {
				t.Fatal(err)
			}
		}
	}
	hist, gets := m.getHistogram(t)
	t.Logf("objects by GETs from the store after 2 passes through 3 peers in turn: %v (GETs: objects)", hist)
	for key, c := range gets {
		if c > 1 {
			t.Errorf("%s fetched %d times from the store, want at most once", key, c)
		}
	}
}

// TestMeshOverBucketConcurrentColdReads reads every sample through all 3
// peers at once, twice. DESIGN.md §8 targets one store read per sample per
// mesh; today that holds for reads in turn (above) but not for concurrent
// cold reads: a sample's R = 2 owners can miss at the same moment and each
// read the store (misses collapse within a peer, not across co-owners), and
// now and then a third peer reads it too. On 3,000 objects about 90% are
// fetched twice and a few three times. This test holds what is met (bytes
// exact, at most one fetch per peer, nothing fetched again while cached)
// and logs the distance from the target; the fix belongs to the mesh's
// read path.
func TestMeshOverBucketConcurrentColdReads(t *testing.T) {
	m := startBucketMesh(t, 3000, 3)
	var after1 map[string]int
	for pass := range 2 {
		errs := make(chan error, len(m.peers))
		for pi := range m.peers {
			go func() { errs <- m.readAll(pass, pi) }()
		}
		for range m.peers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if pass == 0 {
			after1 = m.g.GetCounts(t, meshBucket)
		}
	}
	hist, gets := m.getHistogram(t)
	t.Logf("objects by GETs from the store after 2 concurrent passes through 3 peers: %v (GETs: objects; the target is all at 1)", hist)
	for key, c := range gets {
		if c > len(m.peers) {
			t.Errorf("%s fetched %d times from the store by %d peers", key, c, len(m.peers))
		}
		if c != after1[key] {
			t.Errorf("%s fetched again on the second pass (%d, then %d), while cached", key, after1[key], c)
		}
	}
}

// TestPeerServesShardsFromBucket serves WebDataset tar shards from the
// bucket through a standalone peer: every sample is the msgpack map of its
// members, and each is one ranged GET of its shard.
func TestPeerServesShardsFromBucket(t *testing.T) {
	g := s3test.Start(t)
	g.CreateBucket(t, "shade-wds")
	type sampleWant struct {
		key     string
		members map[string][]byte
	}
	var want []sampleWant
	rng := rand.New(rand.NewPCG(9, 10))
	for s := range 3 {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for j := range 100 {
			key := fmt.Sprintf("s%05d", s*100+j)
			m := map[string][]byte{"png": make([]byte, 50+rng.IntN(2000)), "cls": []byte(strconv.Itoa(j % 10))}
			for i := range m["png"] {
				m["png"][i] = byte(rng.Uint32())
			}
			for _, ext := range []string{"png", "cls"} {
				tw.WriteHeader(&tar.Header{Name: key + "." + ext, Mode: 0o644, Size: int64(len(m[ext])), Typeflag: tar.TypeReg})
				tw.Write(m[ext])
			}
			want = append(want, sampleWant{key, m})
		}
		tw.Close()
		g.Put(t, "shade-wds", fmt.Sprintf("wds/train-%03d.tar", s), buf.Bytes())
	}
	env := []string{"AWS_ACCESS_KEY_ID=" + g.AccessKey, "AWS_SECRET_ACCESS_KEY=" + g.SecretKey,
		"AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_CONFIG_FILE=/nonexistent"}
	p := startPeer(t, env, "--name", "wds", "--dataset", "wds=shards:s3://shade-wds/wds",
		"--s3-endpoint", g.Endpoint, "--s3-path-style", "--state-dir", t.TempDir(), "--cache-size", "64MiB")
	c := client(p.socket)
	defer c.Close()
	names, err := c.Do(context.Background(), "SHADE.MANIFEST", "wds").StringSlice()
	if err != nil || len(names) != len(want) || names[0] != want[0].key {
		t.Fatalf("manifest: %d names (%v), want %d", len(names), err, len(want))
	}
	keys := make([]string, len(want))
	for i := range keys {
		keys[i] = "wds/" + strconv.Itoa(i)
	}
	for pass := range 2 {
		vals, err := c.MGet(context.Background(), keys...).Result()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			s, _ := v.(string)
			var got map[string][]byte
			if err := msgpack.Unmarshal([]byte(s), &got); err != nil {
				t.Fatalf("pass %d, sample %d: %v", pass, i, err)
			}
			if len(got) != 2 || !bytes.Equal(got["png"], want[i].members["png"]) || !bytes.Equal(got["cls"], want[i].members["cls"]) {
				t.Fatalf("pass %d, sample %d (%s): wrong members", pass, i, want[i].key)
			}
		}
	}
	gets := g.GetCounts(t, "shade-wds")
	t.Logf("GETs per shard (1 to index + 1 ranged GET per sample): %v", gets)
	for s := range 3 {
		if n := gets[fmt.Sprintf("wds/train-%03d.tar", s)]; n != 1+100 {
			t.Errorf("shard %d: %d GETs, want 101", s, n)
		}
	}
}
