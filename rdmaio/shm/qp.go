package shm

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/internal/qlock"
	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// sqe is a send queue entry: a posted send work request, resolved.
type sqe struct {
	id       uint64
	op       rdmaio.Opcode
	signaled bool
	// unordered: an RDMA READ posted with SendUnordered, which runs
	// without waiting for the ring entries before it to be acknowledged.
	unordered bool
	done      bool // completed (status is final)
	inRing    bool // published in the peer's ring, not yet acknowledged
	inline    bool
	shared    bool // every buffer is in shared memory (a descriptor costs no system call)
	status    rdmaio.Status
	vendor    uint32
	length    uint32
	imm       uint32
	rkey      uint32
	raddr     uint64
	cmp       uint64
	swap      uint64
	ah        *ah
	rqpn      uint32
	rqkey     uint32
	sg        [][]byte  // local buffers, resolved at post
	src       []srcDesc // where each buffer lives, for descriptors
	inl       []byte    // inline storage
	start     uint64    // ring position of the entry
	end       uint64    // ring position after it
	seq       uint64    // sequence number stamped on the entry
}

// srcDesc says how a peer reaches one local buffer: in a shared allocation
// (kindShared: allocation id and offset) or by address (kindHeap: CMA).
type srcDesc struct {
	kind, seg uint32
	off       uint64
}

// qp is a queue pair. Its send side is guarded by smu, its receive side by
// rmu (Modify and teardown take both, smu first).
type qp struct {
	dev    *Device
	pd     *pd
	typ    rdmaio.QPType
	idx    int
	qpn    uint32
	cap    rdmaio.QPCap
	sigAll bool
	limits provider.QPLimits
	sendCQ *cq
	recvCQ *cq
	srq    *srq
	ctl    []byte // control slot in the main segment
	ring   []byte // inbound ring (RC) or inbox (UD)
	udN    uint64 // UD inbox slots
	udS    uint64 // UD inbox slot size

	state    atomic.Uint32
	stalled  atomic.Bool
	sendBusy atomic.Bool // work outstanding in the send queue
	sendHot  atomic.Bool // and some of it can complete now (see updateSend)

	// Send side, guarded by smu.
	smu     qlock.Mutex
	closed  bool   // guarded by smu and rmu
	sq      []sqe  // a power of two of entries: request i is sq[i&sqMask]
	sqMask  uint64 // len(sq) - 1
	sqDepth uint64 // the send queue's depth (QPCap.MaxSendWR), at most len(sq)
	sqTail  uint64 // next free entry
	sqExec  uint64 // next entry to execute
	sqAck   uint64 // next entry to acknowledge
	sqRep   uint64 // next entry to report
	sqFree  uint64 // entries before it are free
	qkey    uint32
	access  rdmaio.Access
	liov    []unix.Iovec
	riov    []unix.RemoteIovec
	eager   uint32
	myID    uint64 // (devID<<32 | qpn): producer identity
	checks  uint32
	sigOut  int    // signaled work requests not yet reported
	idle    uint32 // polls without acknowledgement progress
	rnrPos  uint64
	rnrFrom time.Time

	// Runs of one-sided operations on ordinary memory (heapRun): iovecs
	// and the in-use words held, allocated at the first run; entries
	// before serial execute one at a time (a batched call failed).
	bliov    []unix.Iovec
	briov    []unix.RemoteIovec
	binuse   []*uint32
	serial   uint64
	cmaCalls uint64 // process_vm_readv/writev calls of one-sided operations

	// RC connection (set by RTR).
	peer       *peer
	pctl       []byte // the remote QP's control slot
	pring      []byte // the remote QP's inbound ring: we produce into it
	destQPN    uint32
	prod       uint64 // our write position in pring (bytes, growing)
	pseq       uint64 // sequence number of the next entry we write
	acked      uint64 // position up to which the consumer has acknowledged
	unacked    int    // ring entries not yet acknowledged
	peerRecvDB []byte
	peerSendDB []byte
	peerPosted *int64 // the remote QP's cPosted, or its SRQ's sPosted
	peerSRQ    bool   // peerPosted is an SRQ's count of receives left
	peerTaken  int64  // ring entries acknowledged since we connected
	rnrRetry   int
	destID     uint64 // (devID<<32 | qpn) of the remote QP: the producer it writes into our ring as
	// hintSeen is the last ackHint that acks used: a newer one spares it
	// the read of cAcked; ackReads counts those reads.
	hintSeen uint64
	ackReads uint64

	// Receive side, guarded by rmu.
	rmu  qlock.Mutex
	rq   provider.RecvQueue
	cons uint64 // our read position in ring (bytes, growing; UD: slots)
	cseq uint64 // RC: sequence number of the next entry we expect
	// consA follows the consumer (syncConsA) for recvIdle: RC
	// cseq<<32 | cons%ring (| consOwed), UD cons.
	consA atomic.Uint64
	dead  bool // inbound ring abandoned by its producer
	// ackOwed: Take consumed entries that cAcked does not acknowledge yet;
	// the QP's next post, Take or poll does (see Take).
	ackOwed bool
	// ackHint is the sequence number of the last entry of ours that the
	// remote QP consumed, as its entries carried it back (efAck): written
	// under rmu, read by acks under smu.
	ackHint atomic.Uint64
	rsg     [][]byte
	rsub    [][]byte
	rone    [1][]byte
	rliov   []unix.Iovec
	rriov   [1]unix.RemoteIovec
}

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
	q := &qp{dev: d, pd: p, typ: attr.Type, cap: c, sigAll: attr.SigAll, sendCQ: scq, recvCQ: rcq, srq: s}
	q.limits = provider.QPLimits{Type: attr.Type, Cap: c, MTU: d.lay.mtu, MaxMsgSize: maxMsgSize}
	// The send queue holds a power of two of entries, at least the depth,
	// so that a request's slot is its sequence number masked, not divided.
	q.sqDepth = uint64(c.MaxSendWR)
	q.sq = make([]sqe, 1<<bits.Len(uint(c.MaxSendWR-1)))
	q.sqMask = uint64(len(q.sq) - 1)
	inl := make([]byte, len(q.sq)*c.MaxInline)
	warm := d.opt.warm
	if warm {
		// Write to every page of the send queue now (see touchPages): the
		// first sends would otherwise each pay for the pages of a fresh
		// entry.
		clear(inl)
	}
	for i := range q.sq {
		q.sq[i].sg = make([][]byte, 0, c.MaxSendSGE)
		q.sq[i].src = make([]srcDesc, 0, c.MaxSendSGE)
		if warm {
			clear(q.sq[i].sg[:c.MaxSendSGE])
			clear(q.sq[i].src[:c.MaxSendSGE])
		}
		q.sq[i].inl = inl[i*c.MaxInline : (i+1)*c.MaxInline : (i+1)*c.MaxInline]
	}
	if s == nil {
		q.rq = provider.NewRecvQueue(c.MaxRecvWR, c.MaxRecvSGE)
	}
	q.liov = make([]unix.Iovec, c.MaxSendSGE)
	q.riov = make([]unix.RemoteIovec, 1)
	q.rsg = make([][]byte, 0, maxSGE)
	q.rsub = make([][]byte, 0, maxSGE)
	q.rliov = make([]unix.Iovec, maxSGE)

	d.mu.Lock()
	i := -1
	for j, x := range d.qps {
		if x == nil {
			i = j
			break
		}
	}
	if i < 0 {
		d.mu.Unlock()
		return nil, d.errf("create qp: %w: all %d QPs in use (option max_qp)", rdmaio.ErrInvalidArgument, d.lay.maxQP)
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
	d.gens[i]++
	if d.gens[i] == 0 {
		d.gens[i] = 1
	}
	gen := uint32(d.gens[i])
	q.idx, q.qpn = i, gen<<16|uint32(i)
	q.myID = uint64(d.devID)<<32 | uint64(q.qpn)
	q.ctl = d.main.mem[d.lay.qp(i) : d.lay.qp(i)+qpCtlBytes]
	q.ring = d.main.mem[d.lay.ring(i) : d.lay.ring(i)+d.lay.ringBytes]
	q.udS = uint64(udSlotBytes(d.lay.mtu))
	q.udN = uint64(udSlots(d.lay.ringBytes, d.lay.mtu))
	put32(q.ctl, cType, uint32(q.typ))
	put32(q.ctl, cQKey, 0)
	put32(q.ctl, cAccess, 0)
	srqIdx := int32(-1)
	if s != nil {
		srqIdx = int32(s.idx)
	}
	put32(q.ctl, cSRQ, uint32(srqIdx))
	put32(q.ctl, cRecvDB, uint32(rcq.idx))
	put32(q.ctl, cSendDB, uint32(scq.idx))
	storeI64(q.ctl, cMinRNR, int64(time.Millisecond))
	q.resetRing()
	store32(q.ctl, cState, uint32(rdmaio.StateReset))
	store32(q.ctl, cQPN, q.qpn)
	d.qps[i] = q
	d.mu.Unlock()

	if scq == rcq {
		scq.attach(q, true, true)
	} else {
		scq.attach(q, true, false)
		rcq.attach(q, false, true)
	}
	return q, nil
}

