package flight

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/internal/workers"
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

// TestRunsAfterClose: Close ends the idle workers, and a call after it
// still runs and is shared as before.
func TestRunsAfterClose(t *testing.T) {
	var g Group[int]
	c := g.Do([]byte("k"), func() (int, error) { return 1, nil })
	<-c.Done()
	g.Close()
	release := make(chan struct{})
	c = g.Do([]byte("k"), func() (int, error) { <-release; return 2, nil })
	if again := g.Do([]byte("k"), func() (int, error) { return 3, nil }); again != c {
		t.Fatal("a second caller of a running key got a call of its own")
	}
	close(release)
	<-c.Done()
	if v, err := c.Result(); v != 2 || err != nil {
		t.Fatalf("the call after Close returned %d, %v", v, err)
	}
}

// TestImportsOnlyWorkers: of this module, the package imports only
// internal/workers.
func TestImportsOnlyWorkers(t *testing.T) {
	testsupport.CheckImports(t, "github.com/shade-mesh/shade/internal/workers")
}

// TestRunsOnASharedPool: where Workers is set, the calls run on that
// pool (its worker waits there after the run), and the group's Close
// leaves the pool to its owner.
func TestRunsOnASharedPool(t *testing.T) {
	var pool workers.Pool
	defer pool.Close()
	g := Group[int]{Workers: &pool}
	c := g.Do([]byte("k"), func() (int, error) { return 1, nil })
	<-c.Done()
	g.Close()
	if _, err := testsupport.Poll(context.Background(), 10*time.Second, func() bool { return pool.Idle() == 1 }); err != nil {
		t.Fatalf("%d workers wait in the shared pool after the group's run, want 1", pool.Idle())
	}
}
