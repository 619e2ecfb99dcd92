package comm

import (
	"errors"
	"fmt"

	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/comm/transport"
)

// Vector is a strided layout over Data (MPI_Type_vector): Count blocks of
// BlockLen elements, the starts of consecutive blocks Stride elements
// apart. A column of a row-major n×m matrix is Vector{Data: a, Count: n,
// BlockLen: 1, Stride: m}. Blocks must not overlap (Stride ≥ BlockLen) and
// must lie inside Data. The message is the blocks' elements in order;
// sends take them straight from Data (a gather list) where the transport
// allows, receives scatter into Data.
type Vector[T Elem] struct {
	Data                    []T
	Count, BlockLen, Stride int
}

// Len returns the number of elements of the message: Count·BlockLen.
func (v Vector[T]) Len() int { return v.Count * v.BlockLen }

func (v Vector[T]) buf() proto.Buf {
	es := elemSize[T]()
	if v.Count == 0 || v.BlockLen == 0 {
		return proto.Vector(asBytes(v.Data), 0, 0, 0)
	}
	return proto.Vector(asBytes(v.Data), v.Count, v.BlockLen*es, v.Stride*es)
}

func (v Vector[T]) check(c *Comm, call string) error {
	if v.Count < 0 || v.BlockLen < 0 || (v.Count > 0 && v.BlockLen > 0 && v.Stride < v.BlockLen) {
		return c.errorf(call, noPeer, noTag, ErrBuffer, "vector count %d, block %d, stride %d", v.Count, v.BlockLen, v.Stride)
	}
	if v.Count > 0 && v.BlockLen > 0 {
		if ext := (v.Count-1)*v.Stride + v.BlockLen; ext > len(v.Data) {
			return c.errorf(call, noPeer, noTag, ErrBuffer, "vector spans %d elements of %d", ext, len(v.Data))
		}
	}
	return nil
}

// Request is a handle to a non-blocking operation from Isend or Irecv
// (MPI_Request). It is a small value: copy it freely. Once Wait, Test,
// WaitAll, WaitAny or TestAll has reported the operation complete the
// handle is inactive (MPI_REQUEST_NULL): the request object went back to
// a pool, and calls on the handle return at once with an empty Status.
// The zero Request is inactive.
type Request struct {
	r   *request
	gen uint32
}

func (q Request) live() *request {
	if q.r == nil || q.r.gen.Load() != q.gen {
		return nil
	}
	return q.r
}

// Active reports whether the request has not been reported complete yet.
func (q Request) Active() bool { return q.live() != nil }

var emptyStatus = Status{Source: AnySource, Tag: AnyTag}

// finish turns a completed request into its Status and error and recycles
// it. gen is the generation the caller's handle names: of several callers
// reporting the same completion (two goroutines waiting on copies of one
// Request) only the first gets the result; the others see an inactive
// handle.
func finish(r *request, gen uint32) (Status, error) {
	st, ok, err := claim(r, gen)
	if ok {
		r.p.release(r)
	}
	return st, err
}

// claim is finish without the recycling: ok reports that the caller got
// the result and must recycle r.
func claim(r *request, gen uint32) (Status, bool, error) {
	if !r.gen.CompareAndSwap(gen, gen+1) {
		return emptyStatus, false, nil
	}
	st, err := r.result()
	return st, true, err
}

// result is the Status and error of a completed request.
func (r *request) result() (Status, error) {
	op := &r.op
	st := Status{Source: int(op.Status.Source), Tag: int(op.Status.Tag), Bytes: op.Status.Len}
	if op.Kind == proto.OpSend {
		st = Status{Source: r.c.rank, Tag: int(op.Tag)}
	} else if r.elem > 0 {
		st.Count = st.Bytes / r.elem
	}
	var err error
	if op.Err != nil {
		err = r.opError()
	}
	return st, err
}

