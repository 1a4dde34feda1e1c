package mesh

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/leader"
	"github.com/shade-mesh/shade/sampling"
)

// TestEpochZeroFromThePreparedOrder: the leader prepares each dataset's
// epoch 0 (firstOrder), and a job's draw of epoch 0 taken from it has
// the order, weights and sampler state of one aligned by itself, with
// its places' groups; wherever a job starts (its phase), the prepared
// order rotated is the aligned order rotated, split alike. A leader that
// steps down drops it, and one prepared as it stepped down.
func TestEpochZeroFromThePreparedOrder(t *testing.T) {
	m := startMesh(t, 3, meshOpts{samples: 3000, minSize: 10, maxSize: 20})
	n := m.leader(t).node
	ds := n.ordered[0]
	waitFor(t, 10*time.Second, "the leader's prepared epoch 0", func() bool { return ds.first.Load() != nil })
	prepared := ds.first.Load()
	where := n.placement(ds)
	if prepared.grouped == nil || !prepared.grouped.Fits(where) {
		t.Fatalf("the prepared epoch 0 is not grouped by the ring's %d partitions", where.Groups)
	}
	for _, p := range m.peers {
		if p.node != n && p.node.ordered[0].first.Load() != nil {
			t.Errorf("%s, not the leader, prepared epoch 0", p.node.Name())
		}
	}

	a := alignedScores{Table: ds.def.scores, seed: n.alignSeed(ds), n: n, js: ds.def}
	draw := func(first *firstOrder) (sampling.Drawn, *sampling.Grouped, []byte) {
		t.Helper()
		ds.first.Store(first)
		s := sampling.NewSampler(ds.len, n.cfg.samplingConfig())
		d, g, _, err := a.draw(s, 0, nil, &where)
		if err != nil {
			t.Fatal(err)
		}
		state, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return d, g, state
	}
	own, ownGrouped, ownState := draw(nil)
	got, grouped, state := draw(prepared)
	if ownGrouped != nil || grouped == nil {
		t.Fatalf("grouped: aligned by itself %v, from the prepared order %v; want only the prepared one", ownGrouped != nil, grouped != nil)
	}
	if !slices.Equal(got.Order, own.Order) || got.Weight != nil || slices.ContainsFunc(own.Weight, func(w float32) bool { return w != 1 }) || !bytes.Equal(state, ownState) {
		t.Fatal("epoch 0 from the prepared order differs from epoch 0 aligned by itself (or has weights other than 1)")
	}
	if !slices.Equal(grouped.Order(), got.Order) {
		t.Fatal("the grouped order is not the drawn order")
	}

	ranks := []string{"n0", "n1", "n2", "n1", ""}
	other := where
	other.Groups++
	for _, k := range []int{0, 1, ds.len / 3, ds.len - 1} {
		want := slices.Clone(own.Order)
		rotate(want, k)
		wantSlices, err := sampling.LocalitySplit(want, len(ranks), ranks, where)
		if err != nil {
			t.Fatal(err)
		}
		order, g := prepared.at(k, &where)
		if g == nil || !slices.Equal(order, want) {
			t.Fatalf("k %d: the prepared order rotated differs from the aligned order rotated (grouped %v)", k, g != nil)
		}
		gotSlices, err := g.Split(len(ranks), ranks, where)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(gotSlices, wantSlices, slices.Equal) {
			t.Fatalf("k %d: the prepared order's split differs from the aligned order's", k)
		}
		for _, at := range []*sampling.Placement{nil, &other} {
			if order, g := prepared.at(k, at); g != nil || !slices.Equal(order, want) {
				t.Fatalf("k %d, placement of other groups %v: grouped %v, order rotated right %v", k, at != nil, g != nil, slices.Equal(order, want))
			}
		}
	}

	// A job's epoch 0 drawn and split from the prepared order (shared
	// where the job starts at 0), with groups and without, leaves it as
	// it was.
	ds.first.Store(prepared)
	if _, err := leader.Draw(sampling.NewSampler(ds.len, n.cfg.samplingConfig()), a, 0, ranks, &where, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Draw(sampling.NewSampler(ds.len, n.cfg.samplingConfig()), a, 0, ranks, nil, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(prepared.order, own.Order) || !slices.Equal(prepared.grouped.Order(), own.Order) {
		t.Fatal("a job's draw changed the prepared epoch 0")
	}

	n.stepDown()
	if ds.first.Load() != nil {
		t.Error("the leader stepped down and kept its prepared epoch 0")
	}
	// An order prepared while the leader stepped down, stored after it
	// dropped the others, is dropped too.
	n.keepFirstOrder(ds, prepared)
	if ds.first.Load() != nil {
		t.Error("an epoch 0 prepared as the leader stepped down was kept after it")
	}
}
