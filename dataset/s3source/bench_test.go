package s3source_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shade-mesh/shade/dataset/claim"
	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/internal/cputime"
	"github.com/shade-mesh/shade/internal/s3test"
	"github.com/shade-mesh/shade/internal/testsupport"
)

// BenchmarkRead reads samples of 512 bytes and of 100 KiB from a real
// gateway on loopback, 16 at a time (the Source's default bound), and
// reports this process's CPU a read: the client's cost of a read through,
// the gateway's own left out (it is another process). Every read is
// checked against the bytes put.
func BenchmarkRead(b *testing.B) {
	g := s3test.Start(b)
	g.CreateBucket(b, "bench")
	for _, size := range []int{512, 100 << 10} {
		prefix := fmt.Sprintf("s%d/", size)
		const objects = 64
		data := make([][]byte, objects)
		for i := range data {
			data[i] = bytes.Repeat([]byte{byte(i)}, size)
			g.Put(b, "bench", fmt.Sprintf("%s%03d", prefix, i), data[i])
		}
		src, err := s3source.Open(context.Background(), s3source.Config{URL: "s3://bench/" + prefix,
			Endpoint: g.Endpoint, PathStyle: true, AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.SetParallelism(8) // 16 readers on 2 CPUs
			var next atomic.Int64
			cpu := cputime.Process()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 0, size)
				for pb.Next() {
					i := int(next.Add(1) % objects)
					got, err := src.Read(i, buf[:0])
					if err != nil {
						b.Error(err)
						return
					}
					if !bytes.Equal(got, data[i]) {
						b.Errorf("sample %d: wrong bytes", i)
						return
					}
				}
			})
			b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// BenchmarkUpload uploads a directory of 512-byte samples (2,000 a run,
// under a new prefix each run) to a real gateway on loopback, 16 at a
// time (Upload's default), and reports this process's CPU an object:
// the client's cost of a PUT, the gateway's left out.
func BenchmarkUpload(b *testing.B) {
	g := s3test.Start(b)
	g.CreateBucket(b, "upload")
	const objects = 2000
	dir := writeFolder(b, objects, 512)
	cpu := cputime.Process()
	for run := 0; b.Loop(); run++ {
		rep, err := s3source.Upload(context.Background(), s3source.Config{URL: fmt.Sprintf("s3://upload/r%d", run),
			Endpoint: g.Endpoint, PathStyle: true, AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}, dir, nil)
		if err != nil || rep.Uploaded != objects {
			b.Fatalf("uploaded %d of %d: %v", rep.Uploaded, objects, err)
		}
	}
	b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/float64(b.N*objects), "cpu-us/object")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*objects), "us/object")
}

// BenchmarkOpen opens a prefix of 20,000 objects (10 folders of 2,000)
// in a real gateway on loopback with no state directory, as a peer at
// its first start: listing the prefix, and reading the listing published
// beside it.
func BenchmarkOpen(b *testing.B) {
	g := s3test.Start(b)
	const objects = 20_000
	dir := writeFolder(b, objects, 1)
	cfg := s3source.Config{URL: "s3://open/train", Endpoint: g.Endpoint, PathStyle: true, AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}
	if rep, err := s3source.Upload(context.Background(), cfg, dir, nil); err != nil || rep.Uploaded != objects {
		b.Fatalf("uploaded %d of %d: %v", rep.Uploaded, objects, err)
	}
	src, err := s3source.Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := src.PublishListing(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		relist bool
		from   s3source.ListingOrigin
	}{{"listed", true, s3source.ListingListed}, {"published", false, s3source.ListingPublished}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := cfg
			cfg.Relist = c.relist
			for b.Loop() {
				src, err := s3source.Open(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				if from, _, skipped := src.Listing(); from != c.from || src.Manifest().Len() != objects {
					b.Fatalf("listing %s (%v), %d objects; want %s, %d", from, skipped, src.Manifest().Len(), c.from, objects)
				}
			}
		})
	}
}

// BenchmarkOpenTogether is 8 peers starting at once over a prefix of
// 20,000 objects (10 folders of 2,000) with no listing published: 8 Opens
// at once, each listing the prefix ("alone"), or sharing one listing
// (Config.Share at the default beat, and at a beat of 250 ms). It reports
// the time until all 8 have opened and the list requests a start
// (lists/op).
func BenchmarkOpenTogether(b *testing.B) {
	const objects, k = 20_000, 8
	g := s3test.Start(b)
	cfg := s3source.Config{URL: "s3://open/train", Endpoint: g.Endpoint, PathStyle: true, AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}
	if rep, err := s3source.Upload(context.Background(), cfg, writeFolder(b, objects, 1), nil); err != nil || rep.Uploaded != objects {
		b.Fatalf("uploaded %d of %d: %v", rep.Uploaded, objects, err)
	}
	for _, c := range []struct {
		name  string
		share bool
		beat  time.Duration
	}{{"alone", false, 0}, {"shared", true, 0}, {"shared-250ms", true, 250 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			lists := 0
			for b.Loop() {
				b.StopTimer()
				g.Delete(b, "open", "train/.shade/"+s3source.PublishedListing)
				before := g.Lists(b)
				b.StartTimer()
				err := testsupport.Parallel(k, func(i int) error {
					cfg := cfg
					cfg.Share, cfg.Claim = c.share, claim.Config{Beat: c.beat, Holder: fmt.Sprint("peer-", i)}
					src, err := s3source.Open(context.Background(), cfg)
					if err != nil {
						return err
					}
					if src.Manifest().Len() != objects {
						return fmt.Errorf("%d objects, want %d", src.Manifest().Len(), objects)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				lists += g.Lists(b) - before
				b.StartTimer()
			}
			b.ReportMetric(float64(lists)/float64(b.N), "lists/op")
		})
	}
}

// writeFolder writes n samples of size bytes into a new folder, in 10
// class folders, and returns it.
func writeFolder(b testing.TB, n, size int) string {
	dir := b.TempDir()
	for i := range n {
		class := filepath.Join(dir, fmt.Sprintf("c%d", i%10))
		if err := os.MkdirAll(class, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(class, fmt.Sprintf("%05d.bin", i)), bytes.Repeat([]byte{byte(i)}, size), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}
