// Package shards serves a dataset stored as WebDataset tar shards, in a
// directory or an S3-compatible bucket prefix, by ranged reads.
//
// The shards are the files (or objects) whose names end in ".tar", in
// name order; other files are ignored, and a compressed shard (.tar.gz,
// .tgz, .tar.zst, .tar.xz, .tar.bz2, .tar.lz4, or such content behind a
// .tar name) fails Open with ErrCompressed: a compressed stream cannot be
// read by ranges. Within a shard, consecutive regular-file members that
// share a key form one sample, as WebDataset groups them: the key is the
// member's path up to the first '.' of its last element, the rest is the
// member's extension ("a/b/x01.jpg" and "a/b/x01.cls" are sample "a/b/x01"
// with members "jpg" and "cls"). A key that appears again later, or an
// extension twice in one sample, fails Open.
//
// Open builds an index of (shard, offset, size) of every member from the
// tar headers once: a directory's shards by their headers alone, a
// bucket's streamed, a stream given up for a new range GET past a member
// of over 4 MiB; with a state directory the index is kept there (temp
// file, then rename) and reused while the shards are unchanged (same
// names, sizes and modification times, or for a bucket the same listing).
// An index can also be published beside the shards (Config.PublishIndex,
// "shadectl dataset index --publish"): an Open of them with none kept
// reads it (in a bucket, one GET) instead of every shard's headers, while
// the shards are unchanged. Reading a sample is one ranged read
// (pread, or an S3 range GET conditional on the shard's ETag) covering its
// members.
//
// # Wire encoding of a sample
//
// A sample's bytes, as Read returns them and the mesh serves them (GET
// NAME/i), are one MessagePack map from each member's extension (str) to
// its bytes (bin), in the members' order in the shard, with the smallest
// header that fits each length: map fixmap/map16/map32, str
// fixstr/str8/str16/str32, bin bin8/bin16/bin32. A single-member sample is
// a one-entry map too. In Python: msgpack.unpackb(r.get("ds/7")) gives
// {"jpg": b"...", "cls": b"3"}.
package shards

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/shade-mesh/shade/dataset"
	"github.com/shade-mesh/shade/dataset/claim"
	"github.com/shade-mesh/shade/dataset/s3source"
	"github.com/shade-mesh/shade/internal/atomicfile"
	"github.com/shade-mesh/shade/internal/jsonstream"
	"github.com/shade-mesh/shade/internal/workers"
)

var (
	// ErrCompressed is returned by Open for a compressed shard.
	ErrCompressed = errors.New("shards: compressed shard; ranged reads need uncompressed .tar shards")
	// ErrLayout is returned by Open for members that do not form samples:
	// a key repeated apart from its first run, or an extension twice in
	// one sample.
	ErrLayout = errors.New("shards: not a WebDataset layout")
)

// Prefix marks a shards dataset in --dataset NAME=shards:LOCATION.
const Prefix = "shards:"

// Config configures a Source; Open fills defaults on a copy.
type Config struct {
	// Location is a directory or s3://BUCKET/PREFIX holding the shards.
	Location string
	// S3 reaches the store of an s3:// Location (endpoint, region,
	// addressing, credentials, in-flight bound); its URL and StateDir are
	// set from Location and StateDir.
	S3 s3source.Config
	// StateDir, when set, keeps the index (and a bucket's listing) there.
	StateDir string
	// Reindex builds the index (and lists a bucket) even when StateDir
	// holds one.
	Reindex bool
	// PublishIndex writes the index beside the shards once Open has it
	// (in the location's hidden folder: PREFIX/.shade/shards.index in a
	// bucket, DIR/.shade/shards.index in a directory), for every later
	// Open of the shards, on any machine, to read (in a bucket, one GET)
	// instead of every shard's headers. It needs write access there.
	PublishIndex bool
	// Share builds the index once for every Open of the same shards that
	// finds none kept or published while it is built, on any machine (the
	// peers of a mesh starting together): the first claims the build
	// beside the shards (ClaimName; package claim tells how), publishes
	// the index as PublishIndex does and drops the claim; the others wait
	// for it and read what was published. With Share, a claim that cannot
	// be written or read, or an index that cannot be published, is no
	// error of Open's: the index is built and Source.Shared says why it
	// was not shared. With Reindex, the index is built and published
	// without a claim.
	Share bool
	// Claim configures the claim of Share: this Open's name in it, the
	// beat, and what to call when it waits.
	Claim claim.Config
	// Progress, if not nil, is called with (shards read, shards) as the
	// index is built, from one goroutine at a time.
	Progress func(done, total int)
	// IndexShards is how many shards are read at once to build the index;
	// 0 means DefaultIndexShards. In a bucket, each holds one of the S3
	// source's MaxInFlight requests while it is read.
	IndexShards int
}

// member is one tar member of a sample: its extension, and its data's
// offset from the sample's first member data and size.
type member struct {
	Ext  string `json:"e"`
	Off  int64  `json:"o"`
	Size int64  `json:"s"`
}

// sample is one WebDataset sample: its key, its shard, and the byte range
// [Start, End) of the shard from its first member's data to its last's end.
type sample struct {
	Key     string   `json:"k"`
	Shard   int      `json:"h"`
	Start   int64    `json:"a"`
	End     int64    `json:"b"`
	Members []member `json:"m"`
}

// store is where the shards live.
type store interface {
	// shards returns the shards' names and sizes, in order.
	shards() ([]string, []int64)
	// check identifies the shards' current state: equal checks mean an
	// index built for one serves the other.
	check() string
	// stream returns shard i from its start as a stream that seeks.
	stream(ctx context.Context, i int) (io.ReadSeekCloser, error)
	readAt(i int, off, n int64, dst []byte) ([]byte, error)
	// published reads the index published beside the shards: nil where
	// none is, or an error saying why the one there is not of these
	// shards, not whole, or not readable.
	published(ctx context.Context) (*indexBuilder, error)
	// publish writes the index (names are its samples' keys) as the one
	// published beside the shards.
	publish(ctx context.Context, names dataset.Names, p *packedIndex) error
	// publishedAt names where the published index is.
	publishedAt() string
	// claimPlace is where the claim on building the index is kept
	// (Config.Share): ClaimName in the location's hidden folder.
	claimPlace() claim.Place
}

