package orders

import (
	"slices"
	"testing"

	"github.com/shade-mesh/shade/mesh/wire"
)

func order(gen uint64, epoch int) *wire.PublishMsg {
	return &wire.PublishMsg{Gen: gen, Epoch: epoch, World: 2, Slices: []wire.U32s{{1}, {2}}}
}

func TestBookAskAndDone(t *testing.T) {
	b := New(2)
	var installed []int
	b.OnInstall(func(p *wire.PublishMsg) { installed = append(installed, p.Epoch) })

	a := b.Ask(0, 1, 2)
	if a.Order != nil || a.Have != -1 || a.Gone || a.ImpliedDone {
		t.Fatalf("empty book answered %+v", a)
	}
	if _, res := b.MarkDone(0, 1); res != NoOrder {
		t.Fatalf("done before any order: %v", res)
	}
	if !b.Install(order(0, 0)) || b.Install(order(0, 0)) {
		t.Fatal("Install: want the first copy only")
	}
	select {
	case <-a.Changed:
	default:
		t.Fatal("waiters not woken by an install")
	}
	if a := b.Ask(0, 1, 2); a.Order == nil || a.Order.Slices[1][0] != 2 {
		t.Fatalf("epoch 0 not served: %+v", a)
	}
	if a := b.Ask(0, 1, 3); a.World != 2 {
		t.Fatalf("another world: %+v", a)
	}
	// Asking for epoch 1 counts as rank 0's done of epoch 0.
	if a := b.Ask(1, 0, 2); !a.ImpliedDone || a.Have != 0 {
		t.Fatalf("ask for the next epoch: %+v", a)
	}
	if _, res := b.MarkDone(0, 1); res != Recorded {
		t.Fatalf("done of epoch 0: %v", res)
	}
	if _, res := b.MarkDone(0, 5); res != BadRank {
		t.Fatalf("rank outside the world: %v", res)
	}
	if _, res := b.MarkDone(3, 1); res != Ahead {
		t.Fatalf("done ahead: %v", res)
	}
	p, epoch, done := b.Finished()
	if p.Epoch != 0 || epoch != 0 || len(done) != 2 {
		t.Fatalf("finished: epoch %d/%d ranks %v", p.Epoch, epoch, done)
	}
	b.Install(order(0, 1))
	b.Install(order(0, 2))
	if _, res := b.MarkDone(1, 1); res != Late {
		t.Fatalf("done of an old epoch: %v", res)
	}
	if a := b.Ask(0, 1, 2); !a.Gone || a.Have != 2 {
		t.Fatalf("epoch 0 past keep: %+v", a)
	}
	js := b.State("ds")
	if js.Epoch != 2 || len(js.Ranks) != 2 || len(js.Done) != 0 {
		t.Fatalf("state %+v", js)
	}
	// A new generation forgets the ranks.
	b.Install(order(1, 0))
	if js := b.State("ds"); js.Gen != 1 || len(js.Ranks) != 0 {
		t.Fatalf("state after a reset %+v", js)
	}
	if gen, epoch, _ := b.Head(); gen != 1 || epoch != 0 || len(installed) != 4 {
		t.Fatalf("head %d/%d, %d installed", gen, epoch, len(installed))
	}
}

// TestBookAhead: where orders run an epoch ahead of training, the dones of
// the epoch before the newest still count, are reported for a new leader,
// and are the ones the node repeats.
func TestBookAhead(t *testing.T) {
	b := New(4)
	ahead := func(epoch int) *wire.PublishMsg {
		return &wire.PublishMsg{Dataset: "ds", Epoch: epoch, Ahead: 1, World: 2, Slices: []wire.U32s{{0}, {1}}}
	}
	// Published together, epochs 1 and 0 may arrive out of turn.
	if !b.Install(ahead(1)) || !b.Install(ahead(0)) || b.Install(ahead(0)) {
		t.Fatal("epoch 0 after epoch 1 not kept, or kept twice")
	}
	if a := b.Ask(0, 0, 2); a.Order == nil {
		t.Fatalf("epoch 0 arrived after epoch 1: %+v", a)
	}
	if _, e, _ := b.Head(); e != 1 {
		t.Fatalf("newest is epoch %d after an older one arrived", e)
	}
	if _, res := b.MarkDone(0, 1); res != Recorded {
		t.Fatalf("done of the epoch being trained: %v", res)
	}
	if _, res := b.MarkDone(1, 0); res != Recorded {
		t.Fatalf("done of the newest epoch: %v", res)
	}
	p, epoch, done := b.Finished()
	if p.Epoch != 1 || epoch != 0 || !slices.Equal(done, []int{1}) {
		t.Fatalf("finished: newest %d, training %d, ranks %v", p.Epoch, epoch, done)
	}
	if js := b.State("ds"); !slices.Equal(js.Done, []int{0}) || !slices.Equal(js.DonePrev, []int{1}) {
		t.Fatalf("state %+v", js)
	}
	b.Install(ahead(2))
	if _, res := b.MarkDone(0, 0); res != Late {
		t.Fatalf("done of an epoch two behind: %v", res)
	}
	if _, epoch, done := b.Finished(); epoch != 1 || !slices.Equal(done, []int{0}) {
		t.Fatalf("after epoch 2: training %d, ranks %v", epoch, done)
	}
	// Rank 1 asks for epoch 3, not yet out: it finished epochs 2 and 1,
	// whatever became of its dones.
	if a := b.Ask(3, 1, 2); !a.ImpliedDone || a.Have != 2 || a.Ahead != 1 {
		t.Fatalf("ask for the epoch after the newest: %+v", a)
	}
	if js := b.State("ds"); !slices.Equal(js.Done, []int{1}) || len(js.DonePrev) != 2 {
		t.Fatalf("state after an implied done %+v", js)
	}
}

// TestBookWholeOverPart: the whole order replaces this node's part of it,
// newest or kept, and a part never replaces the whole; another term's
// order of a kept epoch is not taken.
func TestBookWholeOverPart(t *testing.T) {
	b := New(3)
	order := func(epoch int, term uint64, part string) *wire.PublishMsg {
		return &wire.PublishMsg{Dataset: "ds", Gen: 1, Epoch: epoch, Term: term, World: 1, Slices: []wire.U32s{{1}}, Part: part}
	}
	for _, step := range []struct {
		p       *wire.PublishMsg
		install bool
	}{
		{order(1, 1, "me"), true},
		{order(1, 1, "me"), false},
		{order(1, 1, ""), true}, // the whole over the part
		{order(1, 1, "me"), false},
		{order(2, 1, "me"), true},
		{order(1, 1, "me"), false}, // kept whole already
		{order(3, 1, "me"), true},
		{order(2, 2, ""), false}, // another term of a kept epoch
		{order(2, 1, ""), true},  // the whole over a kept part
		{order(3, 1, ""), true},
	} {
		if got := b.Install(step.p); got != step.install {
			t.Fatalf("Install(epoch %d, term %d, part %q) = %v, want %v", step.p.Epoch, step.p.Term, step.p.Part, got, step.install)
		}
	}
	for e := 1; e <= 3; e++ {
		if p := b.Kept(e); p == nil || p.Part != "" {
			t.Fatalf("epoch %d kept as %+v, want the whole", e, p)
		}
	}
	if st := b.State("ds"); st.Part || st.Epoch != 3 {
		t.Fatalf("state %+v, want epoch 3, whole", st)
	}
}
