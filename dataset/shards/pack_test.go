package shards

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/shade-mesh/shade/internal/atomicfile"
	"github.com/shade-mesh/shade/internal/binfile"
	"github.com/shade-mesh/shade/internal/jsonstream"
)

// samplesOf makes n samples as indexShard would, in shards of per: each
// with members jpg (size i%3000+1), cls (1 byte) and, every third, json.
func samplesOf(n, per int) []sample {
	out := make([]sample, 0, n)
	off := int64(512)
	for i := range n {
		if i%per == 0 {
			off = 512
		}
		s := sample{Key: fmt.Sprintf("dir/%08d", i), Shard: i / per, Start: off}
		exts := []string{"jpg", "cls"}
		if i%3 == 0 {
			exts = append(exts, "json")
		}
		rel := int64(0)
		for k, ext := range exts {
			size := int64(1)
			if k == 0 {
				size = int64(i%3000 + 1)
			}
			s.Members = append(s.Members, member{Ext: ext, Off: rel, Size: size})
			s.End = s.Start + rel + size
			rel += (size+511)/512*512 + 512 // data padded, then the next header
		}
		off = s.End + 1024
		out = append(out, s)
	}
	return out
}

// TestPackKeepsEverySample: the packed index gives each sample's shard,
// span and members (extension, offset, size) as the samples held them,
// and so the same encoding of its bytes.
func TestPackKeepsEverySample(t *testing.T) {
	samples := samplesOf(10_000, 700)
	p, err := pack(samples)
	if err != nil {
		t.Fatal(err)
	}
	if p.len() != len(samples) || len(p.exts) != 3 {
		t.Fatalf("%d samples and %d extensions packed, want %d and 3", p.len(), len(p.exts), len(samples))
	}
	for i, smp := range samples {
		ms, start, end := p.span(i)
		if int(p.shard[i]) != smp.Shard || start != smp.Start || end != smp.End || len(ms) != len(smp.Members) {
			t.Fatalf("sample %d: shard %d span [%d, %d) %d members, want %d [%d, %d) %d", i,
				p.shard[i], start, end, len(ms), smp.Shard, smp.Start, smp.End, len(smp.Members))
		}
		span := make([]byte, end-start)
		for k := range span {
			span[k] = byte(k * 7)
		}
		// The encoding from the samples' members, as Read made it before.
		var want []byte
		want = appendHeader(want, len(smp.Members), 0x80, 16, 0, 0xde, 0xdf)
		for _, m := range smp.Members {
			want = appendHeader(want, len(m.Ext), 0xa0, 32, 0xd9, 0xda, 0xdb)
			want = append(want, m.Ext...)
			want = appendHeader(want, int(m.Size), 0, 0, 0xc4, 0xc5, 0xc6)
			want = append(want, span[m.Off:m.Off+m.Size]...)
		}
		if got := appendSample(nil, ms, p.exts, span); !slices.Equal(got, want) || int64(len(got)) != encodedSize(smp.Members) {
			t.Fatalf("sample %d encodes to %d bytes, want %d (encodedSize %d)", i, len(got), len(want), encodedSize(smp.Members))
		}
	}
}

// A saved index whose samples break indexShard's rules is refused, not
// packed into wrong spans.
func TestPackRefusesABadIndex(t *testing.T) {
	for name, bad := range map[string]func(s *sample){
		"no members":        func(s *sample) { s.Members = nil },
		"a member of 4 GiB": func(s *sample) { s.Members[0].Size = 1 << 32 },
		"a negative size":   func(s *sample) { s.Members[1].Size = -1 },
		"a negative offset": func(s *sample) { s.Members[1].Off = -5 },
		"a negative shard":  func(s *sample) { s.Shard = -1 },
	} {
		samples := samplesOf(10, 4)
		bad(&samples[7])
		if _, err := pack(samples); !errors.Is(err, ErrLayout) {
			t.Errorf("%s: pack gave %v, want ErrLayout", name, err)
		}
	}
}

