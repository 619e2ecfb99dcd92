package launcher

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/internal/cpubind"
)

// Binding of ranks to processors (--bind-to), as mpirun does: each rank of
// a host runs on one processor of those jiarun (or the host's proxy) may
// use, the k-th rank of the host on the k-th of them. What a rank starts
// inherits its binding, unless it widens it (the DSM's pager runs on every
// processor of the host).
const (
	BindAuto = ""     // BindCore when every processor of the host gets as many ranks as the others, BindNone otherwise
	BindCore = "core" // one processor per rank (ranks share them round-robin when they outnumber them)
	BindNone = "none" // the scheduler places the ranks
)

// checkBind checks a --bind-to value.
func checkBind(v string) error {
	switch v {
	case BindAuto, BindCore, BindNone:
		return nil
	}
	return fmt.Errorf("--bind-to %q: want %s or %s", v, BindCore, BindNone)
}

// bindCPU returns the processor the rank localRank of localSize ranks on
// this host runs on under mode, or -1 for none.
//
// BindAuto binds also when the ranks outnumber the processors, as long as
// each processor gets the same number of them: ranks that wait give their
// processor away (sched_yield), which hands it to a rank of the same
// processor only, so a rank bound with a fixed partner gets the processor
// at once, where unbound ranks also wait for the scheduler to move them
// between processors (an 8-byte Allreduce of 4 ranks on 2 processors
// takes about a third less time bound). An uneven share is left to the
// scheduler, which can balance it.
func bindCPU(mode string, localRank, localSize int) int {
	if mode == BindNone {
		return -1
	}
	cpus := cpubind.Allowed()
	if len(cpus) == 0 || mode == BindAuto && localSize > len(cpus) && localSize%len(cpus) != 0 {
		return -1
	}
	return cpus[localRank%len(cpus)]
}

// startBound starts start's process bound to processor cpu (none when
// negative): a new process inherits the processor set of the thread that
// forks it, so the calling thread is bound for the while.
func startBound(cpu int, start func() error) error {
	if cpu < 0 {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("sched_getaffinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("bind to processor %d: %w", cpu, err)
	}
	err := start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil && err == nil {
		return fmt.Errorf("restore the processor set after binding to processor %d: %w", cpu, rerr)
	}
	return err
}
