package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseThrottle(t *testing.T) {
	cases := []struct {
		in   string
		want ThrottleConfig
	}{
		{"", ThrottleConfig{}},
		{"off", ThrottleConfig{}},
		{"rate=20MiB/s", ThrottleConfig{Rate: 20 << 20}},
		{"rate=1MB,latency=5ms", ThrottleConfig{Rate: 1e6, Latency: 5 * time.Millisecond}},
		{" latency=10ms , concurrency=16 ", ThrottleConfig{Latency: 10 * time.Millisecond, Concurrency: 16}},
		{"rate=4MiB/s,latency=15ms,concurrency=8", ThrottleConfig{Rate: 4 << 20, Latency: 15 * time.Millisecond, Concurrency: 8}},
	}
	for _, c := range cases {
		got, err := ParseThrottle(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseThrottle(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		back, err := ParseThrottle(got.String())
		if err != nil || back != got {
			t.Errorf("ParseThrottle(%q) = %+v, %v: String %q does not round-trip", got.String(), back, err, got.String())
		}
	}
	for _, bad := range []string{"rate", "rate=fast", "latency=-1ms", "latency=5", "concurrency=-2", "speed=1MiB/s", "rate=1MiB/s,,"} {
		if _, err := ParseThrottle(bad); !errors.Is(err, ErrThrottleSpec) {
			t.Errorf("ParseThrottle(%q): err %v, want ErrThrottleSpec", bad, err)
		}
	}
}

// memSource serves fixed bytes and records how many reads overlap.
type memSource struct {
	m        *Manifest
	data     [][]byte
	hold     time.Duration // each read takes this long
	inflight atomic.Int32
	peak     atomic.Int32
}

func newMemSource(n, size int) *memSource {
	s := &memSource{m: &Manifest{}}
	var names NamesBuilder
	sizes := make([]int64, n)
	for i := range n {
		b := bytes.Repeat([]byte{byte(i)}, size)
		s.data = append(s.data, b)
		if err := names.Add(fmt.Sprintf("c/%d", i)); err != nil {
			panic(err)
		}
		sizes[i] = int64(size)
	}
	s.m.Names, s.m.Sizes = names.Names(), NewSizes(sizes)
	return s
}

func (s *memSource) Manifest() *Manifest { return s.m }

func (s *memSource) Read(i int, dst []byte) ([]byte, error) {
	k := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for {
		p := s.peak.Load()
		if k <= p || s.peak.CompareAndSwap(p, k) {
			break
		}
	}
	if s.hold > 0 {
		time.Sleep(s.hold)
	}
	if i < 0 || i >= len(s.data) {
		return dst, ErrOutOfRange
	}
	return append(dst, s.data[i]...), nil
}

// fakeClock advances only when a reader sleeps; it records the sleeps.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
}

func TestThrottleDelaysByLatencyAndRate(t *testing.T) {
	src := newMemSource(4, 100)
	clock := &fakeClock{now: time.Unix(1000, 0)}
	// 1000 B/s: the bucket holds 10 bytes, so a 100-byte sample owes 90
	// bytes (90 ms) when the bucket is full and 100 (100 ms) after that.
	th := Throttle(src, ThrottleConfig{Rate: 1000, Latency: 7 * time.Millisecond}, clock)
	for i := range 2 {
		if _, err := th.Read(i, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := []time.Duration{7 * time.Millisecond, 90 * time.Millisecond, 7 * time.Millisecond, 93 * time.Millisecond}
	// The second read's latency (7 ms) refilled 7 bytes of the 0 left: it
	// owes 93.
	if fmt.Sprint(clock.sleeps) != fmt.Sprint(want) {
		t.Fatalf("sleeps %v, want %v", clock.sleeps, want)
	}
	// An idle store refills the bucket, but never beyond its burst.
	clock.Sleep(time.Hour)
	clock.sleeps = nil
	if _, err := th.Read(2, nil); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{7 * time.Millisecond, 90 * time.Millisecond}; fmt.Sprint(clock.sleeps) != fmt.Sprint(want) {
		t.Fatalf("after an idle hour: sleeps %v, want %v", clock.sleeps, want)
	}
}

func TestThrottleKeepsBytesAndErrors(t *testing.T) {
	d := openTestDir(t, "b/1.png", "a/2.png", "a/1.png")
	th := Throttle(d, ThrottleConfig{Rate: 1 << 30, Latency: time.Microsecond, Concurrency: 2}, nil)
	if th.Manifest() != d.Manifest() {
		t.Fatal("the throttled manifest is not the source's")
	}
	for i := range d.Len() {
		want, err := d.Read(i, []byte("prefix"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := th.Read(i, []byte("prefix"))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("sample %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if _, err := th.Read(d.Len(), nil); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("read past the end: %v, want ErrOutOfRange", err)
	}
}

func TestThrottleBoundsConcurrency(t *testing.T) {
	src := newMemSource(16, 10)
	src.hold = 2 * time.Millisecond
	th := Throttle(src, ThrottleConfig{Concurrency: 3}, nil)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			if _, err := th.Read(i, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if p := src.peak.Load(); p > 3 {
		t.Fatalf("%d reads in flight at once, want at most 3", p)
	}
}

// TestThrottleRealTime checks lower bounds only: a loaded machine makes
// reads slower, never faster.
func TestThrottleRealTime(t *testing.T) {
	const latency = 20 * time.Millisecond
	src := newMemSource(8, 5000)
	// 8 reads, 2 at a time: 4 rounds of latency at least.
	th := Throttle(src, ThrottleConfig{Latency: latency, Concurrency: 2}, nil)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { th.Read(i, nil) })
	}
	wg.Wait()
	if took := time.Since(start); took < 4*latency {
		t.Errorf("8 reads with latency %v, 2 at a time, took %v; want at least %v", latency, took, 4*latency)
	}
	// 8 x 5000 bytes at a shared 100 kB/s: the bucket lets 1000 through at
	// once, the other 39,000 take 390 ms however many read together.
	th = Throttle(src, ThrottleConfig{Rate: 100_000}, nil)
	start = time.Now()
	for i := range 8 {
		wg.Go(func() { th.Read(i, nil) })
	}
	wg.Wait()
	if took := time.Since(start); took < 390*time.Millisecond {
		t.Errorf("40 kB at a shared 100 kB/s took %v; want at least 390ms", took)
	}
}
