package comm

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/jiarun/jia/comm/memtransport"
)

// a2avCount is the number of int32 that rank r sends to rank j in the
// Alltoallv tests: zero for some pairs, eager for most, and a rendezvous
// (64 KiB and more) for a few, the block to itself included.
func a2avCount(r, j int) int {
	switch (r + 2*j) % 5 {
	case 0:
		return 0
	case 1:
		return 16<<10 + 3*r + j // 64 KiB and more: rendezvous
	}
	return 1 + 7*r + j
}

// a2avVal is element i of the block that rank r sends to rank j.
func a2avVal(r, j, i int) int32 { return int32(r<<24 | j<<16 | i&0xffff) }

// a2avLayout places blocks in reverse rank order with a gap of 3 elements
// before each, so that displacements are neither packed nor in rank
// order. It returns the displacements and the buffer length.
func a2avLayout(counts []int) (displs []int, size int) {
	displs = make([]int, len(counts))
	for j := len(counts) - 1; j >= 0; j-- {
		size += 3
		displs[j] = size
		size += counts[j]
	}
	return displs, size + 3
}

// checkAlltoallv runs one Alltoallv with the counts of a2avCount and checks
// every received element and that the gaps of recv are left alone.
func checkAlltoallv(c *Comm) error {
	n, r := c.Size(), c.Rank()
	sc, rc := make([]int, n), make([]int, n)
	for j := range n {
		sc[j], rc[j] = a2avCount(r, j), a2avCount(j, r)
	}
	sd, slen := a2avLayout(sc)
	rd, rlen := a2avLayout(rc)
	send := make([]int32, slen)
	for j := range n {
		for i := range sc[j] {
			send[sd[j]+i] = a2avVal(r, j, i)
		}
	}
	recv := make([]int32, rlen)
	const untouched = -1
	for i := range recv {
		recv[i] = untouched
	}
	if err := Alltoallv(c, send, sc, sd, recv, rc, rd); err != nil {
		return err
	}
	inBlock := make([]bool, rlen)
	for j := range n {
		for i := range rc[j] {
			inBlock[rd[j]+i] = true
			if got, want := recv[rd[j]+i], a2avVal(j, r, i); got != want {
				return fmt.Errorf("from rank %d, element %d: got %#x, want %#x", j, i, got, want)
			}
		}
	}
	for i, v := range recv {
		if !inBlock[i] && v != untouched {
			return fmt.Errorf("recv[%d] outside every block was written: %#x", i, v)
		}
	}
	return nil
}

// TestAlltoallv checks Alltoallv with scattered displacements, empty,
// eager and rendezvous blocks (the block to itself among them), on 1 to 5
// ranks and, for 2 and 3 ranks, over qtransport's one-sided rendezvous,
// twice in a row on the same communicator.
func TestAlltoallv(t *testing.T) {
	for _, kind := range []string{"mem", "q"} {
		for _, n := range []int{1, 2, 3, 5} {
			if kind == "q" && n > 3 {
				continue // the small shm devices of the tests
			}
			t.Run(fmt.Sprintf("%s/np=%d", kind, n), func(t *testing.T) {
				withTransport(kind, func() {
					run(t, n, func(c *Comm) error {
						for range 2 {
							if err := checkAlltoallv(c); err != nil {
								return err
							}
						}
						return nil
					})
				})
			})
		}
	}
}

// TestAlltoallvManyPeers checks Alltoallv on more ranks than it exchanges
// with at once, so that it runs in several batches.
func TestAlltoallvManyPeers(t *testing.T) {
	n := alltoallvBatch + 3
	run(t, n, func(c *Comm) error {
		r := c.Rank()
		send, recv := make([]int64, n), make([]int64, 2*n)
		sc, rc, rd := make([]int, n), make([]int, n), make([]int, n)
		for j := range n {
			send[j] = int64(r*1000 + j)
			sc[j], rc[j], rd[j] = 1, 1, 2*(n-1-j)
		}
		if err := Alltoallv(c, send, sc, nil, recv, rc, rd); err != nil {
			return err
		}
		for j := range n {
			if got, want := recv[rd[j]], int64(j*1000+r); got != want {
				return fmt.Errorf("from rank %d: got %d, want %d", j, got, want)
			}
		}
		return nil
	})
}

