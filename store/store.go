// Package store keeps cached training samples in off-heap memory on one node.
//
// A Store is one arena of Capacity bytes, mapped from a memfd (so that it can
// later be shared with trainer processes) and pre-faulted, in huge pages
// where the kernel allows (Stats.HugePageBytes). Samples are
// allocated inside the arena by a two-level segregated-fit allocator whose
// metadata lives in the arena too, and found through a sharded index from
// each key's hash to its block's offset, open-addressing tables of 16
// bytes a slot under a directory (index), which grows a table at a time
// and which a reader of many keys can hint to the CPU ahead of its reads
// (PrefetchIndex, Prefetch). The index's tables lie in memory mapped
// outside the Go heap too (Stats.IndexBytes), so the store's Go heap
// grows with neither the number of cached samples nor their size.
//
// The store never decides what to evict. Put fails with ErrNoSpace when no
// free block fits; the caller's policy evicts (Delete) and retries, and can
// ask Fits first, which gives exactly the answer Put's allocation would.
//
// Keys and values are copied in and out: callers own the slices they pass
// and the slices they get back. View lends a value in place, only for the
// duration of its callback; Lend lends it until the borrower returns it,
// for a reply that the kernel copies to a socket straight from the arena.
package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/shade-mesh/shade/internal/bytesize"
	"github.com/shade-mesh/shade/protocol/crc32c"
	"github.com/shade-mesh/shade/protocol/shm"
)

// Errors returned by the store; test them with errors.Is.
var (
	// ErrTooLarge: the sample is larger than the whole arena could ever hold.
	ErrTooLarge = errors.New("store: sample too large")
	// ErrNoSpace: no free block fits the sample now; evict and retry.
	ErrNoSpace = errors.New("store: no space")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store: closed")
	// ErrInvalidConfig: New was given a Config it cannot honour.
	ErrInvalidConfig = errors.New("store: invalid config")
	// ErrNotShared: the arena is anonymous memory, which cannot be shared.
	ErrNotShared = errors.New("store: arena not shareable (no memfd)")
)

// Config configures a Store. The zero value of every optional field means
// its default; New fills defaults on a copy and never writes into the caller's
// Config.
type Config struct {
	// Capacity is the size of the arena in bytes; required, > 0. Entry
	// headers and alignment are charged against it (see Store.Charge).
	Capacity int64
	// Shards is the number of index shards; 0 means 64. A power of two.
	Shards int
	// Name names the memfd, as seen in /proc/<pid>/maps; "" means
	// "shade-store".
	Name string
	// SkipVerify turns off the checksum check that Get, Append and View do on
	// every read by default.
	SkipVerify bool
}

const (
	defaultShards = 64
	defaultName   = "shade-store"
)

// Entry layout inside an allocated block, after the allocator's tag and
// generation words (see alloc.go):
//
//	16: shm.Checksum of the value (CRC-32C)
//	24: value length, uint64
//	32: key length, uint32
//	36: loans of the block out now, uint32, and the unlinked flag (see Lend)
//	40: key bytes, then padding to 16
//	    value bytes, starting 16-byte aligned
//	end-8: the allocator's closing tag
//
// All integers are little-endian.
const (
	sumOff     = 16
	vlenOff    = 24
	klenOff    = 32
	loanOff    = 36
	headerSize = 40
	maxKeyLen  = math.MaxUint32
	// maxValueLen keeps charge arithmetic far from overflow; no arena can
	// reach it anyway.
	maxValueLen = 1 << 60
)

func alignUp(n uint64) uint64 { return (n + align - 1) &^ (align - 1) }

// valueOffset is where the value starts, from the start of the block.
func valueOffset(keyLen uint64) uint64 { return alignUp(headerSize + keyLen) }

// charge is the block size of an entry, or -1 for negative lengths and
// math.MaxInt64 for lengths that no arena can hold.
func charge(keyLen, valueLen int) int64 {
	switch {
	case keyLen < 0 || valueLen < 0:
		return -1
	case uint64(keyLen) > maxKeyLen || uint64(valueLen) > maxValueLen:
		return math.MaxInt64
	}
	return int64(alignUp(valueOffset(uint64(keyLen)) + uint64(valueLen) + tagSize))
}

