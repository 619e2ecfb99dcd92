// Command lu is JIAJIA's (and SPLASH-2's) blocked LU factorisation on the
// DSM: an n×n matrix stored as contiguous b×b blocks, each block homed on
// the rank that updates it (a 2-D scatter of blocks over a grid of ranks,
// with shmem.Explicit), factored in place as A = L×U without pivoting (the
// matrix is diagonally dominant). Step K factors the diagonal block, then
// solves the blocks of row and column K against it, then updates the
// trailing blocks, with a barrier after each phase.
//
// Rank 0 then checks the result twice: it runs the same blocked
// factorisation sequentially and compares every element, which must be
// bit-identical (every element sees the same operations in the same order,
// done by the same functions); and for n ≤ -full (default 512) it
// multiplies L by U and compares with A, within 1e-12 relative to the
// largest element. Rank 0 prints the time of the factorisation and VERIFIED
// or FAILED; the job exits 0 only if verified.
//
//	jiarun -np 2 ./bin/lu -n 1024 -b 32
package main

import (
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/shmem"
)

func main() {
	n := flag.Int("n", 512, "the matrix is n×n")
	bs := flag.Int("b", 32, "block size: n must be a multiple of it")
	full := flag.Int("full", 512, "check L×U = A when n ≤ full")
	flag.Parse()
	jia.MustInit()
	pid, hosts := jia.Jiapid(), jia.Jiahosts()
	if *bs < 1 || *n < *bs || *n%*bs != 0 {
		jia.JiaError("lu: bad size n=%d b=%d: n must be a positive multiple of b", *n, *bs)
	}

	m := newMatrix(*n, *bs, hosts)
	for I := 0; I < m.nb; I++ {
		for J := 0; J < m.nb; J++ {
			if m.owner(I, J) == pid {
				initBlock(m.blk(I, J), I, J, *bs, *n)
			}
		}
	}
	jia.JiaBarrier()

	t0 := jia.JiaClock()
	factorize(m.nb, *bs, m.blk, func(I, J int) bool { return m.owner(I, J) == pid }, jia.JiaBarrier)
	elapsed := jia.JiaClock() - t0

	code := 0
	if pid == 0 {
		fmt.Printf("lu: n=%d b=%d ranks=%d time=%.3f s\n", *n, *bs, hosts, elapsed)
		if msg := verify(m, *n, *bs, *n <= *full); msg == "" {
			fmt.Println("lu: VERIFIED")
		} else {
			fmt.Println("lu: FAILED:", msg)
			code = 1
		}
	}
	check(jia.Finalize())
	os.Exit(code)
}

// elem is element (i, j) of the matrix before the factorisation: in
// [0, 1) off the diagonal, n more on it, so that no pivoting is needed.
func elem(i, j, n int) float64 {
	v := float64((i*13+j*7)%17) / 17
	if i == j {
		v += float64(n)
	}
	return v
}

// matrix is an n×n matrix in the DSM as nb×nb blocks of b×b elements, each
// block stored contiguously from a page boundary and homed on its owner.
type matrix struct {
	nb, b, stride int // stride: elements from one block to the next
	pr, pc        int // the ranks as a pr×pc grid
	a             []float64
}

func newMatrix(n, b, ranks int) matrix {
	m := matrix{nb: n / b, b: b}
	m.pr = int(math.Sqrt(float64(ranks)))
	for ranks%m.pr != 0 {
		m.pr--
	}
	m.pc = ranks / m.pr
	bytes := (b*b*8 + shmem.PageSize - 1) / shmem.PageSize * shmem.PageSize
	m.stride = bytes / 8
	homes := make([]int, 0, m.nb*m.nb)
	for I := 0; I < m.nb; I++ {
		for J := 0; J < m.nb; J++ {
			homes = append(homes, m.owner(I, J))
		}
	}
	r, err := jia.Alloc(m.nb*m.nb*bytes, shmem.Explicit(bytes/shmem.PageSize, homes...))
	check(err)
	m.a = shmem.Slice[float64](r)
	return m
}

// owner returns the rank that owns block (I, J).
func (m matrix) owner(I, J int) int { return I%m.pr*m.pc + J%m.pc }

// blk returns block (I, J), row-major.
func (m matrix) blk(I, J int) []float64 {
	off := (I*m.nb + J) * m.stride
	return m.a[off : off+m.b*m.b : off+m.b*m.b]
}

