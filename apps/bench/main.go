// Command bench measures message passing the way the OSU Micro-Benchmarks
// do, so its figures compare with osu_latency, osu_bw, osu_allreduce and
// osu_barrier run under MPI on the same machine:
//
//	jiarun -np 2 ./bin/bench -test latency -max 1048576
//	jiarun -np 4 ./bin/bench -test allreduce
//
// latency is half the round trip of blocking Send/Recv; bw is a window of
// 64 Isend (the receiver 64 Irecv), WaitAll and a 4-byte ack, in MB/s
// (10^6 B/s); bibw is the same window in both directions at once (MB/s of
// both directions together); mr is bw's window counted in millions of
// messages per second; allreduce, bcast (root 0), alltoall (size per
// destination) and barrier are the average time per call over ranks, in
// µs. vector is the latency of a strided message: blocks of -block bytes
// (float64 elements) with a stride of twice the block, as many as make up
// the size, gathered straight from memory, or packed first when the job
// runs with JIA_COMM_PACK_VECTORS=true. Iteration counts follow OSU 7.4's
// defaults. Rank 0 prints one "size value" line per size.
//
// Before the first test the ranks run barriers for -warmup (default
// 20ms), so that the Go runtime's start-up transient is not timed (see
// warmup). barrier with -rounds n times n consecutive rounds of -iters
// barriers from the job's first collective on (no warm-up), and prints
// "round mean median p90" (µs per call) for each: how fast message passing
// reaches its steady state.
//
//	jiarun -np 2 ./bin/bench -test barrier -rounds 5 -iters 2000
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"time"
	"unsafe"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/comm"
)

func main() {
	test := flag.String("test", "latency", "latency, bw, bibw, mr, vector, allreduce, bcast, alltoall or barrier")
	minSize := flag.Int("min", 0, "smallest message size in bytes")
	maxSize := flag.Int("max", 1<<20, "largest message size in bytes")
	block := flag.Int("block", 64, "vector: block length in bytes (a multiple of 8)")
	rounds := flag.Int("rounds", 0, "barrier: instead of OSU's figure, time this many consecutive rounds of -iters barriers each, from the first call, one line per round")
	iters := flag.Int("iters", 2000, "barrier: calls per round with -rounds")
	warm := flag.Duration("warmup", 20*time.Millisecond, "run barriers for this long before the first test (not with -rounds)")
	flag.Parse()
	jia.MustInit()
	w := jia.World()
	var err error
	if *rounds == 0 || *test != "barrier" {
		err = warmup(w, *warm)
	}
	if err == nil {
		err = run(w, *test, *minSize, *maxSize, *block, *rounds, *iters)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: rank %d: %v\n", w.Rank(), err)
		os.Exit(1)
	}
	if err := jia.Finalize(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// warmup runs barriers until d has passed on rank 0 since every rank
// arrived; rank 0 tells the others every 64 calls whether to go on. A Go process's runtime monitor
// thread (sysmon) polls every 20 µs (plus the kernel's timer slack) for
// the first milliseconds of the process and after a system call that
// blocked, and backs off only after some 50 idle polls; with each rank
// bound to a core, every wake-up takes the core from the rank, which on a
// virtual machine costs tens of microseconds and stalls every rank
// waiting for that one. OSU's 100 warm-up calls last well under a
// millisecond, so without this the first test would time that transient
// rather than message passing.
func warmup(w *comm.Comm, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	// The clock starts when every rank has arrived: a rank that waited
	// for a late one may have blocked in a system call, which starts the
	// transient anew.
	if err := w.Barrier(); err != nil {
		return err
	}
	more := []int32{1}
	for start := time.Now(); more[0] != 0; {
		for i := 0; i < 64; i++ {
			if err := w.Barrier(); err != nil {
				return err
			}
		}
		if w.Rank() == 0 && time.Since(start) >= d {
			more[0] = 0
		}
		if err := comm.Bcast(w, more, 0); err != nil {
			return err
		}
	}
	return nil
}

// run runs one test.
func run(w *comm.Comm, test string, minSize, maxSize, block, rounds, iters int) error {
	var err error
	switch test {
	case "latency":
		err = latency(w, minSize, maxSize)
	case "bw":
		err = bandwidth(w, max(minSize, 1), maxSize, false, false)
	case "bibw":
		err = bandwidth(w, max(minSize, 1), maxSize, true, false)
	case "mr":
		err = bandwidth(w, max(minSize, 1), maxSize, false, true)
	case "vector":
		err = vector(w, minSize, maxSize, block)
	case "bcast":
		err = bcast(w, max(minSize, 1), maxSize)
	case "alltoall":
		err = alltoall(w, max(minSize, 1), maxSize)
	case "allreduce":
		err = allreduce(w, max(minSize, 8), maxSize)
	case "barrier":
		if rounds > 0 {
			err = barrierRounds(w, rounds, iters)
		} else {
			err = barrier(w)
		}
	default:
		err = fmt.Errorf("-test %q: want latency, bw, bibw, mr, vector, allreduce, bcast, alltoall or barrier", test)
	}
	return err
}

// filled returns a slice of n elements whose every byte is 1, as the C
// twin's buffers are (memset to 1): both benchmarks move data from and
// into memory the program has written. A buffer never written is not
// backed by memory of its own yet (a fresh allocation maps the kernel's
// zero page), and copying out of it costs a page fault per page in the
// first use and a slower single-copy path after.
func filled[T any](n int) []T {
	s := make([]T, n)
	if n > 0 {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), n*int(unsafe.Sizeof(s[0])))
		b[0] = 1
		for k := 1; k < len(b); k *= 2 {
			copy(b[k:], b[:k])
		}
	}
	return s
}

