package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Reservation is the room Reserve made in the arena for one entry. Its
// holder fills Value and then calls Commit, or gives the room back with
// Abandon: exactly one of the two, once.
type Reservation struct {
	// Value is where the entry's value lies in the arena, as many bytes as
	// Reserve was asked for. The holder writes the value into it before
	// Commit and does not touch it after Commit or Abandon.
	Value []byte
	s     *Store
	off   uint64
	h     uint64
}

// Reserve makes room for an entry of key and a value of n bytes, as Put
// would, and returns it to be filled and then linked under key by Commit.
// A caller that decides under a lock of its own what to store (a cache
// policy choosing victims) reserves under that lock, and copies the value
// in and commits it after letting the lock go: a Put under the lock would
// hold it while the whole value is copied and checksummed.
//
// Until Commit the entry is pending: Get, Append, Lend, View and Locate do
// not find it, and a value already held for key stays readable; Has
// reports key held, and Fits and Stats count the entry's bytes as used.
// A Delete of key, or a later Put or Reserve of key, removes the pending
// entry: its Commit then reports false and frees its block. The arena
// stays mapped until Commit or Abandon, even past a Close, so Value can
// always be written.
//
// It returns ErrTooLarge if the entry exceeds the whole arena, ErrNoSpace
// if no free block fits now, and ErrClosed after Close.
func (s *Store) Reserve(key []byte, n int) (Reservation, error) {
	if n < 0 {
		return Reservation{}, fmt.Errorf("store: reserve for a value of %d bytes", n)
	}
	c := charge(len(key), n)
	if uint64(c) > s.alloc.total {
		return Reservation{}, fmt.Errorf("%w: %d-byte key and %d-byte value need %d bytes, arena has %d",
			ErrTooLarge, len(key), n, c, s.alloc.total)
	}
	size := uint64(c)
	h := Hash(key)

	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return Reservation{}, ErrClosed
	}
	off, err := s.alloc.alloc(size)
	if err != nil {
		return Reservation{}, err
	}
	e := s.mem[off : off+size]
	binary.LittleEndian.PutUint64(e[vlenOff:], uint64(n))
	binary.LittleEndian.PutUint32(e[klenOff:], uint32(len(key)))
	// The holder's loan: the block is freed, and the arena unmapped after
	// a Close, no earlier than Commit or Abandon returns it.
	binary.LittleEndian.PutUint32(e[loanOff:], 1)
	s.loans.Add(1)
	copy(e[headerSize:], key)

	sh := s.shard(h)
	sh.mu.Lock()
	old, had := sh.pending[h]
	sh.pending[h] = off
	sh.mu.Unlock()
	if had {
		s.unlinked(old) // a later Reserve of the key wins
	}
	vo := valueOffset(uint64(len(key)))
	end := vo + uint64(n)
	return Reservation{Value: e[vo:end:end], s: s, off: off, h: h}, nil
}

// Commit records sum as the value's checksum and makes the entry key's,
// in place of any value held for key, whose block is then freed as Put
// frees it. sum is the shm.Checksum of the value as the holder had it
// before copying it into Value, as Put works it out on the caller's
// value: a copy that went wrong is then caught by the first read. It
// reports false, and frees the entry's block, where the entry was removed
// while pending (a Delete of key, a later Put or Reserve of it) or the
// store was closed.
func (r Reservation) Commit(sum uint64) bool {
	s := r.s
	binary.LittleEndian.PutUint64(s.mem[r.off+sumOff:], sum)
	sh := s.shard(r.h)
	sh.mu.Lock()
	cur, pending := sh.pending[r.h]
	linked := pending && cur == r.off && !s.closed.Load()
	var old uint64
	var had bool
	if linked {
		delete(sh.pending, r.h)
		old, had = sh.m.set(r.h, r.off)
	}
	sh.mu.Unlock()
	if linked {
		if had {
			s.unlinked(old)
		} else {
			s.entries.Add(1)
		}
		s.puts.Add(1)
	}
	s.Return(r.off) // frees the block if it was removed meanwhile
	return linked
}

// Abandon gives the entry's block back unfilled; a value held for key
// before Reserve stays.
func (r Reservation) Abandon() {
	s := r.s
	sh := s.shard(r.h)
	sh.mu.Lock()
	cur, pending := sh.pending[r.h]
	mine := pending && cur == r.off
	if mine {
		delete(sh.pending, r.h)
	}
	sh.mu.Unlock()
	if mine {
		s.unlinked(r.off) // flagged: the Return below frees it
	}
	s.Return(r.off)
}

// pendingOf returns the block of key's pending entry in sh, which the
// caller has locked.
func (s *Store) pendingOf(sh *shard, h uint64, key []byte) (uint64, bool) {
	off, ok := sh.pending[h]
	if !ok {
		return 0, false
	}
	return off, bytes.Equal(s.pendingKey(off), key)
}

// pendingKey is the key of the pending entry at block off, which Reserve
// wrote; its shard must be locked.
func (s *Store) pendingKey(off uint64) []byte {
	klen := uint64(binary.LittleEndian.Uint32(s.mem[off+klenOff:]))
	return s.mem[off+headerSize : off+headerSize+klen]
}
