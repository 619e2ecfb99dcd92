package npb

import (
	"math"
	"math/cmplx"
	"math/rand/v2"
	"testing"
)

// The blocked Stockham FFT against a direct DFT, for every length FT uses
// and a few block widths, both directions.
func TestFFTMatchesDFT(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{2, 4, 8, 16, 32, 64, 128, 256, 512} {
		p := newFFTPlan(n)
		for _, b := range []int{1, 3, 16} {
			for _, inverse := range []bool{false, true} {
				x := make([]complex128, n*b)
				for i := range x {
					x[i] = complex(rng.Float64()-0.5, rng.Float64()-0.5)
				}
				in := append([]complex128(nil), x...)
				rows := make([]int, n)
				for i := range rows {
					rows[i] = b * i
				}
				l := fftLines{x, rows, 0}
				p.lines(l, l, b, make([]complex128, n*b), make([]complex128, n*b), inverse, nil)
				got := x
				sign := 1.0
				if inverse {
					sign = -1
				}
				maxErr := 0.0
				for j := 0; j < b; j++ {
					for k := 0; k < n; k++ {
						var sum complex128
						for i := 0; i < n; i++ {
							sum += in[j+b*i] * cmplx.Rect(1, sign*2*math.Pi*float64(i*k%n)/float64(n))
						}
						maxErr = max(maxErr, cmplx.Abs(got[j+b*k]-sum))
					}
				}
				if maxErr > 1e-12*float64(n) {
					t.Errorf("n=%d b=%d inverse=%v: max error %g", n, b, inverse, maxErr)
				}
			}
		}
	}
}
