package shmem_test

import (
	"fmt"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/shmem"
)

// Every rank adds its number to a shared sum under a lock; after the
// coherence barrier every rank sees the total. Run it with jiarun -np N.
func Example() {
	jia.MustInit()
	defer jia.Finalize()
	r, err := jia.Alloc(8, shmem.OnRank(0)) // collective: every rank calls it
	if err != nil {
		jia.Abort(1, err.Error())
	}
	sum := shmem.Slice[int64](r)
	jia.Lock(0)
	sum[0] += int64(jia.Rank())
	jia.Unlock(0)
	jia.DSMBarrier()
	if jia.Rank() == 0 {
		fmt.Println("sum of ranks:", sum[0])
	}
	jia.CloseDSM() // collective: every rank is done with the DSM
}
