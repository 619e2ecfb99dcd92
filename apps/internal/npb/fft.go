package npb

import "math"

// fftPlan holds the roots of unity for unnormalised complex FFTs of one
// power-of-two length n. Following NPB (FT/ft.f fft_init, cfftz), the
// forward transform uses exp(+2*pi*i*jk/n) and the inverse its conjugate.
//
// The transform is a radix-4 Stockham autosort FFT (its last pass radix-2
// when log2(n) is odd) over a block of b sequences transformed together,
// like NPB's fftz2 over its fftblock: every butterfly's inner loop runs over
// the b sequences with the same twiddle factors, on contiguous memory. In
// the scratch buffers element i of sequence q is at q + b*i. The first pass
// reads the sequences where they lie in the caller's array and the last pass
// writes them back there, so a strided 3-D array needs no gather or scatter
// copies.
type fftPlan struct {
	n      int
	fw, bw []complex128 // exp(+-2*pi*i*k/n), k < n
}

func newFFTPlan(n int) *fftPlan {
	p := &fftPlan{n: n, fw: make([]complex128, n), bw: make([]complex128, n)}
	p.init()
	return p
}

// init computes the roots of unity (NPB's fft_init).
func (p *fftPlan) init() {
	n := p.n
	for k := 0; k < n; k++ {
		s, c := math.Sincos(2 * math.Pi * float64(k) / float64(n))
		p.fw[k] = complex(c, s)
		p.bw[k] = complex(c, -s)
	}
}

// fftLines describes where b sequences of length n lie in an array: element
// i of sequence q is at a[rows[i]+off+q] (consecutive sequences adjacent).
// A row table, rather than a stride, also describes the blocks of a
// transpose buffer, which come from different ranks.
type fftLines struct {
	a    []complex128
	rows []int
	off  int
}

// evolveArgs makes the first pass multiply every input element (q, i) by
// eq[q]*ei[i] and store the product back (FT's evolve).
type evolveArgs struct {
	eq, ei []float64
}

// lines transforms b sequences from src into dst (which may be src); blk
// and scr are scratch of at least b*n elements each. ev may be nil.
func (p *fftPlan) lines(src, dst fftLines, b int, blk, scr []complex128, inverse bool, ev *evolveArgs) {
	n := p.n
	tw := p.fw
	if inverse {
		tw = p.bw
	}
	if n < 8 {
		p.small(src, dst, b, blk, scr, inverse, ev)
		return
	}
	blk, scr = blk[:b*n], scr[:b*n]
	// First pass, length n: from the caller's array into blk.
	if ev != nil {
		radix4Evolve(src, blk, b, n, tw, inverse, ev)
	} else {
		radix4First(src, blk, b, n, tw, inverse)
	}
	x, y := blk, scr
	s, l := 4*b, n/4
	for l > 4 {
		radix4(x, y, s, l, n, tw, inverse)
		x, y = y, x
		s *= 4
		l /= 4
	}
	// Last pass, length 4 or 2 (no twiddles), into the caller's array:
	// x[q+s*k] with q = j + b*g is element g + (n/l)*k of sequence j.
	if l == 4 {
		last4(x, s, dst, b, n/4, inverse)
	} else {
		last2(x, s, dst, b, n/2)
	}
}

// small handles n < 8 through the scratch buffers (not used by NPB's
// sizes, kept for completeness).
func (p *fftPlan) small(src, dst fftLines, b int, blk, scr []complex128, inverse bool, ev *evolveArgs) {
	n := p.n
	for i := 0; i < n; i++ {
		row := src.a[src.rows[i]+src.off:][:b]
		for q := range row {
			if ev != nil {
				t := ev.eq[q] * ev.ei[i]
				row[q] = complex(real(row[q])*t, imag(row[q])*t)
			}
			blk[q+b*i] = row[q]
		}
	}
	x, y := blk[:b*n], scr[:b*n]
	tw := p.fw
	if inverse {
		tw = p.bw
	}
	s := b
	for l := n; l > 1; {
		if l >= 4 {
			radix4(x, y, s, l, n, tw, inverse)
			l /= 4
			s *= 4
		} else {
			radix2(x, y, s)
			l /= 2
			s *= 2
		}
		x, y = y, x
	}
	for i := 0; i < n; i++ {
		copy(dst.a[dst.rows[i]+dst.off:][:b], x[b*i:b*i+b])
	}
}

