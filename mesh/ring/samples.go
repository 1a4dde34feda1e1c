package ring

import (
	"fmt"

	"github.com/cespare/xxhash/v2"
)

// Samples holds the partition of each key of a numbered set (the samples
// of one dataset), hashed once: a key's partition depends only on the key
// and the partition count, never on the members, so every ring of a
// cluster shares it. With it the owners of sample i are a table read
// (Ring.SampleOwners) where Owners formats and hashes the key each time:
// a leader splitting an order or queueing merged scores looks up the
// owners of every sample of an epoch. It takes 2 bytes a sample (4 above
// 65,536 partitions). A Samples is immutable and safe for concurrent use.
type Samples struct {
	partitions int
	small      []uint16 // partitions <= 1<<16
	large      []uint32
}

// NewSamples hashes the keys of samples 0 to n-1 into partitions
// partitions (0 means DefaultPartitions), as Ring.Partition does: key
// appends sample i's key to dst and returns it.
func NewSamples(partitions, n int, key func(dst []byte, i int) []byte) (*Samples, error) {
	if partitions == 0 {
		partitions = DefaultPartitions
	}
	if partitions < 1 || n < 0 {
		return nil, fmt.Errorf("%w: %d partitions, %d samples", ErrConfig, partitions, n)
	}
	s := &Samples{partitions: partitions}
	if partitions <= 1<<16 {
		s.small = make([]uint16, n)
	} else {
		s.large = make([]uint32, n)
	}
	var buf []byte
	for i := range n {
		buf = key(buf[:0], i)
		p := xxhash.Sum64(buf) % uint64(partitions)
		if s.small != nil {
			s.small[i] = uint16(p)
		} else {
			s.large[i] = uint32(p)
		}
	}
	return s, nil
}

// Len is the number of samples.
func (s *Samples) Len() int { return max(len(s.small), len(s.large)) }

// Partitions is the partition count the samples were hashed into.
func (s *Samples) Partitions() int { return s.partitions }

// Partition returns sample i's partition; i must be below Len.
func (s *Samples) Partition(i uint32) int {
	if s.small != nil {
		return int(s.small[i])
	}
	return int(s.large[i])
}

// PartitionsOf sets parts[k] to the partition of sample ids[k], or to -1
// where ids[k] is not below Len, for each k (parts is as long as ids):
// Partition of a run of samples, a loop of table reads with nothing
// between them, whose misses overlap (sampling.Placement.GroupEach).
func (s *Samples) PartitionsOf(ids []uint32, parts []int32) {
	if s.small != nil {
		partitionsOf(s.small, ids, parts)
	} else {
		partitionsOf(s.large, ids, parts)
	}
}

func partitionsOf[P uint16 | uint32](table []P, ids []uint32, parts []int32) {
	parts = parts[:len(ids)]
	for k, id := range ids {
		if int(id) < len(table) {
			parts[k] = int32(table[id])
		} else {
			parts[k] = -1
		}
	}
}

// Fits reports whether s was hashed into r's partition count, so that
// SampleOwners may use it with r.
func (s *Samples) Fits(r *Ring) bool { return s != nil && r != nil && s.partitions == r.cfg.Partitions }

// SampleOwners returns the owners of sample i of s as Owners returns them
// for its key, without hashing it and without a copy: the slice is the
// ring's, and the caller must not modify it. s must fit r (see Fits) and
// i must be below s.Len(); it panics otherwise.
func (r *Ring) SampleOwners(s *Samples, i uint32) []string {
	if s.partitions != r.cfg.Partitions {
		panic(fmt.Sprintf("ring: samples hashed into %d partitions, ring has %d", s.partitions, r.cfg.Partitions))
	}
	p := s.Partition(i)
	if r.k == 0 {
		return nil // an empty ring
	}
	return r.of(p)
}