// Source is a shards dataset. It is immutable after Open and safe for
// concurrent use.
type Source struct {
	st  store
	idx packedIndex
	m   *dataset.Manifest

	// spans keeps the buffers a sample's span of its shard is read into
	// (*[]byte), up to maxKeptSpan bytes: Read copies the members out of
	// the span into the caller's dst, and the span is read again into
	// the next buffer instead of a new one each sample.
	spans sync.Pool

	from    Origin
	skipped error // why a published index was not used, or nil
	// Config.Share: how the index came (claim.Outcome), and why it was
	// not published, or nil.
	share      claim.Outcome
	publishErr error
}

// Origin is where Open found a Source's index.
type Origin string

const (
	// IndexBuilt: read from the shards' tar headers.
	IndexBuilt Origin = "built"
	// IndexKept: read from Config.StateDir.
	IndexKept Origin = "kept"
	// IndexPublished: read from the index published beside the shards
	// (Config.PublishIndex, by any machine).
	IndexPublished Origin = "published"
)

// PublishedIndex is the name of the published index in the shards'
// location's hidden folder, s3source.AsideFolder (".shade/").
const PublishedIndex = "shards.index"

// ErrPublish is wrapped by Open's error when Config.PublishIndex is set
// and the index could not be written.
var ErrPublish = errors.New("shards: cannot publish the index")

// maxKeptSpan is the longest span buffer Source keeps for the next read.
const maxKeptSpan = 4 << 20

// Open finds the shards at cfg.Location, builds or loads their index and
// returns the Source. ctx bounds the listing and indexing.
func Open(ctx context.Context, cfg Config) (*Source, error) {
	if cfg.IndexShards <= 0 {
		cfg.IndexShards = DefaultIndexShards
	}
	var (
		st  store
		err error
	)
	if s3source.IsURL(cfg.Location) {
		c := cfg.S3
		// The shards' own listing, never a published one: it is a few
		// objects, and a shard changed since is seen at once.
		c.URL, c.StateDir, c.Relist, c.Unpublished, c.Share = cfg.Location, cfg.StateDir, cfg.Reindex, true, false
		st, err = openS3(ctx, c)
	} else {
		st, err = openDir(cfg.Location)
	}
	if err != nil {
		return nil, err
	}
	names, _ := st.shards()
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no .tar shards in %s", dataset.ErrEmpty, cfg.Location)
	}
	s := &Source{st: st, from: IndexKept}
	statePath := indexStatePath(cfg)
	var (
		b    *indexBuilder
		keep bool // the index is to be kept in the state directory
	)
	if statePath != "" && !cfg.Reindex {
		b, keep = loadIndex(statePath, st) // an earlier build's JSON index is kept in the new form
	}
	if b == nil && !cfg.Reindex {
		s.from = IndexPublished
		b, s.skipped = st.published(ctx)
		keep = b != nil
	}
	if b == nil && cfg.Share && !cfg.Reindex {
		var release func()
		if b, release, err = s.shared(ctx, st, cfg); err != nil {
			return nil, err
		}
		if release != nil {
			// Dropped once published (or Open failed): those waiting then
			// read it.
			defer release()
		}
		keep = true
	}
	if b == nil {
		s.from, keep = IndexBuilt, true
		if b, err = buildIndex(ctx, st, cfg.IndexShards, cfg.Progress); err != nil {
			return nil, err
		}
	}
	s.m, s.idx = b.finish()
	if s.m.Len() == 0 {
		return nil, fmt.Errorf("%w: the shards in %s hold no files", dataset.ErrEmpty, cfg.Location)
	}
	if keep && statePath != "" {
		if err := saveIndex(statePath, st.check(), s.m.Names, &s.idx); err != nil {
			return nil, err
		}
	}
	if (cfg.PublishIndex || cfg.Share) && s.from != IndexPublished {
		if err := st.publish(ctx, s.m.Names, &s.idx); err != nil {
			if !cfg.Share {
				return nil, err
			}
			s.publishErr = fmt.Errorf("%w: %w", claim.ErrNotShared, err)
		}
	}
	return s, nil
}

// Shared says, for an Open with Config.Share, whose published index it
// waited for ("" where it read none it waited for), and why the index it
// built was not shared (an error wrapping claim.ErrNotShared; nil where
// it was, or where it built none).
func (s *Source) Shared() (builtBy string, err error) {
	return s.share.BuiltBy, cmp.Or(s.share.Alone, s.publishErr)
}

// IndexFrom says where Open found the index and, where a published index
// was there but not used (written before the shards changed, or damaged,
// or not readable), why: the index was then built.
func (s *Source) IndexFrom() (from Origin, skipped error) { return s.from, s.skipped }

// PublishedAt names where the shards' published index is, or would be:
// s3://BUCKET/PREFIX/.shade/shards.index, or DIR/.shade/shards.index.
func (s *Source) PublishedAt() string { return s.st.publishedAt() }

// indexStatePath is the index's file in cfg.StateDir, "" without one.
func indexStatePath(cfg Config) string {
	if cfg.StateDir == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(cfg.Location + "\x00" + cfg.S3.Endpoint))
	return filepath.Join(cfg.StateDir, "shards-"+hex.EncodeToString(sum[:8])+".index")
}

