package admin

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/meshtest"
	"github.com/shade-mesh/shade/protocol/stats"
	"github.com/shade-mesh/shade/transport/peer"
)

func listen(t *testing.T, src Source) *Server {
	t.Helper()
	s, err := Listen(Config{Addr: "127.0.0.1:0"}, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// scrape fetches /metrics and parses the text format.
func scrape(t *testing.T, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, "http://"+s.Addr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return fams
}

// value returns the value of the series of family name whose labels
// include want; it fails the test if there is not exactly one.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	m := series(t, fams, name, want)
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	t.Fatalf("%s%v: not a counter or gauge", name, want)
	return 0
}

func series(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric family %s", name)
	}
	if f.GetHelp() == "" {
		t.Errorf("%s has no HELP", name)
	}
	var found []*dto.Metric
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		found = append(found, m)
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d series, want 1", name, want, len(found))
	}
	return found[0]
}

func TestMetricsOfAStandaloneNode(t *testing.T) {
	p := meshtest.Start(t, meshtest.Options{Node: "node-a", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20})
	s := listen(t, p.Node)
	c := p.Client(t)
	ctx := context.Background()

	// Ten samples read twice: ten cold misses read from the source, then
	// ten local hits. One more key past the end reads nothing.
	var bytesRead int64
	for i := range 10 {
		for pass := range 2 {
			got, err := c.Get(ctx, p.Key(i)).Bytes()
			if err != nil || string(got) != string(p.Data.Files[i]) {
				t.Fatalf("GET %s pass %d: %d bytes, %v", p.Key(i), pass, len(got), err)
			}
		}
		bytesRead += int64(len(p.Data.Files[i]))
	}

	fams := scrape(t, s)
	ds := map[string]string{"dataset": "toy"}
	with := func(k, v string) map[string]string { return map[string]string{"dataset": "toy", k: v} }
	with2 := func(k, v, k2, v2 string) map[string]string { return map[string]string{"dataset": "toy", k: v, k2: v2} }
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"shade_reads_total", with("served", "local"), 10},
		{"shade_reads_total", with("served", "peer"), 0},
		{"shade_reads_total", with("served", "source"), 10},
		{"shade_hits_total", ds, 10},
		{"shade_misses_total", with("kind", "cold"), 10},
		{"shade_misses_total", with("kind", "capacity"), 0},
		{"shade_evictions_total", ds, 0},
		{"shade_rejected_admissions_total", ds, 0},
		{"shade_source_reads_total", ds, 10},
		{"shade_source_read_bytes_total", ds, float64(bytesRead)},
		{"shade_source_errors_total", ds, 0},
		{"shade_checksum_errors_total", ds, 0},
		{"shade_served_peers_total", ds, 0},
		{"shade_source_fallbacks_total", ds, 0},
		{"shade_resident_samples", ds, 10},
		{"shade_dataset_samples", ds, 40},
		{"shade_hit_ratio", ds, 0.5},
		{"shade_epoch", ds, -1},
		{"shade_job_world", ds, 0},
		{"shade_pending_ranks", ds, 0},
		{"shade_scored_samples", ds, 0},
		{"shade_reports_total", ds, 0},
		{"shade_cache_capacity_bytes", nil, 8 << 20},
		{"shade_cache_entries", nil, 10},
		{"shade_members", nil, 1},
		{"shade_reports_queued", nil, 0},
		{"shade_reports_dropped_total", nil, 0},
		{"shade_node_info", map[string]string{"node": "node-a", "policy": "app", "pads": "true"}, 1},
		// Nothing is scored yet: every sample has the middle score,
		// ln(41.5), in decile 7 of ln 10..ln 73.
		{"shade_decile_reads_total", with("decile", "7"), 20},
		{"shade_decile_hits_total", with("decile", "7"), 10},
		{"shade_hit_ratio_by_decile", with("decile", "7"), 0.5},
		{"shade_decile_reads_total", with("decile", "0"), 0},
		{"shade_order_lag_epochs", ds, 0},
		// No connection named a job: every read is the default job's.
		{"shade_job_reads_total", with2("job_name", "default", "served", "memory"), 10},
		{"shade_job_reads_total", with2("job_name", "default", "served", "source"), 10},
		{"shade_job_source_read_bytes_total", with("job_name", "default"), float64(bytesRead)},
		{"shade_job_hit_ratio", with("job_name", "default"), 0.5},
		{"shade_job_epoch", with("job_name", "default"), -1},
		{"shade_job_ranks", with("job_name", "default"), 0},
	} {
		if got := value(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if used := value(t, fams, "shade_cache_used_bytes", nil); used < float64(bytesRead) {
		t.Errorf("shade_cache_used_bytes %v < the %d bytes cached", used, bytesRead)
	}
	if huge := value(t, fams, "shade_cache_huge_page_bytes", nil); huge < 0 || huge > 8<<20 {
		t.Errorf("shade_cache_huge_page_bytes %v, not within the 8 MiB cache", huge)
	}
	if index := value(t, fams, "shade_cache_index_bytes", nil); index < 16<<10 {
		t.Errorf("shade_cache_index_bytes %v with samples cached, want a table of 16 KiB at least", index)
	}
	if pol := value(t, fams, "shade_policy_bytes", nil); pol < 128<<10 {
		t.Errorf("shade_policy_bytes %v with samples cached, want a table of 128 KiB at least", pol)
	}
	for _, name := range []string{"shade_leader_term", "shade_is_leader", "go_goroutines", "process_resident_memory_bytes"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
	for name, f := range fams {
		if strings.HasSuffix(name, "_total") && f.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s is a %v, want a counter", name, f.GetType())
		}
	}
	h := series(t, fams, "shade_source_read_duration_seconds", ds).GetHistogram()
	// mesh's 12 bounds and the +Inf bucket.
	if h == nil || h.GetSampleCount() != 10 || len(h.Bucket) != 13 || h.Bucket[12].GetCumulativeCount() != 10 {
		t.Errorf("source latency histogram: %v", h)
	}

	// Pull model: a later scrape sees later reads.
	if _, err := c.Get(ctx, p.Key(0)).Bytes(); err != nil {
		t.Fatal(err)
	}
	if got := value(t, scrape(t, s), "shade_reads_total", with("served", "local")); got != 11 {
		t.Errorf("after one more hit: local reads %v, want 11", got)
	}

	// A one-rank job: epoch 0 is published, and the node reads the rank's
	// slice (the whole dataset) ahead in the background, into the
	// read-ahead buffer: source reads that no trainer asked for, so no
	// misses, and nothing more resident until the rank reads.
	if _, err := c.Do(ctx, "SHADE.ORDER", "toy", 0, 0, 1).Result(); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 20*time.Second, "the read-ahead holds the 30 samples not cached", func() bool {
		return value(t, scrape(t, s), "shade_readahead_fetched_total", nil) == 30
	})
	// Scraped again: a scrape is not a snapshot, and the one that saw the
	// 30th fetch may have read the source reads before it was counted.
	fams = scrape(t, s)
	if got := value(t, fams, "shade_resident_samples", ds); got != 10 {
		t.Errorf("resident samples after the read-ahead: %v, want 10", got)
	}
	if got := value(t, fams, "shade_readahead_bytes", nil); got <= 0 {
		t.Errorf("shade_readahead_bytes = %v with 30 samples held", got)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"shade_epoch", ds, 0},
		{"shade_job_world", ds, 1},
		{"shade_pending_ranks", ds, 1},
		{"shade_pending_rank", with("rank", "0"), 1},
		{"shade_source_reads_total", ds, 40},
		{"shade_reads_total", with("served", "source"), 10},
	} {
		if got := value(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("after SHADE.ORDER: %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// The rank reads a sample read ahead: served without waiting for the
	// source, and admitted by the policy then.
	order, err := c.Do(ctx, "SHADE.ORDER", "toy", 0, 0, 1).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	var ahead int64 = -1
	for _, id := range order {
		if id >= 10 { // samples 0..9 were read, hence cached, above
			ahead = id
			break
		}
	}
	if _, err := c.Get(ctx, p.Key(int(ahead))).Bytes(); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, s)
	if got := value(t, fams, "shade_prefetch_hits_total", ds); got != 1 {
		t.Errorf("after reading sample %d: prefetch hits %v, want 1", ahead, got)
	}
}

func TestProbesAndProfiler(t *testing.T) {
	p := meshtest.Start(t, meshtest.Options{Node: "node-a", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20})
	s := listen(t, p.Node)
	base := "http://" + s.Addr()
	for _, c := range []struct {
		path, body string
		code       int
	}{
		{"/healthz", "ok\n", 200},
		{"/readyz", "ready\n", 200},
		{"/debug/pprof/", "goroutine", 200},
		{"/debug/pprof/cmdline", "", 200},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile", 200},
		{"/", "/metrics", 200},
		{"/nothing", "", 404},
	} {
		code, body := get(t, base+c.path)
		if code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("GET %s: %d %q, want %d with %q", c.path, code, trim(body), c.code, c.body)
		}
	}
	// A closed node is not ready; the process still serves.
	p.Node.Close()
	if code, _ := get(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz of a closed node: %d, want 503", code)
	}
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz of a closed node: %d, want 200", code)
	}
	scrape(t, s) // a closed node's snapshot still scrapes
}