// radix4 is one Stockham pass of length l over s interleaved sequences:
// for each p < l/4 the butterfly of inputs x[q+s*(p+k*l/4)], k = 0..3,
// twiddled by w^(p*k) (w = e^(+-2*pi*i/l)), goes to y[q+s*(4p+k)].
func radix4(x, y []complex128, s, l, n int, tw []complex128, inverse bool) {
	m := l / 4
	step := n / l
	for p := 0; p < m; p++ {
		xa := x[s*p:][:s]
		xb1 := x[s*(p+m):][:len(xa)]
		xc := x[s*(p+2*m):][:len(xa)]
		xd := x[s*(p+3*m):][:len(xa)]
		ya := y[s*4*p:][:len(xa)]
		yb1 := y[s*(4*p+1):][:len(xa)]
		yc := y[s*(4*p+2):][:len(xa)]
		yd := y[s*(4*p+3):][:len(xa)]
		if p == 0 {
			bfly4(xa, xb1, xc, xd, ya, yb1, yc, yd, inverse)
			continue
		}
		w1, w2, w3 := tw[p*step], tw[2*p*step], tw[3*p*step]
		if inverse {
			for q, a := range xa {
				b, c, d := xb1[q], xc[q], xd[q]
				apc, amc := a+c, a-c
				bpd, bmd := b+d, b-d
				jb := complex(imag(bmd), -real(bmd)) // -i*(b-d)
				ya[q] = apc + bpd
				yb1[q] = w1 * (amc + jb)
				yc[q] = w2 * (apc - bpd)
				yd[q] = w3 * (amc - jb)
			}
		} else {
			for q, a := range xa {
				b, c, d := xb1[q], xc[q], xd[q]
				apc, amc := a+c, a-c
				bpd, bmd := b+d, b-d
				jb := complex(-imag(bmd), real(bmd)) // +i*(b-d)
				ya[q] = apc + bpd
				yb1[q] = w1 * (amc + jb)
				yc[q] = w2 * (apc - bpd)
				yd[q] = w3 * (amc - jb)
			}
		}
	}
}

// bfly4 is the radix-4 butterfly without twiddles (p = 0).
func bfly4(xa, xb, xc, xd, ya, yb, yc, yd []complex128, inverse bool) {
	xb, xc, xd = xb[:len(xa)], xc[:len(xa)], xd[:len(xa)]
	ya, yb, yc, yd = ya[:len(xa)], yb[:len(xa)], yc[:len(xa)], yd[:len(xa)]
	if inverse {
		for q, a := range xa {
			b, c, d := xb[q], xc[q], xd[q]
			apc, amc := a+c, a-c
			bpd, bmd := b+d, b-d
			jb := complex(imag(bmd), -real(bmd))
			ya[q] = apc + bpd
			yb[q] = amc + jb
			yc[q] = apc - bpd
			yd[q] = amc - jb
		}
	} else {
		for q, a := range xa {
			b, c, d := xb[q], xc[q], xd[q]
			apc, amc := a+c, a-c
			bpd, bmd := b+d, b-d
			jb := complex(-imag(bmd), real(bmd))
			ya[q] = apc + bpd
			yb[q] = amc + jb
			yc[q] = apc - bpd
			yd[q] = amc - jb
		}
	}
}

// radix4Evolve is the first pass (length n) with FT's evolve fused into
// its loads: each input is multiplied by its factor and stored back.
func radix4Evolve(src fftLines, y []complex128, b, n int, tw []complex128, inverse bool, ev *evolveArgs) {
	m := n / 4
	x, rows, off := src.a, src.rows[:n], src.off
	eq := ev.eq[:b]
	for p := 0; p < m; p++ {
		xa := x[rows[p]+off:][:len(eq)]
		xb1 := x[rows[p+m]+off:][:len(eq)]
		xc := x[rows[p+2*m]+off:][:len(eq)]
		xd := x[rows[p+3*m]+off:][:len(eq)]
		ea, eb, ec, ed := ev.ei[p], ev.ei[p+m], ev.ei[p+2*m], ev.ei[p+3*m]
		for q, e := range eq {
			ta, tb, tc, td := e*ea, e*eb, e*ec, e*ed
			a, b, c, d := xa[q], xb1[q], xc[q], xd[q]
			a = complex(real(a)*ta, imag(a)*ta)
			b = complex(real(b)*tb, imag(b)*tb)
			c = complex(real(c)*tc, imag(c)*tc)
			d = complex(real(d)*td, imag(d)*td)
			xa[q], xb1[q], xc[q], xd[q] = a, b, c, d
		}
	}
	radix4First(src, y, b, n, tw, inverse)
}

