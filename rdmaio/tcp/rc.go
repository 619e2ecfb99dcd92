package tcp

import (
	"encoding/binary"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// The RC protocol on one connection. Requests carry a PSN (the send queue
// index since the connection began). The responder executes them strictly
// in PSN order, each exactly once, and answers with cumulative
// acknowledgements (coalesced; sent at once only when the request asked for
// one, otherwise together with the next frame going that way), NAKs, READ
// responses and atomic responses, in request order. A request that finds no
// receive posted is answered with an RNR NAK and dropped together with
// everything after it, until the requester, after the responder's
// MinRNRTimer, sends it again (go-back-N, as InfiniBand does). An error NAK
// (bad remote key, message too long, bad receive buffer) makes the
// responder drop everything after it; the requester completes the request
// with the NAK's status and moves to ERR.

// body is the payload of the frame being received.
type body struct {
	left   uint64
	keep   bool     // scatter into dst (else discard)
	direct bool     // read straight into dst (a body of directMin bytes or more)
	dst    [][]byte // destination pieces
	di     int      // current piece
	doff   int      // offset in it
	act    uint8    // what to do when the body is complete
	psn    uint32
	ackReq bool
	id     uint64 // receive work request
	imm    uint32
	flags  rdmaio.WCFlags
	n      uint32
	m      *mr    // region written (held)
	sqi    uint64 // send queue entry of a READ response
}

// Body actions.
const (
	actNone = iota
	actRecv
	actWrite
	actWriteImm
	actReadRsp
)

const (
	directMin = 16 << 10         // bodies this long are read straight into their buffers
	maxRsps   = 2*maxQPWR + 64   // responses queued on one connection
	maxRNRNak = 10 * time.Second // longest RNR wait a peer may ask for
)

// connReady serves a readiness event of the QP's connection. q.mu and pmu
// are held.
func (q *qp) connReady(c *conn, events uint32) {
	if events&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP|unix.EPOLLRDHUP) != 0 {
		q.readConn(c)
	}
	if q.conn == c {
		q.flush()
	}
}

// readConn reads what the connection has (up to a budget) and processes
// it. It returns the number of bytes read. q.mu and pmu are held (the read
// buffer is the device's).
func (q *qp) readConn(c *conn) int {
	d := q.dev
	total := 0
	for budget := readBudget; budget > 0 && q.conn == c; {
		var n int
		var e unix.Errno
		var iov []unix.Iovec
		if bd := &c.body; bd.keep && bd.left > 0 && (bd.direct || bd.left >= directMin) {
			bd.direct = true
			iov = q.bodyIov(c)
		}
		if len(iov) > 0 {
			n, e = sysReadv(c.fd, iov)
			if n > 0 {
				q.act++
				want := iovLen(iov)
				total += n
				q.bodyAdvance(c, n)
				if n < want {
					return total // drained
				}
			}
		} else {
			lim := q.readLimit(c, len(d.rbuf))
			n, e = sysRecvStream(c.fd, d.rbuf[:lim])
			if n > 0 {
				q.act++
				total += n
				q.consume(c, d.rbuf[:n])
				if n < lim {
					return total // drained (level-triggered epoll reports what comes next)
				}
			}
		}
		switch {
		case e == unix.EAGAIN:
			return total
		case e == unix.EINTR:
			continue
		case e != 0:
			q.lost(c, uint32(e))
			return total
		case n == 0:
			q.lost(c, uint32(unix.ECONNRESET))
			return total + 1 // the end of the stream is news too
		}
		budget -= n
	}
	return total
}

