package store

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Block layout. Every block starts on a 16-byte boundary and its size is a
// multiple of 16. The first and the last 8 bytes of every block are its
// boundary tags: the block size with bit 0 set while the block is allocated.
//
//	allocated: tag | gen | entry header and payload ...            | tag
//	listed free (>= minListed): tag | gen | next | prev | ...      | tag
//	fragment (16 or 32 bytes): tag | ...                           | tag
//
// Free blocks of minListed bytes or more sit on a segregated free list whose
// next/prev links are arena offsets stored inside the block. Smaller free
// blocks (fragments left by a split) are on no list: they are too small for
// any entry and are absorbed as soon as a neighbour is freed.
const (
	align     = 16
	tagSize   = 8
	genOff    = 8  // generation word, in allocated and listed free blocks
	nextOff   = 16 // free-list links, in listed free blocks only
	prevOff   = 24
	minListed = 48 // tag, gen, next, prev, tag: 40 bytes rounded up to align
	usedBit   = 1
	sizeMask  = ^uint64(align - 1)
	nilOff    = ^uint64(0)

	slLog2  = 5 // 32 second-level classes per power of two
	slCount = 1 << slLog2
	flCount = 64

	// scanLimit bounds the first-fit walk of a request's own size class,
	// the fallback taken when no class above it holds a block. It keeps
	// alloc O(1) while still letting a request as large as the whole arena
	// succeed when a single free block covers it.
	scanLimit = 32
)

// tlsf is a two-level segregated-fit allocator over a byte slice. All its
// metadata (boundary tags, free-list links, generations) lives inside that
// slice; the Go struct holds only the fixed list heads and bitmaps.
//
// Every method takes mu. mu is the innermost lock of the store: no other
// lock is taken while it is held.
type tlsf struct {
	mu     sync.Mutex
	mem    []byte // nil once closed
	total  uint64 // managed bytes: len(mem) rounded down to align
	used   uint64 // bytes in allocated blocks
	gen    uint64 // generations handed out so far
	genKey uint64 // keys the generation sequence (see bumpGen)
	flBits uint64
	slBits [flCount]uint32
	heads  [flCount][slCount]uint64
}

func newTLSF(mem []byte) *tlsf {
	a := &tlsf{mem: mem, total: uint64(len(mem)) & sizeMask, genKey: rand.Uint64()}
	for i := range a.heads {
		for j := range a.heads[i] {
			a.heads[i][j] = nilOff
		}
	}
	if a.total >= align {
		a.setTags(0, a.total, false)
		if a.total >= minListed {
			a.bumpGen(0, false)
			a.insert(0, a.total)
		}
	}
	return a
}

func (a *tlsf) word(off uint64) uint64 { return binary.LittleEndian.Uint64(a.mem[off:]) }

func (a *tlsf) setWord(off, v uint64) { binary.LittleEndian.PutUint64(a.mem[off:], v) }

func (a *tlsf) setTags(off, size uint64, used bool) {
	t := size
	if used {
		t |= usedBit
	}
	a.setWord(off, t)
	a.setWord(off+size-tagSize, t)
}

// bumpGen gives the block at off a generation never used before in this
// arena: odd while allocated, even once free, below 2^63 (so that it fits a
// RESP integer). A reader in another process loads it atomically before
// and after a copy and keeps the copy only if both loads equal the
// generation it was told.
//
// Generations are the sequence 1, 2, 3... passed through a bijection keyed
// by a random number drawn when the arena is made, so they never repeat yet
// cannot be predicted. That matters because once a freed block is merged
// into a neighbour its generation word is ordinary space that a later
// entry may fill with any sample bytes: those bytes equal the generation a
// reader holds with probability 2^-62, not because a sample happens to hold
// small integers.
func (a *tlsf) bumpGen(off uint64, used bool) {
	a.gen++
	g := mix62(a.gen, a.genKey) << 1
	if used {
		g |= 1
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&a.mem[off+genOff])), g)
}

// mix62 is a bijection of the 62-bit numbers keyed by k: xor with the key,
// then multiplications by odd constants (invertible modulo 2^62) and
// xor-shifts (invertible), as in splitmix64.
func mix62(x, k uint64) uint64 {
	const mask = 1<<62 - 1
	x = (x ^ k) & mask
	x = (x * 0x9e3779b97f4a7c15) & mask
	x ^= x >> 30
	x = (x * 0xbf58476d1ce4e5b9) & mask
	x ^= x >> 27
	x = (x * 0x94d049bb133111eb) & mask
	x ^= x >> 31
	return x
}

// mapIndex returns the size class (first level, second level) of a block of
// u 16-byte units. Classes below slCount units are exact.
func mapIndex(u uint64) (fl, sl int) {
	if u < slCount {
		return 0, int(u)
	}
	t := bits.Len64(u) - 1
	return t - slLog2 + 1, int(u>>(t-slLog2)) & (slCount - 1)
}