// BenchmarkIndexMemory: the Go heap an index of 1,000,000 samples holds
// (two or three members each), as the samples indexShard makes and
// packed as a Source keeps it.
func BenchmarkIndexMemory(b *testing.B) {
	const n = 1_000_000
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for b.Loop() {
		before := heap()
		samples := samplesOf(n, 10_000)
		samples = slices.Clip(samples)
		asSamples := heap() - before
		p, err := pack(samples)
		if err != nil {
			b.Fatal(err)
		}
		runtime.KeepAlive(samples)
		samples = nil
		packed := heap() - before
		runtime.KeepAlive(p)
		b.ReportMetric(float64(asSamples)/n, "samples-B/sample")
		b.ReportMetric(float64(packed)/n, "packed-B/sample")
	}
}

// TestIndexRoundTrip: an index saved reads back whole; an index of other
// shards (another check), cut short, with a byte changed or with bytes
// after it is not used (nil: index again).
func TestIndexRoundTrip(t *testing.T) {
	dir := t.TempDir()
	samples := samplesOf(2000, 300)
	samples[7].Members[0].Ext = "ünïcode/ext"
	samples[8].Key = strings.Repeat("k", 1000)
	path := filepath.Join(dir, "ix")
	if err := saveIndex(path, "dir:abc", samples); err != nil {
		t.Fatal(err)
	}
	got, legacy := loadIndex(path, "dir:abc")
	if legacy || len(got) != len(samples) {
		t.Fatalf("read back %d samples (legacy %v), want %d", len(got), legacy, len(samples))
	}
	sameSamples(t, got, samples)
	if got, _ := loadIndex(path, "dir:other"); got != nil {
		t.Fatalf("an index of other shards gave %d samples", len(got))
	}
	whole, _ := os.ReadFile(path)
	for _, r := range []io.Reader{iotest.OneByteReader(bytes.NewReader(whole)), iotest.HalfReader(bytes.NewReader(whole))} {
		got, err := readIndex(r, int64(len(whole)), "dir:abc")
		if err != nil {
			t.Fatalf("read in small pieces: %v", err)
		}
		sameSamples(t, got, samples)
	}
	bad := filepath.Join(dir, "bad")
	for _, n := range []int{0, 1, 30, len(whole) / 3, len(whole) - 4, len(whole) - 1} {
		os.WriteFile(bad, whole[:n], 0o600)
		if got, _ := loadIndex(bad, "dir:abc"); got != nil {
			t.Fatalf("index cut at %d of %d bytes: %d samples, want none", n, len(whole), len(got))
		}
	}
	for _, at := range []int{len(indexMagic), len(whole) / 2, len(whole) - 2} {
		changed := slices.Clone(whole)
		changed[at] ^= 0x10
		os.WriteFile(bad, changed, 0o600)
		if got, _ := loadIndex(bad, "dir:abc"); got != nil {
			t.Fatalf("index with byte %d changed: %d samples, want none", at, len(got))
		}
	}
	os.WriteFile(bad, append(slices.Clone(whole), 0), 0o600)
	if got, _ := loadIndex(bad, "dir:abc"); got != nil {
		t.Fatalf("index with a byte after it: %d samples, want none", len(got))
	}
}

// An index damaged where it counts samples or members makes no room
// beyond what the rest of the file could fill.
func TestIndexCountsBoundedByTheFile(t *testing.T) {
	var b []byte
	b = append(b, indexMagic...)
	b = binary.AppendUvarint(b, 1)
	b = append(b, 'c')
	b = binary.AppendUvarint(b, 1)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "key"...)
	b = append(b, 0, 0, 1)
	b = binary.AppendUvarint(b, 1<<40) // members
	if _, err := readIndex(bytes.NewReader(b), int64(len(b)), "c"); !errors.Is(err, binfile.ErrFile) {
		t.Fatalf("2^40 members: %v", err)
	}
	b = append(b[:len(indexMagic)], 1, 'c')
	b = binary.AppendUvarint(b, 1<<40) // samples
	if _, err := readIndex(bytes.NewReader(b), int64(len(b)), "c"); !errors.Is(err, binfile.ErrFile) {
		t.Fatalf("2^40 samples: %v", err)
	}
}