// readLimit returns how many bytes the next read into the device's buffer
// may take, at most max. Normally all it can: small frames then cost one
// system call for many. But while the response to a large RDMA READ is
// due, a read that ran past that response's header would take part of its
// body through the buffer, to be copied again; so the read stops at the
// end of the next frame header (the rest of the current header, or the
// rest of the current body and the next base header), and a READ
// response's body then goes from the socket straight into its
// destination. Every header is at least hdrBase bytes long.
func (q *qp) readLimit(c *conn, max int) int {
	if q.sqHigh == q.sqAck || !q.largeReadDue() {
		return max
	}
	if c.rhn > 0 {
		return min(c.rneed-c.rhn, max)
	}
	if left := c.body.left; left > 0 {
		return int(min(left+hdrBase, uint64(max)))
	}
	return min(hdrBase, max)
}

// readDueScan bounds how many outstanding requests largeReadDue looks at.
const readDueScan = 32

// largeReadDue reports whether the next response the peer owes (responses
// come in request order) is to an RDMA READ of at least directMin bytes.
func (q *qp) largeReadDue() bool {
	depth := uint64(len(q.sq))
	for i, end := q.sqAck, min(q.sqHigh, q.sqAck+readDueScan); i < end; i++ {
		e := &q.sq[i%depth]
		switch {
		case e.done:
		case e.op == rdmaio.OpRDMARead:
			return e.length >= directMin
		case e.op.IsAtomic():
			return false
		}
	}
	return false
}

// bodyIov describes the rest of the current body's destination, at most
// maxIov pieces.
func (q *qp) bodyIov(c *conn) []unix.Iovec {
	bd := &c.body
	iov := c.iov[:0]
	left := bd.left
	off := bd.doff
	for i := bd.di; i < len(bd.dst) && left > 0 && len(iov) < maxIov; i++ {
		b := bd.dst[i][off:]
		off = 0
		if uint64(len(b)) > left {
			b = b[:left]
		}
		if len(b) == 0 {
			continue
		}
		iov = append(iov, unix.Iovec{})
		setIov(&iov[len(iov)-1], b)
		left -= uint64(len(b))
	}
	return iov
}

func iovLen(iov []unix.Iovec) int {
	n := 0
	for i := range iov {
		n += int(iov[i].Len)
	}
	return n
}

// bodyAdvance accounts for n body bytes received straight into the
// destination.
func (q *qp) bodyAdvance(c *conn, n int) {
	bd := &c.body
	bd.left -= uint64(n)
	for n > 0 && bd.di < len(bd.dst) {
		k := min(n, len(bd.dst[bd.di])-bd.doff)
		n -= k
		bd.doff += k
		if bd.doff == len(bd.dst[bd.di]) {
			bd.di, bd.doff = bd.di+1, 0
		}
	}
	if bd.left == 0 {
		q.finishBody(c)
	}
}

// bodyCopy copies received body bytes into the destination.
func (q *qp) bodyCopy(c *conn, src []byte) {
	bd := &c.body
	bd.left -= uint64(len(src))
	for len(src) > 0 && bd.di < len(bd.dst) {
		k := copy(bd.dst[bd.di][bd.doff:], src)
		src = src[k:]
		bd.doff += k
		if bd.doff == len(bd.dst[bd.di]) {
			bd.di, bd.doff = bd.di+1, 0
		}
	}
}

// consume processes bytes read from the connection: frame headers and
// bodies.
func (q *qp) consume(c *conn, b []byte) {
	for len(b) > 0 && q.conn == c {
		bd := &c.body
		if bd.left > 0 {
			k := min(uint64(len(b)), bd.left)
			if bd.keep {
				if bd.act == actReadRsp {
					q.rspCopied += k
				}
				q.bodyCopy(c, b[:k])
			} else {
				bd.left -= k
			}
			b = b[k:]
			if bd.left == 0 {
				q.finishBody(c)
			}
			continue
		}
		if c.rhn == 0 {
			if c.rneed = frameHeaderLen(b[0]); c.rneed == 0 {
				q.lost(c, uint32(unix.EPROTO))
				return
			}
			if len(b) >= c.rneed {
				// The whole header is here (the common case): decoded in
				// place.
				var f frame
				if f.decode(b[:c.rneed]) != nil {
					q.lost(c, uint32(unix.EPROTO))
					return
				}
				b = b[c.rneed:]
				q.onFrame(c, &f)
				continue
			}
		}
		k := copy(c.rh[c.rhn:c.rneed], b)
		c.rhn += k
		b = b[k:]
		if c.rhn < c.rneed {
			return
		}
		c.rhn = 0
		var f frame
		if f.decode(c.rh[:c.rneed]) != nil {
			q.lost(c, uint32(unix.EPROTO))
			return
		}
		q.onFrame(c, &f)
	}
}

