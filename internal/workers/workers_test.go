package workers

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// TestRunsGoToAnIdleWorker runs functions one at a time: each goes to the
// worker the one before left waiting, so one worker runs them all; after
// Close the worker ends, and a run still runs, on a goroutine of its own.
func TestRunsGoToAnIdleWorker(t *testing.T) {
	var p Pool
	for i := range 50 {
		ran := make(chan int, 1)
		p.Go(func() { ran <- i })
		if v := <-ran; v != i {
			t.Fatalf("run %d ran %d", i, v)
		}
		waitIdle(t, &p, 1)
	}
	if n := p.live.Load(); n != 1 {
		t.Fatalf("%d workers for runs one at a time, want 1", n)
	}
	p.Close()
	waitIdle(t, &p, 0)
	waitLive(t, &p, 0)
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	<-ran
	waitLive(t, &p, 0)
}

// TestAtMostMaxIdleWorkersWait runs more functions at once than MaxIdle:
// once they have returned, MaxIdle workers wait for more and the others
// have ended.
func TestAtMostMaxIdleWorkersWait(t *testing.T) {
	var p Pool
	defer p.Close()
	release := make(chan struct{})
	const runs = MaxIdle + 44
	done := make(chan int, runs)
	for i := range runs {
		p.Go(func() { <-release; done <- i })
	}
	close(release)
	seen := make([]bool, runs)
	for range runs {
		seen[<-done] = true
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("run %d did not run", i)
		}
	}
	if _, err := testsupport.Poll(context.Background(), 10*time.Second, func() bool { return p.live.Load() == int64(p.Idle()) }); err != nil {
		t.Fatalf("%d workers live, %d idle: some neither ended nor wait", p.live.Load(), int64(p.Idle()))
	}
	if n := int64(p.Idle()); n != MaxIdle {
		t.Fatalf("%d workers wait after %d runs at once, want MaxIdle (%d)", n, runs, MaxIdle)
	}
}

// waitIdle waits until n workers wait for a run (a worker lists itself
// idle just after its run returns).
func waitIdle(t *testing.T, p *Pool, n int64) {
	t.Helper()
	if _, err := testsupport.Poll(context.Background(), 10*time.Second, func() bool { return int64(p.Idle()) == n }); err != nil {
		t.Fatalf("%d workers idle, want %d", int64(p.Idle()), n)
	}
}

// waitLive waits until n workers are live.
func waitLive(t *testing.T, p *Pool, n int64) {
	t.Helper()
	if _, err := testsupport.Poll(context.Background(), 10*time.Second, func() bool { return p.live.Load() == n }); err != nil {
		t.Fatalf("%d workers live, want %d", p.live.Load(), n)
	}
}

// TestImportsNothingOfTheModule: the package is a leaf.
func TestImportsNothingOfTheModule(t *testing.T) { testsupport.CheckImports(t) }

// BenchmarkGo starts runs that call deep (about 16 KiB of stack, as a
// request to a peer does) and waits for each, on a new goroutine each
// ("go") and on a Pool ("pool"); "-parallel" starts them from several
// goroutines at once.
func BenchmarkGo(b *testing.B) {
	var sink atomic.Int64
	run := func(done chan<- struct{}) func() {
		return func() { sink.Add(int64(deep(16))); done <- struct{}{} }
	}
	var p Pool
	defer p.Close()
	for _, s := range []struct {
		name  string
		start func(func())
	}{{"go", func(f func()) { go f() }}, {"pool", p.Go}} {
		name, start := s.name, s.start
		b.Run(name, func(b *testing.B) {
			done := make(chan struct{})
			for b.Loop() {
				start(run(done))
				<-done
			}
		})
		b.Run(name+"-parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				done := make(chan struct{})
				for pb.Next() {
					start(run(done))
					<-done
				}
			})
		})
	}
}

// deep recurses n frames of about 1 KiB each.
//
//go:noinline
func deep(n int) int {
	var pad [1024]byte
	pad[n] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[n])
}