func (q *qp) QPN() uint32           { return q.qpn }
func (q *qp) Type() rdmaio.QPType   { return q.typ }
func (q *qp) Cap() rdmaio.QPCap     { return q.cap }
func (q *qp) State() rdmaio.QPState { return rdmaio.QPState(q.state.Load()) }

func (q *qp) errf(format string, args ...any) error {
	return q.dev.errf("qp %d: "+format, append([]any{q.qpn}, args...)...)
}

// resetRing empties the inbound ring or inbox and the connection words.
// Both locks are held (or the QP is not yet visible).
func (q *qp) resetRing() {
	store64(q.ctl, cProducer, 0)
	store64(q.ctl, cHead, 0)
	store64(q.ctl, cAcked, 0)
	store32(q.ctl, cDead, 0)
	storeI64(q.ctl, cPosted, 0)
	if q.typ == rdmaio.UD {
		for i := uint64(0); i < q.udN; i++ {
			store64(q.ring, int(i*q.udS)+uSeq, i)
		}
		q.cons = 0
		q.consA.Store(0)
	} else {
		// A ring that a QP has ever owned may hold old states and payload,
		// written by any peer that connected to it: zero the first word of
		// every line. A ring never used is zero already and left untouched,
		// so that its pages are not allocated before they are needed,
		// unless the device warms its rings (options.warm).
		if q.dev.used[q.idx] {
			for off := 0; off < len(q.ring); off += lineSize {
				store64(q.ring, off, 0)
			}
		}
		if q.dev.opt.warm {
			touchPages(q.ring)
		}
		q.dev.used[q.idx] = true
		q.cons, q.cseq = 0, 1
		q.consA.Store(1 << 32)
	}
	q.dead, q.ackOwed = false, false
}

func (q *qp) setState(s rdmaio.QPState) {
	q.state.Store(uint32(s))
	store32(q.ctl, cState, uint32(s))
}

// setErr moves the QP to ERR after a fatal completion (one of smu or rmu is
// held) and wakes local waiters so that they see the flush.
func (q *qp) setErr() {
	for {
		s := q.state.Load()
		if s == uint32(rdmaio.StateErr) || s == uint32(rdmaio.StateReset) {
			return
		}
		if q.state.CompareAndSwap(s, uint32(rdmaio.StateErr)) {
			store32(q.ctl, cState, uint32(rdmaio.StateErr))
			q.sendBusy.Store(true)
			q.sendHot.Store(true)
			q.sendCQ.wake()
			q.recvCQ.wake()
			return
		}
	}
}

func (q *qp) setStalled(v bool) {
	if q.stalled.Load() != v {
		q.stalled.Store(v)
		if v {
			q.dev.stalled.Add(1)
		} else {
			q.dev.stalled.Add(-1)
		}
	}
}

// Modify moves the QP through the verbs state machine.
func (q *qp) Modify(attr rdmaio.QPAttr) error {
	d := q.dev
	if err := d.life.Begin(); err != nil {
		return q.errf("modify: %w", err)
	}
	defer d.life.End()
	q.smu.Lock()
	defer q.smu.Unlock()
	q.rmu.Lock()
	defer q.rmu.Unlock()
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
	case rdmaio.StateInit:
		q.access, q.qkey = attr.Access, attr.QKey
		put32(q.ctl, cAccess, uint32(attr.Access))
		put32(q.ctl, cQKey, attr.QKey)
	case rdmaio.StateRTR:
		rnr := attr.MinRNRTimer
		if rnr == 0 {
			rnr = time.Millisecond
		}
		storeI64(q.ctl, cMinRNR, int64(rnr))
		if q.typ == rdmaio.RC {
			if err := q.connect(&attr); err != nil {
				return q.errf("modify INIT → RTR: %w", err)
			}
		}
	case rdmaio.StateRTS:
		if q.typ == rdmaio.RC && cur == rdmaio.StateRTR {
			q.rnrRetry = attr.RNRRetry
		}
	}
	q.setState(attr.State)
	if attr.State == rdmaio.StateErr {
		q.sendBusy.Store(true)
		q.sendHot.Store(true)
		q.sendCQ.wake()
		q.recvCQ.wake()
	}
	return nil
}

// connect attaches an RC QP to the remote QP attr names: it maps the peer,
// claims the remote QP's inbound ring as its only producer, and notes the
// remote doorbells.
func (q *qp) connect(attr *rdmaio.QPAttr) error {
	p, err := q.dev.peerFor(attr.Dest.Addr)
	if err != nil {
		return err
	}
	ctl := p.qpCtl(attr.DestQPN)
	if ctl == nil {
		return fmt.Errorf("%w: rank %d has no QP %d", rdmaio.ErrBadAddress, p.rank, attr.DestQPN)
	}
	if rdmaio.QPType(get32(ctl, cType)) != rdmaio.RC {
		return fmt.Errorf("%w: QP %d of rank %d is not an RC QP", rdmaio.ErrBadAddress, attr.DestQPN, p.rank)
	}
	if old := load64(ctl, cProducer); old != q.myID {
		if !atomic.CompareAndSwapUint64(p64(ctl, cProducer), 0, q.myID) {
			if load64(ctl, cProducer) == claimUsed {
				return fmt.Errorf("QP %d of rank %d was connected before and must be reset (RESET → INIT → RTR) before it connects again: %w", attr.DestQPN, p.rank, rdmaio.ErrInUse)
			}
			return fmt.Errorf("QP %d of rank %d is already connected to another QP: %w", attr.DestQPN, p.rank, rdmaio.ErrInUse)
		}
		q.prod, q.pseq, q.acked, q.peerTaken = 0, 1, 0, 0
		q.ackHint.Store(0)
		q.hintSeen = 0
	}
	q.destID = uint64(p.devID)<<32 | uint64(attr.DestQPN)
	q.peer, q.pctl, q.pring, q.destQPN = p, ctl, p.ring(attr.DestQPN), attr.DestQPN
	if q.dev.opt.warm {
		touchPages(q.pring)
	}
	q.unacked = 0
	q.peerRecvDB = p.doorbell(get32(ctl, cRecvDB))
	q.peerSendDB = p.doorbell(get32(ctl, cSendDB))
	q.peerPosted, q.peerSRQ = p.postedWord(ctl)
	q.eager = uint32(min(q.dev.opt.eager, p.lay.ringBytes/4))
	q.rnrPos, q.rnrFrom = ^uint64(0), time.Time{}
	return nil
}

// resetLocked returns the QP to RESET: work is discarded without
// completions, the claim on the remote ring is released, the inbound ring is
// emptied. Both locks are held.
func (q *qp) resetLocked() {
	q.dropLocked()
	q.resetRing()
	q.setState(rdmaio.StateReset)
}

