package shm

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// An asymmetric fence: the producers of ring entries and acknowledgements
// publish them with plain stores where the processor keeps stores in order
// (storeRelease64), which costs no locked instruction per message, and a
// waiter that is about to sleep pays instead: after announcing itself on a
// doorbell it makes every thread of the processes that chose plain stores
// execute a full barrier (membarrier MEMBARRIER_CMD_GLOBAL_EXPEDITED). A
// producer that read the doorbell before the announcement then had its
// store visible by the end of that barrier, so the sleeper's last poll
// sees it; one that reads it after sees the announcement and rings. A
// process uses plain stores only once it has registered for such barriers.

const (
	membarrierQuery                   = 0      // MEMBARRIER_CMD_QUERY
	membarrierGlobalExpedited         = 1 << 1 // MEMBARRIER_CMD_GLOBAL_EXPEDITED
	membarrierRegisterGlobalExpedited = 1 << 2 // MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED
)

var (
	fenceOnce sync.Once
	// asymFence is set (once, in the first Open, before any ring is
	// written) when this process is registered for global expedited
	// barriers: it may publish with plain stores.
	asymFence bool
	// sleepBarrier is set with asymFence when the kernel has global
	// expedited barriers: sleepers issue one, whether or not this process
	// publishes with plain stores, since peers may.
	sleepBarrier bool
)

// setupFence registers the process for global expedited barriers, once.
// Without them (old kernels, seccomp) every publishing store stays a locked
// instruction.
func setupFence() {
	fenceOnce.Do(func() {
		cmds, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierQuery, 0, 0)
		sleepBarrier = errno == 0 && cmds&membarrierGlobalExpedited != 0
		if sleepBarrier {
			_, _, errno = unix.Syscall(unix.SYS_MEMBARRIER, membarrierRegisterGlobalExpedited, 0, 0)
			asymFence = errno == 0
		}
	})
}

// fenceBound is how long a sleeper sleeps at most when the barrier failed:
// by then any store a producer made before it read the doorbell has left
// its processor, and the next poll sees it.
const fenceBound = 100 * time.Microsecond

// sleepFence runs the sleeper's half of the asymmetric fence, after the
// sleeper announced itself and before its last poll. It returns the bound
// of the sleep that follows: d, or fenceBound when the barrier failed.
func sleepFence(d time.Duration) time.Duration {
	if !sleepBarrier {
		return d
	}
	if _, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierGlobalExpedited, 0, 0); errno != 0 {
		return min(d, fenceBound)
	}
	return d
}
