package crc32c

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// way is one way to compute the CRC: the folds it may use (both, one of
// them alone, or none: hash/crc32).
type way struct {
	name         string
	avx512, avx2 bool
}

// eachWay runs f once for each way this CPU can compute the CRC (ways),
// each as a subtest.
func eachWay(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, w := range ways(t) {
		canFold, canFoldAVX2 = w.avx512, w.avx2
		t.Run(w.name, f)
	}
}

// ways returns the ways this CPU can compute the CRC: with both folds,
// the package's own choice between them ("both": AVX2 folds inputs too
// short for AVX-512's), then each fold it has alone, then none; and
// restores the package's own choice when tb ends.
func ways(tb testing.TB) []way {
	avx512, avx2 := canFold, canFoldAVX2
	tb.Cleanup(func() { canFold, canFoldAVX2 = avx512, avx2 })
	var ws []way
	if avx512 && avx2 {
		ws = append(ws, way{"both", true, true})
	}
	for _, w := range []way{{"avx512", avx512, false}, {"avx2", false, avx2}, {"hash-crc32", false, false}} {
		if w.name != "hash-crc32" && !w.avx512 && !w.avx2 {
			tb.Logf("this CPU cannot fold with %s", w.name)
			continue
		}
		ws = append(ws, w)
	}
	return ws
}

// randomBytes returns n bytes drawn from rng.
func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// testLengths is every length from 0 to 4 KiB, then more.
func testLengths(more ...int) []int {
	var l []int
	for n := 0; n <= 4096; n++ {
		l = append(l, n)
	}
	return append(l, more...)
}

// TestMatchesHashCRC32 compares Update with hash/crc32 on every length up
// to 4 KiB and some longer ones, at every alignment of the first byte
// within a cache line, from random initial CRCs.
func TestMatchesHashCRC32(t *testing.T) { eachWay(t, testMatchesHashCRC32) }

func testMatchesHashCRC32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := randomBytes(rng, 300<<10+64)
	for _, n := range testLengths(100<<10, 300<<10, 256*5+64*3, 1<<20>>2) {
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

// TestAppendCopiesAndChecks appends every length up to 4 KiB and some
// longer ones, at several alignments of source and destination, after
// bytes already in dst (with room for the value, and without): the bytes
// before must stay, the copy must equal the source, the CRC hash/crc32's,
// and nothing past the copy in dst's spare room may be written.
func TestAppendCopiesAndChecks(t *testing.T) { eachWay(t, testAppendCopiesAndChecks) }

func testAppendCopiesAndChecks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := randomBytes(rng, 100<<10+64)
	buf := make([]byte, 200<<10)
	for _, n := range testLengths(100<<10, 8<<10+31, 128*3+32*2+7) {
		for _, off := range []int{0, 1, 13, 32} {
			v := src[off : off+n]
			want := crc32.Checksum(v, castagnoli)
			// Room in dst: the copy must stop at its end.
			head := 3 + off%5
			for i := range buf[:head+n+64] {
				buf[i] = 0xA5
			}
			got, sum := Append(buf[:head], v)
			if sum != want || !bytes.Equal(got[head:], v) || len(got) != head+n {
				t.Fatalf("Append of %d bytes at offset %d: sum %#x want %#x, copy equal %v, length %d",
					n, off, sum, want, bytes.Equal(got[head:], v), len(got))
			}
			if &got[0] != &buf[0] {
				t.Fatalf("Append of %d bytes into room for them moved dst", n)
			}
			if !bytes.Equal(buf[:head], bytes.Repeat([]byte{0xA5}, head)) {
				t.Fatalf("Append of %d bytes changed the bytes before", n)
			}
			for i, b := range buf[head+n : head+n+64] {
				if b != 0xA5 {
					t.Fatalf("Append of %d bytes wrote byte %d past the copy", n, i)
				}
			}
			// No room: Append grows dst, as append does.
			got, sum = Append([]byte("head"), v)
			if sum != want || string(got[:4]) != "head" || !bytes.Equal(got[4:], v) {
				t.Fatalf("Append of %d bytes at offset %d to a full dst: sum %#x want %#x", n, off, sum, want)
			}
		}
	}
}