// iterations returns OSU's warm-up and timed counts for a size.
func iterations(size int, small, smallSkip, large, largeSkip int) (int, int) {
	if size > 8192 {
		return largeSkip, large
	}
	return smallSkip, small
}

func sizes(lo, hi int, f func(int) error) error {
	if lo == 0 {
		if err := f(0); err != nil {
			return err
		}
		lo = 1
	}
	for s := lo; s <= hi; s *= 2 {
		if err := f(s); err != nil {
			return err
		}
	}
	return nil
}

func latency(w *comm.Comm, lo, hi int) error {
	if w.Size() != 2 {
		return fmt.Errorf("latency needs 2 ranks, not %d", w.Size())
	}
	buf := filled[byte](hi)
	peer := 1 - w.Rank()
	return sizes(lo, hi, func(s int) error {
		skip, n := iterations(s, 10000, 100, 1000, 10)
		var start time.Time
		for i := 0; i < skip+n; i++ {
			if i == skip {
				start = time.Now()
			}
			if w.Rank() == 0 {
				if err := comm.Send(w, buf[:s], peer, 1); err != nil {
					return err
				}
				if _, err := comm.Recv(w, buf[:s], peer, 1); err != nil {
					return err
				}
			} else {
				if _, err := comm.Recv(w, buf[:s], peer, 1); err != nil {
					return err
				}
				if err := comm.Send(w, buf[:s], peer, 1); err != nil {
					return err
				}
			}
		}
		if w.Rank() == 0 {
			us := float64(time.Since(start).Microseconds()) / float64(2*n)
			fmt.Printf("%d %.3f\n", s, us)
		}
		return nil
	})
}

// bandwidth runs OSU's bw (bi false), bibw (bi true) and, counting
// messages instead of bytes, mbw_mr (rate true).
func bandwidth(w *comm.Comm, lo, hi int, bi, rate bool) error {
	if w.Size() != 2 {
		return fmt.Errorf("bandwidth needs 2 ranks, not %d", w.Size())
	}
	const window = 64
	sbufs, rbufs := make([][]byte, window), make([][]byte, window)
	for i := range sbufs {
		sbufs[i], rbufs[i] = filled[byte](hi), filled[byte](hi)
	}
	reqs := make([]comm.Request, 0, 2*window)
	ack := make([]byte, 4)
	peer := 1 - w.Rank()
	return sizes(lo, hi, func(s int) error {
		skip, n := iterations(s, 100, 10, 20, 2)
		var start time.Time
		for i := 0; i < skip+n; i++ {
			if i == skip {
				start = time.Now()
			}
			reqs = reqs[:0]
			for j := 0; j < window; j++ {
				if w.Rank() == 1 || bi {
					q, err := comm.Irecv(w, rbufs[j][:s], peer, 100)
					if err != nil {
						return err
					}
					reqs = append(reqs, q)
				}
			}
			for j := 0; j < window; j++ {
				if w.Rank() == 0 || bi {
					q, err := comm.Isend(w, sbufs[j][:s], peer, 100)
					if err != nil {
						return err
					}
					reqs = append(reqs, q)
				}
			}
			if err := comm.WaitAll(reqs, nil); err != nil {
				return err
			}
			var err error
			if w.Rank() == 0 {
				_, err = comm.Recv(w, ack, peer, 101)
			} else {
				err = comm.Send(w, ack, peer, 101)
			}
			if err != nil {
				return err
			}
		}
		if w.Rank() == 0 {
			secs := time.Since(start).Seconds()
			switch {
			case rate:
				fmt.Printf("%d %.3f\n", s, float64(n*window)/secs/1e6)
			case bi:
				fmt.Printf("%d %.2f\n", s, 2*float64(s)*float64(n*window)/secs/1e6)
			default:
				fmt.Printf("%d %.2f\n", s, float64(s)*float64(n*window)/secs/1e6)
			}
		}
		return nil
	})
}

