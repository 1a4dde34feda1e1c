package hedge

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

func TestDelayLearnsTheQuantile(t *testing.T) {
	var d Delay
	if got := d.Get(); got != DefaultMax {
		t.Fatalf("before any answer: %v, want DefaultMax %v", got, DefaultMax)
	}
	for i := 1; i < learnEvery; i++ {
		d.Observe(time.Duration(i) * time.Millisecond)
	}
	if got := d.Get(); got != DefaultMax {
		t.Fatalf("after %d answers: %v, want DefaultMax until %d", learnEvery-1, got, learnEvery)
	}
	// 100 answers of 1..100 ms in all (the quantile is worked out at 32,
	// 64 and 96 answers): the 99th percentile of the first 96 is 96 ms.
	for i := learnEvery; i <= 100; i++ {
		d.Observe(time.Duration(i) * time.Millisecond)
	}
	if got, want := d.Get(), 96*time.Millisecond; got != want {
		t.Fatalf("p99 of 1..96 ms: %v, want %v", got, want)
	}
}

func TestDelayForgetsOldAnswers(t *testing.T) {
	d := Delay{Quantile: 0.5}
	for range window {
		d.Observe(400 * time.Millisecond)
	}
	if got := d.Get(); got != 400*time.Millisecond {
		t.Fatalf("after slow answers: %v", got)
	}
	for range window {
		d.Observe(20 * time.Millisecond)
	}
	if got := d.Get(); got != 20*time.Millisecond {
		t.Fatalf("after a window of fast answers: %v, want 20ms", got)
	}
}

func TestDelayBounds(t *testing.T) {
	fast := Delay{}
	slow := Delay{Max: time.Second}
	for range learnEvery {
		fast.Observe(time.Microsecond)
		slow.Observe(time.Minute)
	}
	if got := fast.Get(); got != DefaultMin {
		t.Errorf("fast answers: %v, want DefaultMin %v", got, DefaultMin)
	}
	if got := slow.Get(); got != time.Second {
		t.Errorf("slow answers: %v, want Max 1s", got)
	}
	fixed := Delay{Fixed: 3 * time.Millisecond}
	never := Delay{Fixed: -1}
	for range learnEvery {
		fixed.Observe(time.Second)
		never.Observe(time.Second)
	}
	if got := fixed.Get(); got != 3*time.Millisecond {
		t.Errorf("Fixed 3ms: %v", got)
	}
	if got := never.Get(); got >= 0 {
		t.Errorf("Fixed negative: %v, want a negative delay", got)
	}
}

// try is a controllable try: it says when it starts, and answers what is
// sent on answer, or ends with its context.
type try struct {
	started   chan struct{}
	answer    chan error
	cancelled chan struct{}
}

func newTry() *try {
	return &try{started: make(chan struct{}), answer: make(chan error, 1), cancelled: make(chan struct{})}
}

func (tr *try) fn(v int) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		close(tr.started)
		select {
		case err := <-tr.answer:
			if err != nil {
				return 0, err
			}
			return v, nil
		case <-ctx.Done():
			close(tr.cancelled)
			return 0, ctx.Err()
		}
	}
}

func isStarted(tr *try) bool {
	select {
	case <-tr.started:
		return true
	default:
		return false
	}
}

type result struct {
	v   int
	o   Outcome
	err error
}

func runFirst(ctx context.Context, delay time.Duration, tries ...*try) chan result {
	fns := make([]func(context.Context) (int, error), len(tries))
	for i, tr := range tries {
		fns[i] = tr.fn(10 + i)
	}
	out := make(chan result, 1)
	go func() {
		v, o, err := First(ctx, nil, delay, fns...)
		out <- result{v, o, err}
	}()
	return out
}

// wantAnswer fails t unless First answered v with outcome o.
func wantAnswer(t *testing.T, r result, v int, o Outcome) {
	t.Helper()
	if r.err != nil || r.v != v || r.o != o {
		t.Fatalf("First = %d, %+v, %v; want %d, %+v, nil", r.v, r.o, r.err, v, o)
	}
}

