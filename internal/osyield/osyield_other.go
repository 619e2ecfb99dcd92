//go:build !linux

package osyield

// threadYield does nothing where sched_yield is not reached: Yield then
// only lets other goroutines run.
func threadYield() {}
