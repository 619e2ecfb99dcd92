package npbtest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jiarun/jia/apps/internal/npb"
	"github.com/jiarun/jia/apps/internal/npb/npbtest"
)

// run runs f on n ranks and fails the test on error or after a timeout
// (a deadlock).
func run(t *testing.T, n int, f func(c npb.Comm) error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- npbtest.Run(n, f) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("deadlock: ranks did not finish")
	}
}

// MPI_Allreduce: every rank gets the same element-wise reduction, also in
// place.
func TestAllreduce(t *testing.T) {
	for _, n := range []int{1, 2, 5} {
		run(t, n, func(c npb.Comm) error {
			r := float64(c.Rank())
			in := []float64{r, -r, 1}
			out := make([]float64, 3)
			for _, tc := range []struct {
				op   npb.Op
				want []float64
			}{
				{npb.Sum, []float64{float64(n*(n-1)) / 2, -float64(n*(n-1)) / 2, float64(n)}},
				{npb.Max, []float64{float64(n - 1), 0, 1}},
				{npb.Min, []float64{0, -float64(n - 1), 1}},
			} {
				if err := c.AllreduceFloat64(in, out, tc.op); err != nil {
					return err
				}
				for i := range out {
					if out[i] != tc.want[i] {
						return fmt.Errorf("rank %d %v: got %v, want %v", c.Rank(), tc.op, out, tc.want)
					}
				}
			}
			iv := []int64{int64(c.Rank()) + 1}
			if err := c.AllreduceInt64(iv, iv, npb.Sum); err != nil { // in place
				return err
			}
			if iv[0] != int64(n*(n+1)/2) {
				return fmt.Errorf("in-place int64 sum %d", iv[0])
			}
			return nil
		})
	}
}

// MPI_Alltoall and MPI_Alltoallv: block p of rank r's send buffer lands in
// block r of rank p's receive buffer.
func TestAlltoall(t *testing.T) {
	const n = 4
	run(t, n, func(c npb.Comm) error {
		me := c.Rank()
		send := make([]int32, 2*n)
		for p := 0; p < n; p++ {
			send[2*p], send[2*p+1] = int32(100*me+p), int32(-me)
		}
		recv := make([]int32, 2*n)
		if err := c.AlltoallInt32(send, recv); err != nil {
			return err
		}
		for p := 0; p < n; p++ {
			if recv[2*p] != int32(100*p+me) || recv[2*p+1] != int32(-p) {
				return fmt.Errorf("rank %d: alltoall got %v", me, recv)
			}
		}
		// Alltoallv: rank r sends r+1 copies of value 10r+p to rank p.
		var cs, ds, cr, dr [n]int
		var sv []complex128
		for p := 0; p < n; p++ {
			cs[p], ds[p] = me+1, len(sv)
			for k := 0; k <= me; k++ {
				sv = append(sv, complex(float64(10*me+p), float64(k)))
			}
		}
		total := 0
		for p := 0; p < n; p++ {
			cr[p], dr[p] = p+1, total
			total += p + 1
		}
		rv := make([]complex128, total)
		if err := c.AlltoallvComplex128(sv, cs[:], ds[:], rv, cr[:], dr[:]); err != nil {
			return err
		}
		for p := 0; p < n; p++ {
			for k := 0; k <= p; k++ {
				if want := complex(float64(10*p+me), float64(k)); rv[dr[p]+k] != want {
					return fmt.Errorf("rank %d: alltoallv from %d got %v", me, p, rv[dr[p]:dr[p]+p+1])
				}
			}
		}
		return nil
	})
}

// A ring of Sendrecvs completes even though every send is synchronous
// (MPI_Sendrecv cannot deadlock against itself); sending to oneself and
// to MPI_PROC_NULL work.
func TestSendrecvRingSelfNull(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		run(t, n, func(c npb.Comm) error {
			me := c.Rank()
			right, left := (me+1)%n, (me+n-1)%n
			send := []float64{float64(me), float64(me * me)}
			recv := make([]float64, 2)
			if err := c.SendrecvFloat64(send, right, 7, recv, left, 7); err != nil {
				return err
			}
			if recv[0] != float64(left) || recv[1] != float64(left*left) {
				return fmt.Errorf("rank %d got %v from %d", me, recv, left)
			}
			if err := c.SendrecvFloat64(send, me, 1, recv, me, 1); err != nil {
				return err
			}
			if recv[0] != send[0] {
				return fmt.Errorf("self: got %v", recv)
			}
			return c.SendrecvFloat64(nil, npb.ProcNull, 0, nil, npb.ProcNull, 0)
		})
	}
}

// Messages are matched by source and tag: plain sends (Sendrecv with
// MPI_PROC_NULL as source) and plain receives pair up by tag.
func TestSendrecvMatching(t *testing.T) {
	run(t, 2, func(c npb.Comm) error {
		buf := make([]float64, 1)
		if c.Rank() == 0 {
			if err := c.SendrecvFloat64([]float64{5}, 1, 5, nil, npb.ProcNull, 0); err != nil {
				return err
			}
			return c.SendrecvFloat64([]float64{6}, 1, 6, nil, npb.ProcNull, 0)
		}
		if err := c.SendrecvFloat64(nil, npb.ProcNull, 0, buf, 0, 5); err != nil {
			return err
		}
		if buf[0] != 5 {
			return fmt.Errorf("tag 5 got %v", buf[0])
		}
		if err := c.SendrecvFloat64(nil, npb.ProcNull, 0, buf, 0, 6); err != nil {
			return err
		}
		if buf[0] != 6 {
			return fmt.Errorf("tag 6 got %v", buf[0])
		}
		return nil
	})
}

// A message longer than the receive buffer is an error (MPI_ERR_TRUNCATE)
// on both sides, not a hang.
func TestSendrecvTruncate(t *testing.T) {
	err := npbtest.Run(2, func(c npb.Comm) error {
		other := 1 - c.Rank()
		return c.SendrecvFloat64(make([]float64, 4), other, 0, make([]float64, 2), other, 0)
	})
	if err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("error %v, want truncation", err)
	}
}

// When one rank fails, ranks blocked in a collective or a receive return
// ErrAborted instead of hanging, and Run reports the real error.
func TestAbort(t *testing.T) {
	boom := errors.New("boom")
	done := make(chan error, 1)
	go func() {
		done <- npbtest.Run(3, func(c npb.Comm) error {
			switch c.Rank() {
			case 0:
				return boom
			case 1:
				return c.Barrier()
			default:
				return c.SendrecvFloat64(nil, npb.ProcNull, 0, make([]float64, 1), 0, 0)
			}
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Fatalf("Run returned %v, want boom", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ranks hung after a failure")
	}
}

// Mismatched collective arguments are errors.
func TestCollectiveMismatch(t *testing.T) {
	err := npbtest.Run(2, func(c npb.Comm) error {
		in := make([]float64, 1+c.Rank())
		return c.AllreduceFloat64(in, in, npb.Sum)
	})
	if err == nil {
		t.Fatal("Allreduce with different lengths succeeded")
	}
	err = npbtest.Run(2, func(c npb.Comm) error {
		one := []int{1, 1}
		two := []int{2, 2}
		disp := []int{0, 2}
		recv := make([]int32, 4)
		if c.Rank() == 0 {
			return c.AlltoallvInt32(make([]int32, 4), one, disp, recv, one, disp)
		}
		return c.AlltoallvInt32(make([]int32, 4), one, disp, recv, two, disp)
	})
	if err == nil {
		t.Fatal("Alltoallv with inconsistent counts succeeded")
	}
}
