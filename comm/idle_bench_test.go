package comm

import (
	"testing"
	"time"

	"github.com/jiarun/jia/comm/memtransport"
)

// BenchmarkBlockedRecvCPU: one op is a Recv that waits 100 ms for its
// message; cpu-% is the processor time the process used meanwhile, as a
// share of one processor (the sender only sleeps). A rank that waits
// long stops polling after Options.Yield and sleeps in the transport.
// Run it with -args -comm.transport=q to wait in the RC queues.
func BenchmarkBlockedRecvCPU(b *testing.B) {
	buf := make([]byte, 8)
	var cpu0 float64
	var t0 time.Time
	bench(b, 2, memtransport.Options{}, nil,
		func(c *Comm, i int) error {
			if i == 0 {
				cpu0, t0 = processCPU(b), time.Now()
			}
			_, err := Recv(c, buf, 1, 0)
			if i == b.N-1 {
				b.ReportMetric(100*(processCPU(b)-cpu0)/time.Since(t0).Seconds(), "cpu-%")
			}
			return err
		},
		func(c *Comm, i int) error {
			time.Sleep(100 * time.Millisecond)
			return Send(c, buf, 0, 0)
		})
}
