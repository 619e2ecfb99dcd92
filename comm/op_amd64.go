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

// sum3Vec returns a kernel storing a ⊕ b into out (all of one length;
// out may be b, but overlaps a nowhere else), adding the whole 64-byte
// blocks with blocks and the rest with tail (the two-operand form).
func sum3Vec(blocks func(a, b, out *byte, n int), tail func(in, inout []byte)) func(a, b, out []byte) {
	return func(a, b, out []byte) {
		b, out = b[:len(a)], out[:len(a)]
		if n := len(a) / sumBlock; n > 0 {
			blocks(&a[0], &b[0], &out[0], n)
			a, b, out = a[n*sumBlock:], b[n*sumBlock:], out[n*sumBlock:]
		}
		if len(out) > 0 && &out[0] != &b[0] {
			copy(out, b)
		}
		tail(a, out)
	}
}

// setSum makes the Sum kernel of kind k run blocks, with tail for what is
// left.
func setSum(k kind, blocks func(a, b, out *byte, n int), tail func(in, inout []byte)) {
	f3 := sum3Vec(blocks, tail)
	predef[opSum][k] = func(in, inout []byte) { f3(in, inout, inout) }
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
