package crc32c

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestMatchesHashCRC32 compares Update with hash/crc32 on every length up
// to 4 KiB and some longer ones, at every alignment of the first byte
// within a cache line, from random initial CRCs.
func TestMatchesHashCRC32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 300<<10+64)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{100 << 10, 300 << 10, 256*5 + 64*3, 1 << 20 >> 2}
	for n := 0; n <= 4096; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		if n > len(buf)-64 {
			continue
		}
		for _, off := range []int{0, 1, 7, 8, 15, 16, 33, 63} {
			b := buf[off : off+n]
			if got, want := Checksum(b), crc32.Checksum(b, castagnoli); got != want {
				t.Fatalf("Checksum of %d bytes at offset %d = %#x, want %#x", n, off, got, want)
			}
			seed := rng.Uint32()
			if got, want := Update(seed, b), crc32.Update(seed, castagnoli, b); got != want {
				t.Fatalf("Update(%#x) of %d bytes at offset %d = %#x, want %#x", seed, n, off, got, want)
			}
		}
	}
}

// TestFoldSeesEveryByte flips each bit of a buffer the fold covers (the
// first 256 bytes, one round of the loop and the 64-byte tail) and checks
// that the CRC changes as hash/crc32's does.
func TestFoldSeesEveryByte(t *testing.T) {
	b := make([]byte, 256+256+64+64+13)
	for i := range b {
		b[i] = byte(i * 31)
	}
	for i := range b {
		for bit := range 8 {
			b[i] ^= 1 << bit
			if got, want := Checksum(b), crc32.Checksum(b, castagnoli); got != want {
				t.Fatalf("bit %d of byte %d flipped: %#x, want %#x", bit, i, got, want)
			}
			b[i] ^= 1 << bit
		}
	}
}

// TestConstants checks how the fold constants are derived against the
// constants hash/crc32 folds IEEE CRC-32 with (from the Linux kernel):
// the same functions, given IEEE's polynomial, must give them. For
// CRC-32C, the polynomial must be crc32.Castagnoli's, and the Barrett
// constants those published for it.
func TestConstants(t *testing.T) {
	const ieee33 = 1<<32 | 0x04C11DB7
	if got := reflect(ieee33, 32); got != crc32.IEEE {
		t.Fatalf("IEEE polynomial reflected = %#x, want %#x", got, uint64(crc32.IEEE))
	}
	ieee := foldConstants(ieee33)
	want := constants{
		fold512: [2]uint64{0x154442bd4, 0x1c6e41596},
		fold128: [2]uint64{0x1751997d0, 0x0ccaa009e},
		fold64:  0x163cd6124,
		barrett: [2]uint64{0x1db710641, 0x1f7011641},
	}
	ieee.fold2048 = [2]uint64{} // hash/crc32 has no four-accumulator fold
	if *ieee != want {
		t.Errorf("IEEE constants = %#x, want %#x", *ieee, want)
	}
	if got := reflect(castagnoli33, 32); got != crc32.Castagnoli {
		t.Fatalf("CRC-32C polynomial reflected = %#x, want %#x", got, uint64(crc32.Castagnoli))
	}
	if got := foldConstants(castagnoli33).barrett; got != [2]uint64{0x105ec76f1, 0xdea713f1} {
		t.Errorf("CRC-32C Barrett constants = %#x", got)
	}
	if !canFold {
		t.Log("this CPU has no AVX-512 VPCLMULQDQ: Update uses hash/crc32 alone")
	}
}

func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{256, 1 << 10, 4 << 10, 100 << 10} {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i)
		}
		b.Run(fmt.Sprintf("%dB/hash-crc32", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Checksum(buf, castagnoli)
			}
		})
		b.Run(fmt.Sprintf("%dB/crc32c", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				Checksum(buf)
			}
		})
	}
}
