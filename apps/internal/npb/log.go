package npb

import "math"

// epLog is log(x) for positive normal x, without a division (math.Log
// divides, and EP already divides and takes a square root per pair, all on
// the same divider unit). The method is that of current C libraries: with
// x = 2^k * z, z in [0.75, 1.5), and c the centre of z's 1/256 table
// interval, log(x) = k*ln2 + log(c) + log1p((z-c)/c), where z-c is exact
// and |(z-c)/c| < 2^-8, so a degree-7 series gives log1p to about 1e-18.
// Near 1 the series is applied to x-1 directly to avoid cancellation. The
// error is within a few ulps of math.Log (TestEPLog).
func epLog(x float64) float64 {
	if d := x - 1; d < 1.0/256 && d > -1.0/256 {
		return log1pSeries(d)
	}
	bits := math.Float64bits(x)
	tmp := bits - 0x3fe8000000000000 // bits of 0.75
	k := float64(int64(tmp) >> 52)
	e := &logTab[(tmp>>44)&255]
	z := math.Float64frombits(bits - tmp&(0xfff<<52))
	r := (z - e.c) * e.invc
	return k*ln2Hi + e.logc + (log1pSeries(r) + k*ln2Lo)
}

const (
	ln2Hi = 6.93147180369123816490e-01 // ln 2 with trailing zero bits: k*ln2Hi is exact
	ln2Lo = 1.90821492927058770002e-10
)

// log1pSeries is log(1+r) for |r| < 2^-8.
func log1pSeries(r float64) float64 {
	const c3, c4, c5, c6, c7 = 1.0 / 3, -1.0 / 4, 1.0 / 5, -1.0 / 6, 1.0 / 7
	r2 := r * r
	return r + r2*(-0.5+r*(c3+r*(c4+r*(c5+r*(c6+r*c7)))))
}

// logTab[i] is the centre c of the i-th interval of z, its inverse and
// log: z in [0.75, 1) has 128 intervals of 2^-9, [1, 1.5) 128 of 2^-8,
// indexed by the top mantissa bits of bits(x) - bits(0.75).
var logTab = func() (t [256]struct{ c, invc, logc float64 }) {
	for i := range t {
		c := 0.75 + (float64(i)+0.5)/512
		if i >= 128 {
			c = 1 + (float64(i-128)+0.5)/256
		}
		t[i].c, t[i].invc, t[i].logc = c, 1/c, math.Log(c)
	}
	return t
}()
