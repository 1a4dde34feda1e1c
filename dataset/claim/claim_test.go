package claim_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shade-mesh/shade/dataset/claim"
)

// published is a result kept beside the claim once built.
type published struct{ path string }

func (p published) read(context.Context) (string, bool, error) {
	b, err := os.ReadFile(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	return string(b), err == nil, err
}

// A build that fails drops its claim: the one waiting for it builds
// instead, at once, not after the claim's staleness.
func TestFailedBuildLetsTheWaiterBuild(t *testing.T) {
	dir := t.TempDir()
	place, pub := claim.File(filepath.Join(dir, "claim")), published{filepath.Join(dir, "result")}
	// A beat so long that a waiter taking over a stale claim would time
	// the test out: the waiter must see the claim dropped.
	cfg := claim.Config{Beat: 200 * time.Millisecond}
	waiting, building := make(chan string, 1), make(chan struct{})
	failed := errors.New("the store refused a shard")

	done := make(chan error, 1)
	go func() {
		c := cfg
		c.Holder = "a"
		_, _, _, err := claim.Build(context.Background(), place, c, pub.read, func(ctx context.Context, _ func(int, int)) (string, error) {
			close(building)
			<-waiting // fail only once the other waits
			return "", failed
		})
		done <- err
	}()
	<-building
	c := cfg
	c.Holder = "b"
	c.Waiting = func(w claim.Wait) { waiting <- w.Holder }
	v, out, release, err := claim.Build(context.Background(), place, c, pub.read, func(ctx context.Context, progress func(int, int)) (string, error) {
		progress(1, 1)
		return "b's", nil
	})
	if err != nil || v != "b's" || out.BuiltBy != "" || out.Alone != nil || release == nil {
		t.Fatalf("the waiter after a failed build: %q, %+v, %v; want its own build under its claim", v, out, err)
	}
	if err := <-done; !errors.Is(err, failed) {
		t.Fatalf("the failed build returned %v", err)
	}
	if text, _ := place.Read(context.Background()); text == "" {
		t.Fatal("the waiter's claim is not there while it holds it")
	}
	release()
	release() // a second call does nothing
	if text, _ := place.Read(context.Background()); text != "" {
		t.Fatalf("the claim after release: %q, want gone", text)
	}
}

// A wait ends with its context; where the claim cannot be written, the
// build goes on without one and says why.
func TestWaitEndsAndUnwritablePlace(t *testing.T) {
	dir := t.TempDir()
	place, pub := claim.File(filepath.Join(dir, "claim")), published{filepath.Join(dir, "result")}
	if err := place.Write(context.Background(), "another\n0000\nbeat 9, 3 of 7 done\n"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wait claim.Wait
	cfg := claim.Config{Beat: time.Hour, Waiting: func(w claim.Wait) { wait = w; cancel() }}
	never := func(context.Context, func(int, int)) (string, error) {
		return "", errors.New("built while another holds the claim")
	}
	if _, _, _, err := claim.Build(ctx, place, cfg, pub.read, never); !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait whose context ended: %v, want context.Canceled", err)
	}
	if wait.Holder != "another" || wait.Done != 3 || wait.Total != 7 || wait.For != 0 {
		t.Fatalf("Waiting was told %+v, want another's claim, 3 of 7 done, at once", wait)
	}

	if err := os.WriteFile(filepath.Join(dir, "a-file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	unwritable := claim.File(filepath.Join(dir, "a-file", "claim"))
	v, out, release, err := claim.Build(context.Background(), unwritable, claim.Config{}, pub.read,
		func(context.Context, func(int, int)) (string, error) { return "alone", nil })
	if err != nil || v != "alone" || out.Alone == nil || release != nil {
		t.Fatalf("with an unwritable place: %q, %+v, release %v, %v; want built alone, saying why", v, out, release != nil, err)
	}
}

// flaky is a Place whose reads numbered in failing fail, as a store that
// throttles a crowd of readers; recovered is closed at the first read
// after the last failing one.
type flaky struct {
	claim.Place
	mu        sync.Mutex
	reads     int
	failing   map[int]bool
	last      int
	recovered chan struct{}
}

func (f *flaky) Read(ctx context.Context) (string, error) {
	f.mu.Lock()
	f.reads++
	n := f.reads
	f.mu.Unlock()
	if f.failing[n] {
		return "", errors.New("503 SlowDown")
	}
	if n == f.last+1 {
		close(f.recovered)
	}
	return f.Place.Read(ctx)
}

// A waiter whose reads of the claim fail for a while (fewer beats than
// make a claim stale) goes on waiting, and reads what the holder
// published: it does not build alone.
func TestWaitOutlastsFailedReads(t *testing.T) {
	dir := t.TempDir()
	place, pub := claim.File(filepath.Join(dir, "claim")), published{filepath.Join(dir, "result")}
	cfg := claim.Config{Beat: 50 * time.Millisecond}
	building, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		c := cfg
		c.Holder = "a"
		v, _, release, err := claim.Build(context.Background(), place, c, pub.read, func(context.Context, func(int, int)) (string, error) {
			close(building)
			<-finish
			return "a's", nil
		})
		if err == nil {
			err = os.WriteFile(pub.path, []byte(v), 0o644)
			release()
		}
		done <- err
	}()
	<-building
	f := &flaky{Place: place, failing: map[int]bool{2: true, 3: true}, last: 3, recovered: make(chan struct{})}
	go func() {
		<-f.recovered // the waiter read the claim again after two failures
		close(finish)
	}()
	c := cfg
	c.Holder = "b"
	v, out, release, err := claim.Build(context.Background(), f, c, pub.read, func(context.Context, func(int, int)) (string, error) {
		return "b's", errors.New("the waiter built")
	})
	if err != nil || v != "a's" || out.BuiltBy != "a" || out.Alone != nil || release != nil {
		t.Fatalf("the waiter: %q, %+v, %v; want a's published result", v, out, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
