package shards_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/dataset/shards"
	"github.com/shade-mesh/shade/internal/binfile"
	"github.com/shade-mesh/shade/internal/s3test"
)

type file struct {
	name string
	data []byte
}

// writeTar writes a tar of the files to path.
func writeTar(t testing.TB, path string, files []file) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	tw.Close()
	if path != "" {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// makeShards writes nShards shards of per samples each (members jpg, cls
// and, for every third sample, a long-named json) and returns the expected
// samples in order: key and members.
func makeShards(t testing.TB, dir string, nShards, per int) ([]string, []map[string][]byte, [][]byte) {
	t.Helper()
	var keys []string
	var want []map[string][]byte
	var tars [][]byte
	for s := range nShards {
		var files []file
		for j := range per {
			i := s*per + j
			key := fmt.Sprintf("part%d/s%05d", s, i)
			m := map[string][]byte{
				"jpg": bytes.Repeat([]byte{byte(i)}, 100+i*37%3000),
				"cls": []byte(fmt.Sprint(i % 10)),
			}
			files = append(files, file{key + ".jpg", m["jpg"]}, file{key + ".cls", m["cls"]})
			if i%3 == 0 {
				m["meta.json"] = bytes.Repeat([]byte("{}"), 200)
				files = append(files, file{key + ".meta.json", m["meta.json"]})
			}
			keys = append(keys, key)
			want = append(want, m)
		}
		files = append(files, file{"./.hidden", []byte("skipped")})
		tars = append(tars, writeTar(t, filepath.Join(dir, fmt.Sprintf("shard-%03d.tar", s)), files))
	}
	os.WriteFile(filepath.Join(dir, "README"), []byte("not a shard"), 0o644)
	return keys, want, tars
}

func checkAll(t *testing.T, src *shards.Source, keys []string, want []map[string][]byte) {
	t.Helper()
	m := src.Manifest()
	if !slices.Equal(m.Names.Strings(), keys) {
		t.Fatalf("names %v..., want %v...", m.Names.Strings()[:min(3, m.Len())], keys[:3])
	}
	if m.Encoding != dataset.EncodingWDS {
		t.Fatalf("manifest encoding %q, want %q", m.Encoding, dataset.EncodingWDS)
	}
	for i := range keys {
		b, err := src.Read(i, []byte("x"))
		if err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		if b[0] != 'x' || int64(len(b)-1) != m.Sizes.At(i) {
			t.Fatalf("sample %d: %d bytes, manifest says %d", i, len(b)-1, m.Sizes.At(i))
		}
		var got map[string][]byte
		if err := msgpack.Unmarshal(b[1:], &got); err != nil {
			t.Fatalf("sample %d: not msgpack: %v", i, err)
		}
		if len(got) != len(want[i]) {
			t.Fatalf("sample %d: members %d, want %d", i, len(got), len(want[i]))
		}
		for ext, data := range want[i] {
			if !bytes.Equal(got[ext], data) {
				t.Fatalf("sample %d member %s: wrong bytes", i, ext)
			}
		}
	}
}

func TestDirShardsByteExact(t *testing.T) {
	dir := t.TempDir()
	keys, want, _ := makeShards(t, dir, 3, 40)
	state := t.TempDir()
	src, err := shards.Open(context.Background(), shards.Config{Location: dir, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, src, keys, want)
	again, err := shards.Open(context.Background(), shards.Config{Location: dir, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if again.Manifest().Version != src.Manifest().Version {
		t.Fatal("the kept index gives another version")
	}
	// A shard rewritten after indexing: its samples fail, others are served.
	path := filepath.Join(dir, "shard-001.tar")
	b, _ := os.ReadFile(path)
	os.WriteFile(path, b, 0o644)
	os.Chtimes(path, time.Now().Add(time.Hour), time.Now().Add(time.Hour))
	if _, err := src.Read(40, nil); !errors.Is(err, dataset.ErrChanged) {
		t.Fatalf("sample of a rewritten shard: %v", err)
	}
	if _, err := src.Read(0, nil); err != nil {
		t.Fatal(err)
	}
}

func TestCompressedAndBadLayoutsRefused(t *testing.T) {
	dir := t.TempDir()
	makeShards(t, dir, 1, 3)
	os.WriteFile(filepath.Join(dir, "more.tar.gz"), []byte{0x1f, 0x8b, 8}, 0o644)
	_, err := shards.Open(context.Background(), shards.Config{Location: dir})
	if !errors.Is(err, shards.ErrCompressed) {
		t.Fatalf(".tar.gz: %v", err)
	}
	t.Log(err)

	dir = t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(writeTar(t, "", []file{{"a.jpg", []byte("x")}}))
	zw.Close()
	os.WriteFile(filepath.Join(dir, "s.tar"), gz.Bytes(), 0o644)
	if _, err := shards.Open(context.Background(), shards.Config{Location: dir}); !errors.Is(err, shards.ErrCompressed) {
		t.Fatalf("gzip behind .tar: %v", err)
	}

	dir = t.TempDir()
	writeTar(t, filepath.Join(dir, "s.tar"), []file{{"a.jpg", []byte("1")}, {"b.jpg", []byte("2")}, {"a.cls", []byte("3")}})
	if _, err := shards.Open(context.Background(), shards.Config{Location: dir}); !errors.Is(err, shards.ErrLayout) {
		t.Fatalf("members apart: %v", err)
	}
	dir = t.TempDir()
	whole := writeTar(t, "", []file{{"a.jpg", bytes.Repeat([]byte("1"), 5000)}, {"b.jpg", []byte("2")}})
	os.WriteFile(filepath.Join(dir, "s.tar"), whole[:2048], 0o644)
	if _, err := shards.Open(context.Background(), shards.Config{Location: dir}); err == nil {
		t.Fatal("a truncated shard accepted")
	} else {
		t.Log(err)
	}
	if _, err := shards.Open(context.Background(), shards.Config{Location: t.TempDir()}); !errors.Is(err, dataset.ErrEmpty) {
		t.Fatalf("no shards: %v", err)
	}
}

// bucketShards puts makeShards' shards (nShards of per samples each) into
// bucket shade-wds under wds/ of a new gateway; it returns the gateway, an
// s3source.Config that reaches it and what makeShards returns.
func bucketShards(t *testing.T, nShards, per int) (*s3test.Gateway, s3source.Config, []string, []map[string][]byte, [][]byte) {
	t.Helper()
	g := s3test.Start(t)
	g.CreateBucket(t, "shade-wds")
	dir := t.TempDir()
	keys, want, tars := makeShards(t, dir, nShards, per)
	for i, b := range tars {
		g.Put(t, "shade-wds", fmt.Sprintf("wds/shard-%03d.tar", i), b)
	}
	return g, s3source.Config{Endpoint: g.Endpoint, PathStyle: true, AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}, keys, want, tars
}

func TestS3ShardsByRangedReads(t *testing.T) {
	g, s3cfg, keys, want, _ := bucketShards(t, 2, 30)
	cfg := shards.Config{Location: "s3://shade-wds/wds", StateDir: t.TempDir(), S3: s3cfg}
	src, err := shards.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shards.Open(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if gets := g.GetCounts(t, "shade-wds"); gets["wds/shard-000.tar"] != 1 || gets["wds/shard-001.tar"] != 1 {
		t.Fatalf("indexing twice with a state dir: GETs %v, want one per shard", gets)
	}
	checkAll(t, src, keys, want)
	if gets := g.GetCounts(t, "shade-wds"); gets["wds/shard-000.tar"] != 1+30 {
		t.Fatalf("GETs of shard 0 after reading its 30 samples: %d, want 1 + 30 ranged reads", gets["wds/shard-000.tar"])
	}
}

// A bucket's shard is indexed by its headers where its members are
// large: one request for the shard's start and one past each member of
// over 4 MiB, not every byte; and the index gives every sample's bytes.
func TestS3ShardIndexPassesOverLargeMembers(t *testing.T) {
	g := s3test.Start(t)
	g.CreateBucket(t, "shade-wds")
	const nShards, per, large = 2, 3, 5 << 20
	var keys []string
	var want []map[string][]byte
	for s := range nShards {
		var files []file
		for j := range per {
			key := fmt.Sprintf("clip%d-%d", s, j)
			m := map[string][]byte{"mp4": bytes.Repeat([]byte{byte(s*per + j)}, large+j), "json": []byte(fmt.Sprintf(`{"i":%d}`, j))}
			files = append(files, file{key + ".mp4", m["mp4"]}, file{key + ".json", m["json"]})
			keys, want = append(keys, key), append(want, m)
		}
		g.Put(t, "shade-wds", fmt.Sprintf("wds/shard-%03d.tar", s), writeTar(t, "", files))
	}
	cfg := shards.Config{Location: "s3://shade-wds/wds",
		S3: s3source.Config{Endpoint: g.Endpoint, PathStyle: true, AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey}}
	src, err := shards.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	gets := g.GetCounts(t, "shade-wds")
	for s := range nShards {
		if k := fmt.Sprintf("wds/shard-%03d.tar", s); gets[k] != 1+per {
			t.Fatalf("indexing %s took %d GETs, want %d: one, and one past each large member", k, gets[k], 1+per)
		}
	}
	checkAll(t, src, keys, want)
}

// openDirShards writes nShards shards of per samples (makeShards) to a
// new folder and opens them; it returns the folder and what makeShards
// returns.
func openDirShards(tb testing.TB, nShards, per int) (*shards.Source, string, []string, []map[string][]byte) {
	tb.Helper()
	dir := tb.TempDir()
	keys, want, _ := makeShards(tb, dir, nShards, per)
	src, err := shards.Open(context.Background(), shards.Config{Location: dir, StateDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	return src, dir, keys, want
}

// BenchmarkDirShardRead reads random samples (100 to 3,100 bytes of jpg,
// a class, some metadata) out of 8 shards of 200 in a folder.
func BenchmarkDirShardRead(b *testing.B) {
	src, _, keys, _ := openDirShards(b, 8, 200)
	b.ReportAllocs()
	var buf []byte
	var err error
	for i := 0; b.Loop(); i++ {
		if buf, err = src.Read(i*7919%len(keys), buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDirShardsReadConcurrently reads every sample from four goroutines at
// once, each into buffers it reuses, while the Source reuses its span
// buffers between them: every sample is byte-exact.
func TestDirShardsReadConcurrently(t *testing.T) {
	src, _, _, want := openDirShards(t, 3, 40)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var buf []byte
			var err error
			for k := range len(want) * 3 {
				i := (k*7 + g*13) % len(want)
				if buf, err = src.Read(i, buf[:0]); err != nil {
					errs <- err
					return
				}
				var got map[string][]byte
				if err := msgpack.Unmarshal(buf, &got); err != nil || len(got) != len(want[i]) {
					errs <- fmt.Errorf("sample %d: %d members, %v", i, len(got), err)
					return
				}
				for ext, data := range want[i] {
					if !bytes.Equal(got[ext], data) {
						errs <- fmt.Errorf("sample %d member %s: wrong bytes", i, ext)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestDirShardReplacedRefused: a shard cut short, and a FIFO put in a
// shard's place, fail their samples as changed (the FIFO without blocking
// the open); the other shards serve.
func TestDirShardReplacedRefused(t *testing.T) {
	src, dir, _, _ := openDirShards(t, 3, 40)
	if err := os.Truncate(filepath.Join(dir, "shard-002.tar"), 1024); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "shard-000.tar")
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 39, 80, 119} {
		if _, err := src.Read(i, nil); !errors.Is(err, dataset.ErrChanged) {
			t.Errorf("sample %d: %v, want ErrChanged", i, err)
		}
	}
	if _, err := src.Read(40, nil); err != nil {
		t.Errorf("sample 40, of a shard as it was: %v", err)
	}
}

// TestIndexOfManyShards: more shards than are indexed at once give the
// samples in shard order, every byte right, as one pass would.
// TestIndexOfManyShards indexes more shards than are read at once; its
// progress is told once a shard, counting up to all of them, one call at
// a time.
func TestIndexOfManyShards(t *testing.T) {
	dir := t.TempDir()
	keys, want, _ := makeShards(t, dir, 41, 7)
	var (
		calls  []int
		inCall atomic.Int32
	)
	src, err := shards.Open(context.Background(), shards.Config{Location: dir, Progress: func(done, total int) {
		if inCall.Add(1) != 1 || total != 41 {
			t.Errorf("progress (%d, %d) called beside another call, or not of 41 shards", done, total)
		}
		calls = append(calls, done)
		inCall.Add(-1)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 41 || !slices.IsSorted(calls) || calls[40] != 41 {
		t.Fatalf("progress: %v, want 1..41", calls)
	}
	checkAll(t, src, keys, want)
}

// TestIndexErrorIsTheFirstInShardOrder: shards indexed at once still
// report the error one pass over the shards in order meets first, and a
// key in two shards is found wherever they are read.
func TestIndexErrorIsTheFirstInShardOrder(t *testing.T) {
	broken := func(t *testing.T, bad map[int][]file) string {
		dir := t.TempDir()
		for s := range 40 {
			files := bad[s]
			if files == nil {
				files = []file{{fmt.Sprintf("k%02d-a.jpg", s), []byte("a")}, {fmt.Sprintf("k%02d-b.jpg", s), []byte("b")}}
			}
			writeTar(t, filepath.Join(dir, fmt.Sprintf("shard-%03d.tar", s)), files)
		}
		return dir
	}
	apart := []file{{"x.jpg", []byte("1")}, {"y.jpg", []byte("2")}, {"x.cls", []byte("3")}}
	twice := []file{{"z.jpg", []byte("1")}, {"z.jpg", []byte("2")}}
	for _, c := range []struct {
		name string
		bad  map[int][]file
		want string
	}{
		{"two broken shards", map[int][]file{5: apart, 30: twice}, "sample x appears twice (again in shard-005.tar)"},
		{"another layout error first", map[int][]file{5: twice, 30: apart}, "shard-005.tar holds z.jpg twice"},
		{"a key in two shards", map[int][]file{3: {{"k03-a.jpg", []byte("a")}}, 21: {{"k03-a.cls", []byte("a")}}},
			"sample k03-a appears twice (again in shard-021.tar)"},
		{"a key in two shards before a broken one", map[int][]file{3: {{"dup.jpg", []byte("a")}}, 21: {{"dup.cls", []byte("a")}}, 35: apart},
			"sample dup appears twice (again in shard-021.tar)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := broken(t, c.bad)
			for range 5 {
				_, err := shards.Open(context.Background(), shards.Config{Location: dir})
				if !errors.Is(err, shards.ErrLayout) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v, want ErrLayout saying %q", err, c.want)
				}
			}
		})
	}
}

// BenchmarkIndex builds the index of shards in a directory and in a
// bucket of a real gateway on loopback, reading one shard at a time and
// DefaultIndexShards at once: 32 shards of 1 MiB (40 samples of 25 KiB
// each), 16 shards of 4 MiB (100 samples, each a member of 40 KiB and one
// of 200 bytes), 8 shards of 64 MiB (8 samples, each a member of 8 MiB
// and one of 100 bytes) and 16 shards of 11 MB (2,000 samples, each a
// member of 4 KiB and one of 10 bytes). A directory's shards are read by
// their headers; a bucket's streamed, except past members of over 4 MiB.
// And the shards opened through the index published beside them.
func BenchmarkIndex(b *testing.B) {
	for _, shape := range []struct {
		name         string
		nShards, per int
		size, small  int
	}{{"25KiB", 32, 40, 25 << 10, 0}, {"40KiB+200B", 16, 100, 40 << 10, 200}, {"8MiB", 8, 8, 8 << 20, 100}, {"4KiB+10B", 16, 2000, 4 << 10, 10}} {
		dir := b.TempDir()
		var tars [][]byte
		for s := range shape.nShards {
			var files []file
			for j := range shape.per {
				files = append(files, file{fmt.Sprintf("s%03d-%03d.bin", s, j), bytes.Repeat([]byte{byte(j)}, shape.size)})
				if shape.small > 0 {
					files = append(files, file{fmt.Sprintf("s%03d-%03d.json", s, j), bytes.Repeat([]byte{'x'}, shape.small)})
				}
			}
			tars = append(tars, writeTar(b, filepath.Join(dir, fmt.Sprintf("shard-%03d.tar", s)), files))
		}
		g := s3test.Start(b)
		g.CreateBucket(b, "bench-wds")
		var total int64
		for i, t := range tars {
			g.Put(b, "bench-wds", fmt.Sprintf("wds/shard-%03d.tar", i), t)
			total += int64(len(t))
		}
		tars = nil
		read := &bodyBytes{rt: &http.Transport{DisableCompression: true}}
		s3cfg := s3source.Config{Endpoint: g.Endpoint, PathStyle: true, AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey, Transport: read}
		// opens times Open of cfg, which must find its index as from says.
		opens := func(b *testing.B, cfg shards.Config, from shards.Origin) {
			b.SetBytes(total)
			read.n.Store(0)
			for b.Loop() {
				src, err := shards.Open(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				if got, skipped := src.IndexFrom(); got != from || src.Manifest().Len() != shape.nShards*shape.per {
					b.Fatalf("index %s (%v), %d samples; want %s, %d", got, skipped, src.Manifest().Len(), from, shape.nShards*shape.per)
				}
			}
			b.ReportMetric(float64(read.n.Load())/float64(b.N), "read-B/op")
		}
		for _, where := range []string{"dir", "s3"} {
			cfg := shards.Config{Location: dir}
			if where == "s3" {
				cfg = shards.Config{Location: "s3://bench-wds/wds", S3: s3cfg}
			}
			for _, at := range []int{1, shards.DefaultIndexShards} {
				b.Run(fmt.Sprintf("%s/%s/%d-at-once", shape.name, where, at), func(b *testing.B) {
					cfg.IndexShards = at
					opens(b, cfg, shards.IndexBuilt)
				})
			}
			// The same shards opened through their published index, as
			// every peer but the one that published opens them.
			b.Run(shape.name+"/"+where+"/published", func(b *testing.B) {
				cfg.PublishIndex = true
				if _, err := shards.Open(context.Background(), cfg); err != nil {
					b.Fatal(err)
				}
				cfg.PublishIndex = false
				opens(b, cfg, shards.IndexPublished)
			})
		}
	}
}

// An index published beside a bucket's shards is what every later Open
// without a kept index reads, one GET, instead of the shards' headers,
// while the shards are those it was built from; otherwise (shards
// changed, a damaged index, Reindex) the shards are indexed again and
// serve the right bytes.
func TestPublishedIndex(t *testing.T) {
	g, s3cfg, keys, want, tars := bucketShards(t, 2, 30)
	open := func(cfg shards.Config) (*shards.Source, shards.Origin, error) {
		t.Helper()
		cfg.Location, cfg.S3 = "s3://shade-wds/wds", s3cfg
		src, err := shards.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		from, skipped := src.IndexFrom()
		return src, from, skipped
	}
	const indexKey = "wds/.shade/" + shards.PublishedIndex
	shardGets := func() int {
		gets := g.GetCounts(t, "shade-wds")
		return gets["wds/shard-000.tar"] + gets["wds/shard-001.tar"]
	}

	src, from, skipped := open(shards.Config{PublishIndex: true})
	if from != shards.IndexBuilt || skipped != nil {
		t.Fatalf("first Open: index %s (%v), want built, nothing skipped", from, skipped)
	}
	version := src.Manifest().Version
	if n := shardGets(); n != 2 {
		t.Fatalf("building the index took %d GETs of the shards, want 2", n)
	}

	src, from, skipped = open(shards.Config{})
	if from != shards.IndexPublished || skipped != nil {
		t.Fatalf("Open after publishing: index %s (%v), want the published one", from, skipped)
	}
	if n, idx := shardGets(), g.GetCounts(t, "shade-wds")[indexKey]; n != 2 || idx != 2 {
		t.Fatalf("Open after publishing: %d GETs of the shards (want still 2) and %d of the index (want 2: the first Open's found none)", n, idx)
	}
	if src.Manifest().Version != version {
		t.Fatalf("the published index changed the dataset's version: %s, was %s", src.Manifest().Version, version)
	}
	checkAll(t, src, keys, want)

	// With a state directory, the published index is kept there.
	state := t.TempDir()
	open(shards.Config{StateDir: state})
	if _, from, _ = open(shards.Config{StateDir: state}); from != shards.IndexKept {
		t.Fatalf("a second Open with the state directory: index %s, want kept", from)
	}
	if idx := g.GetCounts(t, "shade-wds")[indexKey]; idx != 3 {
		t.Fatalf("%d GETs of the published index, want 3 (the Open that kept it read it once)", idx)
	}

	// Reindex reads the shards, whatever is published.
	if _, from, skipped = open(shards.Config{Reindex: true}); from != shards.IndexBuilt || skipped != nil {
		t.Fatalf("Reindex: index %s (%v), want built", from, skipped)
	}

	// A shard changed since publishing: the published index is not of
	// these shards, also where a listing of the prefix is published (the
	// shards' own listing is read, never a published one).
	lsrc, err := s3source.Open(context.Background(), s3source.Config{URL: "s3://shade-wds/wds", Endpoint: g.Endpoint, PathStyle: true,
		AccessKeyID: g.AccessKey, SecretAccessKey: g.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := lsrc.PublishListing(context.Background()); err != nil {
		t.Fatal(err)
	}
	files := readTar(t, tars[1])
	files = append(files, file{"late.cls", []byte("7")})
	g.Put(t, "shade-wds", "wds/shard-001.tar", writeTar(t, "", files))
	src, from, skipped = open(shards.Config{})
	if from != shards.IndexBuilt || !errors.Is(skipped, binfile.ErrFile) {
		t.Fatalf("Open after a shard changed: index %s (%v), want built, the published one skipped as of other shards", from, skipped)
	}
	keys2, want2 := append(slices.Clone(keys), "late"), append(slices.Clone(want), map[string][]byte{"cls": []byte("7")})
	checkAll(t, src, keys2, want2)

	// Published again, then damaged: skipped, indexed again.
	if _, from, _ = open(shards.Config{PublishIndex: true}); from != shards.IndexBuilt {
		t.Fatalf("publishing after the change: index %s, want built", from)
	}
	if _, from, _ = open(shards.Config{}); from != shards.IndexPublished {
		t.Fatalf("Open after publishing again: index %s, want published", from)
	}
	g.Put(t, "shade-wds", indexKey, []byte("shade-shards-index/2\nnot an index"))
	src, from, skipped = open(shards.Config{})
	if from != shards.IndexBuilt || !errors.Is(skipped, binfile.ErrFile) {
		t.Fatalf("Open with a damaged published index: index %s (%v), want built", from, skipped)
	}
	checkAll(t, src, keys2, want2)

}

// TestPublishedIndexOfADirectory: a directory's shards (a shared file
// system's) publish their index in the directory's hidden folder, readable
// by every user, and an Open with none kept reads it there; a shard
// touched since is indexed again.
func TestPublishedIndexOfADirectory(t *testing.T) {
	dir := t.TempDir()
	keys, want, _ := makeShards(t, dir, 2, 30)
	open := func(cfg shards.Config) (*shards.Source, shards.Origin, error) {
		t.Helper()
		cfg.Location = dir
		src, err := shards.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		from, skipped := src.IndexFrom()
		return src, from, skipped
	}
	if _, from, _ := open(shards.Config{}); from != shards.IndexBuilt {
		t.Fatalf("before publishing: index %s, want built", from)
	}
	if _, from, _ := open(shards.Config{PublishIndex: true}); from != shards.IndexBuilt {
		t.Fatalf("publishing: index %s, want built", from)
	}
	info, err := os.Stat(filepath.Join(dir, ".shade", shards.PublishedIndex))
	if err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("the published index: %v, %v; want a file of mode 0644", info, err)
	}
	src, from, skipped := open(shards.Config{})
	if from != shards.IndexPublished || skipped != nil {
		t.Fatalf("after publishing: index %s (%v), want published", from, skipped)
	}
	checkAll(t, src, keys, want)

	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "shard-001.tar"), later, later); err != nil {
		t.Fatal(err)
	}
	src, from, skipped = open(shards.Config{})
	if from != shards.IndexBuilt || !errors.Is(skipped, binfile.ErrFile) {
		t.Fatalf("after a shard was touched: index %s (%v), want built, the published one skipped", from, skipped)
	}
	checkAll(t, src, keys, want)
}

// readTar returns a tar's files.
func readTar(t *testing.T, b []byte) []file {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var files []file
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file{hdr.Name, data})
	}
}

// bodyBytes is an HTTP transport that counts the bytes of the answers'
// bodies read through it.
type bodyBytes struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (c *bodyBytes) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err == nil {
		resp.Body = &countedBody{ReadCloser: resp.Body, n: &c.n}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}
