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

func TestMeshOverBucketReadsEachObjectOnce(t *testing.T) {
	const n, k = 3000, 3
	g := s3test.Start(t)
	dir, files := writeDataset(t, n)
	env := []string{"AWS_ACCESS_KEY_ID=" + g.AccessKey, "AWS_SECRET_ACCESS_KEY=" + g.SecretKey,
		"AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_CONFIG_FILE=/nonexistent"}
	url := "s3://shade-e2e/fmnist/train"
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
	var peers []*peer
	var names []string
	seed := ""
	for i := range k {
		name := fmt.Sprintf("n%d", i)
		gossip := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		if i == 0 {
			seed = gossip
		}
		peers = append(peers, startPeer(t, env, "--name", name, "--dataset", "ds="+url,
			"--s3-endpoint", g.Endpoint, "--s3-path-style", "--state-dir", t.TempDir(), "--cache-size", "64MiB",
			"--gossip-addr", gossip, "--peer-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--seeds", seed,
			"--dev-tls-dir", tls, "--gossip-profile", "local", "--expect", strconv.Itoa(k)))
		names = append(names, name)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range peers {
		for !slices.Equal(members(p.socket), names) {
			if time.Now().After(deadline) {
				t.Fatalf("peers did not converge on members %v: %v", names, members(p.socket))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	ctx := context.Background()
	for pass := range 2 {
		for pi, p := range peers {
			c := client(p.socket)
			for start := 0; start < n; start += 250 {
				keys := make([]string, 0, 250)
				for i := start; i < min(start+250, n); i++ {
					keys = append(keys, "ds/"+strconv.Itoa(i))
				}
				vals, err := c.MGet(ctx, keys...).Result()
				if err != nil {
					t.Fatalf("pass %d, peer %d: %v", pass, pi, err)
				}
				for i, v := range vals {
					if s, ok := v.(string); !ok || s != string(files[start+i]) {
						t.Fatalf("pass %d: %s via peer %d: wrong bytes", pass, keys[i], pi)
					}
				}
			}
			c.Close()
		}
	}

	gets := g.GetCounts(t, "shade-e2e")
	hist := map[int]int{}
	for _, c := range gets {
		hist[c]++
	}
	t.Logf("objects by GETs from the store after 2 passes through %d peers: %v (GETs: objects)", k, hist)
	if len(gets) != n {
		t.Errorf("%d objects read from the store, want all %d", len(gets), n)
	}
	for key, c := range gets {
		if c > 1 {
			t.Errorf("%s fetched %d times from the store, want at most once", key, c)
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
