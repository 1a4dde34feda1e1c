package dataset

import (
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

// namesBlockBits is log2 of the names in a block of Names: at most
// MaxNameBytes each, a block's names span less than 4 GiB, so where one
// ends is kept in 32 bits from its block's start.
const namesBlockBits = 16

// Names is the names of a dataset's samples in manifest order, packed:
// every name's bytes back to back in one string, and where each ends. A
// dataset of tens of millions of samples thus costs its names' bytes and
// 4 bytes more a name, none of it a pointer the garbage collector
// follows; as a []string each name would cost 16 bytes more, its own
// allocation rounded up to a size class, and a pointer.
//
// The zero value is empty. Names is immutable and safe for concurrent
// use; At returns a substring of the packed bytes, which stay in memory
// while any such substring is kept.
type Names struct {
	data  string
	ends  []uint32 // where name i ends, from the start of its block
	bases []uint64 // where each block of 1<<namesBlockBits names starts in data
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
func (n Names) Len() int { return len(n.ends) }

// At returns name i. It panics if i is out of range.
func (n Names) At(i int) string {
	end := n.end(i)
	start := n.bases[i>>namesBlockBits]
	if i&(1<<namesBlockBits-1) != 0 {
		start = n.end(i - 1)
	}
	return n.data[start:end]
}

func (n Names) end(i int) uint64 { return n.bases[i>>namesBlockBits] + uint64(n.ends[i]) }

// All yields each index and name in order.
func (n Names) All() iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		for i := range n.ends {
			if !yield(i, n.At(i)) {
				return
			}
		}
	}
}

// Strings returns the names as a []string (a new slice; its strings share
// the packed bytes).
func (n Names) Strings() []string {
	out := make([]string, n.Len())
	for i := range out {
		out[i] = n.At(i)
	}
	return out
}

// NamesBuilder packs names as they come (a directory's walk, a bucket's
// listing). The zero value is ready to use.
type NamesBuilder struct {
	data  []byte
	ends  []uint32
	bases []uint64
}

// Add appends name. A name longer than MaxNameBytes gives an error
// wrapping ErrNameTooLong and is not added.
func (b *NamesBuilder) Add(name string) error { return addName(b, name) }

// AddBytes is Add of a name's bytes, which it copies.
func (b *NamesBuilder) AddBytes(name []byte) error { return addName(b, name) }

func addName[T string | []byte](b *NamesBuilder, name T) error {
	if len(name) > MaxNameBytes {
		return fmt.Errorf("%w: %d bytes (at most %d): %.64q...", ErrNameTooLong, len(name), MaxNameBytes, name)
	}
	if len(b.ends)&(1<<namesBlockBits-1) == 0 {
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
// them does not grow the builder's memory by doubling.
func (b *NamesBuilder) Grow(n, size int) {
	b.data = slices.Grow(b.data, size)
	b.ends = slices.Grow(b.ends, n)
}

// Bytes returns name i's bytes, in the builder's memory: they are not to
// be modified, and the next Add may move them. It panics if i is out of
// range.
func (b *NamesBuilder) Bytes(i int) []byte {
	base := b.bases[i>>namesBlockBits]
	start := base
	if i&(1<<namesBlockBits-1) != 0 {
		start += uint64(b.ends[i-1])
	}
	return b.data[start : base+uint64(b.ends[i])]
}

// Names returns the names added, in memory of their exact size (the
// builder's, which grew by doubling, is left to the collector). The
// builder is then empty.
func (b *NamesBuilder) Names() Names {
	n := Names{data: string(b.data), ends: slices.Clone(b.ends), bases: slices.Clone(b.bases)}
	*b = NamesBuilder{}
	return n
}