func trim(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func TestCloseStopsServing(t *testing.T) {
	p := meshtest.Start(t, meshtest.Options{Node: "node-a", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20})
	s, err := Listen(Config{Addr: "127.0.0.1:0"}, p.Node)
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	scrape(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if resp, err := httpClient.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		t.Fatalf("scrape after Close: %s", resp.Status)
	}
}

func TestDisabled(t *testing.T) {
	for _, addr := range []string{"", "off"} {
		s, err := Listen(Config{Addr: addr}, nil)
		if err != nil {
			t.Fatalf("Addr %q: %v", addr, err)
		}
		if s.Addr() != "" || s.Close() != nil {
			t.Errorf("Addr %q: a disabled server listens on %q", addr, s.Addr())
		}
	}
}

func TestListenErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if s, err := Listen(Config{Addr: ln.Addr().String()}, &fakeSource{}); err == nil {
		s.Close()
		t.Fatal("Listen on a bound port succeeded")
	}
	if _, err := Listen(Config{Addr: "127.0.0.1:0"}, nil); err == nil {
		t.Fatal("Listen with a nil source succeeded")
	}
}

// fakeSource serves a fixed snapshot, as a node of a mesh would.
type fakeSource struct {
	stats stats.Node
	peers map[string]peer.PeerStats
	ready atomic.Bool
}

