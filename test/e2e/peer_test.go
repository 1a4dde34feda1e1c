// Package e2e runs the built shade-peer and shadectl binaries as separate
// processes and talks to them with real Redis tools and clients.
package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/dataset"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// bins are shade-peer and shadectl, built once for every test here.
var bins *testsupport.Binaries

func TestMain(m *testing.M) { testsupport.Main(m, testsupport.BuildOptions{}, &bins) }

const fmnistSrc = "/usr/share/datasets/fashion-mnist"

// importFashionMNIST imports the first limit images of each split with
// shadectl and returns the dataset root.
func importFashionMNIST(t *testing.T, limit int) string {
	t.Helper()
	if _, err := os.Stat(fmnistSrc); err != nil {
		t.Skipf("Fashion-MNIST not installed (Debian package dataset-fashion-mnist): %v", err)
	}
	dst := filepath.Join(t.TempDir(), "fmnist")
	out, err := exec.Command(bins.Path("shadectl"), "dataset", "import-idx",
		"--src", fmnistSrc, "--dst", dst, "--limit", strconv.Itoa(limit)).CombinedOutput()
	if err != nil {
		t.Fatalf("shadectl dataset import-idx: %v\n%s", err, out)
	}
	return dst
}

// fashionMNISTTrain imports the first limit images of each split and
// returns the training split's folder and its manifest.
func fashionMNISTTrain(t *testing.T, limit int) (string, *dataset.Manifest) {
	t.Helper()
	train := filepath.Join(importFashionMNIST(t, limit), "train")
	m, err := dataset.Scan(train, nil)
	if err != nil {
		t.Fatal(err)
	}
	return train, m
}

// startPeer runs shade-peer (named e2e unless args name it) and waits
// until its socket answers.
func startPeer(t *testing.T, args ...string) *testsupport.Peer {
	t.Helper()
	return startPeerCmd(t, nil, args...)
}

// startPeerCmd is startPeer behind a command prefix (such as ip netns
// exec NS).
func startPeerCmd(t testing.TB, prefix []string, args ...string) *testsupport.Peer {
	t.Helper()
	return testsupport.StartPeer(t, testsupport.PeerOptions{
		Bin: bins.Path("shade-peer"), Prefix: prefix,
		Args: append([]string{"--name", "e2e", "--log-format", "json"}, args...),
	})
}

func redisClient(sock string) *redis.Client {
	return redis.NewClient(&redis.Options{Network: "unix", Addr: sock, Protocol: 2, MaxRetries: -1})
}

func TestRedisCLIGetReturnsTheFile(t *testing.T) {
	redisCLI, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed (Debian package redis-tools)")
	}
	train, m := fashionMNISTTrain(t, 300)
	p := startPeer(t, "--dataset", "fmnist-train="+train, "--cache-size", "64MiB")

	want, err := os.ReadFile(filepath.Join(train, m.Names.At(123)))
	if err != nil {
		t.Fatal(err)
	}
	for pass := 0; pass < 2; pass++ { // read through, then from the cache
		out, err := exec.Command(redisCLI, "-s", p.Socket, "GET", "fmnist-train/123").Output()
		if err != nil {
			t.Fatalf("redis-cli: %v", err)
		}
		// Piped, redis-cli prints the raw bytes and a newline.
		if !bytes.Equal(out, append(want, '\n')) {
			t.Fatalf("pass %d: redis-cli GET fmnist-train/123 printed %d bytes; the 124th file (%s) has %d",
				pass, len(out), m.Names.At(123), len(want))
		}
	}

	c := redisClient(p.Socket)
	defer c.Close()
	ctx := context.Background()
	keys := make([]string, 256)
	for i := range keys {
		keys[i] = "fmnist-train/" + strconv.Itoa(255-i)
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		want, _ := os.ReadFile(filepath.Join(train, m.Names.At(255-i)))
		if v.(string) != string(want) {
			t.Fatalf("MGET position %d (%s) is not the file %s", i, keys[i], m.Names.At(255-i))
		}
	}
	names, err := c.Do(ctx, "SHADE.MANIFEST", "fmnist-train").StringSlice()
	if err != nil || len(names) != m.Len() || names[123] != m.Names.At(123) {
		t.Fatalf("SHADE.MANIFEST: %d names, %v", len(names), err)
	}
}

