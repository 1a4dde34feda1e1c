// Package budget counts bytes held on behalf of untrusted senders (trainer
// connections, peers) against one shared limit, so that no sender, and no
// number of them together, can make the process hold more than the limit.
//
// It is a leaf: it imports nothing of this module and no network package.
package budget

import (
	"context"
	"sync"
	"sync/atomic"
)

// Budget is a byte limit shared by many holders. The zero value is not
// usable; make one with New. All methods are safe for concurrent use.
//
// Holders reserve bytes before they allocate them (TryReserve, Reserve) and
// release them when the memory is given back. A holder that has already
// allocated, and cannot refuse, records the bytes with Force, which may take
// the budget past its limit; further reservations then fail until enough is
// released.
type Budget struct {
	limit int64
	used  atomic.Int64
	peak  atomic.Int64

	// Callers of Reserve that wait count themselves in waiting, then wait
	// for free, which a Release closes and replaces while anyone waits.
	// A Release with none waiting touches neither: on the trainer
	// socket's paths it runs several times a reply, and a new channel
	// each time was garbage enough to have the Go heap collected often.
	mu      sync.Mutex
	free    chan struct{}
	waiting atomic.Int32
}

// New returns a budget of limit bytes; limit <= 0 means no limit.
func New(limit int64) *Budget {
	return &Budget{limit: limit, free: make(chan struct{})}
}

// Limit returns the budget's limit in bytes (0: none).
func (b *Budget) Limit() int64 {
	if b.limit < 0 {
		return 0
	}
	return b.limit
}

// Used returns the bytes reserved now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Peak returns the most bytes ever reserved at once.
func (b *Budget) Peak() int64 { return b.peak.Load() }

// TryReserve reserves n bytes if they fit under the limit and reports
// whether it did. n <= 0 always fits.
func (b *Budget) TryReserve(n int64) bool {
	if n <= 0 {
		return true
	}
	for {
		u := b.used.Load()
		if b.limit > 0 && u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			b.notePeak(u + n)
			return true
		}
	}
}

// Reserve reserves n bytes, waiting for releases while they do not fit,
// until ctx ends; it returns ctx's error then. n larger than the whole
// limit can never fit and fails at once with ErrTooLarge.
func (b *Budget) Reserve(ctx context.Context, n int64) error {
	if b.limit > 0 && n > b.limit {
		return ErrTooLarge
	}
	for {
		if b.TryReserve(n) {
			return nil
		}
		b.mu.Lock()
		free := b.free
		b.waiting.Add(1)
		b.mu.Unlock()
		// Counted as waiting before trying again: a Release after this
		// try sees the count and closes free; one before it left the
		// bytes this try finds.
		if b.TryReserve(n) {
			b.waiting.Add(-1)
			return nil
		}
		select {
		case <-free:
			b.waiting.Add(-1)
		case <-ctx.Done():
			b.waiting.Add(-1)
			return ctx.Err()
		}
	}
}

// Force records n bytes already held, whether or not they fit.
func (b *Budget) Force(n int64) {
	if n <= 0 {
		return
	}
	b.notePeak(b.used.Add(n))
}

// Release gives back n bytes reserved or forced earlier and wakes the
// callers of Reserve.
func (b *Budget) Release(n int64) {
	if n <= 0 {
		return
	}
	b.used.Add(-n)
	if b.waiting.Load() == 0 {
		return
	}
	b.mu.Lock()
	close(b.free)
	b.free = make(chan struct{})
	b.mu.Unlock()
}

func (b *Budget) notePeak(u int64) {
	for {
		p := b.peak.Load()
		if u <= p || b.peak.CompareAndSwap(p, u) {
			return
		}
	}
}

// ErrTooLarge reports a reservation larger than the whole budget.
var ErrTooLarge = errTooLarge{}

type errTooLarge struct{}

func (errTooLarge) Error() string { return "budget: larger than the whole limit" }

// Share is one holder's part of a Budget: it remembers what the holder has
// reserved so that Close gives all of it back. A Share is used by one
// goroutine at a time; a nil *Share, or one of a nil Budget, holds nothing
// and refuses nothing.
type Share struct {
	b    *Budget
	held int64
}

// NewShare returns a share of b (nil b: an unlimited share).
func NewShare(b *Budget) *Share { return &Share{b: b} }

// Held returns the bytes this share holds.
func (s *Share) Held() int64 {
	if s == nil {
		return 0
	}
	return s.held
}

// Grow reserves n more bytes if they fit and reports whether they did.
func (s *Share) Grow(n int64) bool {
	if s == nil || s.b == nil || n <= 0 {
		return true
	}
	if !s.b.TryReserve(n) {
		return false
	}
	s.held += n
	return true
}

// Force records n more bytes already held, whether or not they fit.
func (s *Share) Force(n int64) {
	if s == nil || s.b == nil || n <= 0 {
		return
	}
	s.b.Force(n)
	s.held += n
}

// Shrink gives back n bytes (at most what the share holds).
func (s *Share) Shrink(n int64) {
	if s == nil || s.b == nil || n <= 0 {
		return
	}
	n = min(n, s.held)
	s.held -= n
	s.b.Release(n)
}

// Set makes the share hold exactly n bytes: it grows by Force or shrinks.
func (s *Share) Set(n int64) {
	if s == nil {
		return
	}
	switch {
	case n > s.held:
		s.Force(n - s.held)
	case n < s.held:
		s.Shrink(s.held - n)
	}
}

// Close gives back everything the share holds.
func (s *Share) Close() {
	if s == nil {
		return
	}
	s.Shrink(s.held)
}
