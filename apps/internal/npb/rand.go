package npb

// The NPB pseudorandom number generator (NPB common/randi8.f, randdp.f):
//
//	x(k+1) = a * x(k) mod 2^46,   value = 2^-46 * x(k+1)
//
// NPB keeps x and a in doubles holding integers below 2^46. The products are
// exact in 64-bit integer arithmetic modulo 2^64, and 2^46 divides 2^64, so
// masking the wrapped product gives exactly randi8's (and randdp's) numbers.

const (
	// Amult is NPB's multiplier a = 5^13, used by all five kernels.
	Amult = 1220703125
	// SeedEP is the EP seed s (EP/ep_data.f).
	SeedEP = 271828183
	// Seed is the seed of CG, MG, FT and IS (314159265).
	Seed = 314159265

	mask46 = 1<<46 - 1
	r46    = 1.0 / (1 << 46) // 2^-46, exact
)

// Randlc is NPB's randlc(x, a): it advances the seed *x to a*x mod 2^46 and
// returns the new seed times 2^-46, a value in (0, 1). x and a must hold
// integers in (0, 2^46), as in NPB.
func Randlc(x *float64, a float64) float64 {
	v := (uint64(*x) * uint64(a)) & mask46
	*x = float64(v)
	return float64(v) * r46
}

// Vranlc is NPB's vranlc(n, x, a, y): it fills y[0:n] with the next n values
// of the stream and leaves *x at the last seed.
func Vranlc(n int, x *float64, a float64, y []float64) {
	*x = float64(vranlc(uint64(*x), uint64(a), y[:n]))
}

// vranlc fills y with the values following seed x and returns the last seed.
// Two interleaved chains (steps of a^2) break the multiply's dependency
// chain; the numbers are the same as one step at a time.
func vranlc(x, a uint64, y []float64) uint64 {
	n := len(y)
	if n == 0 {
		return x
	}
	a2 := (a * a) & mask46
	x0 := (a * x) & mask46 // seed of y[0]
	x1 := (a * x0) & mask46
	last := x0
	i := 0
	for ; i+1 < n; i += 2 {
		y[i] = float64(x0) * r46
		y[i+1] = float64(x1) * r46
		last = x1
		x0 = (a2 * x0) & mask46
		x1 = (a2 * x1) & mask46
	}
	if i < n {
		y[i] = float64(x0) * r46
		return x0
	}
	return last
}

// PowMod46 returns a^n mod 2^46, the multiplier that jumps a stream n steps
// ahead: the seed n steps after x is PowMod46(a, n)*x mod 2^46. NPB computes
// the same numbers by repeated squaring with randlc (EP's an, FT's ipow46,
// MG's power, IS's find_my_seed).
func PowMod46(a, n uint64) uint64 {
	r := uint64(1)
	a &= mask46
	for n > 0 {
		if n&1 != 0 {
			r = (r * a) & mask46
		}
		a = (a * a) & mask46
		n >>= 1
	}
	return r
}

// skip returns the seed n steps after seed x.
func skip(x, a, n uint64) uint64 {
	return (PowMod46(a, n) * x) & mask46
}