func (f *fakeSource) Snapshot() stats.Node                 { return f.stats }
func (f *fakeSource) PeerStats() map[string]peer.PeerStats { return f.peers }
func (f *fakeSource) Ready() bool                          { return f.ready.Load() }

func TestMeshMetrics(t *testing.T) {
	defaultJob := stats.Job{Name: "default", LatestEpoch: 2, World: 4, PendingRanks: []int{1, 3}, ScoredSamples: 80, Reports: 6,
		Reads: 50, Hits: 30, HitRatio: 0.6, SourceReads: 20, SourceBytes: 2048, IdleSeconds: 1.5}
	f := &fakeSource{
		stats: stats.Node{
			Node: "n1", Members: []string{"n0", "n1", "n2"}, Leader: "n0", Term: 7, Policy: "lru",
			ReportsQueued: 3, ReportsDropped: 2,
			Datasets: []stats.Dataset{{
				DatasetCounters: stats.DatasetCounters{
					Dataset: "fm", Version: "v1", Samples: 100, Resident: 20, Epoch: 2,
					Total:  stats.Epoch{Hits: 60, LocalHits: 40, PeerHits: 20, ColdMisses: 30, CapacityMisses: 10, Evictions: 5},
					Epochs: []stats.Epoch{{Epoch: 0, HitRatio: 0.1}, {Epoch: 2, HitRatio: 0.75}},
					SourceLatency: stats.Histogram{
						Bounds: []float64{0.001, 0.01, 0.1},
						Counts: []int64{5, 3, 1, 2},
						Sum:    0.5,
					},
				},
				Job: defaultJob,
				Jobs: []stats.Job{defaultJob, {Name: "sweep-b", LatestEpoch: 0, World: 2, Reads: 10, Hits: 1, HitRatio: 0.1,
					SourceReads: 9, SourceBytes: 900, IdleSeconds: 42, Reports: 3,
					HeldEpochs: 2, HeldEpochSeconds: 1.5, HeldStarts: 5, HeldStartSeconds: 0.25}},
			}},
		},
		peers: map[string]peer.PeerStats{
			"10.0.0.2:7947": {Name: "n2", Connected: true, RTT: 1500 * time.Microsecond, Requests: 9, Errors: 1, BytesIn: 1000, BytesOut: 200},
			"10.0.0.9:7947": {Name: "", Requests: 2, Errors: 2},
		},
	}
	s := listen(t, f)
	fams := scrape(t, s)
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"shade_reads_total", with("dataset", "fm", "served", "local"), 40},
		{"shade_reads_total", with("dataset", "fm", "served", "peer"), 20},
		{"shade_reads_total", with("dataset", "fm", "served", "source"), 40},
		{"shade_misses_total", with("dataset", "fm", "kind", "capacity"), 10},
		{"shade_hit_ratio", with("dataset", "fm"), 0.75},
		{"shade_epoch", with("dataset", "fm"), 2},
		{"shade_pending_ranks", with("dataset", "fm"), 2},
		{"shade_pending_rank", with("dataset", "fm", "rank", "3"), 1},
		{"shade_dataset_info", with("dataset", "fm", "version", "v1"), 1},
		{"shade_job_epoch", with("dataset", "fm", "job_name", "default"), 2},
		{"shade_job_epoch", with("dataset", "fm", "job_name", "sweep-b"), 0},
		{"shade_job_ranks", with("dataset", "fm", "job_name", "default"), 4},
		{"shade_job_ranks", with("dataset", "fm", "job_name", "sweep-b"), 2},
		{"shade_job_pending_ranks", with("dataset", "fm", "job_name", "default"), 2},
		{"shade_job_pending_ranks", with("dataset", "fm", "job_name", "sweep-b"), 0},
		{"shade_job_reports_total", with("dataset", "fm", "job_name", "sweep-b"), 3},
		{"shade_job_reads_total", with("dataset", "fm", "job_name", "default", "served", "memory"), 30},
		{"shade_job_reads_total", with("dataset", "fm", "job_name", "default", "served", "source"), 20},
		{"shade_job_reads_total", with("dataset", "fm", "job_name", "sweep-b", "served", "memory"), 1},
		{"shade_job_reads_total", with("dataset", "fm", "job_name", "sweep-b", "served", "source"), 9},
		{"shade_job_source_read_bytes_total", with("dataset", "fm", "job_name", "sweep-b"), 900},
		{"shade_job_hit_ratio", with("dataset", "fm", "job_name", "default"), 0.6},
		{"shade_job_hit_ratio", with("dataset", "fm", "job_name", "sweep-b"), 0.1},
		{"shade_job_idle_seconds", with("dataset", "fm", "job_name", "sweep-b"), 42},
		{"shade_job_held_total", with("dataset", "fm", "job_name", "sweep-b", "at", "leader"), 2},
		{"shade_job_held_total", with("dataset", "fm", "job_name", "sweep-b", "at", "peer"), 5},
		{"shade_job_held_seconds_total", with("dataset", "fm", "job_name", "sweep-b", "at", "leader"), 1.5},
		{"shade_job_held_seconds_total", with("dataset", "fm", "job_name", "sweep-b", "at", "peer"), 0.25},
		{"shade_job_held_total", with("dataset", "fm", "job_name", "default", "at", "peer"), 0},
		// The dataset's job series stay the default job's.
		{"shade_job_world", with("dataset", "fm"), 4},
		{"shade_reports_total", with("dataset", "fm"), 6},
		{"shade_leader_term", nil, 7},
		{"shade_is_leader", nil, 0},
		{"shade_members", nil, 3},
		{"shade_reports_queued", nil, 3},
		{"shade_reports_dropped_total", nil, 2},
		{"shade_peer_rtt_seconds", with("peer", "n2"), 0.0015},
		{"shade_peer_connected", with("addr", "10.0.0.9:7947"), 0},
		{"shade_peer_requests_total", with("peer", "n2"), 9},
		{"shade_peer_errors_total", with("addr", "10.0.0.9:7947"), 2},
		{"shade_peer_bytes_total", with("peer", "n2", "direction", "in"), 1000},
		{"shade_peer_bytes_total", with("peer", "n2", "direction", "out"), 200},
	} {
		if got := value(t, fams, c.name, c.labels); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for name, want := range map[string]int{"shade_job_epoch": 2, "shade_job_reads_total": 4, "shade_job_world": 1} {
		if n := len(fams[name].GetMetric()); n != want {
			t.Errorf("%d %s series, want %d", n, name, want)
		}
	}
	if n := len(fams["shade_peer_rtt_seconds"].Metric); n != 1 {
		t.Errorf("%d RTT series; want only the connected peer's", n)
	}
	h := series(t, fams, "shade_source_read_duration_seconds", with("dataset", "fm")).GetHistogram()
	bounds, want := []float64{0.001, 0.01, 0.1, math.Inf(1)}, []uint64{5, 8, 9, 11}
	if h.GetSampleCount() != 11 || h.GetSampleSum() != 0.5 || len(h.Bucket) != len(want) {
		t.Fatalf("histogram %v", h)
	}
	for i, b := range h.Bucket {
		if b.GetCumulativeCount() != want[i] || b.GetUpperBound() != bounds[i] {
			t.Errorf("bucket %d: %v, want le=%v count %d", i, b, bounds[i], want[i])
		}
	}

	if code, _ := get(t, "http://"+s.Addr()+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while not ready: %d", code)
	}
	f.ready.Store(true)
	if code, _ := get(t, "http://"+s.Addr()+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while ready: %d", code)
	}
}

// Two servers in one process: nothing is registered globally.
func TestTwoServersInOneProcess(t *testing.T) {
	a, b := listen(t, &fakeSource{}), listen(t, &fakeSource{})
	scrape(t, a)
	scrape(t, b)
	if err := errors.Join(a.Close(), b.Close()); err != nil {
		t.Fatal(err)
	}
}