// TestPipelineOfReadThroughs: a client pipelines a GET of every sample
// of a dataset not read yet, as go-redis does, writing every command
// before it reads a reply. The GETs read through on a worker, whose
// replies fill the socket long before the client has written its
// commands: the peer must go on taking the commands in, or each side
// waits on the other until a timeout. Every value must be the file's.
func TestPipelineOfReadThroughs(t *testing.T) {
	train, m := fashionMNISTTrain(t, 20000)
	p := startPeer(t, "--dataset", "fmnist-train="+train, "--cache-size", "256MiB")
	c := redisClient(p.Socket)
	defer c.Close()
	ctx := context.Background()
	pipe := c.Pipeline()
	gets := make([]*redis.StringCmd, m.Len())
	for i := range gets {
		gets[i] = pipe.Get(ctx, "fmnist-train/"+strconv.Itoa(i))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("a pipeline of %d GETs: %v", len(gets), err)
	}
	for i, g := range gets {
		want, err := os.ReadFile(filepath.Join(train, m.Names.At(i)))
		if err != nil {
			t.Fatal(err)
		}
		if g.Val() != string(want) {
			t.Fatalf("GET fmnist-train/%d is not the file %s", i, m.Names.At(i))
		}
	}
}

func TestRedisBenchmarkRunsToCompletion(t *testing.T) {
	bench, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Skip("redis-benchmark not installed (Debian package redis-tools)")
	}
	p := startPeer(t, "--cache-size", "256MiB")
	out, err := exec.Command(bench, "-s", p.Socket, "-t", "set,get", "-d", "4096", "-P", "16",
		"-n", "20000", "-r", "1000", "--csv").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	for _, test := range []string{`"SET"`, `"GET"`} {
		if !bytes.Contains(out, []byte(test)) {
			t.Errorf("redis-benchmark printed no %s result:\n%s", test, out)
		}
	}
	// The values SET by the benchmark are read back intact.
	c := redisClient(p.Socket)
	defer c.Close()
	n, err := c.DBSize(context.Background()).Result()
	if err != nil || n == 0 {
		t.Errorf("DBSIZE after the benchmark = %d, %v", n, err)
	}
}

func TestSignalsDrainAndExitZero(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			p := startPeer(t, "--cache-size", "16MiB")
			if err := p.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Exited():
				if err := p.Err(); err != nil {
					t.Fatalf("exit after %v: %v\n%s", sig, err, p.Log())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("still running 10s after %v", sig)
			}
			if _, err := os.Lstat(p.Socket); !os.IsNotExist(err) {
				t.Errorf("socket file left behind after %v: %v", sig, err)
			}
		})
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	out, err := exec.Command(bins.Path("shade-peer"), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, flag := range []string{"--name", "--socket", "--dataset", "--cache-size", "--policy", "--pads",
		"--log-level", "--log-format", "--requirepass", "SHADE_"} {
		if !strings.Contains(string(out), flag) {
			t.Errorf("--help does not mention %s", flag)
		}
	}
	bad := exec.Command(bins.Path("shade-peer"), "--cache-size", "lots")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "--cache-size") {
		t.Errorf("a bad --cache-size was not refused clearly: %v\n%s", err, out)
	}
	env := exec.Command(bins.Path("shade-peer"))
	env.Env = append(os.Environ(), "SHADE_POLICY=nosuch", "SHADE_SOCKET="+filepath.Join(t.TempDir(), "s.sock"))
	if out, err := env.CombinedOutput(); err == nil || !strings.Contains(string(out), "nosuch") {
		t.Errorf("SHADE_POLICY from the environment was not applied: %v\n%s", err, out)
	}
}
