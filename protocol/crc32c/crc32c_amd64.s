#include "textflag.h"

// FOLD512 folds acc (four 128-bit lanes) forward over the distance whose
// constants are in Z0, onto data: acc = hi(acc)*hi(Z0) ^ lo(acc)*lo(Z0) ^
// data, lane by lane. tmp is clobbered.
#define FOLD512(acc, tmp, data) \
	VPCLMULQDQ $0x11, Z0, acc, tmp \
	VPCLMULQDQ $0, Z0, acc, acc    \
	VPTERNLOGD $0x96, data, tmp, acc

// FOLD128 folds acc forward 128 bits (the constants in X0) onto data.
#define FOLD128(acc, data) \
	MOVOA     acc, X5      \
	PCLMULQDQ $0, X0, acc  \
	PCLMULQDQ $0x11, X0, X5 \
	PXOR      X5, acc      \
	PXOR      data, acc

// REDUCE128 reduces the 128-bit remainder in X1 to the CRC's 32-bit
// register in AX (as hash/crc32's ieeeCLMUL does, with CRC-32C's
// constants; on entry k is in AX, and k.fold128 in X0): 128 bits to 64,
// the first 64 bits times k(96) onto the last 64; 64 bits to 32 plus 32,
// times k(64); then a Barrett reduction. X0, X2 and X3 are clobbered.
#define REDUCE128 \
	PCMPEQB   X3, X3     \
	PCLMULQDQ $1, X1, X0 \
	PSRLDQ    $8, X1     \
	PXOR      X0, X1     \
	MOVOA     X1, X2     \
	MOVQ      48(AX), X0 \
	PSRLQ     $32, X3    \
	PSRLDQ    $4, X2     \
	PAND      X3, X1     \
	PCLMULQDQ $0, X0, X1 \
	PXOR      X2, X1     \
	MOVOU     64(AX), X0 \
	MOVOA     X1, X2     \
	PAND      X3, X1     \
	PCLMULQDQ $0x10, X0, X1 \
	PAND      X3, X1     \
	PCLMULQDQ $0, X0, X1 \
	PXOR      X2, X1     \
	PEXTRD    $1, X1, AX

// COPY64 stores the 64 bytes in z at off(DI), unless DI is nil.
#define COPY64(z, off) \
	TESTQ     DI, DI \
	JZ        2(PC)  \
	VMOVDQU64 z, off(DI)

