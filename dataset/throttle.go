package dataset

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shade-mesh/shade/internal/bytesize"
)

// ErrThrottleSpec reports a throttle specification that cannot be parsed.
var ErrThrottleSpec = errors.New("dataset: invalid throttle")

// Source is what Throttle shapes: a manifest and the samples' bytes.
// *Dir implements it.
type Source interface {
	Manifest() *Manifest
	// Read appends sample i's bytes to dst. It is called concurrently,
	// and dst's spare capacity may hold stale bytes: the result must end
	// at the last byte Read wrote (a short read is an error).
	Read(i int, dst []byte) ([]byte, error)
}

var _ Source = (*Dir)(nil)

// ThrottleConfig makes a source behave like a remote object store: every
// read waits Latency before its first byte, all reads together share Rate,
// and at most Concurrency are in flight (a store's connection pool). The
// zero value throttles nothing.
type ThrottleConfig struct {
	// Rate is the byte rate all reads share, in bytes per second; 0 is
	// unlimited.
	Rate int64
	// Latency is the time to first byte of every read.
	Latency time.Duration
	// Concurrency bounds the reads in flight; more wait for a slot. 0 is
	// unbounded.
	Concurrency int
}

// Enabled reports whether c throttles anything.
func (c ThrottleConfig) Enabled() bool {
	return c.Rate > 0 || c.Latency > 0 || c.Concurrency > 0
}

// String is c in ParseThrottle's syntax; "off" for the zero value.
func (c ThrottleConfig) String() string {
	var parts []string
	if c.Rate > 0 {
		parts = append(parts, "rate="+exactSize(c.Rate)+"/s")
	}
	if c.Latency > 0 {
		parts = append(parts, "latency="+c.Latency.String())
	}
	if c.Concurrency > 0 {
		parts = append(parts, "concurrency="+strconv.Itoa(c.Concurrency))
	}
	if len(parts) == 0 {
		return "off"
	}
	return strings.Join(parts, ",")
}

// exactSize prints n with the largest binary unit that divides it.
func exactSize(n int64) string {
	for _, u := range []struct {
		suffix string
		scale  int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.scale == 0 {
			return strconv.FormatInt(n/u.scale, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// ParseThrottle reads a throttle such as "rate=20MiB/s,latency=10ms,concurrency=16":
// comma-separated key=value pairs, each optional. rate is a byte size per
// second (units as bytesize.Parse; the "/s" is optional), latency a Go
// duration, concurrency a count. "" and "off" give the zero value.
func ParseThrottle(s string) (ThrottleConfig, error) {
	var c ThrottleConfig
	s = strings.TrimSpace(s)
	if s == "" || s == "off" {
		return c, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return c, fmt.Errorf("%w: %q is not key=value", ErrThrottleSpec, part)
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case "rate":
			n, err := bytesize.Parse(strings.TrimSuffix(v, "/s"))
			if err != nil {
				return c, fmt.Errorf("%w: rate %q: want bytes per second such as 20MiB/s", ErrThrottleSpec, v)
			}
			c.Rate = n
		case "latency":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return c, fmt.Errorf("%w: latency %q: want a duration such as 10ms", ErrThrottleSpec, v)
			}
			c.Latency = d
		case "concurrency":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return c, fmt.Errorf("%w: concurrency %q: want a count", ErrThrottleSpec, v)
			}
			c.Concurrency = n
		default:
			return c, fmt.Errorf("%w: unknown key %q (want rate, latency, concurrency)", ErrThrottleSpec, k)
		}
	}
	return c, nil
}

// Clock is the time a Throttled source waits by; tests inject a fake one.
type Clock interface {
	Now() time.Time
	Sleep(d time.Duration)
}

type realClock struct{}

func (realClock) Now() time.Time        { return time.Now() }
func (realClock) Sleep(d time.Duration) { time.Sleep(d) }

// Throttled is a Source slowed down as ThrottleConfig says. Its bytes are
// the wrapped source's, unchanged. Safe for concurrent use.
type Throttled struct {
	src   Source
	cfg   ThrottleConfig
	clock Clock
	slots chan struct{} // nil when concurrency is unbounded

	mu     sync.Mutex
	tokens float64 // bytes that may flow now; negative is debt
	last   time.Time
	burst  float64
}

var _ Source = (*Throttled)(nil)

// Throttle wraps src. A nil clock means the real one.
func Throttle(src Source, cfg ThrottleConfig, clock Clock) *Throttled {
	if clock == nil {
		clock = realClock{}
	}
	t := &Throttled{src: src, cfg: cfg, clock: clock, last: clock.Now()}
	if cfg.Concurrency > 0 {
		t.slots = make(chan struct{}, cfg.Concurrency)
	}
	// The bucket holds 10 ms of the rate, so that a quiet store lets a
	// short burst through at once, as a network link's buffers do.
	t.burst = float64(cfg.Rate) / 100
	t.tokens = t.burst
	return t
}

// Manifest is the wrapped source's.
func (t *Throttled) Manifest() *Manifest { return t.src.Manifest() }

// Read waits for a slot, then the latency, reads the sample from the
// wrapped source, and returns once the shared rate has let its bytes
// through. A slot is held for the whole read, transfer included.
func (t *Throttled) Read(i int, dst []byte) ([]byte, error) {
	if t.slots != nil {
		t.slots <- struct{}{}
		defer func() { <-t.slots }()
	}
	if t.cfg.Latency > 0 {
		t.clock.Sleep(t.cfg.Latency)
	}
	n := len(dst)
	out, err := t.src.Read(i, dst)
	if err != nil {
		return out, err
	}
	if wait := t.take(len(out) - n); wait > 0 {
		t.clock.Sleep(wait)
	}
	return out, nil
}

// take draws n bytes from the bucket and returns how long the caller must
// wait for them: the debt that earlier reads and this one left, at Rate.
// Concurrent readers queue behind each other's debt, so together they get
// Rate, not Rate each.
func (t *Throttled) take(n int) time.Duration {
	if t.cfg.Rate <= 0 || n <= 0 {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	rate := float64(t.cfg.Rate)
	t.tokens = min(t.burst, t.tokens+now.Sub(t.last).Seconds()*rate)
	t.last = now
	t.tokens -= float64(n)
	if t.tokens >= 0 {
		return 0
	}
	return time.Duration(-t.tokens / rate * float64(time.Second))
}