// dropLocked discards all work and the connection, leaving the shared words
// of the inbound ring as they are: a peer may still read from them that its
// last messages were consumed. Both locks are held.
func (q *qp) dropLocked() {
	if q.pctl != nil {
		atomic.CompareAndSwapUint64(p64(q.pctl, cProducer), q.myID, claimUsed)
	}
	q.peer, q.pctl, q.pring, q.destQPN = nil, nil, nil, 0
	q.peerRecvDB, q.peerSendDB, q.peerPosted = nil, nil, nil
	for i := range q.sq {
		clearAllBufs(q.sq[i].sg)
		q.sq[i].ah = nil
	}
	q.sqTail, q.sqExec, q.sqAck, q.sqRep, q.sqFree = 0, 0, 0, 0, 0
	q.serial = 0
	q.unacked = 0
	q.sigOut = 0
	q.setStalled(false)
	q.sendBusy.Store(false)
	q.sendHot.Store(false)
	q.rq.Reset()
	storeI64(q.ctl, cPosted, 0)
}

// clearBufs drops the references of b's elements so that the garbage
// collector does not keep the buffers alive. The scatter/gather lists keep
// every element past their length nil (each is cleared before it is
// truncated), so clearing the length suffices; clearAllBufs clears the
// capacity, for the cold paths that reset a queue.
func clearBufs(b [][]byte) { clear(b) }

func clearAllBufs(b [][]byte) { clear(b[:cap(b)]) }

// touchPages writes to every page of b without changing it (an atomic add
// of zero to its first word), so that the pages of a ring are resident and
// mapped for writing before the first message: a first touch costs tens of
// microseconds on some virtual machines (the hypervisor builds its
// mappings then), far more than a message. Peers may use b meanwhile.
func touchPages(b []byte) {
	for off := 0; off+8 <= len(b); off += pageSize {
		atomic.AddUint64(p64(b, off), 0)
	}
	if n := len(b) &^ 7; n >= 8 {
		atomic.AddUint64(p64(b, n-8), 0)
	}
}

// shutdown makes the QP unusable (QP.Close, Device.Close).
func (q *qp) shutdown() {
	q.smu.Lock()
	q.rmu.Lock()
	if !q.closed {
		q.dropLocked()
		q.closed = true
	}
	q.rmu.Unlock()
	q.smu.Unlock()
}

func (q *qp) Close() error {
	d := q.dev
	if err := d.life.Begin(); err != nil {
		return q.errf("close: %w", err)
	}
	defer d.life.End()
	q.smu.Lock()
	closed := q.closed
	q.smu.Unlock()
	if closed {
		return q.errf("close: %w", rdmaio.ErrClosed)
	}
	q.sendCQ.detach(q)
	q.recvCQ.detach(q)
	q.shutdown()
	d.mu.Lock()
	if d.qps[q.idx] == q {
		d.qps[q.idx] = nil
		store32(q.ctl, cQPN, 0)
	}
	d.mu.Unlock()
	q.pd.use.Add(provider.ObjQP, -1)
	if q.srq != nil {
		q.srq.mu.Lock()
		q.srq.users--
		q.srq.mu.Unlock()
	}
	return nil
}

// references reports whether outstanding work requests name memory in
// [lo, hi).
func (q *qp) references(lo, hi uintptr) bool {
	q.smu.Lock()
	for i := q.sqFree; i < q.sqTail; i++ {
		for _, b := range q.sq[i&q.sqMask].sg {
			if provider.Overlaps(b, lo, hi) {
				q.smu.Unlock()
				return true
			}
		}
	}
	q.smu.Unlock()
	q.rmu.Lock()
	defer q.rmu.Unlock()
	return q.rq.References(lo, hi)
}

// resolve checks one local SGE against its region and returns the buffer it
// names and how a peer reaches it.
func (d *Device) resolve(p *pd, sge *rdmaio.SGE, need rdmaio.Access) ([]byte, srcDesc, rdmaio.Status) {
	m := d.mrs.Lookup(sge.LKey)
	if m == nil || m.pd != p {
		return nil, srcDesc{}, rdmaio.StatusLocProtErr
	}
	if st := provider.CheckLocal(m.access, need, m.base, uint64(len(m.buf)), sge.Addr, uint64(sge.Length)); st != rdmaio.StatusSuccess {
		return nil, srcDesc{}, st
	}
	off := sge.Addr - m.base
	b := m.buf[off : off+uint64(sge.Length)]
	if m.alloc != nil {
		return b, srcDesc{kind: kindShared, seg: m.alloc.id, off: m.aoff + off}, rdmaio.StatusSuccess
	}
	return b, srcDesc{kind: kindHeap, off: m.base + off}, rdmaio.StatusSuccess
}

// ResolveLocal implements provider.LocalResolver: it resolves an SGE of a
// work request posted to the PD's QPs and SRQs.
func (p *pd) ResolveLocal(sge *rdmaio.SGE, need rdmaio.Access) ([]byte, rdmaio.Status) {
	b, _, st := p.dev.resolve(p, sge, need)
	return b, st
}

// PostSend validates, resolves and queues a chain of send work requests,
// executes what it can and notifies the peer once.
func (q *qp) PostSend(wrs []rdmaio.SendWR) (int, error) {
	q.smu.Lock()
	if q.closed {
		q.smu.Unlock()
		return 0, q.errf("post send: %w", rdmaio.ErrClosed)
	}
	if err := provider.CanPostSend(q.State()); err != nil {
		q.smu.Unlock()
		return 0, q.errf("post send: %w", err)
	}
	depth := q.sqDepth
	n := 0
	var err error
	for i := range wrs {
		wr := &wrs[i]
		if err = provider.CheckSendWR(&q.limits, wr); err != nil {
			break
		}
		if q.sqTail-q.sqFree >= depth {
			err = fmt.Errorf("%w: send queue depth %d", rdmaio.ErrQueueFull, depth)
			break
		}
		e := &q.sq[q.sqTail&q.sqMask]
		if err = q.fill(e, wr); err != nil {
			break
		}
		if e.signaled {
			q.sigOut++
		}
		q.sqTail++
		n++
	}
	if n > 0 {
		q.run()
		q.updateSend()
	}
	q.smu.Unlock()
	q.flushAck()
	if err != nil {
		return n, q.errf("post send: work request %d (id %d): %w", n, wrs[n].ID, err)
	}
	return n, nil
}

// fill resolves wr into e. An error refuses the post; a bad memory reference
// instead sets e.status, which completes the request with that error.
// reset readies e for a new work request: not done, successful so far,
// no operands, no address handle, no gather list.
func (e *sqe) reset(id uint64, op rdmaio.Opcode, signaled bool) {
	e.id, e.op, e.signaled = id, op, signaled
	e.done, e.inRing, e.unordered = false, false, false
	e.status, e.vendor = rdmaio.StatusSuccess, 0
	e.imm, e.rkey, e.raddr, e.cmp, e.swap = 0, 0, 0, 0, 0
	e.ah = nil
	e.sg, e.src = e.sg[:0], e.src[:0]
}

func (q *qp) fill(e *sqe, wr *rdmaio.SendWR) error {
	e.reset(wr.ID, wr.Opcode, q.sigAll || wr.Flags&rdmaio.SendSignaled != 0)
	e.unordered = wr.Opcode == rdmaio.OpRDMARead && wr.Flags&rdmaio.SendUnordered != 0
	e.imm, e.rkey, e.raddr = wr.Imm, wr.RKey, wr.RemoteAddr
	e.cmp, e.swap = wr.CompareAdd, wr.Swap
	if q.typ == rdmaio.UD {
		a, ok := wr.AH.(*ah)
		if !ok || a == nil || a.pd != q.pd || a.closed.Load() {
			return fmt.Errorf("%w: address handle is not an open AH of this PD", rdmaio.ErrInvalidArgument)
		}
		e.ah, e.rqpn, e.rqkey = a, wr.RemoteQPN, wr.RemoteQKey
	}
	if wr.Inline != nil {
		e.inline = true
		b := e.inl[:copy(e.inl, wr.Inline)]
		e.sg = append(e.sg, b)
		e.src = append(e.src, srcDesc{})
		e.length = uint32(len(b))
		return nil
	}
	e.inline = false
	need := provider.LocalAccess(wr.Opcode)
	heap := false
	e.shared = len(wr.SGL) > 0
	for i := range wr.SGL {
		b, src, st := q.dev.resolve(q.pd, &wr.SGL[i], need)
		if st != rdmaio.StatusSuccess {
			e.status = st
			clearBufs(e.sg)
			e.sg = e.sg[:0]
			break
		}
		e.sg = append(e.sg, b)
		e.src = append(e.src, src)
		heap = heap || src.kind == kindHeap
	}
	e.shared = e.shared && !heap
	e.length = uint32(rdmaio.SGLLength(wr.SGL))
	if heap && q.typ == rdmaio.RC && wr.Opcode.ConsumesRecv() && e.length > q.eager && q.dev.cmaErr != nil {
		clearBufs(e.sg)
		return fmt.Errorf("%w: %v of %d bytes from ordinary Go memory: the receiver copies it with process_vm_readv, which is unavailable (%v); send from PD.Alloc memory or at most %d bytes",
			rdmaio.ErrNotSupported, wr.Opcode, e.length, q.dev.cmaErr, q.eager)
	}
	return nil
}

