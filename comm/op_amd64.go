//go:build !purego

package comm

// Sum over 32- and 64-bit elements runs four SSE2 registers at a time
// (every amd64 processor has SSE2): the additions are element-wise, as in
// opSumT, so results are bit-identical to the scalar loop's.

//go:noescape
func sumF32Blocks(in, inout *byte, blocks int)

//go:noescape
func sumF64Blocks(in, inout *byte, blocks int)

//go:noescape
func sumI32Blocks(in, inout *byte, blocks int)

//go:noescape
func sumI64Blocks(in, inout *byte, blocks int)

//go:noescape
func sum3F32Blocks(a, b, out *byte, blocks int)

//go:noescape
func sum3F64Blocks(a, b, out *byte, blocks int)

//go:noescape
func sum3I32Blocks(a, b, out *byte, blocks int)

//go:noescape
func sum3I64Blocks(a, b, out *byte, blocks int)

const sumBlock = 64 // bytes per iteration of the assembly kernels

// sumVec returns a Sum kernel that adds the whole 64-byte blocks with
// blocks and the rest with tail.
func sumVec(blocks func(in, inout *byte, n int), tail func(in, inout []byte)) func(in, inout []byte) {
	return func(in, inout []byte) {
		inout = inout[:len(in)]
		if n := len(in) / sumBlock; n > 0 {
			blocks(&in[0], &inout[0], n)
			in, inout = in[n*sumBlock:], inout[n*sumBlock:]
		}
		tail(in, inout)
	}
}

// sum3Vec returns a kernel storing a ⊕ b into out (all of one length,
// out overlapping neither), from blocks and the two-operand tail.
func sum3Vec(blocks func(a, b, out *byte, n int), tail func(in, inout []byte)) func(a, b, out []byte) {
	return func(a, b, out []byte) {
		b, out = b[:len(a)], out[:len(a)]
		if n := len(a) / sumBlock; n > 0 {
			blocks(&a[0], &b[0], &out[0], n)
			a, b, out = a[n*sumBlock:], b[n*sumBlock:], out[n*sumBlock:]
		}
		copy(out, b)
		tail(a, out)
	}
}

// fastKernels replaces predefined kernels with vector ones.
func fastKernels() {
	predef[opSum][kFloat32] = sumVec(sumF32Blocks, opSumT[float32])
	predef[opSum][kFloat64] = sumVec(sumF64Blocks, opSumT[float64])
	predef[opSum][kInt32] = sumVec(sumI32Blocks, opSumT[int32])
	predef[opSum][kUint32] = sumVec(sumI32Blocks, opSumT[uint32])
	predef[opSum][kInt64] = sumVec(sumI64Blocks, opSumT[int64])
	predef[opSum][kUint64] = sumVec(sumI64Blocks, opSumT[uint64])
	predef3[opSum][kFloat32] = sum3Vec(sum3F32Blocks, opSumT[float32])
	predef3[opSum][kFloat64] = sum3Vec(sum3F64Blocks, opSumT[float64])
	predef3[opSum][kInt32] = sum3Vec(sum3I32Blocks, opSumT[int32])
	predef3[opSum][kUint32] = sum3Vec(sum3I32Blocks, opSumT[uint32])
	predef3[opSum][kInt64] = sum3Vec(sum3I64Blocks, opSumT[int64])
	predef3[opSum][kUint64] = sum3Vec(sum3I64Blocks, opSumT[uint64])
}
