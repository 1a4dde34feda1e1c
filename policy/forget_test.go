package policy

import "testing"

// TestForget: Forget drops what APP and OrderAware remember of an id that
// left (its ghost entry, and OrderAware's places of it in the order), so
// that the id comes back as one never seen; a Hit does not bring back an
// id forgotten or never seen; a resident is left as it is.
func TestForget(t *testing.T) {
	for _, name := range []string{"app", "order"} {
		t.Run(name, func(t *testing.T) {
			p, err := New(name, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if o, ok := p.(*OrderAware); ok {
				o.BeginEpoch(0, []ID{1, 2, 1, 2, 1})
			}
			ghosts := func() *ghostTable {
				if a, ok := p.(*APP); ok {
					return &a.ghosts
				}
				return &p.(*OrderAware).ghosts
			}
			room := NewBudget(1)
			for _, id := range []ID{1, 1, 1} { // 1 is read three times, then leaves
				if p.Miss(id, 1, room) {
					room.Admit(id, 1)
				}
			}
			p.Remove(1)
			room.Evict(1)      // its bytes freed, as a node deletes it
			p.Miss(3, 2, room) // 3 is read, never admitted (larger than the room)
			if g, ok := ghosts().get(1); !ok || g.freq != 3 {
				t.Fatalf("before Forget, 1's ghost entry is %+v, %v; want 3 reads", g, ok)
			}
			p.(Forgetter).Forget(1)
			p.(Forgetter).Forget(3)
			if _, ok := ghosts().get(1); ok {
				t.Fatal("Forget left 1's ghost entry")
			}
			if _, ok := ghosts().get(3); ok {
				t.Fatal("Forget left 3's ghost entry")
			}
			p.Hit(1) // a read heard of after 1 was forgotten
			p.Hit(4) // never seen
			if _, ok := ghosts().get(1); ok {
				t.Fatal("a Hit brought back 1's ghost entry")
			}
			if _, ok := ghosts().get(4); ok {
				t.Fatal("a Hit made a ghost entry for an id never seen")
			}
			if o, ok := p.(*OrderAware); ok {
				if _, ok := o.cursor.get(1); ok {
					t.Fatal("Forget left 1's places in the order")
				}
			}

			if !p.Miss(2, 1, room) {
				t.Fatal("2 refused into an empty room")
			}
			room.Admit(2, 1)
			p.(Forgetter).Forget(2)
			if g, ok := ghosts().get(2); !p.Resident(2) || !ok || g.freq != 1 {
				t.Fatalf("Forget changed a resident: resident %v, ghost entry %+v, %v", p.Resident(2), g, ok)
			}
			if ghosts().len() != 1 {
				t.Fatalf("%d ghost entries, want the resident's alone", ghosts().len())
			}
		})
	}
}
