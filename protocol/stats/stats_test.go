package stats

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestDocumentShape pins the JSON names readers rely on: a dataset's
// counters sit inline beside its job, not under a key of their own.
func TestDocumentShape(t *testing.T) {
	in := Node{
		Node: "n1", Members: []string{"n0", "n1"}, CacheCapacity: 1 << 20,
		Datasets: []Dataset{{
			DatasetCounters: DatasetCounters{
				Dataset: "fm", Samples: 10, Total: Epoch{Epoch: -1, Hits: 3, HitRatio: 0.5},
				SourceLatency: Histogram{Bounds: []float64{0.1}, Counts: []int64{1, 2}, Sum: 0.3},
			},
			Job: Job{LatestEpoch: 2, PendingRanks: []int{1}},
		}},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"node":"n1"`, `"cache_capacity":1048576`, `"datasets":[{"dataset":"fm"`,
		`"total":{"epoch":-1,"hits":3`, `"hit_ratio":0.5`, `"job":{"leader":""`, `"latest_epoch":2`, `"pending_ranks":[1]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("document %s lacks %s", b, want)
		}
	}
	var out Node
	if err := json.Unmarshal(b, &out); err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	// A newer peer's fields are ignored.
	if err := json.Unmarshal([]byte(`{"node":"x","future":{"a":1},"datasets":[{"dataset":"d","later":2}]}`), &out); err != nil || out.Datasets[0].Dataset != "d" {
		t.Fatalf("document with unknown fields: %+v, %v", out, err)
	}
}

// TestSharesWith: a node shares with the members only where every
// dataset names exactly them; a dataset of an earlier build's document
// (no sharing) does not count as shared.
func TestSharesWith(t *testing.T) {
	members := []string{"n0", "n1"}
	st := Node{Datasets: []Dataset{{Sharing: []string{"n0", "n1"}}, {Sharing: []string{"n0"}}}}
	if st.SharesWith(members) {
		t.Error("a dataset shared with n0 alone counts as shared with both")
	}
	st.Datasets[1].Sharing = []string{"n0", "n1"}
	if !st.SharesWith(members) {
		t.Error("datasets shared with both do not count")
	}
	if (Node{Datasets: []Dataset{{}}}).SharesWith(members) {
		t.Error("a dataset without sharing counts as shared")
	}
}
