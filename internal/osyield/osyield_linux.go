package osyield

import "golang.org/x/sys/unix"

// threadYield is sched_yield(2). It cannot fail; a raw system call keeps
// the runtime out of it (it does not block).
func threadYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