// Store is an off-heap cache of samples. All methods are safe for
// concurrent use.
//
// Lock order, outermost first:
//
//  1. life: read-held by Reserve (and so Put), Delete and the drop of a
//     corrupt entry for their whole duration (they touch the arena
//     outside the other locks: a new block's header, an unlinked block's
//     loan word), write-held by Close, which may unmap the arena. Commit
//     and Abandon do not take it: the reservation's loan keeps the arena
//     mapped.
//  2. shard.mu: at most one at a time, except Close, which takes them all
//     in index order.
//  3. tlsf.mu: innermost; nothing else is taken while it is held.
//
// Readers (Get, View, Has) copy out of the arena under their shard's read
// lock. Delete and replacing Put unlink an offset under the shard's write
// lock and only then free the block, so no block is ever freed while a
// reader can still reach it. A new block is filled before it is linked,
// after Reserve (Put reserves too) with no lock at all, its holder's loan
// (below) keeping the arena mapped. A reserved block waits in its shard's
// pending map, where no reader looks, until Commit moves it into the
// index.
//
// A block that is lent (Lend) when it is unlinked is freed by the last
// Return of it instead: its loan word counts the loans out and carries
// the unlinked flag, and whichever of the unlink and the last Return comes
// second frees the block. Close unmaps the arena once every loan is back.
type Store struct {
	cfg Config
	// mem is the arena's mapping and fd its memfd (-1 without one). Both
	// stay set after Close, whose caller (or the last Return of a loan
	// out then) unmaps and closes them: only loans touch them after.
	mem    []byte
	fd     int
	huge   int64 // Stats.HugePageBytes
	loans  atomic.Int64
	alloc  *tlsf
	id     uint64
	shards []shard
	mask   uint64

	life   sync.RWMutex
	closed atomic.Bool // set under life and every shard lock

	entries atomic.Int64
	puts    atomic.Uint64
	deletes atomic.Uint64
	corrupt atomic.Uint64
}

type shard struct {
	mu      sync.RWMutex
	m       index             // xxhash64(key) -> block offset
	pending map[uint64]uint64 // the same, for blocks reserved and not yet committed
	hits    atomic.Uint64
	misses  atomic.Uint64
	_       [64]byte // keep neighbouring shards off one cache line
}

// Stats is a snapshot of a Store's counters and memory. Byte figures are
// bytes of the arena; UsedBytes + FreeBytes is Capacity rounded down to a
// multiple of 16.
type Stats struct {
	Entries     int    // samples held
	UsedBytes   int64  // bytes charged to held samples (sum of Charge)
	FreeBytes   int64  // arena bytes not charged to any sample
	LargestFree int64  // largest free block that can hold an entry
	Capacity    int64  // Config.Capacity
	Puts        uint64 // Put and Commit calls that stored a sample
	Hits        uint64 // Get, Append, Lend and View that found the key
	Misses      uint64 // Get, Append, Lend and View that did not
	Corrupt     uint64 // checksum mismatches found on read (each dropped)
	Deletes     uint64 // Delete calls that removed a sample or a reservation
	// Loans is the values lent (Lend) and not yet returned, and the
	// entries reserved (Reserve) and not yet committed or abandoned, also
	// after Close.
	Loans int
	// HugePageBytes is how much of the arena the kernel mapped in huge
	// pages when New mapped it (see prefault); 0 with 4 KiB pages only.
	HugePageBytes int64
	// IndexBytes is the memory of the index's tables, outside the arena
	// and the Go heap: 31-37 bytes an entry, and a table of 16 KiB in
	// each shard that has held an entry. Tables are not given back while
	// the store is open; 0 after Close.
	IndexBytes int64
}

// New maps an arena of cfg.Capacity bytes and returns an empty Store. The
// caller must Close it to release the memory. It refuses (ErrInvalidConfig)
// a capacity that, with the memory the process holds that the kernel
// cannot reclaim (another Store's arena among it, see resident) and 96 MiB
// for the rest of the process, is more than the process may use: its
// memory cgroup's limit, or the machine's memory (memoryLimit); the kernel
// would otherwise kill the process as the arena is faulted in.
func New(cfg Config) (*Store, error) { return newStoreWith(cfg, arenaOptions{}) }