// initBlock fills block (I, J) with the matrix's starting values.
func initBlock(d []float64, I, J, b, n int) {
	for i := 0; i < b; i++ {
		for j := 0; j < b; j++ {
			d[i*b+j] = elem(I*b+i, J*b+j, n)
		}
	}
}

// factorize factors the nb×nb blocks of b×b elements that blk returns in
// place, doing the blocks for which mine is true, with barrier between
// phases.
func factorize(nb, b int, blk func(I, J int) []float64, mine func(I, J int) bool, barrier func()) {
	for K := 0; K < nb; K++ {
		d := blk(K, K)
		if mine(K, K) {
			factor(d, b)
		}
		barrier()
		for X := K + 1; X < nb; X++ {
			if mine(K, X) {
				lowerSolve(d, blk(K, X), b)
			}
			if mine(X, K) {
				upperSolve(d, blk(X, K), b)
			}
		}
		barrier()
		for I := K + 1; I < nb; I++ {
			for J := K + 1; J < nb; J++ {
				if mine(I, J) {
					update(blk(I, J), blk(I, K), blk(K, J), b)
				}
			}
		}
		barrier()
	}
}

// factor factors a diagonal block in place: L (unit diagonal) below the
// diagonal, U on and above it.
func factor(d []float64, b int) {
	for k := 0; k < b; k++ {
		dk := d[k*b : (k+1)*b]
		for i := k + 1; i < b; i++ {
			di := d[i*b : (i+1)*b]
			di[k] /= dk[k]
			for j := k + 1; j < b; j++ {
				di[j] -= di[k] * dk[j]
			}
		}
	}
}

// lowerSolve sets c to L⁻¹c, L the unit lower triangle of d.
func lowerSolve(d, c []float64, b int) {
	for k := 0; k < b; k++ {
		ck := c[k*b : (k+1)*b]
		for i := k + 1; i < b; i++ {
			l, ci := d[i*b+k], c[i*b:(i+1)*b]
			for j := range ci {
				ci[j] -= l * ck[j]
			}
		}
	}
}

// upperSolve sets c to cU⁻¹, U the upper triangle of d.
func upperSolve(d, c []float64, b int) {
	for r := 0; r < b; r++ {
		cr := c[r*b : (r+1)*b]
		for k := 0; k < b; k++ {
			cr[k] /= d[k*b+k]
			dk := d[k*b : (k+1)*b]
			for j := k + 1; j < b; j++ {
				cr[j] -= cr[k] * dk[j]
			}
		}
	}
}

// update sets c to c - x×y.
func update(c, x, y []float64, b int) {
	for i := 0; i < b; i++ {
		ci := c[i*b : (i+1)*b]
		for k := 0; k < b; k++ {
			xik, yk := x[i*b+k], y[k*b:(k+1)*b]
			for j := range ci {
				ci[j] -= xik * yk[j]
			}
		}
	}
}

// verify compares m with a sequential run of the same factorisation and,
// with product, L×U with the starting matrix. It returns what is wrong, or
// "".
func verify(m matrix, n, b int, product bool) string {
	nb := n / b
	s := make([]float64, n*n)
	sblk := func(I, J int) []float64 { off := (I*nb + J) * b * b; return s[off : off+b*b : off+b*b] }
	for I := 0; I < nb; I++ {
		for J := 0; J < nb; J++ {
			initBlock(sblk(I, J), I, J, b, n)
		}
	}
	factorize(nb, b, sblk, func(int, int) bool { return true }, func() {})
	at := func(i, j int) float64 { return m.blk(i/b, j/b)[i%b*b+j%b] }
	full := make([]float64, n*n) // the DSM's result, row-major
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			v := at(i, j)
			if want := sblk(i/b, j/b)[i%b*b+j%b]; v != want {
				return fmt.Sprintf("element (%d, %d) is %g, the sequential run's %g", i, j, v, want)
			}
			full[i*n+j] = v
		}
	}
	if !product {
		return ""
	}
	tol := 1e-12 * float64(n+1)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			var sum float64
			for k := 0; k <= min(i, j); k++ {
				l := full[i*n+k]
				if k == i {
					l = 1
				}
				sum += l * full[k*n+j]
			}
			if d := math.Abs(sum - elem(i, j, n)); d > tol {
				return fmt.Sprintf("(L×U)(%d, %d) is %g, A's is %g", i, j, sum, elem(i, j, n))
			}
		}
	}
	return ""
}

func check(err error) {
	if err != nil {
		jia.JiaError("lu: %v", err)
	}
}
