package npb

import (
	"math"
	"math/rand/v2"
	"testing"
)

// epLog against math.Log over EP's domain (0, 1] and beyond.
func TestEPLog(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	maxUlp := 0.0
	check := func(x float64) {
		got, want := epLog(x), math.Log(x)
		if want == 0 {
			if got != 0 {
				t.Fatalf("epLog(%v) = %v, want 0", x, got)
			}
			return
		}
		ulp := math.Abs(got-want) / (math.Nextafter(math.Abs(want), math.Inf(1)) - math.Abs(want))
		maxUlp = max(maxUlp, ulp)
		if ulp > 4 {
			t.Fatalf("epLog(%v) = %v, math.Log %v (%.1f ulp)", x, got, want, ulp)
		}
	}
	for i := 0; i < 2_000_000; i++ {
		check(rng.Float64() + 0x1p-60)                                 // uniform in (0, 1]
		check(math.Ldexp(0.5+rng.Float64()/2, -rng.IntN(1000)))        // log-uniform
		check(1 + (rng.Float64()-0.5)/64)                              // around 1
		check(math.Ldexp(1+(rng.Float64()-0.5)*0x1p-20, -rng.IntN(4))) // near powers of two
	}
	for _, x := range []float64{1, 0.75, 1.5, 0.5, 2, 1 - 1.0/256, 1 + 1.0/256, math.SmallestNonzeroFloat64 * (1 << 53)} {
		check(x)
	}
	t.Logf("max error %.2f ulp", maxUlp)
}
