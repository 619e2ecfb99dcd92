package tcp

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// sqe is a send queue entry: a posted send work request, resolved.
type sqe struct {
	id       uint64
	op       rdmaio.Opcode
	signaled bool
	done     bool // status is final
	status   rdmaio.Status
	vendor   uint32
	length   uint32
	rnrTries int
	sg       [][]byte // local buffers, resolved at post
	inl      []byte   // inline storage, cap MaxInline
	inline   bool
	hdr      [hdrMax]byte // the request frame header (RC)
	hdrLen   uint8
	ah       *ah // UD
}

// payloadLen returns the bytes that follow the header of the entry's frame.
func (e *sqe) payloadLen() int {
	switch e.op {
	case rdmaio.OpSend, rdmaio.OpSendImm, rdmaio.OpRDMAWrite, rdmaio.OpRDMAWriteImm:
		return int(e.length)
	}
	return 0
}

// rsp is an entry of a connection's response queue: an acknowledgement, a
// NAK, an RDMA READ response (with the region's data) or an atomic
// response.
type rsp struct {
	hdr  [hdrAtoRsp]byte
	hlen uint8
	ack  bool // a plain acknowledgement: later ones coalesce into it
	now  bool // must be sent now (not an acknowledgement nobody asked for)
	psn  uint32
	data []byte
	m    *mr // region data refers to (held)
}

// qp is a queue pair. Every field below mu is guarded by it, including the
// state of the QP's connection.
type qp struct {
	dev    *Device
	pd     *pd
	typ    rdmaio.QPType
	slot   int
	qpn    uint32
	cap    rdmaio.QPCap
	sigAll bool
	limits provider.QPLimits
	sendCQ *cq
	recvCQ *cq
	srq    *srq

	state  atomic.Uint32
	sqFree atomic.Uint64 // send queue entries before it may be reused
	timed  atomic.Bool   // a timer is pending (onTimer)

	mu       sync.Mutex
	closed   bool
	access   rdmaio.Access
	qkey     uint32
	minRNR   time.Duration
	rnrRetry int

	sq     []sqe
	sqTail uint64 // next entry to post
	sqXmit uint64 // next entry to transmit
	sqAck  uint64 // next entry to complete
	sqHigh uint64 // entries before it were transmitted on this connection
	rq     provider.RecvQueue

	// RC connection, set by RTR.
	dest         peerAddr
	destQPN      uint32
	dialer       bool
	conn         *conn
	pending      *conn // a parked connection from the peer (before RTR)
	connLost     bool
	lostErr      uint32
	connDeadline time.Time // the peer's connection must come by then
	psnBase      uint64    // the send queue index of PSN 0

	// Requester: the retry timer (see watch). act counts reads and writes
	// on the connection; wAct is its value when the watch last saw it
	// change, at wSince; bound is how long outstanding work may see none.
	act    uint64
	wAct   uint64
	wSince time.Time
	bound  time.Duration

	// Requester: READ response bytes that went through the device's read
	// buffer (copied into their destination) rather than straight from
	// the socket into it; only tests look at it.
	rspCopied uint64

	// Requester: receiver-not-ready retry.
	rnrWait  bool
	rnrUntil time.Time
	rewindTo uint64

	// Responder.
	rexp    uint32 // next expected PSN
	rdead   bool   // an error NAK was sent: drop everything until reset
	rsps    []rsp
	rspHead uint64
	rspTail uint64
	rsg     [][]byte
	rone    [1][]byte

	// UD.
	udIov [1 + maxSGE]unix.Iovec
	udMsg unix.Msghdr
}

