// Package scores holds a node's copy of one dataset's merged score table
// (the leader's own, or a replica of it) and what its replication and
// saving still owe, behind one lock. It imports sampling and mesh/wire
// and must not import mesh or any network package.
package scores

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/shade-mesh/shade/mesh/wire"
	"github.com/shade-mesh/shade/sampling"
)

// Table is a node's copy of one dataset's merged score table and its
// replication state. Its methods are safe for concurrent use.
type Table struct {
	// mu guards the fields from table to term, and every use of table
	// and rng.
	mu      sync.Mutex
	table   *sampling.Table
	rng     *rand.Rand    // breaks ties between equal losses
	dirty   bool          // changed since the last replication to the standbys
	behind  bool          // changed since the last replication to every member
	allAt   time.Time     // when the table last went to every member
	spread  time.Duration // the wait before the next round to every member
	unsaved bool          // changed since the last save to StateDir
	term    uint64        // term of the leader whose merges the table holds
	seq     uint32        // the table's changes, counted (wire.Merged)

	// drawMu guards drawn, the copy of table a draw reads: a draw holds
	// mu only while it copies the scores (a millisecond at a million
	// samples), not for the whole draw, so the merges of a job whose
	// orders run ahead of its training go on while its next order is
	// drawn. The copy is kept for the next draw: a table that is drawn
	// from takes its memory twice (5 MiB at 1.28 M samples).
	drawMu sync.Mutex
	drawn  *sampling.Table
}

// New returns an empty table of n samples scoring as kind says and merging
// with weight alpha (see sampling.NewTable), breaking ties with rng.
func New(n int, alpha float64, kind sampling.ScoreKind, rng *rand.Rand) *Table {
	return &Table{table: sampling.NewTable(n, alpha, kind), rng: rng}
}

// Sampling returns the underlying table, for tests: the caller must not
// use it while anything else may.
func (s *Table) Sampling() *sampling.Table { return s.table }

// Report merges one minibatch's losses as the leader of term.
func (s *Table) Report(ids []uint32, losses []float64, term uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.table.Report(ids, losses, s.rng)
	if err == nil {
		s.dirty, s.behind, s.unsaved, s.term = true, true, true, term
		s.changed()
	}
	return err
}

// changed counts a change of the table: its seq, 1 after 2^32-1.
// Called with mu held.
func (s *Table) changed() {
	if s.seq++; s.seq == 0 {
		s.seq = 1
	}
}

// Replace takes a replica the leader of term sent.
func (s *Table) Replace(b []byte, term uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.table.UnmarshalBinary(b); err != nil {
		return err
	}
	s.unsaved = true
	s.term = term
	s.changed()
	return nil
}

// Adopt takes a better table a new leader fetched, written by the leader
// of term, to replicate on as its own.
func (s *Table) Adopt(b []byte, term uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.table.UnmarshalBinary(b)
	if err == nil {
		s.dirty, s.behind, s.unsaved, s.term = true, true, true, term
		s.changed()
	}
	return err
}

// LoadSaved takes a table saved to StateDir and returns its scored
// samples among the first n, their scores and the running mean.
func (s *Table) LoadSaved(b []byte, n int) (ids []uint32, scores []float64, mean float64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.table.UnmarshalBinary(b); err != nil {
		return nil, nil, 0, err
	}
	s.changed()
	for i := 0; i < n; i++ {
		if s.table.Scored(uint32(i)) {
			ids = append(ids, uint32(i))
			scores = append(scores, s.table.Score(uint32(i)))
		}
	}
	return ids, scores, s.table.Mean(), nil
}

// UnsavedTable returns the table to save if it changed since the last
// save, and marks it saved; ok is false if nothing changed.
func (s *Table) UnsavedTable() (b []byte, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.unsaved {
		return nil, false, nil
	}
	b, err = s.table.MarshalBinary()
	s.unsaved = false
	return b, true, err
}

// DueReplication returns the table to replicate now, if it is due: to
// every member (toAll) once the wait since the last such round has
// passed, else to the standbys if it changed. others is the number of
// members besides this node and budget the bytes per second a round to
// all of them may take; due is false if nothing is to be sent.
func (s *Table) DueReplication(now time.Time, others int, budget int64) (b []byte, toAll, due bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	toAll = s.behind && now.Sub(s.allAt) >= s.spread
	if !s.dirty && !toAll {
		return nil, false, false, nil
	}
	b, err = s.table.MarshalBinary()
	s.dirty = false
	if toAll {
		s.behind, s.allAt = false, now
		s.spread = time.Duration(float64(len(b)*others) / float64(budget) * float64(time.Second))
	}
	return b, toAll, true, err
}

