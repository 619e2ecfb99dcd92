package comm

import (
	"testing"

	"github.com/jiarun/jia/comm/memtransport"
)

// BenchmarkIdleTest is the processor cost of one Test of a receive that
// has no message over qtransport: one spin of a waiting call, so a spinning
// receiver notices a message up to one such poll late.
func BenchmarkIdleTest(b *testing.B) {
	withTransport("q", func() {
		cs := worlds(b, 2, memtransport.Options{}, nil)
		buf := make([]byte, 8)
		rq, err := Irecv(cs[1], buf, 0, 1)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, done, err := rq.Test(); err != nil || done {
				b.Fatal(done, err)
			}
		}
		if err := Send(cs[0], buf, 1, 1); err != nil {
			b.Fatal(err)
		}
		if _, err := rq.Wait(); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkRateCPU is the processor cost of one message of OSU's
// message-rate window (64 Irecvs posted, 64 Isends, WaitAll on both, a
// 4-byte acknowledgement), one goroutine driving both ranks.
func BenchmarkRateCPU(b *testing.B) {
	const window = 64
	for _, size := range []int{8, 1 << 10} {
		b.Run(sizeName(size), func(b *testing.B) {
			withTransport("q", func() {
				cs := worlds(b, 2, memtransport.Options{}, nil)
				s, r := make([]byte, size), make([]byte, size)
				sreqs, rreqs := make([]Request, window), make([]Request, window)
				var ack [4]byte
				idle, err := Irecv(cs[0], make([]byte, 1), 1, 99)
				if err != nil {
					b.Fatal(err)
				}
				defer idle.Cancel()
				b.ReportAllocs()
				cpu0 := processCPU(b)
				for b.Loop() {
					for k := range rreqs {
						var err error
						if rreqs[k], err = Irecv(cs[1], r, 0, 2); err != nil {
							b.Fatal(err)
						}
					}
					for k := range sreqs {
						var err error
						if sreqs[k], err = Isend(cs[0], s, 1, 2); err != nil {
							b.Fatal(err)
						}
					}
					if err := WaitAll(sreqs, nil); err != nil {
						b.Fatal(err)
					}
					// Poll the sender too (Test of a receive that never
					// matches), as its own WaitAll would: send completions
					// free room in its queues.
					for {
						done, err := TestAll(rreqs, nil)
						if err != nil {
							b.Fatal(err)
						}
						if done {
							break
						}
						if _, _, err := idle.Test(); err != nil {
							b.Fatal(err)
						}
					}
					if err := Send(cs[1], ack[:], 0, 3); err != nil {
						b.Fatal(err)
					}
					if _, err := Recv(cs[0], ack[:], 1, 3); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((processCPU(b)-cpu0)*1e9/float64(window*b.N), "cpu-ns/msg")

			})
		})
	}
}
