package budget

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestTryReserveAndRelease(t *testing.T) {
	b := New(100)
	if !b.TryReserve(60) || !b.TryReserve(40) {
		t.Fatal("reservations within the limit refused")
	}
	if b.TryReserve(1) {
		t.Fatal("a reservation past the limit was granted")
	}
	b.Release(50)
	if got := b.Used(); got != 50 {
		t.Fatalf("used %d after releasing 50 of 100, want 50", got)
	}
	if !b.TryReserve(50) {
		t.Fatal("released bytes not reusable")
	}
	if b.Peak() != 100 {
		t.Fatalf("peak %d, want 100", b.Peak())
	}
}

func TestForceGoesPastTheLimitAndBlocksReservations(t *testing.T) {
	b := New(10)
	b.Force(15)
	if b.TryReserve(1) {
		t.Fatal("reservation granted while over the limit")
	}
	b.Release(15)
	if !b.TryReserve(10) {
		t.Fatal("reservation refused after the forced bytes went back")
	}
}

func TestReserveWaitsForRelease(t *testing.T) {
	b := New(10)
	b.TryReserve(10)
	got := make(chan error, 1)
	go func() { got <- b.Reserve(context.Background(), 5) }()
	select {
	case err := <-got:
		t.Fatalf("Reserve returned %v before anything was released", err)
	default:
	}
	b.Release(5)
	if err := <-got; err != nil {
		t.Fatalf("Reserve after a release: %v", err)
	}
	if b.Used() != 10 {
		t.Fatalf("used %d, want 10", b.Used())
	}
}

func TestReserveGivesUp(t *testing.T) {
	b := New(10)
	if err := b.Reserve(context.Background(), 11); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("reserving more than the limit: %v, want ErrTooLarge", err)
	}
	b.TryReserve(10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := b.Reserve(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve on a full budget: %v, want the context's error", err)
	}
}

func TestShareCloseGivesEverythingBack(t *testing.T) {
	b := New(100)
	s := NewShare(b)
	if !s.Grow(30) {
		t.Fatal("Grow refused")
	}
	s.Force(90)
	if s.Grow(1) {
		t.Fatal("Grow past the limit granted")
	}
	s.Set(20)
	if s.Held() != 20 || b.Used() != 20 {
		t.Fatalf("after Set(20): share %d, budget %d", s.Held(), b.Used())
	}
	s.Close()
	if b.Used() != 0 || s.Held() != 0 {
		t.Fatalf("after Close: share %d, budget %d", s.Held(), b.Used())
	}
	var none *Share
	if !none.Grow(1 << 40) {
		t.Fatal("a nil share refused")
	}
	none.Close()
}

func TestUnlimited(t *testing.T) {
	b := New(0)
	if !b.TryReserve(1<<50) || b.Limit() != 0 {
		t.Fatal("an unlimited budget refused")
	}
}

// TestReleaseWakesEveryWaiter: holders that reserve and release a budget
// too small for them all at once, concurrently, all finish: no Release
// goes unseen by a waiting Reserve (a lost wakeup would hang the test).
func TestReleaseWakesEveryWaiter(t *testing.T) {
	b := New(10)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				n := int64(1 + (g+i)%10)
				if err := b.Reserve(context.Background(), n); err != nil {
					t.Error(err)
					return
				}
				b.Release(n)
			}
		}()
	}
	wg.Wait()
	if b.Used() != 0 || b.waiting.Load() != 0 {
		t.Fatalf("used %d, %d waiting after every holder released", b.Used(), b.waiting.Load())
	}
}

// TestReleaseWithNoWaiterAllocatesNothing: a Release that no Reserve
// waits for makes no garbage.
func TestReleaseWithNoWaiterAllocatesNothing(t *testing.T) {
	b := New(10)
	if n := testing.AllocsPerRun(100, func() {
		b.TryReserve(4)
		b.Release(4)
	}); n != 0 {
		t.Fatalf("%v allocations a reserve and release", n)
	}
}
