package udtransport

import "math/bits"

// bufPool recycles message buffers by power-of-two size class. It is not
// safe for concurrent use; its owner's lock guards it.
type bufPool struct {
	free  [40][][]byte
	bytes [40]int
}

// poolKeep bounds the bytes a pool keeps per size class.
const poolKeep = 1 << 20

func sizeClass(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// get returns a buffer of n bytes.
func (p *bufPool) get(n int) []byte {
	c := sizeClass(n)
	if c >= len(p.free) {
		return make([]byte, n)
	}
	if l := len(p.free[c]); l > 0 {
		b := p.free[c][l-1]
		p.free[c][l-1] = nil
		p.free[c] = p.free[c][:l-1]
		p.bytes[c] -= cap(b)
		return b[:n]
	}
	return make([]byte, n, 1<<c)
}

// put gives a buffer from get back.
func (p *bufPool) put(b []byte) {
	c := sizeClass(cap(b))
	if c >= len(p.free) || cap(b) != 1<<c || p.bytes[c]+cap(b) > max(poolKeep, 4<<c) {
		return
	}
	p.free[c] = append(p.free[c], b[:0])
	p.bytes[c] += cap(b)
}
