//go:build amd64 && !purego && !goexperiment.boringcrypto

#include "textflag.h"

// func subWord(w uint32) uint32
// AESKEYGENASSIST's low dword is SubWord of the source's second dword.
TEXT ·subWord(SB), NOSPLIT, $0-12
	MOVL w+0(FP), AX
	SHLQ $32, AX
	MOVQ AX, X0
	AESKEYGENASSIST $0x00, X0, X1
	MOVQ X1, AX
	MOVL AX, ret+8(FP)
	RET

// func invMixColumns(dst *byte, src *byte)
TEXT ·invMixColumns(SB), NOSPLIT, $0-16
	MOVQ   dst+0(FP), DI
	MOVQ   src+8(FP), SI
	MOVUPS (SI), X0
	AESIMC X0, X1
	MOVUPS X1, (DI)
	RET

// func decryptCBC(nr int, xk *byte, iv *byte, dst *byte, src *byte, n int)
// Each block is its decryption XOR the previous ciphertext block, so
// the blocks are independent: eight at a time, each round key applied
// to all eight, then one at a time for the rest. All of a step's
// ciphertext is read before its plaintext is written (dst may be src).
// X8 holds the previous ciphertext block.
TEXT ·decryptCBC(SB), NOSPLIT, $0-48
	MOVQ   nr+0(FP), CX
	MOVQ   xk+8(FP), AX
	MOVQ   iv+16(FP), BX
	MOVQ   dst+24(FP), DI
	MOVQ   src+32(FP), SI
	MOVQ   n+40(FP), DX
	MOVUPS (BX), X8

dec8:
	CMPQ   DX, $0x80
	JB     dec1
	MOVUPS 0(SI), X0
	MOVUPS 16(SI), X1
	MOVUPS 32(SI), X2
	MOVUPS 48(SI), X3
	MOVUPS 64(SI), X4
	MOVUPS 80(SI), X5
	MOVUPS 96(SI), X6
	MOVUPS 112(SI), X7
	MOVUPS (AX), X9
	PXOR   X9, X0
	PXOR   X9, X1
	PXOR   X9, X2
	PXOR   X9, X3
	PXOR   X9, X4
	PXOR   X9, X5
	PXOR   X9, X6
	PXOR   X9, X7
	LEAQ   16(AX), R8
	LEAQ   -1(CX), R9

dec8Round:
	MOVUPS (R8), X9
	AESDEC X9, X0
	AESDEC X9, X1
	AESDEC X9, X2
	AESDEC X9, X3
	AESDEC X9, X4
	AESDEC X9, X5
	AESDEC X9, X6
	AESDEC X9, X7
	ADDQ   $0x10, R8
	DECQ   R9
	JNZ    dec8Round
	MOVUPS (R8), X9
	AESDECLAST X9, X0
	AESDECLAST X9, X1
	AESDECLAST X9, X2
	AESDECLAST X9, X3
	AESDECLAST X9, X4
	AESDECLAST X9, X5
	AESDECLAST X9, X6
	AESDECLAST X9, X7
	PXOR   X8, X0
	MOVUPS 0(SI), X9
	PXOR   X9, X1
	MOVUPS 16(SI), X9
	PXOR   X9, X2
	MOVUPS 32(SI), X9
	PXOR   X9, X3
	MOVUPS 48(SI), X9
	PXOR   X9, X4
	MOVUPS 64(SI), X9
	PXOR   X9, X5
	MOVUPS 80(SI), X9
	PXOR   X9, X6
	MOVUPS 96(SI), X9
	PXOR   X9, X7
	MOVUPS 112(SI), X8
	MOVUPS X0, 0(DI)
	MOVUPS X1, 16(DI)
	MOVUPS X2, 32(DI)
	MOVUPS X3, 48(DI)
	MOVUPS X4, 64(DI)
	MOVUPS X5, 80(DI)
	MOVUPS X6, 96(DI)
	MOVUPS X7, 112(DI)
	ADDQ   $0x80, SI
	ADDQ   $0x80, DI
	SUBQ   $0x80, DX
	JMP    dec8

dec1:
	TESTQ  DX, DX
	JZ     decDone
	MOVUPS (SI), X0
	MOVUPS X0, X10
	MOVUPS (AX), X9
	PXOR   X9, X0
	LEAQ   16(AX), R8
	LEAQ   -1(CX), R9

dec1Round:
	MOVUPS (R8), X9
	AESDEC X9, X0
	ADDQ   $0x10, R8
	DECQ   R9
	JNZ    dec1Round
	MOVUPS     (R8), X9
	AESDECLAST X9, X0
	PXOR       X8, X0
	MOVUPS     X10, X8
	MOVUPS     X0, (DI)
	ADDQ       $0x10, SI
	ADDQ       $0x10, DI
	SUBQ       $0x10, DX
	JMP        dec1

decDone:
	MOVUPS X8, (BX)
	RET
