package wire

import (
	"slices"
	"testing"
)

// owners places sample keys by a fixed table.
type owners map[string][]string

func (o owners) AppendOwners(dst []string, key []byte) []string {
	return append(dst, o[string(key)]...)
}

func TestScoreQueue(t *testing.T) {
	r := owners{"ds/1": {"a", "me"}, "ds/2": {"b"}, "ds/3": {"a", "b"}}
	var q ScoreQueue
	local := q.Add(r, "me", JobKey{Dataset: "ds"}, []uint32{1, 2, 3}, nil)
	local = q.Add(r, "me", JobKey{Dataset: "ds"}, []uint32{1}, local)
	if !slices.Equal(local, []uint32{1, 1}) {
		t.Fatalf("local share %v, want [1 1]", local)
	}
	if q.Len() != 2 {
		t.Fatalf("%d owners queued, want 2", q.Len())
	}
	got := q.Take()
	if len(got["a"][JobKey{Dataset: "ds"}]) != 2 || len(got["b"][JobKey{Dataset: "ds"}]) != 2 {
		t.Fatalf("queued %v", got)
	}
	if q.Len() != 0 {
		t.Fatal("Take left the queue non-empty")
	}
	req := ScoresFor(JobKey{Dataset: "ds"}, got["a"][JobKey{Dataset: "ds"}], table{})
	if len(req.IDs) != 2 || req.Mean != 0.5 {
		t.Fatalf("ScoresFor: %+v", req)
	}
	for i, id := range req.IDs {
		if req.Scores[i] != float64(id) {
			t.Fatalf("score of %d is %v", id, req.Scores[i])
		}
	}
}

type table struct{}

func (table) Score(id uint32) float64 { return float64(id) }
func (table) Mean() float64           { return 0.5 }

func TestNewerBetter(t *testing.T) {
	p := &PublishMsg{Gen: 1, Epoch: 2, Term: 3}
	for _, c := range []struct {
		q    *PublishMsg
		want bool
	}{
		{nil, true},
		{&PublishMsg{Gen: 2}, false},
		{&PublishMsg{Gen: 1, Epoch: 1, Term: 9}, true},
		{&PublishMsg{Gen: 1, Epoch: 2, Term: 3}, false},
		{&PublishMsg{Gen: 1, Epoch: 2, Term: 2}, true},
	} {
		if got := p.Newer(c.q); got != c.want {
			t.Errorf("%+v newer than %+v: %v, want %v", p, c.q, got, c.want)
		}
	}
	a := TableInfo{Term: 2, Scored: 1}
	if !a.Better(TableInfo{Term: 1, Scored: 9}) || a.Better(TableInfo{Term: 2, Scored: 1}) || !a.Better(TableInfo{Term: 2}) {
		t.Error("TableInfo.Better")
	}
}
