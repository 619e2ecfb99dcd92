// Command bench measures message passing the way the OSU Micro-Benchmarks
// do, so its figures compare with osu_latency, osu_bw, osu_allreduce and
// osu_barrier run under MPI on the same machine:
//
//	jiarun -np 2 ./bin/bench -test latency -max 1048576
//	jiarun -np 4 ./bin/bench -test allreduce
//
// latency is half the round trip of blocking Send/Recv; bw is a window of
// 64 Isend (the receiver 64 Irecv), WaitAll and a 4-byte ack, in MB/s
// (10^6 B/s); allreduce and barrier are the average time per call over
// ranks. Iteration counts follow OSU 7.4's defaults. Rank 0 prints one
// "size value" line per size.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/comm"
)

func main() {
	test := flag.String("test", "latency", "latency, bw, allreduce or barrier")
	minSize := flag.Int("min", 0, "smallest message size in bytes")
	maxSize := flag.Int("max", 1<<20, "largest message size in bytes")
	flag.Parse()
	jia.MustInit()
	w := jia.World()
	var err error
	switch *test {
	case "latency":
		err = latency(w, *minSize, *maxSize)
	case "bw":
		err = bandwidth(w, max(*minSize, 1), *maxSize)
	case "allreduce":
		err = allreduce(w, max(*minSize, 8), *maxSize)
	case "barrier":
		err = barrier(w)
	default:
		err = fmt.Errorf("-test %q: want latency, bw, allreduce or barrier", *test)
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
	buf := make([]byte, hi)
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

func bandwidth(w *comm.Comm, lo, hi int) error {
	if w.Size() != 2 {
		return fmt.Errorf("bw needs 2 ranks, not %d", w.Size())
	}
	const window = 64
	bufs := make([][]byte, window)
	for i := range bufs {
		bufs[i] = make([]byte, hi)
	}
	reqs := make([]comm.Request, window)
	ack := make([]byte, 4)
	peer := 1 - w.Rank()
	return sizes(lo, hi, func(s int) error {
		skip, n := iterations(s, 100, 10, 20, 2)
		var start time.Time
		for i := 0; i < skip+n; i++ {
			if i == skip {
				start = time.Now()
			}
			var err error
			for j := 0; j < window; j++ {
				if w.Rank() == 0 {
					reqs[j], err = comm.Isend(w, bufs[j][:s], peer, 100)
				} else {
					reqs[j], err = comm.Irecv(w, bufs[j][:s], peer, 100)
				}
				if err != nil {
					return err
				}
			}
			if err := comm.WaitAll(reqs, nil); err != nil {
				return err
			}
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
			mbs := float64(s) * float64(n*window) / time.Since(start).Seconds() / 1e6
			fmt.Printf("%d %.2f\n", s, mbs)
		}
		return nil
	})
}

func allreduce(w *comm.Comm, lo, hi int) error {
	in := make([]float32, hi/4)
	out := make([]float32, hi/4)
	avg := make([]float64, 1)
	return sizes(lo, hi, func(s int) error {
		skip, n := iterations(s, 1000, 100, 100, 10)
		cnt := s / 4
		var start time.Time
		for i := 0; i < skip+n; i++ {
			if i == skip {
				if err := w.Barrier(); err != nil {
					return err
				}
				start = time.Now()
			}
			if err := comm.Allreduce(w, in[:cnt], out[:cnt], comm.Sum); err != nil {
				return err
			}
		}
		us := []float64{float64(time.Since(start).Microseconds()) / float64(n)}
		if err := comm.Allreduce(w, us, avg, comm.Sum); err != nil {
			return err
		}
		if w.Rank() == 0 {
			fmt.Printf("%d %.3f\n", s, avg[0]/float64(w.Size()))
		}
		return nil
	})
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
