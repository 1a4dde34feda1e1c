package dataset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"slices"
)

// ErrNameTooLong is returned for a sample name of more than MaxNameBytes.
var ErrNameTooLong = errors.New("dataset: sample name too long")

// MaxNameBytes is the longest sample name a manifest holds: 64 KiB less
// one byte, far beyond a path (4 KiB on Linux) or an object key (1 KiB on
// S3).
const MaxNameBytes = 1<<16 - 1

// namesRun is how many names a run of Names holds: a name is decoded
// from its run's first, at most namesRun-1 steps.
const namesRun = 16

// namesBlockBits is log2 of the runs in a block of Names: a run of at
// most namesRun names of MaxNameBytes spans at most namesRun*(4+MaxNameBytes)
// bytes (just over 1 MiB), so a block's runs span less than 4 GiB (2^12
// runs could pass it by a little), and where one ends is kept in 32 bits
// from its block's start.
const namesBlockBits = 11

// Names is the names of a dataset's samples in manifest order, packed
// and front-coded: each name is kept as the count of bytes it shares with
// the name before it and the bytes after those, in runs of namesRun
// names (the first of a run shares none), back to back in one string,
// with where each run ends. A dataset's names, in order, mostly share
// their folder and the start of their number with the name before
// ("train/0000/00000041", "train/0000/00000042"): such a name costs a few
// bytes, where written out whole it cost its length and 4 more, and
// none of it is a pointer the garbage collector follows; as a []string
// each name would cost 16 bytes more and its own allocation.
//
// The zero value is empty. Names is immutable and safe for concurrent
// use. At returns a name made from its run (a new string, but for a
// run's first name, a substring of the packed bytes); All yields every
// name in one pass.
type Names struct {
	n     int
	data  string
	runs  []uint32 // where run r ends, from the start of its block
	bases []uint64 // where each block of 1<<namesBlockBits runs starts in data
}

// NamesOf packs names. A name longer than MaxNameBytes gives an error
// wrapping ErrNameTooLong.
func NamesOf(names []string) (Names, error) {
	var b NamesBuilder
	for _, name := range names {
		if err := b.Add(name); err != nil {
			return Names{}, err
		}
	}
	return b.Names(), nil
}

// Len is the number of names.
func (n Names) Len() int { return n.n }

// run returns run r's bytes.
func (n Names) run(r int) string {
	base := n.bases[r>>namesBlockBits]
	start := base
	if r&(1<<namesBlockBits-1) != 0 {
		start += uint64(n.runs[r-1])
	}
	return n.data[start : base+uint64(n.runs[r])]
}

// nameEntry reads the entry at byte at of run: the bytes its name shares
// with the name before, the bytes after those and where the next entry
// begins.
func nameEntry(run string, at int) (shared int, rest string, next int) {
	shared = int(run[at])
	size, k := uvarintString(run[at+1:])
	at += 1 + k
	return shared, run[at : at+int(size)], at + int(size)
}

// uvarintString is binary.Uvarint of a string's bytes.
func uvarintString(s string) (uint64, int) {
	var x uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x80 {
			return x | uint64(c)<<(7*i), i + 1
		}
		x |= uint64(c&0x7f) << (7 * i)
	}
	panic("dataset: damaged names")
}

// At returns name i. It panics if i is out of range.
func (n Names) At(i int) string {
	if uint(i) >= uint(n.n) {
		panic(fmt.Sprintf("dataset: name %d of %d", i, n.n))
	}
	run := n.run(i / namesRun)
	_, name, at := nameEntry(run, 0)
	if i%namesRun == 0 {
		return name
	}
	var buf [128]byte
	b := append(buf[:0], name...)
	for range i % namesRun {
		var shared int
		shared, name, at = nameEntry(run, at)
		b = append(b[:shared], name...)
	}
	return string(b)
}

// All yields each index and name in order.
func (n Names) All() iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		for i, name := range n.AllBytes() {
			if !yield(i, string(name)) {
				return
			}
		}
	}
}

// AllBytes yields each index and name's bytes in order, in one pass: the
// bytes are valid until the next name, and are not to be modified.
func (n Names) AllBytes() iter.Seq2[int, []byte] {
	return func(yield func(int, []byte) bool) {
		var b []byte
		for i := 0; i < n.n; {
			run := n.run(i / namesRun)
			for at := 0; at < len(run); i++ {
				var (
					shared int
					rest   string
				)
				shared, rest, at = nameEntry(run, at)
				b = append(b[:shared], rest...)
				if !yield(i, b) {
					return
				}
			}
		}
	}
}