// TestEachCallsEveryIndexOnceWithinItsBound: every k in [0, n) is called
// exactly once, never more than at of them at once, and one at a time in
// order.
func TestEachCallsEveryIndexOnceWithinItsBound(t *testing.T) {
	const n, at = 200, 4
	var calls [n]atomic.Int32
	var running, peak atomic.Int32
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		Each(n, at, func(k int) {
			r := running.Add(1)
			for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
			}
			<-release // the first calls are held until at of them run
			calls[k].Add(1)
			running.Add(-1)
		})
	}()
	func() {
		defer close(release)
		testsupport.WaitFor(t, 10*time.Second, "at calls at once", func() bool { return running.Load() >= at })
	}()
	<-done
	for k := range n {
		if c := calls[k].Load(); c != 1 {
			t.Fatalf("k %d called %d times", k, c)
		}
	}
	if p := peak.Load(); p != at {
		t.Fatalf("at most %d calls at once, want %d", p, at)
	}
	var order []int
	Each(5, 1, func(k int) { order = append(order, k) }) // no lock: one at a time
	if !slices.Equal(order, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("one at a time: order %v", order)
	}
}

// TestPoolEachRunsOnItsWorkers: a Pool's Each runs every call once, at
// most at of them at once, the caller's goroutine taking a share and the
// others going to the pool's workers: at - 1 of them for the first Each,
// the same ones, waiting for runs, for the next.
func TestPoolEachRunsOnItsWorkers(t *testing.T) {
	var p Pool
	defer p.Close()
	const n, at = 40, 4
	for round := range 3 {
		var calls [n]atomic.Int32
		var running atomic.Int32
		release := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Each(n, at, func(k int) {
				running.Add(1)
				<-release // the first calls are held until at of them run
				calls[k].Add(1)
			})
		}()
		testsupport.WaitFor(t, 10*time.Second, "at calls at once", func() bool { return running.Load() == at })
		if live := p.live.Load(); live != at-1 {
			t.Fatalf("round %d: %d workers run calls beside the caller, want %d", round, live, at-1)
		}
		close(release)
		<-done
		for k := range n {
			if c := calls[k].Load(); c != 1 {
				t.Fatalf("round %d: k %d called %d times", round, k, c)
			}
		}
		waitIdle(t, &p, at-1)
	}
}

// TestGoInCountsTheRun: a run started by GoIn is counted in its
// WaitGroup until it returns, and runs on the pool's worker. In a
// synctest bubble, once every goroutine is blocked, Wait must still be
// waiting for the held run; it fails, checked, where the run is counted
// done as it starts.
func TestGoInCountsTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p Pool
		defer p.Close()
		var wg sync.WaitGroup
		release := make(chan struct{})
		free := sync.OnceFunc(func() { close(release) })
		defer free() // a failure lets the run end too
		var ran atomic.Bool
		p.GoIn(&wg, func() { <-release; ran.Store(true) })
		if live := p.live.Load(); live != 1 {
			t.Fatalf("%d workers, want 1", live)
		}
		waited := make(chan struct{})
		go func() { wg.Wait(); close(waited) }()
		synctest.Wait() // the run held, the waiter waiting
		select {
		case <-waited:
			t.Fatal("Wait returned while the run was held")
		default:
		}
		free()
		<-waited
		if !ran.Load() {
			t.Fatal("Wait returned before the run did")
		}
	})
}

// TestEachWithNothingToDoStartsNothing: most of the mesh's calls of Each
// have no work (a fetch with no misses); they must cost nothing. A bound
// of 0 runs the calls one at a time rather than none.
func TestEachWithNothingToDoStartsNothing(t *testing.T) {
	fn := func(int) { t.Error("called with n 0") }
	if a := testing.AllocsPerRun(100, func() { Each(0, 8, fn) }); a != 0 {
		t.Fatalf("Each(0, 8) allocated %v times a call", a)
	}
	var order []int
	Each(3, 0, func(k int) { order = append(order, k) })
	if !slices.Equal(order, []int{0, 1, 2}) {
		t.Fatalf("bound 0: order %v", order)
	}
}
