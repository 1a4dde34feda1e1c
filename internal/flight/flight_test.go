package flight

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// TestCallersOfOneKeyShareOneRun has many goroutines ask for one key while
// its run is held: fn runs once, every caller gets the same call and its
// result, and a key asked for after the run returned runs fn again.
func TestCallersOfOneKeyShareOneRun(t *testing.T) {
	var g Group[int]
	defer g.Close()
	release := make(chan struct{})
	runs := 0
	fn := func() (int, error) {
		runs++ // runs are one at a time here: the second waits for release
		<-release
		return 42, errors.New("the run's error")
	}
	first := g.Do([]byte("k"), fn)
	calls := make([]*Call[int], 16)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() { calls[i] = g.Do([]byte("k"), fn) })
	}
	wg.Wait()
	close(release)
	for i, c := range calls {
		if c != first {
			t.Fatalf("caller %d got a call of its own", i)
		}
	}
	<-first.Done()
	if v, err := first.Result(); v != 42 || err == nil || err.Error() != "the run's error" {
		t.Fatalf("Result() = %d, %v", v, err)
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times, want 1", runs)
	}
	again := g.Do([]byte("k"), func() (int, error) { return 7, nil })
	<-again.Done()
	if v, err := again.Result(); again == first || v != 7 || err != nil {
		t.Fatalf("after the run returned: Result() = %d, %v (same call: %v)", v, err, again == first)
	}
}

// TestKeyIsCopied changes the caller's key buffer while its run is held:
// the run stays under the key it was asked for.
func TestKeyIsCopied(t *testing.T) {
	var g Group[string]
	defer g.Close()
	release := make(chan struct{})
	buf := []byte("a")
	ca := g.Do(buf, func() (string, error) { <-release; return "a", nil })
	buf[0] = 'b'
	cb := g.Do(buf, func() (string, error) { <-release; return "b", nil })
	if ca == cb {
		t.Fatal("a changed buffer found the run of the key it held before")
	}
	if c := g.Do([]byte("a"), nil); c != ca {
		t.Fatal("key a no longer finds its run")
	}
	close(release)
	for _, c := range []*Call[string]{ca, cb} {
		<-c.Done()
	}
	if a, _ := ca.Result(); a != "a" {
		t.Fatalf("a's run returned %q", a)
	}
}

// TestRunsGoToAnIdleWorker runs one call after another, each once the
// worker of the one before waits for work: every run goes to that worker,
// no other is started. Close ends it.
func TestRunsGoToAnIdleWorker(t *testing.T) {
	var g Group[int]
	for i := range 50 {
		c := g.Do([]byte("k"), func() (int, error) { return i, nil })
		<-c.Done()
		if v, _ := c.Result(); v != i {
			t.Fatalf("run %d returned %d", i, v)
		}
		waitIdle(t, &g, 1)
	}
	if n := g.live.Load(); n != 1 {
		t.Fatalf("%d workers for runs one at a time, want 1", n)
	}
	g.Close()
	waitIdle(t, &g, 0)
	// After Close a run still runs, on a goroutine of its own that ends.
	c := g.Do([]byte("k"), func() (int, error) { return -1, nil })
	<-c.Done()
	if v, _ := c.Result(); v != -1 {
		t.Fatalf("a run after Close returned %d", v)
	}
	waitIdle(t, &g, 0)
}

// TestAtMostMaxIdleWorkersWait runs more calls at once than MaxIdle:
// once they have returned, MaxIdle workers wait for more and the others
// have ended.
func TestAtMostMaxIdleWorkersWait(t *testing.T) {
	var g Group[int]
	defer g.Close()
	release := make(chan struct{})
	calls := make([]*Call[int], MaxIdle+44)
	for i := range calls {
		calls[i] = g.Do([]byte(strconv.Itoa(i)), func() (int, error) { <-release; return i, nil })
	}
	close(release)
	for i, c := range calls {
		<-c.Done()
		if v, _ := c.Result(); v != i {
			t.Fatalf("call %d returned %d", i, v)
		}
	}
	if _, err := testsupport.Poll(context.Background(), 10*time.Second, func() bool { return g.live.Load() == idling(&g) }); err != nil {
		t.Fatalf("%d workers live, %d idle: some neither ended nor wait", g.live.Load(), idling(&g))
	}
	if n := idling(&g); n != MaxIdle {
		t.Fatalf("%d workers wait after %d calls at once, want MaxIdle (%d)", n, len(calls), MaxIdle)
	}
}

// idling returns how many workers wait for a run.
func idling[T any](g *Group[T]) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(len(g.idlers))
}

// waitIdle waits until n workers wait for work (a worker counts itself
// idle just after its run's callers are told).
func waitIdle(t *testing.T, g *Group[int], n int64) {
	t.Helper()
	if _, err := testsupport.Poll(context.Background(), 10*time.Second, func() bool { return idling(g) == n }); err != nil {
		t.Fatalf("%d workers idle, want %d", idling(g), n)
	}
}