// TestUpdateCopyInPieces copies values of several lengths in pieces cut
// at random (as a stream hands them over, packet by packet), each piece
// with UpdateCopy from the CRC so far: the copy must equal the value, the
// CRC hash/crc32's of the seed's data followed by the whole value.
func TestUpdateCopyInPieces(t *testing.T) { eachWay(t, testUpdateCopyInPieces) }

func testUpdateCopyInPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	src := randomBytes(rng, 300<<10)
	for _, n := range []int{0, 1, 63, 64, 255, 256, 4097, 100 << 10, 300 << 10} {
		for range 20 {
			v := src[:n]
			seed := rng.Uint32()
			dst := make([]byte, n)
			crc := seed
			for at := 0; at < n; {
				k := min(n-at, 1+rng.IntN(70_000))
				crc = UpdateCopy(crc, dst[at:], v[at:at+k])
				at += k
			}
			if want := crc32.Update(seed, castagnoli, v); crc != want || !bytes.Equal(dst, v) {
				t.Fatalf("UpdateCopy(%#x) of %d bytes in pieces: sum %#x want %#x, copy equal %v", seed, n, crc, want, bytes.Equal(dst, v))
			}
		}
	}
}

// TestCopyIntoShorterPanics: Copy never copies part of src.
func TestCopyIntoShorterPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Copy of 200 bytes into 199 did not panic")
		}
	}()
	Copy(make([]byte, 199), make([]byte, 200))
}

// TestFoldSeesEveryByte flips each bit of buffers the folds cover (the
// first 256 bytes, rounds of the loop and the 64-byte tail; with AVX2, the
// first 128 bytes, rounds and 32-byte blocks) and checks that the CRC,
// computed and appended, changes as hash/crc32's does.
func TestFoldSeesEveryByte(t *testing.T) { eachWay(t, testFoldSeesEveryByte) }

func testFoldSeesEveryByte(t *testing.T) {
	for _, n := range []int{256 + 256 + 64 + 64 + 13, 128 + 128*2 + 32*3 + 13} {
		flipEachBit(t, n)
	}
}