// Marshal returns the table and the term of the leader that wrote it.
func (s *Table) Marshal() ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.table.MarshalBinary()
	return b, s.term, err
}

// Info describes this copy of dataset's table.
func (s *Table) Info(dataset string) wire.TableInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return wire.TableInfo{Dataset: dataset, Term: s.term, Scored: s.table.NumScored()}
}

// ScoresOf returns the scores of ids, as singles (as the table keeps a
// scored sample's, and as its owners keep them), stamped as the leader of
// term reads them now (wire.Merged: the table's changes so far), and the
// running mean.
func (s *Table) ScoresOf(ids []uint32, term uint64) (m wire.Merged, mean float64) {
	scores := make([]float32, len(ids))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range ids {
		scores[i] = float32(s.table.Score(id))
	}
	return wire.Stamped(term, s.seq, ids, scores), s.table.Mean()
}

// ScoredOf returns those of ids that the table has scored, in their
// order, each with its score, stamped as ScoresOf's, and the running
// mean.
func (s *Table) ScoredOf(ids []uint32, term uint64) (m wire.Merged, mean float64) {
	var scored []uint32
	var scores []float32
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.table.Scored(id) {
			scored = append(scored, id)
			scores = append(scores, float32(s.table.Score(id)))
		}
	}
	return wire.Stamped(term, s.seq, scored, scores), s.table.Mean()
}

// All returns the scores of the first n samples, indexed by sample.
func (s *Table) All(n int) []float64 {
	scores := make([]float64, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range scores {
		scores[i] = s.table.Score(uint32(i))
	}
	return scores
}

// Deciles sets out[i] to the importance decile of sample idxs[i].
func (s *Table) Deciles(idxs []int, out []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, idx := range idxs {
		out[i] = Decile(s.table.Kind(), s.table.Score(uint32(idx)))
	}
}

// Draw draws epoch's order and weights from the table with sampler,
// preferring the resident samples (a bitmap, nil for none), and returns
// them with the number of samples scored.
func (s *Table) Draw(sampler *sampling.Sampler, epoch int, resident []uint64) (sampling.Drawn, int, error) {
	return s.draw((*sampling.Sampler).Draw, sampler, epoch, resident)
}

// DrawUnordered is Draw for a caller that reorders the order by which
// samples it holds (sampling.Sampler.DrawUnordered).
func (s *Table) DrawUnordered(sampler *sampling.Sampler, epoch int, resident []uint64) (sampling.Drawn, int, error) {
	return s.draw((*sampling.Sampler).DrawUnordered, sampler, epoch, resident)
}

// draw runs one of the sampler's draws on a copy of the table, taken
// under its lock: the draw sees the scores as they were when it began.
func (s *Table) draw(how func(*sampling.Sampler, int, *sampling.Table, []uint64) (sampling.Drawn, error),
	sampler *sampling.Sampler, epoch int, resident []uint64) (sampling.Drawn, int, error) {
	s.drawMu.Lock()
	defer s.drawMu.Unlock()
	s.mu.Lock()
	s.drawn = s.table.CopyTo(s.drawn)
	s.mu.Unlock()
	d, err := how(sampler, epoch, s.drawn, resident)
	return d, s.drawn.NumScored(), err
}

// Summary returns the number of samples scored and the running mean.
func (s *Table) Summary() (scored int, mean float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.NumScored(), s.table.Mean()
}

// scoreLow and scoreHigh bound rank scores: ln(10 + 63p) for p in [0, 1].
var scoreLow, scoreHigh = math.Log(10), math.Log(73)

// Decile is the importance decile of a score of kind, 0 (least) to 9:
// rank scores by where they lie in [ln 10, ln 73]; magnitude scores,
// which are relative to their minibatch's mean, by tenths of [0, 2]
// (twice the mean and above is decile 9).
func Decile(kind sampling.ScoreKind, score float64) int {
	if kind == sampling.ScoreMagnitude {
		return max(0, min(9, int(5*score)))
	}
	return max(0, min(9, int(10*(score-scoreLow)/(scoreHigh-scoreLow))))
}
