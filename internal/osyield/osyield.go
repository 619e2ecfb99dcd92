// Package osyield gives the processor away: to the other goroutines of the
// program and to the other threads and processes that the kernel could run
// on it, which a waiting rank must do when ranks outnumber processors.
package osyield

import "runtime"

// Yield lets other goroutines run (runtime.Gosched) and then asks the
// kernel to run another thread on this processor, if one is ready
// (sched_yield). It returns at once when nothing else wants to run.
func Yield() {
	runtime.Gosched()
	threadYield()
}

// Thread asks the kernel to run another thread on this processor, if one
// is ready (sched_yield), without letting the program's other goroutines
// run first: for a caller that has already done so, or that must keep its
// goroutine.
func Thread() { threadYield() }