// last4 is the final pass of length 4: x[q+s*k], q = j + b*g, goes to
// element g + nq*k of sequence j of dst.
func last4(x []complex128, s int, dst fftLines, b, nq int, inverse bool) {
	rows, off := dst.rows[:4*nq], dst.off
	for g := 0; g < nq; g++ {
		bfly4(x[b*g:][:b], x[b*g+s:][:b], x[b*g+2*s:][:b], x[b*g+3*s:][:b],
			dst.a[rows[g]+off:][:b], dst.a[rows[g+nq]+off:][:b],
			dst.a[rows[g+2*nq]+off:][:b], dst.a[rows[g+3*nq]+off:][:b], inverse)
	}
}

// last2 is the final pass of length 2.
func last2(x []complex128, s int, dst fftLines, b, nq int) {
	rows, off := dst.rows[:2*nq], dst.off
	for g := 0; g < nq; g++ {
		xa := x[b*g:][:b]
		xb := x[b*g+s:][:len(xa)]
		ya := dst.a[rows[g]+off:][:len(xa)]
		yb := dst.a[rows[g+nq]+off:][:len(xa)]
		for q, a := range xa {
			c := xb[q]
			ya[q] = a + c
			yb[q] = a - c
		}
	}
}

// radix4First is the first pass (length n), reading the sequences from
// the caller's array: like radix4 with input rows from src's table.
func radix4First(src fftLines, y []complex128, b, n int, tw []complex128, inverse bool) {
	m := n / 4
	x, rows, off := src.a, src.rows[:n], src.off
	for p := 0; p < m; p++ {
		xa := x[rows[p]+off:][:b]
		xb1 := x[rows[p+m]+off:][:len(xa)]
		xc := x[rows[p+2*m]+off:][:len(xa)]
		xd := x[rows[p+3*m]+off:][:len(xa)]
		ya := y[b*4*p:][:len(xa)]
		yb1 := y[b*(4*p+1):][:len(xa)]
		yc := y[b*(4*p+2):][:len(xa)]
		yd := y[b*(4*p+3):][:len(xa)]
		if p == 0 {
			bfly4(xa, xb1, xc, xd, ya, yb1, yc, yd, inverse)
			continue
		}
		w1, w2, w3 := tw[p], tw[2*p], tw[3*p]
		if inverse {
			for q, a := range xa {
				b, c, d := xb1[q], xc[q], xd[q]
				apc, amc := a+c, a-c
				bpd, bmd := b+d, b-d
				jb := complex(imag(bmd), -real(bmd))
				ya[q] = apc + bpd
				yb1[q] = w1 * (amc + jb)
				yc[q] = w2 * (apc - bpd)
				yd[q] = w3 * (amc - jb)
			}
		} else {
			for q, a := range xa {
				b, c, d := xb1[q], xc[q], xd[q]
				apc, amc := a+c, a-c
				bpd, bmd := b+d, b-d
				jb := complex(-imag(bmd), real(bmd))
				ya[q] = apc + bpd
				yb1[q] = w1 * (amc + jb)
				yc[q] = w2 * (apc - bpd)
				yd[q] = w3 * (amc - jb)
			}
		}
	}
}

// radix2 is a Stockham pass of length 2 (no twiddles) over s sequences.
func radix2(x, y []complex128, s int) {
	xa := x[:s]
	xb := x[s:][:len(xa)]
	ya := y[:len(xa)]
	yb := y[s:][:len(xa)]
	for q, a := range xa {
		c := xb[q]
		ya[q] = a + c
		yb[q] = a - c
	}
}
