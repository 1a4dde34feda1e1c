package leader

import (
	"slices"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/sampling"
)

// TestRebuildFromStates: the new leader adopts the newest order's job and
// merges the dones and rank nodes of the members that hold that order.
func TestRebuildFromStates(t *testing.T) {
	h := newHarness(t)
	// The old leader published epoch 3 of generation 2 for ranks on a, b, c.
	s := sampling.NewSampler(8, sampling.DefaultConfig())
	d, err := Draw(s, identity(8), 0, []string{"a", "b", "c"}, nil, nil)
	state := d.State
	if err != nil {
		t.Fatal(err)
	}
	newest := &wire.PublishMsg{Dataset: "ds", Gen: 2, Epoch: 3, Term: 5, World: 3, Sampler: state, Ranks: []string{"a", "", ""}}
	own := wire.JobState{Dataset: "ds", Gen: 2, Epoch: 3, Ranks: []wire.RankWorld{{Rank: 0, World: 3}}, Done: []int{0}}
	peers := States{
		"b": {Jobs: []wire.JobState{{Dataset: "ds", Gen: 2, Epoch: 3, Ranks: []wire.RankWorld{{Rank: 1, World: 3}}, Done: []int{1}}}},
		// c holds an older epoch: its ranks and dones are not this epoch's.
		"c": {Jobs: []wire.JobState{{Dataset: "ds", Gen: 2, Epoch: 2, Ranks: []wire.RankWorld{{Rank: 2, World: 3}}, Done: []int{2}}}},
		// d's report is out of bounds or of another dataset.
		"d": {Jobs: []wire.JobState{
			{Dataset: "ds", Gen: 2, Epoch: 3, Ranks: []wire.RankWorld{{Rank: 2, World: 5}, {Rank: -1, World: 3}}, Done: []int{-1, 7}},
			{Dataset: "other", Gen: 2, Epoch: 3, Ranks: []wire.RankWorld{{Rank: 2, World: 3}}, Done: []int{2}},
		}},
	}
	j, err := Rebuild(h.config(), newest, "a", own, peers)
	if err != nil {
		t.Fatal(err)
	}
	st := j.Status()
	if st.World != 3 || st.Latest != 3 || !slices.Equal(st.Pending, []int{2}) || !slices.Equal(st.Missing, []int{2}) {
		t.Fatalf("rebuilt: %+v", st)
	}
	if err := j.Resume(); err != nil || len(h.pubs) != 0 || len(h.timers) != 0 {
		t.Fatalf("resume with a rank pending: %v, %d published, %d timers", err, len(h.pubs), len(h.timers))
	}
	if err := j.Done(2, 3, 2, "c", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	if p := h.last(t); p.Gen != 2 || p.Epoch != 4 || !slices.Equal(p.Ranks, []string{"a", "b", "c"}) {
		t.Fatalf("epoch after the rebuilt one: %+v", p)
	}
}

// TestRebuildFromAPart: a new leader that holds only its part of the
// newest order (no member held it whole) says so, and its job goes on
// from that epoch, its sampler afresh: every rank's done publishes the
// next.
func TestRebuildFromAPart(t *testing.T) {
	h := newHarness(t)
	part := &wire.PublishMsg{Dataset: "ds", Gen: 2, Epoch: 3, Term: 5, World: 2, Ranks: []string{"a", "b"}, Slices: []wire.U32s{{1, 2}, nil}, Part: "a", Size: 4}
	own := wire.JobState{Dataset: "ds", Gen: 2, Epoch: 3, Term: 5, Part: true, Ranks: []wire.RankWorld{{Rank: 0, World: 2}}, Done: []int{0}}
	j, err := Rebuild(h.config(), part, "a", own, States{"b": {Jobs: []wire.JobState{{Dataset: "ds", Gen: 2, Epoch: 3, Term: 5, Part: true, Ranks: []wire.RankWorld{{Rank: 1, World: 2}}}}}})
	if err == nil {
		t.Fatal("rebuilt from a part without saying its sampler state is missing")
	}
	if st := j.Status(); st.World != 2 || st.Latest != 3 || !slices.Equal(st.Pending, []int{1}) {
		t.Fatalf("rebuilt: %+v", st)
	}
	if err := j.Done(2, 3, 1, "b", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	if p := h.last(t); p.Gen != 2 || p.Epoch != 4 || len(p.Slices) != 2 || len(p.Slices[0]) != 4 {
		t.Fatalf("epoch after the part: %+v", p)
	}
}

func TestRebuildBeforeEpochZero(t *testing.T) {
	h := newHarness(t)
	// No order yet; two of three ranks asked. The world comes from the
	// reports; one over MaxWorld is skipped.
	own := wire.JobState{Dataset: "ds", Epoch: -1, Ranks: []wire.RankWorld{{Rank: 0, World: 9}}}
	peers := States{"b": {Jobs: []wire.JobState{{Dataset: "ds", Epoch: -1, Ranks: []wire.RankWorld{{Rank: 1, World: 3}}}}}}
	j, err := Rebuild(h.config(), nil, "a", own, peers)
	if err != nil {
		t.Fatal(err)
	}
	if st := j.Status(); st.World != 3 || st.Latest != -1 || !slices.Equal(st.Missing, []int{0, 2}) {
		t.Fatalf("rebuilt: %+v", st)
	}
	if err := j.Resume(); err != nil || len(h.pubs) != 0 {
		t.Fatalf("resume with ranks missing: %v, %d published", err, len(h.pubs))
	}
	if h.fire(t, time.Second); h.last(t).Epoch != 0 {
		t.Fatalf("join wait published epoch %d", h.last(t).Epoch)
	}
}

func TestStatesPickTheNewest(t *testing.T) {
	states := States{
		"b": {MaxTerm: 4, Jobs: []wire.JobState{{Dataset: "ds", Gen: 1, Epoch: 5, Term: 2}},
			Tables: []wire.TableInfo{{Dataset: "ds", Term: 3, Scored: 10}}},
		"c": {MaxTerm: 6, Jobs: []wire.JobState{{Dataset: "ds", Gen: 1, Epoch: 5, Term: 3}, {Dataset: "x", Gen: 9}},
			Tables: []wire.TableInfo{{Dataset: "ds", Term: 3, Scored: 10}}},
		// Another job of the same dataset: newer and better, but not the
		// same job's.
		"d": {MaxTerm: 6, Jobs: []wire.JobState{{Dataset: "ds", Job: "sweep", Gen: 7, Epoch: 9, Term: 6}},
			Tables: []wire.TableInfo{{Dataset: "ds", Job: "sweep", Term: 6, Scored: 99}}},
	}
	if got := states.NewestOrder(wire.JobState{Dataset: "ds", Gen: 1, Epoch: 4}); got != "c" {
		t.Errorf("newest order from %q, want c (a later term)", got)
	}
	if got := states.NewestOrder(wire.JobState{Dataset: "ds", Gen: 2, Epoch: 0}); got != "" {
		t.Errorf("newest order from %q, want none: this node's generation is newer", got)
	}
	if best, from := states.BestTable(wire.TableInfo{Dataset: "ds", Term: 1}); from != "b" || best.Scored != 10 {
		t.Errorf("best table %+v from %q, want b's (the lower name of a tie)", best, from)
	}
	if got := states.NewestOrder(wire.JobState{Dataset: "ds", Job: "sweep", Gen: 7, Epoch: 3}); got != "d" {
		t.Errorf("newest order of job sweep from %q, want d", got)
	}
	if best, from := states.BestTable(wire.TableInfo{Dataset: "ds", Job: "sweep"}); from != "d" || best.Scored != 99 {
		t.Errorf("best table of job sweep %+v from %q, want d's", best, from)
	}
	// A member's part of an order is never adopted; the whole of it is,
	// over this node's own part.
	parts := States{
		"b": {Jobs: []wire.JobState{{Dataset: "ds", Gen: 1, Epoch: 6, Term: 3, Part: true}}},
		"c": {Jobs: []wire.JobState{{Dataset: "ds", Gen: 1, Epoch: 5, Term: 3}}},
	}
	if got := parts.NewestOrder(wire.JobState{Dataset: "ds", Gen: 1, Epoch: 4}); got != "c" {
		t.Errorf("newest order from %q, want c: b holds its part alone", got)
	}
	if got := parts.NewestOrder(wire.JobState{Dataset: "ds", Gen: 1, Epoch: 5, Term: 3, Part: true}); got != "c" {
		t.Errorf("newest order from %q over this node's part of it, want c's whole", got)
	}
	if got := parts.NewestOrder(wire.JobState{Dataset: "ds", Gen: 1, Epoch: 5, Term: 3}); got != "" {
		t.Errorf("newest order from %q, want none: this node holds it whole", got)
	}
	if got := states.MaxTerm(5); got != 6 {
		t.Errorf("MaxTerm = %d, want 6", got)
	}
}