// run executes queued work in order and notifies the peer of new ring
// entries. smu is held.
func (q *qp) run() {
	if q.execute() {
		ringDoorbell(q.peerRecvDB)
	}
}

// execute runs queued send work in posting order: UD sends and one-sided
// operations complete here; SENDs and RDMA WRITEs with immediate go into the
// peer's ring. A one-sided operation waits until every ring entry before it
// is acknowledged, which keeps RC ordering, unless it is an unordered READ
// (rdmaio.SendUnordered), which reads no memory those entries deliver
// into. It returns whether it wrote ring entries. smu is held.
func (q *qp) execute() (pushed bool) {
	local := false
	// An RC connection whose remote QP was destroyed (its slot may already
	// hold another QP) or claimed by someone else must not be written to.
	if q.pctl != nil && q.State() == rdmaio.StateRTS &&
		(load32(q.pctl, cQPN) != q.destQPN || load64(q.pctl, cProducer) != q.myID) {
		e := &q.sq[q.sqExec&q.sqMask]
		e.status, e.vendor, e.done = rdmaio.StatusRetryExcErr, VendorQPDestroyed, true
		q.sqExec++
		q.setErr()
	}
	for q.sqExec < q.sqTail {
		e := &q.sq[q.sqExec&q.sqMask]
		switch {
		case q.State() == rdmaio.StateErr:
			e.status, e.done = rdmaio.StatusWRFlushErr, true
		case e.status != rdmaio.StatusSuccess:
			e.done = true
			q.setErr()
		case q.typ == rdmaio.UD:
			q.sendUD(e)
			e.done = true
		case e.op.IsOneSided():
			if q.unacked > 0 && !e.unordered {
				q.setStalled(true)
				return pushed
			}
			if k := q.heapRun(); k > 0 {
				for i := range uint64(k) {
					q.sq[(q.sqExec+i)&q.sqMask].done = true
				}
				q.sqExec += uint64(k)
				local = true
				continue
			}
			if !q.oneSided(e) {
				q.setStalled(true)
				return pushed
			}
			e.done = true
			if e.status != rdmaio.StatusSuccess {
				q.setErr()
			}
		default:
			if !q.push(e) {
				q.setStalled(true)
				return pushed
			}
			e.inRing = true
			q.unacked++
			pushed = true
		}
		local = local || e.done
		q.sqExec++
	}
	q.setStalled(false)
	if local {
		q.sendCQ.wake()
	}
	return pushed
}

// progressSend runs acknowledgements and queued work (smu held).
func (q *qp) progressSend() {
	if q.unacked > 0 {
		q.acks(false)
	}
	if q.sqExec < q.sqTail {
		q.run()
	}
}

// sharedEager is the eager limit for SENDs whose buffers are all in shared
// memory, which the receiver could copy from directly instead (measured: at
// 4 KiB one copy by the receiver beats two). A SEND without immediate data
// may be taken by its receiver straight from the ring, without a receive
// buffer (Take, PollDirect), and its limit is sharedDirectEager: measured
// with comm between two processes (messages of 1-4 KiB come from
// qtransport's bounce ring), carried in the ring they take 0.27-0.49 µs
// less per message than when described, and bandwidth at those sizes is
// 1.6-2× as high.
const (
	sharedEager       = 1 << 10
	sharedDirectEager = 8 << 10
)

// push writes e into the peer's ring: the payload inline when it is small
// (or an inline send), otherwise descriptors of the sender's buffers that
// the receiver copies from directly. It returns false when the ring is full.
func (q *qp) push(e *sqe) bool {
	// Small messages are copied through the ring. Larger ones are pulled by
	// the receiver: from shared memory that costs no system call, so the
	// limit is lower than for ordinary memory, which needs one.
	shared := uint32(sharedEager)
	if e.op == rdmaio.OpSend {
		shared = sharedDirectEager
	}
	eager := e.inline || e.length <= q.eager && !(e.shared && e.length > shared)
	var flags uint8
	if q.rnrRetry == rdmaio.RNRRetryInfinite {
		flags = efNoAbort // see stuck
	}
	if e.op == rdmaio.OpSend {
		flags |= efShort
	}
	off := bodyOff(flags)
	var size uint64
	if eager {
		size = uint64(roundUp(off+int(e.length), lineSize))
	} else {
		size = uint64(roundUp(off+len(e.sg)*descBytes, lineSize))
	}
	ent, ok := q.reserve(size)
	if !ok {
		return false
	}
	ent[eOp] = byte(e.op)
	if flags&efShort != 0 {
		binary.LittleEndian.PutUint32(ent[eLenShort:], e.length)
	} else {
		binary.LittleEndian.PutUint32(ent[eImm:], e.imm)
		binary.LittleEndian.PutUint32(ent[eLen:], e.length)
		binary.LittleEndian.PutUint32(ent[eRKey:], e.rkey)
		binary.LittleEndian.PutUint64(ent[eRAddr:], e.raddr)
	}
	if eager {
		ent[eFlags] = q.ackBack(ent, flags|efInline)
		provider.Gather(ent[off:off+int(e.length)], e.sg)
	} else {
		ent[eFlags] = flags
		binary.LittleEndian.PutUint16(ent[eNSGE:], uint16(len(e.sg)))
		for i, s := range e.src {
			dsc := ent[off+i*descBytes:]
			binary.LittleEndian.PutUint32(dsc[0:], s.kind)
			binary.LittleEndian.PutUint32(dsc[4:], s.seg)
			binary.LittleEndian.PutUint64(dsc[8:], s.off)
			binary.LittleEndian.PutUint64(dsc[16:], uint64(len(e.sg[i])))
		}
	}
	q.publish(e, ent)
	return true
}

// reserve returns the space for a ring entry of size bytes at the
// producer's position (after a pad entry when the entry would wrap), or
// false when the ring is full. smu is held.
func (q *qp) reserve(size uint64) ([]byte, bool) {
	ring := q.pring
	R := uint64(len(ring))
	pos := q.prod & (R - 1)
	var pad uint64
	if pos+size > R {
		pad = R - pos
	}
	if q.prod+pad+size-q.acked > R {
		q.acks(true)
		if q.prod+pad+size-q.acked > R {
			return nil, false
		}
	}
	if pad > 0 {
		store64(ring, int(pos)+eState, stamp(q.pseq, stPad, 0))
		q.pseq++
		q.prod += pad
		pos = 0
	}
	return ring[pos : pos+size], true
}

// publish hands ent, the entry that reserve returned, written, to the
// consumer as e's. smu is held.
func (q *qp) publish(e *sqe, ent []byte) {
	size := uint64(len(ent))
	e.seq = q.pseq
	storeRelease64(p64(ent, eState), stamp(e.seq, stPublished, 0))
	q.pseq++
	e.start, e.end = q.prod, q.prod+size
	q.prod += size
}

