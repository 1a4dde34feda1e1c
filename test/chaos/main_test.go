// Package chaos kills and restarts shade-peer processes with SIGKILL while
// readers and a training job use the mesh, and checks what the product
// promises under failure: no trainer read through a live peer fails, no
// wrong byte is ever returned, every epoch's order is one order that every
// rank and every peer agree on, the job finishes, membership converges and
// leadership comes back quickly, and no peer's memory grows without bound.
//
// The tests run the built binaries as separate processes on loopback only.
//
// Knobs (environment):
//
//	CHAOS_DURATION   how long peers are killed and restarted (default 30s;
//	                 `make chaos` runs 120s). With -short and no
//	                 CHAOS_DURATION the tests skip.
//	CHAOS_INTERVAL   time between kills (default 10s); the first kill comes
//	                 after half an interval.
//	CHAOS_SEED       seed of the kill schedule and the readers (default: the
//	                 clock; it is logged, so a run can be replayed).
//	CHAOS_READERS    reader goroutines (default 3).
//	CHAOS_LOG_DIR    keep the peers' logs here (default: a temporary
//	                 directory, removed after the test; on failure the tails
//	                 are printed).
//	CHAOS_PEER_RACE  "1": build shade-peer with -race (slower peers; a data
//	                 race makes a peer exit, which the test reports).
//	CHAOS_PEER_FLAGS more shade-peer flags for every peer of TestChaos,
//	                 split at spaces (such as "--order-ahead 1": orders
//	                 drawn ahead while the leader is killed).
package chaos

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// bins are the shade-peer and shadectl built for this run.
var bins *testsupport.Binaries

func TestMain(m *testing.M) {
	// Dial failures to a killed peer are expected; the tests count them.
	redis.SetLogger(quietLogger{})
	testsupport.Main(m, testsupport.BuildOptions{Race: os.Getenv("CHAOS_PEER_RACE") == "1"}, &bins)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// settings are the chaos knobs, read from the environment.
type settings struct {
	duration, interval time.Duration
	seed               uint64
	readers            int
	logDir             string
	peerFlags          []string
}

func loadSettings(t *testing.T) settings {
	t.Helper()
	s := settings{duration: 30 * time.Second, interval: 10 * time.Second, readers: 3, seed: uint64(time.Now().UnixNano()),
		peerFlags: strings.Fields(os.Getenv("CHAOS_PEER_FLAGS"))}
	v, set := os.LookupEnv("CHAOS_DURATION")
	if !set && testing.Short() {
		t.Skip("chaos test skipped with -short (set CHAOS_DURATION to run it)")
	}
	var err error
	if set {
		if s.duration, err = time.ParseDuration(v); err != nil || s.duration <= 0 {
			t.Fatalf("CHAOS_DURATION=%q: want a positive duration such as 30s", v)
		}
	}
	if v := os.Getenv("CHAOS_INTERVAL"); v != "" {
		if s.interval, err = time.ParseDuration(v); err != nil || s.interval < 3*time.Second {
			t.Fatalf("CHAOS_INTERVAL=%q: want a duration of at least 3s (a restart takes 1-2 s)", v)
		}
	}
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		if s.seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: want an unsigned integer", v)
		}
	}
	if v := os.Getenv("CHAOS_READERS"); v != "" {
		if s.readers, err = strconv.Atoi(v); err != nil || s.readers < 0 {
			t.Fatalf("CHAOS_READERS=%q: want a count", v)
		}
	}
	s.logDir = os.Getenv("CHAOS_LOG_DIR")
	if s.logDir == "" {
		s.logDir = t.TempDir()
	} else if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return s
}