func (q *qp) onFrame(c *conn, f *frame) {
	c.body = body{left: uint64(f.payload())}
	switch f.typ {
	case fAck:
		if !q.ackUpTo(f.psn) {
			q.lost(c, uint32(unix.EPROTO))
			return
		}
		q.completeSend()
	case fNak:
		q.onNak(c, f)
	case fReadResp, fAtomicRsp:
		q.onResponse(c, f)
	default:
		q.onRequest(c, f)
	}
}

// psnOf returns the PSN of send queue entry i.
func (q *qp) psnOf(i uint64) uint32 { return uint32(i - q.psnBase) }

// ackUpTo marks the transmitted requests up to PSN a as done. It reports
// false for an acknowledgement of a request not transmitted, or one that
// skips a READ or atomic response.
func (q *qp) ackUpTo(a uint32) bool {
	if q.sqHigh == q.sqAck {
		return int32(a-q.psnOf(q.sqAck)) < 0 // nothing outstanding: only old PSNs
	}
	if int32(a-q.psnOf(q.sqHigh-1)) > 0 {
		return false
	}
	depth := uint64(len(q.sq))
	for i := q.sqAck; i < q.sqHigh && int32(q.psnOf(i)-a) <= 0; i++ {
		e := &q.sq[i%depth]
		if e.done {
			continue
		}
		if e.op == rdmaio.OpRDMARead || e.op.IsAtomic() {
			return false
		}
		e.done, e.status = true, rdmaio.StatusSuccess
	}
	return true
}

// onNak handles a NAK of the oldest outstanding request.
func (q *qp) onNak(c *conn, f *frame) {
	if !q.ackUpTo(f.psn - 1) {
		q.lost(c, uint32(unix.EPROTO))
		return
	}
	q.completeSend()
	if q.conn != c {
		return
	}
	if q.sqAck >= q.sqHigh || q.psnOf(q.sqAck) != f.psn {
		q.lost(c, uint32(unix.EPROTO))
		return
	}
	e := &q.sq[q.sqAck%uint64(len(q.sq))]
	if f.status != rdmaio.StatusRNRRetryExcErr {
		e.done, e.status = true, f.status
		q.completeSend()
		return
	}
	if q.rnrWait {
		return
	}
	e.rnrTries++
	if q.rnrRetry != rdmaio.RNRRetryInfinite && e.rnrTries > q.rnrRetry {
		e.done, e.status = true, rdmaio.StatusRNRRetryExcErr
		q.completeSend()
		return
	}
	wait := min(time.Duration(f.imm)*time.Microsecond, maxRNRNak)
	q.rnrWait, q.rnrUntil, q.rewindTo = true, time.Now().Add(wait), q.sqAck
	q.schedule(q.rnrUntil)
}

