package shm

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	futexWaitOp = 0 // FUTEX_WAIT, not private: the word is in MAP_SHARED memory
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *w == val, at most d.
func futexWait(w *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every sleeper on w.
func futexWake(w *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}

// hasWaiters reports whether a Wait sleeps on doorbell db (nil: none).
func hasWaiters(db []byte) bool {
	return len(db) > 0 && atomic.LoadUint32(p32(db, dbWaiters)) != 0
}

// ring of a doorbell: wake the sleepers of a CQ doorbell, if any. The
// caller has published its data before (a sequentially consistent atomic
// store, or storeRelease64 under the asymmetric fence), and a sleeper
// announces itself before it re-checks for data, so a wake-up is never
// lost.
func ringDoorbell(db []byte) {
	if !hasWaiters(db) {
		return
	}
	seq := p32(db, dbSeq)
	atomic.AddUint32(seq, 1)
	futexWake(seq)
}

// ptraceScope returns kernel.yama.ptrace_scope, 0 without Yama.
func ptraceScope() int {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}

// cmaIovecs fills iov with the non-empty buffers of bufs and returns the
// used part.
func cmaIovecs(iov []unix.Iovec, bufs [][]byte) []unix.Iovec {
	n := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if n == len(iov) {
			break
		}
		iov[n].Base = &b[0]
		iov[n].SetLen(len(b))
		n++
	}
	return iov[:n]
}

// cmaTransfer moves len bytes between local buffers and remote addresses of
// process pid with one process_vm_readv (write=false) or process_vm_writev
// call. A short transfer is reported as EFAULT.
func cmaTransfer(write bool, pid int, local []unix.Iovec, remote []unix.RemoteIovec, want int) syscall.Errno {
	if want == 0 {
		return 0
	}
	trap := uintptr(unix.SYS_PROCESS_VM_READV)
	if write {
		trap = unix.SYS_PROCESS_VM_WRITEV
	}
	var lp, rp unsafe.Pointer
	if len(local) > 0 {
		lp = unsafe.Pointer(&local[0])
	}
	if len(remote) > 0 {
		rp = unsafe.Pointer(&remote[0])
	}
	n, _, errno := unix.Syscall6(trap, uintptr(pid), uintptr(lp), uintptr(len(local)), uintptr(rp), uintptr(len(remote)), 0)
	if errno != 0 {
		return errno
	}
	if int(n) != want {
		return unix.EFAULT
	}
	return 0
}