// CreateQP creates a queue pair in RESET.
func (p *pd) CreateQP(attr rdmaio.QPInitAttr) (rdmaio.QP, error) {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("create qp: %w", err)
	}
	defer d.life.End()
	scq, rcq, s, err := provider.QPParts(&attr,
		func(c rdmaio.CQ) (*cq, bool) { x, ok := c.(*cq); return x, ok && x != nil && x.dev == d },
		func(r rdmaio.SRQ) (*srq, bool) {
			x, ok := r.(*srq)
			return x, ok && x != nil && x.dev == d && x.pd == p
		})
	if err != nil {
		return nil, d.errf("create qp: %w", err)
	}
	c, err := provider.FillCap(attr.Cap, rdmaio.QPCap{
		MaxSendWR: DefaultMaxSendWR, MaxRecvWR: DefaultMaxRecvWR,
		MaxSendSGE: DefaultMaxSGE, MaxRecvSGE: DefaultMaxSGE, MaxInline: DefaultMaxInline,
	}, &d.attr)
	if err != nil {
		return nil, d.errf("create qp: %w", err)
	}
	q := &qp{dev: d, pd: p, typ: attr.Type, cap: c, sigAll: attr.SigAll, sendCQ: scq, recvCQ: rcq, srq: s, minRNR: time.Millisecond,
		bound: retryBound(0, 0, d.opt.retryTimeout)}
	q.limits = provider.QPLimits{Type: attr.Type, Cap: c, MTU: d.opt.mtu, MaxMsgSize: maxMsgSize}
	q.sq = make([]sqe, c.MaxSendWR)
	inl := make([]byte, c.MaxSendWR*c.MaxInline)
	for i := range q.sq {
		q.sq[i].sg = make([][]byte, 0, c.MaxSendSGE)
		q.sq[i].inl = inl[i*c.MaxInline : (i+1)*c.MaxInline : (i+1)*c.MaxInline]
	}
	if s == nil {
		q.rq = provider.NewRecvQueue(c.MaxRecvWR, c.MaxRecvSGE)
	}
	q.rsg = make([][]byte, 0, maxSGE)
	if attr.Type == rdmaio.RC {
		q.rsps = make([]rsp, 64)
	}
	q.udMsg.Iov = &q.udIov[0]

	recvDepth := c.MaxRecvWR
	if s != nil {
		recvDepth = s.rq.Depth()
	}
	d.mu.Lock()
	slot := -1
	for j := range d.qps {
		if d.qps[j].Load() == nil {
			slot = j
			break
		}
	}
	if slot < 0 {
		d.mu.Unlock()
		return nil, d.errf("create qp: %w: all %d QPs in use (option max_qp)", rdmaio.ErrInvalidArgument, len(d.qps))
	}
	if err := p.use.Add(provider.ObjQP, 1); err != nil {
		d.mu.Unlock()
		return nil, d.errf("create qp: pd: %w", err)
	}
	if s != nil {
		s.mu.Lock()
		s.users++
		s.mu.Unlock()
	}
	// QPN = generation<<16 | slot: a stale QPN of a destroyed QP is not
	// mistaken for the slot's next QP (until the 8-bit generation wraps).
	d.gens[slot]++
	if d.gens[slot] == 0 {
		d.gens[slot] = 1
	}
	q.slot, q.qpn = slot, uint32(d.gens[slot])<<16|uint32(slot)
	d.qps[slot].Store(q)
	d.mu.Unlock()

	scq.attach(c.MaxSendWR)
	rcq.attach(recvDepth)
	return q, nil
}

func (q *qp) QPN() uint32           { return q.qpn }
func (q *qp) Type() rdmaio.QPType   { return q.typ }
func (q *qp) Cap() rdmaio.QPCap     { return q.cap }
func (q *qp) State() rdmaio.QPState { return rdmaio.QPState(q.state.Load()) }

func (q *qp) errf(format string, args ...any) error {
	return q.dev.errf("qp %d: "+format, append([]any{q.qpn}, args...)...)
}

