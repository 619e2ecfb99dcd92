//go:build !purego

#include "textflag.h"

// The Sum kernels for 32- and 64-bit elements: out[i] = a[i] + b[i] over
// blocks of 64 bytes, four SSE2 registers at a time (element-wise, so the
// results are those of the scalar loop). Each block is loaded whole before
// it is stored, so out may be b (the two-operand form inout += in).
#define SUMBLOCKS(ADD) \
	MOVQ a+0(FP), SI \
	MOVQ b+8(FP), DX \
	MOVQ out+16(FP), DI \
	MOVQ blocks+24(FP), CX \
	TESTQ CX, CX \
	JE done \
loop: \
	MOVOU 0(SI), X0 \
	MOVOU 16(SI), X1 \
	MOVOU 32(SI), X2 \
	MOVOU 48(SI), X3 \
	MOVOU 0(DX), X4 \
	MOVOU 16(DX), X5 \
	MOVOU 32(DX), X6 \
	MOVOU 48(DX), X7 \
	ADD X4, X0 \
	ADD X5, X1 \
	ADD X6, X2 \
	ADD X7, X3 \
	MOVOU X0, 0(DI) \
	MOVOU X1, 16(DI) \
	MOVOU X2, 32(DI) \
	MOVOU X3, 48(DI) \
	ADDQ $64, SI \
	ADDQ $64, DX \
	ADDQ $64, DI \
	DECQ CX \
	JNE loop \
done: \
	RET

// func sumF32Blocks(a, b, out *byte, blocks int)
TEXT ·sumF32Blocks(SB), NOSPLIT, $0-32
	SUMBLOCKS(ADDPS)

// func sumF64Blocks(a, b, out *byte, blocks int)
TEXT ·sumF64Blocks(SB), NOSPLIT, $0-32
	SUMBLOCKS(ADDPD)

// func sumI32Blocks(a, b, out *byte, blocks int)
TEXT ·sumI32Blocks(SB), NOSPLIT, $0-32
	SUMBLOCKS(PADDL)

// func sumI64Blocks(a, b, out *byte, blocks int)
TEXT ·sumI64Blocks(SB), NOSPLIT, $0-32
	SUMBLOCKS(PADDQ)
