package shards_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shade-mesh/shade/dataset/claim"
	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/dataset/shards"
	"github.com/shade-mesh/shade/internal/s3test"
	"github.com/shade-mesh/shade/internal/testsupport"
)

// Two Opens of a bucket's shards at once with Share (two peers starting
// together): the first claims the build and reads every shard once, the
// second waits for its claim, then reads the index it published and no
// shard; the claim is gone after.
func TestSharedIndexInABucket(t *testing.T) {
	g, s3cfg, keys, want, _ := bucketShards(t, 4, 30)
	building, release := make(chan struct{}), make(chan struct{})
	base := shards.Config{Location: "s3://shade-wds/wds", S3: s3cfg, PublishIndex: true, Share: true,
		// Beats long enough that a waiter never takes a live build over:
		// the holder writes its claim again four times before that.
		Claim: claim.Config{Beat: 250 * time.Millisecond}}

	type opened struct {
		src *shards.Source
		err error
	}
	first, second := make(chan opened, 1), make(chan opened, 1)
	a := base
	a.Claim.Holder = "peer-a"
	a.Progress = func(done, _ int) {
		if done == 1 {
			close(building)
			<-release // the build holds here until the second Open waits
		}
	}
	go func() {
		src, err := shards.Open(context.Background(), a)
		first <- opened{src, err}
	}()
	<-building

	waitingFor := make(chan string, 1)
	b := base
	b.Claim.Holder = "peer-b"
	b.Claim.Waiting = func(w claim.Wait) { waitingFor <- w.Holder }
	b.Progress = func(int, int) { t.Error("the second Open read a shard") }
	go func() {
		src, err := shards.Open(context.Background(), b)
		second <- opened{src, err}
	}()
	if h := <-waitingFor; h != "peer-a" {
		t.Fatalf("the second Open waited for %q, want peer-a", h)
	}
	close(release)

	oa, ob := <-first, <-second
	if oa.err != nil || ob.err != nil {
		t.Fatalf("Open: %v; %v", oa.err, ob.err)
	}
	if from, _ := oa.src.IndexFrom(); from != shards.IndexBuilt {
		t.Fatalf("the claim's holder: index %s, want built", from)
	}
	if by, err := oa.src.Shared(); by != "" || err != nil {
		t.Fatalf("the claim's holder: Shared() = %q, %v; want it published", by, err)
	}
	if from, skipped := ob.src.IndexFrom(); from != shards.IndexPublished || skipped != nil {
		t.Fatalf("the waiting Open: index %s (%v), want published", from, skipped)
	}
	if by, err := ob.src.Shared(); by != "peer-a" || err != nil {
		t.Fatalf("the waiting Open: Shared() = %q, %v; want peer-a's", by, err)
	}
	gets := g.GetCounts(t, "shade-wds")
	for i := range 4 {
		if n := gets[shardKey(i)]; n != 1 {
			t.Fatalf("%d GETs of %s, want 1: the index built once (%v)", n, shardKey(i), gets)
		}
	}
	if there, err := s3source.HasAside(context.Background(), s3source.Config{URL: base.Location, Endpoint: s3cfg.Endpoint, PathStyle: true,
		AccessKeyID: s3cfg.AccessKeyID, SecretAccessKey: s3cfg.SecretAccessKey}, shards.ClaimName); there || err != nil {
		t.Fatalf("the claim after the build: there %v (%v), want gone", there, err)
	}
	if oa.src.Manifest().Version != ob.src.Manifest().Version {
		t.Fatal("the two Opens made two versions of one dataset")
	}
	checkAll(t, ob.src, keys, want)
}

func shardKey(i int) string { return fmt.Sprintf("wds/shard-%03d.tar", i) }