func flipEachBit(t *testing.T, n int) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 31)
	}
	for i := range b {
		for bit := range 8 {
			b[i] ^= 1 << bit
			want := crc32.Checksum(b, castagnoli)
			if got := Checksum(b); got != want {
				t.Fatalf("bit %d of byte %d flipped: %#x, want %#x", bit, i, got, want)
			}
			if _, got := Append(nil, b); got != want {
				t.Fatalf("bit %d of byte %d flipped, appended: %#x, want %#x", bit, i, got, want)
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
	// hash/crc32 has no four-accumulator fold, nor one in 256-bit registers
	ieee.fold2048, ieee.fold1024, ieee.fold256 = [2]uint64{}, [2]uint64{}, [2]uint64{}
	if *ieee != want {
		t.Errorf("IEEE constants = %#x, want %#x", *ieee, want)
	}
	if got := reflect(castagnoli33, 32); got != crc32.Castagnoli {
		t.Fatalf("CRC-32C polynomial reflected = %#x, want %#x", got, uint64(crc32.Castagnoli))
	}
	if got := foldConstants(castagnoli33).barrett; got != [2]uint64{0x105ec76f1, 0xdea713f1} {
		t.Errorf("CRC-32C Barrett constants = %#x", got)
	}
	if !Folds() {
		t.Log("this CPU has no VPCLMULQDQ: Update uses hash/crc32 alone")
	}
}

// BenchmarkChecksum computes CRCs with hash/crc32 and with this package,
// of one input read again and again ("cached") and of inputs in turn
// from 256 MiB, out of the CPU's caches ("cold", from 4 KiB).
func BenchmarkChecksum(b *testing.B) {
	src := make([]byte, benchArena)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, n := range []int{256, 1 << 10, 4 << 10, 100 << 10} {
		for _, cold := range []bool{false, true} {
			if cold && n < 4<<10 {
				continue
			}
			in := benchInput(src, n, cold)
			b.Run(fmt.Sprintf("%dB/%s/hash-crc32", n, where(cold)), func(b *testing.B) {
				b.SetBytes(int64(n))
				i := 0
				for b.Loop() {
					crc32.Checksum(in(i), castagnoli)
					i++
				}
			})
			b.Run(fmt.Sprintf("%dB/%s/crc32c", n, where(cold)), func(b *testing.B) {
				b.SetBytes(int64(n))
				i := 0
				for b.Loop() {
					Checksum(in(i))
					i++
				}
			})
		}
	}
}

// benchArena is the memory the cold benchmarks read their inputs from.
const benchArena = 256 << 20

// benchInput returns the benchmarks' i-th input of n bytes: the start of
// src every time, or, cold, inputs apart from the last (by 4,099 cache
// lines, past the CPU's prefetchers) across all of src.
func benchInput(src []byte, n int, cold bool) func(i int) []byte {
	return func(i int) []byte {
		if !cold {
			return src[:n]
		}
		off := (i * 4099 * 64) % (len(src) - n)
		return src[off : off+n]
	}
}

func where(cold bool) string {
	if cold {
		return "cold"
	}
	return "cached"
}

// BenchmarkAppend copies a value and computes its CRC: Append, each way
// this CPU can ("append/avx512": AVX-512's fold as it copies), against
// append then Checksum (the package's own choice of fold), from inputs as
// BenchmarkChecksum reads them.
func BenchmarkAppend(b *testing.B) {
	src := make([]byte, benchArena)
	for i := range src {
		src[i] = byte(i * 7)
	}
	ws := ways(b)
	own512, own2 := canFold, canFoldAVX2
	for _, n := range []int{1 << 10, 4 << 10, 100 << 10} {
		for _, cold := range []bool{false, true} {
			in := benchInput(src, n, cold)
			dst := make([]byte, 0, n)
			canFold, canFoldAVX2 = own512, own2
			b.Run(fmt.Sprintf("%dB/%s/append-then-checksum", n, where(cold)), func(b *testing.B) {
				b.SetBytes(int64(n))
				i := 0
				for b.Loop() {
					Checksum(append(dst[:0], in(i)...))
					i++
				}
			})
			for _, w := range ws {
				canFold, canFoldAVX2 = w.avx512, w.avx2
				b.Run(fmt.Sprintf("%dB/%s/append/%s", n, where(cold), w.name), func(b *testing.B) {
					b.SetBytes(int64(n))
					i := 0
					for b.Loop() {
						Append(dst[:0], in(i))
						i++
					}
				})
			}
		}
	}
}

// BenchmarkCopyOutOfCache copies values from memory out of the CPU's
// caches into memory out of them too, as the cache's admissions and an
// owner's answer to a fetch do: Copy each way this CPU can ("both" is
// the package's own choice), twice in turn (the same way's runs moved by
// a fifth with their place in the run, the first the slowest), and the
// copy alone (memmove).
func BenchmarkCopyOutOfCache(b *testing.B) {
	src, dst := make([]byte, benchArena), make([]byte, benchArena)
	for i := range src {
		src[i], dst[i] = byte(i*7), 1
	}
	ws := ways(b)
	for _, n := range []int{4 << 10, 16 << 10, 32 << 10, 100 << 10} {
		in, out := benchInput(src, n, true), benchInput(dst, n, true)
		run := func(name string, f func(dst, src []byte)) {
			b.Run(fmt.Sprintf("%dB/%s", n, name), func(b *testing.B) {
				b.SetBytes(int64(n))
				i := 0
				for b.Loop() {
					f(out(i), in(i))
					i++
				}
			})
		}
		for range 2 {
			for _, w := range ws {
				canFold, canFoldAVX2 = w.avx512, w.avx2
				run("copy/"+w.name, func(dst, src []byte) { Copy(dst, src) })
			}
		}
		run("memmove", func(dst, src []byte) { copy(dst, src) })
	}
}
