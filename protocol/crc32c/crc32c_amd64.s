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

// func foldAVX512(crc uint32, b []byte, k *constants) uint32
//
// len(b) is a multiple of 64 and at least 256. Four 512-bit accumulators
// (Z1-Z4: 16 lanes of 128 bits, the remainder of 256 bytes) are folded
// 256 bytes forward per round, each independent of the others so that the
// carry-less multiplications overlap; then into one (Z1), which folds the
// 64-byte blocks left; then its four lanes into one 128-bit remainder,
// which is reduced to 32 bits (as hash/crc32's ieeeCLMUL does, with
// CRC-32C's constants).
TEXT ·foldAVX512(SB), NOSPLIT, $0-44
	MOVL crc+0(FP), X0
	MOVQ b_base+8(FP), SI
	MOVQ b_len+16(FP), CX
	MOVQ k+32(FP), AX

	// The first 256 bytes, with the CRC so far in the first 32 bits.
	VPXORQ    Z10, Z10, Z10
	VMOVAPS   X0, X10
	VMOVDQU64 (SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VPXORQ    Z10, Z1, Z1
	ADDQ      $256, SI
	SUBQ      $256, CX
	CMPQ      CX, $256
	JB        fold4

	VBROADCASTI32X4 0(AX), Z0 // fold2048

	PCALIGN $16
loop256:
	VMOVDQU64 (SI), Z11
	VMOVDQU64 64(SI), Z12
	VMOVDQU64 128(SI), Z13
	VMOVDQU64 192(SI), Z14
	FOLD512(Z1, Z5, Z11)
	FOLD512(Z2, Z6, Z12)
	FOLD512(Z3, Z7, Z13)
	FOLD512(Z4, Z8, Z14)
	ADDQ      $256, SI
	SUBQ      $256, CX
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
	FOLD512(Z1, Z5, Z11)
	ADDQ      $64, SI
	SUBQ      $64, CX
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

	// 128 bits to 64: the first 64 bits times k(96) (X0's second half),
	// onto the last 64.
	PCMPEQB   X3, X3
	PCLMULQDQ $1, X1, X0
	PSRLDQ    $8, X1
	PXOR      X0, X1

	// 64 bits to 32 plus 32.
	MOVOA  X1, X2
	MOVQ   48(AX), X0 // fold64
	PSRLQ  $32, X3    // a mask of 32 bits
	PSRLDQ $4, X2
	PAND   X3, X1
	PCLMULQDQ $0, X0, X1
	PXOR   X2, X1

	// Barrett reduction to the 32-bit remainder.
	MOVOU     64(AX), X0 // barrett
	MOVOA     X1, X2
	PAND      X3, X1
	PCLMULQDQ $0x10, X0, X1
	PAND      X3, X1
	PCLMULQDQ $0, X0, X1
	PXOR      X2, X1

	PEXTRD $1, X1, AX
	MOVL   AX, ret+40(FP)
	RET