// packedIndex is the index as a Source keeps it, in a few arrays rather
// than a struct, a key and a slice of members a sample (its keys are the
// manifest's names): a dataset of tens of millions of samples costs 8
// bytes a sample and 12 a member, none of it a pointer the collector
// follows. The samples come shard by shard, so a sample's shard is found
// among the shards' first samples; a tar member's data starts on a block
// of 512 bytes, so a sample's start is kept as its block; a member's
// offset from its sample's start is under 4 GiB. A start or an offset
// that is not so (a published index is input) is kept aside, by its
// sample or member, in far.
type packedIndex struct {
	shardFirst []uint32       // shard k's samples are shardFirst[k]:shardFirst[k+1]; the last is the count
	start      []uint32       // sample i's first member's data starts at block start[i] of its shard, or is in far
	first      []uint32       // sample i's members are members[first[i]:first[i+1]]
	members    []packedMember // in their samples' order
	exts       []string       // the extensions, each once
	far        farPlaces
}

// packedMember is a member of a sample in the index: its extension (in
// exts), its size (under 4 GiB, indexShard's rule) and its data's offset
// from its sample's start (or farOff: see packedIndex.far).
type packedMember struct {
	ext  uint32
	size uint32
	off  uint32
}

// farOff marks a start or an offset kept in packedIndex.far.
const farOff = math.MaxUint32

// farPlaces holds the starts of samples (by sample) and the offsets of
// members (by member) that a packedIndex cannot keep in 32 bits; nil
// maps for none, which a tar's index never has short of 2 TiB shards or
// samples of 4 GiB.
type farPlaces struct {
	start map[uint32]int64
	off   map[uint32]int64
}

// shardOf is the shard of sample i.
func (p *packedIndex) shardOf(i int) int {
	// The last shard whose first sample is at or before i: a shard of no
	// samples has the first of the one after it, and is passed over.
	k, _ := slices.BinarySearch(p.shardFirst, uint32(i)+1)
	return k - 1
}

// startOf is where sample i's first member's data starts in its shard.
func (p *packedIndex) startOf(i int) int64 {
	if b := p.start[i]; b != farOff {
		return int64(b) * blockSize
	}
	return p.far.start[uint32(i)]
}

// offOf is member k's data's offset from its sample's start.
func (p *packedIndex) offOf(k uint32) int64 {
	if o := p.members[k].off; o != farOff {
		return int64(o)
	}
	return p.far.off[k]
}

// extTable numbers extensions as they come, each kept once: a dataset's
// members have a few, and each member keeps its extension's number. The
// zero value is empty.
type extTable struct {
	names []string          // by number
	of    map[string]uint32 // each name's number
}

// extID returns ext's number in t, adding it where it is new (the bytes
// of a []byte copied).
func extID[T string | []byte](t *extTable, ext T) uint32 {
	if e, ok := t.of[string(ext)]; ok {
		return e
	}
	if t.of == nil {
		t.of = map[string]uint32{}
	}
	e := uint32(len(t.names))
	t.names = append(t.names, string(ext))
	t.of[t.names[e]] = e
	return e
}

// indexBuilder makes a Source's packed index and manifest from its
// samples, given in order one at a time, each checked against its shard:
// the index built from the shards, a kept one and a published one all
// end in one, and a read index is never held as samples.
type indexBuilder struct {
	shardSizes []int64
	p          packedIndex // its exts made at the end, of exts
	exts       extTable
	names      dataset.NamesBuilder
	sizes      []int64
	h          hash.Hash // the version's
	line       []byte
}

// newIndexBuilder starts the index of st's shards, with room for n
// samples.
func newIndexBuilder(st store, n int) (*indexBuilder, error) {
	shardNames, shardSizes := st.shards()
	packed, err := dataset.NamesOf(shardNames)
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	b := &indexBuilder{shardSizes: shardSizes, h: sha256.New(),
		p: packedIndex{shardFirst: make([]uint32, 0, len(shardNames)+1), start: make([]uint32, 0, n), first: make([]uint32, 0, n+1)}, sizes: make([]int64, 0, n)}
	b.h.Write([]byte("shade-shards-manifest/1\n"))
	b.h.Write([]byte(dataset.VersionOf(packed, shardSizes)))
	return b, nil
}

// grow makes room for members more members and keys of keyBytes bytes in
// all, so that the index does not grow by doubling as they are added (a
// count below 0 is 0).
func (b *indexBuilder) grow(members, keyBytes int) {
	b.p.members = slices.Grow(b.p.members, max(members, 0))
	b.names.Grow(cap(b.sizes)-len(b.sizes), keyBytes)
}

// add appends a sample: its key, its shard, where its first member's data
// starts in the shard and its members (offsets from there, in the
// shard's order). A sample of no members, a member of 4 GiB or more, one
// that begins before the one before it ends, or one beyond its shard's
// end, is refused with ErrLayout, and so is a sample of a shard before
// the last sample's (samples come shard by shard): a kept or published
// index is input, and no index is used whose spans could reach outside a
// shard or a span. After an error, b is not to be used.
func (b *indexBuilder) add(key string, shard int, start int64, ms []member) error {
	if err := b.names.Add(key); err != nil {
		return fmt.Errorf("shards: sample %d: %w", len(b.sizes), err)
	}
	return b.place(shard, start, ms)
}

// addBytes is add of a key read into a buffer.
func (b *indexBuilder) addBytes(key []byte, shard int, start int64, ms []member) error {
	if err := b.names.AddBytes(key); err != nil {
		return fmt.Errorf("shards: sample %d: %w", len(b.sizes), err)
	}
	return b.place(shard, start, ms)
}

