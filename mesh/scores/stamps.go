package scores

import "github.com/shade-mesh/shade/mesh/wire"

// Stamps holds, for each sample of a job, the stamp (wire.Merged) of the
// score a member holds of it, so that of two scores of a sample that
// reach the member out of order the newer stays: the leader's messages
// cross on the network, two merges may read the table in one order and
// queue their scores in the other, a first owner passes scores on, and
// the leader sends the scores of samples whose owners changed. The zero
// value holds none. A Stamps is not safe for concurrent use: its owner
// guards it.
type Stamps struct {
	term uint64   // the term of the stamps held
	seq  []uint32 // by sample: the seq of the score held, 0 where none
}

// Admit returns the scores of m that are at least as new as the ones
// held of their samples (of n samples), and holds their stamps: m itself
// where it keeps all, else a copy of the ones it keeps. A score is kept
// where it has no stamp (a seq of 0: from a build before them) or none is
// held of its sample, where m's term is later than the stamps held (they
// are all forgotten then: a leader that takes over sends every owner
// its scores), or where the terms are one and its seq is not before the
// one held, counting around past 2^32 (RFC 1982's serial numbers: a
// leader merges less than 2^31 times while a message is on its way). The
// stamped scores of an earlier term than the stamps held are dropped.
func (s *Stamps) Admit(m wire.Merged, n int) wire.Merged {
	if !m.HasStamps() {
		return m
	}
	if m.Term > s.term {
		clear(s.seq)
		s.term = m.Term
	}
	if s.seq == nil {
		s.seq = make([]uint32, n)
	}
	older := m.Term < s.term
	var out *wire.Merged // once a score is dropped: the ones kept
	for i, id := range m.IDs {
		keep := true
		if seq := m.SeqOf(i); seq != 0 && int(id) < len(s.seq) {
			held := s.seq[id]
			keep = !older && (held == 0 || int32(seq-held) >= 0)
			if keep {
				s.seq[id] = seq
			}
		}
		switch {
		case !keep && out == nil:
			out = &wire.Merged{Term: m.Term, IDs: m.IDs[:i:i], Scores: m.Scores[:i:i], Seq: m.Seq}
			if m.Seqs != nil {
				out.Seqs = m.Seqs[:i:i]
			}
		case keep && out != nil:
			out.IDs, out.Scores = append(out.IDs, id), append(out.Scores, m.Scores[i])
			if m.Seqs != nil {
				out.Seqs = append(out.Seqs, m.Seqs[i])
			}
		}
	}
	if out == nil {
		return m
	}
	return *out
}
