package s3

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/internal/s3test"
	"github.com/shade-mesh/shade/internal/testsupport"
)

// TestGatewayStoppedMidEpoch stops the object store under a mesh of 3 peers
// after part of the dataset was read (and so cached), then starts it again
// on the same port. While the store is down: every cached sample is still
// served byte-exact through every peer; every uncached sample answers an
// error that names the store's failure (s3source's read error), never
// bytes; every peer still answers PING. Once the store is back, the
// uncached samples are served byte-exact.
func TestGatewayStoppedMidEpoch(t *testing.T) {
	const n, cached = 300, 150
	m := startBucketMesh(t, n, 3)
	ctx := context.Background()
	var hot, cold []int
	for i := range n {
		if i < cached {
			hot = append(hot, i)
		} else {
			cold = append(cold, i)
		}
	}
	clients := make([]*redis.Client, len(m.peers))
	for pi, p := range m.peers {
		// A read of an uncached sample fails only after the source's
		// retries (and the owner's, then this peer's, attempts): seconds,
		// beyond go-redis's default 3 s read timeout.
		clients[pi] = redis.NewClient(&redis.Options{Network: "unix", Addr: p.Socket, Protocol: 2,
			MaxRetries: -1, ReadTimeout: 60 * time.Second})
		defer clients[pi].Close()
	}
	// readExact reads ids through every peer with one MGET and fails the
	// test unless each answers the files' exact bytes.
	readExact := func(when string, ids []int) {
		t.Helper()
		for pi, c := range clients {
			vals, err := c.MGet(ctx, testsupport.Keys("ds", ids)...).Result()
			if err == nil {
				err = testsupport.CheckValues(m.ds, ids, vals)
			}
			if err != nil {
				t.Fatalf("peer %d, %s: %v", pi, when, err)
			}
		}
	}
	// Part of the epoch: the first half, through every peer.
	readExact("before the stop", hot)
	before := m.g.GetCounts(t, meshBucket)

	m.g.Stop(t)
	readExact("store down, cached samples", hot)
	for pi, c := range clients {
		// One sample per peer, each a different one: every failing read
		// takes seconds (see the client above).
		i := cold[pi*len(cold)/len(clients)]
		start := time.Now()
		v, err := c.Get(ctx, testsupport.Key("ds", i)).Bytes()
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			t.Fatalf("peer %d, store down, sample %d: served %d bytes (err %v), want an error reply", pi, i, len(v), err)
		}
		t.Logf("peer %d, store down, sample %d: %q after %v", pi, i, err, time.Since(start).Round(time.Millisecond))
		if !strings.Contains(err.Error(), "s3source: read failed") || !strings.Contains(err.Error(), m.ds.Names[i]) {
			t.Errorf("peer %d, store down, sample %d: error %q does not say that the store read of %s failed", pi, i, err, m.ds.Names[i])
		}
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("peer %d, store down: PING: %v", pi, err)
		}
	}
	// An MGET over both halves: the cached samples exact, the uncached one
	// an error in its place (its own, as a GET's), never bytes.
	mixed := []int{0, cold[1], 1}
	vals, err := clients[0].MGet(ctx, testsupport.Keys("ds", mixed)...).Result()
	if err != nil {
		t.Fatalf("store down, MGET of cached, uncached, cached: %v", err)
	}
	if e := testsupport.CheckValues(m.ds, []int{mixed[0], mixed[2]}, []any{vals[0], vals[2]}); e != nil {
		t.Errorf("store down, MGET: %v", e)
	}
	if e, ok := vals[1].(error); !ok || !strings.Contains(e.Error(), "s3source: read failed") {
		t.Errorf("store down, MGET served %T (%v) for uncached sample %d, want its read error", vals[1], vals[1], mixed[1])
	}

	m.g.Restart(t)
	took := testsupport.WaitFor(t, 30*time.Second, "every uncached sample is served through peer 0", func() bool {
		vals, err := clients[0].MGet(ctx, testsupport.Keys("ds", cold)...).Result()
		if err != nil {
			return false
		}
		for j, v := range vals {
			if v == nil {
				return false
			}
			if err := m.ds.CheckValue(cold[j], v); err != nil {
				t.Fatalf("store back: %v", err)
			}
		}
		return true
	})
	t.Logf("uncached samples served %v after the store came back", took.Round(time.Millisecond))
	readExact("store back", append(append([]int(nil), hot...), cold...))
	after := m.g.GetCounts(t, meshBucket)
	for _, i := range hot {
		key := "fmnist/train/" + m.ds.Names[i]
		if after[key] != before[key] {
			t.Errorf("cached %s read from the store again (%d GETs, was %d)", key, after[key], before[key])
		}
	}
}