// acks completes ring entries the consumer has finished with (done or
// NAK in their state word) and handles a consumer that does not move: peer
// gone (retry exceeded) or no receive posted for longer than the RNR retries
// allow. smu is held.
func (q *qp) acks(force bool) {
	if q.pctl == nil {
		return
	}
	R := uint64(len(q.pring))
	progress := false
	// The consumer acknowledges entries marked efNoAbort (see push) in its
	// cAcked word and in the entries it sends back: read once.
	noAbort := q.rnrRetry == rdmaio.RNRRetryInfinite
	var consumed uint64
	if noAbort {
		consumed = q.consumedByPeer(force)
	}
	for q.sqAck < q.sqExec {
		e := &q.sq[q.sqAck&q.sqMask]
		if !e.inRing {
			q.sqAck++
			continue
		}
		if noAbort && e.seq > consumed {
			break // not consumed yet
		}
		w := load64(q.pring, int(e.start&(R-1))+eState)
		if k := stampKind(w); !seqIs(w, e.seq) {
			e.status = rdmaio.StatusBadRespErr
		} else if k == stNak {
			e.status = stampStatus(w)
		} else if k == stDone || noAbort {
			e.status = rdmaio.StatusSuccess
		} else {
			break // published or being consumed
		}
		e.done, e.inRing = true, false
		q.unacked--
		q.peerTaken++
		q.acked = e.end
		q.sqAck++
		progress = true
		if e.status != rdmaio.StatusSuccess {
			q.setErr()
		}
	}
	// A consumer that does not move is examined only every so many idle
	// polls (or at once when its device closed): the checks read lines the
	// peer writes, and reading them on every spin would slow the peer down.
	if progress || q.unacked == 0 {
		q.idle = 0
	} else if q.idle++; q.idle&255 == 0 || load32(q.peer.hdr, hClosed) != 0 {
		q.stuck()
	}
}

// consumedByPeer returns the sequence number of the last entry the
// consumer acknowledged: from what its own entries carried back (ackHint)
// when that moved since the last call, else (or with force) from its
// cAcked word, a line it writes after its posts. In a ping-pong the
// answers carry every acknowledgement, and the line is not read at all.
// smu is held.
func (q *qp) consumedByPeer(force bool) uint64 {
	h := q.ackHint.Load()
	if h != q.hintSeen && !force {
		q.hintSeen = h
		return h
	}
	q.ackReads++
	return max(h, load64(q.pctl, cAcked))
}

// stuck decides about the oldest unacknowledged ring entry when the consumer
// has not moved.
func (q *qp) stuck() {
	var e *sqe
	for i := q.sqAck; i < q.sqExec; i++ {
		if x := &q.sq[i&q.sqMask]; x.inRing {
			e = x
			break
		}
	}
	if e == nil {
		return
	}
	fail := func(st rdmaio.Status, why uint32) {
		e.status, e.vendor, e.done, e.inRing = st, why, true, false
		q.unacked--
		q.setErr()
	}
	q.checks++
	if q.checks&15 == 0 || load32(q.peer.hdr, hClosed) != 0 {
		if why := q.peer.gone(true); why != 0 {
			fail(rdmaio.StatusRetryExcErr, why)
			return
		}
		if why := q.remoteQPGone(); why != 0 {
			fail(rdmaio.StatusRetryExcErr, why)
			return
		}
	}
	// Receiver not ready: this is the oldest entry not consumed, nobody
	// claimed it and the receiver has no receive work request. Retries are
	// time-based, like verbs' RNR NAK timer.
	R := uint64(len(q.pring))
	stw := p64(q.pring, int(e.start&(R-1))+eState)
	published := stamp(e.seq, stPublished, 0)
	if atomic.LoadUint64(stw) != published || q.peerReceives() || q.rnrRetry == rdmaio.RNRRetryInfinite {
		q.rnrPos = ^uint64(0)
		return
	}
	now := time.Now()
	if q.rnrPos != e.start {
		q.rnrPos, q.rnrFrom = e.start, now
	}
	budget := time.Duration(loadI64(q.pctl, cMinRNR)) * time.Duration(q.rnrRetry)
	if now.Sub(q.rnrFrom) >= budget && atomic.CompareAndSwapUint64(stw, published, stamp(e.seq, stAborted, 0)) {
		fail(rdmaio.StatusRNRRetryExcErr, 0)
	}
}

// peerReceives reports whether the connected remote QP has receive work
// requests posted. An SRQ counts what is left; a QP's own receive queue
// counts what was posted since it was reset, and every ring entry this QP
// saw acknowledged consumed one of those (all but some NAKs, after which
// the QP is in ERR and no longer asks). smu is held.
func (q *qp) peerReceives() bool {
	n := atomic.LoadInt64(q.peerPosted)
	if !q.peerSRQ {
		n -= q.peerTaken
	}
	return n > 0
}

// remoteQPGone returns why the connected remote QP can no longer respond
// (destroyed, or in ERR or RESET), or 0.
func (q *qp) remoteQPGone() uint32 {
	if load32(q.pctl, cQPN) != q.destQPN {
		return VendorQPDestroyed
	}
	if s := rdmaio.QPState(load32(q.pctl, cState)); s == rdmaio.StateErr || s == rdmaio.StateReset {
		return VendorQPNotReady
	}
	return 0
}

// oneSided executes an RDMA WRITE, READ or atomic on the peer's memory,
// checked against the peer's registration of the key. It returns false when
// the remote QP is not ready yet (the operation stays queued).
func (q *qp) oneSided(e *sqe) bool {
	p := q.peer
	q.checks++
	why := p.gone(q.checks&1023 == 0)
	if why == 0 {
		why = q.remoteQPGone()
	}
	if why != 0 {
		e.status, e.vendor = rdmaio.StatusRetryExcErr, why
		return true
	}
	if !provider.Receives(rdmaio.QPState(load32(q.pctl, cState))) {
		return false
	}
	e.status = rdmaio.StatusRemAccessErr
	ent := p.mrEntry(e.rkey)
	if ent == nil {
		return true
	}
	inuse := p32(ent, mInuse)
	atomic.AddUint32(inuse, 1)
	defer atomic.AddUint32(inuse, ^uint32(0))
	if load32(ent, mKey) != e.rkey {
		return true
	}
	access := rdmaio.Access(get32(ent, mAccess))
	base, size := get64(ent, mAddr), get64(ent, mLen)
	qpAccess := rdmaio.Access(get32(q.pctl, cAccess))
	n := uint64(e.length)
	if st := provider.CheckRemote(access, qpAccess, provider.RemoteAccess(e.op), base, size, e.raddr, n); st != rdmaio.StatusSuccess {
		e.status = st
		return true
	}
	off := e.raddr - base
	switch get32(ent, mKind) {
	case kindShared:
		data, err := p.allocSeg(get32(ent, mSeg))
		lo := get64(ent, mSegOff) + off
		if err != nil || lo > uint64(len(data)) || n > uint64(len(data))-lo {
			return true
		}
		tgt := data[lo : lo+n]
		switch e.op {
		case rdmaio.OpRDMAWrite:
			provider.Gather(tgt, e.sg)
		case rdmaio.OpRDMARead:
			provider.Scatter(e.sg, tgt)
		case rdmaio.OpAtomicCmpSwp, rdmaio.OpAtomicFetchAdd:
			w := (*uint64)(unsafe.Pointer(&tgt[0]))
			if uintptr(unsafe.Pointer(w))%8 != 0 {
				e.status = rdmaio.StatusRemInvReqErr
				return true
			}
			var old uint64
			if e.op == rdmaio.OpAtomicFetchAdd {
				old = atomic.AddUint64(w, e.cmp) - e.cmp
			} else {
				for {
					old = atomic.LoadUint64(w)
					if old != e.cmp || atomic.CompareAndSwapUint64(w, old, e.swap) {
						break
					}
				}
			}
			binary.NativeEndian.PutUint64(e.sg[0], old)
		}
	case kindHeap:
		if e.op.IsAtomic() {
			e.status = rdmaio.StatusRemOpErr
			return true
		}
		if !p.cma {
			e.vendor = uint32(unix.EPERM)
			return true
		}
		q.riov[0] = unix.RemoteIovec{Base: uintptr(get64(ent, mVA) + off), Len: int(n)}
		q.cmaCalls++
		if errno := cmaTransfer(e.op == rdmaio.OpRDMAWrite, p.pid, cmaIovecs(q.liov, e.sg), q.riov[:1], int(n)); errno != 0 {
			e.vendor = uint32(errno)
			if errno == unix.ESRCH {
				e.status = rdmaio.StatusRetryExcErr
			}
			return true
		}
	default:
		return true
	}
	e.status = rdmaio.StatusSuccess
	return true
}