func TestFirstAnswerWithoutHedging(t *testing.T) {
	a, b := newTry(), newTry()
	out := runFirst(context.Background(), time.Hour, a, b)
	<-a.started
	a.answer <- nil
	wantAnswer(t, <-out, 10, Outcome{0, 0})
	if isStarted(b) {
		t.Fatal("the second try started although the first answered within the delay")
	}
}

func TestFirstMovesOnAtAFailure(t *testing.T) {
	a, b := newTry(), newTry()
	out := runFirst(context.Background(), time.Hour, a, b)
	<-a.started
	a.answer <- errors.New("not found")
	<-b.started // at once, not after the hour
	b.answer <- nil
	wantAnswer(t, <-out, 11, Outcome{1, 0})
}

func TestFirstHedgesAStalledTry(t *testing.T) {
	a, b := newTry(), newTry()
	out := runFirst(context.Background(), time.Millisecond, a, b)
	<-a.started
	<-b.started // a never answers: b starts after the delay
	b.answer <- nil
	wantAnswer(t, <-out, 11, Outcome{1, 1})
	<-a.cancelled // the stalled try is told to stop
}

func TestFirstKeepsTheEarlierTryRunning(t *testing.T) {
	// A hedge does not give up on the try it hedges: if the first answers
	// while the second stalls, the first's answer is taken.
	a, b := newTry(), newTry()
	out := runFirst(context.Background(), time.Millisecond, a, b)
	<-b.started
	a.answer <- nil
	wantAnswer(t, <-out, 10, Outcome{0, 1})
	<-b.cancelled
}

func TestFirstWithoutHedging(t *testing.T) {
	a, b := newTry(), newTry()
	ctx, cancel := context.WithCancel(context.Background())
	out := runFirst(ctx, -1, a, b)
	<-a.started
	// A negative delay starts b only when a fails. Look for a bounded
	// while that it does not start, then end the call.
	select {
	case <-b.started:
		t.Fatal("a try started with a negative delay while the one before ran")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if r := <-out; !errors.Is(r.err, context.Canceled) || r.o != (Outcome{-1, 0}) {
		t.Fatalf("First after its context ended = %d, %+v, %v; want no try, context.Canceled", r.v, r.o, r.err)
	}
}

func TestFirstAllFail(t *testing.T) {
	a, b := newTry(), newTry()
	out := runFirst(context.Background(), time.Hour, a, b)
	a.answer <- errors.New("first")
	last := errors.New("last")
	b.answer <- last
	if r := <-out; !errors.Is(r.err, last) || r.o != (Outcome{-1, 0}) {
		t.Fatalf("First = %d, %+v, %v; want no try and the last error", r.v, r.o, r.err)
	}
	// The error of the last try, even when an earlier try fails after it.
	// The two fail at once, so either may arrive first: a few rounds see
	// both orders.
	for range 20 {
		a, b := newTry(), newTry()
		out := runFirst(context.Background(), time.Millisecond, a, b)
		<-b.started
		a.answer <- errors.New("first")
		b.answer <- last
		if r := <-out; !errors.Is(r.err, last) || r.o.Index != -1 {
			t.Fatalf("First = %d, %+v, %v; want no try and the last try's error", r.v, r.o, r.err)
		}
	}
	one := errors.New("one")
	if _, o, err := First(context.Background(), nil, time.Hour, func(context.Context) (int, error) { return 0, one }); !errors.Is(err, one) || o.Index != -1 {
		t.Fatalf("First of one failing try = %+v, %v; want index -1 and its error", o, err)
	}
	if v, o, err := First(context.Background(), nil, time.Hour, func(context.Context) (int, error) { return 7, nil }); err != nil || v != 7 || o.Index != 0 {
		t.Fatalf("First of one try = %d, %+v, %v; want 7, index 0, nil", v, o, err)
	}
	if _, o, err := First[int](context.Background(), nil, time.Hour); err != nil || o.Index != -1 {
		t.Fatalf("First with no tries = %+v, %v; want index -1, nil", o, err)
	}
}

// TestFirstStartsTriesWithSpawn: where First is given a spawn, every try
// it starts goes through it (a single try runs on the caller's goroutine).
func TestFirstStartsTriesWithSpawn(t *testing.T) {
	var spawned atomic.Int64
	spawn := func(run func()) { spawned.Add(1); go run() }
	fail := func(context.Context) (int, error) { return 0, errors.New("not found") }
	v, o, err := First(context.Background(), spawn, time.Hour, fail, fail, func(context.Context) (int, error) { return 3, nil })
	if err != nil || v != 3 || o.Index != 2 {
		t.Fatalf("First = %d, %+v, %v; want 3 from the third try", v, o, err)
	}
	if n := spawned.Load(); n != 3 {
		t.Fatalf("%d tries went through spawn, want 3", n)
	}
	spawned.Store(0)
	if v, _, err := First(context.Background(), spawn, time.Hour, func(context.Context) (int, error) { return 4, nil }); err != nil || v != 4 {
		t.Fatalf("First of one try = %d, %v", v, err)
	}
	if n := spawned.Load(); n != 0 {
		t.Fatalf("a single try went through spawn %d times", n)
	}
}

// BenchmarkFirst is what First adds to a read that its first try answers:
// the try called directly against the same try through First.
func BenchmarkFirst(b *testing.B) {
	try := func(context.Context) (int, error) { return 1, nil }
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if v, _ := try(ctx); v != 1 {
				b.Fatal(v)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if v, _, _ := First(ctx, nil, time.Second, try, try); v != 1 {
				b.Fatal(v)
			}
		}
	})
}

