package scores

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestReplicationAndSaving(t *testing.T) {
	s := New(10, 0.5, rand.New(rand.NewPCG(1, 2)))
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
	r := New(10, 0.5, nil)
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
		if got := Decile(c.score); got != c.want {
			t.Errorf("Decile(%v) = %d, want %d", c.score, got, c.want)
		}
	}
}
