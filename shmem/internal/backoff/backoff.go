// Package backoff is how the DSM's processes wait for each other: poll for
// a while (spinning, then giving the processor away after every poll), and
// then sleep in the kernel until woken.
//
// On the machines jiarun targets, a sleep and a wake-up between two
// processes costs tens of microseconds (a context switch, and an
// inter-processor interrupt when the other processor is idle), while a poll
// of shared memory costs nanoseconds. A waiter that expects its answer soon
// therefore polls first. Spinning takes a processor from whoever else needs
// it, so a waiter spins only while the processes of the host fit on its
// processors, and otherwise gives the processor away after every poll
// (sched_yield), which costs about a microsecond when nobody else is
// runnable and lets anyone who is run at once.
package backoff

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/jiarun/jia/internal/osyield"

	"github.com/jiarun/jia/internal/hostcpu"

	"golang.org/x/sys/unix"
)

// Policy is how long a waiter polls before it sleeps.
type Policy struct {
	// Spin is how long to poll without giving the processor away.
	Spin time.Duration
	// Yield is how long to poll after spinning, giving the processor away
	// after every poll.
	Yield time.Duration
}

// The policies never spin: on a host shared with other work a spinner
// keeps the process it waits for off the processor for a whole time slice,
// while polling and yielding costs about a microsecond more per poll when
// the processor is free. They poll for longer while the DSM's processes of
// the host (procs; 0 when unknown) fit on its processors.

// Awaiting is the policy of a pager whose rank waits for an answer that is
// on its way from another pager (a page, a lock, a barrier): the rank's
// processor is idle meanwhile, and the answer is handled soonest by a
// pager that polls for it.
func Awaiting(procs int) Policy {
	if procs > 0 && procs <= hostcpu.Count() {
		return Policy{Yield: 500 * time.Microsecond}
	}
	return Policy{Yield: 150 * time.Microsecond}
}

// Idle is the policy of a pager that awaits nothing: it polls briefly for
// what often follows (the next fault of a stream of faults) and sleeps.
func Idle(procs int) Policy {
	if procs > 0 && procs <= hostcpu.Count() {
		return Policy{Yield: 50 * time.Microsecond}
	}
	return Policy{Yield: 20 * time.Microsecond}
}

// Caller is the policy of a rank waiting for its pager's answer to a call:
// short, since the pager may need the same processor to answer.
func Caller(procs int) Policy {
	if procs > 0 && procs <= hostcpu.Count() {
		return Policy{Yield: 50 * time.Microsecond}
	}
	return Policy{Yield: 20 * time.Microsecond}
}

// Waiter tracks one wait through a Policy. The zero Waiter sleeps at once.
type Waiter struct {
	p     Policy
	start time.Time
}

// Reset starts a wait under p.
func (w *Waiter) Reset(p Policy) {
	w.p = p
	w.start = time.Now()
}

// Pause is called after a poll that found nothing. It spins or yields and
// returns true while the caller should poll again, and false once the
// policy's time is up, or the host's processors are all taken (Crowded),
// and the caller should sleep.
func (w *Waiter) Pause() bool {
	el := time.Since(w.start)
	switch {
	case el >= w.p.Spin+w.p.Yield || Crowded():
		return false
	case el < w.p.Spin:
		return true
	}
	Yield()
	return true
}

// Polls reports whether the wait polls at all now: whether a Pause would
// return true. A caller that just started a wait uses it to sleep at once,
// without the poll before its first Pause, when the host is crowded or the
// policy polls for no time.
func (w *Waiter) Polls() bool {
	return time.Since(w.start) < w.p.Spin+w.p.Yield && !Crowded()
}

// crowd caches what Crowded found.
var crowd struct {
	mu      sync.Mutex
	fd      int // /proc/loadavg, or -1 when it cannot be read
	next    atomic.Int64
	crowded atomic.Bool
}

func init() { crowd.fd = -2 }

// crowdEvery is how often Crowded looks again.
const crowdEvery = 5 * time.Millisecond

// Crowded reports whether more threads of the host than it has processors
// are runnable besides the caller (the running count of /proc/loadavg,
// looked at every few milliseconds; see crowdedAt): then a poller only
// takes a processor from a thread that has work, whatever that thread's
// process, and should sleep instead. On a host shared with other work this
// is what makes polling safe.
func Crowded() bool {
	now := time.Now().UnixNano()
	if now < crowd.next.Load() || !crowd.mu.TryLock() {
		return crowd.crowded.Load()
	}
	defer crowd.mu.Unlock()
	crowd.next.Store(now + int64(crowdEvery))
	if crowd.fd == -2 {
		fd, err := unix.Open("/proc/loadavg", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
		}
		crowd.fd = fd
	}
	if crowd.fd < 0 {
		return false
	}
	var buf [128]byte
	n, err := unix.Pread(crowd.fd, buf[:], 0)
	if err != nil {
		return false
	}
	running, ok := parseRunning(buf[:n])
	c := ok && crowdedAt(running, hostcpu.Count())
	crowd.crowded.Store(c)
	return c
}

// crowdedAt reports whether a poller should sleep when running threads
// of the host (the poller among them: it is running when it looks) are
// runnable on cpus processors: when the others alone outnumber the
// processors. While they only fill them, a poller that gives its processor
// away after every poll delays them by a poll at most, and the threads a
// DSM operation passes through (a program waiting for its pager, the
// pager, the pager it waits for) keep polling for each other instead of
// each taking a sleep and a wake-up: on two processors those three alone
// made the host look crowded.
func crowdedAt(running, cpus int) bool { return running-1 > cpus }

// parseRunning returns R of "a b c R/T last" (/proc/loadavg).
func parseRunning(b []byte) (int, bool) {
	field := 0
	for i := 0; i < len(b); i++ {
		if b[i] == ' ' {
			field++
			continue
		}
		if field == 3 {
			n := 0
			j := i
			for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
				n = n*10 + int(b[j]-'0')
			}
			return n, j > i && j < len(b) && b[j] == '/'
		}
	}
	return 0, false
}

// Yield gives the processor to any other runnable thread of the host.
func Yield() { osyield.Thread() }

// futex operations on memory shared between processes (not the private
// variants).
const (
	futexWait = 0
	futexWake = 1
)

// Sleep sleeps while *addr holds val, until Wake on addr, a signal, or
// timeout (negative: none). The word may be in memory shared between
// processes.
func Sleep(addr *uint32, val uint32, timeout time.Duration) {
	var ts *unix.Timespec
	if timeout >= 0 {
		t := unix.NsecToTimespec(int64(timeout))
		ts = &t
	}
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(ts)), 0, 0)
}

// SleepHeld is Sleep as a raw system call, with a timeout: the caller's
// thread keeps its Go P while it sleeps. A goroutine that sleeps in an
// ordinary system call gives its P up after 20 µs (the runtime's monitor
// hands it to another thread, which looks for work and wakes yet another),
// and takes it back when it wakes: under GOMAXPROCS=1 that is two more
// wake-ups of the process's threads for every sleep. A short wait is
// cheaper with the P held; the P's other goroutines wait meanwhile, so
// the timeout must be short.
func SleepHeld(addr *uint32, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(int64(timeout))
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// Wake wakes every sleeper on addr.
func Wake(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(1<<31-1), 0, 0, 0)
}