// sendUD delivers a datagram into the destination QP's inbox. Like a UD
// transport it completes successfully whether or not the datagram arrives:
// a full inbox, an unknown QP or a QP that does not receive drop it.
func (q *qp) sendUD(e *sqe) {
	e.status = rdmaio.StatusSuccess
	p := e.ah.peer
	if load32(p.hdr, hClosed) != 0 {
		return
	}
	ctl := p.qpCtl(e.rqpn)
	if ctl == nil || rdmaio.QPType(get32(ctl, cType)) != rdmaio.UD || !provider.Receives(rdmaio.QPState(load32(ctl, cState))) {
		return
	}
	if int(e.length) > p.lay.mtu {
		return
	}
	ring := p.ring(e.rqpn)
	N := uint64(udSlots(p.lay.ringBytes, p.lay.mtu))
	S := uint64(udSlotBytes(p.lay.mtu))
	head := p64(ctl, cHead)
	for try := 0; try < 1000; try++ {
		pos := atomic.LoadUint64(head)
		slot := ring[(pos%N)*S : (pos%N+1)*S]
		seq := load64(slot, uSeq)
		switch {
		case seq == pos:
			if !atomic.CompareAndSwapUint64(head, pos, pos+1) {
				continue
			}
			var flags uint32
			if e.op == rdmaio.OpSendImm {
				flags = ufImm
			}
			put32(slot, uLen, e.length)
			put32(slot, uImm, e.imm)
			put32(slot, uFlags, flags)
			put32(slot, uQKey, e.rqkey)
			put32(slot, uSrcQPN, q.qpn)
			put32(slot, uSrcRank, uint32(q.dev.cfg.Rank))
			provider.Gather(slot[uData:uData+int(e.length)], e.sg)
			store64(slot, uSeq, pos+1)
			ringDoorbell(p.doorbell(get32(ctl, cRecvDB)))
			return
		case seq < pos:
			return // inbox full: dropped
		}
	}
}

// pollSend makes send progress and reports completions in order. A
// successful unsignaled request frees its entry only when a later completion
// is reported, as in verbs.
func (q *qp) pollSend(wc []rdmaio.WorkCompletion) int {
	q.smu.Lock()
	if q.closed {
		q.smu.Unlock()
		return 0
	}
	q.progressSend()
	if q.State() == rdmaio.StateErr {
		q.flushSend()
	}
	n := 0
	for q.sqRep < q.sqTail && n < len(wc) {
		e := &q.sq[q.sqRep&q.sqMask]
		if !e.done {
			break
		}
		q.sqRep++
		if e.signaled {
			q.sigOut--
		}
		if e.signaled || e.status != rdmaio.StatusSuccess {
			wc[n] = rdmaio.WorkCompletion{ID: e.id, Status: e.status, Opcode: e.op.WCOpcode(), ByteLen: e.length,
				QPN: q.qpn, SrcRank: -1, VendorErr: e.vendor}
			n++
			q.sqFree = q.sqRep
		}
		clearBufs(e.sg)
		e.ah = nil
	}
	q.updateSend()
	q.smu.Unlock()
	return n
}

// updateSend publishes for Poll whether the send queue has work and whether
// that work can complete now: queued work waiting to execute, a signaled
// request outstanding, or the error state (every error completion moves the
// QP to ERR). smu is held.
func (q *qp) updateSend() {
	busy := q.sqRep < q.sqTail
	hot := busy && (q.sigOut > 0 || q.sqExec < q.sqTail || q.State() == rdmaio.StateErr)
	// Usually nothing changed: a load spares the store (a locked
	// instruction) on every post and poll.
	if q.sendBusy.Load() != busy {
		q.sendBusy.Store(busy)
	}
	if q.sendHot.Load() != hot {
		q.sendHot.Store(hot)
	}
}

// flushSend completes everything outstanding with StatusWRFlushErr.
func (q *qp) flushSend() {
	for i := q.sqRep; i < q.sqTail; i++ {
		if e := &q.sq[i&q.sqMask]; !e.done {
			e.status, e.done, e.inRing = rdmaio.StatusWRFlushErr, true, false
		}
	}
	q.unacked = 0
	q.sqAck, q.sqExec = q.sqTail, q.sqTail
	q.setStalled(false)
}

// PostRecv queues receive work requests.
func (q *qp) PostRecv(wrs []rdmaio.RecvWR) (int, error) {
	if q.srq != nil {
		return 0, q.errf("post recv: %w: the QP uses an SRQ", rdmaio.ErrInvalidArgument)
	}
	q.rmu.Lock()
	if q.closed {
		q.rmu.Unlock()
		return 0, q.errf("post recv: %w", rdmaio.ErrClosed)
	}
	if err := provider.CanPostRecv(q.State()); err != nil {
		q.rmu.Unlock()
		return 0, q.errf("post recv: %w", err)
	}
	n, err := q.rq.Post(q.pd, wrs)
	if n > 0 {
		// A plain store, not a locked one: the sender reads the count only
		// to decide that the receiver is not ready (RNR), after many idle
		// polls, and the CAS on the ring entry settles a race with a
		// receive posted meanwhile.
		putI64(q.ctl, cPosted, int64(q.rq.Tail()))
	}
	q.rmu.Unlock()
	if err != nil {
		return n, q.errf("post recv: work request %d (id %d): %w", n, wrs[n].ID, err)
	}
	return n, nil
}

