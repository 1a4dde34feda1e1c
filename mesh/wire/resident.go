package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// ResidentSet is the samples of a dataset a node caches, as it tells the
// leader (DoneReq, ResidentReq): a bitmap (Bits: bit i%8 of byte i/8) or,
// where shorter, the list of their indices (Sparse: the first index, then
// each index less the one before it less one, as uvarints). A node of a
// large mesh caches its share of a dataset, a few thousand samples of
// millions: as a bitmap that is the dataset's size in bits, from every
// node at every epoch's end. The zero value says nothing is cached.
type ResidentSet struct {
	Bits, Sparse []byte
}

// ErrResident refuses a resident set that is malformed or names a sample
// past the dataset's.
var ErrResident = errors.New("wire: bad resident set")

// PackResident returns the samples set in words (bit i%64 of word i/64)
// of a dataset of n samples as a ResidentSet: the sparse list where it is
// shorter than the bitmap, else the bitmap. The zero ResidentSet where
// none is set. Bits of n and past are not looked at.
func PackResident(words []uint64, n int) ResidentSet {
	size := (n + 7) / 8
	words = words[:min(len(words), (n+63)/64)]
	count := 0
	for _, w := range words {
		count += bits.OnesCount64(w)
	}
	if count == 0 {
		return ResidentSet{}
	}
	// A gap takes a byte below 128, two below 16,384, ...: the list is
	// made while it may be shorter, and given up once it is not.
	if count < size {
		sparse := make([]byte, 0, min(size, 2*count))
		prev := -1
		for i, w := range words {
			for ; w != 0; w &= w - 1 {
				at := i*64 + bits.TrailingZeros64(w)
				if at >= n {
					break
				}
				sparse = binary.AppendUvarint(sparse, uint64(at-prev-1))
				prev = at
			}
			if len(sparse) >= size {
				break
			}
		}
		if len(sparse) < size {
			return ResidentSet{Sparse: sparse}
		}
	}
	out := make([]byte, size)
	for i := range min(size, 8*len(words)) {
		out[i] = byte(words[i/8] >> (8 * (i % 8)))
	}
	if n%8 != 0 {
		out[size-1] &= 1<<(n%8) - 1
	}
	return ResidentSet{Bits: out}
}

// Empty reports whether the set says nothing is cached.
func (s ResidentSet) Empty() bool { return len(s.Bits) == 0 && len(s.Sparse) == 0 }

// Check refuses, with ErrResident, a set of both forms, a bitmap longer
// than n samples take or naming a sample of n or more, and a list that
// is malformed or names a sample of n or more.
func (s ResidentSet) Check(n int) error {
	switch {
	case len(s.Bits) > 0 && len(s.Sparse) > 0:
		return fmt.Errorf("%w: both a bitmap and a list", ErrResident)
	case len(s.Bits) > (n+7)/8:
		return fmt.Errorf("%w: bitmap of %d bytes for %d samples", ErrResident, len(s.Bits), n)
	case len(s.Bits) == (n+7)/8 && n%8 != 0 && s.Bits[len(s.Bits)-1]>>(n%8) != 0:
		return fmt.Errorf("%w: bitmap names a sample past the dataset's %d", ErrResident, n)
	}
	at, b := -1, s.Sparse
	for len(b) > 0 {
		gap, k := binary.Uvarint(b)
		if k <= 0 || gap >= uint64(n) || at+1+int(gap) >= n {
			return fmt.Errorf("%w: list names a sample past the dataset's %d, or is cut short", ErrResident, n)
		}
		at, b = at+1+int(gap), b[k:]
	}
	return nil
}

// OrInto sets in words (bit i%64 of word i/64) the samples of s, which
// Check accepted for a dataset of len(words)*64 samples or fewer.
func (s ResidentSet) OrInto(words []uint64) {
	b := s.Bits
	for i := 0; len(b) > 0; i++ {
		var w [8]byte
		n := copy(w[:], b)
		words[i] |= binary.LittleEndian.Uint64(w[:])
		b = b[n:]
	}
	at, l := -1, s.Sparse
	for len(l) > 0 {
		gap, k := binary.Uvarint(l)
		at, l = at+1+int(gap), l[k:]
		words[at/64] |= 1 << (at % 64)
	}
}