// newStoreWith is New, with the arena mapped as opt says, so that tests
// can take the anonymous fallback and 4 KiB pages.
func newStoreWith(cfg Config, opt arenaOptions) (*Store, error) {
	if cfg.Capacity <= 0 || uint64(cfg.Capacity) > math.MaxInt {
		return nil, fmt.Errorf("%w: capacity %d bytes", ErrInvalidConfig, cfg.Capacity)
	}
	if cfg.Shards == 0 {
		cfg.Shards = defaultShards
	}
	if cfg.Shards < 0 || cfg.Shards&(cfg.Shards-1) != 0 {
		return nil, fmt.Errorf("%w: %d shards is not a power of two", ErrInvalidConfig, cfg.Shards)
	}
	if cfg.Name == "" {
		cfg.Name = defaultName
	}
	if limit, where := memoryLimit(""); limit > 0 {
		if held := resident(""); cfg.Capacity > limit-held-headroom {
			return nil, fmt.Errorf("%w: capacity %s, with the %s this process holds and %s for the rest of it, is more than the %s it may use (%s): "+
				"the kernel would kill it as the memory is faulted in", ErrInvalidConfig,
				bytesize.Format(cfg.Capacity), bytesize.Format(held), bytesize.Format(headroom), bytesize.Format(limit), where)
		}
	}
	mem, fd, err := mapArena(cfg.Name, int(cfg.Capacity), opt)
	if err != nil {
		return nil, err
	}
	s := &Store{
		cfg:    cfg,
		mem:    mem,
		fd:     fd,
		huge:   hugePageBytes(mem),
		alloc:  newTLSF(mem),
		id:     rand.Uint64() >> 1,
		shards: make([]shard, cfg.Shards),
		mask:   uint64(cfg.Shards - 1),
	}
	for i := range s.shards {
		s.shards[i].pending = make(map[uint64]uint64)
	}
	return s, nil
}

func (s *Store) shard(h uint64) *shard { return &s.shards[h&s.mask] }

// Charge returns the bytes an entry with these key and value lengths
// occupies in the arena, header and alignment included. It is what Put
// allocates and what Stats.UsedBytes sums. It returns -1 for negative
// lengths.
func (s *Store) Charge(keyLen, valueLen int) int64 { return charge(keyLen, valueLen) }

// Fits reports whether a Put of an entry with these lengths would find a
// free block now. It runs the very search Put runs, so with no other writer
// in between, Put fails with ErrNoSpace exactly when Fits says false (or
// ErrTooLarge, for which Fits is false too). Replacing a key does not free
// its old block until the new one is filled, so Fits does not count it.
func (s *Store) Fits(keyLen, valueLen int) bool {
	c := charge(keyLen, valueLen)
	if c < 0 || uint64(c) > s.alloc.total {
		return false
	}
	return s.alloc.fits(uint64(c))
}

