package jia

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jiarun/jia/comm"
	"github.com/jiarun/jia/comm/rttransport"
)

var (
	worldOnce sync.Once
	world     *comm.Comm
	worldErr  error
)

// World returns the communicator of every rank of the job, MPI's
// MPI_COMM_WORLD: point-to-point calls (comm.Send, comm.Recv, Isend, …)
// and collectives (Barrier, Bcast, Allreduce, …) run on it. Message passing
// starts at the first call; a failure to start it ends the rank, as MPI's
// default error handler does.
func World() *comm.Comm {
	r := get("World")
	worldOnce.Do(func() {
		// Messages arrive through Go's network poller, which runs when the
		// waiting goroutine blocks: spinning or yielding would only delay
		// them, so waits block at once.
		hosts := make([]string, r.Size())
		for _, c := range r.Cards() {
			hosts[c.Rank] = c.Host
		}
		world, worldErr = comm.NewWorld(rttransport.New(r), &comm.Options{
			Hosts:       hosts,
			TwoSided:    !r.Config().Comm.RendezvousRead,
			PackVectors: r.Config().Comm.PackVectors,
			EagerLimit:  int(r.Config().Comm.EagerLimitFor(r.Config().Transport.Kind)),
			Spin:        1,
			Yield:       time.Nanosecond,
		})
	})
	if worldErr != nil {
		fmt.Fprintf(os.Stderr, "jia: rank %d: message passing: %v\n", r.Rank(), worldErr)
		os.Exit(1)
	}
	return world
}