// onResponse handles a READ or atomic response to the oldest outstanding
// request.
func (q *qp) onResponse(c *conn, f *frame) {
	if !q.ackUpTo(f.psn - 1) {
		q.lost(c, uint32(unix.EPROTO))
		return
	}
	q.completeSend()
	if q.conn != c {
		return
	}
	if q.sqAck >= q.sqHigh || q.psnOf(q.sqAck) != f.psn {
		q.lost(c, uint32(unix.EPROTO))
		return
	}
	e := &q.sq[q.sqAck%uint64(len(q.sq))]
	if f.typ == fAtomicRsp {
		if !e.op.IsAtomic() || len(e.sg) != 1 || len(e.sg[0]) != 8 {
			q.lost(c, uint32(unix.EPROTO))
			return
		}
		binary.NativeEndian.PutUint64(e.sg[0], f.a)
		e.done, e.status = true, rdmaio.StatusSuccess
		q.completeSend()
		return
	}
	if e.op != rdmaio.OpRDMARead || f.length != e.length {
		q.lost(c, uint32(unix.EPROTO))
		return
	}
	bd := &c.body
	bd.keep, bd.dst, bd.act, bd.sqi = true, e.sg, actReadRsp, q.sqAck
	if bd.left == 0 {
		q.finishBody(c)
	}
}

// remote resolves and holds the target region of a one-sided request.
func (q *qp) remote(rkey uint32, raddr, length uint64, need rdmaio.Access) (*mr, bool) {
	m := q.dev.mrs.Lookup(rkey)
	if m == nil || m.pd != q.pd {
		return nil, false
	}
	if provider.CheckRemote(m.access, q.access, need, m.base, uint64(len(m.buf)), raddr, length) != rdmaio.StatusSuccess {
		return nil, false
	}
	if !m.hold() {
		return nil, false
	}
	return m, true
}

// onRequest executes (or drops) a request from the peer.
func (q *qp) onRequest(c *conn, f *frame) {
	if q.rdead || f.psn != q.rexp || !provider.Receives(q.State()) {
		return // dropped with its body (after an RNR NAK or an error NAK)
	}
	bd := &c.body
	bd.psn, bd.ackReq = f.psn, f.flags&flAckReq != 0
	switch f.typ {
	case fSend, fSendImm:
		id, st, ok := q.takeRecv()
		if !ok {
			q.nak(f.psn, rdmaio.StatusRNRRetryExcErr)
			return
		}
		if st != rdmaio.StatusSuccess {
			q.recvFailed(c, id, st, rdmaio.WCRecv, f, rdmaio.StatusRemOpErr)
			return
		}
		if uint64(f.length) > uint64(provider.Total(q.rsg)) {
			q.recvFailed(c, id, rdmaio.StatusLocLenErr, rdmaio.WCRecv, f, rdmaio.StatusRemInvReqErr)
			return
		}
		bd.keep, bd.dst, bd.act, bd.id, bd.n = true, q.rsg, actRecv, id, f.length
		if f.typ == fSendImm {
			bd.imm, bd.flags = f.imm, rdmaio.WCWithImm
		}
	case fWrite, fWriteImm:
		m, ok := q.remote(f.rkey, f.raddr, uint64(f.length), rdmaio.AccessRemoteWrite)
		if !ok {
			q.nak(f.psn, rdmaio.StatusRemAccessErr)
			return
		}
		bd.act = actWrite
		if f.typ == fWriteImm {
			id, st, ok := q.takeRecv()
			if !ok {
				m.release()
				q.nak(f.psn, rdmaio.StatusRNRRetryExcErr)
				return
			}
			if st != rdmaio.StatusSuccess {
				m.release()
				q.recvFailed(c, id, st, rdmaio.WCRecvRDMAWithImm, f, rdmaio.StatusRemOpErr)
				return
			}
			clear(q.rsg)
			bd.act, bd.id, bd.imm, bd.flags, bd.n = actWriteImm, id, f.imm, rdmaio.WCWithImm, f.length
		}
		off := f.raddr - m.base
		q.rone[0] = m.buf[off : off+uint64(f.length)]
		bd.keep, bd.dst, bd.m = true, q.rone[:], m
	case fRead:
		m, ok := q.remote(f.rkey, f.raddr, uint64(f.length), rdmaio.AccessRemoteRead)
		if !ok {
			q.nak(f.psn, rdmaio.StatusRemAccessErr)
			return
		}
		off := f.raddr - m.base
		r := q.rspSlot(c)
		if r == nil {
			m.release()
			return
		}
		q.rexp++
		fr := frame{typ: fReadResp, psn: f.psn, length: f.length}
		r.hlen, r.now, r.data, r.m = uint8(fr.encode(r.hdr[:])), true, m.buf[off:off+uint64(f.length)], m
		return
	case fCmpSwp, fFetchAdd:
		if f.raddr%8 != 0 {
			q.nak(f.psn, rdmaio.StatusRemInvReqErr)
			return
		}
		m, ok := q.remote(f.rkey, f.raddr, 8, rdmaio.AccessRemoteAtomic)
		if !ok {
			q.nak(f.psn, rdmaio.StatusRemAccessErr)
			return
		}
		p := (*uint64)(unsafe.Pointer(&m.buf[f.raddr-m.base]))
		var old uint64
		if f.typ == fFetchAdd {
			old = atomic.AddUint64(p, f.a) - f.a
		} else {
			for {
				old = atomic.LoadUint64(p)
				if old != f.a || atomic.CompareAndSwapUint64(p, old, f.b) {
					break
				}
			}
		}
		m.release()
		r := q.rspSlot(c)
		if r == nil {
			return
		}
		q.rexp++
		fr := frame{typ: fAtomicRsp, psn: f.psn, length: 8, a: old}
		r.hlen, r.now = uint8(fr.encode(r.hdr[:])), true
		return
	}
	if bd.left == 0 {
		q.finishBody(c)
	}
}

