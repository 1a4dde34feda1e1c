package dataset

import "math"

// Sizes is the length in bytes of each sample of a dataset, in 4 bytes a
// sample: a manifest's sizes are on every peer, a slice of them per
// sample of datasets of millions. A length of 4 GiB or more, which no
// training sample is (the trainer socket refuses values over 512 MiB),
// is kept aside with its index. The zero value holds none. A Sizes is
// read-only once built, and safe to share.
type Sizes struct {
	small []uint32
	big   map[int]int64 // where small holds math.MaxUint32
}

// NewSizes returns the sizes of sizes (copied). A negative size is kept
// as it is, aside, as one of 4 GiB or more is.
func NewSizes(sizes []int64) Sizes {
	s := Sizes{small: make([]uint32, len(sizes))}
	for i, n := range sizes {
		if n >= 0 && n < math.MaxUint32 {
			s.small[i] = uint32(n)
			continue
		}
		if s.big == nil {
			s.big = make(map[int]int64)
		}
		s.small[i] = math.MaxUint32
		s.big[i] = n
	}
	return s
}

// Len is the number of sizes.
func (s Sizes) Len() int { return len(s.small) }

// At is sample i's size. It panics if i is out of range.
func (s Sizes) At(i int) int64 {
	if n := s.small[i]; n != math.MaxUint32 {
		return int64(n)
	}
	return s.big[i]
}