func (r *request) opError() error {
	op := &r.op
	c := r.c
	switch {
	case errors.Is(op.Err, proto.ErrTruncate):
		return c.errorf(r.call, int(op.Status.Source), int(op.Status.Tag), ErrTruncate,
			"%d-byte message into a %d-byte buffer", op.Status.MsgLen, op.Buf.Len())
	case errors.Is(op.Err, proto.ErrCanceled):
		return c.errorf(r.call, int(op.Peer), int(op.Tag), ErrCanceled, "")
	}
	return c.errorf(r.call, int(op.Peer), int(op.Tag), op.Err, "")
}

// Wait blocks until the operation completes and returns its Status (for a
// receive) and error (MPI_Wait). A truncated receive returns an error
// wrapping ErrTruncate; the Status then counts the bytes delivered.
func (q Request) Wait() (Status, error) {
	r := q.live()
	if r == nil {
		return emptyStatus, nil
	}
	if err := r.p.wait(r, q.gen); err != nil { // wait posts held messages first
		return Status{}, r.fail(err)
	}
	st, mine, err := claim(r, q.gen)
	if mine {
		if err == nil {
			err = r.drained()
		}
		r.p.release(r)
	}
	return st, err
}

// drained waits, for a completed send the caller has claimed, until the
// messages to its destination have left the transport's backlog
// (proc.drain); for a receive it does nothing.
func (r *request) drained() error {
	if r.op.Kind != proto.OpSend {
		return nil
	}
	if err := r.p.drain(int(r.op.Dest)); err != nil {
		return r.fail(err)
	}
	return nil
}

// fail is the error of a request that cannot complete because the rank's
// message passing broke.
func (r *request) fail(err error) error {
	return r.c.errorf(r.call, int(r.op.Peer), int(r.op.Tag), err, "")
}

// Test reports whether the operation has completed, and if so its Status
// and error (MPI_Test). It makes progress but does not block.
func (q Request) Test() (Status, bool, error) {
	r := q.live()
	if r == nil {
		return emptyStatus, true, nil
	}
	r.p.flush()
	if !r.op.Done() {
		r.p.progress(1)
		if !r.op.Done() {
			return Status{}, false, nil
		}
	}
	st, err := finish(r, q.gen)
	return st, true, err
}

// Cancel cancels a receive that has not matched a message yet
// (MPI_Cancel); its Wait then returns an error wrapping ErrCanceled. It
// reports whether the receive was canceled. Sends cannot be canceled.
func (q Request) Cancel() bool {
	r := q.live()
	if r == nil || r.op.Kind != proto.OpRecv {
		return false
	}
	p := r.p
	p.mu.Lock()
	ok := p.eng.Cancel(&r.op)
	p.run()
	p.mu.Unlock()
	return ok
}

// WaitAll waits for every request (MPI_Waitall), stores the Status of
// reqs[i] in sts[i] when sts is not nil, and makes every handle in reqs
// inactive. It returns the errors of the failed operations, joined.
func WaitAll(reqs []Request, sts []Status) error {
	var errs []error
	var rel releaser
	defer rel.flush()
	for i, q := range reqs {
		r := q.live()
		if r == nil {
			if sts != nil {
				sts[i] = emptyStatus
			}
			continue
		}
		if err := r.p.wait(r, q.gen); err != nil { // wait posts held messages first
			return errors.Join(append(errs, r.fail(err))...)
		}
		st, mine, err := claim(r, q.gen)
		if mine {
			if err == nil {
				err = r.drained()
			}
			rel.add(r)
		}
		if sts != nil {
			sts[i] = st
		}
		if err != nil {
			errs = append(errs, err)
		}
		reqs[i] = Request{}
	}
	return errors.Join(errs...)
}

