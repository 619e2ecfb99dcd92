// Command dsmcounter increments shared counters on the DSM under locks:
// every rank adds 1 to each of -counters counters -n times, each counter
// under its own lock, and after a barrier every rank checks that each
// counter holds exactly n × ranks.
//
//	jiarun -np 4 ./bin/dsmcounter -n 1000 -counters 4
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/shmem"
)

func main() {
	n := flag.Int("n", 1000, "increments of each counter per rank")
	counters := flag.Int("counters", 4, "number of counters (and locks)")
	flag.Parse()
	jia.MustInit()
	rank, size := jia.Rank(), jia.Size()

	// One counter per page, the pages dealt to the ranks in turn, so that
	// most increments touch a page homed elsewhere.
	per := shmem.PageSize / 8
	r, err := jia.Alloc(*counters*shmem.PageSize, shmem.BlockCyclic(1, 0))
	check(err)
	c := shmem.Slice[int64](r)
	for i := 0; i < *n; i++ {
		for k := 0; k < *counters; k++ {
			check(jia.Lock(k))
			c[k*per]++
			check(jia.Unlock(k))
		}
	}
	check(jia.DSMBarrier())
	code := 0
	for k := 0; k < *counters; k++ {
		if got, want := c[k*per], int64(*n*size); got != want {
			fmt.Fprintf(os.Stderr, "rank %d: counter %d is %d, want %d\n", rank, k, got, want)
			code = 1
		}
	}
	if rank == 0 && code == 0 {
		fmt.Printf("%d counters of %d ranks × %d increments: all %d\n", *counters, size, *n, *n*size)
	}
	check(jia.CloseDSM())
	check(jia.Finalize())
	os.Exit(code)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "dsmcounter:", err)
		jia.Abort(1, err.Error())
	}
}
