package ring

import (
	"slices"
	"strconv"
	"testing"
)

func sampleKey(dst []byte, i int) []byte {
	return strconv.AppendInt(append(dst, "fashion-mnist/"...), int64(i), 10)
}

// TestSampleOwnersMatchOwners checks that a sample's owners read through
// Samples are exactly those Owners gives for its key, with the 2-byte and
// the 4-byte table, and that the ring's slice comes back, not a copy;
// PartitionsOf of a run of samples (in no order, one past the last among
// them) gives each one's Partition, and -1 for the one past.
func TestSampleOwnersMatchOwners(t *testing.T) {
	for _, partitions := range []int{0, 7, 1<<16 + 3} {
		const n = 5000
		s, err := NewSamples(partitions, n, sampleKey)
		if err != nil {
			t.Fatal(err)
		}
		if s.Len() != n {
			t.Fatalf("%d samples, want %d", s.Len(), n)
		}
		r := mustNew(t, Config{Partitions: partitions, Replicas: 2}, names(5))
		if !s.Fits(r) {
			t.Fatalf("samples of %d partitions do not fit a ring of %d", s.Partitions(), r.Config().Partitions)
		}
		for i := range n {
			key := sampleKey(nil, i)
			if got, want := s.Partition(uint32(i)), r.Partition(key); got != want {
				t.Fatalf("%d partitions: sample %d in partition %d, Partition says %d", partitions, i, got, want)
			}
			if got, want := r.SampleOwners(s, uint32(i)), r.Owners(key); !slices.Equal(got, want) {
				t.Fatalf("%d partitions: sample %d owned by %v, Owners says %v", partitions, i, got, want)
			}
		}
		ids := []uint32{n - 1, 3, n, 0, 4000, n << 4}
		parts := make([]int32, len(ids))
		s.PartitionsOf(ids, parts)
		for k, id := range ids {
			want := -1
			if id < n {
				want = s.Partition(id)
			}
			if int(parts[k]) != want {
				t.Fatalf("%d partitions: sample %d of a run in partition %d, want %d", partitions, id, parts[k], want)
			}
		}
		if a, b := r.SampleOwners(s, 1), r.SampleOwners(s, 1); &a[0] != &b[0] {
			t.Fatal("SampleOwners copied the owners")
		}
	}
}

// TestSamplesRefuseAnotherRing checks the guards: a table hashed into
// another partition count does not fit and SampleOwners panics on it
// rather than answer wrong owners; an empty ring has no owners; bad sizes
// are refused.
func TestSamplesRefuseAnotherRing(t *testing.T) {
	s, err := NewSamples(7, 10, sampleKey)
	if err != nil {
		t.Fatal(err)
	}
	other := mustNew(t, Config{Partitions: 11}, names(3))
	if s.Fits(other) || s.Fits(nil) || (*Samples)(nil).Fits(other) {
		t.Fatal("Fits accepted a ring of another partition count")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("SampleOwners answered for samples of another partition count")
			}
		}()
		other.SampleOwners(s, 0)
	}()
	if o := mustNew(t, Config{Partitions: 7}, nil).SampleOwners(s, 3); o != nil {
		t.Fatalf("empty ring: owners %v", o)
	}
	for _, bad := range [][2]int{{-1, 10}, {7, -1}} {
		if _, err := NewSamples(bad[0], bad[1], sampleKey); err == nil {
			t.Fatalf("NewSamples(%d, %d) accepted", bad[0], bad[1])
		}
	}
}
