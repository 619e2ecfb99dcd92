package npb

import (
	"fmt"
	"math"
	"time"
)

// MG (multigrid), NPB3.4-MPI MG/mg.f: nit V-cycles of a multigrid solver
// for a 3-D Poisson equation with periodic boundaries, on a 2^lt cube whose
// right-hand side is +1 at ten random points, -1 at ten others and 0
// elsewhere.
//
// The decomposition is NPB's: np = 2^k ranks form a pi1 x pi2 x pi3 grid
// (split z first, then y, then x); each rank holds its block of every level
// with one ghost layer, refreshed by comm3 (two Sendrecvs per axis). On
// coarse levels with fewer points than ranks along an axis some ranks are
// "dead" and the live ones talk to neighbours further away; interpolation
// back to the finer level then hands the dead ranks their ghost planes
// (comm3_ex). Arrays are NPB's with 0-based indices: point (i1, i2, i3) of a
// level with local size m1 x m2 x m3 (ghosts included) is element
// i1 + m1*(i2 + m2*i3).

const mgMaxLevel = 11

func mgCheckRanks(class byte, n int) error {
	p := mgClasses[class]
	// At least two points per rank along every axis of the finest grid.
	max := 1
	for l := 1; ; l++ {
		_, _, dz := mgSplit(l)
		if dz > p.lt-1 {
			break
		}
		max = 1 << l
	}
	if !isPow2(n) || n > max {
		return &RanksError{"MG", class, n, fmt.Sprintf("a power of two from 1 to %d", max)}
	}
	return nil
}

// mgSplit gives log2 of the rank grid dimensions for 2^logp ranks (setup).
func mgSplit(logp int) (dx, dy, dz int) {
	dx = logp / 3
	dy = (logp - dx) / 2
	return dx, dy, logp - dx - dy
}

