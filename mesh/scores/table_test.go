package scores

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shade-mesh/shade/sampling"
)

func TestReplicationAndSaving(t *testing.T) {
	s := New(10, 0.5, sampling.ScoreRankLog, rand.New(rand.NewPCG(1, 2)))
	if _, _, due, _ := s.DueReplication(time.Now(), 3, 1<<20); due {
		t.Fatal("an untouched table is due for replication")
	}
	if err := s.Report([]uint32{1, 2}, []float64{0.1, 0.9}, 4); err != nil {
		t.Fatal(err)
	}
	b, toAll, due, err := s.DueReplication(time.Now(), 3, 1<<20)
	if err != nil || !due || !toAll || len(b) == 0 {
		t.Fatalf("after a report: due %v toAll %v err %v", due, toAll, err)
	}
	if _, _, due, _ := s.DueReplication(time.Now(), 3, 1<<20); due {
		t.Fatal("due twice for one change")
	}
	if info := s.Info("ds"); info.Term != 4 || info.Scored != 2 {
		t.Fatalf("info %+v", info)
	}
	saved, ok, err := s.UnsavedTable()
	if !ok || err != nil {
		t.Fatalf("unsaved: %v %v", ok, err)
	}
	if _, ok, _ := s.UnsavedTable(); ok {
		t.Fatal("unsaved twice for one change")
	}
	r := New(10, 0.5, sampling.ScoreRankLog, nil)
	ids, sc, _, err := r.LoadSaved(saved, 10)
	if err != nil || len(ids) != 2 || sc[0] != s.Sampling().Score(ids[0]) {
		t.Fatalf("loaded %v %v %v", ids, sc, err)
	}
}

func TestDecile(t *testing.T) {
	for _, c := range []struct {
		score float64
		want  int
	}{{0, 0}, {math.Log(10), 0}, {math.Log(73), 9}, {100, 9}, {(math.Log(10) + math.Log(73)) / 2, 5}} {
		if got := Decile(sampling.ScoreRankLog, c.score); got != c.want {
			t.Errorf("Decile(rank, %v) = %d, want %d", c.score, got, c.want)
		}
	}
	for _, c := range []struct {
		score float64
		want  int
	}{{0, 0}, {0.19, 0}, {0.2, 1}, {1, 5}, {1.99, 9}, {64, 9}} {
		if got := Decile(sampling.ScoreMagnitude, c.score); got != c.want {
			t.Errorf("Decile(magnitude, %v) = %d, want %d", c.score, got, c.want)
		}
	}
}

func TestSaveLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ds.scores")
	s := New(10, 0.5, sampling.ScoreRankLog, rand.New(rand.NewPCG(1, 2)))
	if _, _, _, ok, err := s.Load(path, "v1", 10); ok || err != nil {
		t.Fatalf("no file: ok %v err %v", ok, err)
	}
	if err := s.Report([]uint32{3, 4}, []float64{1, 2}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(path, "v1"); err != nil {
		t.Fatal(err)
	}
	r := New(10, 0.5, sampling.ScoreRankLog, nil)
	var other *VersionError
	if _, _, _, _, err := r.Load(path, "v2", 10); !errors.As(err, &other) || other.Saved != "v1" {
		t.Fatalf("another version: %v", err)
	}
	ids, _, _, ok, err := r.Load(path, "v1", 10)
	if !ok || err != nil || len(ids) != 2 {
		t.Fatalf("load: %v %v %v", ids, ok, err)
	}
	os.WriteFile(path, []byte("garbage"), 0o600)
	if _, _, _, _, err := r.Load(path, "v1", 10); !errors.Is(err, ErrNotScoreFile) {
		t.Fatalf("garbage: %v", err)
	}
}

// TestReportsMergeWhileADraws: a report merges while a draw of the same
// table is under way, and the draw reads the scores as they were when
// it began.
func TestReportsMergeWhileADraws(t *testing.T) {
	s := New(100, 0.5, sampling.ScoreMagnitude, rand.New(rand.NewPCG(1, 2)))
	if err := s.Report([]uint32{1, 2}, []float64{0.5, 2}, 1); err != nil {
		t.Fatal(err)
	}
	began, release := make(chan struct{}), make(chan struct{})
	drawn := make(chan error, 1)
	go func() {
		_, scored, err := s.draw(func(_ *sampling.Sampler, _ int, tb *sampling.Table, _ []uint64) (sampling.Drawn, error) {
			close(began)
			<-release
			if tb.Scored(7) {
				return sampling.Drawn{}, errors.New("the draw saw a score merged after it began")
			}
			return sampling.Drawn{}, nil
		}, nil, 0, nil)
		if err == nil && scored != 2 {
			err = errors.New("the draw counted other than the 2 samples scored when it began")
		}
		drawn <- err
	}()
	<-began
	merged := make(chan error, 1)
	go func() { merged <- s.Report([]uint32{7}, []float64{1}, 1) }()
	select {
	case err := <-merged:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a backstop against a hang, not a measure
		t.Fatal("a report waited for a draw to end")
	}
	close(release)
	if err := <-drawn; err != nil {
		t.Fatal(err)
	}
	if !s.Sampling().Scored(7) {
		t.Fatal("the report merged during the draw was lost")
	}
}

// TestScoredOf: ScoredOf keeps, in their order, the ids the table has
// scored, each with the score Score gives it, and passes over the others
// and ids past the table.
func TestScoredOf(t *testing.T) {
	s := New(10, 0.5, sampling.ScoreRankLog, rand.New(rand.NewPCG(1, 2)))
	if err := s.Report([]uint32{7, 2, 5}, []float64{0.1, 0.9, 0.4}, 1); err != nil {
		t.Fatal(err)
	}
	m, mean := s.ScoredOf([]uint32{9, 5, 0, 2, 12, 7}, 4)
	ids, scores := m.IDs, m.Scores
	if want := []uint32{5, 2, 7}; len(ids) != len(want) || ids[0] != 5 || ids[1] != 2 || ids[2] != 7 {
		t.Fatalf("scored %v, want %v", ids, want)
	}
	for i, id := range ids {
		if scores[i] != float32(s.Sampling().Score(id)) {
			t.Errorf("sample %d: %v, the table's %v", id, scores[i], s.Sampling().Score(id))
		}
	}
	if mean != s.Sampling().Mean() {
		t.Errorf("mean %v, the table's %v", mean, s.Sampling().Mean())
	}
	// Stamped by the term given and the table's changes: one so far.
	if m.Term != 4 || !slices.Equal(m.Stamps(), []uint32{1, 1, 1}) {
		t.Errorf("stamped term %d, seqs %v; want 4, [1 1 1]", m.Term, m.Stamps())
	}
	if err := s.Report([]uint32{2}, []float64{0.3}, 1); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.ScoresOf([]uint32{2, 3}, 4); !slices.Equal(m.Stamps(), []uint32{2, 2}) || m.Scores[0] != float32(s.Sampling().Score(2)) {
		t.Errorf("after a second report: %+v, want seqs [2 2] and sample 2's new score", m)
	}
}
