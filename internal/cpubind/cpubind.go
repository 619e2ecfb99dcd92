// Package cpubind lists the processors a process may run on and binds the
// calling thread to one of them for a while: what the launcher's --bind-to
// and the benchmarks that measure a machine's floors between two
// processors need.
package cpubind

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Allowed returns the processors this process may run on, in increasing
// order, or nil when the kernel does not tell.
func Allowed() []int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil {
		return nil
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// Pin locks the calling goroutine to its thread and binds the thread to
// processor cpu. The function it returns gives the thread its former
// processors back and unlocks it.
func Pin(cpu int) (func(), error) {
	if cpu < 0 {
		return nil, fmt.Errorf("bind to processor %d: no such processor", cpu)
	}
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("bind to processor %d: %w", cpu, err)
	}
	return func() {
		_ = unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}, nil
}