// place is add less the key.
func (b *indexBuilder) place(shard int, start int64, ms []member) error {
	i := len(b.sizes)
	if len(ms) == 0 || shard < 0 || shard >= len(b.shardSizes) || start < 0 {
		return fmt.Errorf("%w: index: sample %d in shard %d from byte %d, with %d members", ErrLayout, i, shard, start, len(ms))
	}
	if shard < len(b.p.shardFirst)-1 {
		return fmt.Errorf("%w: index: sample %d in shard %d after a sample of shard %d; samples come shard by shard", ErrLayout, i, shard, len(b.p.shardFirst)-1)
	}
	if int64(len(b.p.members))+int64(len(ms)) >= math.MaxUint32 || i >= math.MaxUint32-1 {
		return fmt.Errorf("%w: more than %d members or samples", ErrLayout, uint32(math.MaxUint32-2))
	}
	for len(b.p.shardFirst) <= shard {
		b.p.shardFirst = append(b.p.shardFirst, uint32(i))
	}
	if start%blockSize == 0 && start/blockSize < farOff {
		b.p.start = append(b.p.start, uint32(start/blockSize))
	} else {
		b.p.start = append(b.p.start, farOff)
		b.p.far.start = setFar(b.p.far.start, uint32(i), start)
	}
	b.p.first = append(b.p.first, uint32(len(b.p.members)))
	var after int64 // where the member before ends
	for _, m := range ms {
		if m.Size < 0 || m.Size >= 1<<32 || m.Off < after || m.Off > b.shardSizes[shard]-start-m.Size {
			return fmt.Errorf("%w: index: sample %d: member %s at %d of %d bytes, from byte %d of a shard of %d", ErrLayout, i, m.Ext, m.Off, m.Size, start, b.shardSizes[shard])
		}
		after = m.Off + m.Size
		pm := packedMember{ext: extID(&b.exts, m.Ext), size: uint32(m.Size), off: uint32(m.Off)}
		if m.Off >= farOff {
			pm.off = farOff
			b.p.far.off = setFar(b.p.far.off, uint32(len(b.p.members)), m.Off)
		}
		b.p.members = append(b.p.members, pm)
		b.line = appendMemberLine(b.line[:0], i, m)
		b.h.Write(b.line)
	}
	b.sizes = append(b.sizes, encodedSize(ms))
	return nil
}

// setFar sets m[k] to v, making m where it is nil.
func setFar(m map[uint32]int64, k uint32, v int64) map[uint32]int64 {
	if m == nil {
		m = make(map[uint32]int64)
	}
	m[k] = v
	return m
}

// len is how many samples were added.
func (b *indexBuilder) len() int { return len(b.sizes) }

// finish returns the manifest and the packed index; b is spent.
func (b *indexBuilder) finish() (*dataset.Manifest, packedIndex) {
	b.p.first = append(b.p.first, uint32(len(b.p.members)))
	for len(b.p.shardFirst) <= len(b.shardSizes) {
		b.p.shardFirst = append(b.p.shardFirst, uint32(len(b.sizes)))
	}
	names := b.names.Names()
	b.h.Write([]byte(dataset.VersionOf(names, b.sizes)))
	sum := b.h.Sum(nil)
	m := &dataset.Manifest{Names: names, Sizes: dataset.NewSizes(b.sizes), Version: hex.EncodeToString(sum[:16]), Encoding: dataset.EncodingWDS}
	p := b.p
	p.exts = b.exts.names
	p.start, p.first, p.members = fitted(p.start), fitted(p.first), fitted(p.members)
	return m, p
}

// fitted is s in memory of its size where it has room for more than a
// sixteenth again (it grew by doubling, or was made for more), else s.
func fitted[T any](s []T) []T {
	if cap(s)-len(s) > len(s)/16 {
		return slices.Clone(s)
	}
	return slices.Clip(s)
}

func (p *packedIndex) len() int { return len(p.start) }

// span returns the members of sample i, members[from:to], and the range
// [start, end) of its shard they lie in.
func (p *packedIndex) span(i int) (from, to uint32, start, end int64) {
	from, to = p.first[i], p.first[i+1]
	start = p.startOf(i)
	return from, to, start, start + p.offOf(to-1) + int64(p.members[to-1].size)
}

// Manifest returns the samples' keys and encoded sizes. It is shared:
// callers must not modify it.
func (s *Source) Manifest() *dataset.Manifest { return s.m }

// Read appends sample i, encoded as the package comment says, to dst and
// returns the extended slice; dst is the caller's. A shard changed since
// it was indexed gives an error wrapping dataset.ErrChanged; on error the
// returned slice is dst with its original length. Safe for concurrent use.
func (s *Source) Read(i int, dst []byte) ([]byte, error) {
	if i < 0 || i >= s.idx.len() {
		return dst, fmt.Errorf("%w: %d (dataset has %d samples)", dataset.ErrOutOfRange, i, s.idx.len())
	}
	from, to, start, end := s.idx.span(i)
	buf, _ := s.spans.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	span, err := s.st.readAt(s.idx.shardOf(i), start, end-start, (*buf)[:0])
	if err == nil {
		dst = s.idx.appendSample(dst, from, to, span)
	}
	if cap(span) <= maxKeptSpan {
		*buf = span[:0]
		s.spans.Put(buf)
	}
	return dst, err
}

// appendSample encodes members[from:to], whose bytes lie in span at their
// offsets, as a MessagePack map.
func (p *packedIndex) appendSample(dst []byte, from, to uint32, span []byte) []byte {
	dst = appendHeader(dst, int(to-from), 0x80, 16, 0, 0xde, 0xdf)
	for k := from; k < to; k++ {
		m, off := p.members[k], p.offOf(k)
		ext := p.exts[m.ext]
		dst = appendHeader(dst, len(ext), 0xa0, 32, 0xd9, 0xda, 0xdb)
		dst = append(dst, ext...)
		dst = appendHeader(dst, int(m.size), 0, 0, 0xc4, 0xc5, 0xc6)
		dst = append(dst, span[off:off+int64(m.size)]...)
	}
	return dst
}