// TestAll reports whether every request has completed (MPI_Testall). If
// so, it stores the statuses as WaitAll does, makes the handles inactive
// and returns the joined errors; otherwise it changes nothing.
func TestAll(reqs []Request, sts []Status) (bool, error) {
	var p *proc
	for _, q := range reqs {
		if r := q.live(); r != nil {
			p = r.p
			break
		}
	}
	if p != nil {
		p.flush()
		p.progress(1)
	}
	for _, q := range reqs {
		if r := q.live(); r != nil && !r.op.Done() {
			return false, nil
		}
	}
	return true, WaitAll(reqs, sts)
}

// WaitAny waits until one of the requests completes (MPI_Waitany) and
// returns its index, Status and error; that handle becomes inactive. If no
// request is active it returns -1 at once.
func WaitAny(reqs []Request) (int, Status, error) {
	var b backoff
	for {
		var p *proc
		for i, q := range reqs {
			r := q.live()
			if r == nil {
				continue
			}
			p = r.p
			if r.op.Done() {
				st, err := finish(r, q.gen)
				reqs[i] = Request{}
				return i, st, err
			}
		}
		if p == nil {
			return -1, emptyStatus, nil
		}
		p.flush()
		p.progress(idleChecks)
		if p.failed.Load() {
			return -1, Status{}, &Error{Call: "WaitAny", Comm: "?", Peer: noPeer, Tag: noTag, Err: p.fatalError()}
		}
		p.idle(&b)
	}
}

// nullRequest is an already complete request for ProcNull.
func (c *Comm) nullRequest(call string, recv bool) (*request, error) {
	p := c.p
	p.mu.Lock()
	r := p.getReq()
	r.c, r.call = c, call
	r.op.Kind = proto.OpSend
	if recv {
		r.op.Kind = proto.OpRecv
		r.op.Status.Source, r.op.Status.Tag = ProcNull, AnyTag
	}
	r.op.Tag = AnyTag
	r.op.SetDone()
	p.mu.Unlock()
	return r, nil
}

// isend starts a send of b to rank dst on context ctx.
func (c *Comm) isend(call string, b proto.Buf, ctx uint32, dst, tag int) (*request, error) {
	if err := c.check(call); err != nil {
		return nil, err
	}
	if dst == ProcNull {
		return c.nullRequest(call, false)
	}
	if dst < 0 || dst >= c.size {
		return nil, c.errorf(call, dst, tag, ErrRank, "communicator has %d ranks", c.size)
	}
	if tag < 0 || tag > TagUB {
		return nil, c.errorf(call, dst, tag, ErrTag, "")
	}
	p := c.p
	if b.IsContig() {
		if dest := c.WorldRank(dst); len(b.B) <= p.eng.EagerLimit(dest) {
			return c.isendEager(call, b.B, ctx, dst, dest, tag)
		}
	}
	p.mu.Lock()
	r := c.sendReq(call, b, ctx, dst, tag)
	if err := p.startSend(r); err != nil {
		r.gen.Add(1)
		p.putReq(r)
		p.mu.Unlock()
		return nil, c.errorf(call, dst, tag, err, "")
	}
	p.mu.Unlock()
	return r, nil
}

// irecv posts a receive into b from rank src on context ctx.
func (c *Comm) irecv(call string, b proto.Buf, elem int, ctx uint32, src, tag int) (*request, error) {
	if err := c.check(call); err != nil {
		return nil, err
	}
	if src == ProcNull {
		return c.nullRequest(call, true)
	}
	if src != AnySource && (src < 0 || src >= c.size) {
		return nil, c.errorf(call, src, tag, ErrRank, "communicator has %d ranks", c.size)
	}
	if tag != AnyTag && (tag < 0 || tag > TagUB) {
		return nil, c.errorf(call, src, tag, ErrTag, "")
	}
	p := c.p
	p.mu.Lock()
	r := c.recvReq(call, b, elem, ctx, src, tag)
	if err := p.startRecv(r); err != nil {
		r.gen.Add(1)
		p.putReq(r)
		p.mu.Unlock()
		return nil, c.errorf(call, src, tag, err, "")
	}
	p.mu.Unlock()
	return r, nil
}