// TestNthIsTheSortedElement checks nth against a sort, for every k, on
// arrays of many shapes: random, with few distinct values, sorted,
// reversed, a sorted ring rotated (the window's order as latencies
// climb), and all equal.
func TestNthIsTheSortedElement(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := map[string]func(n int) []time.Duration{
		"random": func(n int) []time.Duration {
			a := make([]time.Duration, n)
			for i := range a {
				a[i] = time.Duration(rng.Int64N(1 << 30))
			}
			return a
		},
		"few values": func(n int) []time.Duration {
			a := make([]time.Duration, n)
			for i := range a {
				a[i] = time.Duration(rng.IntN(3))
			}
			return a
		},
		"sorted":   func(n int) []time.Duration { return ramp(n, 1) },
		"reversed": func(n int) []time.Duration { return ramp(n, -1) },
		"rotated": func(n int) []time.Duration {
			a := ramp(n, 1)
			r := rng.IntN(n)
			return append(a[r:], a[:r]...)
		},
		"equal": func(n int) []time.Duration { return make([]time.Duration, n) },
	}
	for name, shape := range shapes {
		for _, n := range []int{1, 2, 3, 5, 31, 32, 100, 512} {
			a := shape(n)
			sorted := slices.Sorted(slices.Values(a))
			for k := range n {
				b := slices.Clone(a)
				if got := nth(b, k); got != sorted[k] {
					t.Fatalf("%s, %d elements: nth(%d) = %d, want %d", name, n, k, got, sorted[k])
				}
				if !slices.Equal(slices.Sorted(slices.Values(b)), sorted) {
					t.Fatalf("%s, %d elements: nth(%d) changed the elements, not only their order", name, n, k)
				}
			}
		}
	}
}

func ramp(n, step int) []time.Duration {
	a := make([]time.Duration, n)
	for i := range a {
		a[i] = time.Duration(1000 + step*i)
	}
	return a
}

// BenchmarkDelayObserve is one answer's latency recorded, the quantile
// worked out again every learnEvery of them.
func BenchmarkDelayObserve(b *testing.B) {
	var d Delay
	rng := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 4096)
	for i := range lat {
		lat[i] = time.Duration(rng.Int64N(int64(50 * time.Millisecond)))
	}
	for i := 0; b.Loop(); i++ {
		d.Observe(lat[i%len(lat)])
	}
}
