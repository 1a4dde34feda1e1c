package policy

import "testing"

// withGhosts returns a new policy name ("app" or "order") with opts, and
// its ghost table.
func withGhosts(t *testing.T, name string, opts Options) (Policy, *ghostTable) {
	t.Helper()
	p, err := New(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := p.(*APP); ok {
		return p, &a.ghosts
	}
	return p, &p.(*OrderAware).ghosts
}

// TestTransient: APP and OrderAware keep nothing of a transient id
// (Options.Transient) that leaves the cache or that a Miss refuses, and
// what they keep of other ids is as before; a Hit brings back no id
// never seen.
func TestTransient(t *testing.T) {
	const free = ID(1) << 63
	for _, name := range []string{"app", "order"} {
		t.Run(name, func(t *testing.T) {
			p, ghosts := withGhosts(t, name, Options{Transient: func(id ID) bool { return id&free != 0 }})
			if o, ok := p.(*OrderAware); ok {
				o.BeginEpoch(0, []ID{1, 2, 1, 2, 1})
			}
			room := NewBudget(1)
			for _, id := range []ID{free | 1, free | 1, free | 1, 1, 1, 1} {
				if p.Miss(id, 1, room) {
					room.Admit(id, 1)
				}
				if id == free|1 && !p.Resident(id) {
					t.Fatalf("transient id refused into an empty room, or evicted by its own hit")
				}
			}
			if p.Resident(free | 1) {
				t.Fatal("a transient id read three times stays while 1, read three times later, does not fit")
			}
			if _, ok := ghosts.get(free | 1); ok {
				t.Fatal("the policy remembers a transient id that left")
			}
			p.Remove(1)
			room.Evict(1)
			if g, ok := ghosts.get(1); !ok || g.freq != 3 {
				t.Fatalf("1's ghost entry is %+v, %v; want 3 reads", g, ok)
			}
			p.Miss(free|3, 2, room) // larger than the room: refused
			p.Miss(3, 2, room)
			if _, ok := ghosts.get(free | 3); ok {
				t.Fatal("the policy remembers a transient id it refused")
			}
			if _, ok := ghosts.get(3); !ok {
				t.Fatal("the policy forgot an id it refused")
			}
			p.Hit(free | 1) // a read heard of after its id left
			p.Hit(4)        // never seen
			if _, ok := ghosts.get(free | 1); ok {
				t.Fatal("a Hit brought back a transient id")
			}
			if _, ok := ghosts.get(4); ok {
				t.Fatal("a Hit made a ghost entry for an id never seen")
			}
			if !p.Miss(free|2, 1, room) {
				t.Fatal("a transient id refused into an empty room")
			}
			room.Admit(free|2, 1)
			if _, ok := ghosts.get(free | 2); ok || ghosts.len() != 2 {
				t.Fatalf("a transient resident has a ghost entry (%v), or %d ghost entries, want 1's and 3's", ok, ghosts.len())
			}
		})
	}
}

// TestResidentsGhostEntryInHeap: a resident has no ghost entry; what it
// had (its reads and its score, or that it has none) moves into the heap
// as it is admitted, follows its hits and score updates there, and comes
// back into the ghost table as it leaves.
func TestResidentsGhostEntryInHeap(t *testing.T) {
	for _, name := range []string{"app", "order"} {
		t.Run(name, func(t *testing.T) {
			p, ghosts := withGhosts(t, name, Options{})
			s := p.(Scorer)
			room := NewBudget(10)
			s.SetScore(7, 2)
			for _, id := range []ID{7, 8} {
				if !p.Miss(id, 1, room) {
					t.Fatalf("%d refused into an empty room", id)
				}
				room.Admit(id, 1)
				if _, ok := ghosts.get(id); ok {
					t.Fatalf("resident %d has a ghost entry", id)
				}
			}
			s.SetScore(7, 3)
			p.Hit(7)
			p.Hit(7)
			p.Remove(7)
			p.Remove(8)
			if g, ok := ghosts.get(7); !ok || g.score() != 3 || g.freq != 3 {
				t.Fatalf("7 left with ghost entry %+v (score %v), %v; want score 3, 3 reads", g, g.score(), ok)
			}
			if g, ok := ghosts.get(8); !ok || g.scored() || g.freq != 1 {
				t.Fatalf("8 left with ghost entry %+v (score %v), %v; want no score, 1 read", g, g.score(), ok)
			}
			if p.(interface{ Ghosts() int }).Ghosts() != 2 {
				t.Fatalf("%d ghost entries, want 2", p.(interface{ Ghosts() int }).Ghosts())
			}
		})
	}
}
