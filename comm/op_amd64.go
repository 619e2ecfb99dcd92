//go:build !purego

package comm

// Sum over 32- and 64-bit elements runs four SSE2 registers at a time
// (every amd64 processor has SSE2): the additions are element-wise, as in
// opSumT, so results are bit-identical to the scalar loop's.

//go:noescape
func sumF32Blocks(a, b, out *byte, blocks int)

//go:noescape
func sumF64Blocks(a, b, out *byte, blocks int)

//go:noescape
func sumI32Blocks(a, b, out *byte, blocks int)

//go:noescape
func sumI64Blocks(a, b, out *byte, blocks int)

const sumBlock = 64 // bytes per iteration of the assembly kernels

// setSum makes the Sum kernel of kind k add the whole 64-byte blocks with
// blocks (in ⊕ inout into inout) and the rest with tail.
func setSum(k kind, blocks func(a, b, out *byte, n int), tail func(in, inout []byte)) {
	predef[opSum][k] = func(in, inout []byte) {
		inout = inout[:len(in)]
		if n := len(in) / sumBlock; n > 0 {
			blocks(&in[0], &inout[0], &inout[0], n)
			in, inout = in[n*sumBlock:], inout[n*sumBlock:]
		}
		tail(in, inout)
	}
}

// fastKernels replaces predefined kernels with vector ones.
func fastKernels() {
	setSum(kFloat32, sumF32Blocks, opSumT[float32])
	setSum(kFloat64, sumF64Blocks, opSumT[float64])
	setSum(kInt32, sumI32Blocks, opSumT[int32])
	setSum(kUint32, sumI32Blocks, opSumT[uint32])
	setSum(kInt64, sumI64Blocks, opSumT[int64])
	setSum(kUint64, sumI64Blocks, opSumT[uint64])
}
