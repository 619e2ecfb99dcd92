// Package bufpool recycles byte buffers by power-of-two size class, for
// comm's packing buffers and the transports' message buffers.
package bufpool

import "math/bits"

// classes bounds the size classes kept (buffers of 2^40 bytes and more are
// never pooled).
const classes = 40

// keep bounds the bytes a pool keeps per size class: 1 MiB, or four
// buffers of a larger class, or as many buffers as were ever out of the
// pool at once (its owner's working set, such as a window of backlogged
// messages), up to keepPeak bytes.
const (
	keep     = 1 << 20
	keepPeak = 16 << 20
)

// Pool recycles buffers. It is not safe for concurrent use: its owner's
// lock guards it. The zero value is ready to use.
type Pool struct {
	free  [classes][][]byte
	bytes [classes]int
	out   [classes]int // buffers of the class handed out and not put back
	peak  [classes]int // the most buffers of the class out at once
}

func sizeClass(n int) int {
	if n <= 1 {
		return 0
	}
	return bits.Len(uint(n - 1))
}

// Get returns a buffer of n bytes (its contents are not cleared).
func (p *Pool) Get(n int) []byte {
	c := sizeClass(n)
	if c >= classes {
		return make([]byte, n)
	}
	if p.out[c]++; p.out[c] > p.peak[c] {
		p.peak[c] = p.out[c]
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

// Put gives a buffer from Get back; others are left to the garbage
// collector.
func (p *Pool) Put(b []byte) {
	c := sizeClass(cap(b))
	if c >= classes || cap(b) != 1<<c {
		return
	}
	if p.out[c] > 0 {
		p.out[c]--
	}
	if p.bytes[c]+cap(b) > max(keep, 4<<c, min(p.peak[c]<<c, keepPeak)) {
		return
	}
	p.free[c] = append(p.free[c], b[:0])
	p.bytes[c] += cap(b)
}
