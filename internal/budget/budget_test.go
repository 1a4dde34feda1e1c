package budget

import (
	"context"
	"errors"
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
