package grafana

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shade-mesh/shade/admin"
	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/mesh/meshtest"
)

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// query is one PromQL expression of the dashboard and where it is.
type query struct{ where, expr string }

func loadDashboard(t *testing.T) (dashboard, []query) {
	t.Helper()
	data, err := os.ReadFile("shade.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("shade.json: %v", err)
	}
	var qs []query
	ids := map[int]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, ok := ids[p.ID]; ok {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
				t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				qs = append(qs, query{"panel " + p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil || q.Query == "" {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
			q.Query = s
		}
		m := regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`).FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: want label_values(SELECTOR, LABEL), have %q", v.Name, q.Query)
		}
		qs = append(qs, query{"variable " + v.Name, m[1]})
	}
	if len(qs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return d, qs
}

var (
	// Removed before metric names are read: strings, Grafana variables,
	// label matchers, range selectors, and the label lists of by, without,
	// on, ignoring, group_left and group_right.
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	grafanaVars  = regexp.MustCompile(`\$\{[^}]*\}|\$[a-zA-Z_][a-zA-Z0-9_]*`)
	matchers     = regexp.MustCompile(`\{[^}]*\}`)
	ranges       = regexp.MustCompile(`\[[^\]]*\]`)
	labelLists   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	tokens       = regexp.MustCompile(`(?:\d+(?:ms|[smhdwy]))+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[a-zA-Z_:][a-zA-Z0-9_:]*|\S`)
	identStart   = regexp.MustCompile(`^[a-zA-Z_:]`)
	promKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan", "Inf", "NaN"}

	// A selector with matchers: the metric name and its label names.
	selector     = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	matcherLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// metricNames returns the metric names a PromQL expression reads: the
// identifiers that are not functions, aggregations, keywords or labels.
func metricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, `""`)
	s = grafanaVars.ReplaceAllString(s, "1")
	s = matchers.ReplaceAllString(s, " ")
	s = ranges.ReplaceAllString(s, " ")
	s = labelLists.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range tokens.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if !identStart.MatchString(tok) || slices.Contains(promKeywords, tok) {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(s[loc[1]:]), "(") {
			continue // a function or an aggregation
		}
		if !slices.Contains(names, tok) {
			names = append(names, tok)
		}
	}
	return names
}

func TestMetricNamesOfPromQL(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`sum by (served) (rate(shade_reads_total{instance=~"$instance",dataset=~"$dataset"}[$__rate_interval]))`, []string{"shade_reads_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(x_bucket{a="b"}[5m])))`, []string{"x_bucket"}},
		{`a / on(instance, dataset) group_left(node) b == 1`, []string{"a", "b"}},
		{`sum(increase(c{served=~"local|peer"}[$__range])) / sum(increase(c[$__range])) * 1e3`, []string{"c"}},
		{`max by (dataset) (d{dataset=~"$dataset"}) offset 5m`, []string{"d"}},
	} {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.expr, got, c.want)
		}
	}
}

// exported scrapes every admin server and returns the series names they
// export (a histogram's _bucket, _sum and _count) with their label names.
func exported(t *testing.T, servers []*admin.Server) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, s := range servers {
		resp, err := http.Get("http://" + s.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %s, %v", resp.Status, err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		for name, f := range fams {
			var labels []string
			for _, m := range f.Metric {
				for _, l := range m.Label {
					if !slices.Contains(labels, l.GetName()) {
						labels = append(labels, l.GetName())
					}
				}
			}
			names := []string{name}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				names = []string{name + "_bucket", name + "_sum", name + "_count"}
			case dto.MetricType_SUMMARY:
				names = append(names, name+"_sum", name+"_count")
			}
			for _, n := range names {
				for _, l := range labels {
					if !slices.Contains(out[n], l) {
						out[n] = append(out[n], l)
					}
				}
				if strings.HasSuffix(n, "_bucket") {
					out[n] = append(out[n], "le")
				}
				if out[n] == nil {
					out[n] = []string{}
				}
			}
		}
	}
	return out
}

// TestDashboardMetricsExist runs a two-peer mesh with its admin listeners
// (a standalone peer has no per-peer series), reads samples through both,
// and checks that every metric the dashboard queries is exported, and
// every label it matches on is one of the metric's (or a target label
// Prometheus adds).
func TestDashboardMetricsExist(t *testing.T) {
	_, queries := loadDashboard(t)

	peers := meshtest.StartMesh(t, 2, meshtest.Options{Node: "g-", Dataset: "toy", Data: testsupport.DatasetSpec{Samples: 40}, CacheSize: 8 << 20}).Peers
	var servers []*admin.Server
	for _, p := range peers {
		s, err := admin.Listen(admin.Config{Addr: "127.0.0.1:0"}, p.Node)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		servers = append(servers, s)
	}
	ctx := context.Background()
	for _, p := range peers {
		c := p.Client(t)
		for i := range 20 {
			if _, err := c.Get(ctx, p.Key(i)).Bytes(); err != nil {
				t.Fatalf("GET %s: %v", p.Key(i), err)
			}
		}
	}
	if _, err := peers[0].Client(t).Do(ctx, "SHADE.ORDER", peers[0].Dataset, 0, 0, 1, 30000).Result(); err != nil {
		t.Fatalf("SHADE.ORDER: %v", err)
	}
	var have map[string][]string
	testsupport.WaitFor(t, 20*time.Second, "both peers export a peer RTT", func() bool {
		for _, s := range servers {
			if _, ok := exported(t, []*admin.Server{s})["shade_peer_rtt_seconds"]; !ok {
				return false
			}
		}
		have = exported(t, servers)
		return true
	})

	targetLabels := []string{"instance", "job"}
	used := map[string]bool{}
	for _, q := range queries {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", q.where, q.expr)
		}
		for _, n := range names {
			used[n] = true
			if _, ok := have[n]; !ok {
				t.Errorf("%s: %s is not exported (query %q)", q.where, n, q.expr)
			}
		}
		for _, m := range selector.FindAllStringSubmatch(q.expr, -1) {
			labels, ok := have[m[1]]
			if !ok {
				continue
			}
			for _, l := range matcherLabel.FindAllStringSubmatch(m[2], -1) {
				if !slices.Contains(labels, l[1]) && !slices.Contains(targetLabels, l[1]) {
					t.Errorf("%s: %s has no label %s (it has %v)", q.where, m[1], l[1], labels)
				}
			}
		}
	}
	// What the dashboard is about.
	for _, n := range []string{
		"shade_reads_total", "shade_hit_ratio", "shade_evictions_total", "shade_cache_used_bytes",
		"shade_source_read_duration_seconds_bucket", "shade_peer_rtt_seconds", "shade_leader_term", "shade_epoch",
		"shade_job_reads_total",
	} {
		if !used[n] {
			t.Errorf("the dashboard does not chart %s", n)
		}
	}
	t.Logf("%d queries over %d metrics checked", len(queries), len(used))
}