// Put copies key and value into the arena, with the shm.Checksum of value, and
// makes it the entry for key, freeing the block of any previous entry. Two
// different keys with equal 64-bit hashes cannot both be held: the later
// Put replaces the earlier entry.
//
// It returns ErrTooLarge if the entry exceeds the whole arena, ErrNoSpace if
// no free block fits now (any previous entry for key is then kept), and
// ErrClosed after Close. The caller keeps ownership of key and value.
func (s *Store) Put(key, value []byte) error {
	r, err := s.Reserve(key, len(value))
	if err != nil {
		return err
	}
	// A Commit that reports false was overtaken by a Delete, Put or
	// Reserve of key, each later than this Put; or by Close.
	if !r.Commit(shm.Copy(r.Value, value)) && s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// entry returns the key, value and checksum stored in the block at off, or
// ok false if the header describes bytes outside the block. The caller holds
// the block's shard lock.
func (s *Store) entry(off uint64) (key, value []byte, sum uint64, ok bool) {
	mem := s.mem
	tag := binary.LittleEndian.Uint64(mem[off:])
	size := tag & sizeMask
	klen := uint64(binary.LittleEndian.Uint32(mem[off+klenOff:]))
	vlen := binary.LittleEndian.Uint64(mem[off+vlenOff:])
	vo := valueOffset(klen)
	if tag&usedBit == 0 || size > uint64(len(mem))-off || vlen > size || vo+vlen+tagSize > size {
		return nil, nil, 0, false
	}
	sum = binary.LittleEndian.Uint64(mem[off+sumOff:])
	return mem[off+headerSize : off+headerSize+klen : off+headerSize+klen],
		mem[off+vo : off+vo+vlen : off+vo+vlen], sum, true
}

// lookup finds key under sh's read lock, held by the caller. found is false
// for an absent key, a key whose hash is held by a different key, and a
// corrupt entry; corrupt is true only for the last, which the caller must
// drop with dropCorrupt after releasing the read lock.
func (s *Store) lookup(sh *shard, h uint64, key []byte, verify bool) (off uint64, value []byte, sum uint64, found, corrupt bool) {
	if s.closed.Load() {
		return 0, nil, 0, false, false
	}
	off, ok := sh.m.get(h)
	if !ok {
		return 0, nil, 0, false, false
	}
	k, v, sum, ok := s.entry(off)
	if !ok {
		return off, nil, 0, false, true
	}
	if !bytes.Equal(k, key) {
		return 0, nil, 0, false, false
	}
	if verify && !verifiedInPlace(v, sum) {
		return off, nil, 0, false, true
	}
	return off, v, sum, true, false
}

// verifiedInPlace reports whether v, in the arena, has the checksum sum.
//
// Where the checksum runs on the CRC32 instruction, it first reads one
// byte of every cache line of v: those loads do not wait on one another,
// so a value that is not in the CPU's cache comes in from memory many
// lines at a time, where the checksum's loads would wait for each line in
// turn. On a 100 KiB value out of cache that makes the check about twice
// as fast. The carry-less multiplication fold (crc32c.Folds: AVX-512, or
// AVX2 with VPCLMULQDQ) loads two to four lines at a time itself, and
// reading them first only slows it (BenchmarkVerifyInPlace, 100 KiB, AVX2:
// 7.4 us a value against 10.3 touched first).
func verifiedInPlace(v []byte, sum uint64) bool {
	if crc32c.Folds() {
		return shm.Checksum(v) == sum
	}
	return touchedThenVerified(v, sum)
}

// touchedThenVerified reads one byte of every cache line of v, then
// reports whether v has the checksum sum.
func touchedThenVerified(v []byte, sum uint64) bool {
	var touched byte
	for i := 0; i < len(v); i += 64 {
		touched |= v[i]
	}
	// touched goes on both sides, so that its loads are kept: the check is
	// the checksum's alone.
	t := uint64(touched)
	return shm.Checksum(v)^t == sum^t
}

// dropCorrupt unlinks and frees the block at off if it is still key's
// entry. The caller holds no lock.
func (s *Store) dropCorrupt(sh *shard, h, off uint64) {
	s.corrupt.Add(1)
	s.life.RLock()
	defer s.life.RUnlock()
	sh.mu.Lock()
	cur, ok := sh.m.get(h)
	drop := ok && cur == off && !s.closed.Load()
	if drop {
		sh.m.del(h)
	}
	sh.mu.Unlock()
	if drop {
		s.entries.Add(-1)
		s.unlinked(off)
	}
}

// Get appends the value held for key to dst and returns the result, like
// append; the result is the caller's. ok is false if key is absent, the
// store is closed, or the stored value fails its checksum (the entry is then
// dropped and counted in Stats.Corrupt). It is Append with no head.
func (s *Store) Get(dst, key []byte) (result []byte, ok bool) {
	return s.Append(dst, key, nil)
}

// Append appends head(dst, n), then the n bytes of the value held for key,
// to dst and returns the result, like append; the result is the caller's.
// head (nil: none) frames the value for its reader, as a RESP bulk
// header does; it runs under the shard's read lock, so it must be quick
// and must not call the Store. The checksum is verified on the copy as it
// is made (unless SkipVerify; crc32c.Append): the bytes checked are the
// bytes the caller gets, read from the arena once. If key is absent, the
// store is closed, or the copy fails its checksum (the entry is then
// dropped and counted in Stats.Corrupt), Append returns dst as it was
// given (its length; bytes past it may have been written) and false.
func (s *Store) Append(dst, key []byte, head func(dst []byte, n int) []byte) (result []byte, ok bool) {
	result, _, _, ok = s.Lend(dst, key, head, math.MaxInt)
	return result, ok
}

// View calls fn with the value held for key, in place in the arena, and its
// Checksum, and returns true; or returns false without calling fn, as Get
// would. value is valid only until fn returns and must not be modified or
// retained. fn runs under the shard's read lock: it must be quick and must
// not call the Store.
func (s *Store) View(key []byte, fn func(value []byte, sum uint64)) bool {
	return s.read(key, func(_ uint64, v []byte, sum uint64) { fn(v, sum) })
}

// CopyTo finds key as Append does and copies its value into the slice
// that into returns for the value's length n: the checksum is computed
// on the bytes as they are copied (crc32c.Copy) and verified, unless
// SkipVerify. into runs under the shard's read lock, so it must be quick
// and must not call the Store; it returns a slice at least n bytes long,
// or nil to copy nothing (a value of a length the caller did not expect).
// CopyTo returns the value's checksum (meaningful where it copied) and
// true where key is held and the copy, if made, verified; false where key
// is absent, the Store is closed, or the copy failed its checksum (the
// entry is then dropped and counted in Stats.Corrupt, and the bytes
// written into the slice must not be used).
func (s *Store) CopyTo(key []byte, into func(n int) []byte) (sum uint64, ok bool) {
	h := Hash(key)
	sh := s.shard(h)
	sh.mu.RLock()
	off, v, sum, found, corrupt := s.lookup(sh, h, key, false)
	if found {
		switch dst := into(len(v)); {
		case dst == nil:
		case s.cfg.SkipVerify:
			copy(dst, v)
		case shm.Copy(dst, v) != sum:
			found, corrupt = false, true
		}
	}
	sh.mu.RUnlock()
	s.readDone(sh, h, off, found, corrupt)
	return sum, found
}

// Lend finds key as Append does and, if its value has at least min bytes,
// lends the value in place instead of copying it: it appends head(dst, n)
// alone to dst and returns the value as it lies in the arena, with the
// checksum verified there (unless SkipVerify), and a loan. The block is
// neither freed nor reused, and so the value neither changes nor
// disappears, until the loan is given back with Return, which the caller
// must do exactly once; the value must not be modified, and not be
// touched after Return. A value shorter than min is appended to dst as
// Append does, and value is then nil. ok is false as for Append.
//
// One block can be lent at most 2^31-1 times at once. Close does not wait
// for the loans out: it unmaps the arena when the last one is returned.
func (s *Store) Lend(dst, key []byte, head func(dst []byte, n int) []byte, min int) (result, value []byte, loan uint64, ok bool) {
	h := Hash(key)
	sh := s.shard(h)
	start := len(dst)
	sh.mu.RLock()
	off, v, sum, found, corrupt := s.lookup(sh, h, key, false)
	if found {
		if head != nil {
			dst = head(dst, len(v))
		}
		lend, good := len(v) >= min, true
		switch {
		case lend && !s.cfg.SkipVerify:
			good = verifiedInPlace(v, sum)
		case !lend && s.cfg.SkipVerify:
			dst = append(dst, v...)
		case !lend:
			var copied uint32
			dst, copied = crc32c.Append(dst, v)
			good = uint64(copied) == sum
		}
		switch {
		case !good:
			found, corrupt = false, true
			dst = dst[:start]
		case lend:
			value, loan = v, off
			s.loans.Add(1)
			atomic.AddUint32(s.loanWord(off), 1)
		}
	}
	sh.mu.RUnlock()
	s.readDone(sh, h, off, found, corrupt)
	return dst, value, loan, found
}

// Return gives back a loan made by Lend, freeing the block if it was
// unlinked while lent and this was its last loan. It is safe after Close.
func (s *Store) Return(loan uint64) {
	if atomic.AddUint32(s.loanWord(loan), ^uint32(0)) == unlinkedFlag {
		s.alloc.free(loan) // a no-op after Close
	}
	if s.loans.Add(-1) == closedLoans {
		s.unmapLate()
	}
}

const (
	// unlinkedFlag in a block's loan word: the block is no longer reachable
	// by key, and the last loan of it frees it.
	unlinkedFlag = 1 << 31
	// closedLoans is added to Store.loans by Close, so that the Return
	// that brings it to exactly this value is the last loan after Close.
	closedLoans = 1 << 62
)

// loansOut is the number of loans out now: Store.loans, less Close's
// closedLoans once it is added.
func (s *Store) loansOut() int {
	n := s.loans.Load()
	if n >= closedLoans/2 {
		n -= closedLoans
	}
	return int(n)
}

// loanWord is the loan word of the block at off, in the arena's mapping,
// which stays mapped while a loan of it is out.
func (s *Store) loanWord(off uint64) *uint32 {
	return (*uint32)(unsafe.Pointer(&s.mem[off+loanOff]))
}

// unlinked ends the life of the block at off, which the caller unlinked
// from its shard under the shard's write lock: it frees the block now if
// no loan of it is out, or flags it for the last Return to free.
func (s *Store) unlinked(off uint64) {
	w := s.loanWord(off)
	for {
		n := atomic.LoadUint32(w)
		if atomic.CompareAndSwapUint32(w, n, n|unlinkedFlag) {
			if n == 0 {
				s.alloc.free(off)
			}
			return
		}
	}
}

// unmapLate unmaps the arena after Close, when Close left loans out.
func (s *Store) unmapLate() {
	_ = unmapArena(s.mem, s.fd) // the Store is closed: no one to tell
}

// read finds key (checksum verified unless SkipVerify), calls fn with the
// entry's block offset, value and checksum under the shard's read lock,
// drops a corrupt entry, and counts a hit or a miss. It reports whether fn
// was called.
func (s *Store) read(key []byte, fn func(off uint64, value []byte, sum uint64)) bool {
	h := Hash(key)
	sh := s.shard(h)
	sh.mu.RLock()
	off, v, sum, found, corrupt := s.lookup(sh, h, key, !s.cfg.SkipVerify)
	if found {
		fn(off, v, sum)
	}
	sh.mu.RUnlock()
	s.readDone(sh, h, off, found, corrupt)
	return found
}

// readDone ends a read after the shard's read lock is released: it drops
// the entry at off if it failed its checksum and counts a hit or a miss.
func (s *Store) readDone(sh *shard, h, off uint64, found, corrupt bool) {
	if corrupt {
		s.dropCorrupt(sh, h, off)
	}
	if found {
		sh.hits.Add(1)
	} else {
		sh.misses.Add(1)
	}
}

// Locate finds key as Get would (checksum verified unless SkipVerify) and
// returns where its value lies in the arena instead of a copy, counting a
// hit or miss, for a reader that maps the arena (see SharedFd and
// shm.MapShared).
//
// The block can be freed as soon as Locate returns; a reader validates its
// copy by the block's generation, as shm.Location describes. The allocator
// changes a block's generation before the block can be reused, and no
// block ever gets a generation twice (see bumpGen).
func (s *Store) Locate(key []byte) (shm.Location, bool) {
	var loc shm.Location
	ok := s.read(key, func(off uint64, v []byte, sum uint64) {
		loc = shm.Location{
			Gen:    atomic.LoadUint64((*uint64)(unsafe.Pointer(&s.mem[off+genOff]))),
			GenOff: off + genOff,
			Off:    uint64(uintptr(unsafe.Pointer(unsafe.SliceData(v))) - uintptr(unsafe.Pointer(unsafe.SliceData(s.mem)))),
			Len:    uint64(len(v)),
			Sum:    sum,
		}
	})
	return loc, ok
}

// Has reports whether key is held, or reserved (Reserve) and not yet
// committed. It compares the stored key but does not verify the checksum,
// and counts neither a hit nor a miss.
func (s *Store) Has(key []byte) bool {
	h := Hash(key)
	sh := s.shard(h)
	sh.mu.RLock()
	_, _, _, found, _ := s.lookup(sh, h, key, false)
	if !found {
		_, found = s.pendingOf(sh, h, key)
	}
	sh.mu.RUnlock()
	return found
}

// Hash returns the 64-bit hash the store files key under (every method
// that takes a key hashes it here), by which AppendKey finds the key
// again: xxhash64 of its bytes.
func Hash(key []byte) uint64 { return xxhash.Sum64(key) }

// AppendKey appends to dst the key held under hash h (Hash), or reserved
// under it and not yet committed, and reports whether there is one. A
// caller that keeps only its keys' hashes (an eviction policy's ids) can
// thus name a key again without keeping its bytes on the Go heap. A
// committed entry whose header is corrupt is dropped and counted in
// Stats.Corrupt, as a read drops it, and reported absent. It counts
// neither a hit nor a miss; false after Close.
func (s *Store) AppendKey(dst []byte, h uint64) ([]byte, bool) {
	sh := s.shard(h)
	sh.mu.RLock()
	var off uint64
	found, corrupt := false, false
	if !s.closed.Load() {
		var ok bool
		if off, ok = sh.m.get(h); ok {
			k, _, _, whole := s.entry(off)
			found, corrupt = whole, !whole
			dst = append(dst, k...)
		} else if p, ok := sh.pending[h]; ok {
			found = true
			dst = append(dst, s.pendingKey(p)...)
		}
	}
	sh.mu.RUnlock()
	if corrupt {
		s.dropCorrupt(sh, h, off)
	}
	return dst, found
}

// ValueLen returns the length of the value held for key and true, or 0
// and false. Like Has it neither verifies the checksum nor counts.
func (s *Store) ValueLen(key []byte) (int, bool) {
	h := Hash(key)
	sh := s.shard(h)
	sh.mu.RLock()
	_, v, _, found, _ := s.lookup(sh, h, key, false)
	sh.mu.RUnlock()
	return len(v), found
}

// Delete removes key and frees its block, and removes an entry reserved
// for key and not yet committed (whose Commit then reports false). It
// reports whether key was held or reserved (Has); false after Close.
func (s *Store) Delete(key []byte) bool {
	h := Hash(key)
	sh := s.shard(h)
	s.life.RLock()
	defer s.life.RUnlock()
	sh.mu.Lock()
	off, _, _, found, corrupt := s.lookup(sh, h, key, false)
	ok := found || corrupt
	if ok {
		sh.m.del(h)
	}
	reserved, pending := s.pendingOf(sh, h, key)
	if pending {
		delete(sh.pending, h)
	}
	sh.mu.Unlock()
	if pending {
		s.unlinked(reserved) // its holder's Commit or Abandon frees it
	}
	if !ok && !pending {
		return false
	}
	if ok {
		s.entries.Add(-1)
		s.unlinked(off)
	}
	s.deletes.Add(1)
	return true
}

// Len returns the number of samples held; 0 after Close.
func (s *Store) Len() int {
	if s.closed.Load() {
		return 0
	}
	return int(s.entries.Load())
}

// Stats returns a snapshot of the store's counters. Memory figures are 0
// after Close. Counters are read one by one, so a snapshot taken under load
// need not be consistent across fields.
func (s *Store) Stats() Stats {
	used, free, largest := s.alloc.stats()
	st := Stats{
		Entries:     s.Len(),
		UsedBytes:   int64(used),
		FreeBytes:   int64(free),
		LargestFree: int64(largest),
		Capacity:    s.cfg.Capacity,
		Puts:        s.puts.Load(),
		Corrupt:     s.corrupt.Load(),
		Deletes:     s.deletes.Load(),
		Loans:       s.loansOut(),

		HugePageBytes: s.huge,
	}
	for i := range s.shards {
		st.Hits += s.shards[i].hits.Load()
		st.Misses += s.shards[i].misses.Load()
		st.IndexBytes += s.shards[i].m.bytes()
	}
	return st
}

// Fd returns the memfd backing the arena, for sharing with other processes,
// or -1 if the arena is anonymous memory or the store is closed. The Store
// keeps ownership: the caller must not close it.
func (s *Store) Fd() int {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return -1
	}
	return s.fd
}

