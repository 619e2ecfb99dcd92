package npb_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/jiarun/jia/apps/internal/npb"
)

// Test vectors from ../shared/npb/verification.md section 1 (exact integer
// arithmetic): the first five seeds and values from x0 = 314159265.
func TestRandlcVectors(t *testing.T) {
	want := []struct {
		x uint64
		v float64
	}{
		{55909509111989, 0.7945219111887383},
		{61155031930969, 0.8690652738745399},
		{45573031421645, 0.6476317284643329},
		{55279057169489, 0.7855626502289539},
		{1250169187877, 0.017765972698342125},
	}
	x := float64(npb.Seed)
	for k, w := range want {
		v := npb.Randlc(&x, npb.Amult)
		if uint64(x) != w.x || v != w.v {
			t.Errorf("step %d: seed %d value %v, want %d %v", k+1, uint64(x), v, w.x, w.v)
		}
	}
	x = npb.SeedEP
	for k, w := range []float64{0.46730482219622616, 0.7825026306504554, 0.5557317432659801} {
		if v := npb.Randlc(&x, npb.Amult); v != w {
			t.Errorf("EP stream value %d = %v, want %v", k+1, v, w)
		}
	}
}

// EP's batch multiplier a^(2^17) mod 2^46 (verification.md section 2).
func TestPowMod46(t *testing.T) {
	if got := npb.PowMod46(npb.Amult, 1<<17); got != 62362532446209 {
		t.Errorf("a^(2^17) = %d, want 62362532446209", got)
	}
	// NPB's way: t1 = a, then t1 = t1*t1 seventeen times with randlc.
	t1 := float64(npb.Amult)
	for i := 0; i < 17; i++ {
		npb.Randlc(&t1, t1)
	}
	if uint64(t1) != 62362532446209 {
		t.Errorf("randlc squaring gives %d", uint64(t1))
	}
	// Jump-ahead equals stepping.
	x := float64(npb.Seed)
	for i := 0; i < 1000; i++ {
		npb.Randlc(&x, npb.Amult)
	}
	if got := npb.PowMod46(npb.Amult, 1000) * npb.Seed & (1<<46 - 1); got != uint64(x) {
		t.Errorf("jump 1000 = %d, stepping gives %d", got, uint64(x))
	}
}

// randdp is NPB's portable double-precision randlc (common/randdp.f), which
// splits the numbers into 23-bit halves; the integer version must match it.
func randdp(x *float64, a float64) float64 {
	const r23, t23 = 1.0 / (1 << 23), 1 << 23
	const r46, t46 = r23 * r23, t23 * t23
	t1 := r23 * a
	a1 := math.Trunc(t1)
	a2 := a - t23*a1
	t1 = r23 * *x
	x1 := math.Trunc(t1)
	x2 := *x - t23*x1
	t1 = a1*x2 + a2*x1
	t2 := math.Trunc(r23 * t1)
	z := t1 - t23*t2
	t3 := t23*z + a2*x2
	t4 := math.Trunc(r46 * t3)
	*x = t3 - t46*t4
	return r46 * *x
}

func TestRandlcMatchesRanddp(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		x := float64(rng.Uint64N(1<<45)*2 + 1)
		a := float64(rng.Uint64N(1<<45)*2 + 1)
		if i%2 == 0 {
			a = npb.Amult
		}
		x1, x2 := x, x
		v1, v2 := npb.Randlc(&x1, a), randdp(&x2, a)
		if v1 != v2 || x1 != x2 {
			t.Fatalf("randlc(%v, %v) = %v (seed %v), randdp gives %v (seed %v)", x, a, v1, x1, v2, x2)
		}
	}
}

func TestVranlc(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 10, 11} {
		x, xr := float64(npb.Seed), float64(npb.Seed)
		y := make([]float64, n)
		npb.Vranlc(n, &x, npb.Amult, y)
		for i := 0; i < n; i++ {
			if v := npb.Randlc(&xr, npb.Amult); v != y[i] {
				t.Fatalf("n=%d: y[%d] = %v, want %v", n, i, y[i], v)
			}
		}
		if x != xr {
			t.Errorf("n=%d: seed after vranlc %v, want %v", n, x, xr)
		}
	}
}