// Modify moves the QP through the verbs state machine. INIT → RTR of an RC
// QP dials the peer when this side is the one that connects (see the
// package documentation).
func (q *qp) Modify(attr rdmaio.QPAttr) error {
	d := q.dev
	if err := d.life.Begin(); err != nil {
		return q.errf("modify: %w", err)
	}
	defer d.life.End()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return q.errf("modify: %w", rdmaio.ErrClosed)
	}
	cur := q.State()
	if err := provider.CheckTransition(q.typ, cur, &attr); err != nil {
		return q.errf("modify: %w", err)
	}
	switch attr.State {
	case rdmaio.StateReset:
		q.resetLocked()
		return nil
	case rdmaio.StateErr:
		q.setErr()
		q.completeSend()
		return nil
	case rdmaio.StateInit:
		q.access, q.qkey = attr.Access, attr.QKey
	case rdmaio.StateRTR:
		q.minRNR = attr.MinRNRTimer
		if q.minRNR == 0 {
			q.minRNR = time.Millisecond
		}
		if q.typ == rdmaio.RC {
			if err := q.connect(&attr); err != nil {
				return q.errf("modify INIT → RTR: %w", err)
			}
		}
	case rdmaio.StateRTS:
		if q.typ == rdmaio.RC && cur == rdmaio.StateRTR {
			q.rnrRetry = attr.RNRRetry
			q.bound = retryBound(attr.RetryCount, attr.Timeout, q.dev.opt.retryTimeout)
		}
	}
	q.state.Store(uint32(attr.State))
	if attr.State == rdmaio.StateRTS {
		q.flush()
	}
	return nil
}

// connect sets up the RC connection for INIT → RTR: the side with the
// smaller (device id, QPN) dials the peer now; the other adopts the
// connection the peer made (parked until now) or waits for it. q.mu is held;
// it is released while dialing.
func (q *qp) connect(attr *rdmaio.QPAttr) error {
	d := q.dev
	pa, err := decodeAddr(attr.Dest.Addr)
	if err != nil {
		return err
	}
	if pa.jobHash != d.jobHash {
		return fmt.Errorf("%w: address of rank %d belongs to another job", rdmaio.ErrBadAddress, pa.rank)
	}
	if pa.devID == d.devID && attr.DestQPN == q.qpn {
		return fmt.Errorf("%w: a QP cannot be connected to itself", rdmaio.ErrInvalidArgument)
	}
	dialer := d.devID < pa.devID || d.devID == pa.devID && q.qpn < attr.DestQPN
	var c *conn
	if dialer {
		// Dial without the lock: the peer's progress may need it (same
		// device), and Close must not wait for it.
		q.mu.Unlock()
		fd, err := d.dial(&pa, q.qpn, attr.DestQPN)
		q.mu.Lock()
		if err != nil {
			return err
		}
		if q.closed || q.State() != rdmaio.StateInit {
			unix.Close(fd)
			return fmt.Errorf("%w: the QP changed state while connecting", rdmaio.ErrInvalidTransition)
		}
		if c = d.newConn(fd, kRC, q); c == nil {
			unix.Close(fd)
			return fmt.Errorf("%w: connection table full", rdmaio.ErrInvalidArgument)
		}
		c.peerDev, c.peerQPN, c.peerRank = pa.devID, attr.DestQPN, int32(pa.rank)
		if err := d.epollAdd(fd, int(c.slot), unix.EPOLLIN); err != nil {
			d.closeConn(c)
			return err
		}
	}
	q.dropConn(false)
	q.dest, q.destQPN, q.dialer = pa, attr.DestQPN, dialer
	q.connLost, q.lostErr = false, 0
	q.psnBase = q.sqTail
	q.sqHigh = q.sqTail
	q.rexp, q.rdead = 0, false
	q.rnrWait = false
	q.wSince = time.Time{}
	q.connDeadline = time.Now().Add(d.opt.connectTimeout)
	if dialer {
		q.attach(c)
		return nil
	}
	if p := q.pending; p != nil {
		q.pending = nil
		if p.peerDev == pa.devID && p.peerQPN == attr.DestQPN {
			q.attach(p)
		} else {
			d.closeConn(p)
		}
	}
	return nil
}

