package mesh

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/shade-mesh/shade/protocol/stats"
)

// TestGetViewCountsAsGet reads the same keys, some more than once, with a
// cache too small for all of them, from two nodes: one by Get, the other
// by GetView. Values, counters, deciles, policy decisions (seen through
// evictions and residency) and the access trace must be the same.
func TestGetViewCountsAsGet(t *testing.T) {
	dir, files := makeDataset(t, 200, 1000, 9000)
	traces := t.TempDir()
	ctx := context.Background()
	open := func(name string) *Node {
		n, err := New(Config{Name: name, CacheSize: 400 << 10, TracePath: filepath.Join(traces, name),
			Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	byGet, byView := open("get"), open("view")
	for _, n := range []*Node{byGet, byView} {
		if _, err := n.Set([]byte("free"), []byte("free value")); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	for i := 0; i < 600; i++ {
		idx := i * 97 % 230 // some out of range
		if i%2 == 0 {
			idx = i % 25 // a hot set
		}
		keys = append(keys, fmt.Sprintf("ds/%d", idx))
	}
	keys = append([]string{"free", "absent", "nope/1"}, keys...)
	var buf []byte
	for _, key := range keys {
		v, found, err := byGet.Get(ctx, []byte(key), buf[:0])
		var lent []byte
		calls := 0
		vfound, verr := byView.GetView(ctx, []byte(key), func(value []byte) {
			calls++
			lent = append(lent, value...)
		})
		if found != vfound || (err == nil) != (verr == nil) {
			t.Fatalf("%s: Get %v %v, GetView %v %v", key, found, err, vfound, verr)
		}
		if want := map[bool]int{true: 1}[vfound && verr == nil]; calls != want {
			t.Fatalf("%s: fn called %d times, want %d", key, calls, want)
		}
		if !bytes.Equal(v, lent) {
			t.Fatalf("%s: GetView lent %d bytes, Get returned %d", key, len(lent), len(v))
		}
		var idx int
		if _, err := fmt.Sscanf(key, "ds/%d", &idx); err == nil && idx < len(files) && !bytes.Equal(lent, files[idx]) {
			t.Fatalf("%s: wrong bytes", key)
		}
		buf = v
	}
	a, b := byGet.Snapshot(), byView.Snapshot()
	for _, st := range []*stats.Node{&a, &b} {
		st.Node, st.Members, st.Leader = "", nil, ""
		for i := range st.Datasets {
			st.Datasets[i].SourceLatency = stats.Histogram{}
			st.Datasets[i].Job.Leader = ""
		}
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("counters differ:\nGet     %+v\nGetView %+v", a, b)
	}
	if a.Datasets[0].Total.Hits == 0 || a.Datasets[0].Total.Evictions == 0 || a.FreeKeys.Hits != 1 || a.FreeKeys.Misses != 2 {
		t.Errorf("the reads did not cover hits, evictions and free keys: %+v", a)
	}
	byGet.Close()
	byView.Close()
	ta, err := os.ReadFile(filepath.Join(traces, "get"))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := os.ReadFile(filepath.Join(traces, "view"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta, tb) || len(ta) == 0 {
		t.Errorf("traces differ (%d and %d bytes)", len(ta), len(tb))
	}
}
