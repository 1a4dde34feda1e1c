package crc32c

import "golang.org/x/sys/cpu"

// minFold is the shortest input folded with VPCLMULQDQ: the fold starts
// with four accumulators of 64 bytes. At 256 bytes it already takes 17 ns
// against hash/crc32's 19 (BenchmarkChecksum).
const minFold = 256

// minFoldAVX2 is the shortest input folded with VPCLMULQDQ in 256-bit
// registers: the fold starts with four accumulators of 32 bytes.
const minFoldAVX2 = 128

var (
	canFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ &&
		cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41
	// canFoldAVX2: VPCLMULQDQ with VEX encoding, which x/sys/cpu reports
	// only with AVX-512; CPUID leaf 7 says so for CPUs without.
	canFoldAVX2 = cpu.X86.HasAVX2 && hasVPCLMULQDQ() &&
		cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41
)

// hasVPCLMULQDQ reports CPUID.(EAX=7,ECX=0):ECX bit 10.
func hasVPCLMULQDQ() bool {
	if max, _, _, _ := cpuid(0, 0); max < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

// fold returns the CRC-32C of crc's data followed by b, with AVX-512;
// len(b) is a multiple of 64, at least minFold. Unless dst is nil, it
// also copies b to dst, which has room for it.
func fold(crc uint32, dst *byte, b []byte) uint32 { return ^foldAVX512(^crc, dst, b, table) }

// foldAVX512 is in crc32c_amd64.s. It takes and returns the CRC's
// register, not inverted at either end; len(b) is a multiple of 64, at
// least minFold. Unless dst is nil, it also copies b to dst, which has
// room for it.
//
//go:noescape
func foldAVX512(crc uint32, dst *byte, b []byte, k *constants) uint32

// foldAVX2 is in crc32c_amd64.s. It takes and returns the CRC's register,
// not inverted at either end; len(src) is a multiple of 32, at least
// minFoldAVX2. Unless dst is nil, it also copies src to dst, which has
// room for it.
//
//go:noescape
func foldAVX2(crc uint32, dst *byte, src []byte, k *constants) uint32

// cpuid is in crc32c_amd64.s.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