// Opens of a directory's shards started at the same moment all find no
// claim and write one: the last write stands, and only its writer builds.
func TestSharedIndexOpenedTogether(t *testing.T) {
	dir := t.TempDir()
	keys, want, _ := makeShards(t, dir, 3, 20)
	const k = 4
	var built, waited atomic.Int64
	srcs := make([]*shards.Source, k)
	if err := testsupport.Parallel(k, func(i int) error {
		src, err := shards.Open(context.Background(), shards.Config{Location: dir, PublishIndex: true, Share: true, Claim: claim.Config{Holder: fmt.Sprint("peer-", i)}})
		if err != nil {
			return err
		}
		srcs[i] = src
		switch from, _ := src.IndexFrom(); from {
		case shards.IndexBuilt:
			built.Add(1)
		case shards.IndexPublished:
			if by, _ := src.Shared(); by != "" {
				waited.Add(1)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if built.Load() != 1 || waited.Load() != k-1 {
		t.Fatalf("%d Opens built the index, %d waited for it; want 1 and %d", built.Load(), waited.Load(), k-1)
	}
	for _, src := range srcs {
		checkAll(t, src, keys, want)
	}
}

// A claim left by a builder that died is taken over once it has not
// changed for five beats, and one of the Open's own holder (an earlier run
// of the same peer) at once.
func TestSharedIndexTakesOverADeadClaim(t *testing.T) {
	dir := t.TempDir()
	keys, want, _ := makeShards(t, dir, 2, 30)
	claimed := filepath.Join(dir, ".shade", shards.ClaimName)
	leave := func(text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(claimed), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(claimed, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var waited []string
	cfg := shards.Config{Location: dir, PublishIndex: true, Share: true, Claim: claim.Config{Beat: 10 * time.Millisecond, Holder: "peer-b",
		Waiting: func(w claim.Wait) { waited = append(waited, w.Holder) }}}

	leave("peer-a\n0123456789abcdef\nbeat 7, 1 of 2 shards read\n")
	src, err := shards.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if from, _ := src.IndexFrom(); from != shards.IndexBuilt || len(waited) != 1 || waited[0] != "peer-a" {
		t.Fatalf("index %s after waiting for %q; want built after waiting for peer-a", from, waited)
	}
	if _, err := os.Stat(claimed); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the claim after the build: %v, want gone", err)
	}
	checkAll(t, src, keys, want)
	if src, err = shards.Open(context.Background(), shards.Config{Location: dir}); err != nil {
		t.Fatal(err)
	}
	if from, _ := src.IndexFrom(); from != shards.IndexPublished {
		t.Fatalf("an Open after the build: index %s, want the one published", from)
	}

	// Its own holder's claim: no wait.
	if err := os.Remove(filepath.Join(dir, ".shade", shards.PublishedIndex)); err != nil {
		t.Fatal(err)
	}
	waited = nil
	leave("peer-b\nfedcba9876543210\nbeat 2, 0 of 2 shards read\n")
	if src, err = shards.Open(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if from, _ := src.IndexFrom(); from != shards.IndexBuilt || waited != nil {
		t.Fatalf("with its own earlier claim: index %s after waiting for %q; want built at once", from, waited)
	}
}

// Where no claim can be written (here the hidden folder is a file), an
// Open with Share builds the index alone, serves the shards, and says why
// the index was not shared.
func TestSharedIndexUnwritable(t *testing.T) {
	dir := t.TempDir()
	keys, want, _ := makeShards(t, dir, 2, 30)
	if err := os.WriteFile(filepath.Join(dir, ".shade"), []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := shards.Open(context.Background(), shards.Config{Location: dir, PublishIndex: true, Share: true})
	if err != nil {
		t.Fatalf("Open with Share where nothing can be written: %v, want the shards indexed alone", err)
	}
	if from, _ := src.IndexFrom(); from != shards.IndexBuilt {
		t.Fatalf("index %s, want built", from)
	}
	if _, err := src.Shared(); !errors.Is(err, claim.ErrNotShared) {
		t.Fatalf("Shared() error %v, want claim.ErrNotShared", err)
	}
	checkAll(t, src, keys, want)
}

// BenchmarkOpenTogether is k peers starting at once over a bucket's shards
// with no index published (16 shards of 2,000 samples of 4 KiB + 10 B):
// k Opens at once, each alone (every one reads every shard) or sharing
// the build (Config.Share at the default beat, and at a beat of 250 ms).
// It reports the time until all k have opened and the bytes of answers'
// bodies read from the store by all k (read-B/op).
func BenchmarkOpenTogether(b *testing.B) {
	const nShards, per, k = 16, 2000, 8
	g := s3test.Start(b)
	g.CreateBucket(b, "bench-wds")
	dir := b.TempDir()
	for s := range nShards {
		var files []file
		for j := range per {
			files = append(files, file{fmt.Sprintf("s%03d-%04d.bin", s, j), bytes.Repeat([]byte{byte(j)}, 4<<10)},
				file{fmt.Sprintf("s%03d-%04d.json", s, j), bytes.Repeat([]byte{'x'}, 10)})
		}
		g.Put(b, "bench-wds", fmt.Sprintf("wds/shard-%03d.tar", s), writeTar(b, filepath.Join(dir, fmt.Sprintf("shard-%03d.tar", s)), files))
	}
	read := &bodyBytes{rt: &http.Transport{DisableCompression: true}}
	s3cfg := s3source.Config{Endpoint: g.Endpoint, PathStyle: true, AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey, Transport: read}
	for _, c := range []struct {
		name  string
		share bool
		beat  time.Duration
	}{{"alone", false, 0}, {"shared", true, 0}, {"shared-250ms", true, 250 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			read.n.Store(0)
			var built atomic.Int64
			for b.Loop() {
				b.StopTimer()
				g.Delete(b, "bench-wds", "wds/.shade/"+shards.PublishedIndex)
				b.StartTimer()
				err := testsupport.Parallel(k, func(i int) error {
					src, err := shards.Open(context.Background(), shards.Config{Location: "s3://bench-wds/wds", S3: s3cfg,
						PublishIndex: c.share, Share: c.share, Claim: claim.Config{Beat: c.beat, Holder: fmt.Sprint("peer-", i)}})
					if err != nil {
						return err
					}
					if src.Manifest().Len() != nShards*per {
						return fmt.Errorf("%d samples, want %d", src.Manifest().Len(), nShards*per)
					}
					if from, _ := src.IndexFrom(); from == shards.IndexBuilt {
						built.Add(1)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(read.n.Load())/float64(b.N), "read-B/op")
			b.ReportMetric(float64(built.Load())/float64(b.N), "builds/op")
		})
	}
}
