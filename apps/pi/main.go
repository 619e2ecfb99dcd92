// Command pi computes π on the DSM, as JIAJIA's first example program: every
// rank integrates 4/(1+x²) over its share of [0, 1], adds its part to a
// shared sum under a lock, and after a barrier rank 0 checks the sum
// against math.Pi.
//
//	jiarun -np 4 ./bin/pi -n 10000000
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
	n := flag.Int("n", 10_000_000, "number of intervals")
	flag.Parse()
	jia.MustInit()
	rank, size := jia.Rank(), jia.Size()

	// One float64, homed on rank 0.
	r, err := jia.Alloc(8, shmem.OnRank(0))
	check(err)
	sum := shmem.Slice[float64](r)

	h := 1 / float64(*n)
	part := 0.0
	for i := rank; i < *n; i += size {
		x := h * (float64(i) + 0.5)
		part += 4 / (1 + x*x)
	}
	part *= h

	check(jia.Lock(0))
	sum[0] += part
	check(jia.Unlock(0))
	check(jia.DSMBarrier())

	code := 0
	if rank == 0 {
		diff := math.Abs(sum[0] - math.Pi)
		fmt.Printf("pi = %.12f (error %.2g) from %d intervals on %d ranks\n", sum[0], diff, *n, size)
		if diff > 1e-9 {
			fmt.Fprintln(os.Stderr, "pi: the sum is wrong")
			code = 1
		}
	}
	check(jia.CloseDSM())
	check(jia.Finalize())
	os.Exit(code)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "pi:", err)
		jia.Abort(1, err.Error())
	}
}