// roundClass rounds u up to the first unit count of the next class, unless
// it already starts a class, so that every block of the returned class or
// above is large enough (TLSF's good fit).
func roundClass(u uint64) uint64 {
	if u < slCount {
		return u
	}
	t := bits.Len64(u) - 1
	return u + (uint64(1) << (t - slLog2)) - 1
}

func (a *tlsf) insert(off, size uint64) {
	fl, sl := mapIndex(size / align)
	head := a.heads[fl][sl]
	a.setWord(off+nextOff, head)
	a.setWord(off+prevOff, nilOff)
	if head != nilOff {
		a.setWord(head+prevOff, off)
	}
	a.heads[fl][sl] = off
	a.flBits |= 1 << fl
	a.slBits[fl] |= 1 << sl
}

func (a *tlsf) remove(off, size uint64) {
	fl, sl := mapIndex(size / align)
	next, prev := a.word(off+nextOff), a.word(off+prevOff)
	if prev != nilOff {
		a.setWord(prev+nextOff, next)
	} else {
		a.heads[fl][sl] = next
		if next == nilOff {
			a.slBits[fl] &^= 1 << sl
			if a.slBits[fl] == 0 {
				a.flBits &^= 1 << fl
			}
		}
	}
	if next != nilOff {
		a.setWord(next+prevOff, prev)
	}
}

// find returns a listed free block of at least size bytes, or nilOff. It
// does not change anything, so fits and alloc give the same answer.
func (a *tlsf) find(size uint64) uint64 {
	u := size / align
	fl, sl := mapIndex(roundClass(u))
	if fl < flCount {
		m := a.slBits[fl] & (^uint32(0) << sl)
		if m == 0 {
			if f := a.flBits & (^uint64(0) << (fl + 1)); f != 0 {
				fl = bits.TrailingZeros64(f)
				m = a.slBits[fl]
			}
		}
		if m != 0 {
			return a.heads[fl][bits.TrailingZeros32(m)]
		}
	}
	// Nothing in a class whose every block is large enough: walk the
	// request's own class, where some blocks may be.
	fl0, sl0 := mapIndex(u)
	if fl0 == fl && sl0 == sl {
		return nilOff // that class was searched above
	}
	off := a.heads[fl0][sl0]
	for i := 0; off != nilOff && i < scanLimit; i++ {
		if a.word(off)&sizeMask >= size {
			return off
		}
		off = a.word(off + nextOff)
	}
	return nilOff
}

// fits reports whether alloc(size) would succeed now. size must be a
// positive multiple of align.
func (a *tlsf) fits(size uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mem != nil && a.find(size) != nilOff
}

// alloc returns the offset of a new block of exactly size bytes (a positive
// multiple of align, at least minListed), or errNoSpace / ErrClosed.
func (a *tlsf) alloc(size uint64) (uint64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mem == nil {
		return 0, ErrClosed
	}
	off := a.find(size)
	if off == nilOff {
		return 0, ErrNoSpace
	}
	bsize := a.word(off) & sizeMask
	a.remove(off, bsize)
	if rest := bsize - size; rest > 0 {
		// The block after a free block is allocated (free neighbours are
		// always merged), so the remainder needs no coalescing.
		r := off + size
		a.setTags(r, rest, false)
		if rest >= minListed {
			a.bumpGen(r, false)
			a.insert(r, rest)
		}
	}
	a.setTags(off, size, true)
	a.bumpGen(off, true)
	a.used += size
	return off, nil
}

// free releases the allocated block at off and merges it with free
// neighbours at once. It is a no-op after close.
func (a *tlsf) free(off uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mem == nil {
		return
	}
	t := a.word(off)
	if t&usedBit == 0 {
		panic("store: free of a free block")
	}
	size := t & sizeMask
	a.used -= size
	a.bumpGen(off, false)
	if off > 0 {
		if pt := a.word(off - tagSize); pt&usedBit == 0 {
			ps := pt & sizeMask
			if ps >= minListed {
				a.remove(off-ps, ps)
			}
			off -= ps
			size += ps
		}
	}
	if end := off + size; end < a.total {
		if nt := a.word(end); nt&usedBit == 0 {
			ns := nt & sizeMask
			if ns >= minListed {
				a.remove(end, ns)
			}
			size += ns
		}
	}
	a.setTags(off, size, false)
	if size >= minListed {
		a.insert(off, size)
	}
}

// stats returns the bytes in allocated blocks, in free blocks (fragments
// included), and the size of the largest listed free block.
func (a *tlsf) stats() (used, free, largest uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mem == nil {
		return 0, 0, 0
	}
	if a.flBits != 0 {
		fl := bits.Len64(a.flBits) - 1
		sl := bits.Len32(a.slBits[fl]) - 1
		for off := a.heads[fl][sl]; off != nilOff; off = a.word(off + nextOff) {
			largest = max(largest, a.word(off)&sizeMask)
		}
	}
	return a.used, a.total - a.used, largest
}

// generation returns the generation word of the block at off.
func (a *tlsf) generation(off uint64) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&a.mem[off+genOff])))
}