// sendReq takes a request from the pool and fills it in for a send of b
// to rank dst of c; the caller holds c.p.mu.
func (c *Comm) sendReq(call string, b proto.Buf, ctx uint32, dst, tag int) *request {
	r := c.p.getReq()
	r.c, r.call = c, call
	op := &r.op
	op.Ctx, op.Rank, op.Peer, op.Tag = ctx, int32(c.rank), int32(dst), int32(tag)
	op.Dest = c.WorldRank(dst)
	op.Buf = b
	return r
}

// recvReq is sendReq for a receive into b from rank src (or AnySource).
func (c *Comm) recvReq(call string, b proto.Buf, elem int, ctx uint32, src, tag int) *request {
	r := c.p.getReq()
	r.c, r.call, r.elem = c, call, elem
	op := &r.op
	op.Ctx, op.Peer, op.Tag = ctx, int32(src), int32(tag)
	op.Buf = b
	op.Quiet = true // nothing to release at completion
	return r
}

// send is a blocking send (Send, SendVector): isend and the wait for it in
// one. The request never becomes a handle, so an eager send, complete once
// started, is recycled in the critical section that started it.
func (c *Comm) send(call string, b proto.Buf, ctx uint32, dst, tag int) error {
	if err := c.check(call); err != nil {
		return err
	}
	if dst < 0 || dst >= c.size || tag < 0 || tag > TagUB {
		// ProcNull and the argument errors.
		return waitSend(c.isend(call, b, ctx, dst, tag))
	}
	p := c.p
	if b.IsContig() {
		if dest := c.WorldRank(dst); len(b.B) <= p.eng.EagerLimit(dest) {
			return c.sendEager(call, b.B, ctx, dst, dest, tag, false)
		}
	}
	p.mu.Lock()
	r := c.sendReq(call, b, ctx, dst, tag)
	op := &r.op
	if err := p.startSend(r); err != nil {
		p.putReq(r)
		p.mu.Unlock()
		return c.errorf(call, dst, tag, err, "")
	}
	if op.Done() {
		_, err := r.result()
		p.putReq(r)
		p.mu.Unlock()
		return err
	}
	p.mu.Unlock()
	_, err := p.await(r)
	return err
}

// A short header must hold an eager header (a negative constant does not
// compile as a uint).
const _ = uint(transport.ShortHeaderLen - proto.EagerHeader)

// sendEager is the blocking send of a contiguous message within the eager
// limit to transport rank dest (rank dst of c): the engine would only emit
// its one message and complete it, so the message goes straight to the
// transport, without a request. Messages of one goroutine stay in order:
// every earlier send of the goroutine reached the transport before its
// call returned. When the transport had to keep the message (or earlier
// ones to dest) in its backlog, the call drives progress until the backlog
// has left (transport.Backlogger): a rank that streams blocking sends to a
// slower one then waits for it, as MPI_Send may, rather than buffering
// without bound.
//
// With held, a transport that batches (transport.Batcher) may hold the
// message back to post it with later ones; every wait, test, poll and
// blocking send posts it.
func (c *Comm) sendEager(call string, b []byte, ctx uint32, dst, dest, tag int, held bool) error {
	p := c.p
	if p.failed.Load() {
		return c.errorf(call, dst, tag, p.fatalError(), "")
	}
	var err error
	switch {
	case held && p.batch != nil:
		lo, hi := proto.EagerWords(ctx, int32(c.rank), int32(tag))
		err = p.batch.SendShortHeld(dest, transport.ShortHeader{Lo: lo, Hi: hi}, proto.EagerHeader, b)
	case p.short != nil:
		lo, hi := proto.EagerWords(ctx, int32(c.rank), int32(tag))
		err = p.short.SendShort(dest, transport.ShortHeader{Lo: lo, Hi: hi}, proto.EagerHeader, b)
	default:
		h := proto.Header{Kind: proto.KEager, Ctx: ctx, Src: int32(c.rank), Tag: int32(tag)}
		p.mu.Lock()
		n := proto.Encode(p.hdr[:], &h)
		segs := p.segs[:0]
		if len(b) > 0 {
			segs = append(segs, b)
		}
		err = p.tr.Send(dest, p.hdr[:n], segs)
		clear(segs)
		p.segs = segs[:0]
		p.mu.Unlock()
	}
	if err == nil && !held {
		err = p.drain(dest)
	}
	if err != nil {
		return c.errorf(call, dst, tag, err, "")
	}
	return nil
}

