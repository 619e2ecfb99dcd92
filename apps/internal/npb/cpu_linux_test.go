package npb_test

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/apps/internal/npb"
	"github.com/jiarun/jia/apps/internal/npb/npbtest"
)

// threadCPU is the CPU time (user and system) of the calling thread.
func threadCPU() (float64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, fmt.Errorf("clock_gettime: %w", err)
	}
	return float64(ts.Nano()) / 1e9, nil
}

// BenchmarkStepCPU measures one step of each kernel's timed loop (see
// npb.IterationStep) on in-process ranks by the CPU time of the rank's own
// thread, not by the clock: on a loaded machine, waiting for a core is left
// out. It reports the smallest step over the benchmark's iterations, the
// slowest rank's (cpu-ms/step). Waiting for messages costs no CPU time with
// the in-process communicator, so this is the computation and the copying
// of the messages, not the latency.
//
//	go test -run - -bench StepCPU -benchtime 10x ./apps/internal/npb -npb.class A -npb.ranks 1,2
func BenchmarkStepCPU(b *testing.B) {
	class := (*benchClass)[0]
	for _, k := range strings.Split(*benchKern, ",") {
		if k == "EP" {
			continue
		}
		for _, s := range strings.Split(*benchRanks, ",") {
			np, err := strconv.Atoi(s)
			if err != nil {
				b.Fatalf("bad -npb.ranks %q", *benchRanks)
			}
			b.Run(fmt.Sprintf("%s/%c/np=%d", k, class, np), func(b *testing.B) {
				n := b.N
				best := make([]float64, np)
				err := npbtest.Run(np, func(c npb.Comm) error {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					step, err := npb.IterationStep(k, c, class)
					if err != nil {
						return err
					}
					if err := step(); err != nil { // warm-up
						return err
					}
					best[c.Rank()] = 1e300
					for range n {
						t0, err := threadCPU()
						if err != nil {
							return err
						}
						if err := step(); err != nil {
							return err
						}
						t1, err := threadCPU()
						if err != nil {
							return err
						}
						best[c.Rank()] = min(best[c.Rank()], t1-t0)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				slowest := 0.0
				for _, v := range best {
					slowest = max(slowest, v)
				}
				b.ReportMetric(slowest*1e3, "cpu-ms/step")
			})
		}
	}
}
