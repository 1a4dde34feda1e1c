// Package claim makes a dataset's index once for the processes that need
// it at the same time, on any machines, through a claim kept beside the
// dataset: the peers of a mesh starting together, each of which would
// otherwise list a bucket's prefix or read every shard's headers.
//
// The first to find no claim writes one (its holder's name, a nonce, a
// beat count and progress), reads it back a quarter beat later and, where
// it is still its own, builds, writing the claim again every beat; once
// what it built is published, it deletes the claim. Every other process
// reads the claim (every beat, and more often in the first two; a read the
// store fails is tried again, for up to StaleBeats beats) and, once it is
// gone, reads what was published. A claim that did not change for StaleBeats beats is of a
// builder that died (killed, or cut from the store): the first to see it
// so writes its own and builds. The stores this serves have no write that
// fails where an object is there: processes that find no claim at the
// same moment all write one, and the wait before reading it back lets the
// last write stand for all of them. Only where a write takes longer than
// that may two read their own back and both build: both publish the same
// thing, and nothing is wrong but the reads.
package claim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shade-mesh/shade/internal/atomicfile"
	"github.com/shade-mesh/shade/internal/ctxsleep"
)

// Place is where one claim is kept: a small object or file beside the
// dataset. Its methods are called from one goroutine at a time.
type Place interface {
	// Read returns the claim, "" where there is none.
	Read(ctx context.Context) (string, error)
	// Write replaces the claim whole.
	Write(ctx context.Context, text string) error
	// Drop deletes the claim; none there is no error.
	Drop(ctx context.Context) error
}

// Config configures Build; its zero value is usable.
type Config struct {
	// Holder names this process in its claim (a peer's name); "" means
	// the host name and process id. A claim of the same holder found at
	// the start was left by an earlier run of it, and is taken over at
	// once.
	Holder string
	// Beat is how often a claim is written again and read by those
	// waiting; 0 means DefaultBeat.
	Beat time.Duration
	// Waiting, if not nil, is called when Build begins to wait for
	// another's build, and then every ReportBeats beats while it waits,
	// with what the claim says of that build.
	Waiting func(Wait)
}

// Wait is what a waiting Build knows of the build it waits for.
type Wait struct {
	// Holder is the claim's holder.
	Holder string
	// Done of Total is the build's progress as its claim last said (both
	// 0 where the build tells none).
	Done, Total int64
	// For is how long this Build has waited.
	For time.Duration
}

// ReportBeats is how many beats apart Config.Waiting is called during one
// wait.
const ReportBeats = 30

// DefaultBeat is Config.Beat's default.
const DefaultBeat = time.Second

// StaleBeats is how many beats a claim may stay as it is before one
// waiting takes the build over.
const StaleBeats = 5

// settleBeats: a claim written is read back after a beat over
// settleBeats, by when the writes of every process that found no claim at
// the same moment have landed (a PUT's time).
const settleBeats = 4

// MaxText is the longest claim a Place need read: one is a few lines.
const MaxText = 4 << 10

// ErrNotShared is wrapped by Outcome.Alone: the claim could not be read
// or written, and the work was done without one. Callers wrap it too
// where what was built could not be published.
var ErrNotShared = errors.New("not shared with the others making it")

// Outcome is how Build came by what it returned.
type Outcome struct {
	// BuiltBy is the holder of the claim whose published result was
	// read, "" where this process built it.
	BuiltBy string
	// Alone, where not nil, wraps ErrNotShared and says why the claim
	// could not be read or written: this process built without one.
	Alone error
	// Skipped, where not nil, says why what was published after a wait
	// was not used: this process built then.
	Skipped error
}

// Build returns what published finds once the holder of a claim at p has
// finished, or what build makes under this process's own claim. published
// returns ok false where nothing usable is published (err says why, where
// something was there). build is given a progress function to call as it
// goes (done of total), shown in the claim. Where p cannot be read or
// written, Build builds without a claim (Outcome.Alone says why). With a
// claim of its own, release is not nil: call it once the result is
// published, or publishing failed, and the claim is deleted. ctx bounds
// the wait and the build.
func Build[T any](ctx context.Context, p Place, cfg Config,
	published func(context.Context) (v T, ok bool, err error),
	build func(ctx context.Context, progress func(done, total int)) (T, error),
) (v T, out Outcome, release func(), err error) {
	beat := cfg.Beat
	if beat <= 0 {
		beat = DefaultBeat
	}
	me, err := newClaim(cfg.Holder)
	if err != nil {
		return v, out, nil, err
	}
	alone := func(why error) (T, Outcome, func(), error) {
		out.Alone, out.BuiltBy = fmt.Errorf("%w: %w", ErrNotShared, why), ""
		v, err := build(ctx, func(int, int) {})
		return v, out, nil, err
	}
	var (
		seen     string    // the claim as last read
		since    time.Time // when it was first read so
		waitFrom time.Time // when this wait began
		reported time.Time // when Waiting was last called
		lastRead time.Time // when the claim was last read
	)
	for {
		text, err := p.Read(ctx)
		switch {
		case err != nil && out.BuiltBy == "":
			return alone(fmt.Errorf("reading the claim: %w", err))
		case err != nil && time.Since(lastRead) < StaleBeats*beat:
			// Waiting, the store failed a read (throttled, perhaps, as a
			// crowd waits): read again later; only reads failing for as
			// long as a claim takes to go stale end the wait.
			if !ctxsleep.Sleep(ctx, beat) {
				return v, out, nil, ctx.Err()
			}
			continue
		case err != nil:
			return alone(fmt.Errorf("reading the claim: %w", err))
		}
		lastRead = time.Now()
		take := false
		switch {
		case text == "":
			if out.BuiltBy != "" {
				// The build waited for is over: its result, where it
				// was published, else this process builds.
				v, ok, err := published(ctx)
				if ok {
					return v, out, nil, nil
				}
				out.Skipped = err
			}
			take = true
		case holderOf(text) == me.holder:
			// This holder's claim, left by an earlier run of it that
			// ended while it built: none is building.
			take = true
		case text != seen:
			seen, since = text, time.Now()
		case time.Since(since) >= StaleBeats*beat:
			take = true
		}
		if take {
			first := me.text(0, 0, 0)
			if err := p.Write(ctx, first); err != nil {
				return alone(fmt.Errorf("writing the claim: %w", err))
			}
			if !ctxsleep.Sleep(ctx, beat/settleBeats) {
				return v, out, nil, ctx.Err()
			}
			back, err := p.Read(ctx)
			if err != nil {
				return alone(fmt.Errorf("reading the claim back: %w", err))
			}
			if back == first {
				out.BuiltBy = ""
				return buildClaimed(ctx, p, me, beat, out, build)
			}
			// Another's claim came after this one's: it builds.
			seen, since = back, time.Now()
		}
		if seen != "" { // else the claim went as this one was written: look again
			now := time.Now()
			if out.BuiltBy == "" {
				waitFrom, reported = now, time.Time{}
			}
			out.BuiltBy = holderOf(seen)
			if cfg.Waiting != nil && (reported.IsZero() || now.Sub(reported) >= ReportBeats*beat) {
				reported = now
				w := waitOf(seen)
				w.For = now.Sub(waitFrom)
				cfg.Waiting(w)
			}
		}
		// Read again soon at first, as most builds are short, then once a
		// beat: half the time waited so far, within [beat/16, beat].
		d := beat / 16
		if !waitFrom.IsZero() {
			d = min(max(time.Since(waitFrom)/2, d), beat)
		}
		if !ctxsleep.Sleep(ctx, d) {
			return v, out, nil, ctx.Err()
		}
	}
}

