// Package jia is what a jiarun program imports: the facade over the runtime,
// message passing and the distributed shared memory.
//
// A jiarun program is an ordinary Go SPMD program. Every rank runs the same
// main; each learns its rank and the size of the job from Init:
//
//	func main() {
//		jia.MustInit()
//		defer jia.Finalize()
//		fmt.Printf("hello from rank %d of %d\n", jia.Rank(), jia.Size())
//	}
//
// Build it with go build and start it with `jiarun -np 4 ./app`, or run it
// alone as a singleton (rank 0 of 1).
//
// Every call other than Init and MustInit requires a prior Init: a call made
// before it prints an error naming the call and ends the rank with exit
// code 2, as MPI does for calls before MPI_Init.
package jia

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	rt "github.com/jiarun/jia/runtime"
)

// ExitUsage is the exit code of a rank that misuses the API (a call before
// Init, a failed Init through MustInit).
const ExitUsage = 2

var (
	mu    sync.Mutex
	state *rt.Runtime
)

// Init starts this rank: it reads the launch contract, joins the job's
// rendezvous and learns every other rank's endpoint. It must be called once,
// before any other call of this package.
func Init() error {
	mu.Lock()
	defer mu.Unlock()
	if state != nil {
		return fmt.Errorf("rank %s: Init called twice", envRank())
	}
	clockStart = time.Now()
	r, err := rt.Init(context.Background())
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	state = r
	return nil
}

// MustInit calls Init and, if it fails, prints the error and ends the rank
// with exit code 2.
func MustInit() {
	if err := Init(); err != nil {
		fmt.Fprintf(os.Stderr, "jia: %v\n", err)
		os.Exit(ExitUsage)
	}
}

func envRank() string {
	if r := os.Getenv(rt.EnvRank); r != "" {
		return r
	}
	return "0"
}

// get returns the runtime, or ends the rank if Init has not been called.
func get(call string) *rt.Runtime {
	mu.Lock()
	r := state
	mu.Unlock()
	if r == nil {
		fmt.Fprintf(os.Stderr, "jia: rank %s: jia.%s called before jia.Init\n", envRank(), call)
		os.Exit(ExitUsage)
	}
	return r
}

// Rank returns this rank's number, 0 ≤ Rank() < Size().
func Rank() int { return get("Rank").Rank() }

// Size returns the number of ranks in the job.
func Size() int { return get("Size").Size() }

// LocalRank returns this rank's index among the ranks on its host.
func LocalRank() int { return get("LocalRank").LocalRank() }

// LocalSize returns the number of ranks on this rank's host.
func LocalSize() int { return get("LocalSize").LocalSize() }

// Job returns the identifier of the job.
func Job() string { return get("Job").Job() }

// Runtime returns the rank's runtime, for programs and packages that need
// its lower-level calls.
func Runtime() *rt.Runtime { return get("Runtime") }

// SendBytes sends b to rank dst on the runtime's bootstrap byte path.
// Messages between a pair of ranks arrive in order.
func SendBytes(dst int, b []byte) error { return get("SendBytes").SendBytes(dst, b) }

// RecvBytes receives the next message that rank src sent with SendBytes.
func RecvBytes(src int) ([]byte, error) { return get("RecvBytes").RecvBytes(src) }

// Fence waits until every rank has called Fence as many times. It goes
// through the launcher: use it to order phases, not in loops.
func Fence() error { return get("Fence").Fence(context.Background()) }

// Abort stops the whole job: every rank is ended and jiarun exits with
// code. It does not return.
func Abort(code int, msg string) { get("Abort").Abort(code, msg) }

// Finalize ends this rank's part in the job cleanly. Call it once, last.
// With the DSM started it closes it (collectively: every rank's pages stay
// served until all ranks are done). With message passing started, it first
// waits until every rank has
// reached Finalize, as MPI_Finalize does, so that no rank closes its
// connections while messages to it are still on their way.
func Finalize() error {
	r := get("Finalize")
	// The DSM's pages may be needed by other ranks until all are done.
	if err := CloseDSM(); err != nil {
		return err
	}
	if world != nil {
		if err := r.Fence(context.Background()); err != nil {
			return err
		}
		if err := closeWorld(); err != nil {
			return fmt.Errorf("jia: rank %d: finalize: message passing: %w", r.Rank(), err)
		}
	}
	return r.Finalize()
}