// RunMG runs MG class S, W, A, B or C on a power-of-two number of ranks.
func RunMG(c Comm, class byte) (Result, error) {
	if err := checkClass("MG", class); err != nil {
		return Result{}, err
	}
	if err := mgCheckRanks(class, c.Size()); err != nil {
		return Result{}, err
	}
	s := newMGState(c, class)
	p := s.p
	lt := s.lt

	// Untimed: the right-hand side, one V-cycle, then start again.
	clear(s.u)
	if err := s.zran3(); err != nil {
		return Result{}, err
	}
	if err := s.resid(s.u, s.v, s.r, lt); err != nil {
		return Result{}, err
	}
	if err := s.mg3P(); err != nil {
		return Result{}, err
	}
	if err := s.resid(s.u, s.v, s.r, lt); err != nil {
		return Result{}, err
	}
	clear(s.u)
	if err := s.zran3(); err != nil {
		return Result{}, err
	}

	if err := c.Barrier(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	if err := s.resid(s.u, s.v, s.r, lt); err != nil {
		return Result{}, err
	}
	if _, _, err := s.norm2u3(s.r, lt); err != nil {
		return Result{}, err
	}
	for it := 1; it <= p.nit; it++ {
		if err := s.mg3P(); err != nil {
			return Result{}, err
		}
		if err := s.resid(s.u, s.v, s.r, lt); err != nil {
			return Result{}, err
		}
	}
	rnm2, _, err := s.norm2u3(s.r, lt)
	if err != nil {
		return Result{}, err
	}
	tm, err := maxTime(c, time.Since(start).Seconds())
	if err != nil {
		return Result{}, err
	}
	n := 1 << lt
	res := Result{
		Kernel: "MG", Class: class, Size: [3]int{n, n, n}, Iterations: p.nit, Ranks: c.Size(),
		Time: tm, OpType: "floating point",
		Mops:   58 * float64(p.nit) * float64(n) * float64(n) * float64(n) / tm / 1e6,
		Checks: []Check{relCheck("L2 norm of residual", complex(rnm2, 0), complex(p.rnm2, 0), mgEps)},
	}
	res.Verified = allOK(res.Checks)
	return res, nil
}

type mgState struct {
	c    Comm
	p    mgParams
	me   int
	np   int
	lt   int
	a, q [4]float64 // residual and smoother coefficients (NPB's a and c)

	ng         [4][mgMaxLevel + 1]int // global points per axis and level
	m          [4][mgMaxLevel + 1]int // local size with ghosts, per axis and level
	ir         [mgMaxLevel + 1]int    // offset of each level in u and r
	dead       [mgMaxLevel + 1]bool
	takeEx     [4][mgMaxLevel + 1]bool
	giveEx     [4][mgMaxLevel + 1]bool
	nbr        [4][2][mgMaxLevel + 1]int // [axis][0: dir -1, 1: dir +1][level]
	is, ie     [4]int                    // this rank's global interior range on the finest level (1-based, NPB)
	u, v, r    []float64
	sbuf, rbuf []float64 // ghost exchange buffers
	x1, y1     []float64 // line scratch
	z1, z2, z3 []float64
	red        []float64
}

func newMGState(c Comm, class byte) *mgState {
	p := mgClasses[class]
	s := &mgState{c: c, p: p, me: c.Rank(), np: c.Size(), lt: p.lt}
	s.a = [4]float64{-8.0 / 3.0, 0, 1.0 / 6.0, 1.0 / 12.0}
	if p.smoothB {
		s.q = [4]float64{-3.0 / 17.0, 1.0 / 33.0, -1.0 / 61.0, 0}
	} else {
		s.q = [4]float64{-3.0 / 8.0, 1.0 / 32.0, -1.0 / 64.0, 0}
	}
	s.setup()
	nr, maxm, maxPlane := 0, 0, 0
	for k := 1; k <= s.lt; k++ {
		m1, m2, m3 := s.m[1][k], s.m[2][k], s.m[3][k]
		nr += m1 * m2 * m3
		maxm = max(maxm, m1, m2, m3)
		maxPlane = max(maxPlane, m1*m2, m1*m3, m2*m3)
	}
	lt := s.lt
	s.u = make([]float64, nr)
	s.r = make([]float64, nr)
	s.v = make([]float64, s.m[1][lt]*s.m[2][lt]*s.m[3][lt])
	s.sbuf = make([]float64, 2*maxPlane)
	s.rbuf = make([]float64, 2*maxPlane)
	s.x1, s.y1 = make([]float64, maxm), make([]float64, maxm)
	s.z1, s.z2, s.z3 = make([]float64, maxm), make([]float64, maxm), make([]float64, maxm)
	s.red = make([]float64, 1)
	return s
}

// setup is NPB's setup: the rank grid, each level's local sizes, dead
// ranks, neighbours and the expand-exchange flags.
func (s *mgState) setup() {
	lt := s.lt
	for ax := 1; ax <= 3; ax++ {
		s.ng[ax][lt] = 1 << lt
		for k := lt - 1; k >= 1; k-- {
			s.ng[ax][k] = s.ng[ax][k+1] / 2
		}
	}
	dx, dy, _ := mgSplit(ilog2(s.np))
	var pi, idi, next [4]int
	pi[1] = 1 << dx
	idi[1] = s.me % pi[1]
	pi[2] = 1 << dy
	idi[2] = (s.me / pi[1]) % pi[2]
	pi[3] = s.np / (pi[1] * pi[2])
	idi[3] = s.me / (pi[1] * pi[2])
	next = [4]int{0, 1, 1, 1}
	for k := lt; k >= 1; k-- {
		var idin [4][2]int
		for ax := 1; ax <= 3; ax++ {
			ng := s.ng[ax][k]
			mi := 2 + ((idi[ax]+1)*ng)/pi[ax] - (idi[ax]*ng)/pi[ax]
			mip := 2 + ((next[ax]+idi[ax]+1)*ng)/pi[ax] - ((next[ax]+idi[ax])*ng)/pi[ax]
			if mip == 2 || mi == 2 {
				next[ax] *= 2
			}
			if k+1 <= lt {
				if mip == 2 && mi == 3 {
					s.giveEx[ax][k+1] = true
				}
				if mip == 3 && mi == 2 {
					s.takeEx[ax][k+1] = true
				}
			}
			if mi == 2 {
				s.dead[k] = true
			}
			s.m[ax][k] = mi
		}
		for ax := 1; ax <= 3; ax++ {
			idin[ax][1] = (idi[ax] + next[ax] + pi[ax]) % pi[ax]
			idin[ax][0] = (idi[ax] - next[ax] + pi[ax]) % pi[ax]
		}
		for d := 0; d < 2; d++ {
			s.nbr[1][d][k] = idin[1][d] + pi[1]*(idi[2]+pi[2]*idi[3])
			s.nbr[2][d][k] = idi[1] + pi[1]*(idin[2][d]+pi[2]*idi[3])
			s.nbr[3][d][k] = idi[1] + pi[1]*(idi[2]+pi[2]*idin[3][d])
		}
	}
	for ax := 1; ax <= 3; ax++ {
		ng := s.ng[ax][lt]
		s.is[ax] = 2 + ng - ((pi[ax]-idi[ax])*ng)/pi[ax]
		s.ie[ax] = 1 + ng - ((pi[ax]-1-idi[ax])*ng)/pi[ax]
	}
	s.ir[lt] = 0
	for j := lt - 1; j >= 1; j-- {
		s.ir[j] = s.ir[j+1] + s.m[1][j+1]*s.m[2][j+1]*s.m[3][j+1]
	}
}

// level returns level k of a multi-level array and its local sizes.
func (s *mgState) level(x []float64, k int) ([]float64, int, int, int) {
	m1, m2, m3 := s.m[1][k], s.m[2][k], s.m[3][k]
	return x[s.ir[k] : s.ir[k]+m1*m2*m3], m1, m2, m3
}

// mg3P is one V-cycle.
func (s *mgState) mg3P() error {
	lt, lb := s.lt, 1
	for k := lt; k >= lb+1; k-- {
		if err := s.rprj3(k); err != nil {
			return err
		}
	}
	u, _, _, _ := s.level(s.u, lb)
	clear(u)
	if err := s.psinv(lb); err != nil {
		return err
	}
	for k := lb + 1; k <= lt-1; k++ {
		u, _, _, _ := s.level(s.u, k)
		clear(u)
		if err := s.interp(k); err != nil {
			return err
		}
		r, _, _, _ := s.level(s.r, k)
		if err := s.resid(u, r, r, k); err != nil {
			return err
		}
		if err := s.psinv(k); err != nil {
			return err
		}
	}
	if err := s.interp(lt); err != nil {
		return err
	}
	if err := s.resid(s.u, s.v, s.r, lt); err != nil {
		return err
	}
	return s.psinv(lt)
}

// resid computes r = v - A u on level k (r may be v) and refreshes r's
// ghosts. The stencil sums along i1 are kept in registers, sliding, instead
// of NPB's u1/u2 line arrays; the arithmetic and its order are NPB's.
func (s *mgState) resid(u, v, r []float64, k int) error {
	n1, n2, n3 := s.m[1][k], s.m[2][k], s.m[3][k]
	s.residCore(u, v, r, n1, n2, n3)
	return s.comm3(r, n1, n2, n3, k)
}

func (s *mgState) residCore(u, v, r []float64, n1, n2, n3 int) {
	u, v, r = u[:n1*n2*n3], v[:n1*n2*n3], r[:n1*n2*n3]
	a0, a2, a3 := s.a[0], s.a[2], s.a[3]
	pl := n1 * n2
	for i3 := 1; i3 < n3-1; i3++ {
		for i2 := 1; i2 < n2-1; i2++ {
			o := i2*n1 + i3*pl
			u0 := u[o : o+n1]
			um := u[o-n1:][:len(u0)]
			up := u[o+n1:][:len(u0)]
			ud := u[o-pl:][:len(u0)]
			uu := u[o+pl:][:len(u0)]
			umd := u[o-n1-pl:][:len(u0)]
			upd := u[o+n1-pl:][:len(u0)]
			umu := u[o-n1+pl:][:len(u0)]
			upu := u[o+n1+pl:][:len(u0)]
			v0 := v[o:][:len(u0)]
			r0 := r[o:][:len(u0)]
			// u1, u2 at i1-1 and i1
			u1a := um[0] + up[0] + ud[0] + uu[0]
			u2a := umd[0] + upd[0] + umu[0] + upu[0]
			u1b := um[1] + up[1] + ud[1] + uu[1]
			u2b := umd[1] + upd[1] + umu[1] + upu[1]
			for i1 := 1; i1 < len(u0)-1; i1++ {
				u1c := um[i1+1] + up[i1+1] + ud[i1+1] + uu[i1+1]
				u2c := umd[i1+1] + upd[i1+1] + umu[i1+1] + upu[i1+1]
				r0[i1] = v0[i1] - a0*u0[i1] - a2*(u2b+u1a+u1c) - a3*(u2a+u2c)
				u1a, u1b = u1b, u1c
				u2a, u2b = u2b, u2c
			}
		}
	}
}

// psinv applies the smoother u = u + C r on level k and refreshes u's
// ghosts (sliding sums as in resid).
func (s *mgState) psinv(k int) error {
	r, n1, n2, n3 := s.level(s.r, k)
	u, _, _, _ := s.level(s.u, k)
	c0, c1, c2 := s.q[0], s.q[1], s.q[2]
	pl := n1 * n2
	for i3 := 1; i3 < n3-1; i3++ {
		for i2 := 1; i2 < n2-1; i2++ {
			o := i2*n1 + i3*pl
			r0 := r[o : o+n1]
			rm := r[o-n1:][:len(r0)]
			rp := r[o+n1:][:len(r0)]
			rd := r[o-pl:][:len(r0)]
			ru := r[o+pl:][:len(r0)]
			rmd := r[o-n1-pl:][:len(r0)]
			rpd := r[o+n1-pl:][:len(r0)]
			rmu := r[o-n1+pl:][:len(r0)]
			rpu := r[o+n1+pl:][:len(r0)]
			u0 := u[o:][:len(r0)]
			r1a := rm[0] + rp[0] + rd[0] + ru[0]
			r1b := rm[1] + rp[1] + rd[1] + ru[1]
			r2b := rmd[1] + rpd[1] + rmu[1] + rpu[1]
			r0a, r0b := r0[0], r0[1]
			for i1 := 1; i1 < len(r0)-1; i1++ {
				r0c := r0[i1+1]
				r1c := rm[i1+1] + rp[i1+1] + rd[i1+1] + ru[i1+1]
				r2c := rmd[i1+1] + rpd[i1+1] + rmu[i1+1] + rpu[i1+1]
				u0[i1] = u0[i1] + c0*r0b + c1*(r0a+r0c+r1b) + c2*(r2b+r1a+r1c)
				r0a, r0b = r0b, r0c
				r1a, r1b = r1b, r1c
				r2b = r2c
			}
		}
	}
	return s.comm3(u, n1, n2, n3, k)
}

// rprj3 restricts the residual of level k to level k-1 (full weighting)
// and refreshes the coarse ghosts.
func (s *mgState) rprj3(k int) error {
	r, m1k, m2k, m3k := s.level(s.r, k)
	sv, m1j, m2j, m3j := s.level(s.r, k-1)
	// 0-based fine index of coarse point j is 2j + o (NPB: 2j-d, 1-based)
	o1, o2, o3 := 0, 0, 0
	if m1k == 3 {
		o1 = -1
	}
	if m2k == 3 {
		o2 = -1
	}
	if m3k == 3 {
		o3 = -1
	}
	x1, y1 := s.x1[:m1k], s.y1[:m1k]
	pl := m1k * m2k
	for j3 := 1; j3 < m3j-1; j3++ {
		i3 := 2*j3 + o3
		for j2 := 1; j2 < m2j-1; j2++ {
			i2 := 2*j2 + o2
			o := i2*m1k + i3*pl
			r0 := r[o : o+m1k]
			rm := r[o-m1k:][:len(r0)]
			rp := r[o+m1k:][:len(r0)]
			rd := r[o-pl:][:len(r0)]
			ru := r[o+pl:][:len(r0)]
			rmd := r[o-m1k-pl:][:len(r0)]
			rmu := r[o-m1k+pl:][:len(r0)]
			rpd := r[o+m1k-pl:][:len(r0)]
			rpu := r[o+m1k+pl:][:len(r0)]
			for j1 := 1; j1 < m1j; j1++ {
				i := 2*j1 + o1 - 1
				x1[i] = rm[i] + rp[i] + rd[i] + ru[i]
				y1[i] = rmd[i] + rmu[i] + rpd[i] + rpu[i]
			}
			so := j2*m1j + j3*m1j*m2j
			srow := sv[so : so+m1j]
			for j1 := 1; j1 < len(srow)-1; j1++ {
				i1 := 2*j1 + o1
				y2 := rmd[i1] + rmu[i1] + rpd[i1] + rpu[i1]
				x2 := rm[i1] + rp[i1] + rd[i1] + ru[i1]
				srow[j1] = 0.5*r0[i1] + 0.25*(r0[i1-1]+r0[i1+1]+x2) +
					0.125*(x1[i1-1]+x1[i1+1]+y2) + 0.0625*(y1[i1-1]+y1[i1+1])
			}
		}
	}
	return s.comm3(sv, m1j, m2j, m3j, k-1)
}

// interp adds the trilinear interpolation of level k-1's u to level k's u
// and hands dead ranks their ghost planes (comm3_ex).
func (s *mgState) interp(k int) error {
	z, mm1, mm2, mm3 := s.level(s.u, k-1)
	u, n1, n2, n3 := s.level(s.u, k)
	if n1 != 3 && n2 != 3 && n3 != 3 {
		z1, z2, z3 := s.z1[:mm1], s.z2[:mm1], s.z3[:mm1]
		zp, up := mm1*mm2, n1*n2
		for i3 := 0; i3 < mm3-1; i3++ {
			for i2 := 0; i2 < mm2-1; i2++ {
				o := i2*mm1 + i3*zp
				z00 := z[o : o+mm1]
				z10 := z[o+mm1:][:len(z00)]    // (i2+1, i3)
				z01 := z[o+zp:][:len(z00)]     // (i2, i3+1)
				z11 := z[o+mm1+zp:][:len(z00)] // (i2+1, i3+1)
				z1, z2, z3 := z1[:len(z00)], z2[:len(z00)], z3[:len(z00)]
				for i1 := range z00 {
					z1[i1] = z10[i1] + z00[i1]
					z2[i1] = z01[i1] + z00[i1]
					z3[i1] = z11[i1] + z01[i1] + z1[i1]
				}
				// fine rows (2*i2 + b2, 2*i3 + b3)
				f := 2*i2*n1 + 2*i3*up
				u00 := u[f : f+n1]
				u10 := u[f+n1:][:len(u00)]
				u01 := u[f+up:][:len(u00)]
				u11 := u[f+n1+up:][:len(u00)]
				for i1 := 0; i1 < len(z00)-1; i1++ {
					u00[2*i1] += z00[i1]
					u00[2*i1+1] += 0.5 * (z00[i1+1] + z00[i1])
				}
				for i1 := 0; i1 < len(z00)-1; i1++ {
					u10[2*i1] += 0.5 * z1[i1]
					u10[2*i1+1] += 0.25 * (z1[i1] + z1[i1+1])
				}
				for i1 := 0; i1 < len(z00)-1; i1++ {
					u01[2*i1] += 0.5 * z2[i1]
					u01[2*i1+1] += 0.25 * (z2[i1] + z2[i1+1])
				}
				for i1 := 0; i1 < len(z00)-1; i1++ {
					u11[2*i1] += 0.25 * z3[i1]
					u11[2*i1+1] += 0.125 * (z3[i1] + z3[i1+1])
				}
			}
		}
	} else {
		s.interpThin(z, mm1, mm2, mm3, u, n1, n2, n3)
	}
	return s.comm3Ex(u, n1, n2, n3, k)
}

// interpThin is interp's branch for a fine level with a single point along
// some axis (only on coarse levels of runs with dead ranks). It is NPB's
// code with 1-based indices.
func (s *mgState) interpThin(z []float64, mm1, mm2, mm3 int, u []float64, n1, n2, n3 int) {
	Z := func(i1, i2, i3 int) float64 { return z[(i1-1)+mm1*((i2-1)+mm2*(i3-1))] }
	U := func(i1, i2, i3 int) *float64 { return &u[(i1-1)+n1*((i2-1)+n2*(i3-1))] }
	dt := func(n int) (int, int) {
		if n == 3 {
			return 2, 1
		}
		return 1, 0
	}
	d1, t1 := dt(n1)
	d2, t2 := dt(n2)
	d3, t3 := dt(n3)
	for i3 := d3; i3 <= mm3-1; i3++ {
		for i2 := d2; i2 <= mm2-1; i2++ {
			for i1 := d1; i1 <= mm1-1; i1++ {
				*U(2*i1-d1, 2*i2-d2, 2*i3-d3) += Z(i1, i2, i3)
			}
			for i1 := 1; i1 <= mm1-1; i1++ {
				*U(2*i1-t1, 2*i2-d2, 2*i3-d3) += 0.5 * (Z(i1+1, i2, i3) + Z(i1, i2, i3))
			}
		}
		for i2 := 1; i2 <= mm2-1; i2++ {
			for i1 := d1; i1 <= mm1-1; i1++ {
				*U(2*i1-d1, 2*i2-t2, 2*i3-d3) += 0.5 * (Z(i1, i2+1, i3) + Z(i1, i2, i3))
			}
			for i1 := 1; i1 <= mm1-1; i1++ {
				*U(2*i1-t1, 2*i2-t2, 2*i3-d3) += 0.25 * (Z(i1+1, i2+1, i3) + Z(i1+1, i2, i3) +
					Z(i1, i2+1, i3) + Z(i1, i2, i3))
			}
		}
	}
	for i3 := 1; i3 <= mm3-1; i3++ {
		for i2 := d2; i2 <= mm2-1; i2++ {
			for i1 := d1; i1 <= mm1-1; i1++ {
				*U(2*i1-d1, 2*i2-d2, 2*i3-t3) += 0.5 * (Z(i1, i2, i3+1) + Z(i1, i2, i3))
			}
			for i1 := 1; i1 <= mm1-1; i1++ {
				*U(2*i1-t1, 2*i2-d2, 2*i3-t3) += 0.25 * (Z(i1+1, i2, i3+1) + Z(i1, i2, i3+1) +
					Z(i1+1, i2, i3) + Z(i1, i2, i3))
			}
		}
		for i2 := 1; i2 <= mm2-1; i2++ {
			for i1 := d1; i1 <= mm1-1; i1++ {
				*U(2*i1-d1, 2*i2-t2, 2*i3-t3) += 0.25 * (Z(i1, i2+1, i3+1) + Z(i1, i2, i3+1) +
					Z(i1, i2+1, i3) + Z(i1, i2, i3))
			}
			for i1 := 1; i1 <= mm1-1; i1++ {
				*U(2*i1-t1, 2*i2-t2, 2*i3-t3) += 0.125 * (Z(i1+1, i2+1, i3+1) + Z(i1+1, i2, i3+1) +
					Z(i1, i2+1, i3+1) + Z(i1, i2, i3+1) +
					Z(i1+1, i2+1, i3) + Z(i1+1, i2, i3) +
					Z(i1, i2+1, i3) + Z(i1, i2, i3))
			}
		}
	}
}

// norm2u3 returns the L2 norm (divided by the global point count) and the
// max norm of the interior of r on level k.
func (s *mgState) norm2u3(r []float64, k int) (float64, float64, error) {
	n1, n2, n3 := s.m[1][k], s.m[2][k], s.m[3][k]
	sum, rnmu := 0.0, 0.0
	for i3 := 1; i3 < n3-1; i3++ {
		for i2 := 1; i2 < n2-1; i2++ {
			o := i2*n1 + i3*n1*n2
			for _, x := range r[o+1 : o+n1-1] {
				sum += x * x
				// NPB's test, a well-predicted branch; the builtin max
				// would put a long NaN-safe sequence on the loop chain.
				if a := math.Abs(x); a > rnmu {
					rnmu = a
				}
			}
		}
	}
	s.red[0] = rnmu
	if err := s.c.AllreduceFloat64(s.red, s.red, Max); err != nil {
		return 0, 0, err
	}
	rnmu = s.red[0]
	s.red[0] = sum
	if err := s.c.AllreduceFloat64(s.red, s.red, Sum); err != nil {
		return 0, 0, err
	}
	dn := float64(s.ng[1][k]) * float64(s.ng[2][k]) * float64(s.ng[3][k])
	return math.Sqrt(s.red[0] / dn), rnmu, nil
}

// Ghost exchange. A plane of the local block: axis 1 holds (i2, i3) for
// interior i2, i3; axis 2 (i1, i3) for all i1 and interior i3; axis 3
// (i1, i2) for all i1, i2, as in NPB's give3/take3.

// pack copies plane i along axis into buf and returns the filled part;
// full selects all points of the other axes (comm3_ex) instead of the
// ranges above.
func pack(buf, u []float64, axis, i, n1, n2, n3 int, full bool) []float64 {
	lo := 1
	if full {
		lo = 0
	}
	k := 0
	switch axis {
	case 1:
		for i3 := lo; i3 < n3-lo; i3++ {
			for i2 := lo; i2 < n2-lo; i2++ {
				buf[k] = u[i+n1*(i2+n2*i3)]
				k++
			}
		}
	case 2:
		for i3 := lo; i3 < n3-lo; i3++ {
			o := n1 * (i + n2*i3)
			k += copy(buf[k:], u[o:o+n1])
		}
	case 3:
		o := n1 * n2 * i
		k += copy(buf, u[o:o+n1*n2])
	}
	return buf[:k]
}

// unpack copies buf into plane i along axis.
func unpack(buf, u []float64, axis, i, n1, n2, n3 int, full bool) {
	lo := 1
	if full {
		lo = 0
	}
	k := 0
	switch axis {
	case 1:
		for i3 := lo; i3 < n3-lo; i3++ {
			for i2 := lo; i2 < n2-lo; i2++ {
				u[i+n1*(i2+n2*i3)] = buf[k]
				k++
			}
		}
	case 2:
		for i3 := lo; i3 < n3-lo; i3++ {
			o := n1 * (i + n2*i3)
			k += copy(u[o:o+n1], buf[k:])
		}
	case 3:
		o := n1 * n2 * i
		copy(u[o:o+n1*n2], buf)
	}
}

// planeLen is the number of elements of a plane along axis.
func planeLen(axis, n1, n2, n3 int, full bool) int {
	g := 2
	if full {
		g = 0
	}
	switch axis {
	case 1:
		return (n2 - g) * (n3 - g)
	case 2:
		return n1 * (n3 - g)
	}
	return n1 * n2
}

// mgTag is NPB's msg_type(axis, dir).
func mgTag(axis, dir int) int { return 100 * (dir + 2 + 10*axis) }

// comm3 refreshes the ghost layer of u on level k: the periodic copy when
// this rank is its own neighbour, else per axis two Sendrecvs (the top
// interior plane goes up and the bottom one comes in from below, then the
// reverse), or one carrying both planes when the neighbour above is also
// the one below. Dead ranks zero u.
func (s *mgState) comm3(u []float64, n1, n2, n3, k int) error {
	if s.dead[k] {
		clear(u[:n1*n2*n3])
		return nil
	}
	ns := [4]int{0, n1, n2, n3}
	for axis := 1; axis <= 3; axis++ {
		n := ns[axis]
		up, down := s.nbr[axis][1][k], s.nbr[axis][0][k]
		if up == s.me && down == s.me {
			s.periodic(u, axis, n1, n2, n3)
			continue
		}
		l := planeLen(axis, n1, n2, n3, false)
		if up == down && up != ProcNull {
			// Both neighbours are the same rank (two ranks along the
			// axis): both planes in one message each way, one round
			// trip instead of two. Plane 1 does not depend on ghost
			// plane 0, so the result is the same.
			send := pack(s.sbuf, u, axis, n-2, n1, n2, n3, false)
			send = s.sbuf[:len(send)+len(pack(s.sbuf[len(send):], u, axis, 1, n1, n2, n3, false))]
			if err := s.c.SendrecvFloat64(send, up, mgTag(axis, 1), s.rbuf[:2*l], up, mgTag(axis, 1)); err != nil {
				return err
			}
			unpack(s.rbuf[:l], u, axis, 0, n1, n2, n3, false)
			unpack(s.rbuf[l:2*l], u, axis, n-1, n1, n2, n3, false)
			continue
		}
		send := pack(s.sbuf, u, axis, n-2, n1, n2, n3, false)
		if err := s.c.SendrecvFloat64(send, up, mgTag(axis, 1), s.rbuf[:l], down, mgTag(axis, 1)); err != nil {
			return err
		}
		unpack(s.rbuf[:l], u, axis, 0, n1, n2, n3, false)
		send = pack(s.sbuf, u, axis, 1, n1, n2, n3, false)
		if err := s.c.SendrecvFloat64(send, down, mgTag(axis, -1), s.rbuf[:l], up, mgTag(axis, -1)); err != nil {
			return err
		}
		unpack(s.rbuf[:l], u, axis, n-1, n1, n2, n3, false)
	}
	return nil
}

// periodic is comm1p: the ghost planes along axis copied from the opposite
// interior planes of the same block.
func (s *mgState) periodic(u []float64, axis, n1, n2, n3 int) {
	switch axis {
	case 1:
		for i3 := 1; i3 < n3-1; i3++ {
			for i2 := 1; i2 < n2-1; i2++ {
				o := n1 * (i2 + n2*i3)
				u[o] = u[o+n1-2]
				u[o+n1-1] = u[o+1]
			}
		}
	case 2:
		for i3 := 1; i3 < n3-1; i3++ {
			o := n1 * n2 * i3
			copy(u[o:o+n1], u[o+n1*(n2-2):])
			copy(u[o+n1*(n2-1):o+n1*n2], u[o+n1:])
		}
	case 3:
		pl := n1 * n2
		copy(u[:pl], u[pl*(n3-2):])
		copy(u[pl*(n3-1):pl*n3], u[pl:])
	}
}

// comm3Ex is comm3_ex: after interpolation, ranks that were dead on the
// coarser level (takers) receive their ghost planes from live neighbours
// (givers): two planes from below, one from above. Givers send up first,
// takers receive from below first, so the exchange cannot deadlock even if
// sends are synchronous.
func (s *mgState) comm3Ex(u []float64, n1, n2, n3, k int) error {
	if s.np == 1 {
		return nil
	}
	ns := [4]int{0, n1, n2, n3}
	for axis := 1; axis <= 3; axis++ {
		n := ns[axis]
		up, down := s.nbr[axis][1][k], s.nbr[axis][0][k]
		l := planeLen(axis, n1, n2, n3, true)
		if s.takeEx[axis][k] {
			// planes 0 and 1 from below, in one message
			if err := s.c.SendrecvFloat64(nil, ProcNull, 0, s.rbuf[:2*l], down, mgTag(axis, 1)); err != nil {
				return err
			}
			s.unpack2(s.rbuf[:2*l], u, axis, 0, n1, n2, n3)
			if err := s.c.SendrecvFloat64(nil, ProcNull, 0, s.rbuf[:l], up, mgTag(axis, -1)); err != nil {
				return err
			}
			unpack(s.rbuf[:l], u, axis, n-1, n1, n2, n3, true)
		}
		if s.giveEx[axis][k] {
			send := s.pack2(s.sbuf, u, axis, n-2, n1, n2, n3)
			if err := s.c.SendrecvFloat64(send, up, mgTag(axis, 1), nil, ProcNull, 0); err != nil {
				return err
			}
			send = pack(s.sbuf, u, axis, 1, n1, n2, n3, true)
			if err := s.c.SendrecvFloat64(send, down, mgTag(axis, -1), nil, ProcNull, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// pack2 packs the two full planes i and i+1 along axis in give3_ex's
// order (the axis index varies fastest for axis 1, per line for axis 2,
// per plane for axis 3).
func (s *mgState) pack2(buf, u []float64, axis, i, n1, n2, n3 int) []float64 {
	k := 0
	switch axis {
	case 1:
		for i3 := 0; i3 < n3; i3++ {
			for i2 := 0; i2 < n2; i2++ {
				o := n1 * (i2 + n2*i3)
				buf[k], buf[k+1] = u[o+i], u[o+i+1]
				k += 2
			}
		}
	case 2:
		for i3 := 0; i3 < n3; i3++ {
			o := n1 * (i + n2*i3)
			k += copy(buf[k:], u[o:o+2*n1])
		}
	case 3:
		o := n1 * n2 * i
		k += copy(buf, u[o:o+2*n1*n2])
	}
	return buf[:k]
}

// unpack2 is the inverse of pack2 into planes i and i+1.
func (s *mgState) unpack2(buf, u []float64, axis, i, n1, n2, n3 int) {
	k := 0
	switch axis {
	case 1:
		for i3 := 0; i3 < n3; i3++ {
			for i2 := 0; i2 < n2; i2++ {
				o := n1 * (i2 + n2*i3)
				u[o+i], u[o+i+1] = buf[k], buf[k+1]
				k += 2
			}
		}
	case 2:
		for i3 := 0; i3 < n3; i3++ {
			o := n1 * (i + n2*i3)
			k += copy(u[o:o+2*n1], buf[k:])
		}
	case 3:
		o := n1 * n2 * i
		copy(u[o:o+2*n1*n2], buf)
	}
}

// zran3 is NPB's zran3: v gets +1 at the ten largest and -1 at the ten
// smallest of the random numbers the points draw (point (i, j, k) of the
// global grid, 0-based, gets number 1 + i + nx*(j + ny*k) of the stream),
// and 0 elsewhere. Each rank keeps its ten best candidates of each kind;
// ten rounds of Allreduce (max, min) pick the global ones.
func (s *mgState) zran3() error {
	const a = uint64(Amult)
	z := s.v
	lt := s.lt
	n1, n2, n3 := s.m[1][lt], s.m[2][lt], s.m[3][lt]
	nx, ny := s.ng[1][lt], s.ng[2][lt]
	clear(z)
	a1 := PowMod46(a, uint64(nx))
	a2 := PowMod46(a, uint64(nx)*uint64(ny))
	is1, is2, is3 := s.is[1], s.is[2], s.is[3]
	ai := PowMod46(a, uint64(nx)*uint64(is2-2+ny*(is3-2))+uint64(is1-2))
	d1 := s.ie[1] - is1 + 1
	e2 := s.ie[2] - is2 + 2
	e3 := s.ie[3] - is3 + 2
	x0 := (ai * Seed) & mask46
	for i3 := 1; i3 < e3; i3++ {
		x1 := x0
		for i2 := 1; i2 < e2; i2++ {
			o := 1 + n1*(i2+n2*i3)
			vranlc(x1, a, z[o:o+d1])
			x1 = (a1 * x1) & mask46
		}
		x0 = (a2 * x0) & mask46
	}

	// Each rank's ten largest (ascending in hi) and ten smallest
	// (descending in lo), by NPB's insertion with bubble.
	const mm = mgRanDim
	var hiV, loV [mm]float64
	var hiJ, loJ [mm]int
	for i := range loV {
		loV[i] = 1
	}
	for i3 := 1; i3 < n3-1; i3++ {
		for i2 := 1; i2 < n2-1; i2++ {
			for i1 := 1; i1 < n1-1; i1++ {
				o := i1 + n1*(i2+n2*i3)
				x := z[o]
				if x > hiV[0] {
					hiV[0], hiJ[0] = x, o
					for i := 0; i < mm-1 && hiV[i] > hiV[i+1]; i++ {
						hiV[i], hiV[i+1] = hiV[i+1], hiV[i]
						hiJ[i], hiJ[i+1] = hiJ[i+1], hiJ[i]
					}
				}
				if x < loV[0] {
					loV[0], loJ[0] = x, o
					for i := 0; i < mm-1 && loV[i] < loV[i+1]; i++ {
						loV[i], loV[i+1] = loV[i+1], loV[i]
						loJ[i], loJ[i+1] = loJ[i+1], loJ[i]
					}
				}
			}
		}
	}

	// Which are globally best? In each round the owner of the global
	// maximum (minimum) of the remaining candidates takes one.
	// Unfilled slots (a rank with fewer than ten points) hold 0 among the
	// maxima and 1 among the minima, so they never win.
	ih, il := mm-1, mm-1
	for i := mm - 1; i >= 0; i-- {
		s.red[0] = hiV[max(ih, 0)]
		if err := s.c.AllreduceFloat64(s.red, s.red, Max); err != nil {
			return err
		}
		if ih >= 0 && s.red[0] == hiV[ih] {
			ih--
		}
		s.red[0] = loV[max(il, 0)]
		if err := s.c.AllreduceFloat64(s.red, s.red, Min); err != nil {
			return err
		}
		if il >= 0 && s.red[0] == loV[il] {
			il--
		}
	}
	clear(z)
	for i := mm - 1; i > il; i-- {
		z[loJ[i]] = -1
	}
	for i := mm - 1; i > ih; i-- {
		z[hiJ[i]] = 1
	}
	return s.comm3(z, n1, n2, n3, lt)
}
