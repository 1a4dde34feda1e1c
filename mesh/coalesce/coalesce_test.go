package coalesce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// gated is a Do that records each batch it is asked for and answers each
// item q with 2q, once a batch may go: the first batch waits until hold
// is closed (or its ctx ends), the others go at once.
type gated struct {
	hold    chan struct{}
	mu      sync.Mutex
	batches [][]int
	err     error
}

func newGated() *gated { return &gated{hold: make(chan struct{})} }

func (d *gated) do(ctx context.Context, key string, qs []int) ([]int, error) {
	d.mu.Lock()
	first := len(d.batches) == 0
	d.batches = append(d.batches, slices.Clone(qs))
	err := d.err
	d.mu.Unlock()
	if first {
		select {
		case <-d.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	rs := make([]int, len(qs))
	for i, q := range qs {
		rs[i] = 2 * q
	}
	return rs, nil
}

func (d *gated) seen() [][]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.batches)
}

// queueBehind starts a call of q0 that holds key's lane (d's first batch
// waits for d.hold), then a call of each of qs from goroutines of their
// own, one after another, each queued before the next starts; it
// returns the results, filled in once done is closed.
func queueBehind(t *testing.T, g *Group[string, int, int], ctx context.Context, q0 int, qs []int) (rs []int, errs []error, done chan struct{}) {
	t.Helper()
	rs, errs, done = make([]int, len(qs)+1), make([]error, len(qs)+1), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { rs[0], errs[0] = g.Call(context.Background(), "k", q0) })
	testsupport.WaitFor(t, 10*time.Second, "the first call is in flight", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.lanes["k"] != nil
	})
	for i, q := range qs {
		wg.Go(func() { rs[i+1], errs[i+1] = g.Call(ctx, "k", q) })
		testsupport.WaitFor(t, 10*time.Second, fmt.Sprintf("call %d waits", i+1), func() bool { return g.Waiting("k") == i+1 })
	}
	go func() { wg.Wait(); close(done) }()
	return rs, errs, done
}

// TestIdleCallGoesAloneAtOnce: with nothing in flight to a key a call is
// sent alone, on the caller's goroutine under its context.
func TestIdleCallGoesAloneAtOnce(t *testing.T) {
	type ctxKey struct{}
	var got any
	g := &Group[string, int, int]{Do: func(ctx context.Context, _ string, qs []int) ([]int, error) {
		got = ctx.Value(ctxKey{}) // no lock: the same goroutine, or the test fails under -race
		return []int{qs[0] + 1}, nil
	}}
	for i := range 3 {
		r, err := g.Call(context.WithValue(context.Background(), ctxKey{}, i), "k", 10*i)
		if err != nil || r != 10*i+1 || got != i {
			t.Fatalf("call %d: %d, %v, under context %v", i, r, err, got)
		}
	}
	if len(g.lanes) != 0 {
		t.Fatalf("%d lanes left", len(g.lanes))
	}
}

// TestCallsThatWaitGoTogether: calls made while one is in flight go in
// one batch once it returns, in the order they came, and each gets its
// own result; another key is not held up.
func TestCallsThatWaitGoTogether(t *testing.T) {
	d := newGated()
	g := &Group[string, int, int]{Do: d.do}
	rs, errs, done := queueBehind(t, g, context.Background(), 1, []int{2, 3, 4, 5})
	// Another key goes while "k" is held (the gate holds the first batch
	// only: this one is the second).
	if r, err := g.Call(context.Background(), "other", 7); r != 14 || err != nil {
		t.Fatalf("another key: %d, %v", r, err)
	}
	close(d.hold)
	<-done
	for i, r := range rs {
		if errs[i] != nil || r != 2*(i+1) {
			t.Fatalf("call %d: %d, %v", i, r, errs[i])
		}
	}
	if b := d.seen(); !slices.EqualFunc(b, [][]int{{1}, {7}, {2, 3, 4, 5}}, slices.Equal) {
		t.Fatalf("batches %v", b)
	}
}

// TestBatchBounds: a batch takes at most MaxItems calls, and at most
// MaxWeight of their weight unless its first call alone weighs more.
func TestBatchBounds(t *testing.T) {
	d := newGated()
	g := &Group[string, int, int]{Do: d.do, MaxItems: 3, MaxWeight: 10, Weight: func(q int) int64 { return int64(q) }}
	_, errs, done := queueBehind(t, g, context.Background(), 0, []int{1, 2, 3, 4, 6, 5, 12, 1, 1})
	close(d.hold)
	<-done
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	want := [][]int{{0}, {1, 2, 3}, {4, 6}, {5}, {12}, {1, 1}}
	if b := d.seen(); !slices.EqualFunc(b, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", b, want)
	}
}

// TestErrorReachesEveryCall: a batch's error is each of its calls'.
func TestErrorReachesEveryCall(t *testing.T) {
	d := newGated()
	d.err = errors.New("owner gone")
	g := &Group[string, int, int]{Do: d.do}
	rs, errs, done := queueBehind(t, g, context.Background(), 1, []int{2, 3})
	close(d.hold)
	<-done
	for i := range rs {
		if !errors.Is(errs[i], d.err) || rs[i] != 0 {
			t.Fatalf("call %d: %d, %v", i, rs[i], errs[i])
		}
	}
}

