package scores

import (
	"math"
	"slices"
	"testing"

	"github.com/shade-mesh/shade/mesh/wire"
)

// TestStamps: of a sample's scores that arrive out of order, the newer
// stays: an older seq is dropped, an equal or later one (around past
// 2^32 too) kept; scores without a stamp are always kept; a later term
// forgets the stamps held, an earlier term's stamped scores are dropped.
// Admit leaves the scores it is given as they are.
func TestStamps(t *testing.T) {
	var s Stamps
	admit := func(m wire.Merged, want ...uint32) {
		t.Helper()
		ids, seqs, scores := slices.Clone(m.IDs), slices.Clone(m.Seqs), slices.Clone(m.Scores)
		got := s.Admit(m, 8)
		if !slices.Equal(got.IDs, want) || got.Term != m.Term {
			t.Fatalf("admitted %v of %+v, want %v", got.IDs, m, want)
		}
		for i, id := range got.IDs {
			k := slices.Index(ids, id)
			if got.Scores[i] != scores[k] || (m.Seqs != nil && got.Seqs[i] != seqs[k]) {
				t.Fatalf("admitted %+v: sample %d's score or stamp is not the one given", got, id)
			}
		}
		if !slices.Equal(m.IDs, ids) || !slices.Equal(m.Seqs, seqs) || !slices.Equal(m.Scores, scores) {
			t.Fatalf("Admit changed what it was given: %+v", m)
		}
	}
	admit(wire.Merged{Term: 2, IDs: []uint32{1, 2, 3}, Scores: []float32{1, 2, 3}, Seqs: []uint32{10, 10, 10}}, 1, 2, 3)
	admit(wire.Merged{Term: 2, IDs: []uint32{1, 2, 4}, Scores: []float32{4, 5, 6}, Seqs: []uint32{9, 10, 1}}, 2, 4)
	admit(wire.Merged{Term: 2, IDs: []uint32{3, 1}, Scores: []float32{7, 8}, Seqs: []uint32{0, 0}}, 3, 1) // unstamped
	admit(wire.Merged{IDs: []uint32{1}, Scores: []float32{9}}, 1)                                         // from a build before stamps
	admit(wire.Merged{Term: 2, IDs: []uint32{3, 1}, Scores: []float32{7, 8}, Seqs: []uint32{9, 11}}, 1)
	// Around past 2^32: a seq just after the wrap is newer.
	admit(wire.Merged{Term: 2, IDs: []uint32{5}, Scores: []float32{1}, Seqs: []uint32{math.MaxUint32 - 2}}, 5)
	admit(wire.Merged{Term: 2, IDs: []uint32{5, 5}, Scores: []float32{2, 3}, Seqs: []uint32{3, math.MaxUint32}}, 5)
	// An earlier term's stamped scores go, its unstamped ones stay.
	admit(wire.Merged{Term: 1, IDs: []uint32{6, 7}, Scores: []float32{1, 2}, Seqs: []uint32{50, 0}}, 7)
	// A later term: a new leader's seqs count from its own table.
	admit(wire.Merged{Term: 3, IDs: []uint32{1, 2}, Scores: []float32{1, 2}, Seqs: []uint32{1, 2}}, 1, 2)
	admit(wire.Merged{Term: 2, IDs: []uint32{3}, Scores: []float32{1}, Seqs: []uint32{99}})
	// Ids past the samples are not stamped (the caller refuses them).
	admit(wire.Merged{Term: 3, IDs: []uint32{9}, Scores: []float32{1}, Seqs: []uint32{1}}, 9)
}
