package osyield

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// TestYieldLetsOthersRun: with one processor for goroutines, a loop that
// calls Yield must let another goroutine run to completion.
func TestYieldLetsOthersRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var done atomic.Bool
	go func() { done.Store(true) }()
	for i := 0; !done.Load(); i++ {
		if i == 1_000_000 {
			t.Fatal("the other goroutine did not run while this one yielded")
		}
		Yield()
	}
}

func BenchmarkYield(b *testing.B) {
	for b.Loop() {
		Yield()
	}
}
