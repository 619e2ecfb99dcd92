// Command dsmep is the NAS Parallel Benchmark kernel EP (NPB 3.4 rules) on
// the DSM instead of message passing: every rank computes its share of
// EP's 2^M random pairs (the batches dealt in blocks, each batch jumping
// ahead to its part of NPB's one random stream, so the numbers do not
// depend on the number of ranks), then adds its sums of the Gaussian
// deviates and its ten annulus counts to shared memory under a lock, as
// JIAJIA's programs reduce. After a barrier rank 0 checks the sums against
// NPB's reference values (relative error at most 1e-8), and the Gaussian
// pair counts, which are exact integers, against those NPB3.4-MPI measured
// for classes S, W, A and B. It prints NPB's report; the job exits 0 only
// if verified.
//
//	jiarun -np 4 ./bin/dsmep -class A
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/apps/internal/npb"
	"github.com/jiarun/jia/shmem"
)

// Words of the shared sums: sx, sy, then the annulus counts.
const (
	wSX = iota
	wSY
	wQ
	words = wQ + npb.EPAnnuli
)

func main() {
	class := flag.String("class", "S", "problem class: S, W, A, B or C")
	flag.Parse()
	jia.MustInit()
	pid, hosts := jia.Jiapid(), jia.Jiahosts()
	if flag.NArg() > 0 {
		jia.JiaError("dsmep: unexpected arguments %q", flag.Args())
	}
	cl := strings.ToUpper(*class)
	if len(cl) != 1 {
		jia.JiaError("dsmep: bad -class %q: want one of S, W, A, B, C", *class)
	}
	p, err := npb.EPParams(cl[0])
	if err != nil {
		jia.JiaError("dsmep: bad -class %q: %v", *class, err)
	}

	// The shared sums, homed on rank 0.
	sums := shmem.Slice[float64](jia.JiaAlloc2p(words*8, 0))
	first, count := share(p.Batches(), hosts, pid)
	jia.JiaBarrier()

	t0 := jia.JiaClock()
	sx, sy, q := npb.EPBatches(first, count)
	jia.JiaLock(0)
	sums[wSX] += sx
	sums[wSY] += sy
	for i, v := range q {
		sums[wQ+i] += v
	}
	jia.JiaUnlock(0)
	jia.JiaBarrier()
	elapsed := jia.JiaClock() - t0

	verified := true
	if pid == 0 {
		res := result(cl[0], p, hosts, elapsed, sums[:words:words])
		if err := res.Report(os.Stdout); err != nil {
			jia.JiaError("dsmep: %v", err)
		}
		verified = res.Verified
	}
	if err := jia.Finalize(); err != nil {
		jia.JiaError("dsmep: %v", err)
	}
	if !verified {
		os.Exit(1)
	}
}

// share returns the first of rank's batches and how many there are: the
// batches dealt in blocks, the first batches%ranks ranks one more, as
// NPB's EP deals them.
func share(batches, ranks, rank int) (first, count int) {
	count = batches / ranks
	large := batches % ranks
	if rank < large {
		count++
		return rank * count, count
	}
	return large*(count+1) + (rank-large)*count, count
}

// pairCounts are the exact Gaussian pair counts of EP measured with
// NPB3.4-MPI (any number of ranks): the total, then annuli 0 to 6; the
// other annuli are empty. NPB itself does not check them
// (../shared/npb/verification.md, section 2).
var pairCounts = map[byte][8]int64{
	'S': {13176389, 6140517, 5865300, 1100361, 68546, 1648, 17, 0},
	'W': {26354769, 12281576, 11729692, 2202726, 137368, 3371, 36, 0},
	'A': {210832767, 98257395, 93827014, 17611549, 1110028, 26536, 245, 0},
	'B': {843345606, 393058470, 375280898, 70460742, 4438852, 105691, 948, 5},
}

// result is NPB's result of class on ranks from the shared sums s: the
// reference sums within EP's epsilon and, where they are known, the
// exact pair counts.
func result(class byte, p npb.EPClass, ranks int, seconds float64, s []float64) npb.Result {
	res := npb.Result{
		Kernel: "DSM EP", Class: class, Size: [3]int{1 << (p.M + 1)}, Ranks: ranks,
		Time: seconds, OpType: "Random numbers generated",
		Mops: math.Ldexp(1, p.M+1) / seconds / 1e6,
		Checks: []npb.Check{
			npb.RelCheck("sx (sum of X)", complex(s[wSX], 0), complex(p.SX, 0), npb.EPEpsilon),
			npb.RelCheck("sy (sum of Y)", complex(s[wSY], 0), complex(p.SY, 0), npb.EPEpsilon),
		},
	}
	if want, ok := pairCounts[class]; ok {
		var gc float64
		for _, v := range s[wQ:] {
			gc += v
		}
		res.Checks = append(res.Checks, npb.ExactCheck("Gaussian pairs", count(gc), want[0]))
		for i, v := range s[wQ:] {
			ref := int64(0)
			if i+1 < len(want) {
				ref = want[i+1]
			}
			res.Checks = append(res.Checks, npb.ExactCheck(fmt.Sprintf("pairs in annulus %d", i), count(v), ref))
		}
	}
	res.Verified = npb.AllOK(res.Checks)
	return res
}

// count returns v, a count held in a float64, as an integer; a value that
// is not a whole number in range becomes -1, which matches no count.
func count(v float64) int64 {
	if v != math.Trunc(v) || v < 0 || v > 1<<53 {
		return -1
	}
	return int64(v)
}
