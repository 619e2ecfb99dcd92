// Command mm multiplies two n×n matrices on the DSM, C = A×B, as JIAJIA's mm
// example: A, B and C live in shared memory with their rows dealt in blocks
// to the ranks, each block homed on the rank that writes it. Every rank
// fills its rows of A and B, and after a barrier computes its rows of C,
// reading all of B.
//
// Rank 0 then checks C without trusting the DSM's copy of A or B. The
// entries of A and B are small integers given by formulas, so every
// product and sum is exact in float64, and rank 0 checks every row sum of C
// against Σₖ A[i][k]·(Σⱼ B[k][j]) and every column sum against
// Σₖ (Σᵢ A[i][k])·B[k][j], computed from the formulas, and the sum of all
// of C, which the ranks add up under a lock. For n ≤ -full
// (default 256) it also compares every element with a sequential product.
// Rank 0 prints the time of the multiplication and VERIFIED or FAILED; the
// job exits 0 only if verified.
//
//	jiarun -np 2 ./bin/mm -n 1024
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/shmem"
)

func main() {
	n := flag.Int("n", 512, "the matrices are n×n")
	full := flag.Int("full", 256, "compare every element with a sequential product when n ≤ full")
	flag.Parse()
	jia.MustInit()
	pid, hosts := jia.Jiapid(), jia.Jiahosts()
	if *n < 1 {
		jia.JiaError("mm: bad size n=%d: want n ≥ 1", *n)
	}

	a, b, c := newMatrix(*n, hosts), newMatrix(*n, hosts), newMatrix(*n, hosts)
	lo, hi := a.rows(pid)
	for i := lo; i < hi; i++ {
		ar, br := a.row(i), b.row(i)
		for j := range ar {
			ar[j], br[j] = elemA(i, j), elemB(i, j)
		}
	}
	jia.JiaBarrier()

	// The sum of C's elements, added up under a lock by every rank.
	total := shmem.Slice[float64](jia.JiaAlloc2p(8, 0))

	t0 := jia.JiaClock()
	multiply(c.row, a.row, b.row, lo, hi, *n)
	jia.JiaBarrier()
	elapsed := jia.JiaClock() - t0

	part := 0.0
	for i := lo; i < hi; i++ {
		for _, v := range c.row(i) {
			part += v
		}
	}
	jia.JiaLock(0)
	total[0] += part
	jia.JiaUnlock(0)
	jia.JiaBarrier()

	code := 0
	if pid == 0 {
		fmt.Printf("mm: n=%d ranks=%d time=%.3f s\n", *n, hosts, elapsed)
		msg := verify(c, *n, *n <= *full)
		if want := sumC(*n); msg == "" && total[0] != want {
			msg = fmt.Sprintf("the ranks' parts of C add up to %g under lock 0, want %g", total[0], want)
		}
		if msg == "" {
			fmt.Println("mm: VERIFIED")
		} else {
			fmt.Println("mm: FAILED:", msg)
			code = 1
		}
	}
	check(jia.Finalize())
	os.Exit(code)
}

// elemA and elemB are the entries of A and B: small integers, so that
// every product and sum in C is exact.
func elemA(i, k int) float64 { return float64((i*7 + k*3) % 10) }
func elemB(k, j int) float64 { return float64((k*5 + j*11 + 1) % 10) }

// matrix is an n×n matrix in the DSM whose rows are dealt in blocks of per
// rows to ranks 0, 1, …; each rank's block starts on a page boundary and is
// homed on that rank.
type matrix struct {
	n, per, stride int // stride: elements from one rank's block to the next
	a              []float64
}

func newMatrix(n, ranks int) matrix {
	per := (n + ranks - 1) / ranks
	block := (per*n*8 + shmem.PageSize - 1) / shmem.PageSize * shmem.PageSize
	r := jia.JiaAlloc3(ranks*block, block, 0)
	return matrix{n: n, per: per, stride: block / 8, a: shmem.Slice[float64](r)}
}

// rows returns the rows [lo, hi) of rank r.
func (m matrix) rows(r int) (lo, hi int) { return min(m.n, r*m.per), min(m.n, (r+1)*m.per) }

// row returns row i.
func (m matrix) row(i int) []float64 {
	off := i/m.per*m.stride + i%m.per*m.n
	return m.a[off : off+m.n : off+m.n]
}

// multiply sets rows [lo, hi) of C to those of A×B.
func multiply(c, a, b func(int) []float64, lo, hi, n int) {
	for i := lo; i < hi; i++ {
		ci, ai := c(i), a(i)
		clear(ci)
		for k, aik := range ai {
			bk := b(k)
			for j := range ci {
				ci[j] += aik * bk[j]
			}
		}
	}
}

// sumC returns the sum of C's elements, Σₖ (Σᵢ A[i][k])·(Σⱼ B[k][j]),
// from the formulas of A and B.
func sumC(n int) float64 {
	var sum float64
	for k := 0; k < n; k++ {
		var colA, rowB float64
		for i := 0; i < n; i++ {
			colA += elemA(i, k)
			rowB += elemB(k, i)
		}
		sum += colA * rowB
	}
	return sum
}

// verify checks C's row and column sums against sums computed from the
// formulas of A and B, and with whole every element against a sequential
// product. It returns what is wrong, or "".
func verify(c matrix, n int, whole bool) string {
	rowB, colA := make([]float64, n), make([]float64, n)
	for k := 0; k < n; k++ {
		for j := 0; j < n; j++ {
			rowB[k] += elemB(k, j)
			colA[k] += elemA(j, k)
		}
	}
	colC := make([]float64, n)
	for i := 0; i < n; i++ {
		var got, want float64
		for j, v := range c.row(i) {
			got += v
			colC[j] += v
		}
		for k := 0; k < n; k++ {
			want += elemA(i, k) * rowB[k]
		}
		if got != want {
			return fmt.Sprintf("row %d of C sums to %g, want %g", i, got, want)
		}
	}
	for j := 0; j < n; j++ {
		var want float64
		for k := 0; k < n; k++ {
			want += colA[k] * elemB(k, j)
		}
		if colC[j] != want {
			return fmt.Sprintf("column %d of C sums to %g, want %g", j, colC[j], want)
		}
	}
	if !whole {
		return ""
	}
	sa, sb, sc := make([]float64, n*n), make([]float64, n*n), make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			sa[i*n+j], sb[i*n+j] = elemA(i, j), elemB(i, j)
		}
	}
	row := func(s []float64) func(int) []float64 {
		return func(i int) []float64 { return s[i*n : (i+1)*n : (i+1)*n] }
	}
	multiply(row(sc), row(sa), row(sb), 0, n, n)
	for i := 0; i < n; i++ {
		for j, v := range c.row(i) {
			if want := sc[i*n+j]; v != want {
				return fmt.Sprintf("C[%d][%d] is %g, want %g", i, j, v, want)
			}
		}
	}
	return ""
}

func check(err error) {
	if err != nil {
		jia.JiaError("mm: %v", err)
	}
}