// claim is a claim's holder and nonce: a claim's text is this process's
// only while both are in it.
type claim struct {
	holder, id string
}

func newClaim(holder string) (claim, error) {
	if holder == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "unknown"
		}
		holder = fmt.Sprintf("%s pid %d", host, os.Getpid())
	}
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return claim{}, err
	}
	return claim{holder: strings.ReplaceAll(holder, "\n", " "), id: hex.EncodeToString(nonce[:])}, nil
}

// text is the claim as written at beat n, with done of total.
func (c claim) text(n int64, done, total int64) string {
	return fmt.Sprintf("%s\n%s\nbeat %d, %d of %d done\n", c.holder, c.id, n, done, total)
}

// holds reports whether text is a claim of c's (at any beat).
func (c claim) holds(text string) bool {
	return strings.HasPrefix(text, c.holder+"\n"+c.id+"\n")
}

// waitOf is what a claim's text tells of its build.
func waitOf(text string) Wait {
	w := Wait{Holder: holderOf(text)}
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) > 2 {
		var n int64
		fmt.Sscanf(lines[2], "beat %d, %d of %d done", &n, &w.Done, &w.Total)
	}
	return w
}

// holderOf is the holder named by a claim's text.
func holderOf(text string) string {
	h, _, _ := strings.Cut(text, "\n")
	return h
}

// claimed is a build under this process's claim: the claim is written
// again every beat until released.
type claimed struct {
	p           Place
	c           claim
	done, total atomic.Int64
	stop        chan struct{}
	wg          sync.WaitGroup
	once        sync.Once
}

// buildClaimed builds under the claim me (just written, and read back as
// this process's), renewing it every beat.
func buildClaimed[T any](ctx context.Context, p Place, me claim, beat time.Duration, out Outcome,
	build func(context.Context, func(done, total int)) (T, error)) (T, Outcome, func(), error) {
	c := &claimed{p: p, c: me, stop: make(chan struct{})}
	c.wg.Add(1)
	go c.renew(ctx, beat)
	v, err := build(ctx, func(done, total int) {
		c.done.Store(int64(done))
		c.total.Store(int64(total))
	})
	if err != nil {
		c.release()
		return v, out, nil, err
	}
	return v, out, c.release, nil
}

// renew writes the claim every beat until stop is closed. A failed write
// is not retried before the next beat: the build goes on, and the worst
// a missed beat does is let another take the build over.
func (c *claimed) renew(ctx context.Context, beat time.Duration) {
	defer c.wg.Done()
	t := time.NewTicker(beat)
	defer t.Stop()
	for n := int64(1); ; n++ {
		select {
		case <-c.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.p.Write(ctx, c.c.text(n, c.done.Load(), c.total.Load()))
	}
}

// release stops renewing and deletes the claim where it is still this
// build's (not taken over), so that those waiting read what was
// published. Calls after the first do nothing.
func (c *claimed) release() {
	c.once.Do(func() {
		close(c.stop)
		c.wg.Wait()
		// The claim goes even where the build's context ended: those
		// waiting would otherwise wait out its staleness.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if text, err := c.p.Read(ctx); err == nil && c.c.holds(text) {
			c.p.Drop(ctx)
		}
	})
}

// File is a Place in the file at path (on a file system the processes
// share), written whole (a temporary file, then a rename), readable by
// every user; its folder is made where need be.
func File(path string) Place { return file(path) }

type file string

func (f file) Read(context.Context) (string, error) {
	r, err := os.Open(string(f))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, MaxText))
	return string(b), err
}

func (f file) Write(_ context.Context, text string) error {
	if err := os.MkdirAll(filepath.Dir(string(f)), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(string(f), []byte(text), 0o644)
}

func (f file) Drop(context.Context) error {
	if err := os.Remove(string(f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
