package proto

import "fmt"

// Buf describes message memory: either contiguous (Count == 0: all of B)
// or a vector of Count blocks of Block bytes, block i starting at byte
// i·Stride of B (MPI_Type_vector in bytes). The message's bytes are the
// blocks in order ("packed order"); offsets into a message are offsets in
// packed order.
type Buf struct {
	B                    []byte
	Count, Block, Stride int
}

// Contig returns the Buf for all of b.
func Contig(b []byte) Buf { return Buf{B: b} }

// Vector returns the Buf of count blocks of block bytes, stride bytes
// apart, in b.
func Vector(b []byte, count, block, stride int) Buf {
	return Buf{B: b, Count: count, Block: block, Stride: stride}
}

// IsContig reports whether b is contiguous.
func (b *Buf) IsContig() bool { return b.Count == 0 }

// Len returns the number of bytes of the message.
func (b *Buf) Len() int {
	if b.Count == 0 {
		return len(b.B)
	}
	return b.Count * b.Block
}

// Check reports whether a vector layout is well formed: non-negative
// sizes, blocks that do not overlap (Stride ≥ Block) and an extent inside B.
func (b *Buf) Check() error {
	if b.Count == 0 {
		return nil
	}
	if b.Count < 0 || b.Block < 0 || b.Stride < b.Block {
		return fmt.Errorf("invalid vector layout (count %d, block %d, stride %d)", b.Count, b.Block, b.Stride)
	}
	if ext := (b.Count-1)*b.Stride + b.Block; ext > len(b.B) {
		return fmt.Errorf("vector layout (count %d, block %d, stride %d) spans %d bytes of a %d-byte buffer", b.Count, b.Block, b.Stride, ext, len(b.B))
	}
	return nil
}

// Segments appends to segs the pieces of B that hold packed bytes
// [off, off+n) and returns the extended slice.
func (b *Buf) Segments(off, n int, segs [][]byte) [][]byte {
	if n <= 0 {
		return segs
	}
	if b.Count == 0 {
		return append(segs, b.B[off:off+n])
	}
	if b.Block == 0 {
		return segs
	}
	i, in := off/b.Block, off%b.Block
	for n > 0 {
		k := min(b.Block-in, n)
		s := i*b.Stride + in
		segs = append(segs, b.B[s:s+k])
		n -= k
		i++
		in = 0
	}
	return segs
}

// NumSegments returns how many pieces Segments(off, n) yields.
func (b *Buf) NumSegments(off, n int) int {
	if n <= 0 {
		return 0
	}
	if b.Count == 0 {
		return 1
	}
	if b.Block == 0 {
		return 0
	}
	first := off / b.Block
	last := (off + n - 1) / b.Block
	return last - first + 1
}

// Scatter copies src into packed bytes [off, off+len(src)) of b.
func (b *Buf) Scatter(off int, src []byte) {
	if b.Count == 0 {
		copy(b.B[off:], src)
		return
	}
	if b.Block == 0 {
		return
	}
	i, in := off/b.Block, off%b.Block
	if in > 0 {
		s := i*b.Stride + in
		k := copy(b.B[s:s+b.Block-in], src)
		src = src[k:]
		i++
	}
	if n := len(src) / b.Block; n > 0 {
		moveBlocks(b.B[i*b.Stride:], src, n, b.Block, b.Stride, b.Block)
		src = src[n*b.Block:]
		i += n
	}
	if len(src) > 0 {
		copy(b.B[i*b.Stride:], src)
	}
}

// Gather copies packed bytes [off, off+len(dst)) of b into dst.
func (b *Buf) Gather(off int, dst []byte) {
	if b.Count == 0 {
		copy(dst, b.B[off:])
		return
	}
	if b.Block == 0 {
		return
	}
	i, in := off/b.Block, off%b.Block
	if in > 0 {
		s := i*b.Stride + in
		k := copy(dst, b.B[s:s+b.Block-in])
		dst = dst[k:]
		i++
	}
	if n := len(dst) / b.Block; n > 0 {
		moveBlocks(dst, b.B[i*b.Stride:], n, b.Block, b.Block, b.Stride)
		dst = dst[n*b.Block:]
		i += n
	}
	if len(dst) > 0 {
		copy(dst, b.B[i*b.Stride:i*b.Stride+len(dst)])
	}
}

// moveBlocks copies n blocks of block bytes, the i-th from src[i·sstep:]
// to dst[i·dstep:]. Blocks of 8 to 64 bytes are moved as fixed-size
// arrays (inline moves, no call per block): packing a vector of small
// blocks runs at memory speed rather than at the rate of calls.
func moveBlocks(dst, src []byte, n, block, dstep, sstep int) {
	switch block {
	case 8:
		for i := range n {
			*(*[8]byte)(dst[i*dstep:]) = *(*[8]byte)(src[i*sstep:])
		}
	case 16:
		for i := range n {
			*(*[16]byte)(dst[i*dstep:]) = *(*[16]byte)(src[i*sstep:])
		}
	case 32:
		for i := range n {
			*(*[32]byte)(dst[i*dstep:]) = *(*[32]byte)(src[i*sstep:])
		}
	case 64:
		for i := range n {
			*(*[64]byte)(dst[i*dstep:]) = *(*[64]byte)(src[i*sstep:])
		}
	default:
		for i := range n {
			copy(dst[i*dstep:i*dstep+block], src[i*sstep:i*sstep+block])
		}
	}
}

// Extent returns the prefix of B the layout touches: what must be exposed
// for a peer to read the message in place.
func (b *Buf) Extent() []byte {
	if b.Count == 0 {
		return b.B
	}
	if b.Count == 0 || b.Block == 0 {
		return b.B[:0]
	}
	return b.B[:(b.Count-1)*b.Stride+b.Block]
}