// recvFailed completes a receive with an error, NAKs the request and moves
// the QP to ERR.
func (q *qp) recvFailed(c *conn, id uint64, st rdmaio.Status, op rdmaio.WCOpcode, f *frame, nak rdmaio.Status) {
	clear(q.rsg)
	q.nak(f.psn, nak)
	prev := q.enterErr()
	wc := rdmaio.WorkCompletion{ID: id, Status: st, Opcode: op, ByteLen: f.length, QPN: q.qpn, SrcQPN: q.destQPN, SrcRank: int32(q.dest.rank)}
	q.recvCQ.push(&wc, nil, 0)
	q.afterErr(prev)
	q.completeSend()
}

// finishBody completes the frame whose body was just received.
func (q *qp) finishBody(c *conn) {
	bd := &c.body
	switch bd.act {
	case actRecv, actWriteImm:
		op := rdmaio.WCRecv
		if bd.act == actWriteImm {
			op = rdmaio.WCRecvRDMAWithImm
			bd.m.release()
			q.rone[0] = nil
		} else {
			clear(q.rsg)
		}
		wc := rdmaio.WorkCompletion{ID: bd.id, Opcode: op, Flags: bd.flags, ByteLen: bd.n, Imm: bd.imm,
			QPN: q.qpn, SrcQPN: q.destQPN, SrcRank: int32(q.dest.rank)}
		q.recvCQ.pushRecv(&wc)
		q.rexp++
		q.ack(c, bd.psn, bd.ackReq)
	case actWrite:
		bd.m.release()
		q.rone[0] = nil
		q.rexp++
		q.ack(c, bd.psn, bd.ackReq)
	case actReadRsp:
		e := &q.sq[bd.sqi%uint64(len(q.sq))]
		e.done, e.status = true, rdmaio.StatusSuccess
		bd.idle()
		q.completeSend()
		return
	}
	bd.idle()
}

// idle marks the body done, dropping its references; onFrame sets every
// field for the next one.
func (bd *body) idle() {
	bd.left, bd.keep, bd.direct, bd.dst, bd.act, bd.m = 0, false, false, nil, actNone, nil
}

