package shards

import (
	"archive/tar"
	"bufio"
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
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/internal/atomicfile"
	"github.com/shade-mesh/shade/internal/binfile"
	"github.com/shade-mesh/shade/internal/jsonstream"
	"github.com/vmihailenco/msgpack/v5"
)

// samplesOf makes n samples in shards of per: each with members jpg
// (size i%3000+1), cls (1 byte) and, every third, json, a sample starting
// 1 KiB after the one before it ends (not on a tar block).
func samplesOf(n, per int) []sample { return samplesAt(n, per, 1) }

// tarSamplesOf is samplesOf with each sample's start on the tar block
// after that, as indexShard finds them.
func tarSamplesOf(n, per int) []sample { return samplesAt(n, per, blockSize) }

func samplesAt(n, per int, align int64) []sample {
	out := make([]sample, 0, n)
	off := int64(512)
	for i := range n {
		if i%per == 0 {
			off = 512
		}
		off = (off + align - 1) / align * align
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

// storeOf is a store of the shards samples lie in, each 1 KiB longer
// than its last sample's end.
func storeOf(samples []sample) *dirStore {
	st := &dirStore{root: "/nonexistent"}
	for _, smp := range samples {
		for len(st.names) <= smp.Shard {
			st.names = append(st.names, fmt.Sprintf("shard-%05d.tar", len(st.names)))
			st.sizes = append(st.sizes, 0)
			st.mtimes = append(st.mtimes, 0)
		}
		st.sizes[smp.Shard] = max(st.sizes[smp.Shard], smp.End+1024)
	}
	return st
}

// checkedStore is a store whose check is c.
type checkedStore struct {
	*dirStore
	c string
}

func (s checkedStore) check() string { return s.c }

// packOf builds the index of samples over st.
func packOf(tb testing.TB, st store, samples []sample) (*dataset.Manifest, packedIndex) {
	tb.Helper()
	b, err := addAll(tb, st, samples)
	if err != nil {
		tb.Fatal(err)
	}
	return b.finish()
}

// addAll adds samples to a new index of st's shards, up to the first
// error.
func addAll(tb testing.TB, st store, samples []sample) (*indexBuilder, error) {
	tb.Helper()
	b, err := newIndexBuilder(st, len(samples))
	if err != nil {
		tb.Fatal(err)
	}
	for _, smp := range samples {
		if err := b.add(smp.Key, smp.Shard, smp.Start, smp.Members); err != nil {
			return b, err
		}
	}
	return b, nil
}

// samplesFrom gives back the samples of an index.
func samplesFrom(m *dataset.Manifest, p *packedIndex) []sample {
	out := make([]sample, p.len())
	for i := range out {
		from, to, start, end := p.span(i)
		smp := sample{Key: m.Names.At(i), Shard: p.shardOf(i), Start: start, End: end}
		for k := from; k < to; k++ {
			smp.Members = append(smp.Members, member{Ext: p.exts[p.members[k].ext], Off: p.offOf(k), Size: int64(p.members[k].size)})
		}
		out[i] = smp
	}
	return out
}

// loaded is what loadIndex gave, as samples (nil for none).
func loaded(b *indexBuilder) []sample {
	if b == nil {
		return nil
	}
	m, p := b.finish()
	return samplesFrom(m, &p)
}

// TestPackKeepsEverySample: the packed index gives each sample's shard,
// span and members (extension, offset, size) as the samples held them,
// and so the same encoding of its bytes: samples on tar blocks, as
// indexShard finds them, with no start kept aside; samples off them,
// every start kept aside; and members 4 GiB and more from their sample's
// start, in shards of up to 12 GiB, their offsets kept aside.
func TestPackKeepsEverySample(t *testing.T) {
	far := samplesOf(40, 10)
	for i := range far {
		s := &far[i]
		if i%3 == 0 {
			s.Members[1].Off = int64(i+1) << 28 // 4 GiB and more from the start at i 15 on
			s.Members = s.Members[:2]
			s.End = s.Start + s.Members[1].Off + s.Members[1].Size
		}
	}
	offBlocks := func(samples []sample) int {
		n := 0
		for _, s := range samples {
			if s.Start%blockSize != 0 {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		name             string
		samples          []sample
		farStart, farOff int
	}{
		{"on tar blocks", tarSamplesOf(10_000, 700), 0, 0},
		{"off tar blocks", samplesOf(10_000, 700), offBlocks(samplesOf(10_000, 700)), 0},
		{"far members", far, offBlocks(far), 9},
	} {
		samples := c.samples
		m, p := packOf(t, storeOf(samples), samples)
		if c.farStart == 0 && c.name != "on tar blocks" {
			t.Fatalf("%s: every start on a block", c.name)
		}
		if p.len() != len(samples) || len(p.exts) > 3 || len(p.far.start) != c.farStart || len(p.far.off) != c.farOff {
			t.Fatalf("%s: %d samples and %d extensions packed, %d starts and %d offsets kept aside; want %d, at most 3, %d and %d",
				c.name, p.len(), len(p.exts), len(p.far.start), len(p.far.off), len(samples), c.farStart, c.farOff)
		}
		for i, smp := range samples {
			from, to, start, end := p.span(i)
			if p.shardOf(i) != smp.Shard || start != smp.Start || end != smp.End || int(to-from) != len(smp.Members) {
				t.Fatalf("%s: sample %d: shard %d span [%d, %d) %d members, want %d [%d, %d) %d", c.name, i,
					p.shardOf(i), start, end, to-from, smp.Shard, smp.Start, smp.End, len(smp.Members))
			}
			for k := from; k < to; k++ {
				if off, m := p.offOf(k), smp.Members[k-from]; off != m.Off || int64(p.members[k].size) != m.Size || p.exts[p.members[k].ext] != m.Ext {
					t.Fatalf("%s: sample %d member %d: %s at %d of %d bytes, want %s at %d of %d", c.name, i, k-from,
						p.exts[p.members[k].ext], off, p.members[k].size, m.Ext, m.Off, m.Size)
				}
			}
			last := smp.Members[len(smp.Members)-1]
			if last.Off+last.Size > 1<<20 {
				continue // members far apart: their encoding is that of the others
			}
			span := make([]byte, last.Off+last.Size)
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
			if got := p.appendSample(nil, from, to, span); !slices.Equal(got, want) || int64(len(got)) != m.Sizes.At(i) || m.Names.At(i) != smp.Key {
				t.Fatalf("%s: sample %d (%s) encodes to %d bytes, want %d (manifest: %s, %d)", c.name, i, smp.Key, len(got), len(want), m.Names.At(i), m.Sizes.At(i))
			}
		}
	}
}

// TestPackFindsShards: a sample's shard is found among the shards' first
// samples, shards of no samples (first, between, last) passed over; an
// index whose samples go back to an earlier shard is refused.
func TestPackFindsShards(t *testing.T) {
	samples := tarSamplesOf(30, 10) // shards 0, 1 and 2
	for i := range samples {
		samples[i].Shard = []int{1, 3, 4}[i/10]
	}
	st := storeOf(samples) // shards 0 to 4; 0 and 2 hold no sample
	st.names = append(st.names, "shard-00005.tar")
	st.sizes = append(st.sizes, 1024) // and 5, the last
	st.mtimes = append(st.mtimes, 0)
	_, p := packOf(t, st, samples)
	for i, smp := range samples {
		if got := p.shardOf(i); got != smp.Shard {
			t.Fatalf("sample %d: shard %d, want %d", i, got, smp.Shard)
		}
	}
	samples[15].Shard, samples[15].Start = 1, 512
	if _, err := addAll(t, st, samples); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "shard by shard") {
		t.Fatalf("a sample of shard 1 after those of shard 3: %v, want ErrLayout", err)
	}
}

// Samples that break indexShard's rules, or lie beyond their shards, are
// refused, not packed into wrong spans.
func TestBuilderRefusesABadIndex(t *testing.T) {
	for name, bad := range map[string]func(s *sample){
		"no members":           func(s *sample) { s.Members = nil },
		"a member of 4 GiB":    func(s *sample) { s.Members[0].Size = 1 << 32 },
		"a negative size":      func(s *sample) { s.Members[1].Size = -1 },
		"a negative offset":    func(s *sample) { s.Members[1].Off = -5 },
		"a negative shard":     func(s *sample) { s.Shard = -1 },
		"a shard not there":    func(s *sample) { s.Shard = 3 },
		"a negative start":     func(s *sample) { s.Start = -1 },
		"past its shard's end": func(s *sample) { s.Members[1].Off = 1 << 20 },
		"members overlapping":  func(s *sample) { s.Members[1].Off = s.Members[0].Size - 1 },
		"members out of order": func(s *sample) { s.Members[0], s.Members[1] = s.Members[1], s.Members[0] },
	} {
		samples := samplesOf(10, 4)
		st := storeOf(samples)
		bad(&samples[7])
		if _, err := addAll(t, st, samples); !errors.Is(err, ErrLayout) {
			t.Errorf("%s: %v, want ErrLayout", name, err)
		}
	}
}

// The version of a dataset is what earlier builds made of the same
// samples: peers of two builds agree on it.
func TestVersionUnchanged(t *testing.T) {
	samples := samplesOf(1000, 100)
	st := &dirStore{}
	for i := range 10 {
		st.names = append(st.names, "shard-"+string(rune('a'+i))+".tar")
		st.sizes = append(st.sizes, 1<<30)
	}
	m, _ := packOf(t, st, samples)
	if m.Version != "449123205a0e3f0d710c73f34e2bd949" || m.Sizes.At(0) != 23 || m.Sizes.At(999) != 1023 {
		t.Fatalf("version %s, sizes %d and %d; earlier builds made 449123205a0e3f0d710c73f34e2bd949, 23 and 1023", m.Version, m.Sizes.At(0), m.Sizes.At(999))
	}
}

// BenchmarkIndexMemory: the Go heap an index of 1,000,000 samples holds
// (two or three members each): as a []sample (what indexing held before,
// and an earlier build's JSON index still reads into), as indexing holds
// each shard's samples until they join the index (shardSamples), and
// packed as a Source keeps it.
func BenchmarkIndexMemory(b *testing.B) {
	const n, per = 1_000_000, 10_000
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for b.Loop() {
		samples := slices.Clip(tarSamplesOf(n, per))
		before := heap()
		read := shardsRead(b, samples)
		asRead := heap() - before
		runtime.KeepAlive(read)
		read = nil
		before = heap()
		_, p := packOf(b, storeOf(samples), samples)
		packed := heap() - before
		runtime.KeepAlive(p)
		runtime.KeepAlive(samples)
		samples = nil
		before = heap()
		samples = slices.Clip(tarSamplesOf(n, per))
		asSamples := heap() - before
		runtime.KeepAlive(samples)
		b.ReportMetric(float64(asSamples)/n, "samples-B/sample")
		b.ReportMetric(float64(asRead)/n, "read-B/sample")
		b.ReportMetric(float64(packed)/n, "packed-B/sample")
	}
}

// shardsRead gives samples' members to shardSamples as indexShard does,
// a shardSamples a shard.
func shardsRead(tb testing.TB, samples []sample) []*shardSamples {
	var out []*shardSamples
	for _, smp := range samples {
		for len(out) <= smp.Shard {
			out = append(out, &shardSamples{name: fmt.Sprint(len(out))})
		}
		for _, m := range smp.Members {
			if err := out[smp.Shard].add([]byte(smp.Key), []byte(m.Ext), smp.Start+m.Off, m.Size); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return out
}

// TestIndexRoundTrip: an index saved reads back whole; an index of other
// shards (another check), cut short, with a byte changed or with bytes
// after it is not used (nil: index again).
func TestIndexRoundTrip(t *testing.T) {
	dir := t.TempDir()
	samples := samplesOf(2000, 300)
	samples[7].Members[0].Ext = "ünïcode/ext"
	samples[8].Key = strings.Repeat("k", 1000)
	st := storeOf(samples)
	m, p := packOf(t, st, samples)
	path := filepath.Join(dir, "ix")
	if err := saveIndex(path, st.check(), m.Names, &p); err != nil {
		t.Fatal(err)
	}
	b, legacy := loadIndex(path, st)
	if legacy || b == nil {
		t.Fatalf("read back %v (legacy %v)", b, legacy)
	}
	m2, p2 := b.finish()
	if m2.Version != m.Version {
		t.Fatalf("read back of version %s, want %s", m2.Version, m.Version)
	}
	sameSamples(t, samplesFrom(m2, &p2), samples)
	other := storeOf(samples)
	other.sizes[0]++
	if got, _ := loadIndex(path, other); got != nil {
		t.Fatal("an index of other shards read")
	}
	whole, _ := os.ReadFile(path)
	for _, r := range []io.Reader{iotest.OneByteReader(bytes.NewReader(whole)), iotest.HalfReader(bytes.NewReader(whole))} {
		b, err := readIndex(r, int64(len(whole)), st)
		if err != nil {
			t.Fatalf("read in small pieces: %v", err)
		}
		sameSamples(t, loaded(b), samples)
	}
	bad := filepath.Join(dir, "bad")
	for _, n := range []int{0, 1, 30, len(whole) / 3, len(whole) - 4, len(whole) - 1} {
		os.WriteFile(bad, whole[:n], 0o600)
		if got, _ := loadIndex(bad, st); got != nil {
			t.Fatalf("index cut at %d of %d bytes: %d samples, want none", n, len(whole), got.len())
		}
	}
	for _, at := range []int{len(indexMagic), len(whole) / 2, len(whole) - 2} {
		changed := slices.Clone(whole)
		changed[at] ^= 0x10
		os.WriteFile(bad, changed, 0o600)
		if got, _ := loadIndex(bad, st); got != nil {
			t.Fatalf("index with byte %d changed: %d samples, want none", at, got.len())
		}
	}
	os.WriteFile(bad, append(slices.Clone(whole), 0), 0o600)
	if got, _ := loadIndex(bad, st); got != nil {
		t.Fatalf("index with a byte after it: %d samples, want none", got.len())
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
	st := checkedStore{&dirStore{names: []string{"a.tar"}, sizes: []int64{1 << 20}}, "c"}
	if _, err := readIndex(bytes.NewReader(b), int64(len(b)), st); !errors.Is(err, binfile.ErrFile) {
		t.Fatalf("2^40 members: %v", err)
	}
	b = append(b[:len(indexMagic)], 1, 'c')
	b = binary.AppendUvarint(b, 1<<40) // samples
	if _, err := readIndex(bytes.NewReader(b), int64(len(b)), st); !errors.Is(err, binfile.ErrFile) {
		t.Fatalf("2^40 samples: %v", err)
	}
}

// The JSON index of an earlier build beside the path is read, in pieces
// or as one document, once: Open saves it again in this form and removes
// it. One of another format is not used.
func TestIndexOfAnEarlierBuild(t *testing.T) {
	dir := t.TempDir()
	samples := samplesOf(500, 100)
	st := storeOf(samples)
	path := filepath.Join(dir, "ix")
	writeJSONIndex(t, path+".json", indexFormat, st.check(), samples)
	b, legacy := loadIndex(path, st)
	if !legacy || b == nil {
		t.Fatal("the earlier build's index not read as such")
	}
	m, p := b.finish()
	sameSamples(t, samplesFrom(m, &p), samples)
	if err := saveIndex(path, st.check(), m.Names, &p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".json"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the earlier build's index left: %v", err)
	}
	if b, legacy := loadIndex(path, st); legacy || b == nil || b.len() != len(samples) {
		t.Fatalf("saved again: %v, legacy %v", b, legacy)
	}

	c := checkedStore{st, "c"}
	one, err := json.Marshal(map[string]any{"samples": samples[:3], "format": indexFormat, "check": "c", "later": 1})
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old")
	os.WriteFile(old+".json", one, 0o600)
	b, _ = loadIndex(old, c)
	if got := loaded(b); len(got) != 3 || got[2].Key != samples[2].Key {
		t.Fatalf("one-document index: %d samples, want 3", len(got))
	}
	writeJSONIndex(t, old+".json", "shade-shards-index/0", "c", samples[:3])
	if got, _ := loadIndex(old, c); got != nil {
		t.Fatalf("an index of another format gave %d samples", got.len())
	}
	writeJSONIndex(t, old+".json", indexFormat, "c", samples)
	whole, _ := os.ReadFile(old + ".json")
	os.WriteFile(old+".json", whole[:len(whole)-3], 0o600)
	if got, _ := loadIndex(old, c); got != nil {
		t.Fatalf("an earlier build's index cut short gave %d samples", got.len())
	}
	small := checkedStore{&dirStore{names: st.names, sizes: slices.Repeat([]int64{100}, len(st.sizes))}, "c"}
	writeJSONIndex(t, old+".json", indexFormat, "c", samples)
	if got, _ := loadIndex(old, small); got != nil {
		t.Fatalf("an earlier build's index beyond the shards' ends gave %d samples", got.len())
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

// BenchmarkManifest: the manifest and packed index of 100,000 samples of
// 2.3 members, as Open makes them from a new index (names, sizes, the
// version's hash, the packed arrays).
func BenchmarkManifest(b *testing.B) {
	samples := tarSamplesOf(100_000, 1_000)
	st := storeOf(samples)
	for b.Loop() {
		packOf(b, st, samples)
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
		p := packedIndex{members: pms, exts: exts}
		if got, want := encodedSize(ms), int64(len(p.appendSample(nil, 0, uint32(len(pms)), span))); got != want {
			t.Fatalf("%d members: encodedSize %d, written %d", len(ms), got, want)
		}
	}
	for _, k := range []int{15, 16, 65536} {
		many := make([]member, k)
		p := packedIndex{members: make([]packedMember, k), exts: []string{""}}
		if got, want := encodedSize(many), int64(len(p.appendSample(nil, 0, uint32(k), nil))); got != want {
			t.Fatalf("%d members: encodedSize %d, written %d", k, got, want)
		}
	}
}

// BenchmarkLoadIndex reads a saved index of 1,000,000 samples of 2.3
// members: what a restart over a large dataset waits for.
func BenchmarkLoadIndex(b *testing.B) {
	path := filepath.Join(b.TempDir(), "index")
	samples := tarSamplesOf(1_000_000, 10_000)
	st := storeOf(samples)
	m, p := packOf(b, st, samples)
	if err := saveIndex(path, st.check(), m.Names, &p); err != nil {
		b.Fatal(err)
	}
	samples = nil
	b.ReportAllocs()
	for b.Loop() {
		if got, _ := loadIndex(path, st); got == nil || got.len() != 1_000_000 {
			b.Fatal("the index not read")
		}
	}
}

// A saved index is used only where every sample lies within its shard.
func TestIndexWithinShards(t *testing.T) {
	samples := samplesOf(100, 10)
	st := storeOf(samples)
	m, p := packOf(t, st, samples)
	path := filepath.Join(t.TempDir(), "ix")
	if err := saveIndex(path, st.check(), m.Names, &p); err != nil {
		t.Fatal(err)
	}
	if got, _ := loadIndex(path, st); got == nil {
		t.Fatal("an index within its shards refused")
	}
	for _, shorter := range []func(*dirStore){
		func(d *dirStore) { d.sizes[3] = samples[39].End - 1 },
		func(d *dirStore) { d.names, d.sizes = d.names[:9], d.sizes[:9] },
	} {
		d := storeOf(samples)
		shorter(d)
		if got, _ := loadIndex(path, checkedStore{d, st.check()}); got != nil {
			t.Fatalf("an index beyond its shards (%v) read", d.sizes)
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
	samples := tarSamplesOf(n, per)
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
	m, p := packOf(b, st, samples)
	if err := saveIndex(indexStatePath(cfg), st.check(), m.Names, &p); err != nil {
		b.Fatal(err)
	}
	samples = nil
	b.ReportAllocs()
	var peak, kept uint64
	for b.Loop() {
		var src *Source
		peak = max(peak, heapPeak(func() {
			if src, err = Open(context.Background(), cfg); err != nil {
				b.Fatal(err)
			}
		}))
		if from, _ := src.IndexFrom(); from != IndexKept || src.Manifest().Len() != n {
			b.Fatalf("index %s, %d samples; want kept, %d", from, src.Manifest().Len(), n)
		}
		runtime.GC()
		kept = heapObjects()
		runtime.KeepAlive(src)
	}
	b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
	b.ReportMetric(float64(kept)/1e6, "kept-heap-MB")
}

// heapPeak runs f and returns the most the Go heap's objects grew to
// over their bytes before it, sampled every 200 us, after a collection.
func heapPeak(f func()) uint64 {
	runtime.GC()
	base := heapObjects()
	stop := make(chan struct{})
	got := make(chan uint64)
	go func() {
		peak := base
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			peak = max(peak, heapObjects())
			select {
			case <-stop:
				got <- peak - base
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	return <-got
}

// heapObjects is the bytes of the Go heap's objects, live or not yet
// swept.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// writeTarShards writes shards tar shards of per samples into dir, each
// of two members of 10 and 3 bytes named by a key of 21 bytes, but every
// longEvery-th (0: none), whose key of 130 bytes makes a PAX record.
func writeTarShards(tb testing.TB, dir string, shards, per, longEvery int) {
	for si := range shards {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("shard-%03d.tar", si)))
		if err != nil {
			tb.Fatal(err)
		}
		buf := bufio.NewWriter(f)
		tw := tar.NewWriter(buf)
		for j := range per {
			key := fmt.Sprintf("train/%03d/%08d", si, j)
			if longEvery > 0 && j%longEvery == 0 {
				key = fmt.Sprintf("train/%03d/%0120d", si, j) // past the 100 bytes of a name in the header
			}
			for _, m := range []struct {
				ext  string
				data string
			}{{"jpg", "0123456789"}, {"cls", "7\n\n"}} {
				if err := tw.WriteHeader(&tar.Header{Name: key + "." + m.ext, Mode: 0o644, Size: int64(len(m.data)), Typeflag: tar.TypeReg}); err != nil {
					tb.Fatal(err)
				}
				tw.Write([]byte(m.data))
			}
		}
		if err := tw.Close(); err == nil {
			err = buf.Flush()
		}
		if err != nil {
			tb.Fatal(err)
		}
		f.Close()
	}
}

// TestTarIndexKeepsNothingAside: the index of real tar shards (names in
// the header and in PAX records) keeps every sample's start as its block
// and every member's offset in 32 bits, and reads each sample's bytes.
func TestTarIndexKeepsNothingAside(t *testing.T) {
	dir := t.TempDir()
	writeTarShards(t, dir, 3, 50, 10)
	src, err := Open(context.Background(), Config{Location: dir})
	if err != nil {
		t.Fatal(err)
	}
	if src.idx.len() != 150 || len(src.idx.far.start) != 0 || len(src.idx.far.off) != 0 {
		t.Fatalf("%d samples, %d starts and %d offsets kept aside; want 150, none and none", src.idx.len(), len(src.idx.far.start), len(src.idx.far.off))
	}
	for i := range src.idx.len() {
		b, err := src.Read(i, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string][]byte
		if err := msgpack.Unmarshal(b, &got); err != nil || string(got["jpg"]) != "0123456789" || string(got["cls"]) != "7\n\n" || len(got) != 2 {
			t.Fatalf("sample %d: %q, %v", i, got, err)
		}
	}
}

// BenchmarkOpenBuilt indexes the shards of a directory, 64 of 1,600
// samples (102,400 samples of two members of 10 and 3 bytes), as a first
// start with no index kept or published, and reports the Go heap it
// peaked at over what it started with, and what the Source keeps.
func BenchmarkOpenBuilt(b *testing.B) {
	const shardsN, per = 64, 1_600
	dir := b.TempDir()
	writeTarShards(b, dir, shardsN, per, 0)
	cfg := Config{Location: dir}
	b.ReportAllocs()
	var peak, kept uint64
	for b.Loop() {
		var (
			src *Source
			err error
		)
		peak = max(peak, heapPeak(func() {
			if src, err = Open(context.Background(), cfg); err != nil {
				b.Fatal(err)
			}
		}))
		if src.Manifest().Len() != shardsN*per {
			b.Fatalf("%d samples, want %d", src.Manifest().Len(), shardsN*per)
		}
		runtime.GC()
		kept = heapObjects()
		runtime.KeepAlive(src)
	}
	b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
	b.ReportMetric(float64(kept)/1e6, "kept-heap-MB")
}
