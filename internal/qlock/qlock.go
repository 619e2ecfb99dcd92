// Package qlock provides Mutex, a lock for short, rarely contended critical
// sections on hot paths (a post to a queue, a poll of one): it spins, then
// yields, then sleeps instead of parking, which lets Unlock be a plain
// store on processors that keep stores in order. A critical section then
// costs one locked instruction instead of sync.Mutex's two.
package qlock

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Mutex is a mutual exclusion lock. The zero value is unlocked. A Mutex
// must not be copied after first use.
type Mutex struct{ v atomic.Uint32 }

// Lock acquires m: it spins briefly, then yields the processor to other
// goroutines, then sleeps in short steps (a holder may keep it for a long
// copy).
func (m *Mutex) Lock() {
	if m.v.CompareAndSwap(0, 1) {
		return
	}
	m.lockSlow()
}

func (m *Mutex) lockSlow() {
	for i := 0; ; i++ {
		if m.v.Load() == 0 && m.v.CompareAndSwap(0, 1) {
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

// TryLock acquires m if it is free and reports whether it did. A free lock
// costs one locked instruction, a held one none.
func (m *Mutex) TryLock() bool { return m.v.Load() == 0 && m.v.CompareAndSwap(0, 1) }

// Unlock releases m; every load and store of the critical section is
// ordered before it. Unlocking an unlocked Mutex is a fatal error.
func (m *Mutex) Unlock() {
	if m.v.Load() == 0 {
		panic("qlock: unlock of unlocked mutex")
	}
	StoreRelease(&m.v, 0)
}