// TestCallerGoneLeavesTheBatch: a caller that stops waiting returns its
// context's error; one gone before its batch is taken is not sent, and a
// batch whose callers have all gone is cancelled.
func TestCallerGoneLeavesTheBatch(t *testing.T) {
	t.Run("before its batch", func(t *testing.T) {
		d := newGated()
		g := &Group[string, int, int]{Do: d.do}
		ctx, cancel := context.WithCancel(context.Background())
		_, errs, done := queueBehind(t, g, ctx, 1, []int{2, 3})
		cancel()
		testsupport.WaitFor(t, 10*time.Second, "the callers stop waiting", func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return !slices.ContainsFunc(g.lanes["k"].waiting, func(c *call[int, int]) bool { return !c.gone })
		})
		close(d.hold)
		<-done
		if errs[0] != nil || !errors.Is(errs[1], context.Canceled) || !errors.Is(errs[2], context.Canceled) {
			t.Fatalf("errors %v", errs)
		}
		if b := d.seen(); !slices.EqualFunc(b, [][]int{{1}}, slices.Equal) {
			t.Fatalf("batches %v: the calls gone were sent", b)
		}
	})
	t.Run("in its batch", func(t *testing.T) {
		var started = make(chan struct{})
		ended := make(chan error, 1)
		first := true
		hold := make(chan struct{})
		g := &Group[string, int, int]{Do: func(ctx context.Context, _ string, qs []int) ([]int, error) {
			if first { // the lone first call: holds the lane
				first = false
				<-hold
				return []int{0}, nil
			}
			close(started)
			<-ctx.Done()
			ended <- ctx.Err()
			return nil, ctx.Err()
		}}
		ctx, cancel := context.WithCancel(context.Background())
		_, errs, done := queueBehind(t, g, ctx, 1, []int{2, 3})
		close(hold)
		<-started // the batch of 2 and 3 is in flight
		cancel()
		<-done
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Fatalf("the batch ended with %v", err)
		}
		if !errors.Is(errs[1], context.Canceled) || !errors.Is(errs[2], context.Canceled) {
			t.Fatalf("errors %v", errs)
		}
	})
}

// TestManyCallersEachGetTheirOwn: many callers on a few keys at once
// each get their own item's result, whichever batch carried it, with the
// wait unbounded and bounded (batches sent by the timer too).
func TestManyCallersEachGetTheirOwn(t *testing.T) {
	for _, wait := range []time.Duration{0, 20 * time.Microsecond} {
		t.Run(fmt.Sprint("wait ", wait), func(t *testing.T) { manyCallers(t, wait) })
	}
}

func manyCallers(t *testing.T, wait time.Duration) {
	var mu sync.Mutex
	batches, items := 0, 0
	g := &Group[string, int, int]{MaxItems: 8, MaxWait: wait, Do: func(_ context.Context, key string, qs []int) ([]int, error) {
		mu.Lock()
		batches, items = batches+1, items+len(qs)
		mu.Unlock()
		rs := make([]int, len(qs))
		for i, q := range qs {
			rs[i] = q*10 + len(key)
		}
		return rs, nil
	}}
	var wg sync.WaitGroup
	keys := []string{"a", "bb", "ccc"}
	for w := range 32 {
		wg.Go(func() {
			for i := range 300 {
				key, q := keys[(w+i)%3], w*1000+i
				if r, err := g.Call(context.Background(), key, q); err != nil || r != q*10+len(key) {
					t.Errorf("caller %d, item %d of %s: %d, %v", w, q, key, r, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if items != 32*300 {
		t.Fatalf("%d items sent of %d", items, 32*300)
	}
	// A batch's goroutine lets its lane go just after its callers return.
	testsupport.WaitFor(t, 10*time.Second, "every lane is let go", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.lanes) == 0
	})
	t.Logf("%d items in %d requests", items, batches)
}

// TestWaitIsBounded: a call behind a request that does not return goes
// in a request of its own MaxWait after that one went (or at once, if
// the one in flight went longer ago), and gets its result while the first
// is still held.
func TestWaitIsBounded(t *testing.T) {
	d := newGated()
	g := &Group[string, int, int]{Do: d.do, MaxWait: time.Millisecond}
	first := make(chan error, 1)
	go func() {
		_, err := g.Call(context.Background(), "k", 1)
		first <- err
	}()
	testsupport.WaitFor(t, 10*time.Second, "the first call is in flight", func() bool { return len(d.seen()) == 1 })
	for q := 2; q <= 3; q++ {
		if r, err := g.Call(context.Background(), "k", q); r != 2*q || err != nil {
			t.Fatalf("call %d behind a held one: %d, %v", q, r, err)
		}
	}
	select {
	case err := <-first:
		t.Fatalf("the held call returned (%v)", err)
	default:
	}
	close(d.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if b := d.seen(); !slices.EqualFunc(b, [][]int{{1}, {2}, {3}}, slices.Equal) {
		t.Fatalf("batches %v", b)
	}
}

// TestTooFewResults: a Do that answers fewer results than items is an
// error for each of them, not a crash.
func TestTooFewResults(t *testing.T) {
	g := &Group[string, int, int]{Do: func(context.Context, string, []int) ([]int, error) { return nil, nil }}
	if _, err := g.Call(context.Background(), "k", 1); err == nil || !strings.Contains(err.Error(), "0 results for 1 items") {
		t.Fatalf("err %v", err)
	}
}