// TestPeerRefusesToStartWithoutItsBucket runs shade-peer over a bucket it
// cannot list: refused credentials, then a missing bucket. Each time the
// process exits by itself, non-zero, before serving, with one plain line
// on stderr that names the dataset and the problem (beside its JSON log).
func TestPeerRefusesToStartWithoutItsBucket(t *testing.T) {
	g := s3test.Start(t)
	g.CreateBucket(t, "shade-there")
	g.Put(t, "shade-there", "train/class0/a.bin", []byte("a sample"))
	cases := []struct {
		name, url, secret, want string
	}{
		{"bad credentials", "s3://shade-there/train", "not-the-secret-key", "credentials refused by " + g.Endpoint},
		{"missing bucket", "s3://shade-missing/train", g.SecretKey, `bucket "shade-missing" does not exist at ` + g.Endpoint},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "s.sock")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bins.Path("shade-peer"), "--socket", sock, "--log-format", "json",
				"--admin-addr", "off", "--name", "p", "--dataset", "ds="+tc.url, "--s3-endpoint", g.Endpoint,
				"--s3-path-style", "--state-dir", t.TempDir())
			cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+g.AccessKey, "AWS_SECRET_ACCESS_KEY="+tc.secret,
				"AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_CONFIG_FILE=/nonexistent")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() <= 0 {
				t.Fatalf("shade-peer: %v (context: %v), want a non-zero exit by itself\n%s", err, ctx.Err(), stderr.Bytes())
			}
			var plain []string
			for line := range strings.Lines(stderr.String()) {
				if !strings.HasPrefix(line, "{") {
					plain = append(plain, strings.TrimSpace(line))
				}
			}
			if len(plain) != 1 || !strings.HasPrefix(plain[0], "shade-peer: --dataset ds="+tc.url+": ") ||
				!strings.Contains(plain[0], tc.want) {
				t.Fatalf("exit status %d; stderr's plain lines %q, want one naming the dataset and %q\n%s",
					exit.ExitCode(), plain, tc.want, stderr.Bytes())
			}
			if _, err := os.Stat(sock); err == nil {
				t.Errorf("shade-peer made its socket before failing")
			}
			t.Logf("exit status %d: %s", exit.ExitCode(), plain[0])
		})
	}
}

// TestIndexBuilderKilled: a peer that claimed the index of a bucket's
// shards (--publish-index) is killed with SIGKILL while it reads them
// (its GETs of the shards held by a proxy in front of the store). A peer
// started after waits for the dead peer's claim, takes the build over
// once the claim has gone unrenewed for five beats, indexes the shards,
// publishes the index, drops the claim and serves the right bytes.
func TestIndexBuilderKilled(t *testing.T) {
	g := s3test.Start(t)
	want := putShards(t, g, 2, 50)
	target, err := url.Parse(g.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	shardGet := make(chan struct{}, 1)
	held := make(chan struct{})
	defer close(held)
	forward := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/train-") {
			select {
			case shardGet <- struct{}{}:
			default:
			}
			select { // held until the test ends
			case <-held:
			case <-r.Context().Done():
			}
			return
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()

	// The builder never serves while its shards are held: Launch waits
	// for its socket until the test ends the wait, and then kills it
	// (SIGKILL).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type launched struct {
		p   *testsupport.Peer
		err error
	}
	done := make(chan launched, 1)
	sock := filepath.Join(t.TempDir(), "a.sock")
	go func() {
		p, err := testsupport.Launch(ctx, testsupport.PeerOptions{Bin: bins.Path("shade-peer"), Env: gatewayEnv(g),
			Socket: sock, ReadyTimeout: 5 * time.Minute,
			Args: []string{"--log-format", "json", "--admin-addr", "off", "--name", "builder",
				"--dataset", "wds=shards:s3://shade-wds/wds", "--s3-endpoint", proxy.URL, "--s3-path-style", "--publish-index"}})
		done <- launched{p, err}
	}()
	var a launched
	select {
	case <-shardGet:
		cancel()
		a = <-done
	case a = <-done:
		t.Fatalf("the builder ended before reading a shard: %v", a.err)
	}
	if a.p == nil || !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the builder's launch: %v, want its wait ended by the test", a.err)
	}
	<-a.p.Exited()
	if !strings.Contains(a.p.Err().Error(), "killed") {
		t.Fatalf("the builder exited with %v, want killed", a.p.Err())
	}
	if n := g.GetCounts(t, "shade-wds")["wds/.shade/shards.index.claim"]; n == 0 {
		t.Fatal("the builder never read its claim back")
	}

	b := startPeer(t, gatewayEnv(g), "--name", "successor", "--dataset", "wds=shards:s3://shade-wds/wds",
		"--s3-endpoint", g.Endpoint, "--s3-path-style", "--publish-index", "--cache-size", "64MiB")
	log := b.Log()
	if !strings.Contains(log, `"holder":"builder"`) || !strings.Contains(log, `"index":"built"`) {
		t.Fatalf("the successor did not wait for the dead builder's claim, then build:\n%s", log)
	}
	if there, err := s3source.HasAside(context.Background(), s3source.Config{URL: "s3://shade-wds/wds", Endpoint: g.Endpoint, PathStyle: true,
		AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}, "shards.index.claim"); there || err != nil {
		t.Fatalf("the claim after the successor's build: there %v (%v), want gone", there, err)
	}
	c := client(b.Socket)
	defer c.Close()
	for _, j := range []int{0, 99} {
		v, err := c.Get(context.Background(), "wds/"+strconv.Itoa(j)).Bytes()
		var got map[string][]byte
		if err != nil || msgpack.Unmarshal(v, &got) != nil || !bytes.Equal(got["png"], want[j].members["png"]) {
			t.Fatalf("sample %d: %v, wrong members", j, err)
		}
	}
}