// acceptable decides what to do with an authenticated connection for this
// QP: attach it (the QP is in RTR or RTS, waits for this peer's connection),
// park it (the QP has not reached RTR yet), or refuse it. q.mu is held.
func (q *qp) acceptable(h *hello) (attach, ok bool) {
	if q.closed {
		return false, false
	}
	switch q.State() {
	case rdmaio.StateRTR, rdmaio.StateRTS:
		if q.conn != nil || q.dialer || q.connLost || q.dest.devID != h.fromDev || q.destQPN != h.fromQPN {
			return false, false
		}
		return true, true
	case rdmaio.StateReset, rdmaio.StateInit:
		return false, true
	}
	return false, false
}

// attach makes c the QP's connection (c.q is q already). q.mu is held.
func (q *qp) attach(c *conn) {
	c.kind = kRC
	c.timed.Store(false)
	c.rhn, c.rneed = 0, 0
	c.body = body{}
	c.part, c.off, c.wantOut = partNone, 0, false
	c.msg.Iov = &c.iov[0]
	q.conn = c
	q.connLost = false
	q.dev.interest(c, unix.EPOLLIN)
	if q.State() == rdmaio.StateRTS {
		q.flush()
	}
}

// dropPending closes a parked connection. q.mu is held.
func (q *qp) dropPending() {
	if p := q.pending; p != nil {
		q.pending = nil
		q.dev.closeConn(p)
	}
}

// dropConn detaches the QP's connection. A graceful drop sends what is
// queued (a final NAK) and lingers; otherwise the connection is closed at
// once. Responses not sent are released. q.mu is held.
func (q *qp) dropConn(graceful bool) {
	d := q.dev
	c := q.conn
	if c == nil {
		return
	}
	if graceful && c.kind == kRC {
		q.flush()
	}
	q.conn = nil
	q.releaseBody(c, false)
	q.releaseRsps()
	if graceful && c.kind == kRC {
		d.linger(c)
	} else {
		d.closeConn(c)
	}
}

// resetLocked returns the QP to RESET: work is discarded without
// completions and the connection is closed. q.mu is held.
func (q *qp) resetLocked() {
	q.dropConn(false)
	q.dropPending()
	q.discardWork()
	q.dest, q.destQPN, q.dialer = peerAddr{}, 0, false
	q.connLost, q.lostErr = false, 0
	q.rnrWait = false
	q.timed.Store(false)
	q.state.Store(uint32(rdmaio.StateReset))
}

// discardWork drops every outstanding work request without completions.
// Indices keep growing, so that completions of the discarded requests still
// in a CQ free nothing when they are polled.
func (q *qp) discardWork() {
	for i := q.sqFree.Load(); i < q.sqTail; i++ {
		e := &q.sq[i%uint64(len(q.sq))]
		clearBufs(e.sg)
		e.sg = e.sg[:0]
		e.ah = nil
	}
	q.sqXmit, q.sqAck, q.sqHigh = q.sqTail, q.sqTail, q.sqTail
	q.sqFree.Store(q.sqTail)
	q.rq.Discard()
}

func clearBufs(b [][]byte) {
	b = b[:cap(b)]
	for i := range b {
		b[i] = nil
	}
}

// shutdownLocked makes the QP unusable (QP.Close, Device.Close). q.mu is
// held.
func (q *qp) shutdownLocked() {
	if q.closed {
		return
	}
	q.dropConn(false)
	q.dropPending()
	q.discardWork()
	q.closed = true
	q.timed.Store(false)
}

// Close destroys the QP. Outstanding work is discarded without completions.
func (q *qp) Close() error {
	d := q.dev
	if err := d.life.Begin(); err != nil {
		return q.errf("close: %w", err)
	}
	defer d.life.End()
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return q.errf("close: %w", rdmaio.ErrClosed)
	}
	q.shutdownLocked()
	q.mu.Unlock()
	d.mu.Lock()
	if d.qps[q.slot].Load() == q {
		d.qps[q.slot].Store(nil)
	}
	d.mu.Unlock()
	recvDepth := q.cap.MaxRecvWR
	if q.srq != nil {
		recvDepth = q.srq.rq.Depth()
	}
	q.sendCQ.detach(q.cap.MaxSendWR)
	q.recvCQ.detach(recvDepth)
	q.pd.use.Add(provider.ObjQP, -1)
	if q.srq != nil {
		q.srq.mu.Lock()
		q.srq.users--
		q.srq.mu.Unlock()
	}
	return nil
}