// appendHeader appends a MessagePack header for length n: the fix form
// (fix|n) when n < fixMax, else the 8-, 16- or 32-bit form (code8 0 means
// the type has none).
func appendHeader(dst []byte, n int, fix byte, fixMax int, code8, code16, code32 byte) []byte {
	switch {
	case n < fixMax:
		return append(dst, fix|byte(n))
	case code8 != 0 && n < 1<<8:
		return append(dst, code8, byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(dst, code16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, code32), uint32(n))
	}
}

// encodedSize is len(appendSample(nil, ms, ...)): each header written
// into a buffer on the stack and measured.
func encodedSize(ms []member) int64 {
	var b [5]byte
	n := int64(len(appendHeader(b[:0], len(ms), 0x80, 16, 0, 0xde, 0xdf)))
	for _, m := range ms {
		n += int64(len(appendHeader(b[:0], len(m.Ext), 0xa0, 32, 0xd9, 0xda, 0xdb))) + int64(len(m.Ext))
		n += int64(len(appendHeader(b[:0], int(m.Size), 0, 0, 0xc4, 0xc5, 0xc6))) + m.Size
	}
	return n
}

// appendMemberLine appends what the version hashes of sample i's member
// m: "i/ext/off/size\n", as fmt's %d and %s would write it.
func appendMemberLine(dst []byte, i int, m member) []byte {
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(append(append(dst, '/'), m.Ext...), '/')
	dst = strconv.AppendInt(dst, m.Off, 10)
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, m.Size, 10)
	return append(dst, '\n')
}

// compressedSuffixes are shard names refused outright.
var compressedSuffixes = []string{".tar.gz", ".tgz", ".tar.zst", ".tar.zstd", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar.lz4"}

// pickShards returns the indexes of the .tar names, or ErrCompressed.
func pickShards(names dataset.Names, where string) ([]int, error) {
	var out []int
	for i, n := range names.All() {
		for _, suf := range compressedSuffixes {
			if strings.HasSuffix(n, suf) {
				return nil, fmt.Errorf("%w: %s in %s (decompress it to %s.tar)", ErrCompressed, n, where, strings.TrimSuffix(n, suf))
			}
		}
		if strings.HasSuffix(n, ".tar") {
			out = append(out, i)
		}
	}
	return out, nil
}

// magic reports the compression whose magic number starts b, or "".
func magic(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte{0x1f, 0x8b}):
		return "gzip"
	case bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return "zstd"
	case bytes.HasPrefix(b, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return "xz"
	case bytes.HasPrefix(b, []byte("BZh")):
		return "bzip2"
	case bytes.HasPrefix(b, []byte{0x04, 0x22, 0x4d, 0x18}):
		return "lz4"
	}
	return ""
}

// DefaultIndexShards is Config.IndexShards' default. A shard in an object
// store is read as one stream, at what one connection carries, and a
// shard in a directory is parsed on one core: reading several at once
// keeps the store's connections and the cores busy (BenchmarkIndex).
const DefaultIndexShards = 16

