// Command sor is JIAJIA's red-black successive over-relaxation on the DSM,
// ported with the JIAJIA names of package jia: an n×n grid of float64 in
// shared memory whose rows are dealt in blocks to the ranks, each block
// homed on the rank that updates it. Every iteration relaxes the red points
// ((i+j) even), then the black ones, with a barrier after each phase; a rank
// reads only the boundary rows of its neighbours from other ranks.
//
// Rank 0 then repeats the same iterations sequentially on a private grid and
// compares every point. The result is bit-identical, not merely close: a
// point of one colour depends only on points of the other colour, so the
// order in which the ranks relax the points of a phase cannot change any
// value, and the parallel and sequential runs evaluate every point with the
// same function (relax). Rank 0 prints the time of the iterations and
// VERIFIED or FAILED; the job exits 0 only if verified.
//
//	jiarun -np 2 ./bin/sor -n 2048 -iter 10
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"syscall"
	"time"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/shmem"
)

// omega is the over-relaxation factor.
const omega = 1.25

func main() {
	n := flag.Int("n", 1024, "the grid has n×n points")
	iters := flag.Int("iter", 10, "iterations (each a red and a black phase)")
	stats := flag.Bool("stats", false, "every rank prints what its DSM did during the iterations")
	fail := flag.Int("fail", -1, "for testing: this rank calls jia.JiaError after the first iteration")
	flag.Parse()
	jia.MustInit()
	pid, hosts := jia.Jiapid(), jia.Jiahosts()
	if *n < 3 || *iters < 0 {
		jia.JiaError("sor: bad size n=%d iter=%d: want n ≥ 3, iter ≥ 0", *n, *iters)
	}

	g := newGrid(*n, hosts)
	lo, hi := g.rows(pid)
	for i := lo; i < hi; i++ {
		initRow(g.row(i), i, *n)
	}
	jia.JiaBarrier()

	if *stats {
		jia.JiaStartStat()
	}
	var sp split
	t0 := jia.JiaClock()
	c0 := cpuTime()
	for it := 0; it < *iters; it++ {
		for color := range 2 {
			if *stats {
				sp.phase(g, lo, hi, *n, color)
			} else {
				sweep(g.row, lo, hi, *n, color)
				jia.JiaBarrier()
			}
		}
		if it == 0 && pid == *fail {
			jia.JiaError("sor: failing after iteration %d as asked by -fail", it+1)
		}
	}
	elapsed := jia.JiaClock() - t0
	if *stats {
		fmt.Printf("sor: rank %d: DSM during the iterations: %+v\n", pid, jia.JiaStopStat())
		fmt.Printf("sor: rank %d: time split: neighbour rows %.3f s (max %.0f µs), sweep %.3f s, barrier %.3f s (max %.0f µs); CPU %.3f s\n",
			pid, sp.touch, sp.maxTouch*1e6, sp.sweep, sp.barrier, sp.maxBarrier*1e6, cpuTime()-c0)
	}

	code := 0
	if pid == 0 {
		fmt.Printf("sor: n=%d iter=%d ranks=%d time=%.3f s\n", *n, *iters, hosts, elapsed)
		if bad, maxd := verify(g, *n, *iters); bad == 0 {
			fmt.Println("sor: VERIFIED (bit-identical to the sequential run)")
		} else {
			fmt.Printf("sor: FAILED: %d points differ from the sequential run, the largest by %g\n", bad, maxd)
			code = 1
		}
	}
	check(jia.Finalize())
	os.Exit(code)
}

// split is where a rank's time went during the iterations, for -stats.
type split struct {
	touch, sweep, barrier float64 // seconds in all phases
	maxTouch, maxBarrier  float64 // seconds in the slowest phase
	sum                   float64 // of the boundary rows read, so that the reads stay
}