// ID identifies this arena among all arenas of all processes (a random
// number drawn by New, below 2^63), so that a reader can tell that a
// Location refers to the mapping it holds.
func (s *Store) ID() uint64 { return s.id }

// Size returns the length of the arena's mapping in bytes.
func (s *Store) Size() int64 { return s.cfg.Capacity }

// SharedFd returns a new read-only descriptor of the arena's memfd, for
// passing to a reader in another process, which must close it. Such a
// descriptor cannot be mapped writable, and the memfd's mode (0400) keeps
// it from being reopened for writing through /proc. It fails where the
// arena is anonymous memory (ErrNotShared) or the store is closed.
func (s *Store) SharedFd() (int, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed.Load() {
		return -1, ErrClosed
	}
	if s.fd < 0 {
		return -1, ErrNotShared
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", s.fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("store: reopen memfd read-only: %w", err)
	}
	return fd, nil
}

// Close unmaps the arena and closes its memfd, after waiting for operations
// in flight; while loans made by Lend are out, the last Return does that
// instead. Later calls return ErrClosed or report absence.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
	s.alloc.mu.Lock()
	s.closed.Store(true)
	var err error
	if s.loans.Add(closedLoans) == closedLoans {
		err = unmapArena(s.mem, s.fd)
	}
	s.alloc.mem = nil
	s.alloc.mu.Unlock()
	for i := range s.shards {
		s.shards[i].m.reset()
		s.shards[i].pending = nil
		s.shards[i].mu.Unlock()
	}
	return err
}