// buildIndex reads every shard's tar headers and groups members into
// samples. It reads up to at shards at once and returns what reading them
// in order would: the index of the samples in shard order, or the first
// error in that order (a shard after a failed one is not begun).
// progress, if not nil, is called after each shard read, from one
// goroutine at a time.
//
// Each shard's samples join the index as soon as the shards before it
// have, and are then let go: what is held at once is the index and the
// few shards read ahead of the first one not added, not every shard's
// samples beside their index.
func buildIndex(ctx context.Context, st store, at int, progress func(done, total int)) (*indexBuilder, error) {
	names, _ := st.shards()
	m := &shardMerge{st: st, per: make([]*shardSamples, len(names)), errs: make([]error, len(names))}
	m.failed.Store(int64(len(names)))
	workers.Each(len(names), at, func(si int) {
		if int64(si) > m.failed.Load() {
			return
		}
		ss, err := indexShard(ctx, st, si, names[si])
		if err != nil {
			lower(&m.failed, int64(si))
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.per[si], m.errs[si] = ss, err
		if progress != nil {
			m.done++
			progress(m.done, len(names))
		}
		m.addReady()
	})
	if m.err != nil {
		return nil, m.err
	}
	return m.b, nil
}

// shardMerge adds shards' samples to an index in shard order as they are
// read, in any order (buildIndex).
type shardMerge struct {
	st     store
	failed atomic.Int64 // the first shard that failed so far: none after it is begun

	mu   sync.Mutex
	per  []*shardSamples // shards read and not yet added
	errs []error         // their errors
	done int             // shards read
	next int             // the first shard not added
	b    *indexBuilder   // nil until the first shard is added
	seen keySet          // the keys added, by their places in b.names
	err  error           // the first error in shard order, once met
}

// addReady adds the shards read, from the first not added up to the first
// not yet read, and lets them go; at the first error it stops for good.
func (m *shardMerge) addReady() {
	for m.err == nil && m.next < len(m.per) && m.per[m.next] != nil {
		if m.b == nil {
			if m.err = m.start(); m.err != nil {
				break
			}
		}
		if m.err = m.add(m.next); m.err != nil {
			lower(&m.failed, int64(m.next))
		}
		m.per[m.next] = nil
		m.next++
	}
}

// start makes the index with room for as many samples, members and key
// bytes a byte of shard as the shards read so far hold (WebDataset
// writers make shards alike): an index then seldom grows by doubling, nor
// keeps much room it does not fill.
func (m *shardMerge) start() error {
	_, sizes := m.st.shards()
	var all, read float64
	var samples, members, keyBytes int
	for si, ss := range m.per {
		all += float64(sizes[si])
		if ss != nil {
			read += float64(sizes[si])
			samples, members, keyBytes = samples+ss.len(), members+len(ss.members), keyBytes+ss.keys.Size()
		}
	}
	scale := func(n int) int { return int(math.Ceil(float64(n) * all / max(read, 1))) }
	b, err := newIndexBuilder(m.st, scale(samples))
	if err != nil {
		return err
	}
	b.grow(scale(members), scale(keyBytes))
	m.b = b
	m.seen.sized(scale(samples))
	return nil
}

// add adds shard si's samples, or returns why not: a key an earlier
// shard holds, then the shard's own error, then a sample past the
// shard's end, in the order one pass over the shards would meet them.
func (m *shardMerge) add(si int) error {
	names, sizes := m.st.shards()
	ss, b := m.per[si], m.b
	// A shard's keys are each once in it, up to its error.
	for i := range ss.len() {
		if key := ss.keys.Bytes(i); m.seen.has(key, &b.names) {
			return fmt.Errorf("%w: sample %s appears twice (again in %s); a sample's members must be adjacent", ErrLayout, key, names[si])
		}
	}
	if m.errs[si] != nil {
		return m.errs[si]
	}
	var ms []member
	for i := range ss.len() {
		key, start := ss.keys.Bytes(i), ss.start[i]
		ms = ss.appendMembers(ms[:0], i)
		if end := spanEnd(start, ms); end > sizes[si] {
			return fmt.Errorf("%w: %s is truncated: sample %s ends at byte %d of %d", ErrLayout, names[si], key, end, sizes[si])
		}
		if err := b.addBytes(key, si, start, ms); err != nil {
			return err
		}
		m.seen.insert(b.len()-1, &b.names)
	}
	return nil
}

// lower sets v to x where x is less.
func lower(v *atomic.Int64, x int64) {
	for f := v.Load(); x < f && !v.CompareAndSwap(f, x); f = v.Load() {
	}
}

// spanEnd is where a sample that starts at start with members ms ends.
func spanEnd(start int64, ms []member) int64 {
	last := ms[len(ms)-1]
	return start + last.Off + last.Size
}

// shardSamples is one shard's samples as indexing reads them, until they
// join the index, packed much as the index is: the keys as a manifest's
// names are, each sample's start and first member, and the members in
// one array, their extensions each kept once. A shard of many small
// samples thus costs its keys' bytes, 12 bytes a sample and 16 a member
// (and, while it is read, 8 to 16 a key in the set that finds a key seen
// again), not a struct, a string, a slice and a map entry a sample.
type shardSamples struct {
	name    string // the shard's, for errors
	keys    dataset.NamesBuilder
	start   []int64       // where sample i's first member's data starts
	first   []uint32      // sample i's members are members[first[i]:first[i+1]], the last's to the end
	members []shardMember // ext in exts, off from their sample's start
	exts    extTable
	seen    keySet // the keys, by their places in keys, while the shard is read
}

// shardMember is a member of a sample of shardSamples: its extension (in
// exts), its size (under 4 GiB) and its data's offset from its sample's
// start.
type shardMember struct {
	ext  uint32
	size uint32
	off  int64
}

func (s *shardSamples) len() int { return len(s.start) }

// span returns sample i's members.
func (s *shardSamples) span(i int) []shardMember {
	end := len(s.members)
	if i+1 < len(s.first) {
		end = int(s.first[i+1])
	}
	return s.members[s.first[i]:end]
}

// appendMembers appends sample i's members to dst.
func (s *shardSamples) appendMembers(dst []member, i int) []member {
	for _, m := range s.span(i) {
		dst = append(dst, member{Ext: s.exts.names[m.ext], Off: m.off, Size: int64(m.size)})
	}
	return dst
}

// add adds the member of key with extension ext, of size bytes (under 4
// GiB) from byte off of the shard: to the last sample where it is key's,
// else as a new sample. A key seen before that run, or an extension twice
// in a sample, is an error wrapping ErrLayout.
func (s *shardSamples) add(key, ext []byte, off, size int64) error {
	// A shard has a few extensions: each kept once, not each member's
	// name for the part of it that is its extension.
	e := extID(&s.exts, ext)
	m := shardMember{ext: e, size: uint32(size), off: 0}
	if last := s.len() - 1; last >= 0 && bytes.Equal(s.keys.Bytes(last), key) {
		if slices.ContainsFunc(s.span(last), func(m shardMember) bool { return m.ext == e }) {
			return fmt.Errorf("%w: %s holds %s.%s twice", ErrLayout, s.name, key, ext)
		}
		m.off = off - s.start[last]
		s.members = append(s.members, m)
		return nil
	}
	if s.seen.has(key, &s.keys) {
		return fmt.Errorf("%w: sample %s appears twice (again in %s); a sample's members must be adjacent", ErrLayout, key, s.name)
	}
	if len(s.members) >= math.MaxUint32 {
		return fmt.Errorf("%w: %s: more than %d members", ErrLayout, s.name, uint32(math.MaxUint32))
	}
	if err := s.keys.AddBytes(key); err != nil {
		return err
	}
	s.seen.insert(s.len(), &s.keys)
	s.start = append(s.start, off)
	s.first = append(s.first, uint32(len(s.members)))
	s.members = append(s.members, m)
	return nil
}

// isClean says whether path.Clean leaves name as it is and it does not
// begin with "./": no empty element but a leading "/", none "." or "..",
// no trailing "/". Most members' names are, and are then used as read.
func isClean(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	if name[0] == '/' {
		name = name[1:]
		if len(name) == 0 {
			return true // "/"
		}
	}
	for {
		elem, rest, more := bytes.Cut(name, []byte("/"))
		if len(elem) == 0 || string(elem) == "." || string(elem) == ".." {
			return false
		}
		if !more {
			return true
		}
		name = rest
	}
}

// indexShard reads shard si's tar headers and returns its samples; on
// error, those before it and the error.
func indexShard(ctx context.Context, st store, si int, shardName string) (*shardSamples, error) {
	samples := &shardSamples{name: shardName}
	f, err := st.stream(ctx, si)
	if err != nil {
		return samples, err
	}
	defer f.Close()
	head := make([]byte, 6)
	k, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return samples, fmt.Errorf("shards: %s: %w", shardName, err)
	}
	if c := magic(head[:k]); c != "" {
		return samples, fmt.Errorf("%w: %s is %s-compressed", ErrCompressed, shardName, c)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return samples, fmt.Errorf("shards: %s: %w", shardName, err)
	}
	_, sizes := st.shards()
	var key []byte
	err = scanTar(f, sizes[si], func(name []byte, size, off int64) error {
		if !isClean(name) {
			name = []byte(strings.TrimPrefix(path.Clean(string(name)), "./"))
		}
		base := name[bytes.LastIndexByte(name, '/')+1:]
		if len(base) == 0 || base[0] == '.' {
			return nil
		}
		if size >= 1<<32 {
			return fmt.Errorf("%w: %s: member %s is %d bytes; at most 4 GiB", ErrLayout, shardName, name, size)
		}
		stem, ext, _ := bytes.Cut(base, []byte("."))
		key = append(append(key[:0], name[:len(name)-len(base)]...), stem...)
		return samples.add(key, ext, off, size)
	})
	samples.seen = keySet{} // read: no key is added after
	if err != nil && !errors.Is(err, ErrLayout) {
		err = fmt.Errorf("shards: %s: %w", shardName, err)
	}
	return samples, err
}

