package store

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestLend(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	big := bytes.Repeat([]byte("sample "), 100)
	s.Put([]byte("d/big"), big)
	s.Put([]byte("d/small"), []byte("seven"))
	head := func(dst []byte, n int) []byte { return fmt.Appendf(dst, "<%d>", n) }

	got, lent, loan, ok := s.Lend([]byte("pre:"), []byte("d/big"), head, 64)
	if !ok || string(got) != "pre:<700>" || !bytes.Equal(lent, big) {
		t.Fatalf("Lend of a large value = %q, %d bytes lent, %v", got, len(lent), ok)
	}
	if s.Stats().Loans != 1 {
		t.Fatalf("%d loans out, want 1", s.Stats().Loans)
	}
	// The lent bytes are the arena's, not a copy.
	if i := bytes.Index(s.mem, big); i < 0 || &s.mem[i] != &lent[0] {
		t.Fatal("lent value is not the arena's bytes")
	}
	s.Return(loan)

	got, lent, _, ok = s.Lend([]byte("pre:"), []byte("d/small"), head, 64)
	if !ok || string(got) != "pre:<5>seven" || lent != nil {
		t.Fatalf("Lend of a value under min = %q, lent %q, %v", got, lent, ok)
	}
	got, lent, _, ok = s.Lend([]byte("pre:"), []byte("d/none"), func([]byte, int) []byte { t.Fatal("head called on a miss"); return nil }, 0)
	if ok || string(got) != "pre:" || lent != nil {
		t.Fatalf("Lend of an absent key = %q, lent %q, %v", got, lent, ok)
	}
	if s.Stats().Loans != 0 {
		t.Fatalf("%d loans out, want 0", s.Stats().Loans)
	}
	if st := s.Stats(); st.Hits != 2 || st.Misses != 1 {
		t.Fatalf("stats %+v, want 2 hits and 1 miss", st)
	}
}

// TestLentBlockOutlivesItsKey deletes and replaces lent values and fills
// the arena after them: the lent bytes stay as they were until the last
// loan of each is returned, and only then is the block's memory free.
func TestLentBlockOutlivesItsKey(t *testing.T) {
	for _, unlink := range []string{"delete", "replace", "drop corrupt"} {
		t.Run(unlink, func(t *testing.T) {
			s := newStore(t, Config{Capacity: 1 << 16})
			key, value := []byte("d/1"), bytes.Repeat([]byte{0xa5}, 8000)
			s.Put(key, value)
			used := s.Stats().UsedBytes
			_, lent1, loan1, _ := s.Lend(nil, key, nil, 0)
			_, lent2, loan2, _ := s.Lend(nil, key, nil, 0)
			switch unlink {
			case "delete":
				if !s.Delete(key) {
					t.Fatal("Delete of a lent key failed")
				}
			case "replace":
				s.Put(key, bytes.Repeat([]byte{0x5a}, 8000))
			case "drop corrupt":
				h := xxhash.Sum64(key)
				s.dropCorrupt(s.shard(h), h, heldOff(s, h))
			}
			// Fill the arena: nothing may land in the lent block.
			for i := 0; ; i++ {
				if err := s.Put(fmt.Appendf(nil, "fill/%d", i), bytes.Repeat([]byte{0xff}, 1000)); err != nil {
					break
				}
			}
			if !bytes.Equal(lent1, value) || !bytes.Equal(lent2, value) {
				t.Fatal("a lent value changed after its key was unlinked")
			}
			s.Return(loan1)
			if !bytes.Equal(lent2, value) {
				t.Fatal("a lent value changed after another loan of it was returned")
			}
			full := s.Stats().UsedBytes
			s.Return(loan2)
			if freed := full - s.Stats().UsedBytes; freed != used {
				t.Fatalf("the last Return freed %d bytes, want the block's %d", freed, used)
			}
			checkHeap(t, s.alloc)
		})
	}
}

// TestCloseWithLoansOut closes a store while a value is lent: the value
// stays readable, and the arena is unmapped by the last Return.
func TestCloseWithLoansOut(t *testing.T) {
	const name = "shade-lend-close-test"
	s := newMemfdStore(t, name)
	value := bytes.Repeat([]byte("x"), 5000)
	s.Put([]byte("d/1"), value)
	_, lent, loan, ok := s.Lend(nil, []byte("d/1"), nil, 0)
	if !ok {
		t.Fatal("Lend failed")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := s.Lend(nil, []byte("d/1"), nil, 0); ok {
		t.Fatal("Lend succeeded after Close")
	}
	if !mapped(t, name) {
		t.Fatal("the arena was unmapped with a loan out")
	}
	if !bytes.Equal(lent, value) {
		t.Fatal("the lent value changed at Close")
	}
	s.Return(loan)
	if mapped(t, name) {
		t.Fatal("the arena is still mapped after the last Return")
	}
	if s.Stats().Loans != 0 {
		t.Fatalf("%d loans out after the last Return", s.Stats().Loans)
	}
}

// newMemfdStore returns a store of 1 MiB whose arena is a memfd of the
// given name (see mapped), which the test closes itself, or skips the
// test where memfds are not available.
func newMemfdStore(t *testing.T, name string) *Store {
	t.Helper()
	s, err := New(Config{Capacity: 1 << 20, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if s.Fd() < 0 {
		s.Close()
		t.Skip("memfd unavailable; anonymous fallback in use")
	}
	return s
}

// mapped reports whether this process maps a memfd of the given name.
func mapped(t *testing.T, name string) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(maps), "memfd:"+name)
}