// releaseBody drops the frame being received when the connection goes
// away. A receive consumed by an incomplete message is reported when
// report is set.
func (q *qp) releaseBody(c *conn, report bool) {
	bd := &c.body
	switch bd.act {
	case actWrite, actWriteImm:
		bd.m.release()
		q.rone[0] = nil
	case actRecv:
		clear(q.rsg)
	}
	if report && (bd.act == actRecv || bd.act == actWriteImm) {
		op := rdmaio.WCRecv
		if bd.act == actWriteImm {
			op = rdmaio.WCRecvRDMAWithImm
		}
		wc := rdmaio.WorkCompletion{ID: bd.id, Status: rdmaio.StatusWRFlushErr, Opcode: op, QPN: q.qpn, SrcRank: -1}
		q.recvCQ.push(&wc, nil, 0)
	}
	*bd = body{}
}

// rspSlot appends an entry to the response queue. A peer with more
// requests outstanding than any QP can have is cut off (nil).
func (q *qp) rspSlot(c *conn) *rsp {
	if n := q.rspTail - q.rspHead; n == uint64(len(q.rsps)) {
		if len(q.rsps) >= maxRsps {
			q.lost(c, uint32(unix.EPROTO))
			return nil
		}
		r := make([]rsp, 2*len(q.rsps))
		for i := uint64(0); i < n; i++ {
			r[i] = q.rsps[(q.rspHead+i)%uint64(len(q.rsps))]
		}
		q.rsps, q.rspHead, q.rspTail = r, 0, n
	}
	r := &q.rsps[q.rspTail%uint64(len(q.rsps))]
	*r = rsp{}
	q.rspTail++
	return r
}

// ack acknowledges the requests up to psn. It coalesces into a queued
// acknowledgement not yet being written; now asks for it to be sent at once
// (the request was signaled), unless a poller holds it back for the next
// frame (deferAck).
func (q *qp) ack(c *conn, psn uint32, now bool) {
	if now && q.deferAck() {
		now = false
	}
	if q.rspTail > q.rspHead {
		i := q.rspTail - 1
		t := &q.rsps[i%uint64(len(q.rsps))]
		if t.ack && !(i == q.rspHead && c.part == partRsp) {
			t.psn, t.now = psn, t.now || now
			binary.LittleEndian.PutUint32(t.hdr[4:], psn)
			return
		}
	}
	r := q.rspSlot(c)
	if r == nil {
		return
	}
	f := frame{typ: fAck, psn: psn}
	r.hlen, r.ack, r.now, r.psn = uint8(f.encode(r.hdr[:])), true, now, psn
}

// nak answers the request psn with a NAK. Every NAK but RNR makes the
// responder drop what follows for good.
func (q *qp) nak(psn uint32, st rdmaio.Status) {
	c := q.conn
	if c == nil {
		return
	}
	r := q.rspSlot(c)
	if r == nil {
		return
	}
	f := frame{typ: fNak, psn: psn, status: st}
	if st == rdmaio.StatusRNRRetryExcErr {
		f.imm = uint32(min(q.minRNR, maxRNRNak) / time.Microsecond)
	} else {
		q.rdead = true
	}
	r.hlen, r.now = uint8(f.encode(r.hdr[:])), true
}

// releaseRsps drops the unsent responses.
func (q *qp) releaseRsps() {
	for i := q.rspHead; i < q.rspTail; i++ {
		r := &q.rsps[i%uint64(len(q.rsps))]
		if r.m != nil {
			r.m.release()
		}
		*r = rsp{}
	}
	q.rspHead, q.rspTail = 0, 0
}

// lost handles the failure of the connection (end of stream, reset,
// protocol error): the first outstanding send fails with
// StatusRetryExcErr and the QP moves to ERR; a QP with nothing
// outstanding notices when it next sends.
func (q *qp) lost(c *conn, errno uint32) {
	if q.conn != c {
		q.dev.closeConn(c)
		return
	}
	q.conn = nil
	inRecv := c.body.act == actRecv || c.body.act == actWriteImm
	prev := rdmaio.StateErr
	if inRecv {
		prev = q.enterErr() // a message was cut off: its receive fails
	}
	q.releaseBody(c, inRecv)
	q.releaseRsps()
	q.dev.closeConn(c)
	q.connLost, q.lostErr = true, errno
	q.failOutstanding(rdmaio.StatusRetryExcErr, errno)
	if inRecv {
		q.afterErr(prev)
		q.completeSend()
	}
}

