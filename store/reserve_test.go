package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/shade-mesh/shade/protocol/shm"
)

// filled is a reservation with its value copied in, and the value's
// checksum.
type filled struct {
	Reservation
	sum uint64
}

func (f filled) commit() bool { return f.Commit(f.sum) }

// reserveFilled reserves an entry of key for value and copies value into
// it, as a caller that reserved under its own lock does once out of it.
func reserveFilled(t *testing.T, s *Store, key, value []byte) filled {
	t.Helper()
	r, err := s.Reserve(key, len(value))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Value) != len(value) || cap(r.Value) != len(value) {
		t.Fatalf("reserved %d bytes (cap %d) for a %d-byte value", len(r.Value), cap(r.Value), len(value))
	}
	copy(r.Value, value)
	return filled{r, shm.Checksum(value)}
}

// TestReservedEntryUnseenUntilCommit: between Reserve and Commit readers
// find the value held before (or nothing), Has reports the key, and the
// entry's bytes are used; Commit puts the new value in the old one's place
// and frees the old block.
func TestReservedEntryUnseenUntilCommit(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	key, old, value := []byte("d/1"), bytes.Repeat([]byte{1}, 3000), bytes.Repeat([]byte{2}, 5000)
	fresh := []byte("d/2")
	if err := s.Put(key, old); err != nil {
		t.Fatal(err)
	}
	r := reserveFilled(t, s, key, value)
	r2 := reserveFilled(t, s, fresh, value)

	if got, ok := s.Get(nil, key); !ok || !bytes.Equal(got, old) {
		t.Fatalf("Get while reserved = %d bytes %v, want the old value", len(got), ok)
	}
	_, lent, loan, ok := s.Lend(nil, key, nil, 0)
	if !ok || !bytes.Equal(lent, old) {
		t.Fatalf("Lend while reserved = %d bytes %v, want the old value", len(lent), ok)
	}
	s.Return(loan)
	if _, ok := s.Get(nil, fresh); ok {
		t.Fatal("Get found a value reserved and not committed")
	}
	if s.View(fresh, func([]byte, uint64) {}) {
		t.Fatal("View found a value reserved and not committed")
	}
	if _, ok := s.Locate(fresh); ok {
		t.Fatal("Locate found a value reserved and not committed")
	}
	if !s.Has(fresh) || !s.Has(key) {
		t.Fatal("Has does not report reserved keys")
	}
	st := s.Stats()
	if want := s.Charge(3, len(old)) + 2*s.Charge(3, len(value)); st.UsedBytes != want || st.Entries != 1 || st.Loans != 2 {
		t.Fatalf("while reserved: %d bytes used (want %d), %d entries (want 1), %d loans (want 2)", st.UsedBytes, want, st.Entries, st.Loans)
	}

	if !r.commit() || !r2.commit() {
		t.Fatal("Commit of an entry nobody removed reported false")
	}
	for _, k := range [][]byte{key, fresh} {
		if got, ok := s.Get(nil, k); !ok || !bytes.Equal(got, value) {
			t.Fatalf("Get(%s) after Commit = %d bytes %v, want the new value", k, len(got), ok)
		}
	}
	st = s.Stats()
	if want := 2 * s.Charge(3, len(value)); st.UsedBytes != want || st.Entries != 2 || st.Loans != 0 || st.Puts != 3 {
		t.Fatalf("after Commit: %+v, want %d bytes used, 2 entries, no loans, 3 puts", st, want)
	}
	checkHeap(t, s.alloc)
}

// TestReservationRemovedWhilePending removes a pending entry in each way
// there is: its Commit reports false, what removed it is what readers
// find, and its block is free once Commit returns.
func TestReservationRemovedWhilePending(t *testing.T) {
	key, value, later := []byte("d/1"), bytes.Repeat([]byte{7}, 4000), bytes.Repeat([]byte{8}, 2000)
	for _, tc := range []struct {
		name   string
		remove func(*testing.T, *Store)
		want   []byte // what Get finds after the Commit; nil: nothing
	}{
		{"delete", func(t *testing.T, s *Store) {
			if !s.Delete(key) {
				t.Fatal("Delete of a reserved key reported false")
			}
		}, nil},
		{"put", func(t *testing.T, s *Store) {
			if err := s.Put(key, later); err != nil {
				t.Fatal(err)
			}
		}, later},
		{"reserve again", func(t *testing.T, s *Store) {
			if !reserveFilled(t, s, key, later).commit() {
				t.Fatal("the later reservation's Commit reported false")
			}
		}, later},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, Config{Capacity: 1 << 16})
			r := reserveFilled(t, s, key, value)
			tc.remove(t, s)
			if r.commit() {
				t.Fatal("Commit of a removed entry reported true")
			}
			got, ok := s.Get(nil, key)
			if ok != (tc.want != nil) || !bytes.Equal(got, tc.want) {
				t.Fatalf("Get = %d bytes %v, want %d bytes", len(got), ok, len(tc.want))
			}
			var want int64
			if tc.want != nil {
				want = s.Charge(len(key), len(tc.want))
			}
			if st := s.Stats(); st.UsedBytes != want || st.Loans != 0 {
				t.Fatalf("%d bytes used (want %d), %d loans out", st.UsedBytes, want, st.Loans)
			}
			checkHeap(t, s.alloc)
		})
	}
}