// index is the header of the JSON index files of earlier builds; its
// samples follow it ({"format":...,"check":...,"samples":[...]}), read one
// at a time (loadJSONIndex).
type index struct {
	Format string `json:"format"`
	Check  string `json:"check"`
}

const indexFormat = "shade-shards-index/1"

// loadIndex returns the index saved at path if it is whole and of st's
// shards as they are, else nil (index again). Where path holds none, it
// reads the JSON index an earlier build kept at path+".json"; legacy
// reports that it did.
func loadIndex(path string, st store) (b *indexBuilder, legacy bool) {
	b, err := readIndexFile(path, st)
	if errors.Is(err, fs.ErrNotExist) {
		samples := loadJSONIndex(path+".json", st.check())
		if samples == nil {
			return nil, false
		}
		if b, err = newIndexBuilder(st, len(samples)); err != nil {
			return nil, false
		}
		for _, smp := range samples {
			if smp.End < smp.Start || b.add(smp.Key, smp.Shard, smp.Start, smp.Members) != nil {
				return nil, false // not of these shards after all
			}
		}
		return b, true
	}
	if err != nil {
		return nil, false
	}
	return b, false
}

// readIndexFile reads the index file at path, of st's shards; where there
// is none, an error wrapping fs.ErrNotExist.
func readIndexFile(path string, st store) (*indexBuilder, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return readIndex(f, info.Size(), st)
}

// loadJSONIndex returns the JSON index at path if it is of this format and
// of the shards as check identifies them, else nil.
func loadJSONIndex(path, check string) []sample {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var ix index
	samples := []sample{}
	err = jsonstream.Read(json.NewDecoder(bufio.NewReaderSize(f, 64<<10)), map[string]any{"format": &ix.Format, "check": &ix.Check}, "samples",
		func(dec *json.Decoder) error {
			var smp sample
			if err := dec.Decode(&smp); err != nil {
				return err
			}
			samples = append(samples, smp)
			return nil
		})
	if err != nil || ix.Format != indexFormat || ix.Check != check {
		return nil
	}
	return samples
}

// saveIndex writes the index to a temporary file and renames it to path,
// and removes the JSON index of an earlier build beside it.
func saveIndex(path, check string, names dataset.Names, p *packedIndex) error {
	if err := writeIndexFile(path, 0o600, check, names, p); err != nil {
		return fmt.Errorf("shards: index: %w", err)
	}
	if err := os.Remove(path + ".json"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("shards: index: %w", err)
	}
	return nil
}

// writeIndexFile writes the index to a temporary file beside path, with
// mode perm, and renames it to path, making path's folder if need be.
func writeIndexFile(path string, perm os.FileMode, check string, names dataset.Names, p *packedIndex) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteWith(path, perm, func(w io.Writer) error {
		return writeIndex(w, check, names, p)
	})
}

// dirStore is shards in a local directory.
type dirStore struct {
	root   string
	names  []string
	sizes  []int64
	mtimes []int64
}

func openDir(dir string) (*dirStore, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	m, err := dataset.Scan(root, nil)
	if errors.Is(err, dataset.ErrEmpty) {
		return &dirStore{root: root}, nil
	}
	if err != nil {
		return nil, err
	}
	idx, err := pickShards(m.Names, root)
	if err != nil {
		return nil, err
	}
	d := &dirStore{root: root}
	for _, i := range idx {
		info, err := os.Stat(d.path(m.Names.At(i)))
		if err != nil {
			return nil, fmt.Errorf("shards: %w", err)
		}
		d.names = append(d.names, m.Names.At(i))
		d.sizes = append(d.sizes, info.Size())
		d.mtimes = append(d.mtimes, info.ModTime().UnixNano())
	}
	return d, nil
}

func (d *dirStore) path(name string) string { return filepath.Join(d.root, filepath.FromSlash(name)) }

func (d *dirStore) shards() ([]string, []int64) { return d.names, d.sizes }

func (d *dirStore) check() string {
	h := sha256.New()
	for i, n := range d.names {
		fmt.Fprintf(h, "%q %d %d\n", n, d.sizes[i], d.mtimes[i])
	}
	return "dir:" + hex.EncodeToString(h.Sum(nil))
}