// failOutstanding completes the oldest outstanding send with st (and so
// moves the QP to ERR). q.mu is held.
func (q *qp) failOutstanding(st rdmaio.Status, vendor uint32) {
	if q.sqAck < q.sqTail {
		e := &q.sq[q.sqAck%uint64(len(q.sq))]
		if !e.done {
			e.done, e.status, e.vendor = true, st, vendor
		}
		q.completeSend()
	}
}

// noConn handles sends of an RTS QP without a connection: after the
// connection was lost they fail at once; while the peer's connection is
// awaited they wait until the connect timeout.
func (q *qp) noConn() {
	if q.typ != rdmaio.RC || q.State() != rdmaio.StateRTS || q.sqXmit >= q.sqTail {
		return
	}
	if q.connLost {
		q.failOutstanding(rdmaio.StatusRetryExcErr, q.lostErr)
		return
	}
	if time.Now().After(q.connDeadline) {
		q.failOutstanding(rdmaio.StatusRetryExcErr, uint32(unix.ETIMEDOUT))
		return
	}
	q.schedule(q.connDeadline)
}

// gatherer collects iovecs for one sendmsg, skipping the bytes of a partly
// written frame.
type gatherer struct {
	iov   []unix.Iovec
	skip  int
	total int
	full  bool
}

func (g *gatherer) add(b []byte) {
	if g.full {
		return
	}
	if g.skip >= len(b) {
		g.skip -= len(b)
		return
	}
	b = b[g.skip:]
	g.skip = 0
	if len(g.iov) == cap(g.iov) {
		g.full = true
		return
	}
	g.iov = append(g.iov, unix.Iovec{})
	setIov(&g.iov[len(g.iov)-1], b)
	g.total += len(b)
}

func (g *gatherer) addReq(e *sqe) {
	g.add(e.hdr[:e.hdrLen])
	if e.payloadLen() == 0 {
		return
	}
	if e.inline {
		g.add(e.inl)
		return
	}
	for _, b := range e.sg {
		g.add(b)
	}
}

func (g *gatherer) addRsp(r *rsp) {
	g.add(r.hdr[:r.hlen])
	g.add(r.data)
}

func reqLen(e *sqe) int { return int(e.hdrLen) + e.payloadLen() }
func rspLen(r *rsp) int { return int(r.hlen) + len(r.data) }

// sendReqs reports whether requests may be transmitted now, and applies a
// receiver-not-ready rewind whose time has come.
func (q *qp) sendReqs(c *conn) bool {
	if q.rnrWait {
		if c.part == partReq {
			return false
		}
		if time.Now().Before(q.rnrUntil) {
			q.schedule(q.rnrUntil)
			return false
		}
		q.sqXmit, q.rnrWait = q.rewindTo, false
	}
	return q.State() == rdmaio.StateRTS
}

// gather fills the connection's iovecs with what to send next: the rest of a
// partly written frame, the responses, then the requests. A lone
// acknowledgement nobody asked for waits for company.
func (q *qp) gather(c *conn) (int, int) {
	g := gatherer{iov: c.iov[:0]}
	depth := uint64(len(q.sq))
	nr := uint64(len(q.rsps))
	ok := q.sendReqs(c) // may rewind sqXmit
	rs, xs := q.rspHead, q.sqXmit
	switch c.part {
	case partRsp:
		g.skip = c.off
		g.addRsp(&q.rsps[rs%nr])
		rs++
	case partReq:
		g.skip = c.off
		g.addReq(&q.sq[xs%depth])
		xs++
	}
	reqs := ok && xs < q.sqTail && !q.sq[xs%depth].done
	if c.part == partNone && !reqs {
		if n := q.rspTail - rs; n == 0 {
			return 0, 0
		} else if n == 1 && !q.rsps[rs%nr].now {
			// A lone acknowledgement waits for company, at most until
			// the retry timer passes by (sendLoneAck).
			q.dev.holdAck()
			return 0, 0
		}
	}
	for ; rs < q.rspTail && !g.full; rs++ {
		g.addRsp(&q.rsps[rs%nr])
	}
	for ; reqs && xs < q.sqTail && !g.full; xs++ {
		e := &q.sq[xs%depth]
		if e.done {
			break
		}
		g.addReq(e)
	}
	return len(g.iov), g.total
}

