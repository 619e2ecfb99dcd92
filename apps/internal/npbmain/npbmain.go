// Package npbmain is the main program of the bundled NAS kernels: it parses
// -class, runs the kernel on jia.World through the message-passing layer,
// prints NPB's report on rank 0 and exits 0 only when the result verifies.
package npbmain

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/apps/internal/npb"
	"github.com/jiarun/jia/comm"
)

// Main runs kernel ("EP", "IS", "CG", "MG" or "FT") as a jiarun program.
func Main(kernel string) {
	class := flag.String("class", "S", "problem class: S, W, A, B or C")
	flag.Parse()
	cl := strings.ToUpper(*class)
	jia.MustInit()
	rank, size := jia.Rank(), jia.Size()
	if len(cl) != 1 {
		fail(rank, fmt.Errorf("-class %q: want one of S, W, A, B, C", *class))
	}
	// A rank count the kernel cannot use is an error before any work.
	if err := npb.CheckRanks(kernel, cl[0], size); err != nil {
		if rank == 0 {
			fmt.Fprintln(os.Stderr, err)
		}
		// Every rank waits until rank 0 has written the message: a rank
		// that exited first would have the job stopped, rank 0 with it,
		// perhaps before its message was out.
		jia.World().Barrier()
		os.Exit(2)
	}
	res, err := npb.Run(kernel, Adapt(jia.World()), cl[0])
	if err != nil {
		fail(rank, err)
	}
	if rank == 0 {
		res.Report(os.Stdout)
	}
	if err := jia.Finalize(); err != nil {
		fail(rank, err)
	}
	if !res.Verified {
		os.Exit(1)
	}
}

func fail(rank int, err error) {
	fmt.Fprintf(os.Stderr, "rank %d: %v\n", rank, err)
	os.Exit(1)
}

// Adapt returns c as the kernels' communicator.
func Adapt(c *comm.Comm) npb.Comm { return adapter{c} }

type adapter struct{ c *comm.Comm }

func (a adapter) Rank() int      { return a.c.Rank() }
func (a adapter) Size() int      { return a.c.Size() }
func (a adapter) Barrier() error { return a.c.Barrier() }

func op(o npb.Op) comm.Op {
	switch o {
	case npb.Max:
		return comm.Max
	case npb.Min:
		return comm.Min
	}
	return comm.Sum
}

func (a adapter) AllreduceFloat64(in, out []float64, o npb.Op) error {
	if len(in) > 0 && len(out) > 0 && &in[0] == &out[0] {
		in = append([]float64(nil), in...)
	}
	return comm.Allreduce(a.c, in, out, op(o))
}

func (a adapter) AllreduceInt64(in, out []int64, o npb.Op) error {
	if len(in) > 0 && len(out) > 0 && &in[0] == &out[0] {
		in = append([]int64(nil), in...)
	}
	return comm.Allreduce(a.c, in, out, op(o))
}

func (a adapter) AlltoallInt32(send, recv []int32) error { return comm.Alltoall(a.c, send, recv) }

func (a adapter) AlltoallvInt32(send []int32, sc, sd []int, recv []int32, rc, rd []int) error {
	return comm.Alltoallv(a.c, send, sc, sd, recv, rc, rd)
}

func (a adapter) AlltoallvComplex128(send []complex128, sc, sd []int, recv []complex128, rc, rd []int) error {
	return comm.Alltoallv(a.c, send, sc, sd, recv, rc, rd)
}

func (a adapter) SendrecvFloat64(send []float64, dst, sendTag int, recv []float64, src, recvTag int) error {
	if dst == npb.ProcNull {
		dst = comm.ProcNull
	}
	if src == npb.ProcNull {
		src = comm.ProcNull
	}
	_, err := comm.Sendrecv(a.c, send, dst, sendTag, recv, src, recvTag)
	return err
}
