package store

import (
	"unsafe"

	"github.com/shade-mesh/shade/internal/prefetch"
)

// prefetchedLines is how much of a block Prefetch asks for: the header
// and the value's first bytes. The CPU's own prefetcher follows a value
// read in order from there. BenchmarkLendBatch found 2 to 8 lines alike,
// and 16 or a whole 4 KiB value slower: the loads of the later keys then
// wait behind them.
const prefetchedLines = 4

// PrefetchIndex is the first of two hints for a key about to be read:
// it asks the CPU to start loading the part of the store's index where
// the key's lookup begins, and returns without waiting and without a
// lock. Prefetch for the same key some reads later then finds its block
// without waiting for memory. A caller reading keys in turn hints each
// key's index some reads before it hints the key (Prefetch), and that
// some reads before it reads it: the index's loads of many keys then
// overlap, where Prefetch's lookups under the shard's lock take them one
// at a time.
//
// It changes nothing and counts nothing; where no prefetch instruction is
// wired up it returns at once.
func (s *Store) PrefetchIndex(key []byte) {
	if !prefetch.Enabled {
		return
	}
	h := Hash(key)
	s.shard(h).m.prefetchSlot(h)
}

// Prefetch asks the CPU to start loading the block that holds key (its
// header and the first bytes of its value) into its caches, and returns
// without waiting. It is a hint for a caller about to read several keys
// in turn. A read of a key out of the CPU's caches waits for memory twice,
// for the header and then for the value; hinting the keys a few reads
// ahead lets those loads overlap the reads before them.
//
// It costs a lookup under the key's shard read lock, as a read does, and
// changes nothing: no hit or miss is counted, and a key not held, or a
// Store closed, is ignored. Where no prefetch instruction is wired up
// (architectures other than amd64) it returns at once.
func (s *Store) Prefetch(key []byte) {
	if !prefetch.Enabled {
		return
	}
	h := Hash(key)
	sh := s.shard(h)
	sh.mu.RLock()
	off, ok := sh.m.get(h)
	ok = ok && !s.closed.Load()
	var p unsafe.Pointer
	n := prefetchedLines
	if ok {
		p = unsafe.Pointer(&s.mem[off])
		n = min(n, (len(s.mem)-int(off))/64)
	}
	sh.mu.RUnlock()
	if ok {
		// After the lock, the block may be freed or the arena unmapped:
		// a prefetch never faults, and p stays inside the mapping's
		// addresses.
		prefetch.Lines(p, n)
	}
}