// isendEager is isend of a contiguous message within the eager limit: it
// sends the message as sendEager does (without mu or the engine, which
// would only emit the message and complete the send) and returns a
// request that is complete already.
func (c *Comm) isendEager(call string, b []byte, ctx uint32, dst, dest, tag int) (*request, error) {
	if err := c.sendEager(call, b, ctx, dst, dest, tag, true); err != nil {
		return nil, err
	}
	r := c.p.takeReq()
	r.c, r.call, r.pooled, r.light = c, call, true, true
	op := &r.op
	op.Kind = proto.OpSend
	op.Ctx, op.Rank, op.Peer, op.Tag = ctx, int32(c.rank), int32(dst), int32(tag)
	op.Dest = dest
	op.SetDone()
	return r, nil
}

// recv is a blocking receive (Recv, RecvVector): irecv and the wait for it
// in one. Right after posting the receive it polls the transport once in
// the same critical section, and a receive complete then is recycled
// there.
func (c *Comm) recv(call string, b proto.Buf, elem int, ctx uint32, src, tag int) (Status, error) {
	if err := c.check(call); err != nil {
		return Status{}, err
	}
	if src != AnySource && (src < 0 || src >= c.size) || tag != AnyTag && (tag < 0 || tag > TagUB) {
		// ProcNull and the argument errors.
		return waitRecv(c.irecv(call, b, elem, ctx, src, tag))
	}
	p := c.p
	spent := 0 // rounds of waiting recvDirect spent
	if p.take != nil && src != AnySource && b.IsContig() {
		if from := c.WorldRank(src); from != p.rank && p.take.Takes(from) {
			st, ok, n := c.recvDirect(b.B, elem, ctx, src, tag, from)
			if ok {
				return st, nil
			}
			spent = n
		}
	}
	p.mu.Lock()
	r := c.recvReq(call, b, elem, ctx, src, tag)
	op := &r.op
	if err := p.startRecv(r); err != nil {
		p.putReq(r)
		p.mu.Unlock()
		return Status{}, c.errorf(call, src, tag, err, "")
	}
	from := -1
	if !op.Done() {
		from = p.watch(r)
		if news := from >= 0 && p.take.Arrived(from); news || !p.quiet(1) {
			p.step(from, news)
		}
	}
	if op.Done() {
		st, err := r.result()
		p.putReq(r)
		p.mu.Unlock()
		return st, err
	}
	if from >= 0 && !op.Posted() {
		from = -1
	}
	p.mu.Unlock()
	return p.awaitFrom(r, from, 1+spent)
}

func handle(r *request, err error) (Request, error) {
	if err != nil {
		return Request{}, err
	}
	return Request{r: r, gen: r.gen.Load()}, nil
}

// waitSend waits for a send request of the calling goroutine's own (one
// that never became a Request handle) and recycles it.
func waitSend(r *request, err error) error {
	if err != nil {
		return err
	}
	_, err = r.p.await(r)
	return err
}

// waitRecv is waitSend for a receive, with its Status.
func waitRecv(r *request, err error) (Status, error) {
	if err != nil {
		return Status{}, err
	}
	return r.p.await(r)
}

// Send sends buf to rank dst with tag (MPI_Send). It returns when buf may
// be reused: at once for a message up to the eager limit, after the
// receiver has taken the data for a larger one.
func Send[T Elem](c *Comm, buf []T, dst, tag int) error {
	return c.send("Send", proto.Contig(asBytes(buf)), c.ctxOr(), dst, tag)
}