// The JSON index of an earlier build beside the path is read, in pieces
// or as one document, once: Open saves it again in this form and removes
// it. One of another format is not used.
func TestIndexOfAnEarlierBuild(t *testing.T) {
	dir := t.TempDir()
	samples := samplesOf(500, 100)
	path := filepath.Join(dir, "ix")
	writeJSONIndex(t, path+".json", indexFormat, "dir:abc", samples)
	got, legacy := loadIndex(path, "dir:abc")
	if !legacy {
		t.Fatal("the earlier build's index not read as such")
	}
	sameSamples(t, got, samples)
	if err := saveIndex(path, "dir:abc", got); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".json"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the earlier build's index left: %v", err)
	}
	if got, legacy := loadIndex(path, "dir:abc"); legacy || len(got) != len(samples) {
		t.Fatalf("saved again: %d samples, legacy %v", len(got), legacy)
	}

	one, err := json.Marshal(map[string]any{"samples": samples[:3], "format": indexFormat, "check": "c", "later": 1})
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old")
	os.WriteFile(old+".json", one, 0o600)
	if got, _ := loadIndex(old, "c"); len(got) != 3 || got[2].Key != samples[2].Key {
		t.Fatalf("one-document index: %d samples, want 3", len(got))
	}
	writeJSONIndex(t, old+".json", "shade-shards-index/0", "c", samples[:3])
	if got, _ := loadIndex(old, "c"); got != nil {
		t.Fatalf("an index of another format gave %d samples", len(got))
	}
	writeJSONIndex(t, old+".json", indexFormat, "c", samples)
	whole, _ := os.ReadFile(old + ".json")
	os.WriteFile(old+".json", whole[:len(whole)-3], 0o600)
	if got, _ := loadIndex(old, "c"); got != nil {
		t.Fatalf("an earlier build's index cut short gave %d samples", len(got))
	}
}

// writeJSONIndex writes samples as earlier builds saved an index.
func writeJSONIndex(t *testing.T, path, format, check string, samples []sample) {
	t.Helper()
	err := atomicfile.WriteWith(path, 0o600, func(w io.Writer) error {
		return jsonstream.Write(w, index{Format: format, Check: check}, "samples", len(samples), func(i int) any { return &samples[i] })
	})
	if err != nil {
		t.Fatal(err)
	}
}

func sameSamples(t *testing.T, got, want []sample) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d samples, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Key != want[i].Key || got[i].Shard != want[i].Shard || got[i].Start != want[i].Start ||
			got[i].End != want[i].End || !slices.Equal(got[i].Members, want[i].Members) {
			t.Fatalf("sample %d read back as %+v, want %+v", i, got[i], want[i])
		}
	}
}

// The version hashes each member as fmt wrote it: "i/ext/off/size\n".
func TestMemberLineAsFmtWroteIt(t *testing.T) {
	for _, c := range []struct {
		i int
		m member
	}{{0, member{"jpg", 0, 1}}, {12345, member{"meta.json", 1 << 40, 4<<30 - 1}}, {7, member{"", -1, 0}}} {
		if got, want := string(appendMemberLine([]byte("x"), c.i, c.m)), fmt.Sprintf("x%d/%s/%d/%d\n", c.i, c.m.Ext, c.m.Off, c.m.Size); got != want {
			t.Fatalf("%q, want %q", got, want)
		}
	}
}

// BenchmarkManifest: the manifest of 100,000 samples of 2.3 members, as
// Open makes it from a new index (names, sizes, the version's hash).
func BenchmarkManifest(b *testing.B) {
	samples := samplesOf(100_000, 1_000)
	st := &dirStore{names: []string{"a.tar"}, sizes: []int64{1 << 40}}
	for b.Loop() {
		if _, err := manifest(st, samples); err != nil {
			b.Fatal(err)
		}
	}
}

