package s3

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