// TestAlltoallvSelfMismatch: a rank whose counts for itself disagree gets
// ErrCount before it sends anything; the other ranks, whose arguments are
// consistent, then call Alltoallv again with it and succeed.
func TestAlltoallvSelfMismatch(t *testing.T) {
	run(t, 3, func(c *Comm) error {
		n, r := c.Size(), c.Rank()
		send, recv := make([]int32, 2*n), make([]int32, 2*n)
		ones := []int{1, 1, 1}
		if r == 1 {
			bad := []int{1, 2, 1}
			err := Alltoallv(c, send, ones, nil, recv, bad, nil)
			if !errors.Is(err, ErrCount) {
				return fmt.Errorf("self mismatch: got %v, want ErrCount", err)
			}
		}
		for i := range send[:n] {
			send[i] = int32(10*r + i)
		}
		if err := Alltoallv(c, send, ones, nil, recv, ones, nil); err != nil {
			return err
		}
		for j := range n {
			if got, want := recv[j], int32(10*j+r); got != want {
				return fmt.Errorf("from rank %d: got %d, want %d", j, got, want)
			}
		}
		return nil
	})
}

// TestAlltoallvShortReceive: a receiver that expects fewer elements than
// its peer sends gets ErrCount instead of a silently short block.
func TestAlltoallvShortReceive(t *testing.T) {
	run(t, 2, func(c *Comm) error {
		r := c.Rank()
		send, recv := make([]int32, 8), make([]int32, 8)
		sc, rc := []int{2, 2}, []int{2, 2}
		if r == 0 {
			rc[1] = 1
		}
		err := Alltoallv(c, send, sc, nil, recv, rc, nil)
		if r == 0 && !errors.Is(err, ErrCount) {
			return fmt.Errorf("short receive: got %v, want ErrCount", err)
		}
		if r == 1 && err != nil {
			return err
		}
		return nil
	})
}

// TestAlltoallDoesNotAllocate: a steady-state Alltoallv with given
// displacements (eager and rendezvous) and a large Alltoall allocate
// nothing.
func TestAlltoallDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	const runs = 100
	for _, tc := range []struct {
		name  string
		n     int
		count int // int32 per peer
	}{
		{"Alltoallv 64 B, 3 ranks", 3, 16},
		{"Alltoallv 256 KiB, 2 ranks", 2, 64 << 10},
		{"Alltoall 256 KiB, 2 ranks", 2, -(64 << 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := worlds(t, tc.n, memtransport.Options{}, nil)
			type bufs struct {
				send, recv         []int32
				counts, sd, rd, rc []int
			}
			bs := make([]bufs, tc.n)
			m := max(tc.count, -tc.count)
			for r := range bs {
				b := &bs[r]
				b.send, b.recv = make([]int32, tc.n*m), make([]int32, tc.n*m)
				b.counts, b.sd, b.rd = make([]int, tc.n), make([]int, tc.n), make([]int, tc.n)
				for j := range tc.n {
					b.counts[j], b.sd[j], b.rd[j] = m, j*m, (tc.n-1-j)*m
				}
			}
			op := func(c *Comm) error {
				b := &bs[c.Rank()]
				if tc.count < 0 {
					return Alltoall(c, b.send, b.recv)
				}
				return Alltoallv(c, b.send, b.counts, b.sd, b.recv, b.counts, b.rd)
			}
			if n := allocs(t, cs, runs, op, op); n != 0 {
				t.Errorf("%v allocations per call", n)
			}
		})
	}
}

// BenchmarkAlltoallv is the exchange of NAS IS class A on 2 ranks: 8 MiB
// to the peer and 8 MiB to itself per rank, over qtransport (one-sided
// rendezvous). Both ranks run in this process; besides the clock it
// reports the processor time of the process per call (cpu-ms/op, both
// ranks, waiting included), which a loaded machine disturbs less.
func BenchmarkAlltoallv(b *testing.B) {
	for _, self := range []bool{true, false} {
		name := "self=8MiB"
		if !self {
			name = "self=0"
		}
		b.Run(name, func(b *testing.B) {
			withTransport("q", func() {
				const n, m = 2, 2 << 20 // int32 per block
				cs := worlds(b, n, memtransport.Options{}, nil)
				counts := [n][]int{}
				for r := range n {
					counts[r] = []int{m, m}
					if !self {
						counts[r][r] = 0
					}
				}
				send := [n][]int32{make([]int32, n*m), make([]int32, n*m)}
				recv := [n][]int32{make([]int32, n*m), make([]int32, n*m)}
				displs := []int{0, m}
				errc := make(chan error, 1)
				start := make(chan int)
				go func() {
					for k := range start {
						var err error
						for range k {
							if err = Alltoallv(cs[1], send[1], counts[1], displs, recv[1], counts[1], displs); err != nil {
								break
							}
						}
						errc <- err
					}
				}()
				defer close(start)
				b.SetBytes(2 * n * m * 4)
				b.ResetTimer()
				cpu0 := processCPU(b)
				start <- b.N
				for range b.N {
					if err := Alltoallv(cs[0], send[0], counts[0], displs, recv[0], counts[0], displs); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				b.ReportMetric((processCPU(b)-cpu0)*1e3/float64(b.N), "cpu-ms/op")
			})
		})
	}
}

// processCPU is the user and system time of this process, in seconds.
func processCPU(tb testing.TB) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