// Strings returns the names as a []string (a new slice, of new strings).
func (n Names) Strings() []string {
	out := make([]string, 0, n.Len())
	for _, name := range n.All() {
		out = append(out, name)
	}
	return out
}

// NamesBuilder packs names as they come (a directory's walk, a bucket's
// listing), each written out whole (Bytes reads any of them back), and
// front-codes them into Names at the end. The zero value is ready to use.
type NamesBuilder struct {
	data  []byte
	ends  []uint32
	bases []uint64
}

// builderBlockBits is log2 of the names in a block of a NamesBuilder: at
// most MaxNameBytes each, a block's names span less than 4 GiB, so where
// one ends is kept in 32 bits from its block's start.
const builderBlockBits = 16

// Add appends name. A name longer than MaxNameBytes gives an error
// wrapping ErrNameTooLong and is not added.
func (b *NamesBuilder) Add(name string) error { return addName(b, name) }

// AddBytes is Add of a name's bytes, which it copies.
func (b *NamesBuilder) AddBytes(name []byte) error { return addName(b, name) }

func addName[T string | []byte](b *NamesBuilder, name T) error {
	if len(name) > MaxNameBytes {
		return fmt.Errorf("%w: %d bytes (at most %d): %.64q...", ErrNameTooLong, len(name), MaxNameBytes, name)
	}
	if len(b.ends)&(1<<builderBlockBits-1) == 0 {
		b.bases = append(b.bases, uint64(len(b.data)))
	}
	b.data = append(b.data, name...)
	b.ends = append(b.ends, uint32(uint64(len(b.data))-b.bases[len(b.bases)-1]))
	return nil
}

// Len is the number of names added.
func (b *NamesBuilder) Len() int { return len(b.ends) }

// Size is the bytes of the names added.
func (b *NamesBuilder) Size() int { return len(b.data) }

// Grow makes room for n more names of size bytes in all, so that adding
// them does not grow the builder's memory by doubling (a count below 0
// is 0).
func (b *NamesBuilder) Grow(n, size int) {
	b.data = slices.Grow(b.data, max(size, 0))
	b.ends = slices.Grow(b.ends, max(n, 0))
}

// Bytes returns name i's bytes, in the builder's memory: they are not to
// be modified, and the next Add may move them. It panics if i is out of
// range.
func (b *NamesBuilder) Bytes(i int) []byte {
	base := b.bases[i>>builderBlockBits]
	start := base
	if i&(1<<builderBlockBits-1) != 0 {
		start += uint64(b.ends[i-1])
	}
	return b.data[start : base+uint64(b.ends[i])]
}

// Names returns the names added, front-coded, in memory of their exact
// size. The builder is then empty.
func (b *NamesBuilder) Names() Names {
	n := Names{n: b.Len()}
	// A name shares at most 255 bytes (one byte says how many) and costs
	// its rest and 2-5 bytes more: the room a third of the names' bytes
	// and 4 a name, grown where the names share less.
	out := make([]byte, 0, b.Size()/3+4*b.Len())
	var prev []byte
	for i := range b.Len() {
		name := b.Bytes(i)
		if i%namesRun == 0 {
			r := i / namesRun
			if r&(1<<namesBlockBits-1) == 0 {
				n.bases = append(n.bases, uint64(len(out)))
			}
			if r > 0 {
				n.runs = append(n.runs, uint32(uint64(len(out))-n.bases[(r-1)>>namesBlockBits]))
			}
			prev = nil
		}
		shared := 0
		for shared < min(len(prev), len(name), 255) && prev[shared] == name[shared] {
			shared++
		}
		out = append(out, byte(shared))
		out = binary.AppendUvarint(out, uint64(len(name)-shared))
		out = append(out, name[shared:]...)
		prev = name
	}
	if b.Len() > 0 {
		r := (b.Len() - 1) / namesRun
		n.runs = append(n.runs, uint32(uint64(len(out))-n.bases[r>>namesBlockBits]))
	}
	n.data = string(out)
	n.runs, n.bases = slices.Clip(n.runs), slices.Clip(n.bases)
	*b = NamesBuilder{}
	return n
}