// takeRecv removes the next receive work request (from the QP's queue or
// its SRQ) into q.rsg and returns its id and status; ok is false when none is
// posted. For an SRQ, the SRQ lock is held from takeRecv's check through the
// caller's claim: claim is called with the lock held and the request is
// consumed only when claim returns true. The posted count of an SRQ goes
// down; a QP's own count (cPosted) counts posts only: its one sender knows
// how many it consumed.
func (q *qp) takeRecv(claim func() bool) (id uint64, st rdmaio.Status, ok bool) {
	rq := &q.rq
	s := q.srq
	if s != nil {
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
	if claim != nil && !claim() {
		return 0, 0, false
	}
	q.rsg = append(q.rsg[:0], r.SG...)
	id, st = r.ID, r.Status
	clearBufs(r.SG)
	rq.Pop()
	if s != nil {
		s.publishPosted()
	}
	return id, st, true
}

// syncConsA publishes the consumer's position for recvIdle. rmu is held.
// It need not be a locked store: until a Poll sees it, recvIdle checks the
// old position, which at worst sends that Poll to pollRecv for nothing or
// lets it miss what is new once; the next Poll sees the new position.
func (q *qp) syncConsA() {
	if q.typ == rdmaio.UD {
		storeHint(&q.consA, q.cons)
	} else {
		c := q.cseq<<32 | q.cons&uint64(len(q.ring)-1)
		if q.ackOwed {
			c |= consOwed
		}
		storeHint(&q.consA, c)
	}
}

// consOwed marks consA while ackOwed: recvIdle then reports news, so that
// the next poll acknowledges. (Ring positions stay far below it.)
const consOwed = 1 << 31

// flushAck sends the acknowledgement Take left owed, if any (see Take),
// after a post: it follows the message just posted, which usually answers
// the ones taken. No lock is held.
func (q *qp) flushAck() {
	if q.consA.Load()&consOwed == 0 {
		return
	}
	q.rmu.Lock()
	if q.ackOwed && !q.closed {
		q.consumed()
	}
	q.rmu.Unlock()
}

// consumed acknowledges every ring entry consumed so far (cAcked),
// publishes the new position for recvIdle and wakes a producer that waits
// for room. rmu is held.
func (q *qp) consumed() {
	q.ackOwed = false
	storeRelease64(p64(q.ctl, cAcked), q.cseq-1)
	q.syncConsA()
	ringDoorbell(q.consumerDB())
}

// recvIdle reports, without locks, that pollRecv has nothing to do: no
// new ring entry or datagram, and not in ERR with receives to flush.
func (q *qp) recvIdle() bool {
	if q.state.Load() == uint32(rdmaio.StateErr) {
		return false
	}
	c := q.consA.Load()
	if q.typ == rdmaio.UD {
		return load64(q.ring, int((c%q.udN)*q.udS)+uSeq) != c+1
	}
	// c holds the low 32 bits of the expected sequence number.
	return c&consOwed == 0 && uint32(stampSeq(load64(q.ring, int(c&(consOwed-1))+eState))) != uint32(c>>32)
}

// pollRecv delivers incoming messages into receive work requests and
// returns their completions; in ERR it flushes the receive queue. It first
// checks for news without the lock (recvIdle).
func (q *qp) pollRecv(wc []rdmaio.WorkCompletion, dr *direct) int {
	if q.recvIdle() {
		return 0
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if q.closed {
		return 0
	}
	s := q.State()
	if s == rdmaio.StateErr {
		return q.flushRecv(wc)
	}
	if !provider.Receives(s) {
		return 0
	}
	if q.typ == rdmaio.UD {
		return q.recvUD(wc)
	}
	return q.recvRC(wc, dr)
}

func (q *qp) flushRecv(wc []rdmaio.WorkCompletion) int {
	n := 0
	for r := q.rq.Front(); r != nil && n < len(wc); r = q.rq.Front() {
		wc[n] = rdmaio.WorkCompletion{ID: r.ID, Status: rdmaio.StatusWRFlushErr, Opcode: rdmaio.WCRecv, QPN: q.qpn, SrcRank: -1}
		clearBufs(r.SG)
		q.rq.Pop()
		n++
	}
	return n
}

// recvRC consumes the inbound ring; with dr (PollDirect), the SENDs
// carried inline go into dr when they fit, and the QP uses an SRQ. rmu is
// held.
func (q *qp) recvRC(wc []rdmaio.WorkCompletion, dr *direct) int {
	if q.dead {
		if q.ackOwed {
			q.consumed()
		}
		return 0
	}
	ring := q.ring
	R := uint64(len(ring))
	n := 0
	moved := false
	for n < len(wc) {
		pos := q.cons & (R - 1)
		stw := p64(ring, int(pos)+eState)
		w := atomic.LoadUint64(stw)
		if !seqIs(w, q.cseq) {
			break // nothing new
		}
		if k := stampKind(w); k == stPad {
			q.cons += R - pos
			q.cseq++
			moved = true
			continue
		} else if k != stPublished {
			// Withdrawn by the sender (RNR retries exceeded), or garbage: the
			// connection is over until both ends are reset.
			q.dead = true
			store32(q.ctl, cDead, 1)
			break
		}
		ent := ring[pos:]
		op := rdmaio.Opcode(ent[eOp])
		flags := ent[eFlags]
		nsge := 0
		if flags&efInline == 0 {
			nsge = int(binary.LittleEndian.Uint16(ent[eNSGE:]))
		}
		var imm, length uint32
		if flags&efShort != 0 {
			length = binary.LittleEndian.Uint32(ent[eLenShort:])
		} else {
			imm = binary.LittleEndian.Uint32(ent[eImm:])
			length = binary.LittleEndian.Uint32(ent[eLen:])
		}
		size, ok := entrySize(flags, nsge, length, R-pos)
		if !ok || !op.ConsumesRecv() || flags&efShort != 0 && op != rdmaio.OpSend {
			q.dead = true
			q.setErr()
			break
		}
		ent = ent[:size]
		if flags&(efInline|efAck) == efInline|efAck {
			q.noteAck(binary.LittleEndian.Uint16(ent[eAckShort:]))
		}
		if dr != nil && op == rdmaio.OpSend && flags&efInline != 0 && q.srq != nil && uint64(length) <= uint64(len(dr.buf)-dr.n) {
			if !q.recvDirect(dr, ent, stw, w, flags, length) {
				break
			}
			wc[n] = rdmaio.WorkCompletion{ID: dr.id, Status: rdmaio.StatusSuccess, Opcode: rdmaio.WCRecv, ByteLen: length,
				QPN: q.qpn, SrcQPN: q.destQPNRecv(), SrcRank: q.peerRank()}
			n++
			q.cons += size
			q.cseq++
			moved = true
			continue
		}
		// RDMA WRITE with immediate: check the target region first; a bad
		// reference is refused without consuming a receive.
		var dst []byte
		if op == rdmaio.OpRDMAWriteImm {
			rkey := binary.LittleEndian.Uint32(ent[eRKey:])
			raddr := binary.LittleEndian.Uint64(ent[eRAddr:])
			m := q.dev.mrs.Lookup(rkey)
			if m == nil || m.pd != q.pd || provider.CheckRemote(m.access, q.access, rdmaio.AccessRemoteWrite,
				m.base, uint64(len(m.buf)), raddr, uint64(length)) != rdmaio.StatusSuccess {
				clearLines(ent)
				if !atomic.CompareAndSwapUint64(stw, w, stamp(q.cseq, stNak, rdmaio.StatusRemAccessErr)) {
					q.dead = true
					break
				}
				q.cons += size
				q.cseq++
				moved = true
				continue
			}
			off := raddr - m.base
			dst = m.buf[off : off+uint64(length)]
		}
		// A QP's own receive queue is ours alone under rmu: the request is
		// taken only once the single CAS from published to done (or NAK)
		// below has succeeded, which is also what tells the sender that
		// the entry was consumed (an entry that is never withdrawn needs
		// no CAS: cAcked tells). An SRQ is shared with other QPs: for a
		// message in the ring (short to copy) its lock is held until then,
		// which has the same effect; for one that is pulled from the
		// sender's memory the entry is claimed first (stTaken) and the
		// request taken, so that the SRQ is not locked during the copy.
		var id uint64
		var rst rdmaio.Status
		var own *provider.RecvEntry
		var sg [][]byte
		var held *srq // SRQ locked until the entry is acknowledged
		ready := false
		switch s := q.srq; {
		case s != nil && flags&efInline != 0:
			s.mu.Lock()
			if s.closed || s.rq.Len() == 0 {
				s.mu.Unlock()
				break
			}
			held, ready = s, true
			own = s.rq.Front()
			id, rst, sg = own.ID, own.Status, own.SG
		case s != nil:
			taken := stamp(q.cseq, stTaken, 0)
			id, rst, ready = q.takeRecv(func() bool { return atomic.CompareAndSwapUint64(stw, w, taken) })
			if !ready && atomic.LoadUint64(stw) != w {
				q.dead = true
			}
			sg = q.rsg
		case q.rq.Len() != 0:
			ready = true
			own = q.rq.Front()
			id, rst, sg = own.ID, own.Status, own.SG
		}
		if !ready {
			break // receiver not ready: the sender decides when to give up
		}
		status, nak := rdmaio.StatusSuccess, rdmaio.StatusSuccess
		var vendor uint32
		wcop := rdmaio.WCRecv
		switch {
		case rst != rdmaio.StatusSuccess:
			status, nak = rst, rdmaio.StatusRemOpErr
		case op == rdmaio.OpRDMAWriteImm:
			wcop = rdmaio.WCRecvRDMAWithImm
			q.rone[0] = dst
			if errno := q.pull(q.rone[:], ent, flags, nsge, length); errno != 0 {
				status, nak, vendor = rdmaio.StatusGeneralErr, rdmaio.StatusRemOpErr, uint32(errno)
			}
			q.rone[0] = nil
		case uint64(length) > uint64(provider.Total(sg)):
			status, nak = rdmaio.StatusLocLenErr, rdmaio.StatusRemInvReqErr
		default:
			if errno := q.pull(sg, ent, flags, nsge, length); errno != 0 {
				status, nak, vendor = rdmaio.StatusGeneralErr, rdmaio.StatusRemOpErr, uint32(errno)
			}
		}
		if own == nil {
			clearBufs(q.rsg)
		}
		// Zero the other lines before giving the space back: the producer
		// may write the next entry there as soon as it sees done.
		clearLines(ent)
		final := stamp(q.cseq, stDone, 0)
		if nak != rdmaio.StatusSuccess {
			final = stamp(q.cseq, stNak, nak)
		}
		// An entry that its producer never withdraws (efNoAbort) needs no
		// claim: cAcked acknowledges it (below), its state records a NAK.
		noAbort := flags&efNoAbort != 0
		if noAbort && own != nil && nak != rdmaio.StatusSuccess {
			atomic.StoreUint64(stw, final)
		}
		switch {
		case own == nil:
			atomic.StoreUint64(stw, final)
		case noAbort || atomic.CompareAndSwapUint64(stw, w, final):
			clearBufs(own.SG)
			if held != nil {
				held.rq.Pop()
				held.publishPosted()
				held.mu.Unlock()
			} else {
				q.rq.Pop()
			}
		default:
			// Withdrawn by the sender meanwhile (it saw no receive posted
			// before this one was): the request stays posted, the buffers
			// it names are undefined, the connection is over.
			if held != nil {
				held.mu.Unlock()
			}
			q.dead = true
		}
		if q.dead {
			break
		}
		var wflags rdmaio.WCFlags
		if op.HasImm() {
			wflags = rdmaio.WCWithImm
		}
		wc[n] = rdmaio.WorkCompletion{ID: id, Status: status, Opcode: wcop, Flags: wflags, ByteLen: length, Imm: imm,
			QPN: q.qpn, SrcQPN: q.destQPNRecv(), SrcRank: q.peerRank(), VendorErr: vendor}
		n++
		q.cons += size
		q.cseq++
		moved = true
		if status != rdmaio.StatusSuccess {
			q.setErr()
			break
		}
	}
	if moved || q.ackOwed {
		q.consumed() // Take's owed acknowledgement too (one store)
	}
	return n
}

// recvDirect consumes the inline SEND ent, whose state word stw held w,
// into dr (recvRC): no receive request is taken. It reports false when the
// sender withdrew the entry meanwhile: the connection is then over. rmu is
// held.
func (q *qp) recvDirect(dr *direct, ent []byte, stw *uint64, w uint64, flags uint8, length uint32) bool {
	off := bodyOff(flags)
	copy(dr.buf[dr.n:dr.n+int(length)], ent[off:off+int(length)])
	// As for a receive request: zero the other lines first, and claim an
	// entry its producer may withdraw (one never withdrawn needs no claim:
	// cAcked acknowledges it).
	clearLines(ent)
	if flags&efNoAbort == 0 && !atomic.CompareAndSwapUint64(stw, w, stamp(q.cseq, stDone, 0)) {
		q.dead = true
		return false
	}
	dr.n += int(length)
	return true
}

// clearLines zeroes the first word of every line of an entry but its
// header, so that no payload is ever mistaken for a header (see eState).
func clearLines(ent []byte) {
	for off := lineSize; off < len(ent); off += lineSize {
		put64(ent, off, 0)
	}
}

// The receive side reads the connection fields that RTR set; they change
// only in Modify, which holds rmu too.
func (q *qp) destQPNRecv() uint32 { return q.destQPN }
func (q *qp) consumerDB() []byte  { return q.peerSendDB }
func (q *qp) peerRank() int32 {
	if q.peer == nil {
		return -1
	}
	return int32(q.peer.rank)
}

// entrySize validates a ring entry's header against the space left in the
// ring and returns its size.
func entrySize(flags uint8, nsge int, length uint32, room uint64) (uint64, bool) {
	var body uint64
	if flags&efInline != 0 {
		body = uint64(length)
	} else {
		if nsge > maxSGE {
			return 0, false
		}
		body = uint64(nsge * descBytes)
	}
	if body > room {
		return 0, false
	}
	size := uint64(roundUp(bodyOff(flags)+int(body), lineSize))
	if size > room {
		return 0, false
	}
	return size, true
}

// pull copies a message's payload into dst: from the entry when it is
// inline, else from the sender's buffers that the descriptors name (its
// shared allocations, mapped here, or its ordinary memory through
// process_vm_readv). It returns an errno on failure.
func (q *qp) pull(dst [][]byte, ent []byte, flags uint8, nsge int, length uint32) unix.Errno {
	off := bodyOff(flags)
	if flags&efInline != 0 {
		provider.Scatter(dst, ent[off:off+int(length)])
		return 0
	}
	at := 0
	var total uint64
	for i := 0; i < nsge; i++ {
		dsc := ent[off+i*descBytes:]
		kind := binary.LittleEndian.Uint32(dsc[0:])
		seg := binary.LittleEndian.Uint32(dsc[4:])
		off := binary.LittleEndian.Uint64(dsc[8:])
		n := binary.LittleEndian.Uint64(dsc[16:])
		total += n
		if total > uint64(length) {
			return unix.EINVAL
		}
		if n == 0 {
			continue
		}
		sub := subList(q.rsub[:0], dst, at, int(n))
		errno := q.pullOne(sub, kind, seg, off, n)
		clearBufs(sub)
		if errno != 0 {
			return errno
		}
		at += int(n)
	}
	if total != uint64(length) {
		return unix.EINVAL
	}
	return 0
}

// pullOne copies the n bytes at off of the sender's buffer described by
// kind and seg into sub.
func (q *qp) pullOne(sub [][]byte, kind, seg uint32, off, n uint64) unix.Errno {
	switch kind {
	case kindShared:
		data, err := q.peer.allocSeg(seg)
		if err != nil || off > uint64(len(data)) || n > uint64(len(data))-off {
			return unix.EFAULT
		}
		provider.Scatter(sub, data[off:off+n])
	case kindHeap:
		if !q.peer.cma {
			return unix.EPERM
		}
		q.rriov[0] = unix.RemoteIovec{Base: uintptr(off), Len: int(n)}
		return cmaTransfer(false, q.peer.pid, cmaIovecs(q.rliov, sub), q.rriov[:], int(n))
	default:
		return unix.EINVAL
	}
	return 0
}

// subList returns the pieces of the concatenation of bufs that cover
// [at, at+n), appended to out.
func subList(out [][]byte, bufs [][]byte, at, n int) [][]byte {
	for _, b := range bufs {
		if n == 0 {
			break
		}
		if at >= len(b) {
			at -= len(b)
			continue
		}
		piece := b[at:min(len(b), at+n)]
		out = append(out, piece)
		n -= len(piece)
		at = 0
	}
	return out
}

// recvUD drains the inbox. rmu is held.
func (q *qp) recvUD(wc []rdmaio.WorkCompletion) int {
	N, S := q.udN, q.udS
	mtu := uint32(q.dev.lay.mtu)
	n := 0
	for n < len(wc) {
		pos := q.cons
		slot := q.ring[(pos%N)*S : (pos%N+1)*S]
		if load64(slot, uSeq) != pos+1 {
			break
		}
		length := get32(slot, uLen)
		fail := false
		if length <= mtu && get32(slot, uQKey) == q.qkey {
			if id, rst, ok := q.takeRecv(nil); ok {
				status := rst
				if status == rdmaio.StatusSuccess && uint64(length) > uint64(provider.Total(q.rsg)) {
					status = rdmaio.StatusLocLenErr
				}
				if status == rdmaio.StatusSuccess {
					provider.Scatter(q.rsg, slot[uData:uData+int(length)])
				}
				clearBufs(q.rsg)
				var wflags rdmaio.WCFlags
				if get32(slot, uFlags)&ufImm != 0 {
					wflags = rdmaio.WCWithImm
				}
				wc[n] = rdmaio.WorkCompletion{ID: id, Status: status, Opcode: rdmaio.WCRecv, Flags: wflags,
					ByteLen: length, Imm: get32(slot, uImm), QPN: q.qpn, SrcQPN: get32(slot, uSrcQPN),
					SrcRank: int32(get32(slot, uSrcRank))}
				n++
				fail = status != rdmaio.StatusSuccess
			}
		}
		store64(slot, uSeq, pos+N)
		q.cons++
		q.syncConsA()
		if fail {
			q.setErr()
			break
		}
	}
	return n
}
