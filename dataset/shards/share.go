package shards

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

	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/internal/atomicfile"
)

// An index built once for the Opens of the same shards that find none kept
// or published at the same time (Config.Share): the peers of a mesh
// starting together, each of which would otherwise read every shard's
// headers, in a bucket of small samples every byte of the dataset.
//
// The first to find no claim writes one beside the shards
// (.shade/shards.index.claim), reads it back a quarter beat later and,
// where it is still its own, builds the index, writing the claim again
// every beat with what it has read; then publishes the index and deletes
// the claim. Every other Open reads the claim every beat and, once it is
// gone, reads the published index. A claim that did not change for
// staleBeats beats is of a builder that died (killed, or its store
// unreachable): the first to see it so writes its own and builds. The
// store has no write that fails where an object is there: Opens that find
// no claim at the same moment all write one, and the wait before reading
// it back lets the last write stand for all of them. Only where a write
// takes longer than that may two read their own back and both build: each
// publishes the same index, and nothing is wrong but the reads.

// ClaimName is the claim on building the index, in the shards' location's
// hidden folder (s3source.AsideFolder) beside PublishedIndex.
const ClaimName = PublishedIndex + ".claim"

// DefaultShareBeat is how often a claim is written again and a waiting
// Open reads it, where Config.ShareBeat is 0.
const DefaultShareBeat = time.Second

// staleBeats is how many beats a claim may stay as it is before a waiting
// Open takes the build over.
const staleBeats = 5

// settleBeats: a claim written is read back after a beat over
// settleBeats, by when the writes of every Open that found no claim at
// the same moment have landed (a PUT's time).
const settleBeats = 4

// maxClaim is the longest claim read: one is a few lines.
const maxClaim = 4 << 10

// ErrShare is wrapped by Source.Shared's error: the index could not be
// shared (the claim could not be written or read, or the index not
// published), and this Open built it alone.
var ErrShare = errors.New("shards: the index was not shared")

// claim is one claim's text: the holder's name, its nonce (the claim is
// its own only while both are there), the beat and the shards read.
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

// text is the claim as written at beat n, with done of total shards read.
func (c claim) text(n int64, done, total int) string {
	return fmt.Sprintf("%s\n%s\nbeat %d, %d of %d shards read\n", c.holder, c.id, n, done, total)
}

// holds reports whether text is a claim of c's (at any beat).
func (c claim) holds(text string) bool {
	return strings.HasPrefix(text, c.holder+"\n"+c.id+"\n")
}

// holderOf is the holder named by a claim's text.
func holderOf(text string) string {
	h, _, _ := strings.Cut(text, "\n")
	return h
}

// claimed is a build this Open claimed: it writes the claim again every
// beat until released.
type claimed struct {
	st    store
	c     claim
	done  atomic.Int64 // shards read
	total int
	stop  chan struct{}
	wg    sync.WaitGroup
}

// renew writes the claim every beat until stop is closed. A failed write
// is not retried before the next beat: the build goes on, and the worst
// a missed beat does is let another Open take the build over.
func (b *claimed) renew(ctx context.Context, beat time.Duration) {
	defer b.wg.Done()
	t := time.NewTicker(beat)
	defer t.Stop()
	for n := int64(1); ; n++ {
		select {
		case <-b.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.st.writeClaim(ctx, b.c.text(n, int(b.done.Load()), b.total))
	}
}

// release stops renewing and deletes the claim where it is still this
// build's (not taken over), so that waiting Opens read what was published.
func (b *claimed) release() {
	close(b.stop)
	b.wg.Wait()
	// The claim goes even where the Open's context ended: waiting Opens
	// would otherwise wait out its staleness.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if text, err := b.st.readClaim(ctx); err == nil && b.c.holds(text) {
		b.st.dropClaim(ctx)
	}
}