// setErr moves the QP to ERR: every outstanding work request is flushed (the
// send queue's are completed by completeSend, in order), and the connection
// is dropped gracefully so that the peer learns it. q.mu is held.
func (q *qp) setErr() {
	s := q.State()
	if s == rdmaio.StateReset {
		return
	}
	q.state.Store(uint32(rdmaio.StateErr))
	q.afterErr(s)
}

// enterErr moves the QP to ERR before the error completion that causes it
// is queued (a program that polls the completion then finds the QP in ERR,
// as with verbs) and returns the state it left; afterErr(prev) must follow
// the push. It returns StateReset, and changes nothing, for a QP in RESET.
func (q *qp) enterErr() rdmaio.QPState {
	s := q.State()
	if s != rdmaio.StateReset {
		q.state.Store(uint32(rdmaio.StateErr))
	}
	return s
}

// afterErr completes the move to ERR from state s (see setErr). q.mu is
// held.
func (q *qp) afterErr(s rdmaio.QPState) {
	if s == rdmaio.StateReset {
		return
	}
	q.rnrWait = false
	q.timed.Store(false)
	depth := uint64(len(q.sq))
	for i := q.sqAck; i < q.sqTail; i++ {
		if e := &q.sq[i%depth]; !e.done {
			e.done, e.status, e.vendor = true, rdmaio.StatusWRFlushErr, 0
		}
	}
	if c := q.conn; c != nil {
		q.releaseBody(c, true) // a receive taken by a message still arriving
	}
	q.flushRecv()
	if s != rdmaio.StateErr {
		// Finish a half-written request frame and send the responses (a
		// NAK) before the connection closes.
		q.dropConn(true)
		q.dropPending()
	}
	q.sqXmit = q.sqTail
}

// flushRecv completes every posted receive with StatusWRFlushErr (not those
// of an SRQ, which belong to other QPs too). q.mu is held.
func (q *qp) flushRecv() {
	for r := q.rq.Front(); r != nil; r = q.rq.Front() {
		wc := rdmaio.WorkCompletion{ID: r.ID, Status: rdmaio.StatusWRFlushErr, Opcode: rdmaio.WCRecv, QPN: q.qpn, SrcRank: -1}
		clearBufs(r.SG)
		q.rq.Pop()
		q.recvCQ.push(&wc, nil, 0)
	}
}

// completeSend reports the send queue's finished entries in order: signaled
// ones and errors produce completions; an error moves the QP to ERR, which
// flushes the rest. q.mu is held.
func (q *qp) completeSend() {
	depth := uint64(len(q.sq))
	for q.sqAck < q.sqTail {
		e := &q.sq[q.sqAck%depth]
		if !e.done {
			break
		}
		pos := q.sqAck
		q.sqAck++
		failed := e.status != rdmaio.StatusSuccess
		fatal := failed && e.status != rdmaio.StatusWRFlushErr
		prev := rdmaio.StateErr
		if fatal {
			prev = q.enterErr()
		}
		if e.signaled || failed {
			wc := rdmaio.WorkCompletion{ID: e.id, Status: e.status, Opcode: e.op.WCOpcode(), QPN: q.qpn, SrcRank: -1, VendorErr: e.vendor}
			if !failed && (e.op == rdmaio.OpRDMARead || e.op.IsAtomic()) {
				wc.ByteLen = e.length
			}
			q.sendCQ.push(&wc, q, pos)
		}
		clearBufs(e.sg)
		e.ah = nil
		if fatal {
			q.afterErr(prev)
		}
	}
	if q.sqXmit < q.sqAck {
		q.sqXmit = q.sqAck
	}
}

// reclaim frees the send queue entries up to pos (a polled completion).
func (q *qp) reclaim(pos uint64) {
	for {
		cur := q.sqFree.Load()
		if pos+1 <= cur || q.sqFree.CompareAndSwap(cur, pos+1) {
			return
		}
	}
}

