// Package npbtest runs the NPB kernels in one process: N ranks are N
// goroutines, and each gets an [npb.Comm] whose calls have MPI semantics.
//
// Collectives deposit each rank's buffers in a shared table between two
// barriers, and every rank computes its own result from the table in rank
// order, so all ranks get bit-identical reductions. SendrecvFloat64 is a
// rendezvous: the sender posts its buffer to the receiver's mailbox and
// waits until the receiver has copied it (MPI's synchronous mode), the
// strictest behaviour MPI allows, so an ordering that could deadlock under
// MPI deadlocks here too. When a rank returns an error, every rank blocked
// in a call returns [ErrAborted] instead of hanging.
package npbtest

import (
	"errors"
	"fmt"
	"sync"

	"github.com/jiarun/jia/apps/internal/npb"
)

// ErrAborted is returned by calls on a world in which some rank has failed.
var ErrAborted = errors.New("npbtest: aborted because another rank failed")

// Run starts n ranks, calls f on each with its communicator, and waits for
// all of them. It returns the first error a rank returned that is not
// ErrAborted (or ErrAborted if that is all there is).
func Run(n int, f func(c npb.Comm) error) error {
	if n < 1 {
		return fmt.Errorf("npbtest: %d ranks", n)
	}
	w := NewWorld(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			if err := f(w.Comm(r)); err != nil {
				errs[r] = err
				w.Abort()
			}
		}(r)
	}
	wg.Wait()
	var aborted error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrAborted):
			aborted = err
		default:
			return err
		}
	}
	return aborted
}

// World is a set of n in-process ranks. Run is the usual way to use one;
// code that starts the ranks itself must call Abort when a rank fails, or
// the others may wait for it forever, as MPI ranks would.
type World struct {
	n     int
	comms []*comm

	mu      sync.Mutex // guards the barrier and aborted
	cond    *sync.Cond
	count   int
	gen     uint64
	aborted bool
	abortCh chan struct{}

	// The collective table: slot r holds rank r's arguments between the
	// two barriers of a collective.
	f64   [][]float64
	i64   [][]int64
	i32   [][]int32
	c128  [][]complex128
	cnts  [][]int
	dispv [][]int
	ops   []npb.Op

	boxes []*mailbox
}

// NewWorld makes a world of n ranks; use Comm(r) in rank r's goroutine.
func NewWorld(n int) *World {
	w := &World{
		n: n, abortCh: make(chan struct{}),
		f64: make([][]float64, n), i64: make([][]int64, n), i32: make([][]int32, n),
		c128: make([][]complex128, n), cnts: make([][]int, n), dispv: make([][]int, n),
		ops: make([]npb.Op, n), boxes: make([]*mailbox, n), comms: make([]*comm, n),
	}
	w.cond = sync.NewCond(&w.mu)
	for r := range w.boxes {
		b := &mailbox{}
		b.cond = sync.NewCond(&b.mu)
		w.boxes[r] = b
		w.comms[r] = &comm{w: w, rank: r, env: envelope{src: r, done: make(chan struct{}, 1)}}
	}
	return w
}

// Comm returns rank r's communicator. It must be used by one goroutine.
func (w *World) Comm(r int) npb.Comm { return w.comms[r] }

// Abort makes every pending and future call on the world fail with
// ErrAborted.
func (w *World) Abort() {
	w.mu.Lock()
	if !w.aborted {
		w.aborted = true
		close(w.abortCh)
	}
	w.cond.Broadcast()
	w.mu.Unlock()
	for _, b := range w.boxes {
		b.mu.Lock()
		b.aborted = true
		b.cond.Broadcast()
		b.mu.Unlock()
	}
}

func (w *World) barrier() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.aborted {
		return ErrAborted
	}
	g := w.gen
	w.count++
	if w.count == w.n {
		w.count = 0
		w.gen++
		w.cond.Broadcast()
		return nil
	}
	for g == w.gen && !w.aborted {
		w.cond.Wait()
	}
	if g == w.gen {
		return ErrAborted
	}
	return nil
}

type comm struct {
	w    *World
	rank int
	env  envelope // this rank's one outstanding send

	sf []float64 // reduction scratch
	si []int64
}