// shared returns the index of st's shards, built by this Open under a
// claim or published by the Open that held the claim (s.from says which).
// Where the claim cannot be read or written, it builds the index alone
// and s.shareErr says why. With a claim of its own, release is not nil
// and must be called once the index is published (or Open failed).
func (s *Source) shared(ctx context.Context, st store, cfg Config) (b *indexBuilder, release func(), err error) {
	beat := cfg.ShareBeat
	if beat <= 0 {
		beat = DefaultShareBeat
	}
	me, err := newClaim(cfg.Holder)
	if err != nil {
		return nil, nil, err
	}
	alone := func(why error) (*indexBuilder, func(), error) {
		s.shareErr = fmt.Errorf("%w: %w", ErrShare, why)
		s.from = IndexBuilt
		b, err := buildIndex(ctx, st, cfg.IndexShards, cfg.Progress)
		return b, nil, err
	}
	names, _ := st.shards()
	var (
		seen  string    // the claim as last read
		since time.Time // when it was first read so
	)
	for {
		text, err := st.readClaim(ctx)
		if err != nil {
			return alone(fmt.Errorf("reading the claim: %w", err))
		}
		take := false
		switch {
		case text == "":
			if s.builtBy != "" {
				// The build waited for is over: its index, where it
				// was published, else this Open builds it.
				pub, err := st.published(ctx)
				if pub != nil {
					s.from = IndexPublished
					return pub, nil, nil
				}
				s.skipped = err
			}
			take = true
		case holderOf(text) == me.holder:
			// This holder's claim, left by an earlier run of it that
			// ended while it built: none is building.
			take = true
		case text != seen:
			seen, since = text, time.Now()
		case time.Since(since) >= staleBeats*beat:
			take = true
		}
		if take {
			first := me.text(0, 0, len(names))
			if err := st.writeClaim(ctx, first); err != nil {
				return alone(fmt.Errorf("writing the claim: %w", err))
			}
			// Read back a while later: every Open that found no claim
			// when this one did has written its own by then, the last
			// write stands, and only its writer builds.
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(beat / settleBeats):
			}
			back, err := st.readClaim(ctx)
			if err != nil {
				return alone(fmt.Errorf("reading the claim back: %w", err))
			}
			if back == first {
				return s.buildClaimed(ctx, st, cfg, me, beat)
			}
			// Another Open's claim came after this one's: it builds.
			seen, since = back, time.Now()
		}
		if seen != "" { // else the claim went as this one was written: look again
			if s.builtBy == "" && cfg.Waiting != nil {
				cfg.Waiting(holderOf(seen))
			}
			s.builtBy = holderOf(seen)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(beat):
		}
	}
}

// buildClaimed builds the index under the claim me (just written, and
// read back as this Open's), renewing it every beat.
func (s *Source) buildClaimed(ctx context.Context, st store, cfg Config, me claim, beat time.Duration) (*indexBuilder, func(), error) {
	s.from, s.builtBy = IndexBuilt, ""
	names, _ := st.shards()
	c := &claimed{st: st, c: me, total: len(names), stop: make(chan struct{})}
	c.wg.Add(1)
	go c.renew(ctx, beat)
	progress := func(done, total int) {
		c.done.Store(int64(done))
		if cfg.Progress != nil {
			cfg.Progress(done, total)
		}
	}
	b, err := buildIndex(ctx, st, cfg.IndexShards, progress)
	if err != nil {
		c.release()
		return nil, nil, err
	}
	return b, c.release, nil
}

// Claims in a directory: DIR/.shade/shards.index.claim, written whole
// (temporary file, then rename).

func (d *dirStore) claimPath() string {
	return filepath.Join(d.root, filepath.FromSlash(s3source.AsideFolder), ClaimName)
}

func (d *dirStore) readClaim(context.Context) (string, error) {
	f, err := os.Open(d.claimPath())
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxClaim))
	return string(b), err
}

func (d *dirStore) writeClaim(_ context.Context, text string) error {
	if err := os.MkdirAll(filepath.Dir(d.claimPath()), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(d.claimPath(), []byte(text), 0o644)
}

func (d *dirStore) dropClaim(context.Context) error {
	if err := os.Remove(d.claimPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Claims in a bucket: PREFIX/.shade/shards.index.claim.

func (s *s3Store) readClaim(ctx context.Context) (string, error) {
	r, _, err := s.src.ReadAside(ctx, ClaimName)
	if errors.Is(err, s3source.ErrNoAside) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxClaim))
	return string(b), err
}

func (s *s3Store) writeClaim(ctx context.Context, text string) error {
	return s.src.WriteAside(ctx, ClaimName, []byte(text))
}

func (s *s3Store) dropClaim(ctx context.Context) error {
	return s.src.RemoveAside(ctx, ClaimName)
}