// Recv receives a message from rank src (or AnySource) with tag (or
// AnyTag) into buf (MPI_Recv). A message longer than buf fills buf and
// returns an error wrapping ErrTruncate.
func Recv[T Elem](c *Comm, buf []T, src, tag int) (Status, error) {
	return c.recv("Recv", proto.Contig(asBytes(buf)), elemSize[T](), c.ctxOr(), src, tag)
}

// Isend starts a send (MPI_Isend); buf must not be modified until the
// request completes. A message within the eager limit is copied at once
// and the request completes; consecutive ones may be posted together, at
// the rank's next comm call (any Wait, Test, Recv, Send, probe or
// collective) or at the latest about 100 µs later if it makes none.
func Isend[T Elem](c *Comm, buf []T, dst, tag int) (Request, error) {
	return handle(c.isend("Isend", proto.Contig(asBytes(buf)), c.ctxOr(), dst, tag))
}

// Irecv starts a receive (MPI_Irecv); buf must not be touched until the
// request completes.
func Irecv[T Elem](c *Comm, buf []T, src, tag int) (Request, error) {
	return handle(c.irecv("Irecv", proto.Contig(asBytes(buf)), elemSize[T](), c.ctxOr(), src, tag))
}

// Sendrecv sends sendbuf to dst and receives into recvbuf from src at the
// same time (MPI_Sendrecv), so that exchanges in a ring cannot deadlock.
func Sendrecv[T Elem](c *Comm, sendbuf []T, dst, sendtag int, recvbuf []T, src, recvtag int) (Status, error) {
	st, serr, rerr := c.sendrecv("Sendrecv", asBytes(sendbuf), c.ctxOr(), dst, sendtag, asBytes(recvbuf), elemSize[T](), src, recvtag)
	return st, errors.Join(serr, rerr)
}

// sendrecv sends sb to rank dst with stag and receives into rb (elements
// of elem bytes) from src with rtag at the same time, on context ctx
// (Sendrecv, and the collectives' exchanges), and returns the send's and
// the receive's errors apart. An eager send completes without dst, so it
// goes first and the receive follows as a blocking one (which may take its
// message straight from the transport, recvDirect); a larger send waits
// for dst, which may be waiting for this rank's message, so the receive is
// posted first. A send that cannot start cancels the posted receive.
func (c *Comm) sendrecv(call string, sb []byte, ctx uint32, dst, stag int, rb []byte, elem int, src, rtag int) (st Status, serr, rerr error) {
	if uint(dst) < uint(c.size) && len(sb) <= c.p.eng.EagerLimit(c.WorldRank(dst)) {
		if serr = c.send(call, proto.Contig(sb), ctx, dst, stag); serr != nil {
			return Status{}, serr, nil
		}
		st, rerr = c.recv(call, proto.Contig(rb), elem, ctx, src, rtag)
		return st, nil, rerr
	}
	rr, err := c.irecv(call, proto.Contig(rb), elem, ctx, src, rtag)
	if err != nil {
		return Status{}, nil, err
	}
	sr, err := c.isend(call, proto.Contig(sb), ctx, dst, stag)
	if err != nil {
		c.p.mu.Lock()
		c.p.eng.Cancel(&rr.op)
		c.p.run()
		c.p.mu.Unlock()
		waitRecv(rr, nil)
		return Status{}, err, nil
	}
	serr = waitSend(sr, nil)
	st, rerr = waitRecv(rr, nil)
	return st, serr, rerr
}

// SendVector sends the elements of v (MPI_Send with a vector datatype).
func SendVector[T Elem](c *Comm, v Vector[T], dst, tag int) error {
	if err := v.check(c, "SendVector"); err != nil {
		return err
	}
	return c.send("SendVector", v.buf(), c.ctxOr(), dst, tag)
}