// vector is latency for a strided message of size bytes: blocks of block
// bytes, a stride of two blocks.
func vector(w *comm.Comm, lo, hi, block int) error {
	if w.Size() != 2 {
		return fmt.Errorf("vector needs 2 ranks, not %d", w.Size())
	}
	if block < 8 || block%8 != 0 {
		return fmt.Errorf("-block %d: want a positive multiple of 8", block)
	}
	bl := block / 8
	data := filled[float64](2 * max(hi/8, bl))
	peer := 1 - w.Rank()
	return sizes(max(lo, block), hi, func(s int) error {
		v := comm.Vector[float64]{Data: data, Count: s / block, BlockLen: bl, Stride: 2 * bl}
		skip, n := iterations(s, 10000, 100, 1000, 10)
		var start time.Time
		for i := 0; i < skip+n; i++ {
			if i == skip {
				start = time.Now()
			}
			if w.Rank() == 0 {
				if err := comm.SendVector(w, v, peer, 1); err != nil {
					return err
				}
				if _, err := comm.RecvVector(w, v, peer, 1); err != nil {
					return err
				}
			} else {
				if _, err := comm.RecvVector(w, v, peer, 1); err != nil {
					return err
				}
				if err := comm.SendVector(w, v, peer, 1); err != nil {
					return err
				}
			}
		}
		if w.Rank() == 0 {
			fmt.Printf("%d %.3f\n", s, time.Since(start).Seconds()*1e6/float64(2*n))
		}
		return nil
	})
}

// collective times f per call, averaged over ranks, for every size, as
// OSU's collective benchmarks do.
func collective(w *comm.Comm, lo, hi int, f func(size int) error) error {
	avg := make([]float64, 1)
	return sizes(lo, hi, func(s int) error {
		skip, n := iterations(s, 1000, 100, 100, 10)
		var start time.Time
		for i := 0; i < skip+n; i++ {
			if i == skip {
				if err := w.Barrier(); err != nil {
					return err
				}
				start = time.Now()
			}
			if err := f(s); err != nil {
				return err
			}
		}
		us := []float64{time.Since(start).Seconds() * 1e6 / float64(n)}
		if err := comm.Allreduce(w, us, avg, comm.Sum); err != nil {
			return err
		}
		if w.Rank() == 0 {
			fmt.Printf("%d %.3f\n", s, avg[0]/float64(w.Size()))
		}
		return nil
	})
}

func bcast(w *comm.Comm, lo, hi int) error {
	buf := filled[byte](hi)
	return collective(w, lo, hi, func(s int) error { return comm.Bcast(w, buf[:s], 0) })
}

func alltoall(w *comm.Comm, lo, hi int) error {
	n := w.Size()
	in, out := filled[byte](n*hi), filled[byte](n*hi)
	return collective(w, lo, hi, func(s int) error { return comm.Alltoall(w, in[:n*s], out[:n*s]) })
}

func allreduce(w *comm.Comm, lo, hi int) error {
	in, out := filled[float32](hi/4), filled[float32](hi/4)
	return collective(w, lo, hi, func(s int) error { return comm.Allreduce(w, in[:s/4], out[:s/4], comm.Sum) })
}

func barrier(w *comm.Comm) error {
	const skip, n = 100, 1000
	var start time.Time
	for i := 0; i < skip+n; i++ {
		if i == skip {
			start = time.Now()
		}
		if err := w.Barrier(); err != nil {
			return err
		}
	}
	us := []float64{float64(time.Since(start).Microseconds()) / n}
	avg := make([]float64, 1)
	if err := comm.Allreduce(w, us, avg, comm.Sum); err != nil {
		return err
	}
	if w.Rank() == 0 {
		fmt.Printf("0 %.3f\n", avg[0]/float64(w.Size()))
	}
	return nil
}

// barrierRounds times rounds consecutive rounds of iters barriers each,
// starting with the job's first collective, and prints for each round
// "round mean median p90" in µs per call: the mean averaged over ranks,
// the median and 90th percentile of rank 0's calls. It shows how long
// message passing takes to reach its steady state; the median is robust
// against the time slices that other processes take on a busy machine.
func barrierRounds(w *comm.Comm, rounds, iters int) error {
	if iters <= 0 {
		return fmt.Errorf("-iters %d: want a positive count", iters)
	}
	us := make([]float64, rounds)
	calls := make([][]time.Duration, rounds)
	for r := range us {
		d := make([]time.Duration, iters)
		start := time.Now()
		for i := range d {
			t0 := time.Now()
			if err := w.Barrier(); err != nil {
				return err
			}
			d[i] = time.Since(t0)
		}
		us[r] = time.Since(start).Seconds() * 1e6 / float64(iters)
		calls[r] = d
	}
	avg := make([]float64, rounds)
	if err := comm.Allreduce(w, us, avg, comm.Sum); err != nil {
		return err
	}
	if w.Rank() == 0 {
		for r, v := range avg {
			d := calls[r]
			slices.Sort(d)
			fmt.Printf("%d %.3f %.3f %.3f\n", r, v/float64(w.Size()),
				d[len(d)/2].Seconds()*1e6, d[len(d)*9/10].Seconds()*1e6)
		}
	}
	return nil
}