// resolve checks one local SGE against its region and returns the buffer it
// names.
func (d *Device) resolve(p *pd, sge *rdmaio.SGE, need rdmaio.Access) ([]byte, rdmaio.Status) {
	m := d.mrs.Lookup(sge.LKey)
	if m == nil || m.pd != p {
		return nil, rdmaio.StatusLocProtErr
	}
	if st := provider.CheckLocal(m.access, need, m.base, uint64(len(m.buf)), sge.Addr, uint64(sge.Length)); st != rdmaio.StatusSuccess {
		return nil, st
	}
	off := sge.Addr - m.base
	return m.buf[off : off+uint64(sge.Length) : off+uint64(sge.Length)], rdmaio.StatusSuccess
}

// ResolveLocal implements provider.LocalResolver: it resolves an SGE of a
// work request posted to the PD's QPs and SRQs.
func (p *pd) ResolveLocal(sge *rdmaio.SGE, need rdmaio.Access) ([]byte, rdmaio.Status) {
	return p.dev.resolve(p, sge, need)
}

// PostSend posts a chain of send work requests and transmits what it can at
// once (one system call for the chain).
func (q *qp) PostSend(wrs []rdmaio.SendWR) (int, error) {
	if h := heldAck.Load(); h != nil && h != q {
		q.dev.releaseHeldAck(true) // not going with this frame
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return 0, q.errf("post send: %w", rdmaio.ErrClosed)
	}
	st := q.State()
	if err := provider.CanPostSend(st); err != nil {
		q.mu.Unlock()
		return 0, q.errf("post send: %w", err)
	}
	depth := uint64(len(q.sq))
	n := 0
	var err error
	for i := range wrs {
		wr := &wrs[i]
		if err = provider.CheckSendWR(&q.limits, wr); err != nil {
			break
		}
		if q.typ == rdmaio.UD {
			if _, ok := wr.AH.(*ah); !ok {
				err = fmt.Errorf("%w: address handle of another provider", rdmaio.ErrInvalidArgument)
				break
			}
		}
		if q.sqTail-q.sqFree.Load() >= depth {
			err = fmt.Errorf("%w: send queue depth %d", rdmaio.ErrQueueFull, depth)
			break
		}
		q.fill(&q.sq[q.sqTail%depth], wr, st)
		q.sqTail++
		n++
	}
	if n > 0 {
		if q.typ == rdmaio.UD {
			q.sendUD()
		}
		q.completeSend()
		if q.typ == rdmaio.RC {
			q.flush()
			if !q.dev.watchOn.Load() {
				q.dev.startWatch(watchTick(q.bound))
			}
		}
	}
	q.mu.Unlock()
	if err != nil {
		return n, q.errf("post send: work request %d (id %d): %w", n, wrs[n].ID, err)
	}
	return n, nil
}

