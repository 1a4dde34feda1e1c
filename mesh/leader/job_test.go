package leader

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/sampling"
)

// identity is a score table whose every order is 0..n-1, each id of
// weight 1.
type identity int

func (n identity) Draw(_ *sampling.Sampler, _ int, _ []uint64) (sampling.Drawn, int, error) {
	d := sampling.Drawn{Order: make([]uint32, n), Weight: make([]float32, n)}
	for i := range d.Order {
		d.Order[i] = uint32(i)
		d.Weight[i] = 1
	}
	return d, 3, nil
}

// harness is a Job with the orders it published and the timers it armed,
// which fire when the test says.
type harness struct {
	job    *Job
	pubs   []*wire.PublishMsg
	timers []timer
}

type timer struct {
	d  time.Duration
	fn func()
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{}
	h.job = New(h.config())
	return h
}

func (h *harness) config() Config {
	return Config{
		Dataset: "ds", Version: "v1", MaxWorld: 4, Scores: identity(8),
		NewSampler: func() *sampling.Sampler { return sampling.NewSampler(8, sampling.DefaultConfig()) },
		Term:       func() uint64 { return 7 },
		Publish:    func(p *wire.PublishMsg, _ int) { h.pubs = append(h.pubs, p) },
		JoinWait:   time.Second, EpochDeadline: time.Minute,
		After: func(d time.Duration, fn func()) { h.timers = append(h.timers, timer{d, fn}) },
	}
}

// fire runs the timers armed so far, the oldest first, after checking
// their durations.
func (h *harness) fire(t *testing.T, want ...time.Duration) {
	t.Helper()
	armed := h.timers
	h.timers = nil
	var got []time.Duration
	for _, tm := range armed {
		got = append(got, tm.d)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("timers armed: %v, want %v", got, want)
	}
	for _, tm := range armed {
		tm.fn()
	}
}

// drawOff runs the draws off the lock armed so far (orders ahead and
// speculations: the timers of 0), the oldest first, and the draws they
// arm in turn; the other timers stay armed. It reports how many it ran.
func (h *harness) drawOff() int {
	n := 0
	for {
		i := slices.IndexFunc(h.timers, func(tm timer) bool { return tm.d == 0 })
		if i < 0 {
			return n
		}
		fn := h.timers[i].fn
		h.timers = slices.Delete(h.timers, i, i+1)
		fn()
		n++
	}
}

// clocked gives cfg a fake clock, which the i-th draw of an order moves
// on by draws[i] (the last for every draw after), and returns it. It
// wraps cfg.Scores: set that first.
func clocked(cfg *Config, draws ...time.Duration) *time.Time {
	now, i := time.Unix(1e9, 0), 0
	cfg.Now = func() time.Time { return now }
	cfg.Scores = slowScores{cfg.Scores, func() {
		now = now.Add(draws[min(i, len(draws)-1)])
		i++
	}}
	return &now
}

// slowScores is Scores whose draws call tick, which moves a fake clock.
type slowScores struct {
	Scores
	tick func()
}

func (s slowScores) Draw(sm *sampling.Sampler, epoch int, resident []uint64) (sampling.Drawn, int, error) {
	s.tick()
	return s.Scores.Draw(sm, epoch, resident)
}

// joinAB joins ranks 0 and 1 of a world of 2, on nodes a and b.
func (h *harness) joinAB(t *testing.T) {
	t.Helper()
	for r, node := range []string{"a", "b"} {
		if _, err := h.job.Join(r, 2, node, 0, -1); err != nil {
			t.Fatal(err)
		}
	}
}

// last is the newest published order; it fails the test if there is none.
func (h *harness) last(t *testing.T) *wire.PublishMsg {
	t.Helper()
	if len(h.pubs) == 0 {
		t.Fatal("nothing published")
	}
	return h.pubs[len(h.pubs)-1]
}

func TestJoinPublishesEpochZeroOnceAllJoined(t *testing.T) {
	h := newHarness(t)
	if behind, err := h.job.Join(1, 2, "b", 0, -1); err != nil || behind || len(h.timers) != 1 {
		t.Fatalf("first join: behind %v, %v, %d timers; want the join wait", behind, err, len(h.timers))
	}
	if st := h.job.Status(); st.World != 2 || st.Latest != -1 || !slices.Equal(st.Missing, []int{0}) {
		t.Fatalf("status after one join: %+v", st)
	}
	if _, err := h.job.Join(1, 2, "b", 0, -1); err != nil || len(h.timers) != 1 || len(h.pubs) != 0 {
		t.Fatalf("repeated join: %v, %d timers, %d published; want nothing to do", err, len(h.timers), len(h.pubs))
	}
	if _, err := h.job.Join(0, 2, "a", 0, -1); err != nil {
		t.Fatal(err)
	}
	p := h.last(t)
	if p.Epoch != 0 || p.World != 2 || p.Term != 7 || p.Dataset != "ds" || p.Version != "v1" ||
		!slices.Equal(p.Ranks, []string{"a", "b"}) || len(p.Slices) != 2 || len(p.Slices[0]) != 4 || len(p.Sampler) == 0 {
		t.Fatalf("epoch 0: %+v", p)
	}
	// A node that asks again without the order is behind; one with it is not.
	if behind, _ := h.job.Join(0, 2, "a", 0, -1); !behind {
		t.Error("a rank without epoch 0 is not behind")
	}
	if behind, _ := h.job.Join(0, 2, "a", 0, 0); behind {
		t.Error("a rank holding epoch 0 is behind")
	}
	if h.fire(t, time.Second); len(h.pubs) != 1 {
		t.Fatalf("join wait after epoch 0: %d published; want none more", len(h.pubs))
	}
}

func TestJoinWaitPublishesForTheRanksSoFar(t *testing.T) {
	h := newHarness(t)
	if _, err := h.job.Join(2, 3, "c", 0, -1); err != nil {
		t.Fatal(err)
	}
	h.fire(t, time.Second)
	if p := h.last(t); p.Epoch != 0 || p.World != 3 || !slices.Equal(p.Ranks, []string{"", "", "c"}) {
		t.Fatalf("epoch 0 after the wait: %+v", p)
	}
}

