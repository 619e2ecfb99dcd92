package comm

import (
	"fmt"
	"testing"

	"github.com/jiarun/jia/comm/memtransport"
)

// The benchmarks run ranks as goroutines on the in-memory transport, with
// OSU's methodology: latency is half a round trip of blocking Send/Recv,
// bandwidth a window of 64 Isends answered by a 4-byte acknowledgement.

// bench runs body on rank 0 (timed, b.N iterations) and partner on the
// other ranks for as many iterations.
func bench(b *testing.B, n int, mopt memtransport.Options, copt *Options, body, partner func(c *Comm, i int) error) {
	cs := worlds(b, n, mopt, copt)
	errc := make(chan error, n)
	for _, c := range cs[1:] {
		go func() {
			for i := 0; i < b.N; i++ {
				if err := partner(c, i); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := body(cs[0], i); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for range cs[1:] {
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}

var benchSizes = []int{8, 1 << 10, 16 << 10, 32 << 10, 64 << 10, 1 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkLatency: one op is a round trip; the µs/half metric is OSU's
// latency figure.
func BenchmarkLatency(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			s, r := make([]byte, size), make([]byte, size)
			s2, r2 := make([]byte, size), make([]byte, size)
			bench(b, 2, memtransport.Options{}, nil,
				func(c *Comm, _ int) error {
					if err := Send(c, s, 1, 1); err != nil {
						return err
					}
					_, err := Recv(c, r, 1, 1)
					return err
				},
				func(c *Comm, _ int) error {
					if _, err := Recv(c, r2, 0, 1); err != nil {
						return err
					}
					return Send(c, s2, 0, 1)
				})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2e3, "µs/half")
		})
	}
}

// BenchmarkBandwidth: one op is a window of 64 messages; SetBytes makes
// MB/s the bandwidth (10^6 B/s, as OSU).
func BenchmarkBandwidth(b *testing.B) {
	const window = 64
	for _, size := range benchSizes[1:] {
		b.Run(sizeName(size), func(b *testing.B) {
			s := make([]byte, size)
			r := make([]byte, size)
			ack := make([]byte, 4)
			ack2 := make([]byte, 4)
			reqs := make([]Request, window)
			reqs2 := make([]Request, window)
			b.SetBytes(int64(window * size))
			bench(b, 2, memtransport.Options{}, nil,
				func(c *Comm, _ int) error {
					for k := range reqs {
						var err error
						if reqs[k], err = Isend(c, s, 1, 2); err != nil {
							return err
						}
					}
					if err := WaitAll(reqs, nil); err != nil {
						return err
					}
					_, err := Recv(c, ack, 1, 3)
					return err
				},
				func(c *Comm, _ int) error {
					for k := range reqs2 {
						var err error
						if reqs2[k], err = Irecv(c, r, 0, 2); err != nil {
							return err
						}
					}
					if err := WaitAll(reqs2, nil); err != nil {
						return err
					}
					return Send(c, ack2, 0, 3)
				})
		})
	}
}

// BenchmarkAllreduce: the anchors' cases, 8 B on 4 ranks (oversubscribed
// on a 2-core machine) and 1 MiB on 2 ranks, plus 8 B on 2 and the
// mid-size messages around the eager limit.
func BenchmarkAllreduce(b *testing.B) {
	for _, tc := range []struct{ n, size int }{{2, 8}, {4, 8}, {2, 16 << 10}, {2, 32 << 10}, {2, 64 << 10},
		{4, 32 << 10}, {2, 1 << 20}, {4, 1 << 20}} {
		b.Run(fmt.Sprintf("%dranks/%s", tc.n, sizeName(tc.size)), func(b *testing.B) {
			bufs := make([][]float64, tc.n)
			for i := range bufs {
				bufs[i] = make([]float64, tc.size/8)
			}
			op := func(c *Comm, _ int) error { return Allreduce(c, bufs[c.Rank()], bufs[c.Rank()], Sum) }
			bench(b, tc.n, memtransport.Options{}, nil, op, op)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/op")
		})
	}
}

func BenchmarkBarrier(b *testing.B) {
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("%dranks", n), func(b *testing.B) {
			op := func(c *Comm, _ int) error { return c.Barrier() }
			bench(b, n, memtransport.Options{}, nil, op, op)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/op")
		})
	}
}

// BenchmarkVector sends a strided layout (count blocks of block bytes at
// twice the block's stride), gathered straight from user memory or packed
// first, into a contiguous receive buffer.
func BenchmarkVector(b *testing.B) {
	layouts := []struct{ count, block int }{{256, 8}, {256, 64}, {64, 4096}, {1024, 1024}}
	for _, l := range layouts {
		for _, pack := range []bool{false, true} {
			mode := "gather"
			if pack {
				mode = "pack"
			}
			b.Run(fmt.Sprintf("%dx%dB/%s", l.count, l.block, mode), func(b *testing.B) {
				data := make([]byte, 2*l.count*l.block)
				v := Vector[byte]{Data: data, Count: l.count, BlockLen: l.block, Stride: 2 * l.block}
				r := make([]byte, l.count*l.block)
				ack, ack2 := make([]byte, 1), make([]byte, 1)
				b.SetBytes(int64(l.count * l.block))
				bench(b, 2, memtransport.Options{}, &Options{PackVectors: pack},
					func(c *Comm, _ int) error {
						if err := SendVector(c, v, 1, 0); err != nil {
							return err
						}
						_, err := Recv(c, ack, 1, 1)
						return err
					},
					func(c *Comm, _ int) error {
						if _, err := Recv(c, r, 0, 0); err != nil {
							return err
						}
						return Send(c, ack2, 0, 1)
					})
			})
		}
	}
}

// BenchmarkSelf is Isend + Recv of 8 bytes to oneself: the software cost
// of one message without any cross-thread hand-off.
func BenchmarkSelf(b *testing.B) {
	cs := worlds(b, 1, memtransport.Options{}, nil)
	c := cs[0]
	s, r := make([]byte, 8), make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		q, err := Isend(c, s, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Recv(c, r, 0, 0); err != nil {
			b.Fatal(err)
		}
		if _, err := q.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReduceKernel: the predefined Sum kernels on 512 KiB (half of a
// 1 MiB Allreduce on two ranks), in cache.
func BenchmarkReduceKernel(b *testing.B) {
	const size = 512 << 10
	in, inout := make([]byte, size), make([]byte, size)
	for _, k := range []struct {
		name string
		kind kind
	}{{"float32", kFloat32}, {"float64", kFloat64}, {"int32", kInt32}, {"int64", kInt64}} {
		b.Run("Sum/"+k.name, func(b *testing.B) {
			fn := predef[opSum][k.kind]
			b.SetBytes(size)
			for b.Loop() {
				fn(in, inout)
			}
		})
	}
}