// TestAbandonKeepsTheHeldValue: an abandoned reservation's block is free
// and the value held for its key before stays.
func TestAbandonKeepsTheHeldValue(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	key, old := []byte("d/1"), []byte("the value held")
	if err := s.Put(key, old); err != nil {
		t.Fatal(err)
	}
	reserveFilled(t, s, key, bytes.Repeat([]byte{9}, 6000)).Abandon()
	reserveFilled(t, s, []byte("d/2"), bytes.Repeat([]byte{9}, 6000)).Abandon()
	if got, ok := s.Get(nil, key); !ok || !bytes.Equal(got, old) {
		t.Fatalf("Get after Abandon = %q %v, want %q", got, ok, old)
	}
	if s.Has([]byte("d/2")) {
		t.Fatal("Has reports an abandoned key")
	}
	if st := s.Stats(); st.UsedBytes != s.Charge(len(key), len(old)) || st.Loans != 0 || st.Entries != 1 {
		t.Fatalf("after Abandon: %+v", st)
	}
	checkHeap(t, s.alloc)
}

// TestReserveRefuses: the errors Put gives, for the same reasons.
func TestReserveRefuses(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 14})
	if _, err := s.Reserve([]byte("d/1"), 1<<14); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Reserve above the arena: %v, want ErrTooLarge", err)
	}
	if _, err := s.Reserve([]byte("d/1"), -1); err == nil {
		t.Fatal("Reserve of a negative length succeeded")
	}
	r := reserveFilled(t, s, []byte("d/1"), make([]byte, 10_000))
	if s.Fits(3, 10_000) {
		t.Fatal("Fits counts a reserved block as free")
	}
	if _, err := s.Reserve([]byte("d/2"), 10_000); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Reserve with the arena reserved: %v, want ErrNoSpace", err)
	}
	r.commit()
	s.Close()
	if _, err := s.Reserve([]byte("d/3"), 10); !errors.Is(err, ErrClosed) {
		t.Fatalf("Reserve after Close: %v, want ErrClosed", err)
	}
}

// TestCloseWhileReserved closes a store between Reserve and Commit: the
// value can still be written, Commit reports false, and the arena is
// unmapped by it.
func TestCloseWhileReserved(t *testing.T) {
	const name = "shade-reserve-close-test"
	s := newMemfdStore(t, name)
	r, err := s.Reserve([]byte("d/1"), 5000)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !mapped(t, name) {
		t.Fatal("the arena was unmapped with a reservation out")
	}
	value := bytes.Repeat([]byte("x"), 5000)
	copy(r.Value, value) // faults if unmapped
	if r.Commit(shm.Checksum(value)) {
		t.Fatal("Commit after Close reported true")
	}
	if mapped(t, name) {
		t.Fatal("the arena is still mapped after the last reservation's Commit")
	}
	if s.Stats().Loans != 0 {
		t.Fatalf("%d loans out after Commit", s.Stats().Loans)
	}
}

// TestCommitChecksumIsTheHolders: the checksum committed is the one the
// holder worked out on its own copy, so a value that changed on its way
// into the arena is refused by the first read and dropped.
func TestCommitChecksumIsTheHolders(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	key := []byte("d/1")
	r := reserveFilled(t, s, key, bytes.Repeat([]byte{3}, 4000))
	r.Value[1234] ^= 1
	if !r.commit() {
		t.Fatal("Commit reported false")
	}
	if got, ok := s.Get(nil, key); ok {
		t.Fatalf("Get returned %d bytes that are not the value committed", len(got))
	}
	if st := s.Stats(); st.Corrupt != 1 || st.Entries != 0 || st.UsedBytes != 0 {
		t.Fatalf("after the read: %+v, want 1 corrupt and nothing held", st)
	}
}

// TestAppendKey: the key filed under a hash is found from the hash alone,
// committed or reserved; a hash held by no key, a deleted key and a
// closed store find none; an entry whose header is corrupt is dropped,
// as a read drops it, and not named.
func TestAppendKey(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	held, reserved := []byte("free:held"), []byte("free:reserved")
	if err := s.Put(held, []byte("value")); err != nil {
		t.Fatal(err)
	}
	r := reserveFilled(t, s, reserved, []byte("later"))
	for _, key := range [][]byte{held, reserved} {
		got, ok := s.AppendKey([]byte("pre:"), Hash(key))
		if !ok || string(got) != "pre:"+string(key) {
			t.Fatalf("AppendKey(Hash(%s)) = %q, %v", key, got, ok)
		}
	}
	if got, ok := s.AppendKey([]byte("pre:"), Hash([]byte("free:absent"))); ok || string(got) != "pre:" {
		t.Fatalf("AppendKey of a hash no key has = %q, %v", got, ok)
	}
	if !r.commit() {
		t.Fatal("Commit reported false")
	}
	if got, ok := s.AppendKey(nil, Hash(reserved)); !ok || !bytes.Equal(got, reserved) {
		t.Fatalf("AppendKey once committed = %q, %v", got, ok)
	}
	s.Delete(reserved)
	if _, ok := s.AppendKey(nil, Hash(reserved)); ok {
		t.Fatal("AppendKey named a deleted key")
	}
	if st := s.Stats(); st.Hits != 0 || st.Misses != 0 {
		t.Fatalf("AppendKey counted %d hits, %d misses", st.Hits, st.Misses)
	}

	h := Hash(held)
	binary.LittleEndian.PutUint64(s.mem[heldOff(s, h)+vlenOff:], 1<<40) // a memory bug
	if got, ok := s.AppendKey(nil, h); ok || len(got) != 0 {
		t.Fatalf("AppendKey of a corrupt entry = %q, %v", got, ok)
	}
	if st := s.Stats(); st.Corrupt != 1 || st.Entries != 0 || st.UsedBytes != 0 || s.Has(held) {
		t.Fatalf("after a corrupt header: %+v", st)
	}

	if err := s.Put(held, []byte("value")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, ok := s.AppendKey(nil, h); ok {
		t.Fatal("AppendKey named a key after Close")
	}
}