// publishedAt is where a directory's published index is: in its hidden
// folder (the one a bucket's has, s3source.AsideFolder), which
// dataset.Scan passes over.
func (d *dirStore) publishedAt() string {
	return filepath.Join(d.root, filepath.FromSlash(s3source.AsideFolder), PublishedIndex)
}

// published reads DIR/.shade/shards.index.
func (d *dirStore) published(context.Context) (*indexBuilder, error) {
	b, err := readIndexFile(d.publishedAt(), d)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("shards: published index %s: %w", d.publishedAt(), err)
	}
	return b, nil
}

// publish writes DIR/.shade/shards.index (temp file, then rename),
// readable by every user, as the peers reading it may not be the one
// that wrote it.
func (d *dirStore) publish(_ context.Context, names dataset.Names, p *packedIndex) error {
	if err := writeIndexFile(d.publishedAt(), 0o644, d.check(), names, p); err != nil {
		return fmt.Errorf("%w to %s: %w", ErrPublish, d.publishedAt(), err)
	}
	return nil
}

func (d *dirStore) stream(ctx context.Context, i int) (io.ReadSeekCloser, error) {
	f, err := os.Open(d.path(d.names[i]))
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	size := d.sizes[i]
	buf := bufio.NewReaderSize(nil, fileChunk)
	return &rangeStream{ctx: ctx, size: size, closer: f, open: func(_ context.Context, off int64) (io.ReadCloser, error) {
		buf.Reset(io.NewSectionReader(f, off, size-off))
		return fileBody{buf}, nil
	}}, nil
}

// fileChunk is how much of a shard file one read takes while indexing: a
// member's header, and those of the small members after it.
const fileChunk = 2 << 10

// fileBody is a file read from an offset through the buffer its stream
// keeps; closing it leaves the file open.
type fileBody struct{ *bufio.Reader }

func (fileBody) Close() error { return nil }

// readAt preads n bytes at off from shard i, after checking that the shard
// still has the size and modification time it was indexed with: open,
// fstat, pread, close, as dataset.Dir.Read reads (dataset.OpenForRead).
func (d *dirStore) readAt(i int, off, n int64, dst []byte) ([]byte, error) {
	p := d.path(d.names[i])
	fd, err := dataset.OpenForRead(p)
	if err != nil {
		return dst, fmt.Errorf("%w: shard %s: %v", dataset.ErrChanged, p, err)
	}
	defer syscall.Close(fd)
	st, err := dataset.Fstat(fd)
	if err != nil {
		return dst, fmt.Errorf("shards: %s: %w", p, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size != d.sizes[i] || st.Mtim.Nano() != d.mtimes[i] {
		return dst, fmt.Errorf("%w: shard %s was modified since it was indexed", dataset.ErrChanged, p)
	}
	start := len(dst)
	dst = slices.Grow(dst, int(n))[:start+int(n)]
	for got := 0; got < int(n); {
		k, err := dataset.IgnoringEINTR(func() (int, error) { return syscall.Pread(fd, dst[start+got:], off+int64(got)) })
		if err != nil {
			return dst[:start], fmt.Errorf("shards: %s: %w", p, err)
		}
		if k == 0 {
			return dst[:start], fmt.Errorf("%w: shard %s ends before byte %d", dataset.ErrChanged, p, off+n)
		}
		got += k
	}
	return dst, nil
}

// s3Store is shards in a bucket prefix, through an s3source.Source over
// the prefix's objects.
type s3Store struct {
	src   *s3source.Source
	index []int // the Source's sample index of each shard
	names []string
	sizes []int64
}

func openS3(ctx context.Context, cfg s3source.Config) (*s3Store, error) {
	src, err := s3source.Open(ctx, cfg)
	if errors.Is(err, dataset.ErrEmpty) {
		return &s3Store{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := src.Manifest()
	idx, err := pickShards(m.Names, cfg.URL)
	if err != nil {
		return nil, err
	}
	st := &s3Store{src: src, index: idx}
	for _, i := range idx {
		st.names = append(st.names, m.Names.At(i))
		st.sizes = append(st.sizes, m.Sizes.At(i))
	}
	return st, nil
}

func (s *s3Store) shards() ([]string, []int64) { return s.names, s.sizes }

// check is the listing's version, which covers every object's ETag.
func (s *s3Store) check() string { return "s3:" + s.src.Manifest().Version }

func (s *s3Store) stream(ctx context.Context, i int) (io.ReadSeekCloser, error) {
	return &rangeStream{ctx: ctx, size: s.sizes[i], readThrough: objectReadThrough, open: func(ctx context.Context, off int64) (io.ReadCloser, error) {
		return s.src.Stream(ctx, s.index[i], off)
	}}, nil
}

func (s *s3Store) readAt(i int, off, n int64, dst []byte) ([]byte, error) {
	return s.src.ReadRange(s.index[i], off, n, dst)
}

func (s *s3Store) publishedAt() string { return s.src.AsideURL(PublishedIndex) }

// published reads PREFIX/.shade/shards.index.
func (s *s3Store) published(ctx context.Context) (*indexBuilder, error) {
	r, size, err := s.src.ReadAside(ctx, PublishedIndex)
	if errors.Is(err, s3source.ErrNoAside) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := readIndex(r, size, s)
	if err != nil {
		return nil, fmt.Errorf("shards: published index %s: %w", s.publishedAt(), err)
	}
	return b, nil
}

// publish PUTs PREFIX/.shade/shards.index.
func (s *s3Store) publish(ctx context.Context, names dataset.Names, p *packedIndex) error {
	var buf bytes.Buffer
	if err := writeIndex(&buf, s.check(), names, p); err != nil {
		return fmt.Errorf("%w: %w", ErrPublish, err)
	}
	if err := s.src.WriteAside(ctx, PublishedIndex, buf.Bytes()); err != nil {
		return fmt.Errorf("%w to %s: %w", ErrPublish, s.publishedAt(), err)
	}
	return nil
}