func (c *comm) Rank() int      { return c.rank }
func (c *comm) Size() int      { return c.w.n }
func (c *comm) Barrier() error { return c.w.barrier() }

func (c *comm) AllreduceFloat64(in, out []float64, op npb.Op) error {
	if len(in) != len(out) {
		return fmt.Errorf("npbtest: AllreduceFloat64: len(in) %d != len(out) %d", len(in), len(out))
	}
	w := c.w
	w.f64[c.rank], w.ops[c.rank] = in, op
	if err := w.barrier(); err != nil {
		return err
	}
	if err := sameShape(w, len(in), func(r int) int { return len(w.f64[r]) }); err != nil {
		return err
	}
	if cap(c.sf) < len(in) {
		c.sf = make([]float64, len(in))
	}
	s := c.sf[:len(in)]
	copy(s, w.f64[0])
	for r := 1; r < w.n; r++ {
		reduceF(s, w.f64[r], op)
	}
	if err := w.barrier(); err != nil {
		return err
	}
	copy(out, s)
	return nil
}

func (c *comm) AllreduceInt64(in, out []int64, op npb.Op) error {
	if len(in) != len(out) {
		return fmt.Errorf("npbtest: AllreduceInt64: len(in) %d != len(out) %d", len(in), len(out))
	}
	w := c.w
	w.i64[c.rank], w.ops[c.rank] = in, op
	if err := w.barrier(); err != nil {
		return err
	}
	if err := sameShape(w, len(in), func(r int) int { return len(w.i64[r]) }); err != nil {
		return err
	}
	if cap(c.si) < len(in) {
		c.si = make([]int64, len(in))
	}
	s := c.si[:len(in)]
	copy(s, w.i64[0])
	for r := 1; r < w.n; r++ {
		reduceI(s, w.i64[r], op)
	}
	if err := w.barrier(); err != nil {
		return err
	}
	copy(out, s)
	return nil
}

// sameShape checks that every rank passed the same length and operation.
func sameShape(w *World, n int, length func(r int) int) error {
	for r := 0; r < w.n; r++ {
		if length(r) != n || w.ops[r] != w.ops[0] {
			return fmt.Errorf("npbtest: Allreduce: rank %d passed %d elements with %v, rank 0 %d with %v",
				r, length(r), w.ops[r], length(0), w.ops[0])
		}
	}
	return nil
}

func reduceF(s, x []float64, op npb.Op) {
	x = x[:len(s)]
	switch op {
	case npb.Sum:
		for i := range s {
			s[i] += x[i]
		}
	case npb.Max:
		for i := range s {
			if x[i] > s[i] {
				s[i] = x[i]
			}
		}
	case npb.Min:
		for i := range s {
			if x[i] < s[i] {
				s[i] = x[i]
			}
		}
	}
}

func reduceI(s, x []int64, op npb.Op) {
	x = x[:len(s)]
	switch op {
	case npb.Sum:
		for i := range s {
			s[i] += x[i]
		}
	case npb.Max:
		for i := range s {
			s[i] = max(s[i], x[i])
		}
	case npb.Min:
		for i := range s {
			s[i] = min(s[i], x[i])
		}
	}
}

func (c *comm) AlltoallInt32(send, recv []int32) error {
	n := c.w.n
	if len(send) != len(recv) || len(send)%n != 0 {
		return fmt.Errorf("npbtest: AlltoallInt32: len(send) %d, len(recv) %d, %d ranks", len(send), len(recv), n)
	}
	w := c.w
	w.i32[c.rank] = send
	if err := w.barrier(); err != nil {
		return err
	}
	k := len(send) / n
	for p := 0; p < n; p++ {
		if len(w.i32[p]) != len(send) {
			return fmt.Errorf("npbtest: AlltoallInt32: rank %d sends %d elements, rank %d %d", p, len(w.i32[p]), c.rank, len(send))
		}
		copy(recv[p*k:(p+1)*k], w.i32[p][c.rank*k:])
	}
	return w.barrier()
}

func (c *comm) AlltoallvInt32(send []int32, sendCounts, sendDispls []int, recv []int32, recvCounts, recvDispls []int) error {
	w := c.w
	w.i32[c.rank] = send
	return alltoallv(c, "AlltoallvInt32", sendCounts, sendDispls, recvCounts, recvDispls, len(recv),
		func(p, from, to, n int) { copy(recv[to:to+n], w.i32[p][from:from+n]) })
}

