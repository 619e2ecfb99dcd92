package comm

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jiarun/jia/comm/memtransport"
)

// runRanks runs fn on n ranks of an in-memory fabric, one goroutine each,
// and reports every rank's error. A run that does not finish within the
// deadline fails with a goroutine dump.
func runRanks(t testing.TB, n int, mopt memtransport.Options, copt *Options, fn func(c *Comm) error) *memtransport.Fabric {
	t.Helper()
	f := memtransport.New(n, mopt)
	defer f.Close()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					buf := make([]byte, 1<<16)
					errs[r] = fmt.Errorf("panic: %v\n%s", p, buf[:runtime.Stack(buf, false)])
				}
			}()
			c, err := NewWorld(f.Endpoint(r), copt)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = fn(c)
			if errs[r] != nil {
				t.Logf("rank %d of %d: %v", r, n, errs[r])
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(runDeadline):
		buf := make([]byte, 1<<22)
		t.Fatalf("ranks did not finish within %v (errors so far: %v):\n%s", runDeadline, errs, buf[:runtime.Stack(buf, true)])
	}
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d of %d: %v", r, n, err)
		}
	}
	return f
}

var runDeadline = 120 * time.Second

// run is runRanks on a default fabric.
func run(t testing.TB, n int, fn func(c *Comm) error) {
	t.Helper()
	runRanks(t, n, memtransport.Options{}, nil, fn)
}
