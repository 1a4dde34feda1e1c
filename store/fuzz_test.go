package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/shade-mesh/shade/protocol/shm"
)

// FuzzStore decodes operations from the input, three bytes each (op, key,
// size), runs them on a small store and checks every result against a map.
func FuzzStore(f *testing.F) {
	f.Add([]byte{0, 1, 10, 1, 1, 0, 2, 1, 0, 1, 1, 0})
	f.Add([]byte{0, 1, 255, 0, 2, 255, 0, 3, 255, 3, 2, 0, 0, 4, 200, 1, 1, 0})
	f.Add(bytes.Repeat([]byte{0, 7, 90, 0, 8, 30, 2, 7, 0}, 20))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const capacity = 8 << 10
		s, err := New(Config{Capacity: capacity, Shards: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		model := map[string][]byte{}
		for i := 0; i+2 < len(ops); i += 3 {
			op, k, n := ops[i]%5, ops[i+1]%32, int(ops[i+2])
			key := []byte(fmt.Sprintf("d/%d", k))
			switch op {
			case 0: // put, n*40 bytes: up to 10200, above the arena; odd n by Reserve and Commit
				value := bytes.Repeat([]byte{byte(i)}, n*40)
				fits := s.Fits(len(key), len(value))
				var err error
				if n%2 == 0 {
					err = s.Put(key, value)
				} else {
					var r Reservation
					if r, err = s.Reserve(key, len(value)); err == nil {
						copy(r.Value, value)
						if !r.Commit(shm.Checksum(value)) {
							t.Fatalf("op %d: Commit of a reservation nobody removed reported false", i)
						}
					}
				}
				switch {
				case err == nil:
					model[string(key)] = value
				case errors.Is(err, ErrTooLarge):
					if s.Charge(len(key), len(value)) <= capacity {
						t.Fatalf("op %d: ErrTooLarge for %d bytes", i, len(value))
					}
				case !errors.Is(err, ErrNoSpace):
					t.Fatalf("op %d: Put = %v", i, err)
				}
				if fits != (err == nil) {
					t.Fatalf("op %d: Fits %v, Put %v", i, fits, err)
				}
			case 1:
				got, ok := s.Get(nil, key)
				want, held := model[string(key)]
				if ok != held || !bytes.Equal(got, want) {
					t.Fatalf("op %d: Get(%s) = %d bytes %v, want %d bytes %v", i, key, len(got), ok, len(want), held)
				}
			case 2:
				_, held := model[string(key)]
				if s.Delete(key) != held {
					t.Fatalf("op %d: Delete(%s) != %v", i, key, held)
				}
				delete(model, string(key))
			case 3:
				_, held := model[string(key)]
				if s.Has(key) != held {
					t.Fatalf("op %d: Has(%s) != %v", i, key, held)
				}
			case 4:
				want, held := model[string(key)]
				ok := s.View(key, func(v []byte, _ uint64) {
					if !bytes.Equal(v, want) {
						t.Fatalf("op %d: View(%s) saw wrong bytes", i, key)
					}
				})
				if ok != held {
					t.Fatalf("op %d: View(%s) = %v", i, key, ok)
				}
			}
			var used int64
			for k, v := range model {
				used += s.Charge(len(k), len(v))
			}
			if st := s.Stats(); st.UsedBytes != used || st.Entries != len(model) {
				t.Fatalf("op %d: used %d entries %d, model %d and %d", i, st.UsedBytes, st.Entries, used, len(model))
			}
		}
		checkHeap(t, s.alloc)
		for k := range model {
			s.Delete([]byte(k))
		}
		if st := s.Stats(); st.UsedBytes != 0 || st.LargestFree != capacity {
			t.Fatalf("emptied: %+v", st)
		}
	})
}
