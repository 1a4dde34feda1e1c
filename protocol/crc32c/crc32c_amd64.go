package crc32c

import "golang.org/x/sys/cpu"

// minFold is the shortest input folded with VPCLMULQDQ: the fold starts
// with four accumulators of 64 bytes. At 256 bytes it already takes 17 ns
// against hash/crc32's 19 (BenchmarkChecksum).
const minFold = 256

var (
	canFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ &&
		cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41
	table = foldConstants(castagnoli33)
)

// fold returns the CRC-32C of crc's data followed by b; len(b) is a
// multiple of 64, at least 256.
func fold(crc uint32, b []byte) uint32 { return ^foldAVX512(^crc, b, table) }

// foldAVX512 is in crc32c_amd64.s. It takes and returns the CRC's
// register, not inverted at either end.
//
//go:noescape
func foldAVX512(crc uint32, b []byte, k *constants) uint32