// encodedSize is the length appendSample writes, at every header's size
// boundary.
func TestEncodedSizeIsWhatIsWritten(t *testing.T) {
	var ms []member
	var pms []packedMember
	var exts []string
	for i, size := range []int64{0, 1, 255, 256, 65535, 65536, 70000} {
		ext := strings.Repeat("e", []int{1, 31, 32, 255, 256, 3, 65536}[i])
		ms = append(ms, member{Ext: ext, Size: size})
		pms = append(pms, packedMember{ext: uint32(len(exts)), size: uint32(size)})
		exts = append(exts, ext)
		span := make([]byte, 70000)
		if got, want := encodedSize(ms), int64(len(appendSample(nil, pms, exts, span))); got != want {
			t.Fatalf("%d members: encodedSize %d, written %d", len(ms), got, want)
		}
	}
	for _, k := range []int{15, 16, 65536} {
		many := make([]member, k)
		pmany := make([]packedMember, k)
		if got, want := encodedSize(many), int64(len(appendSample(nil, pmany, []string{""}, nil))); got != want {
			t.Fatalf("%d members: encodedSize %d, written %d", k, got, want)
		}
	}
}

// BenchmarkLoadIndex reads a saved index of 1,000,000 samples of 2.3
// members: what a restart over a large dataset waits for.
func BenchmarkLoadIndex(b *testing.B) {
	path := filepath.Join(b.TempDir(), "index")
	if err := saveIndex(path, "check", samplesOf(1_000_000, 10_000)); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if got, _ := loadIndex(path, "check"); len(got) != 1_000_000 {
			b.Fatalf("%d samples read", len(got))
		}
	}
}

// A saved index is used only where every sample lies within a shard.
func TestWithinShards(t *testing.T) {
	st := &dirStore{names: []string{"a.tar", "b.tar"}, sizes: []int64{1000, 2000}}
	ok := []sample{{Shard: 0, Start: 512, End: 1000}, {Shard: 1, Start: 0, End: 2000}}
	if !withinShards(ok, st) || !withinShards(nil, st) {
		t.Fatal("samples within the shards refused")
	}
	for _, bad := range []sample{{Shard: 2, End: 1}, {Shard: -1}, {Shard: 0, Start: 10, End: 1001}, {Shard: 1, Start: 9, End: 8}, {Shard: 1, Start: -1}} {
		if withinShards(append(slices.Clone(ok), bad), st) {
			t.Fatalf("sample %+v taken as within the shards", bad)
		}
	}
}

// BenchmarkOpenKept opens the shards of a directory (100 shards, sparse
// files) whose index of 1,000,000 samples of 2.3 members is kept in the
// state directory: a restart's wait over a large dataset, and a first
// start's through a published index less its read.
func BenchmarkOpenKept(b *testing.B) {
	const n, per = 1_000_000, 10_000
	dir := b.TempDir()
	samples := samplesOf(n, per)
	ends := make([]int64, n/per)
	for _, smp := range samples {
		ends[smp.Shard] = max(ends[smp.Shard], smp.End)
	}
	for si, end := range ends {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("shard-%03d.tar", si)))
		if err == nil {
			err = f.Truncate(end + 1024)
			f.Close()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	st, err := openDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Location: dir, StateDir: b.TempDir()}
	if err := saveIndex(indexStatePath(cfg), st.check(), samples); err != nil {
		b.Fatal(err)
	}
	samples = nil
	b.ReportAllocs()
	for b.Loop() {
		src, err := Open(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		if from, _ := src.IndexFrom(); from != IndexKept || src.Manifest().Len() != n {
			b.Fatalf("index %s, %d samples; want kept, %d", from, src.Manifest().Len(), n)
		}
	}
}