func (c *comm) AlltoallvComplex128(send []complex128, sendCounts, sendDispls []int, recv []complex128, recvCounts, recvDispls []int) error {
	w := c.w
	w.c128[c.rank] = send
	return alltoallv(c, "AlltoallvComplex128", sendCounts, sendDispls, recvCounts, recvDispls, len(recv),
		func(p, from, to, n int) { copy(recv[to:to+n], w.c128[p][from:from+n]) })
}

// alltoallv runs the exchange once the caller has put its send buffer in
// the table; move copies n elements from rank p's send buffer at from into
// this rank's receive buffer at to.
func alltoallv(c *comm, name string, sendCounts, sendDispls, recvCounts, recvDispls []int, recvLen int,
	move func(p, from, to, n int)) error {
	w, n := c.w, c.w.n
	if len(sendCounts) != n || len(sendDispls) != n || len(recvCounts) != n || len(recvDispls) != n {
		return fmt.Errorf("npbtest: %s: count and displacement arrays need %d entries", name, n)
	}
	w.cnts[c.rank], w.dispv[c.rank] = sendCounts, sendDispls
	if err := w.barrier(); err != nil {
		return err
	}
	for p := 0; p < n; p++ {
		k, from, to := w.cnts[p][c.rank], w.dispv[p][c.rank], recvDispls[p]
		if k != recvCounts[p] {
			return fmt.Errorf("npbtest: %s: rank %d sends %d elements to rank %d, which expects %d", name, p, k, c.rank, recvCounts[p])
		}
		if to < 0 || to+k > recvLen {
			return fmt.Errorf("npbtest: %s: receive block from rank %d [%d:%d] outside the buffer (%d)", name, p, to, to+k, recvLen)
		}
		move(p, from, to, k)
	}
	return w.barrier()
}

// A mailbox holds the sends posted to one rank, oldest first.
type mailbox struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*envelope
	aborted bool
}

type envelope struct {
	src, tag int
	data     []float64
	done     chan struct{} // receives a token when the receiver has copied data
	err      error         // set by the receiver before signalling done
}

func (c *comm) SendrecvFloat64(send []float64, dst, sendTag int, recv []float64, src, recvTag int) error {
	w := c.w
	if (dst != npb.ProcNull && (dst < 0 || dst >= w.n)) || (src != npb.ProcNull && (src < 0 || src >= w.n)) {
		return fmt.Errorf("npbtest: SendrecvFloat64: rank %d: dst %d or src %d out of range", c.rank, dst, src)
	}
	if dst != npb.ProcNull {
		e := &c.env
		e.tag, e.data, e.err = sendTag, send, nil
		b := w.boxes[dst]
		b.mu.Lock()
		b.queue = append(b.queue, e)
		b.cond.Broadcast()
		b.mu.Unlock()
	}
	var rerr error
	if src != npb.ProcNull {
		b := w.boxes[c.rank]
		b.mu.Lock()
		var e *envelope
		for e == nil {
			for i, m := range b.queue {
				if m.src == src && m.tag == recvTag {
					e = m
					copy(b.queue[i:], b.queue[i+1:])
					b.queue[len(b.queue)-1] = nil
					b.queue = b.queue[:len(b.queue)-1]
					break
				}
			}
			if e == nil {
				if b.aborted {
					b.mu.Unlock()
					return ErrAborted
				}
				b.cond.Wait()
			}
		}
		b.mu.Unlock()
		if len(e.data) > len(recv) {
			rerr = fmt.Errorf("npbtest: SendrecvFloat64: message of %d elements from rank %d (tag %d) truncated: rank %d receives at most %d",
				len(e.data), src, recvTag, c.rank, len(recv))
			e.err = rerr
		} else {
			copy(recv, e.data)
		}
		e.done <- struct{}{}
	}
	if dst != npb.ProcNull {
		select {
		case <-c.env.done:
			if c.env.err != nil && rerr == nil {
				rerr = c.env.err
			}
		case <-w.abortCh:
			return ErrAborted
		}
		c.env.data = nil
	}
	return rerr
}
