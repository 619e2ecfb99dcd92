package npb

import (
	"fmt"
	"math"
	"time"
)

// CG (Conjugate Gradient), NPB3.4-MPI CG/cg.f: the smallest eigenvalue of a
// random sparse symmetric matrix by inverse power iteration, each step
// solving a linear system with 25 unpreconditioned CG iterations.
//
// The decomposition is NPB's: np = 2^k ranks form an nprows x npcols grid
// (npcols = nprows or 2*nprows); rank (row, col) holds the block of rows
// [firstrow, lastrow] and columns [firstcol, lastcol], and a matrix-vector
// product is a local product, a recursive-halving sum across the row of the
// grid and an exchange with the transpose rank, all as pairwise Sendrecvs.
// Every rank draws the whole random matrix and keeps its block, so the
// matrix does not depend on np.

func cgCheckRanks(class byte, n int) error {
	p := cgClasses[class]
	if !isPow2(n) || n > p.na {
		return &RanksError{"CG", class, n, fmt.Sprintf("a power of two from 1 to %d", 1<<ilog2(p.na+1)>>1)}
	}
	return nil
}

// RunCG runs CG class S, W, A, B or C on a power-of-two number of ranks.
func RunCG(c Comm, class byte) (Result, error) {
	if err := checkClass("CG", class); err != nil {
		return Result{}, err
	}
	if err := cgCheckRanks(class, c.Size()); err != nil {
		return Result{}, err
	}
	s := newCGState(c, class)
	p := s.p

	// One untimed iteration to touch code and data, then start again
	// from x = (1, ..., 1).
	for i := range s.x {
		s.x[i] = 1
	}
	if _, err := s.iterate(); err != nil {
		return Result{}, err
	}
	for i := range s.x {
		s.x[i] = 1
	}

	if err := c.Barrier(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	var zeta float64
	for it := 1; it <= p.niter; it++ {
		xz, err := s.iterate()
		if err != nil {
			return Result{}, err
		}
		zeta = p.shift + 1/xz
	}
	tm, err := maxTime(c, time.Since(start).Seconds())
	if err != nil {
		return Result{}, err
	}

	nz := float64(p.nonzer) * float64(p.nonzer+1)
	res := Result{
		Kernel: "CG", Class: class, Size: [3]int{p.na}, Iterations: p.niter, Ranks: c.Size(),
		Time: tm, OpType: "floating point",
		Mops:   2 * float64(p.niter) * float64(p.na) * (3 + nz + 25*(5+nz) + 3) / tm / 1e6,
		Checks: []Check{relCheck("zeta", complex(zeta, 0), complex(p.zeta, 0), cgEps)},
	}
	res.Verified = allOK(res.Checks)
	return res, nil
}

type cgState struct {
	c        Comm
	p        cgParams
	me       int
	npcols   int
	nprows   int
	firstrow int // NPB's 1-based inclusive bounds
	lastrow  int
	firstcol int
	lastcol  int
	nrows    int
	ncols    int

	sendStart, sendLen int // 1-based, as NPB
	exchProc           int
	exchRecvLength     int
	l2npcols           int
	// reduce schedule, indexed 1..l2npcols as in NPB
	reduceExchProc, reduceSendStarts, reduceSendLengths []int
	reduceRecvStarts, reduceRecvLengths                 []int

	rowstr []int
	colidx []int32 // local column indices, 0-based
	a      []float64

	x, z, p0, q, r, w []float64
	sc, rc            []float64 // scalar exchange buffers
}

func newCGState(c Comm, class byte) *cgState {
	p := cgClasses[class]
	s := &cgState{c: c, p: p, me: c.Rank()}
	s.setupProcInfo(c.Size())
	s.setupSubmatrixInfo()
	s.rowstr, s.colidx, s.a = cgMakea(p.na, p.nonzer, p.shift, s.firstrow, s.lastrow, s.firstcol, s.lastcol)
	for k := range s.colidx {
		s.colidx[k] -= int32(s.firstcol)
	}
	n := max(s.nrows, s.ncols) + 2
	s.x, s.z, s.p0 = make([]float64, n), make([]float64, n), make([]float64, n)
	s.q, s.r, s.w = make([]float64, n), make([]float64, n), make([]float64, n)
	s.sc, s.rc = make([]float64, 2), make([]float64, 2)
	return s
}

// setupProcInfo: an npcols x nprows grid, npcols = nprows or 2*nprows.
func (s *cgState) setupProcInfo(np int) {
	logp := ilog2(np)
	rows := logp / 2
	cols := logp - rows
	s.npcols, s.nprows = 1<<cols, 1<<rows
}

// setupSubmatrixInfo is NPB's setup_submatrix_info.
func (s *cgState) setupSubmatrixInfo() {
	na, npcols, nprows, me := s.p.na, s.npcols, s.nprows, s.me
	procRow := me / npcols
	procCol := me - procRow*npcols
	if na/npcols*npcols == na {
		colSize := na / npcols
		s.firstcol = procCol*colSize + 1
		s.lastcol = s.firstcol - 1 + colSize
		rowSize := na / nprows
		s.firstrow = procRow*rowSize + 1
		s.lastrow = s.firstrow - 1 + rowSize
	} else {
		if procRow < na-na/nprows*nprows {
			rowSize := na/nprows + 1
			s.firstrow = procRow*rowSize + 1
			s.lastrow = s.firstrow - 1 + rowSize
		} else {
			rowSize := na / nprows
			s.firstrow = (na-na/nprows*nprows)*(rowSize+1) + (procRow-(na-na/nprows*nprows))*rowSize + 1
			s.lastrow = s.firstrow - 1 + rowSize
		}
		if npcols == nprows {
			if procCol < na-na/npcols*npcols {
				colSize := na/npcols + 1
				s.firstcol = procCol*colSize + 1
				s.lastcol = s.firstcol - 1 + colSize
			} else {
				colSize := na / npcols
				s.firstcol = (na-na/npcols*npcols)*(colSize+1) + (procCol-(na-na/npcols*npcols))*colSize + 1
				s.lastcol = s.firstcol - 1 + colSize
			}
		} else {
			h := npcols / 2
			var colSize int
			if procCol/2 < na-na/h*h {
				colSize = na/h + 1
				s.firstcol = (procCol/2)*colSize + 1
				s.lastcol = s.firstcol - 1 + colSize
			} else {
				colSize = na / h
				s.firstcol = (na-na/h*h)*(colSize+1) + (procCol/2-(na-na/h*h))*colSize + 1
				s.lastcol = s.firstcol - 1 + colSize
			}
			if me%2 == 0 {
				s.lastcol = s.firstcol - 1 + (colSize-1)/2 + 1
			} else {
				s.firstcol = s.firstcol + (colSize-1)/2 + 1
				s.lastcol = s.firstcol - 1 + colSize/2
			}
		}
	}
	s.nrows = s.lastrow - s.firstrow + 1
	s.ncols = s.lastcol - s.firstcol + 1

	if npcols == nprows {
		s.sendStart, s.sendLen = 1, s.nrows
	} else if me%2 == 0 {
		s.sendStart, s.sendLen = 1, (1+s.nrows)/2
	} else {
		s.sendStart, s.sendLen = (1+s.nrows)/2+1, s.nrows/2
	}

	// Transpose exchange processor.
	if npcols == nprows {
		s.exchProc = (me%nprows)*nprows + me/nprows
	} else {
		s.exchProc = 2*((me/2)%nprows*nprows+me/2/nprows) + me%2
	}

	for i := npcols / 2; i > 0; i /= 2 {
		s.l2npcols++
	}
	l := s.l2npcols
	s.reduceExchProc = make([]int, l+1)
	s.reduceSendStarts, s.reduceSendLengths = make([]int, l+1), make([]int, l+1)
	s.reduceRecvStarts, s.reduceRecvLengths = make([]int, l+1), make([]int, l+1)
	div := npcols
	for i := 1; i <= l; i++ {
		j := (procCol+div/2)%div + procCol/div*div
		s.reduceExchProc[i] = procRow*npcols + j
		div /= 2
	}
	for i := l; i >= 1; i-- {
		if nprows == npcols {
			s.reduceSendStarts[i] = s.sendStart
			s.reduceSendLengths[i] = s.sendLen
			s.reduceRecvLengths[i] = s.nrows
		} else {
			s.reduceRecvLengths[i] = s.sendLen
			if i == l {
				s.reduceSendLengths[i] = s.nrows - s.sendLen
				if me/2*2 == me {
					s.reduceSendStarts[i] = s.sendStart + s.sendLen
				} else {
					s.reduceSendStarts[i] = 1
				}
			} else {
				s.reduceSendLengths[i] = s.sendLen
				s.reduceSendStarts[i] = s.sendStart
			}
		}
		s.reduceRecvStarts[i] = s.sendStart
	}
	s.exchRecvLength = s.ncols
}

// iterate runs conj_grad and the normalisation of one inverse power step;
// it returns x.z, from which zeta = shift + 1/(x.z).
func (s *cgState) iterate() (float64, error) {
	if _, err := s.conjGrad(); err != nil {
		return 0, err
	}
	x, z := s.x[:s.ncols], s.z[:s.ncols]
	var xz, zz float64
	for j, zj := range z {
		xz += x[j] * zj
		zz += zj * zj
	}
	s.sc[0], s.sc[1] = xz, zz
	if err := s.sumReduce(s.sc[:2]); err != nil {
		return 0, err
	}
	xz, zz = s.sc[0], s.sc[1]
	nrm := 1 / math.Sqrt(zz)
	for j, zj := range z {
		x[j] = nrm * zj
	}
	return xz, nil
}

// sumReduce sums v over the ranks of this grid row by recursive doubling
// (NPB's exchange with reduce_exch_proc), leaving the sum on all of them.
func (s *cgState) sumReduce(v []float64) error {
	for i := 1; i <= s.l2npcols; i++ {
		rc := s.rc[:len(v)]
		if err := s.c.SendrecvFloat64(v, s.reduceExchProc[i], i, rc, s.reduceExchProc[i], i); err != nil {
			return err
		}
		for k := range v {
			v[k] += rc[k]
		}
	}
	return nil
}

// matvec computes dst = A.src for the block's columns: the local product,
// summed across the grid row and exchanged with the transpose rank.
func (s *cgState) matvec(src, dst []float64) error {
	if s.l2npcols == 0 {
		spmv(s.rowstr, s.colidx, s.a, src, dst[:s.nrows])
		return nil
	}
	w := s.w
	spmv(s.rowstr, s.colidx, s.a, src, w[:s.nrows])
	for i := s.l2npcols; i >= 1; i-- {
		ss, sl := s.reduceSendStarts[i]-1, s.reduceSendLengths[i]
		rs, rl := s.reduceRecvStarts[i]-1, s.reduceRecvLengths[i]
		if err := s.c.SendrecvFloat64(w[ss:ss+sl], s.reduceExchProc[i], i, dst[rs:rs+rl], s.reduceExchProc[i], i); err != nil {
			return err
		}
		st := s.sendStart - 1
		ws, ds := w[st:st+rl], dst[st:st+rl]
		for j := range ws {
			ws[j] += ds[j]
		}
	}
	st := s.sendStart - 1
	if s.exchProc == s.me {
		copy(dst[:s.exchRecvLength], w[st:st+s.sendLen])
		return nil
	}
	return s.c.SendrecvFloat64(w[st:st+s.sendLen], s.exchProc, 1, dst[:s.exchRecvLength], s.exchProc, 1)
}

// spmv is the local sparse product w = A.p over the block's rows.
func spmv(rowstr []int, colidx []int32, a []float64, p, w []float64) {
	rowstr = rowstr[:len(w)+1]
	for j := range w {
		lo, hi := rowstr[j], rowstr[j+1]
		ar := a[lo:hi]
		cr := colidx[lo:hi]
		cr = cr[:len(ar)]
		sum := 0.0
		for k, v := range ar {
			sum += v * p[cr[k]]
		}
		w[j] = sum
	}
}

// conjGrad is NPB's conj_grad: 25 CG iterations on A z = x from z = 0,
// then the explicit residual norm ||x - A z||.
func (s *cgState) conjGrad() (float64, error) {
	n := s.ncols
	x, z, p, q, r := s.x[:n], s.z[:n], s.p0[:n], s.q[:n], s.r[:n]
	clear(s.q)
	clear(s.z)
	clear(s.w)
	copy(s.r, s.x)
	copy(s.p0, s.x)

	rho := 0.0
	for _, v := range r {
		rho += v * v
	}
	s.sc[0] = rho
	if err := s.sumReduce(s.sc[:1]); err != nil {
		return 0, err
	}
	rho = s.sc[0]

	for cgit := 1; cgit <= cgItMax; cgit++ {
		if err := s.matvec(s.p0, s.q); err != nil {
			return 0, err
		}
		d := 0.0
		for j, pj := range p {
			d += pj * q[j]
		}
		s.sc[0] = d
		if err := s.sumReduce(s.sc[:1]); err != nil {
			return 0, err
		}
		d = s.sc[0]
		alpha := rho / d
		rho0 := rho
		sum := 0.0
		for j, pj := range p {
			z[j] += alpha * pj
			rj := r[j] - alpha*q[j]
			r[j] = rj
			sum += rj * rj
		}
		s.sc[0] = sum
		if err := s.sumReduce(s.sc[:1]); err != nil {
			return 0, err
		}
		rho = s.sc[0]
		beta := rho / rho0
		for j, rj := range r {
			p[j] = rj + beta*p[j]
		}
	}

	// r = A.z, then ||x - r||.
	if err := s.matvec(s.z, s.r); err != nil {
		return 0, err
	}
	sum := 0.0
	for j, xj := range x {
		d := xj - r[j]
		sum += d * d
	}
	s.sc[0] = sum
	if err := s.sumReduce(s.sc[:1]); err != nil {
		return 0, err
	}
	return math.Sqrt(s.sc[0]), nil
}

// cgMakea is NPB's makea + sparse for the block [firstrow, lastrow] x
// [firstcol, lastcol] (1-based): it draws the n random sparse vectors of
// the whole matrix (sprnvc, vecset), adds the outer products that fall in
// the block and the shifted diagonal, and sums duplicates in NPB's order.
// It returns CSR arrays with global 1-based column indices.
func cgMakea(n, nonzer int, shift float64, firstrow, lastrow, firstcol, lastcol int) ([]int, []int32, []float64) {
	const a = uint64(Amult)
	tran := (a * Seed) & mask46 // cg.f discards the first number (zeta = randlc)
	nn1 := 1
	for {
		nn1 *= 2
		if nn1 >= n {
			break
		}
	}

	// The sparse vectors of all n outer products (sprnvc + vecset).
	vofs := make([]int, n+1)
	vv := make([]float64, 0, n*(nonzer+1))
	iv := make([]int32, 0, n*(nonzer+1))
	mark := make([]bool, n+1)
	for iouter := 1; iouter <= n; iouter++ {
		start := len(vv)
		for nzv := 0; nzv < nonzer; {
			tran = (a * tran) & mask46
			vecelt := float64(tran) * r46
			tran = (a * tran) & mask46
			vecloc := float64(tran) * r46
			i := int(float64(nn1)*vecloc) + 1
			if i > n || mark[i] {
				continue
			}
			mark[i] = true
			vv = append(vv, vecelt)
			iv = append(iv, int32(i))
			nzv++
		}
		set := false
		for k := start; k < len(vv); k++ {
			mark[iv[k]] = false
			if int(iv[k]) == iouter {
				vv[k] = 0.5
				set = true
			}
		}
		if !set {
			vv = append(vv, 0.5)
			iv = append(iv, int32(iouter))
		}
		vofs[iouter] = len(vv)
	}

	inRows := func(i int32) bool { return int(i) >= firstrow && int(i) <= lastrow }
	inCols := func(i int32) bool { return int(i) >= firstcol && int(i) <= lastcol }
	nrows := lastrow - firstrow + 1

	// Count the elements of each row, then place them in NPB's order
	// (outer products in order, then the diagonal), which is the order a
	// stable bucket sort of NPB's element list by row gives.
	rowstr := make([]int, nrows+1)
	for iouter := 1; iouter <= n; iouter++ {
		vec := iv[vofs[iouter-1]:vofs[iouter]]
		nc := 0
		for _, j := range vec {
			if inCols(j) {
				nc++
			}
		}
		if nc == 0 {
			continue
		}
		for _, i := range vec {
			if inRows(i) {
				rowstr[int(i)-firstrow+1] += nc
			}
		}
	}
	for i := firstrow; i <= lastrow; i++ {
		if i >= firstcol && i <= lastcol {
			rowstr[i-firstrow+1]++
		}
	}
	for j := 1; j <= nrows; j++ {
		rowstr[j] += rowstr[j-1]
	}
	nnza := rowstr[nrows]
	colidx := make([]int32, nnza)
	val := make([]float64, nnza)
	pos := make([]int, nrows)
	copy(pos, rowstr[:nrows])

	ratio := math.Pow(cgRcond, 1/float64(n))
	size := 1.0
	for iouter := 1; iouter <= n; iouter++ {
		lo, hi := vofs[iouter-1], vofs[iouter]
		for ivelt := lo; ivelt < hi; ivelt++ {
			jcol := iv[ivelt]
			if !inCols(jcol) {
				continue
			}
			scale := size * vv[ivelt]
			for ivelt1 := lo; ivelt1 < hi; ivelt1++ {
				irow := iv[ivelt1]
				if !inRows(irow) {
					continue
				}
				k := pos[int(irow)-firstrow]
				pos[int(irow)-firstrow]++
				colidx[k] = jcol
				val[k] = vv[ivelt1] * scale
			}
		}
		size *= ratio
	}
	for i := firstrow; i <= lastrow; i++ {
		if i >= firstcol && i <= lastcol {
			k := pos[i-firstrow]
			pos[i-firstrow]++
			colidx[k] = int32(i)
			val[k] = cgRcond - shift
		}
	}

	// sparse: sum duplicates within each row, keeping the columns in the
	// order they first become nonzero and dropping exact zeros. In place:
	// the output never overtakes the input.
	x := make([]float64, n+1)
	nzloc := make([]int32, 0, n)
	nza := 0
	begin := 0
	for j := 0; j < nrows; j++ {
		end := rowstr[j+1]
		nzloc = nzloc[:0]
		for k := begin; k < end; k++ {
			i := colidx[k]
			x[i] += val[k]
			if !mark[i] && x[i] != 0 {
				mark[i] = true
				nzloc = append(nzloc, i)
			}
		}
		for _, i := range nzloc {
			mark[i] = false
			xi := x[i]
			x[i] = 0
			if xi != 0 {
				val[nza] = xi
				colidx[nza] = i
				nza++
			}
		}
		begin = end
		rowstr[j+1] = nza
	}
	return rowstr, colidx[:nza:nza], val[:nza:nza]
}
