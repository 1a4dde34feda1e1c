package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/mesh"
	"github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/sampling"
)

func noEnv(string) (string, bool) { return "", false }

func TestEpochFlagsApplyToAStandaloneNode(t *testing.T) {
	cfg, _, err := parseConfig([]string{"--prefetch", "0", "--join-wait", "3s", "--epoch-deadline", "1m"}, noEnv, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cc := cfg.Node.Cluster
	if cc.GossipAddr != "" {
		t.Fatalf("no --gossip-addr or --seeds should leave the node standalone, got %q", cc.GossipAddr)
	}
	if cc.Prefetch >= 0 || cc.JoinWait != 3*time.Second || cc.EpochDeadline != time.Minute {
		t.Errorf("standalone cluster config ignores the flags: %+v", cc)
	}
}

func TestEnvironmentFillsFlagsNotGiven(t *testing.T) {
	env := map[string]string{"SHADE_CACHE_SIZE": "2GiB", "SHADE_POLICY": "lru", "SHADE_DATASET": "a=/x,b=/y"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, _, err := parseConfig([]string{"--policy", "fifo"}, lookup, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.CacheSize != 2<<30 || cfg.Node.Policy != "fifo" || len(cfg.Node.Datasets) != 2 {
		t.Errorf("env not applied or flag not winning: size %d policy %s datasets %v", cfg.Node.CacheSize, cfg.Node.Policy, cfg.Node.Datasets)
	}
	cfg, _, err = parseConfig([]string{"--cache-size", "0", "--score", "magnitude", "--max-weight", "4", "--boost", "3"}, noEnv, io.Discard, io.Discard)
	if err != nil || cfg.Node.Policy != "none" || cfg.Node.Score != sampling.ScoreMagnitude || cfg.Node.MaxWeight != 4 || cfg.Node.Boost != 3 {
		t.Errorf("--cache-size 0 --score magnitude --max-weight 4 --boost 3: policy %q, %+v, %v", cfg.Node.Policy, cfg.Node, err)
	}
	for _, c := range []struct {
		args []string
		want float64
	}{{nil, leader.DefaultAheadAt}, {[]string{"--order-ahead-at", "0.2"}, 0.2}, {[]string{"--order-ahead-at", "0"}, -1}} {
		cfg, _, err := parseConfig(c.args, noEnv, io.Discard, io.Discard)
		if err != nil || cfg.Node.OrderAheadAt != c.want {
			t.Errorf("%v: orders ahead at %v, %v; want %v (negative: never)", c.args, cfg.Node.OrderAheadAt, err, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want time.Duration
	}{{nil, 0}, {[]string{"--hedge-after", "auto"}, 0}, {[]string{"--hedge-after", "50ms"}, 50 * time.Millisecond}, {[]string{"--hedge-after", "off"}, -1}} {
		cfg, _, err := parseConfig(c.args, noEnv, io.Discard, io.Discard)
		if err != nil || cfg.Node.Cluster.HedgeAfter != c.want {
			t.Errorf("%v: hedge after %v, %v; want %v (0: learned, negative: never)", c.args, cfg.Node.Cluster.HedgeAfter, err, c.want)
		}
	}
	for _, bad := range [][]string{{"--pads", "maybe"}, {"--hedge-after", "0s"}, {"--hedge-after", "-5ms"}, {"--hedge-after", "soon"}, {"--cache-size", "-1"}, {"--alpha", "2"}, {"--uniform-floor", "-1"},
		{"--score", "loud"}, {"--max-weight", "0.5"}, {"--max-weight", "NaN"}, {"--boost", "-1"}, {"--boost", "Inf"}, {"--strata", "0"}, {"--order-ahead", "2"}, {"--order-ahead-at", "1"}, {"--order-ahead-at", "-0.1"}, {"--order-ahead-at", "NaN"},
		{"--dataset", "noequals"}, {"--seeds", "127.0.0.1:1"}, {"--join-wait", "0s"}, {"extra"}} {
		if _, _, err := parseConfig(bad, noEnv, io.Discard, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestConfigurationReferenceIsCurrent keeps docs/configuration.md equal to
// what --flags-markdown prints (regenerate with `make docs`).
func TestConfigurationReferenceIsCurrent(t *testing.T) {
	var out bytes.Buffer
	if _, _, err := parseConfig([]string{"--flags-markdown"}, noEnv, &out, io.Discard); !errors.Is(err, errVersion) {
		t.Fatalf("--flags-markdown: %v", err)
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, out.Bytes()) {
		t.Errorf("docs/configuration.md is stale: run make docs")
	}
	for _, flag := range []string{"--cache-size", "--seeds", "--state-dir", "--admin-addr", "SHADE_GOSSIP_KEY"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("the reference does not mention %s", flag)
		}
	}
}

func TestSourceThrottleAndPrefetchMemory(t *testing.T) {
	cfg, _, err := parseConfig([]string{"--source-throttle", "rate=20MiB/s,latency=10ms,concurrency=16", "--prefetch-memory", "32MiB"}, noEnv, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if th := cfg.Node.SourceThrottle; th.Rate != 20<<20 || th.Latency != 10*time.Millisecond || th.Concurrency != 16 {
		t.Errorf("--source-throttle parsed as %+v", th)
	}
	if cfg.Node.PrefetchMemory != 32<<20 {
		t.Errorf("--prefetch-memory parsed as %d", cfg.Node.PrefetchMemory)
	}
	env := map[string]string{"SHADE_SOURCE_THROTTLE": "latency=5ms"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if cfg, _, err = parseConfig(nil, lookup, io.Discard, io.Discard); err != nil || cfg.Node.SourceThrottle.Latency != 5*time.Millisecond {
		t.Errorf("SHADE_SOURCE_THROTTLE: %+v, %v", cfg.Node.SourceThrottle, err)
	}
	if cfg, _, err = parseConfig(nil, noEnv, io.Discard, io.Discard); err != nil || cfg.Node.SourceThrottle.Enabled() {
		t.Errorf("no --source-throttle: %+v, %v", cfg.Node.SourceThrottle, err)
	}
	for _, bad := range [][]string{{"--source-throttle", "rate=fast"}, {"--source-throttle", "10ms"}, {"--prefetch-memory", "0"}} {
		if _, _, err := parseConfig(bad, noEnv, io.Discard, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestRingPartitionsAndReplicateBudget(t *testing.T) {
	cfg, _, err := parseConfig([]string{"--ring-partitions", "8191", "--replicate-budget", "16MiB", "--relay-fanout", "8", "--relay-piece", "64KiB"}, noEnv, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Node.Cluster; c.Partitions != 8191 || c.ReplicateBudget != 16<<20 || c.RelayFanout != 8 || c.RelayPiece != 64<<10 {
		t.Errorf("parsed as partitions %d, budget %d, relay fanout %d, relay piece %d", c.Partitions, c.ReplicateBudget, c.RelayFanout, c.RelayPiece)
	}
	if cfg, _, err := parseConfig(nil, noEnv, io.Discard, io.Discard); err != nil || cfg.Node.Cluster.RelayFanout != 4 || cfg.Node.Cluster.RelayPiece != 1<<20 || cfg.Node.Cluster.Partitions != 0 {
		t.Errorf("default relay fanout %d, piece %d, partitions %d (%v), want 4, 1 MiB, 0 (the mesh's)", cfg.Node.Cluster.RelayFanout, cfg.Node.Cluster.RelayPiece, cfg.Node.Cluster.Partitions, err)
	}
	for _, bad := range [][]string{{"--ring-partitions", "-1"}, {"--replicate-budget", "0"}, {"--replicate-budget", "fast"}, {"--relay-fanout", "0"},
		{"--relay-piece", "1000"}, {"--relay-piece", "64MiB"}, {"--relay-piece", "big"}} {
		if _, _, err := parseConfig(bad, noEnv, io.Discard, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestS3DatasetFlags(t *testing.T) {
	env := map[string]string{"SHADE_S3_REGION": "eu-west-1", "SHADE_S3_PATH_STYLE": "true"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, _, err := parseConfig([]string{"--dataset", "local=/x", "--dataset", "remote=s3://bucket/train",
		"--s3-endpoint", "http://127.0.0.1:7070", "--state-dir", "/var/lib/shade"}, lookup, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Node.Datasets) != 2 || cfg.Node.Datasets[0].Dir != "/x" || cfg.Node.Datasets[1].Dir != "" || len(cfg.opened) != 1 {
		t.Fatalf("datasets %+v, opened %+v", cfg.Node.Datasets, cfg.opened)
	}
	got := cfg.opened[0]
	if got.index != 1 || got.s3 == nil || got.s3.URL != "s3://bucket/train" || got.s3.Endpoint != "http://127.0.0.1:7070" ||
		got.s3.Region != "eu-west-1" || !got.s3.PathStyle || got.s3.StateDir != "/var/lib/shade" || got.s3.Relist {
		t.Errorf("s3 dataset config %+v", got.s3)
	}
	cfg, _, err = parseConfig([]string{"--dataset", "a=shards:/data/wds", "--dataset", "b=shards:s3://bucket/wds",
		"--s3-path-style"}, noEnv, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.opened) != 2 || cfg.opened[0].shards == nil || cfg.opened[0].shards.Location != "/data/wds" ||
		cfg.opened[1].shards == nil || cfg.opened[1].shards.Location != "s3://bucket/wds" || !cfg.opened[1].shards.S3.PathStyle {
		t.Errorf("shards datasets %+v", cfg.opened)
	}
	for _, bad := range []string{"x=s3://", "x=shards:", "x=shards:s3://"} {
		if _, _, err := parseConfig([]string{"--dataset", bad}, noEnv, io.Discard, io.Discard); err == nil {
			t.Errorf("--dataset %s accepted", bad)
		}
	}
}

func TestSourceReadFlags(t *testing.T) {
	cfg, _, err := parseConfig([]string{"--dataset", "a=s3://bucket/train", "--dataset", "b=shards:s3://bucket/wds"}, noEnv, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.SourceReads != mesh.DefaultSourceReads || cfg.opened[0].s3.MaxInFlight != s3source.DefaultMaxInFlight ||
		cfg.opened[1].shards.S3.MaxInFlight != s3source.DefaultMaxInFlight {
		t.Errorf("defaults: source reads %d, in flight %d and %d", cfg.Node.SourceReads, cfg.opened[0].s3.MaxInFlight, cfg.opened[1].shards.S3.MaxInFlight)
	}
	env := map[string]string{"SHADE_S3_MAX_IN_FLIGHT": "200"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, _, err = parseConfig([]string{"--dataset", "a=s3://bucket/train", "--source-reads", "8"}, lookup, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.SourceReads != 8 || cfg.opened[0].s3.MaxInFlight != 200 {
		t.Errorf("source reads %d, in flight %d; want 8, 200", cfg.Node.SourceReads, cfg.opened[0].s3.MaxInFlight)
	}
	for _, bad := range [][]string{{"--source-reads", "0"}, {"--source-reads", "-3"}, {"--s3-max-in-flight", "0"}, {"--s3-max-in-flight", "many"}} {
		if _, _, err := parseConfig(bad, noEnv, io.Discard, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestJobFlags(t *testing.T) {
	cfg, _, err := parseConfig(nil, noEnv, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.MaxJobs != 16 || cfg.Node.JobIdle != 10*time.Minute || cfg.Node.JobSync != 0.25 {
		t.Errorf("defaults: max jobs %d, job idle %s, job sync %v", cfg.Node.MaxJobs, cfg.Node.JobIdle, cfg.Node.JobSync)
	}
	// --job-sync 0 is never (a negative Config value); a negative or
	// non-finite share is refused.
	if cfg, _, err = parseConfig([]string{"--job-sync", "0"}, noEnv, io.Discard, io.Discard); err != nil || cfg.Node.JobSync >= 0 {
		t.Errorf("--job-sync 0: job sync %v, %v; want negative (never)", cfg.Node.JobSync, err)
	}
	for _, bad := range []string{"-0.1", "NaN", "+Inf"} {
		if _, _, err = parseConfig([]string{"--job-sync", bad}, noEnv, io.Discard, io.Discard); err == nil {
			t.Errorf("--job-sync %s accepted", bad)
		}
	}
	cfg, _, err = parseConfig([]string{"--max-jobs", "3", "--job-idle", "90s"}, noEnv, io.Discard, io.Discard)
	if err != nil || cfg.Node.MaxJobs != 3 || cfg.Node.JobIdle != 90*time.Second {
		t.Errorf("--max-jobs 3 --job-idle 90s: max jobs %d, job idle %s, %v", cfg.Node.MaxJobs, cfg.Node.JobIdle, err)
	}
	// The flag's 0 means never; so must the Config's value, where 0 is the default.
	for _, never := range []string{"0", "0s", "-1m"} {
		cfg, _, err = parseConfig([]string{"--job-idle", never}, noEnv, io.Discard, io.Discard)
		if err != nil || cfg.Node.JobIdle >= 0 {
			t.Errorf("--job-idle %s: job idle %s, %v; want negative (never)", never, cfg.Node.JobIdle, err)
		}
	}
	env := map[string]string{"SHADE_MAX_JOBS": "5", "SHADE_JOB_IDLE": "0"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if cfg, _, err = parseConfig(nil, lookup, io.Discard, io.Discard); err != nil || cfg.Node.MaxJobs != 5 || cfg.Node.JobIdle >= 0 {
		t.Errorf("SHADE_MAX_JOBS=5 SHADE_JOB_IDLE=0: max jobs %d, job idle %s, %v", cfg.Node.MaxJobs, cfg.Node.JobIdle, err)
	}
	for _, bad := range [][]string{{"--max-jobs", "0"}, {"--max-jobs", "-2"}, {"--job-idle", "soon"}} {
		if _, _, err := parseConfig(bad, noEnv, io.Discard, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
