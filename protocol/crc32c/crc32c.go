// Package crc32c computes CRC-32C (Castagnoli), the checksum every cached
// sample carries, faster than hash/crc32 on CPUs with vector carry-less
// multiplication (VPCLMULQDQ, with AVX-512 or with AVX2 alone), and exactly
// as hash/crc32 does everywhere else; and it copies a value and computes
// its CRC in one pass (Copy, UpdateCopy, Append).
//
// hash/crc32 computes CRC-32C with the SSE4.2 CRC32 instruction, 8 bytes at
// a time in three interleaved streams: about 27 GB/s on a current x86
// core. A 4 KiB sample's check then costs as much as a tenth of serving it
// from the local socket. Folding 256 bytes at a time with VPCLMULQDQ in four
// independent 512-bit accumulators (the method of Intel's "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ Instruction", which
// hash/crc32 applies to IEEE CRC-32 with one accumulator) is about twice
// as fast; see BenchmarkChecksum. CPUs with VPCLMULQDQ but no AVX-512
// (AMD's Zen 3, Intel's Alder Lake) fold 128 bytes at a time in 256-bit
// registers instead.
//
// The folding constants are computed from the polynomial when the package
// loads (foldConstants), not copied in as numbers.
package crc32c

import (
	"hash/crc32"
	"math/bits"
	"slices"
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	table      = foldConstants(castagnoli33) // the fold's constants
)

// Checksum returns the CRC-32C of b, equal to
// crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)).
func Checksum(b []byte) uint32 { return Update(0, b) }

// Folds reports whether Update folds with VPCLMULQDQ on this CPU (inputs
// of minFold bytes or more). The fold loads several cache lines at a time
// (four with AVX-512, two with AVX2), independently of the CRC so far, so
// an input out of the CPU's caches comes in from memory several lines at
// once; the CRC32 instruction's loads wait for one line at a time.
func Folds() bool { return canFold || canFoldAVX2 }

// Update returns the CRC-32C of crc's data followed by b, equal to
// crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), b).
func Update(crc uint32, b []byte) uint32 {
	switch {
	case canFold && len(b) >= minFold:
		n := len(b) &^ 63
		crc = fold(crc, nil, b[:n])
		b = b[n:]
	case canFoldAVX2 && len(b) >= minFoldAVX2:
		n := len(b) &^ 31
		crc = ^foldAVX2(^crc, nil, b[:n], table)
		b = b[n:]
	}
	return crc32.Update(crc, castagnoli, b)
}

// Copy copies src into dst, which must be at least as long (Copy panics
// otherwise), and returns the CRC-32C of src. Where the CPU folds (with
// AVX-512, or AVX2), it loads each byte of src once, into a register that
// it both stores and folds into the CRC: a copy from memory the CPU's
// caches do not hold waits for the loads once, not again for the CRC; and
// the bytes checked are the bytes stored. Elsewhere it copies, then
// computes the CRC of the copy.
func Copy(dst, src []byte) uint32 { return UpdateCopy(0, dst, src) }

// UpdateCopy copies src into dst as Copy does and returns the CRC-32C of
// crc's data followed by src, as Update(crc, src) does: a value that
// arrives in pieces is copied and summed piece by piece, in one pass.
func UpdateCopy(crc uint32, dst, src []byte) uint32 {
	if len(dst) < len(src) {
		panic("crc32c: Copy into a shorter slice")
	}
	n := 0
	switch {
	case canFold && len(src) >= minFold:
		n = len(src) &^ 63
		crc = fold(crc, &dst[0], src[:n])
	case canFoldAVX2 && len(src) >= minFoldAVX2:
		n = len(src) &^ 31
		crc = ^foldAVX2(^crc, &dst[0], src[:n], table)
	}
	copy(dst[n:], src[n:])
	return Update(crc, dst[n:len(src)])
}

// Append appends src to dst, as append does, and returns the result with
// the CRC-32C of the bytes appended, copied as Copy copies them.
func Append(dst, src []byte) ([]byte, uint32) {
	start := len(dst)
	dst = slices.Grow(dst, len(src))[:start+len(src)]
	return dst, Copy(dst[start:], src)
}

// The constants of the fold, for CRC-32C's polynomial in its reflected
// (least significant bit first) form, as PCLMULQDQ needs them: k(n) is
// x^n mod P, bit-reflected and shifted left by one. To fold 128 bits of
// the remainder forward over d bits of data, its first 64 bits are
// multiplied by k(d+32) and its last 64 bits by k(d-32).
type constants struct {
	fold2048 [2]uint64 // k(2080), k(2016): four accumulators, 256 bytes on
	fold512  [2]uint64 // k(544), k(480): one 512-bit accumulator, 64 bytes on
	fold128  [2]uint64 // k(160), k(96): one 128-bit lane into the next
	fold64   uint64    // k(64): 128 bits of remainder to 64
	_        uint64
	barrett  [2]uint64 // P and floor(x^64 / P), both reflected over 33 bits
	fold1024 [2]uint64 // k(1056), k(992): four 256-bit accumulators, 128 bytes on
	fold256  [2]uint64 // k(288), k(224): one 256-bit accumulator, 32 bytes on
}

// castagnoli33 is CRC-32C's polynomial P with its x^32 term, the most
// significant bit first (crc32.Castagnoli is its low 32 bits reversed).
const castagnoli33 = 1<<32 | 0x1EDC6F41

// foldConstants returns the constants for the 33-bit polynomial p.
func foldConstants(p uint64) *constants {
	k := func(n int) uint64 { return reflect(xnModP(n, p), 32) << 1 }
	return &constants{
		fold2048: [2]uint64{k(2048 + 32), k(2048 - 32)},
		fold512:  [2]uint64{k(512 + 32), k(512 - 32)},
		fold128:  [2]uint64{k(128 + 32), k(128 - 32)},
		fold64:   k(64),
		barrett:  [2]uint64{reflect(p, 33), reflect(x64DivP(p), 33)},
		fold1024: [2]uint64{k(1024 + 32), k(1024 - 32)},
		fold256:  [2]uint64{k(256 + 32), k(256 - 32)},
	}
}

// xnModP returns x^n mod p.
func xnModP(n int, p uint64) uint64 {
	r := uint64(1)
	for range n {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= p
		}
	}
	return r
}

// x64DivP returns the quotient of x^64 divided by p.
func x64DivP(p uint64) uint64 {
	var q, r uint64
	for i := 64; i >= 0; i-- {
		r <<= 1
		if i == 64 {
			r |= 1
		}
		q <<= 1
		if r&(1<<32) != 0 {
			r ^= p
			q |= 1
		}
	}
	return q
}

// reflect returns the low n bits of v in reverse order.
func reflect(v uint64, n int) uint64 { return bits.Reverse64(v) >> (64 - n) }
