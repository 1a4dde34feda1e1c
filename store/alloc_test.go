package store

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// checkHeap walks every block of a and fails t on any broken invariant:
// matching tags, no two free neighbours, free lists holding exactly the free
// blocks of minListed bytes or more in their right classes, bitmaps in step,
// and the used count.
func checkHeap(t testing.TB, a *tlsf) {
	t.Helper()
	listed := map[uint64]bool{}
	for fl := range flCount {
		for sl := range slCount {
			head := a.heads[fl][sl]
			bit := a.slBits[fl]&(1<<sl) != 0
			if bit != (head != nilOff) {
				t.Fatalf("class %d/%d: bitmap %v, head %#x", fl, sl, bit, head)
			}
			prev := nilOff
			for off := head; off != nilOff; off = a.word(off + nextOff) {
				if listed[off] {
					t.Fatalf("block %#x listed twice", off)
				}
				listed[off] = true
				size := a.word(off) & sizeMask
				if f, s := mapIndex(size / align); f != fl || s != sl {
					t.Fatalf("block %#x of %d bytes in class %d/%d, want %d/%d", off, size, fl, sl, f, s)
				}
				if got := a.word(off + prevOff); got != prev {
					t.Fatalf("block %#x prev %#x, want %#x", off, got, prev)
				}
				prev = off
			}
		}
		if (a.slBits[fl] != 0) != (a.flBits&(1<<fl) != 0) {
			t.Fatalf("first-level bit %d out of step", fl)
		}
	}
	var used uint64
	prevFree := false
	off := uint64(0)
	for off < a.total {
		tag := a.word(off)
		size := tag & sizeMask
		if size < align || off+size > a.total {
			t.Fatalf("block %#x: bad size %d", off, size)
		}
		if foot := a.word(off + size - tagSize); foot != tag {
			t.Fatalf("block %#x: header %#x, footer %#x", off, tag, foot)
		}
		free := tag&usedBit == 0
		if free && prevFree {
			t.Fatalf("block %#x: two free neighbours", off)
		}
		if free && size >= minListed != listed[off] {
			t.Fatalf("block %#x of %d bytes: listed %v", off, size, listed[off])
		}
		if free && size >= minListed {
			delete(listed, off)
		}
		if !free {
			used += size
			if a.generation(off)&1 != 1 {
				t.Fatalf("allocated block %#x has an even generation", off)
			}
		}
		prevFree = free
		off += size
	}
	if off != a.total {
		t.Fatalf("blocks end at %d, arena at %d", off, a.total)
	}
	if len(listed) != 0 {
		t.Fatalf("listed blocks that are not free blocks: %v", listed)
	}
	if used != a.used {
		t.Fatalf("used %d, walked %d", a.used, used)
	}
}

type liveBlock struct{ off, size uint64 }

func fill(a *tlsf, b liveBlock, seed byte) {
	p := a.mem[b.off+sumOff : b.off+b.size-tagSize]
	for i := range p {
		p[i] = seed + byte(i*7)
	}
}

func checkFill(t testing.TB, a *tlsf, b liveBlock, seed byte) {
	t.Helper()
	p := a.mem[b.off+sumOff : b.off+b.size-tagSize]
	for i := range p {
		if p[i] != seed+byte(i*7) {
			t.Fatalf("block %#x+%d: byte %d overwritten", b.off, b.size, i)
		}
	}
}

func TestAllocModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		arena int
		max   int // largest request, bytes
	}{
		{"small", 4 << 10, 600},
		{"mixed", 256 << 10, 40 << 10},
		{"odd-size-arena", 100<<10 + 8, 9000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.arena)))
			a := newTLSF(make([]byte, tc.arena))
			live := map[liveBlock]byte{}
			for step := range 20000 {
				if len(live) > 0 && rng.IntN(5) < 2 {
					// Free a random live block, after checking its bytes.
					for b, seed := range live {
						checkFill(t, a, b, seed)
						a.free(b.off)
						delete(live, b)
						break
					}
				} else {
					size := max(alignUp(uint64(rng.IntN(tc.max))), minListed)
					predicted := a.fits(size)
					off, err := a.alloc(size)
					if (err == nil) != predicted {
						t.Fatalf("step %d: fits %v, alloc err %v", step, predicted, err)
					}
					if err != nil {
						continue
					}
					nb := liveBlock{off, size}
					if off%align != 0 || off+size > a.total {
						t.Fatalf("block %#x+%d outside arena of %d", off, size, a.total)
					}
					for b := range live {
						if off < b.off+b.size && b.off < off+size {
							t.Fatalf("block %#x+%d overlaps %#x+%d", off, size, b.off, b.size)
						}
					}
					seed := byte(step)
					fill(a, nb, seed)
					live[nb] = seed
				}
				if step%97 == 0 {
					checkHeap(t, a)
					for b, seed := range live {
						checkFill(t, a, b, seed)
					}
				}
			}
			checkHeap(t, a)
			for b := range live {
				a.free(b.off)
			}
			checkHeap(t, a)
			used, free, largest := a.stats()
			if used != 0 || free != a.total || largest != a.total {
				t.Fatalf("after freeing all: used %d free %d largest %d, arena %d", used, free, largest, a.total)
			}
		})
	}
}

func TestAllocWholeArena(t *testing.T) {
	// Sizes that are not at a class boundary need the own-class fallback.
	for _, arena := range []int{48, 64, 4096, 1<<20 + 16*37, 3 << 20} {
		t.Run(fmt.Sprint(arena), func(t *testing.T) {
			a := newTLSF(make([]byte, arena))
			if !a.fits(a.total) {
				t.Fatal("whole arena does not fit")
			}
			off, err := a.alloc(a.total)
			if err != nil || off != 0 {
				t.Fatalf("alloc(whole) = %d, %v", off, err)
			}
			if a.fits(minListed) {
				t.Fatal("fits in a full arena")
			}
			a.free(off)
			checkHeap(t, a)
		})
	}
}

func TestAllocFragmentsAreReclaimed(t *testing.T) {
	// Splitting 80 bytes for a 64-byte request leaves an unlisted 16-byte
	// fragment; freeing the neighbour must absorb it.
	a := newTLSF(make([]byte, 4096))
	x, _ := a.alloc(80)
	y, _ := a.alloc(96)
	a.free(x)
	z, err := a.alloc(64)
	if err != nil || z != x {
		t.Fatalf("alloc(64) = %d, %v; want %d", z, err, x)
	}
	checkHeap(t, a)
	a.free(z)
	a.free(y)
	checkHeap(t, a)
	if _, _, largest := a.stats(); largest != a.total {
		t.Fatalf("largest %d, want %d", largest, a.total)
	}
}

func TestAllocGeneration(t *testing.T) {
	a := newTLSF(make([]byte, 4096))
	seen := map[uint64]bool{}
	for range 100 {
		off, err := a.alloc(128)
		if err != nil {
			t.Fatal(err)
		}
		g := a.generation(off)
		if g&1 != 1 || seen[g] {
			t.Fatalf("alloc generation %d: odd and new wanted", g)
		}
		seen[g] = true
		a.free(off)
		g = a.generation(off)
		if g&1 != 0 || seen[g] {
			t.Fatalf("free generation %d: even and new wanted", g)
		}
		seen[g] = true
	}
}

func TestMapIndex(t *testing.T) {
	// Classes are ordered by size, and roundClass never maps a size into a
	// class holding smaller blocks.
	var sizes []uint64
	for u := uint64(1); u < 1<<20; u += 1 + u/50 {
		sizes = append(sizes, u)
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	pf, ps := -1, -1
	for _, u := range sizes {
		f, s := mapIndex(u)
		if f < pf || f == pf && s < ps {
			t.Fatalf("class of %d units (%d/%d) below previous %d/%d", u, f, s, pf, ps)
		}
		pf, ps = f, s
		rf, rs := mapIndex(roundClass(u))
		// The first unit count of class (rf, rs) must be >= u.
		var lo uint64
		if rf == 0 {
			lo = uint64(rs)
		} else {
			tt := rf + slLog2 - 1
			lo = uint64(slCount+rs) << (tt - slLog2)
		}
		if lo < u {
			t.Fatalf("roundClass(%d) class %d/%d starts at %d", u, rf, rs, lo)
		}
	}
}