func TestJoinRefusals(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct{ rank, world int }{{0, 0}, {-1, 2}, {2, 2}, {0, 5}} {
		if _, err := h.job.Join(c.rank, c.world, "a", 0, -1); !errors.Is(err, ErrBadRequest) {
			t.Errorf("rank %d of world %d (MaxWorld 4): %v, want ErrBadRequest", c.rank, c.world, err)
		}
	}
	if st := h.job.Status(); st.World != 0 {
		t.Fatalf("a refused join set the world: %+v", st)
	}
	if _, err := h.job.Join(0, 4, "a", 0, -1); err != nil {
		t.Fatalf("world at MaxWorld: %v", err)
	}
	_, err := h.job.Join(0, 2, "a", 0, -1)
	if !errors.Is(err, ErrWorldMismatch) || errors.Is(err, ErrBadRequest) {
		t.Fatalf("another world: %v, want ErrWorldMismatch", err)
	}
	if want := "the job on ds has world 4, asked 2 (SHADE.RESET ds starts a new job)"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestDonePublishesTheNextEpoch(t *testing.T) {
	h := newHarness(t)
	for r, node := range []string{"a", "b"} {
		if _, err := h.job.Join(r, 2, node, 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	h.fire(t, time.Second) // the join wait, over after epoch 0
	if err := h.job.Done(0, 1, 0, "a", wire.ResidentSet{}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("done for an epoch not published: %v", err)
	}
	if err := h.job.Done(0, 0, 2, "a", wire.ResidentSet{}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("done for a rank outside the world: %v", err)
	}
	if err := h.job.Done(1, 0, 0, "a", wire.ResidentSet{}); err != nil || len(h.timers) != 0 {
		t.Errorf("done of another generation: %v, %d timers; want ignored", err, len(h.timers))
	}
	if err := h.job.Done(0, 0, 1, "b", wire.ResidentSet{}); err != nil || len(h.timers) != 1 {
		t.Fatalf("first done: %v, %d timers; want the deadline", err, len(h.timers))
	}
	if st := h.job.Status(); st.Latest != 0 || !slices.Equal(st.Pending, []int{0}) {
		t.Fatalf("status: %+v", st)
	}
	if h.job.Done(0, 0, 1, "b", wire.ResidentSet{}); len(h.timers) != 1 {
		t.Error("a second done of the same epoch armed another deadline")
	}
	if err := h.job.Done(0, 0, 0, "a", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	if p := h.last(t); p.Epoch != 1 || len(h.pubs) != 2 {
		t.Fatalf("after every rank finished: epoch %d, %d published", p.Epoch, len(h.pubs))
	}
	if err := h.job.Done(0, 0, 0, "a", wire.ResidentSet{}); err != nil || len(h.pubs) != 2 {
		t.Errorf("late done: %v, %d published", err, len(h.pubs))
	}
	if h.fire(t, time.Minute); len(h.pubs) != 2 {
		t.Errorf("the deadline of an epoch that every rank finished published")
	}
}

func TestDeadlinePublishesWithoutThePending(t *testing.T) {
	h := newHarness(t)
	for r := range 3 {
		if _, err := h.job.Join(r, 3, "n", 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	h.fire(t, time.Second)
	if err := h.job.Done(0, 0, 1, "n", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	if h.fire(t, time.Minute); len(h.pubs) != 2 || h.last(t).Epoch != 1 {
		t.Fatalf("deadline: %d published", len(h.pubs))
	}
	// A retired job's timers publish nothing.
	if err := h.job.Done(0, 1, 1, "n", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	h.job.Retire()
	if h.fire(t, time.Minute); len(h.pubs) != 2 {
		t.Fatalf("a retired job's deadline published epoch %d", h.last(t).Epoch)
	}
}

func TestNoDeadline(t *testing.T) {
	h := &harness{}
	cfg := h.config()
	cfg.EpochDeadline = 0
	h.job = New(cfg)
	for r := range 2 {
		if _, err := h.job.Join(r, 2, "n", 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	h.fire(t, time.Second)
	if err := h.job.Done(0, 0, 1, "n", wire.ResidentSet{}); err != nil || len(h.timers) != 0 {
		t.Fatalf("done without a deadline: %v, %d timers", err, len(h.timers))
	}
}

func TestReset(t *testing.T) {
	h := newHarness(t)
	if _, err := h.job.Join(0, 1, "a", 0, -1); err != nil {
		t.Fatal(err)
	}
	h.job.Reset()
	p := h.last(t)
	if p.Gen != 1 || p.Epoch != -1 || p.World != 0 || p.Term != 7 || p.Dataset != "ds" {
		t.Fatalf("reset's order: %+v", p)
	}
	if st := h.job.Status(); st.World != 0 || st.Latest != -1 || st.Pending != nil || st.Missing != nil {
		t.Fatalf("status after reset: %+v", st)
	}
	// Any world may join the new generation; dones of the old are ignored.
	if _, err := h.job.Join(0, 2, "a", 1, -1); err != nil {
		t.Fatalf("another world after reset: %v", err)
	}
	if err := h.job.Done(0, 0, 0, "a", wire.ResidentSet{}); err != nil {
		t.Errorf("done of the old generation: %v", err)
	}
	if _, err := h.job.Join(1, 2, "b", 1, -1); err != nil {
		t.Fatal(err)
	}
	if p := h.last(t); p.Gen != 1 || p.Epoch != 0 || p.World != 2 {
		t.Fatalf("epoch 0 of the new generation: %+v", p)
	}
}

func TestEndRetiresTheJobOnce(t *testing.T) {
	h := newHarness(t)
	cfg := h.config()
	cfg.Job = "sweep"
	h.job = New(cfg)
	if _, err := h.job.Join(0, 1, "a", 0, -1); err != nil {
		t.Fatal(err)
	}
	if p := h.last(t); p.Job != "sweep" || p.Epoch != 0 || p.Retired {
		t.Fatalf("epoch 0 of a named job: %+v", p)
	}
	h.job.End()
	p := h.last(t)
	if p.Gen != 1 || p.Epoch != -1 || !p.Retired || p.Job != "sweep" || p.Dataset != "ds" {
		t.Fatalf("the retirement: %+v", p)
	}
	h.job.End()
	if len(h.pubs) != 2 {
		t.Fatalf("a second End published again: %d orders", len(h.pubs))
	}
	// It takes no rank, and its timers publish nothing.
	if _, err := h.job.Join(0, 1, "a", 1, -1); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a join after the retirement: %v", err)
	}
	for _, tm := range h.timers {
		tm.fn()
	}
	if n := len(h.pubs); n != 2 {
		t.Fatalf("%d orders published after the retirement", n-2)
	}
}

// TestGenStartsWhereTheRetirementEnded checks that a job started with
// Config.Gen publishes its orders and its own retirement from that
// generation on, and takes the joins of that generation.
func TestGenStartsWhereTheRetirementEnded(t *testing.T) {
	h := newHarness(t)
	cfg := h.config()
	cfg.Job, cfg.Gen = "sweep", 3
	h.job = New(cfg)
	if _, err := h.job.Join(0, 1, "a", 3, -1); err != nil {
		t.Fatal(err)
	}
	if p := h.last(t); p.Gen != 3 || p.Epoch != 0 {
		t.Fatalf("epoch 0 of a job begun at gen 3: gen %d epoch %d", p.Gen, p.Epoch)
	}
	if err := h.job.Done(3, 0, 0, "a", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	if p := h.last(t); p.Gen != 3 || p.Epoch != 1 {
		t.Fatalf("after the done of gen 3: gen %d epoch %d, want gen 3 epoch 1", p.Gen, p.Epoch)
	}
	h.job.End()
	if p := h.last(t); p.Gen != 4 || !p.Retired {
		t.Fatalf("its retirement: %+v", p)
	}
}

func TestDrawSplitsPreferringOwners(t *testing.T) {
	s := sampling.NewSampler(8, sampling.DefaultConfig())
	owners := sampling.OwnersPlacement(8, func(id uint32) []string { return []string{[]string{"a", "b"}[id%2]} })
	d, err := Draw(s, identity(8), 0, []string{"b", "a"}, &owners, nil)
	if err != nil || d.Scored != 3 || len(d.State) == 0 || len(d.Slices) != 2 || d.Weights != nil {
		t.Fatalf("Draw: %d slices, %d bytes of state, %d scored, weights %v, %v", len(d.Slices), len(d.State), d.Scored, d.Weights, err)
	}
	for r, want := range []uint32{1, 0} { // b owns the odd ids, a the even
		for _, id := range d.Slices[r] {
			if id%2 != want {
				t.Errorf("rank %d (on %s) got id %d", r, []string{"b", "a"}[r], id)
			}
		}
	}
	if _, err := Draw(s, identity(8), 0, nil, nil, nil); err == nil {
		t.Error("Draw for no rank succeeded")
	}
}

// weighted is a score table whose order is 0..n-1 with weight 1+id/10,
// and which remembers the resident bitmap it was asked to prefer.
type weighted struct {
	n        int
	resident []uint64
}

func (w *weighted) Draw(_ *sampling.Sampler, _ int, resident []uint64) (sampling.Drawn, int, error) {
	w.resident = resident
	d := sampling.Drawn{Order: make([]uint32, w.n), Weight: make([]float32, w.n)}
	for i := range d.Order {
		d.Order[i] = uint32(i)
		d.Weight[i] = 1 + float32(i)/10
	}
	return d, w.n, nil
}

// TestDrawWeightsFollowIDs: however the split moves ids among the ranks,
// each id keeps its own weight.
func TestDrawWeightsFollowIDs(t *testing.T) {
	s := sampling.NewSampler(8, sampling.DefaultConfig())
	owners := sampling.OwnersPlacement(8, func(id uint32) []string { return []string{[]string{"a", "b"}[id%2]} })
	d, err := Draw(s, &weighted{n: 8}, 0, []string{"b", "a"}, &owners, nil)
	if err != nil || len(d.Weights) != 2 {
		t.Fatalf("Draw: weights %v, %v", d.Weights, err)
	}
	for r, ids := range d.Slices {
		if len(d.Weights[r]) != len(ids) {
			t.Fatalf("rank %d: %d ids, %d weights", r, len(ids), len(d.Weights[r]))
		}
		for i, id := range ids {
			if want := 1 + float32(id)/10; d.Weights[r][i] != want {
				t.Errorf("rank %d position %d: id %d has weight %v, want %v", r, i, id, d.Weights[r][i], want)
			}
		}
	}
}

// TestDrawPrefersUnionOfResident: the draw is asked to prefer the samples
// cached on this node now and on every node that said so with a done;
// a reset forgets what the nodes said.
func TestDrawPrefersUnionOfResident(t *testing.T) {
	h := &harness{}
	table := &weighted{n: 80}
	cfg := h.config()
	cfg.Scores = table
	cfg.NewSampler = func() *sampling.Sampler { return sampling.NewSampler(80, sampling.DefaultConfig()) }
	cfg.Resident = func() []uint64 { return []uint64{1 << 3, 0} } // sample 3 here
	h.job = New(cfg)
	if _, err := h.job.Join(0, 2, "a", 0, -1); err != nil {
		t.Fatal(err)
	}
	if _, err := h.job.Join(1, 2, "b", 0, -1); err != nil {
		t.Fatal(err)
	}
	// b cached samples 9 and 70; a bitmap longer than 80 samples, or a
	// list naming sample 80, is refused.
	b := make([]byte, 10)
	b[1], b[8] = 1<<1, 1<<6
	if err := h.job.Done(0, 0, 1, "b", wire.ResidentSet{Bits: make([]byte, 11)}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("an oversize bitmap: %v", err)
	}
	if err := h.job.Done(0, 0, 1, "b", wire.ResidentSet{Sparse: []byte{9, 70}}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("a list naming sample 80 of 80: %v", err)
	}
	if err := h.job.Done(0, 0, 1, "b", wire.ResidentSet{Bits: b}); err != nil {
		t.Fatal(err)
	}
	if err := h.job.Done(0, 0, 0, "a", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{1<<3 | 1<<9, 1 << 6}; !slices.Equal(table.resident, want) {
		t.Errorf("epoch 1 preferred %x, want %x", table.resident, want)
	}
	if p := h.last(t); p.Epoch != 1 || len(p.Weights) != 2 || len(p.Weights[0]) != len(p.Slices[0]) {
		t.Errorf("epoch 1 published without its weights: %+v", p)
	}
	h.job.Reset()
	if _, err := h.job.Join(0, 1, "a", 1, -1); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{1 << 3, 0}; !slices.Equal(table.resident, want) {
		t.Errorf("after a reset, preferred %x, want %x", table.resident, want)
	}
}

func TestCheck(t *testing.T) {
	ok := func() *wire.PublishMsg {
		return &wire.PublishMsg{Dataset: "ds", Version: "v1", Epoch: 0, World: 2, Slices: []wire.U32s{{0, 1}, {2, 3}}, Ranks: []string{"a", "b"}}
	}
	if err := Check(ok(), "v1", 4, 2); err != nil {
		t.Fatalf("a sound order: %v", err)
	}
	for name, spoil := range map[string]func(p *wire.PublishMsg){
		"version":        func(p *wire.PublishMsg) { p.Version = "v2" },
		"world over max": func(p *wire.PublishMsg) { p.World, p.Slices = 3, append(p.Slices, []uint32{0, 1}) },
		"no world":       func(p *wire.PublishMsg) { p.World, p.Slices, p.Ranks = 0, nil, nil },
		"slices":         func(p *wire.PublishMsg) { p.Slices = p.Slices[:1] },
		"ranks":          func(p *wire.PublishMsg) { p.Ranks = append(p.Ranks, "c") },
		"unequal":        func(p *wire.PublishMsg) { p.Slices[1] = p.Slices[1][:1] },
		"id":             func(p *wire.PublishMsg) { p.Slices[1][0] = 4 },
		"weight slices":  func(p *wire.PublishMsg) { p.Weights = []wire.F32s{{1, 1}} },
		"weight count":   func(p *wire.PublishMsg) { p.Weights = []wire.F32s{{1, 1}, {1}} },
		"weight zero":    func(p *wire.PublishMsg) { p.Weights = []wire.F32s{{1, 1}, {0, 1}} },
		"weight NaN":     func(p *wire.PublishMsg) { p.Weights = []wire.F32s{{1, 1}, {float32(math.NaN()), 1}} },
		"weight Inf":     func(p *wire.PublishMsg) { p.Weights = []wire.F32s{{float32(math.Inf(1)), 1}, {1, 1}} },
	} {
		p := ok()
		spoil(p)
		if Check(p, "v1", 4, 2) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	reset := &wire.PublishMsg{Dataset: "ds", Version: "v1", Epoch: -1}
	if err := Check(reset, "v1", 4, 2); err != nil {
		t.Errorf("a reset's empty order: %v", err)
	}

	// b's part of the order: rank 1's slice alone, reads of its samples.
	part := func() *wire.PublishMsg {
		p := ok()
		p.Part, p.Slices[0], p.Size, p.Reads = "b", nil, 4, wire.U32s{3, 0}
		return p
	}
	if err := Check(part(), "v1", 4, 2); err != nil {
		t.Fatalf("a sound part: %v", err)
	}
	for name, spoil := range map[string]func(p *wire.PublishMsg){
		"another's slice": func(p *wire.PublishMsg) { p.Slices[0] = wire.U32s{0, 1} },
		"another's weights": func(p *wire.PublishMsg) {
			p.Weights = []wire.F32s{{1, 1}, {1, 1}}
		},
		"size":    func(p *wire.PublishMsg) { p.Size = 3 },
		"read id": func(p *wire.PublishMsg) { p.Reads[1] = 4 },
	} {
		p := part()
		spoil(p)
		if Check(p, "v1", 4, 2) == nil {
			t.Errorf("part, %s: accepted", name)
		}
	}

	// A group's part: b's, with the ranks of a below it; a member below
	// that has no rank adds none.
	group := func() *wire.PublishMsg {
		p := ok()
		p.Part, p.Below, p.Size, p.Reads = "b", []string{"a", "c"}, 4, wire.U32s{3, 0}
		return p
	}
	if err := Check(group(), "v1", 4, 2); err != nil {
		t.Fatalf("a sound group's part: %v", err)
	}
	p := group()
	p.Below = []string{"c"}
	if Check(p, "v1", 4, 2) == nil {
		t.Errorf("a group's part with a slice of a member not below it: accepted")
	}
	for name, spoil := range map[string]func(p *wire.PublishMsg){
		"whole":      func(p *wire.PublishMsg) { p.Part, p.Reads, p.Size = "", nil, 0 },
		"twice":      func(p *wire.PublishMsg) { p.Below = []string{"a", "c", "a"} },
		"its own":    func(p *wire.PublishMsg) { p.Below = []string{"a", "b"} },
		"empty name": func(p *wire.PublishMsg) { p.Below = []string{"a", ""} },
		"too many": func(p *wire.PublishMsg) {
			for i := range wire.MaxBelow {
				p.Below = append(p.Below, fmt.Sprint("m", i))
			}
		},
	} {
		p := group()
		spoil(p)
		if Check(p, "v1", 4, 2) == nil {
			t.Errorf("group's part, %s: accepted", name)
		}
	}
}

// epochs lists the epochs of the orders published so far.
func (h *harness) epochs() []int { return epochsOf(h.pubs) }

// epochsOf lists the epochs of orders.
func epochsOf(pubs []*wire.PublishMsg) []int {
	var out []int
	for _, p := range pubs {
		out = append(out, p.Epoch)
	}
	return out
}

// TestAheadPublishesAnEpochEarly: with Ahead 1, epochs 0 and 1 come out
// together, and epoch e+2 once every rank finished e; a rank that
// finished e+1 before another finished e counts for e+1 then; the
// deadline follows the epoch being trained.
func TestAheadPublishesAnEpochEarly(t *testing.T) {
	h := &harness{}
	cfg := h.config()
	cfg.Ahead = 1
	h.job = New(cfg)
	for r, node := range []string{"a", "b"} {
		if _, err := h.job.Join(r, 2, node, 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	// Epoch 0 comes with the joins, epoch 1 from a draw ahead.
	if got := h.epochs(); !slices.Equal(got, []int{0}) || h.drawOff() != 1 {
		t.Fatalf("with the joins, published %v; want epoch 0, and epoch 1 drawn ahead", got)
	}
	if got := h.epochs(); !slices.Equal(got, []int{0, 1}) || h.last(t).Ahead != 1 {
		t.Fatalf("after the joins, published %v (ahead %d); want 0 and 1", got, h.last(t).Ahead)
	}
	if st := h.job.Status(); st.Latest != 1 || st.Training != 0 || !slices.Equal(st.Pending, []int{0, 1}) {
		t.Fatalf("status %+v", st)
	}
	if err := h.job.Done(0, 2, 0, "a", wire.ResidentSet{}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("done of an unpublished epoch: %v", err)
	}
	// Rank 0 finishes epochs 0 and 1 while rank 1 is still in epoch 0.
	for _, e := range []int{0, 1} {
		if err := h.job.Done(0, e, 0, "a", wire.ResidentSet{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(h.pubs) != 2 {
		t.Fatalf("published %v before rank 1 finished epoch 0", h.epochs())
	}
	h.fire(t, time.Second, time.Minute) // the join wait (spent), the deadline of epoch 0 ...
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("after the deadline of epoch 0, published %v", got)
	}
	// ... and now epoch 1 is trained, which rank 0 had finished already.
	if st := h.job.Status(); st.Training != 1 || !slices.Equal(st.Pending, []int{1}) {
		t.Fatalf("status %+v", st)
	}
	if err := h.job.Done(0, 0, 1, "b", wire.ResidentSet{}); err != nil { // late: ignored
		t.Fatal(err)
	}
	if err := h.job.Done(0, 1, 1, "b", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2}) || h.drawOff() != 1 {
		t.Fatalf("once both finished epoch 1, published %v; want epoch 3 drawn ahead, off the done", got)
	}
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("once both finished epoch 1, published %v", got)
	}
}

// gated is identity's table, whose draws, once the test sets release,
// say so on entered and wait until release is closed.
type gated struct {
	identity
	entered, release chan struct{}
}

func (g *gated) Draw(s *sampling.Sampler, epoch int, resident []uint64) (sampling.Drawn, int, error) {
	if g.release != nil {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.identity.Draw(s, epoch, resident)
}

// TestDrawAheadOffTheLock: an order drawn ahead is drawn off the done
// that made it due and off the job's lock: while it is drawn, a rank's
// done of the next epoch and the job's status are answered, and that done
// counts once the order is published. A reset lets a draw under way go:
// its order is never published.
func TestDrawAheadOffTheLock(t *testing.T) {
	h := &harness{}
	g := &gated{identity: 8}
	cfg := h.config()
	cfg.Ahead, cfg.Scores, cfg.EpochDeadline = 1, g, 0
	published := make(chan int, 8)
	cfg.Publish = func(p *wire.PublishMsg, _ int) {
		h.pubs = append(h.pubs, p)
		published <- p.Epoch
	}
	h.job = New(cfg)
	for r, node := range []string{"a", "b"} {
		if _, err := h.job.Join(r, 2, node, 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	h.drawOff()
	if a, b := <-published, <-published; a != 0 || b != 1 {
		t.Fatalf("published epochs %d and %d first; want 0 and 1", a, b)
	}
	// draw finishes the epoch with rank, which makes an order due, and
	// runs its draw as Config.After would, on a goroutine of its own.
	var wg sync.WaitGroup
	draw := func(epoch, rank int, node string) {
		t.Helper()
		g.entered, g.release = make(chan struct{}), make(chan struct{})
		if err := h.job.Done(0, epoch, rank, node, wire.ResidentSet{}); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(h.timers, func(tm timer) bool { return tm.d == 0 })
		if i < 0 {
			t.Fatalf("no draw ahead after the dones of epoch %d", epoch)
		}
		fn := h.timers[i].fn
		h.timers = slices.Delete(h.timers, i, i+1)
		wg.Go(fn)
		<-g.entered
	}

	if err := h.job.Done(0, 0, 0, "a", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	draw(0, 1, "b") // epoch 2 due
	// While it is drawn: rank 0 finishes epoch 1, the status is read.
	if err := h.job.Done(0, 1, 0, "a", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	if st := h.job.Status(); st.Latest != 1 || st.Training != 0 {
		t.Fatalf("status while epoch 2 is drawn: %+v", st)
	}
	close(g.release)
	wg.Wait()
	if e := <-published; e != 2 {
		t.Fatalf("published epoch %d; want 2", e)
	}
	if st := h.job.Status(); st.Latest != 2 || st.Training != 1 || !slices.Equal(st.Pending, []int{1}) {
		t.Fatalf("status once epoch 2 is published: %+v; want epoch 1 trained, rank 0's done of it counted", st)
	}

	draw(1, 1, "b") // epoch 3 due
	h.job.Reset()
	close(g.release)
	wg.Wait()
	if e := <-published; e != -1 || len(published) != 0 {
		t.Fatalf("published epoch %d (and %d more) with a reset during the draw of epoch 3; want the reset's alone", e, len(published))
	}
	if st := h.job.Status(); st.Latest != -1 || st.World != 0 {
		t.Fatalf("status after the reset: %+v", st)
	}
}

// drawing is a score table of n samples, scored unevenly, whose orders
// the sampler draws; it counts the draws.
type drawing struct {
	table *sampling.Table
	draws int
}

func newDrawing(n int) *drawing {
	tb := sampling.NewTable(n, 0, sampling.ScoreRankLog)
	for id := range n {
		_ = tb.Set(uint32(id), 1+float64(id%5))
	}
	return &drawing{table: tb}
}

func (d *drawing) Draw(s *sampling.Sampler, epoch int, resident []uint64) (sampling.Drawn, int, error) {
	d.draws++
	out, err := s.Draw(epoch, d.table, resident)
	return out, d.table.NumScored(), err
}

// grouping is Scores that hands its orders grouped (GroupedScores),
// each sample's group its id modulo groups, looked up by itself.
type grouping struct {
	Scores
	groups int
}

func (g grouping) DrawGrouped(s *sampling.Sampler, epoch int, resident []uint64, where sampling.Placement) (sampling.Drawn, *sampling.Grouped, int, error) {
	d, scored, err := g.Draw(s, epoch, resident)
	if err != nil {
		return d, nil, scored, err
	}
	own := sampling.Placement{Groups: g.groups, Group: func(id uint32) int { return int(id) % g.groups }, Owners: where.Owners}
	grouped, err := sampling.GroupOrder(d.Order, own)
	return d, &grouped, scored, err
}

// TestSpeculationHidesTheTurn: where the end of the epoch being trained
// may turn the orders ahead (it is epoch 0, or the epoch before waited
// too long), the order after it is drawn meanwhile: if they turn, it is
// published as soon as the ranks finish, with no draw then; if they do
// not, it is let go, and the job publishes the orders of a job that never
// drew it, to the bit. The speculation of epoch 1 counts as a draw: where
// it too took too long, the orders turn at the end of epoch 0.
func TestSpeculationHidesTheTurn(t *testing.T) {
	// run trains epochs of the given lengths, the i-th draw of an order
	// taking draws[i] (the last for the rest), and returns the orders
	// published and the draws made when each epoch's order came due.
	run := func(aheadAt float64, draws []time.Duration, epochs ...time.Duration) (pubs []*wire.PublishMsg, atDue []int) {
		h := &harness{}
		table := newDrawing(64)
		cfg := h.config()
		cfg.Scores, cfg.AheadAt = table, aheadAt
		cfg.NewSampler = func() *sampling.Sampler { return sampling.NewSampler(64, sampling.DefaultConfig()) }
		now := clocked(&cfg, draws...)
		h.job = New(cfg)
		h.joinAB(t)
		h.drawOff() // a speculation of epoch 1, drawn while epoch 0 trains
		for e, d := range epochs {
			*now = now.Add(d)
			before := table.draws
			for r, node := range []string{"a", "b"} {
				if err := h.job.Done(0, e, r, node, wire.ResidentSet{}); err != nil {
					t.Fatal(err)
				}
			}
			atDue = append(atDue, table.draws-before)
			h.drawOff()
		}
		return h.pubs, atDue
	}
	slow, fast := MinAheadDraw+10*time.Millisecond, time.Millisecond

	// Epoch 0's order took 60 of 360 ms, and so did the speculation of
	// epoch 1's: at the end of epoch 0 the orders turn ahead, epoch 1
	// comes without a draw, and epoch 2 is drawn ahead.
	pubs, atDue := run(0.1, []time.Duration{slow}, 300*time.Millisecond)
	if got := epochsOf(pubs); !slices.Equal(got, []int{0, 1, 2}) || pubs[1].Ahead != 0 || pubs[2].Ahead != 1 {
		t.Fatalf("published %v; want epoch 1 as before, epoch 2 ahead", got)
	}
	if !slices.Equal(atDue, []int{0}) {
		t.Fatalf("draws when epoch 1 came due: %v; want none (drawn while epoch 0 was trained)", atDue)
	}

	// The speculation of epoch 1 was quick (epoch 0's draw was slow for
	// one-off reasons): it is let go. Epoch 1's order took 60 of 360 ms
	// too: the orders turn ahead at its end, and epoch 2, drawn while
	// epoch 1 was trained, comes without a draw; epoch 3 is drawn ahead.
	pubs, atDue = run(0.1, []time.Duration{slow, fast, slow}, 300*time.Millisecond, 300*time.Millisecond)
	if got := epochsOf(pubs); !slices.Equal(got, []int{0, 1, 2, 3}) || pubs[2].Ahead != 0 || pubs[3].Ahead != 1 {
		t.Fatalf("published %v; want epoch 2 as before, epoch 3 ahead", got)
	}
	if !slices.Equal(atDue, []int{1, 0}) {
		t.Fatalf("draws when epochs 1 and 2 came due: %v; want 1, then none (drawn while epoch 1 was trained)", atDue)
	}

	// Then epoch 1 is long: the orders do not turn, both speculations
	// are let go, and every order is the one of a job that never
	// speculates (AheadAt 0), the sampler's state after it too.
	draws := []time.Duration{slow, fast, slow}
	pubs, atDue = run(0.1, draws, 300*time.Millisecond, time.Second, time.Second)
	never, _ := run(0, draws, 300*time.Millisecond, time.Second, time.Second)
	if got := epochsOf(pubs); !slices.Equal(got, []int{0, 1, 2, 3}) || pubs[3].Ahead != 0 {
		t.Fatalf("published %v (the last %d ahead); want epochs 0 to 3, none ahead", got, pubs[3].Ahead)
	}
	if !slices.Equal(atDue, []int{1, 1, 1}) {
		t.Fatalf("draws when epochs 1 to 3 came due: %v; want one each", atDue)
	}
	for i := range pubs {
		if !slices.EqualFunc(pubs[i].Slices, never[i].Slices, slices.Equal) || !bytes.Equal(pubs[i].Sampler, never[i].Sampler) {
			t.Fatalf("epoch %d differs from the order of a job that never speculated", pubs[i].Epoch)
		}
	}
}

// TestDeadlineLetsASpeculationGo: an epoch's deadline that passes while
// the next order is drawn as a speculation publishes that epoch at once,
// drawn then, and the next epoch does not wait for the speculation,
// which, once drawn, is let go.
func TestDeadlineLetsASpeculationGo(t *testing.T) {
	h := &harness{}
	cfg := h.config()
	cfg.AheadAt = 0.1
	// Each order takes 60 ms to draw but the speculation of epoch 1,
	// quick: the orders do not turn at the end of epoch 0.
	slow := MinAheadDraw + 10*time.Millisecond
	now := clocked(&cfg, slow, time.Millisecond, slow)
	h.job = New(cfg)
	h.joinAB(t)
	h.drawOff()
	*now = now.Add(300 * time.Millisecond)
	for r, node := range []string{"a", "b"} {
		if err := h.job.Done(0, 0, r, node, wire.ResidentSet{}); err != nil {
			t.Fatal(err)
		}
	}
	// Epoch 1 is published; epoch 2 is being drawn as a speculation when
	// rank a finishes epoch 1 and the deadline passes.
	if err := h.job.Done(0, 1, 0, "a", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	armed := h.timers
	h.timers = nil
	var got []time.Duration
	for _, tm := range armed {
		got = append(got, tm.d)
	}
	// The join wait, epoch 0's deadline, the speculation, epoch 1's
	// deadline.
	if want := []time.Duration{time.Second, time.Minute, 0, time.Minute}; !slices.Equal(got, want) || !slices.Equal(h.epochs(), []int{0, 1}) {
		t.Fatalf("published %v, timers %v; want epochs 0 and 1, timers %v", h.epochs(), got, want)
	}
	armed[3].fn()
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("after the deadline, published %v; want epoch 2", got)
	}
	// Nothing waits for the speculation now: epoch 3 comes when due.
	for r, node := range []string{"a", "b"} {
		if err := h.job.Done(0, 2, r, node, wire.ResidentSet{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("once epoch 2 was finished, published %v; want epoch 3", got)
	}
	armed[2].fn() // the speculation, drawn after all
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Fatalf("once the speculation was drawn, published %v; want nothing more", got)
	}
}

// TestRebuildAhead: a new leader of a job whose orders run ahead takes the
// dones of the epoch before the newest as the epoch being trained, and the
// newest's as early ones; once that epoch is finished it publishes the
// next, and if the old leader died between epoch 0 and epoch 1, it
// publishes epoch 1 at once.
func TestRebuildAhead(t *testing.T) {
	for _, ahead := range []int{1, 0} {
		// With Ahead 0 the old leader's orders ran ahead by AheadAt: the
		// new one goes on as they did.
		t.Run(fmt.Sprintf("Ahead %d", ahead), func(t *testing.T) { rebuildAhead(t, ahead) })
	}
}

func rebuildAhead(t *testing.T, ahead int) {
	h := &harness{}
	cfg := h.config()
	cfg.Ahead, cfg.AheadAt = ahead, 0.1
	d, err := Draw(sampling.NewSampler(8, sampling.DefaultConfig()), identity(8), 0, []string{"a", "b"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	newest := &wire.PublishMsg{Dataset: "ds", Epoch: 3, Term: 5, Ahead: 1, World: 2, Sampler: d.State, Ranks: []string{"a", "b"}}
	own := wire.JobState{Dataset: "ds", Epoch: 3, Ranks: []wire.RankWorld{{Rank: 0, World: 2}}, DonePrev: []int{0}, Done: []int{0}}
	peers := States{"b": {Jobs: []wire.JobState{{Dataset: "ds", Epoch: 3, Ranks: []wire.RankWorld{{Rank: 1, World: 2}}}}}}
	j, err := Rebuild(cfg, newest, "a", own, peers)
	if err != nil {
		t.Fatal(err)
	}
	h.job = j
	if st := j.Status(); st.Latest != 3 || st.Training != 2 || !slices.Equal(st.Pending, []int{1}) {
		t.Fatalf("rebuilt status %+v", st)
	}
	if err := j.Resume(); err != nil || len(h.pubs) != 0 {
		t.Fatalf("resume with rank 1 in epoch 2: %v, published %v", err, h.epochs())
	}
	if err := j.Done(0, 2, 1, "b", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	h.drawOff()
	// Epoch 4 for epoch 2's dones; rank 0 had finished epoch 3, rank 1 not.
	if got := h.epochs(); !slices.Equal(got, []int{4}) || h.last(t).Ahead != 1 {
		t.Fatalf("published %v (the last %d ahead), want epoch 4 ahead", got, h.last(t).Ahead)
	}
	if st := j.Status(); st.Training != 3 || !slices.Equal(st.Pending, []int{1}) {
		t.Fatalf("status after epoch 4: %+v", st)
	}

	// The old leader published epoch 0 and died before epoch 1.
	h.pubs = nil
	first := &wire.PublishMsg{Dataset: "ds", Epoch: 0, Term: 5, Ahead: 1, World: 2, Sampler: d.State, Ranks: []string{"a", "b"}}
	j, err = Rebuild(cfg, first, "a", wire.JobState{Dataset: "ds", Epoch: 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Retired before it resumed (its node gave way to another leader), it
	// publishes nothing.
	j.Retire()
	if err := j.Resume(); err != nil || len(h.pubs) != 0 {
		t.Fatalf("a retired job resumed: %v, published %v", err, h.epochs())
	}
	j, err = Rebuild(cfg, first, "a", wire.JobState{Dataset: "ds", Epoch: 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Resume(); err != nil || !slices.Equal(h.epochs(), []int{1}) {
		t.Fatalf("resume after epoch 0 alone: %v, published %v", err, h.epochs())
	}
}

// TestNoteResident: a node without ranks says what it caches; the next
// draw prefers it; a note of an older generation is ignored and an
// oversize bitmap refused.
func TestNoteResident(t *testing.T) {
	h := &harness{}
	table := &weighted{n: 80}
	cfg := h.config()
	cfg.Scores = table
	cfg.NewSampler = func() *sampling.Sampler { return sampling.NewSampler(80, sampling.DefaultConfig()) }
	h.job = New(cfg)
	if err := h.job.NoteResident(0, "c", wire.ResidentSet{Bits: make([]byte, 11)}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("an oversize bitmap: %v", err)
	}
	if err := h.job.NoteResident(0, "c", wire.ResidentSet{Sparse: []byte{2}}); err != nil {
		t.Fatal(err)
	}
	if err := h.job.NoteResident(7, "d", wire.ResidentSet{Bits: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	if got := h.job.Status().Resident; !slices.Equal(got, []string{"c"}) {
		t.Fatalf("resident nodes %v, want [c]", got)
	}
	if _, err := h.job.Join(0, 1, "a", 0, -1); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{1 << 2, 0}; !slices.Equal(table.resident, want) {
		t.Errorf("epoch 0 preferred %x, want %x", table.resident, want)
	}
}

func TestHoldWaitsForReleaseOrTheWait(t *testing.T) {
	h := &harness{}
	cfg := h.config()
	cfg.EpochDeadline = 0
	hold := 3 * time.Second // what Config.Hold answers; 0 lets go
	var asked []int
	cfg.Hold = func(epoch int) time.Duration {
		asked = append(asked, epoch)
		return hold
	}
	now := time.Unix(1, 0)
	cfg.Now = func() time.Time { return now }
	// held checks the count of held epochs and their wait in all.
	held := func(holds int, waited time.Duration) {
		t.Helper()
		if st := h.job.Status(); st.Holds != holds || st.HeldFor != waited {
			t.Fatalf("%d epochs held for %v; want %d for %v", st.Holds, st.HeldFor, holds, waited)
		}
	}
	h.job = New(cfg)
	if _, err := h.job.Join(0, 1, "a", 0, -1); err != nil || len(h.pubs) != 1 {
		t.Fatalf("join: %v, %d published; want epoch 0 without asking Hold", err, len(h.pubs))
	}
	if len(asked) != 0 {
		t.Fatalf("Hold asked for epochs %v before any epoch was done", asked)
	}

	// Epoch 1 is due and held; a repeated done and a release while Hold
	// still holds publish nothing.
	for range 2 {
		if err := h.job.Done(0, 0, 0, "a", wire.ResidentSet{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.job.Release(); err != nil {
		t.Fatal(err)
	}
	if len(h.pubs) != 1 || !slices.Equal(asked, []int{1, 1}) || len(h.timers) != 1 {
		t.Fatalf("held epoch 1: %d published, Hold asked for %v, %d timers; want 1, [1 1], one timer", len(h.pubs), asked, len(h.timers))
	}
	held(1, 0)
	// Released once Hold lets go; the timer then finds nothing to do.
	hold = 0
	now = now.Add(2 * time.Second)
	if err := h.job.Release(); err != nil {
		t.Fatal(err)
	}
	held(1, 2*time.Second)
	if p := h.last(t); p.Epoch != 1 || len(h.pubs) != 2 {
		t.Fatalf("after the release: %d published, newest epoch %d; want epoch 1", len(h.pubs), p.Epoch)
	}
	h.fire(t, 3*time.Second)
	if len(h.pubs) != 2 {
		t.Fatalf("the hold's timer published again: %d orders", len(h.pubs))
	}

	// Epoch 2 is held, and the wait passing publishes it though Hold
	// would still hold it.
	hold = time.Second
	if err := h.job.Done(0, 1, 0, "a", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	if len(h.pubs) != 2 {
		t.Fatalf("epoch 2 published though held")
	}
	now = now.Add(time.Second)
	h.fire(t, time.Second)
	held(2, 3*time.Second)
	if p := h.last(t); p.Epoch != 2 || len(h.pubs) != 3 {
		t.Fatalf("after the wait: newest epoch %d of %d orders; want epoch 2", p.Epoch, len(h.pubs))
	}
	if err := h.job.Release(); err != nil || len(h.pubs) != 3 {
		t.Fatalf("release with nothing held: %v, %d orders", err, len(h.pubs))
	}

	// A reset drops a held epoch: its timer publishes nothing.
	if err := h.job.Done(0, 2, 0, "a", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second / 2)
	h.job.Reset()
	h.fire(t, time.Second)
	if p := h.last(t); p.Epoch != -1 {
		t.Fatalf("after a reset the held epoch was published: newest epoch %d", p.Epoch)
	}
	held(3, 3500*time.Millisecond)
}

// TestOrdersAheadAreNotHeld: with Ahead, the epoch due when the ranks
// finish one is drawn at once: they read the next already, and holding
// the draw would hold nothing they wait for.
func TestOrdersAheadAreNotHeld(t *testing.T) {
	h := &harness{}
	cfg := h.config()
	cfg.Ahead, cfg.EpochDeadline = 1, 0
	asked := 0
	cfg.Hold = func(int) time.Duration { asked++; return time.Hour }
	h.job = New(cfg)
	if _, err := h.job.Join(0, 1, "a", 0, -1); err != nil {
		t.Fatal(err)
	}
	h.drawOff()
	if err := h.job.Done(0, 0, 0, "a", wire.ResidentSet{}); err != nil {
		t.Fatal(err)
	}
	h.drawOff()
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2}) || asked != 0 || len(h.timers) != 0 {
		t.Fatalf("published %v, Hold asked %d times, %d timers; want epochs 0-2 without asking", got, asked, len(h.timers))
	}
}

// TestAheadAtTurnsOrdersAheadOn: with AheadAt, the job runs its orders an
// epoch ahead once the orders of AheadAfter epochs in a row took the
// leader more than that share of the time from their drawing to their
// epoch's end, and at least MinAheadDraw: the next order is then drawn as
// before, the one after it at once, and from then on each order an epoch
// early.
func TestAheadAtTurnsOrdersAheadOn(t *testing.T) {
	h := &harness{}
	cfg := h.config()
	cfg.AheadAt = 0.1
	// Epoch 0's order takes 49 ms to draw, under the floor (so no
	// speculation of epoch 1 is drawn): never ahead, however short the
	// epoch. Each order after takes 60 ms.
	now := clocked(&cfg, MinAheadDraw-time.Millisecond, MinAheadDraw+10*time.Millisecond)
	h.job = New(cfg)
	train := func(epoch int, d time.Duration) {
		t.Helper()
		*now = now.Add(d)
		for r, node := range []string{"a", "b"} {
			if err := h.job.Done(0, epoch, r, node, wire.ResidentSet{}); err != nil {
				t.Fatal(err)
			}
		}
		h.drawOff()
	}
	for r, node := range []string{"a", "b"} {
		if _, err := h.job.Join(r, 2, node, 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	train(0, time.Millisecond)     // epoch 0's order took 49 of 50 ms, under the floor
	train(1, 300*time.Millisecond) // epoch 1's took 60 of 360 ms: 17%, once
	train(2, time.Second)          // epoch 2's took 60 of 1,060 ms: 6%
	train(3, 300*time.Millisecond) // 17% again, once in a row
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2, 3, 4}) || h.last(t).Ahead != 0 {
		t.Fatalf("published %v (the last %d ahead); want epochs 0 to 4, none ahead", got, h.last(t).Ahead)
	}
	train(4, 300*time.Millisecond) // twice in a row
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6}) || h.pubs[5].Ahead != 0 || h.pubs[6].Ahead != 1 {
		t.Fatalf("published %v; want epoch 5 as before and epoch 6 ahead", got)
	}
	if st := h.job.Status(); st.Latest != 6 || st.Training != 5 || !slices.Equal(st.Pending, []int{0, 1}) {
		t.Fatalf("status once ahead %+v", st)
	}
	train(5, time.Hour) // orders stay ahead, however long the epochs now are
	if got := h.epochs(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7}) || h.last(t).Ahead != 1 {
		t.Fatalf("published %v (the last %d ahead); want epoch 7 ahead", got, h.last(t).Ahead)
	}
	// A new generation decides afresh: its epoch 0 comes alone.
	h.job.Reset()
	h.pubs = nil
	for r, node := range []string{"a", "b"} {
		if _, err := h.job.Join(r, 2, node, 1, -1); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.epochs(); !slices.Equal(got, []int{0}) || h.last(t).Ahead != 0 || h.last(t).Gen != 1 {
		t.Fatalf("after a reset, published %v (the last %d ahead, generation %d); want epoch 0 of generation 1 alone", got, h.last(t).Ahead, h.last(t).Gen)
	}
}

// TestEpochZeroDrawnAsRanksJoin: epoch 0 of a dataset of DrawFirstAt
// samples or more is drawn once the first rank joins, off the lock; the
// last rank's join (or the join wait) then splits it among the ranks
// with no draw, or, while it is being drawn, has it published once
// drawn. The orders are those of a job that drew epoch 0 when due, to the
// bit, split by the owners as they stand at the last join though each
// sample's group was looked up with the draw; a reset lets the draw go; a
// world of one draws at its join.
func TestEpochZeroDrawnAsRanksJoin(t *testing.T) {
	type step int
	const (
		joinA  step = iota // rank 0 joins, on node a
		joinB              // rank 1 joins, on node b
		drawn              // the draws off the lock run
		waited             // the join wait passes
		done0              // both ranks finish epoch 0
	)
	// run takes the steps with a world of 2 and returns the orders
	// published and the draws made by each step. The samples of even
	// groups are on node a, of odd ones on b, until the second rank
	// joins: then the other way round.
	var looked int // samples whose group the job looked up
	// handGroups, where not 0, has the table hand its orders grouped in
	// as many groups (GroupedScores), as a mesh hands its datasets'
	// epoch 0.
	handGroups := 0
	run := func(drawFirstAt int, steps ...step) (pubs []*wire.PublishMsg, draws []int) {
		h := &harness{}
		table := newDrawing(64)
		cfg := h.config()
		cfg.Scores, cfg.DrawFirstAt = table, drawFirstAt
		moved := false
		cfg.Placement = func() sampling.Placement {
			moved := moved // as the ring stands now
			return sampling.Placement{
				Groups: 4,
				Group:  func(id uint32) int { looked++; return int(id % 4) },
				Owners: func(g int) []string {
					if (g%2 == 0) != moved {
						return []string{"a"}
					}
					return []string{"b"}
				},
			}
		}
		cfg.NewSampler = func() *sampling.Sampler { return sampling.NewSampler(64, sampling.DefaultConfig()) }
		clocked(&cfg, MinAheadDraw+10*time.Millisecond)
		if handGroups != 0 {
			cfg.Scores = grouping{cfg.Scores, handGroups}
		}
		h.job = New(cfg)
		for _, st := range steps {
			before := table.draws
			switch st {
			case joinA, joinB:
				moved = st == joinB
				if _, err := h.job.Join(int(st), 2, []string{"a", "b"}[st], 0, -1); err != nil {
					t.Fatal(err)
				}
			case drawn:
				h.drawOff()
			case waited:
				i := slices.IndexFunc(h.timers, func(tm timer) bool { return tm.d == time.Second })
				fn := h.timers[i].fn
				h.timers = slices.Delete(h.timers, i, i+1)
				fn()
			case done0:
				for r, node := range []string{"a", "b"} {
					if err := h.job.Done(0, 0, r, node, wire.ResidentSet{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			draws = append(draws, table.draws-before)
		}
		return h.pubs, draws
	}
	same := func(name string, got, want []*wire.PublishMsg) {
		t.Helper()
		if len(got) != len(want) || len(got) == 0 || got[0].Epoch != 0 {
			t.Fatalf("%s: published %v, want %v", name, epochsOf(got), epochsOf(want))
		}
		for i := range got {
			if !slices.Equal(got[i].Ranks, want[i].Ranks) || !slices.EqualFunc(got[i].Slices, want[i].Slices, slices.Equal) ||
				!slices.EqualFunc(got[i].Weights, want[i].Weights, slices.Equal) || !bytes.Equal(got[i].Sampler, want[i].Sampler) {
				t.Fatalf("%s: epoch %d differs from a job's that draws epoch 0 when due", name, got[i].Epoch)
			}
		}
	}

	// Drawn between the joins: the last join publishes it, with no draw;
	// the job goes on from the sampler that drew it.
	looked = 0
	if run(1, joinA, drawn); looked != 64 {
		t.Fatalf("the draw looked up %d samples' groups, want all 64", looked)
	}
	pubs, draws := run(1, joinA, drawn, joinB, done0)
	whenDue, dueDraws := run(-1, joinA, drawn, joinB, done0)
	same("drawn between the joins", pubs, whenDue)
	looked = 0
	if pubs, _ := run(1, joinA, drawn, joinB); len(pubs) != 1 || looked != 64 {
		t.Fatalf("looked up %d samples' groups to draw and publish epoch 0; want the 64 of the draw alone", looked)
	}
	if !slices.Equal(draws, []int{0, 1, 0, 1}) || !slices.Equal(dueDraws, []int{0, 0, 1, 1}) {
		t.Fatalf("draws by step %v (when due: %v); want epoch 0's off the lock alone", draws, dueDraws)
	}
	whenDue, _ = run(-1, joinA, drawn, joinB)
	// The last rank joins while it is drawn: published once drawn.
	pubs, _ = run(1, joinA, joinB)
	if len(pubs) != 0 {
		t.Fatalf("published %v before epoch 0 was drawn", epochsOf(pubs))
	}
	pubs, _ = run(1, joinA, joinB, drawn)
	same("the last join during the draw", pubs, whenDue)
	// The join wait passes while it is drawn: published once drawn, for
	// the ranks that joined.
	pubs, _ = run(1, joinA, waited, drawn)
	whenDue, _ = run(-1, joinA, waited)
	same("the join wait during the draw", pubs, whenDue)
	if pubs[0].Ranks[1] != "" {
		t.Fatalf("ranks %q; want rank 1 not joined", pubs[0].Ranks)
	}
	// A dataset under DrawFirstAt draws epoch 0 when due.
	if _, draws = run(65, joinA, drawn, joinB); !slices.Equal(draws, []int{0, 0, 1}) {
		t.Fatalf("under DrawFirstAt, draws by step %v; want epoch 0 drawn at the last join", draws)
	}
	// A table that hands its orders grouped: the job looks no group up,
	// and publishes the same orders; grouped otherwise (in groups that
	// do not fit the placement), the job looks them up itself, for
	// epochs 0 and 1.
	whenDue, _ = run(-1, joinA, drawn, joinB, done0)
	for _, tc := range []struct{ groups, looked int }{{4, 0}, {5, 128}} {
		handGroups, looked = tc.groups, 0
		pubs, _ = run(1, joinA, drawn, joinB, done0)
		same(fmt.Sprintf("handed in %d groups", tc.groups), pubs, whenDue)
		if looked != tc.looked {
			t.Fatalf("handed in %d groups, the job looked up %d samples' groups; want %d", tc.groups, looked, tc.looked)
		}
	}
	handGroups = 0

	// Epoch 0's draw took 60 ms: with AheadAt, the speculation of epoch 1
	// follows its publication as it does when drawn at once.
	h := &harness{}
	cfg := h.config()
	cfg.DrawFirstAt, cfg.AheadAt = 1, 0.1
	clocked(&cfg, MinAheadDraw+10*time.Millisecond)
	h.job = New(cfg)
	if _, err := h.job.Join(0, 2, "a", 0, -1); err != nil {
		t.Fatal(err)
	}
	h.drawOff()
	if _, err := h.job.Join(1, 2, "b", 0, -1); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.epochs(), []int{0}) || !slices.ContainsFunc(h.timers, func(tm timer) bool { return tm.d == 0 }) {
		t.Fatalf("published %v, timers %d; want epoch 0 and the speculation of epoch 1 armed", h.epochs(), len(h.timers))
	}

	// A reset while it is drawn lets it go; a world of one draws at its
	// join.
	h = &harness{}
	cfg = h.config()
	cfg.DrawFirstAt = 1
	h.job = New(cfg)
	if _, err := h.job.Join(0, 2, "a", 0, -1); err != nil {
		t.Fatal(err)
	}
	h.job.Reset()
	if _, err := h.job.Join(0, 1, "a", 1, -1); err != nil {
		t.Fatal(err)
	}
	if got := h.epochs(); !slices.Equal(got, []int{-1, 0}) || h.last(t).Gen != 1 || h.last(t).World != 1 {
		t.Fatalf("after a reset, a world of one published %v; want the reset, then its epoch 0 at its join", got)
	}
	h.drawOff()
	if got := h.epochs(); !slices.Equal(got, []int{-1, 0}) {
		t.Fatalf("the draw of the generation before, once drawn, published %v; want nothing more", got)
	}
}

// TestCheckScans: the scans Check makes of ids and weights find the
// first value that fails, wherever it sits in a list (the four lanes and
// the tail), as a plain test of each value does.
func TestCheckScans(t *testing.T) {
	const samples = 1000
	for n := range 11 {
		for at := range n {
			for _, id := range []uint32{samples, samples + 1, math.MaxUint32} {
				ids := make([]uint32, n)
				for i := range ids {
					ids[i] = uint32(samples - 1 - i)
				}
				ids[at] = id
				if got := firstOutOfRange(ids, samples); got != at {
					t.Errorf("%d ids, %d at %d: found at %d", n, id, at, got)
				}
				ids[at] = samples - 1
				if got := firstOutOfRange(ids, samples); got != -1 {
					t.Errorf("%d ids in range: found %d at %d", n, ids[max(got, 0)], got)
				}
			}
			bad := []float32{0, float32(math.Copysign(0, -1)), -1, -math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.Float32frombits(0xffffffff)}
			for _, v := range bad {
				w := make([]float32, n)
				for i := range w {
					w[i] = []float32{1, math.SmallestNonzeroFloat32, math.MaxFloat32, 0.5}[i%4]
				}
				if got := firstNotPositive(w); got != -1 {
					t.Errorf("%d weights, all positive: found %v at %d", n, w[max(got, 0)], got)
				}
				w[at] = v
				if got := firstNotPositive(w); got != at {
					t.Errorf("%d weights, %v at %d: found at %d", n, v, at, got)
				}
			}
		}
	}
	if got := firstOutOfRange([]uint32{math.MaxUint32}, math.MaxUint32+1); got != -1 {
		t.Errorf("an id below a count past 2^32: found at %d", got)
	}
	if firstOutOfRange(nil, 0) != -1 || firstNotPositive(nil) != -1 {
		t.Errorf("empty lists: a value found")
	}
}
