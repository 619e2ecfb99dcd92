package shm

import (
	"runtime"
	"sync/atomic"
	"time"
)

// qlock is the lock of a QP's send or receive side. Its critical sections
// are short (a post, a poll) but for the rare ones that copy a large
// message or change the connection, and it is rarely contended: most QPs
// are posted to and polled by one goroutine at a time. So it spins rather
// than parks, which lets Unlock be a plain store on processors that keep
// stores in order (releaseLock): one locked instruction per critical
// section instead of sync.Mutex's two.
type qlock struct{ v atomic.Uint32 }

// Lock acquires l: it spins briefly, then yields the processor to other
// goroutines, then sleeps in short steps (a holder that copies a large
// message may keep it for milliseconds).
func (l *qlock) Lock() {
	if l.v.CompareAndSwap(0, 1) {
		return
	}
	l.lockSlow()
}

func (l *qlock) lockSlow() {
	for i := 0; ; i++ {
		if l.v.Load() == 0 && l.v.CompareAndSwap(0, 1) {
			return
		}
		switch {
		case i < 64:
		case i < 1024:
			runtime.Gosched()
		default:
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// TryLock acquires l if it is free and reports whether it did.
func (l *qlock) TryLock() bool { return l.v.Load() == 0 && l.v.CompareAndSwap(0, 1) }

// Unlock releases l; every load and store of the critical section is
// ordered before it.
func (l *qlock) Unlock() { releaseLock(&l.v) }
