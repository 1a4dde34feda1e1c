package store

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shade-mesh/shade/protocol/shm"
)

func mapStore(t *testing.T, s *Store) *shm.Mapping {
	t.Helper()
	fd, err := s.SharedFd()
	if errors.Is(err, ErrNotShared) {
		t.Skip("memfd unavailable; anonymous arena")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	m, err := shm.MapShared(fd, s.Size(), s.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestLocateAndCopy(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 20})
	m := mapStore(t, s)
	value := sampleValue(make([]byte, 4096), 7, 1)
	if err := s.Put([]byte("d/7"), value); err != nil {
		t.Fatal(err)
	}
	loc, ok := s.Locate([]byte("d/7"))
	if !ok || loc.Gen&1 != 1 || loc.Gen >= 1<<63 || loc.Len != uint64(len(value)) {
		t.Fatalf("Locate = %+v, %v", loc, ok)
	}
	got, err := m.Copy([]byte("prefix"), loc)
	if err != nil || string(got) != "prefix"+string(value) {
		t.Fatalf("Copy = %d bytes, %v", len(got), err)
	}
	if _, ok := s.Locate([]byte("d/8")); ok {
		t.Fatal("Locate found an absent key")
	}
	if st := s.Stats(); st.Hits != 1 || st.Misses != 1 {
		t.Fatalf("hits %d misses %d, want 1 and 1", st.Hits, st.Misses)
	}

	// Replaced: the old location is refused, the new one served.
	if err := s.Put([]byte("d/7"), sampleValue(make([]byte, 4096), 7, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Copy(nil, loc); !errors.Is(err, shm.ErrMoved) {
		t.Fatalf("Copy of a replaced value: %v, want shm.ErrMoved", err)
	}
	loc2, _ := s.Locate([]byte("d/7"))
	if got, err := m.Copy(nil, loc2); err != nil || binary.LittleEndian.Uint64(got[8:]) != 2 {
		t.Fatalf("Copy of the new value: %v", err)
	}

	// A location outside the mapping, or misaligned, is refused.
	for _, bad := range []shm.Location{
		{GenOff: uint64(s.Size()), Off: 0, Len: 1},
		{GenOff: 8, Off: uint64(s.Size()) - 1, Len: 2},
		{GenOff: 12, Off: 0, Len: 1},
		{GenOff: 8, Off: 16, Len: ^uint64(0)},
	} {
		if _, err := m.Copy(nil, bad); err == nil || errors.Is(err, shm.ErrMoved) {
			t.Fatalf("Copy(%+v) = %v, want a range error", bad, err)
		}
	}
}

// TestCopyAfterMergeAndReuse frees a located block, merges it into its
// predecessor and fills the merged block with a value made of small
// integers, so that the located generation word now lies inside another
// sample's bytes. The copy must still be refused.
func TestCopyAfterMergeAndReuse(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	m := mapStore(t, s)
	small := make([]byte, 2000)
	for i := 0; i+8 <= len(small); i += 8 {
		binary.LittleEndian.PutUint64(small[i:], uint64(i/8))
	}
	s.Put([]byte("a"), make([]byte, 1000))
	s.Put([]byte("b"), make([]byte, 1000))
	loc, _ := s.Locate([]byte("b"))
	s.Delete([]byte("a"))
	s.Delete([]byte("b")) // merges into a's block
	s.Put([]byte("c"), small)
	cloc, _ := s.Locate([]byte("c"))
	if cloc.GenOff >= loc.GenOff {
		t.Fatalf("the new block at %d does not cover the old generation word at %d", cloc.GenOff, loc.GenOff)
	}
	if _, err := m.CopyUnverified(nil, loc); !errors.Is(err, shm.ErrMoved) {
		t.Fatalf("copy of a value overwritten by another: %v, want shm.ErrMoved", err)
	}
}

// TestSharedReadersUnderEviction: readers copy through a shared mapping,
// validating by generation only (no checksum), while writers replace and
// delete the same keys as fast as they can in a small arena. Every copy
// kept must be exactly a version of its key.
func TestSharedReadersUnderEviction(t *testing.T) {
	const keys = 64
	s := newStore(t, Config{Capacity: 96 << 10}) // about half the key space fits
	m := mapStore(t, s)
	keyOf := func(k int) []byte { return []byte{'k', byte(k)} }
	stop := make(chan struct{})
	var writers, readers sync.WaitGroup
	for w := range 2 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			buf := make([]byte, 4096)
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for v := uint64(1); ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				k := r.IntN(keys)
				if r.IntN(4) == 0 {
					s.Delete(keyOf(k))
					continue
				}
				for s.Put(keyOf(k), sampleValue(buf, k, v)) != nil {
					s.Delete(keyOf(r.IntN(keys))) // evict to make room
				}
			}
		}()
	}
	var copied, moved, missing, spin atomic.Int64
	errs := make(chan error, 4)
	for g := range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			r := rand.New(rand.NewPCG(uint64(g), 2))
			var dst []byte
			// 8,000 reads, and more (up to ten times that) until some
			// copy has met a writer.
			for i := 0; i < 80000 && (i < 8000 || moved.Load() == 0); i++ {
				k := r.IntN(keys)
				loc, ok := s.Locate(keyOf(k))
				if !ok {
					missing.Add(1)
					continue
				}
				x := 0
				for i := range r.IntN(4000) { // widen the window for a writer
					x ^= i
				}
				spin.Add(int64(x))
				var err error
				dst, err = m.CopyUnverified(dst[:0], loc)
				if errors.Is(err, shm.ErrMoved) {
					moved.Add(1)
					continue
				}
				if err == nil {
					_, err = checkSample(dst, k)
				}
				if err != nil {
					errs <- err
					return
				}
				copied.Add(1)
			}
		}()
	}
	readers.Wait()
	close(stop)
	writers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("copies kept %d, refused as moved %d, absent %d", copied.Load(), moved.Load(), missing.Load())
	if copied.Load() == 0 || moved.Load() == 0 {
		t.Fatalf("copies kept %d, refused %d: the race was not exercised", copied.Load(), moved.Load())
	}
}

func TestSharedFdIsReadOnly(t *testing.T) {
	s := newStore(t, Config{Capacity: 1 << 16})
	fd, err := s.SharedFd()
	if errors.Is(err, ErrNotShared) {
		t.Skip("memfd unavailable")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if mem, err := unix.Mmap(fd, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		unix.Munmap(mem)
		t.Fatal("a shared descriptor mapped writable")
	}
	if _, err := unix.Pwrite(fd, []byte("x"), 0); err == nil {
		t.Fatal("a shared descriptor accepted a write")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o777 != 0o400 {
		t.Fatalf("memfd mode %o, %v; want 0400", st.Mode&0o777, err)
	}
	if _, err := shm.MapShared(fd, 1<<20, s.ID()); err == nil {
		t.Fatal("MapShared accepted a size larger than the arena")
	}
}