// advance accounts for n bytes written, in the order gather collected them.
func (q *qp) advance(c *conn, n int) {
	depth := uint64(len(q.sq))
	if c.part != partNone {
		var flen int
		if c.part == partRsp {
			flen = rspLen(&q.rsps[q.rspHead%uint64(len(q.rsps))])
		} else {
			flen = reqLen(&q.sq[q.sqXmit%depth])
		}
		if rem := flen - c.off; n < rem {
			c.off += n
			return
		} else {
			n -= rem
		}
		if c.part == partRsp {
			q.popRsp()
		} else {
			q.sentReq()
		}
		c.part, c.off = partNone, 0
	}
	for n > 0 && q.rspHead < q.rspTail {
		flen := rspLen(&q.rsps[q.rspHead%uint64(len(q.rsps))])
		if n < flen {
			c.part, c.off = partRsp, n
			return
		}
		n -= flen
		q.popRsp()
	}
	for n > 0 {
		flen := reqLen(&q.sq[q.sqXmit%depth])
		if n < flen {
			c.part, c.off = partReq, n
			return
		}
		n -= flen
		q.sentReq()
	}
}

func (q *qp) popRsp() {
	r := &q.rsps[q.rspHead%uint64(len(q.rsps))]
	if r.m != nil {
		r.m.release()
	}
	*r = rsp{}
	q.rspHead++
}

func (q *qp) sentReq() {
	q.sqXmit++
	if q.sqXmit > q.sqHigh {
		q.sqHigh = q.sqXmit
	}
}

// want turns the interest in writability on or off.
func (c *conn) want(on bool) {
	if c.wantOut == on {
		return
	}
	c.wantOut = on
	ev := uint32(unix.EPOLLIN)
	if on {
		ev |= unix.EPOLLOUT
		// The rest goes out when the socket drains: in a Poll of this
		// device, or in the service goroutine, which must not wait for
		// pollers that may be polling other devices.
		c.d.kickService()
	}
	c.d.interest(c, ev)
}

// send writes the first niov iovecs gathered (total bytes) with one system
// call: send(2) of one buffer when they are one, or few bytes copied into
// c.stage; sendmsg(2) otherwise.
func (c *conn) send(niov, total int) (int, unix.Errno) {
	switch {
	case niov == 1:
		return sysSend(c.fd, unsafe.Slice(c.iov[0].Base, total))
	case total <= stageMax:
		k := 0
		for i := range c.iov[:niov] {
			k += copy(c.stage[k:], unsafe.Slice(c.iov[i].Base, c.iov[i].Len))
		}
		return sysSend(c.fd, c.stage[:k])
	}
	c.msg.Iov = &c.iov[0]
	c.msg.SetIovlen(niov)
	return sysSendmsg(c.fd, &c.msg, total)
}

// flush writes what the connection has to send, without blocking. q.mu is
// held.
func (q *qp) flush() {
	c := q.conn
	if c == nil || c.kind != kRC {
		q.noConn()
		return
	}
	for i := 0; i < 64; i++ {
		niov, total := q.gather(c)
		if niov == 0 {
			c.want(false)
			return
		}
		n, e := c.send(niov, total)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			c.want(true)
			return
		case e != 0:
			q.lost(c, uint32(e))
			return
		}
		q.act++
		q.advance(c, n)
		if n < total {
			c.want(true)
			return
		}
	}
	c.want(true)
}
