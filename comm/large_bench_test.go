package comm

import (
	"fmt"
	"testing"

	"github.com/jiarun/jia/comm/memtransport"
)

// BenchmarkWindowCPU is the processor cost of bw's window (64 Isends from
// rank 0, 64 Irecvs on rank 1, each message with its own buffer) over
// qtransport, with one goroutine driving both ranks: no hand-off between
// processors and no scheduling is measured, only the work. cpu-ns/B is
// the processor time per byte moved; compare split (both ends copy a
// large message, Options.SplitMin) with nosplit: the same work, which
// split shares between two processors.
func BenchmarkWindowCPU(b *testing.B) {
	const window = 64
	for _, size := range []int{8 << 10, 16 << 10, 64 << 10, 1 << 20} {
		for _, split := range []int{0, 256 << 10} {
			name := fmt.Sprintf("%s/split=%v", sizeName(size), split > 0)
			b.Run(name, func(b *testing.B) {
				withTransport("q", func() {
					cs := worlds(b, 2, memtransport.Options{}, &Options{SplitMin: split})
					sbufs, rbufs := make([][]byte, window), make([][]byte, window)
					for i := range sbufs {
						sbufs[i], rbufs[i] = make([]byte, size), make([]byte, size)
					}
					reqs := make([]Request, 0, 2*window)
					b.SetBytes(int64(window * size))
					b.ReportAllocs()
					cpu0 := processCPU(b)
					for b.Loop() {
						reqs = reqs[:0]
						for j := range window {
							q, err := Irecv(cs[1], rbufs[j], 0, 1)
							if err != nil {
								b.Fatal(err)
							}
							reqs = append(reqs, q)
						}
						for j := range window {
							q, err := Isend(cs[0], sbufs[j], 1, 1)
							if err != nil {
								b.Fatal(err)
							}
							reqs = append(reqs, q)
						}
						for done := false; !done; {
							// Both ranks poll, as each would in its
							// own wait: completed eager sends leave
							// rank 0 no request to poll for.
							for r, c := range cs {
								if _, _, err := c.Iprobe(1-r, 99); err != nil {
									b.Fatal(err)
								}
							}
							done = true
							for i := range reqs {
								if !reqs[i].Active() {
									continue
								}
								_, ok, err := reqs[i].Test()
								if err != nil {
									b.Fatal(err)
								}
								done = done && ok
							}
						}
					}
					b.ReportMetric((processCPU(b)-cpu0)*1e9/float64(b.N*window*size), "cpu-ns/B")
				})
			})
		}
	}
}