// phase runs one phase of colour color, timing its parts: the first read of
// the neighbours' boundary rows (where the read faults happen), the sweep,
// and the barrier.
func (s *split) phase(g grid, lo, hi, n, color int) {
	t0 := jia.JiaClock()
	var sink float64
	for _, i := range [2]int{lo - 1, hi} {
		if i >= 0 && i < n {
			for _, v := range g.row(i) {
				sink += v
			}
		}
	}
	t1 := jia.JiaClock()
	sweep(g.row, lo, hi, n, color)
	t2 := jia.JiaClock()
	jia.JiaBarrier()
	t3 := jia.JiaClock()
	s.touch += t1 - t0
	s.sweep += t2 - t1
	s.barrier += t3 - t2
	s.maxTouch = max(s.maxTouch, t1-t0)
	s.maxBarrier = max(s.maxBarrier, t3-t2)
	s.sum += sink
}

// cpuTime is the CPU time this process has used, in seconds.
func cpuTime() float64 {
	var ru syscall.Rusage
	check(os.NewSyscallError("getrusage", syscall.Getrusage(syscall.RUSAGE_SELF, &ru)))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// grid is an n×n matrix in the DSM whose rows are dealt in blocks of per
// rows to ranks 0, 1, …; each rank's block starts on a page boundary and is
// homed on that rank.
type grid struct {
	n, per, stride int // stride: elements from one rank's block to the next
	a              []float64
}

func newGrid(n, ranks int) grid {
	per := (n + ranks - 1) / ranks
	block := (per*n*8 + shmem.PageSize - 1) / shmem.PageSize * shmem.PageSize
	r := jia.JiaAlloc3(ranks*block, block, 0)
	return grid{n: n, per: per, stride: block / 8, a: shmem.Slice[float64](r)}
}

// rows returns the rows [lo, hi) of rank r.
func (g grid) rows(r int) (lo, hi int) { return min(g.n, r*g.per), min(g.n, (r+1)*g.per) }

// row returns row i.
func (g grid) row(i int) []float64 {
	off := i/g.per*g.stride + i%g.per*g.n
	return g.a[off : off+g.n : off+g.n]
}

// initRow sets row i of the starting grid: fixed values on the boundary,
// zero inside.
func initRow(row []float64, i, n int) {
	for j := range row {
		if i == 0 || i == n-1 || j == 0 || j == n-1 {
			row[j] = float64((i*31+j*17)%101) / 100
		} else {
			row[j] = 0
		}
	}
}

// sweep relaxes the points of one colour ((i+j)%2 == color) in rows
// [lo, hi), leaving the boundary alone.
func sweep(row func(int) []float64, lo, hi, n, color int) {
	for i := max(lo, 1); i < min(hi, n-1); i++ {
		up, cur, down := row(i-1), row(i), row(i+1)
		for j := 1 + (i+1+color)%2; j < n-1; j += 2 {
			cur[j] = relax(cur[j], up[j], down[j], cur[j-1], cur[j+1])
		}
	}
}

// relax is the new value of a point from its old value and its four
// neighbours.
func relax(c, u, d, l, r float64) float64 {
	return c + omega*(0.25*(u+d+l+r)-c)
}

// verify runs the iterations sequentially and returns how many points of g
// differ from the result, and the largest difference.
func verify(g grid, n, iters int) (bad int, maxd float64) {
	s := make([]float64, n*n)
	row := func(i int) []float64 { return s[i*n : (i+1)*n : (i+1)*n] }
	for i := 0; i < n; i++ {
		initRow(row(i), i, n)
	}
	for it := 0; it < iters; it++ {
		sweep(row, 0, n, n, 0)
		sweep(row, 0, n, n, 1)
	}
	for i := 0; i < n; i++ {
		got, want := g.row(i), row(i)
		for j := range want {
			if got[j] != want[j] {
				bad++
				maxd = max(maxd, math.Abs(got[j]-want[j]))
			}
		}
	}
	return bad, maxd
}

func check(err error) {
	if err != nil {
		jia.JiaError("sor: %v", err)
	}
}