// fill turns a checked work request into a send queue entry.
func (q *qp) fill(e *sqe, wr *rdmaio.SendWR, st rdmaio.QPState) {
	e.id, e.op, e.done, e.status, e.vendor, e.rnrTries = wr.ID, wr.Opcode, false, rdmaio.StatusSuccess, 0, 0
	e.signaled = q.sigAll || wr.Flags&rdmaio.SendSignaled != 0
	e.length = uint32(wr.Length())
	e.sg = e.sg[:0]
	e.inline = wr.Inline != nil
	e.ah = nil
	if e.inline {
		e.inl = e.inl[:copy(e.inl[:cap(e.inl)], wr.Inline)]
	} else {
		need := provider.LocalAccess(wr.Opcode)
		for j := range wr.SGL {
			b, s := q.dev.resolve(q.pd, &wr.SGL[j], need)
			if s != rdmaio.StatusSuccess {
				e.done, e.status = true, s
				clearBufs(e.sg)
				e.sg = e.sg[:0]
				break
			}
			e.sg = append(e.sg, b)
		}
	}
	if st == rdmaio.StateErr {
		e.done, e.status = true, rdmaio.StatusWRFlushErr
	}
	if q.typ == rdmaio.UD {
		e.ah = wr.AH.(*ah)
		var h udHeader
		h.srcRank, h.token, h.dstDev = uint32(q.dev.cfg.Rank), q.dev.udToken, e.ah.devID
		h.srcQPN, h.dstQPN, h.qkey = q.qpn, wr.RemoteQPN, wr.RemoteQKey
		if wr.Opcode == rdmaio.OpSendImm {
			h.flags, h.imm = udImm, wr.Imm
		}
		h.encode(e.hdr[:udHdrLen])
		e.hdrLen = udHdrLen
		return
	}
	f := frame{typ: requestType(wr.Opcode), psn: uint32(q.sqTail - q.psnBase), length: e.length, rkey: wr.RKey, raddr: wr.RemoteAddr}
	if wr.Opcode.HasImm() {
		f.imm = wr.Imm
	}
	switch wr.Opcode {
	case rdmaio.OpAtomicCmpSwp:
		f.a, f.b = wr.CompareAdd, wr.Swap
	case rdmaio.OpAtomicFetchAdd:
		f.a = wr.CompareAdd
	case rdmaio.OpSend, rdmaio.OpSendImm:
		f.rkey, f.raddr = 0, 0
	}
	if e.signaled {
		f.flags = flAckReq
	}
	e.hdrLen = uint8(f.encode(e.hdr[:]))
}

// PostRecv posts a chain of receive work requests.
func (q *qp) PostRecv(wrs []rdmaio.RecvWR) (int, error) {
	if q.srq != nil {
		return 0, q.errf("post recv: %w: the QP uses an SRQ", rdmaio.ErrInvalidArgument)
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return 0, q.errf("post recv: %w", rdmaio.ErrClosed)
	}
	st := q.State()
	if err := provider.CanPostRecv(st); err != nil {
		q.mu.Unlock()
		return 0, q.errf("post recv: %w", err)
	}
	n, err := q.rq.Post(q.pd, wrs)
	if st == rdmaio.StateErr {
		q.flushRecv()
	}
	q.mu.Unlock()
	if err != nil {
		return n, q.errf("post recv: work request %d (id %d): %w", n, wrs[n].ID, err)
	}
	return n, nil
}

// takeRecv removes the next receive work request (of the QP or its SRQ),
// moving its buffers to q.rsg. ok is false when none is posted. q.mu is
// held.
func (q *qp) takeRecv() (id uint64, st rdmaio.Status, ok bool) {
	rq := &q.rq
	if s := q.srq; s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return 0, 0, false
		}
		rq = &s.rq
	}
	r := rq.Front()
	if r == nil {
		return 0, 0, false
	}
	// The entry's buffer list and q.rsg (cleared after every use) trade
	// places: no copy, and the entry gets a clean list for its next post.
	q.rsg, r.SG = r.SG, q.rsg[:0]
	id, st = r.ID, r.Status
	rq.Pop()
	return id, st, true
}

// references reports whether outstanding work requests name memory in
// [lo, hi).
func (q *qp) references(lo, hi uintptr) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := q.sqFree.Load(); i < q.sqTail; i++ {
		for _, b := range q.sq[i%uint64(len(q.sq))].sg {
			if provider.Overlaps(b, lo, hi) {
				return true
			}
		}
	}
	if q.rq.References(lo, hi) {
		return true
	}
	if c := q.conn; c != nil {
		for _, b := range c.body.dst { // a message arriving into a receive already taken
			if provider.Overlaps(b, lo, hi) {
				return true
			}
		}
	}
	return false
}

// onTimer runs the QP's timers: the end of a receiver-not-ready wait, the
// deadline of a connection that did not come. q.mu is held.
func (q *qp) onTimer(now time.Time) {
	q.timed.Store(false)
	if q.closed {
		return
	}
	q.flush()
}

// schedule arms the QP's timer for t. q.mu is held.
func (q *qp) schedule(t time.Time) {
	q.timed.Store(true)
	q.dev.arm(t)
}