// func foldAVX512(crc uint32, dst *byte, b []byte, k *constants) uint32
//
// len(b) is a multiple of 64 and at least 256. Four 512-bit accumulators
// (Z1-Z4: 16 lanes of 128 bits, the remainder of 256 bytes) are folded
// 256 bytes forward per round, each independent of the others so that the
// carry-less multiplications overlap; then into one (Z1), which folds the
// 64-byte blocks left; then its four lanes into one 128-bit remainder,
// which is reduced to 32 bits (as hash/crc32's ieeeCLMUL does, with
// CRC-32C's constants). Unless dst is nil, each block is also stored at
// dst as it is loaded, so that a copy and its CRC read b once.
TEXT ·foldAVX512(SB), NOSPLIT, $0-52
	MOVL crc+0(FP), X0
	MOVQ dst+8(FP), DI
	MOVQ b_base+16(FP), SI
	MOVQ b_len+24(FP), CX
	MOVQ k+40(FP), AX

	// The first 256 bytes, with the CRC so far in the first 32 bits.
	VPXORQ    Z10, Z10, Z10
	VMOVAPS   X0, X10
	VMOVDQU64 (SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	COPY64(Z1, 0)
	COPY64(Z2, 64)
	COPY64(Z3, 128)
	COPY64(Z4, 192)
	VPXORQ    Z10, Z1, Z1
	ADDQ      $256, SI
	SUBQ      $256, CX
	TESTQ     DI, DI
	JZ        2(PC)
	ADDQ      $256, DI
	CMPQ      CX, $256
	JB        fold4

	VBROADCASTI32X4 0(AX), Z0 // fold2048

	PCALIGN $16
loop256:
	VMOVDQU64 (SI), Z11
	VMOVDQU64 64(SI), Z12
	VMOVDQU64 128(SI), Z13
	VMOVDQU64 192(SI), Z14
	COPY64(Z11, 0)
	COPY64(Z12, 64)
	COPY64(Z13, 128)
	COPY64(Z14, 192)
	FOLD512(Z1, Z5, Z11)
	FOLD512(Z2, Z6, Z12)
	FOLD512(Z3, Z7, Z13)
	FOLD512(Z4, Z8, Z14)
	ADDQ      $256, SI
	SUBQ      $256, CX
	TESTQ     DI, DI
	JZ        2(PC)
	ADDQ      $256, DI
	CMPQ      CX, $256
	JAE       loop256

fold4:
	// Z1 into Z2, Z2 into Z3, Z3 into Z4: each 64 bytes ahead of the
	// one before.
	VBROADCASTI32X4 16(AX), Z0 // fold512
	FOLD512(Z1, Z5, Z2)
	FOLD512(Z1, Z5, Z3)
	FOLD512(Z1, Z5, Z4)

	CMPQ CX, $64
	JB   lanes

loop64:
	VMOVDQU64 (SI), Z11
	COPY64(Z11, 0)
	FOLD512(Z1, Z5, Z11)
	ADDQ      $64, SI
	SUBQ      $64, CX
	TESTQ     DI, DI
	JZ        2(PC)
	ADDQ      $64, DI
	CMPQ      CX, $64
	JAE       loop64

lanes:
	// Z1's four 128-bit lanes into X1, each 16 bytes ahead of the one
	// before.
	VEXTRACTI32X4 $1, Z1, X2
	VEXTRACTI32X4 $2, Z1, X3
	VEXTRACTI32X4 $3, Z1, X4
	VZEROUPPER

	MOVOU 32(AX), X0 // fold128
	FOLD128(X1, X2)
	FOLD128(X1, X3)
	FOLD128(X1, X4)

	REDUCE128
	MOVL AX, ret+48(FP)
	RET

// FOLD256 folds acc (two 128-bit lanes) forward over the distance whose
// constants are in Y0, onto data, lane by lane. tmp is clobbered.
#define FOLD256(acc, tmp, data) \
	VPCLMULQDQ $0x11, Y0, acc, tmp \
	VPCLMULQDQ $0, Y0, acc, acc    \
	VPXOR      tmp, acc, acc       \
	VPXOR      data, acc, acc

// COPY32 stores the 32 bytes in y at off(DI), unless DI is nil.
#define COPY32(y, off) \
	TESTQ   DI, DI \
	JZ      2(PC)  \
	VMOVDQU y, off(DI)

// func foldAVX2(crc uint32, dst *byte, src []byte, k *constants) uint32
//
// len(src) is a multiple of 32 and at least 128. foldAVX512's method with
// 256-bit registers, for CPUs with VPCLMULQDQ but not AVX-512: four
// accumulators (Y1-Y4: eight lanes, the remainder of 128 bytes) are
// folded 128 bytes forward per round, then into one (Y1), which folds the
// 32-byte blocks left; then its two lanes into one. Unless dst is nil, each
// block is also stored at dst as it is loaded, so that a copy and its CRC
// read the source once.
TEXT ·foldAVX2(SB), NOSPLIT, $0-52
	MOVQ dst+8(FP), DI
	MOVQ src_base+16(FP), SI
	MOVQ src_len+24(FP), CX
	MOVQ k+40(FP), AX

	// The first 128 bytes, with the CRC so far in the first 32 bits.
	MOVL    crc+0(FP), BX
	VMOVD   BX, X10
	VMOVDQU (SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	COPY32(Y1, 0)
	COPY32(Y2, 32)
	COPY32(Y3, 64)
	COPY32(Y4, 96)
	VPXOR   Y10, Y1, Y1
	ADDQ    $128, SI
	SUBQ    $128, CX
	TESTQ   DI, DI
	JZ      2(PC)
	ADDQ    $128, DI
	CMPQ    CX, $128
	JB      fold4

	VBROADCASTI128 80(AX), Y0 // fold1024

	PCALIGN $16
loop128:
	VMOVDQU (SI), Y11
	VMOVDQU 32(SI), Y12
	VMOVDQU 64(SI), Y13
	VMOVDQU 96(SI), Y14
	COPY32(Y11, 0)
	COPY32(Y12, 32)
	COPY32(Y13, 64)
	COPY32(Y14, 96)
	FOLD256(Y1, Y5, Y11)
	FOLD256(Y2, Y6, Y12)
	FOLD256(Y3, Y7, Y13)
	FOLD256(Y4, Y8, Y14)
	ADDQ    $128, SI
	SUBQ    $128, CX
	TESTQ   DI, DI
	JZ      2(PC)
	ADDQ    $128, DI
	CMPQ    CX, $128
	JAE     loop128

fold4:
	// Y1 into Y2, Y2 into Y3, Y3 into Y4: each 32 bytes ahead of the
	// one before.
	VBROADCASTI128 96(AX), Y0 // fold256
	FOLD256(Y1, Y5, Y2)
	FOLD256(Y1, Y5, Y3)
	FOLD256(Y1, Y5, Y4)

	CMPQ CX, $32
	JB   lanes

loop32:
	VMOVDQU (SI), Y11
	COPY32(Y11, 0)
	FOLD256(Y1, Y5, Y11)
	ADDQ    $32, SI
	SUBQ    $32, CX
	TESTQ   DI, DI
	JZ      2(PC)
	ADDQ    $32, DI
	CMPQ    CX, $32
	JAE     loop32

lanes:
	// Y1's two 128-bit lanes into X1, the second 16 bytes ahead.
	VEXTRACTI128 $1, Y1, X2
	VZEROUPPER
	MOVOU 32(AX), X0 // fold128
	FOLD128(X1, X2)

	REDUCE128
	MOVL AX, ret+48(FP)
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