// RecvVector receives into the elements of v.
func RecvVector[T Elem](c *Comm, v Vector[T], src, tag int) (Status, error) {
	if err := v.check(c, "RecvVector"); err != nil {
		return Status{}, err
	}
	return c.recv("RecvVector", v.buf(), elemSize[T](), c.ctxOr(), src, tag)
}

// IsendVector starts a send of the elements of v.
func IsendVector[T Elem](c *Comm, v Vector[T], dst, tag int) (Request, error) {
	if err := v.check(c, "IsendVector"); err != nil {
		return Request{}, err
	}
	return handle(c.isend("IsendVector", v.buf(), c.ctxOr(), dst, tag))
}

// IrecvVector starts a receive into the elements of v.
func IrecvVector[T Elem](c *Comm, v Vector[T], src, tag int) (Request, error) {
	if err := v.check(c, "IrecvVector"); err != nil {
		return Request{}, err
	}
	return handle(c.irecv("IrecvVector", v.buf(), elemSize[T](), c.ctxOr(), src, tag))
}

// SendBytes is Send for a byte slice, as a method.
func (c *Comm) SendBytes(b []byte, dst, tag int) error { return Send(c, b, dst, tag) }

// RecvBytes is Recv for a byte slice, as a method.
func (c *Comm) RecvBytes(b []byte, src, tag int) (Status, error) { return Recv(c, b, src, tag) }

// IsendBytes is Isend for a byte slice, as a method.
func (c *Comm) IsendBytes(b []byte, dst, tag int) (Request, error) { return Isend(c, b, dst, tag) }

// IrecvBytes is Irecv for a byte slice, as a method.
func (c *Comm) IrecvBytes(b []byte, src, tag int) (Request, error) { return Irecv(c, b, src, tag) }

// Probe blocks until a message from src (or AnySource) with tag (or
// AnyTag) can be received and returns its Status without receiving it
// (MPI_Probe): a Recv with the Status's source and tag receives that
// message. Count and Bytes give its length in bytes; see CountOf.
func (c *Comm) Probe(src, tag int) (Status, error) {
	var b backoff
	for {
		st, ok, err := c.Iprobe(src, tag)
		if err != nil || ok {
			return st, err
		}
		c.p.idle(&b)
	}
}

// Iprobe is Probe that does not block: ok reports whether a message is
// there (MPI_Iprobe).
func (c *Comm) Iprobe(src, tag int) (st Status, ok bool, err error) {
	if err := c.check("Iprobe"); err != nil {
		return Status{}, false, err
	}
	if src == ProcNull {
		return Status{Source: ProcNull, Tag: AnyTag}, true, nil
	}
	if src != AnySource && (src < 0 || src >= c.size) {
		return Status{}, false, c.errorf("Iprobe", src, tag, ErrRank, "communicator has %d ranks", c.size)
	}
	if tag != AnyTag && (tag < 0 || tag > TagUB) {
		return Status{}, false, c.errorf("Iprobe", src, tag, ErrTag, "")
	}
	p := c.p
	p.mu.Lock()
	p.tr.Poll(p)
	p.run()
	s, ok := p.eng.Probe(c.ctx(), int32(src), int32(tag))
	fatal := p.fatal
	p.mu.Unlock()
	if fatal != nil {
		return Status{}, false, c.errorf("Iprobe", src, tag, fatal, "")
	}
	if !ok {
		return Status{}, false, nil
	}
	return Status{Source: int(s.Source), Tag: int(s.Tag), Count: s.MsgLen, Bytes: s.MsgLen}, true, nil
}

// ctxOr returns c's point-to-point context (0 for a nil c, whose calls
// fail in check).
func (c *Comm) ctxOr() uint32 {
	if c == nil {
		return 0
	}
	return c.ctx()
}

// String describes c.
func (c *Comm) String() string {
	return fmt.Sprintf("%s (rank %d of %d, context %d)", c.name, c.rank, c.size, c.id)
}
