//go:build verbs

package verbs

/*
#include "jia_verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// postErrno is the errno of a failed post call: providers return it
// (positive); a negative return carries none.
func postErrno(rc C.int) syscall.Errno {
	if rc > 0 {
		return syscall.Errno(rc)
	}
	return syscall.EINVAL
}

// cAlloc allocates n zeroed elements of size bytes in C memory.
func cAlloc(n, size int) (unsafe.Pointer, error) {
	p := C.calloc(C.size_t(max(n, 1)), C.size_t(size))
	if p == nil {
		return nil, fmt.Errorf("out of memory for %d×%d bytes", n, size)
	}
	return p, nil
}

// sendPost holds the arrays a QP builds its send chains in, allocated once.
type sendPost struct {
	d      []C.struct_jia_swr
	sge    []C.struct_ibv_sge
	wrs    *C.struct_ibv_send_wr
	inline []byte // postBatch × MaxInline staging bytes in C memory
	done   *C.int // how many the last post accepted (in C memory: no escape)
	ptrs   [5]unsafe.Pointer
}

func (s *sendPost) init(maxSGE, maxInline int) error {
	var err error
	alloc := func(i, n, size int) unsafe.Pointer {
		if err != nil {
			return nil
		}
		s.ptrs[i], err = cAlloc(n, size)
		return s.ptrs[i]
	}
	d := alloc(0, postBatch, int(unsafe.Sizeof(C.struct_jia_swr{})))
	sge := alloc(1, postBatch*maxSGE, int(unsafe.Sizeof(C.struct_ibv_sge{})))
	s.wrs = (*C.struct_ibv_send_wr)(alloc(2, postBatch, int(unsafe.Sizeof(C.struct_ibv_send_wr{}))))
	inl := alloc(3, postBatch*maxInline, 1)
	s.done = (*C.int)(alloc(4, 1, int(unsafe.Sizeof(C.int(0)))))
	if err != nil {
		s.free()
		return err
	}
	s.d = unsafe.Slice((*C.struct_jia_swr)(d), postBatch)
	s.sge = unsafe.Slice((*C.struct_ibv_sge)(sge), postBatch*maxSGE)
	s.inline = unsafe.Slice((*byte)(inl), max(postBatch*maxInline, 1))
	return nil
}

func (s *sendPost) free() {
	for i, p := range s.ptrs {
		if p != nil {
			C.free(p)
			s.ptrs[i] = nil
		}
	}
	s.d, s.sge, s.inline, s.wrs, s.done = nil, nil, nil, nil, nil
}

// recvPost posts receives to a QP's receive queue or an SRQ from arrays
// allocated once; for UD it puts the header slot in front of each list.
type recvPost struct {
	rq      *recvQueue
	wq      *workQueue
	key     uint32 // guarded by rq.mu
	maxSGE  int    // the caller's SGEs per request
	d       []C.struct_jia_rwr
	sge     []C.struct_ibv_sge
	wrs     *C.struct_ibv_recv_wr
	done    *C.int
	ptrs    [4]unsafe.Pointer
	grhAddr uint64
	grhLKey uint32
	closed  bool // guarded by rq.mu
}

func (r *recvPost) init(maxSGE int) error {
	per := maxSGE
	if r.wq.ud {
		per++
	}
	var err error
	for i, sz := range [4][2]int{
		{postBatch, int(unsafe.Sizeof(C.struct_jia_rwr{}))},
		{postBatch * per, int(unsafe.Sizeof(C.struct_ibv_sge{}))},
		{postBatch, int(unsafe.Sizeof(C.struct_ibv_recv_wr{}))},
		{1, int(unsafe.Sizeof(C.int(0)))},
	} {
		if r.ptrs[i], err = cAlloc(sz[0], sz[1]); err != nil {
			r.free()
			return err
		}
	}
	r.maxSGE = maxSGE
	r.d = unsafe.Slice((*C.struct_jia_rwr)(r.ptrs[0]), postBatch)
	r.sge = unsafe.Slice((*C.struct_ibv_sge)(r.ptrs[1]), postBatch*per)
	r.wrs = (*C.struct_ibv_recv_wr)(r.ptrs[2])
	r.done = (*C.int)(r.ptrs[3])
	return nil
}

func (r *recvPost) free() {
	for i, p := range r.ptrs {
		if p != nil {
			C.free(p)
			r.ptrs[i] = nil
		}
	}
	r.d, r.sge, r.wrs, r.done = nil, nil, nil, nil
}

// post posts wrs to qp (or srq) in batches and returns how many were
// posted.
func (r *recvPost) post(qp *C.struct_ibv_qp, srq *C.struct_ibv_srq, wrs []rdmaio.RecvWR) (int, error) {
	rq := r.rq
	rq.mu.Lock()
	defer rq.mu.Unlock()
	if r.closed {
		return 0, rdmaio.ErrClosed
	}
	posted := 0
	for posted < len(wrs) {
		n, ns := 0, 0
		var werr error
		for posted+n < len(wrs) && n < postBatch {
			wr := &wrs[posted+n]
			if werr = provider.CheckRecvWR(r.maxSGE, wr); werr != nil {
				break
			}
			if rq.room() == 0 {
				werr = fmt.Errorf("%w: %d receives outstanding", rdmaio.ErrQueueFull, rq.depth)
				break
			}
			slot := rq.add(wr.ID, wr.SGL)
			dd := &r.d[n]
			dd.wr_id = C.uint64_t(wrID(r.key, slot))
			k := 0
			if r.wq.ud {
				r.sge[ns] = C.struct_ibv_sge{addr: C.uint64_t(r.grhAddr + uint64(slot)*grhLen), length: grhLen, lkey: C.uint32_t(r.grhLKey)}
				k++
			}
			for _, s := range wr.SGL {
				r.sge[ns+k] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
				k++
			}
			dd.nsge = C.uint32_t(k)
			ns += k
			n++
		}
		if n > 0 {
			rc := C.jia_post_recv(qp, srq, &r.d[0], C.int(n), &r.sge[0], r.wrs, r.done)
			done := *r.done
			for i := int(done); i < n; i++ {
				_, slot := splitWRID(uint64(r.d[i].wr_id))
				rq.unadd(slot)
			}
			posted += int(done)
			if rc != 0 {
				return posted, postError("post recv", postErrno(rc))
			}
		}
		if werr != nil {
			return posted, werr
		}
	}
	return posted, nil
}

// qp is a queue pair.
type qp struct {
	dev    *Device
	pd     *pd
	c      *C.struct_ibv_qp
	typ    rdmaio.QPType
	num    uint32
	cap    rdmaio.QPCap
	limits provider.QPLimits
	sigAll bool
	scq    *cq
	rcq    *cq
	srq    *srq
	state  atomic.Uint32

	mmu   sync.Mutex // Modify
	sq    *sendQueue
	sqw   *workQueue
	sqKey uint32 // guarded by sq.mu
	sp    sendPost
	sdead bool // guarded by sq.mu

	rp     *recvPost // nil with an SRQ
	grh    unsafe.Pointer
	grhMR  *C.struct_ibv_mr
	rdepth int

	sAttached, rAttached bool // counted in scq, rcq (and srq)
	inlineDefault        bool // Cap.MaxInline was left to the provider
}

// CreateQP creates a QP in RESET.
func (p *pd) CreateQP(attr rdmaio.QPInitAttr) (rdmaio.QP, error) {
	d := p.dev
	scq, rcq, s, err := provider.QPParts(&attr,
		func(c rdmaio.CQ) (*cq, bool) { x, ok := c.(*cq); return x, ok && x.dev == d },
		func(r rdmaio.SRQ) (*srq, bool) { x, ok := r.(*srq); return x, ok && x.pd == p })
	if err != nil {
		return nil, d.errf("create qp: %w", err)
	}
	defs := rdmaio.QPCap{MaxSendWR: DefaultMaxSendWR, MaxRecvWR: DefaultMaxRecvWR, MaxSendSGE: DefaultMaxSGE,
		MaxRecvSGE: DefaultMaxSGE, MaxInline: min(DefaultMaxInline, d.attr.MaxInline)}
	cp, err := provider.FillCap(attr.Cap, defs, &d.attr)
	if err != nil {
		return nil, d.errf("create qp: %w", err)
	}
	if attr.Type == rdmaio.UD && cp.MaxRecvSGE+1 > d.attr.MaxSGE {
		return nil, d.errf("create qp: %w: MaxRecvSGE %d: UD receives need one more SGE for the GRH (device max %d)",
			rdmaio.ErrInvalidArgument, cp.MaxRecvSGE, d.attr.MaxSGE)
	}
	if err := p.begin("create qp"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	if scq.closed.Load() || rcq.closed.Load() {
		return nil, d.errf("create qp: CQ: %w", rdmaio.ErrClosed)
	}
	if s != nil {
		if _, ok := p.srqs[s]; !ok {
			return nil, d.errf("create qp: SRQ: %w", rdmaio.ErrClosed)
		}
	}
	q := &qp{dev: d, pd: p, typ: attr.Type, cap: cp, sigAll: attr.SigAll, scq: scq, rcq: rcq, srq: s, inlineDefault: attr.Cap.MaxInline == 0}
	if err := q.create(); err != nil {
		q.release()
		return nil, d.errf("create %v qp: %w", attr.Type, err)
	}
	if err := p.use.Add(provider.ObjQP, 1); err != nil {
		q.release()
		return nil, d.errf("create qp: %w", err)
	}
	p.qps[q] = struct{}{}
	d.peerMu.Lock()
	d.byNum[q.num] = q
	d.peerMu.Unlock()
	return q, nil
}

// create makes the hardware QP and everything it posts with. On failure
// release undoes what was done. dev.mu is held.
func (q *qp) create() error {
	cp := q.cap
	hw := C.struct_ibv_qp_cap{
		max_send_wr:     C.uint32_t(cp.MaxSendWR),
		max_recv_wr:     C.uint32_t(cp.MaxRecvWR),
		max_send_sge:    C.uint32_t(cp.MaxSendSGE),
		max_recv_sge:    C.uint32_t(cp.MaxRecvSGE),
		max_inline_data: C.uint32_t(cp.MaxInline),
	}
	var csrq *C.struct_ibv_srq
	if q.srq != nil {
		csrq = q.srq.s
		hw.max_recv_wr, hw.max_recv_sge = 0, 0
	} else if q.typ == rdmaio.UD {
		hw.max_recv_sge++
	}
	sig := C.int(0)
	if q.sigAll {
		sig = 1
	}
	var c *C.struct_ibv_qp
	for {
		try := hw
		var err error
		c, err = C.jia_create_qp(q.pd.p, C.int(q.typ), q.scq.c, q.rcq.c, csrq, sig, &try)
		if c != nil {
			hw = try
			break
		}
		// Adapters support less inline data on some QP types: a default
		// inline size shrinks until the adapter accepts it.
		e := errnoOf(err)
		if !q.inlineDefault || hw.max_inline_data == 0 || e != syscall.EINVAL && e != syscall.ENOMEM {
			return fmt.Errorf("ibv_create_qp (send %d×%d SGEs, receive %d×%d SGEs, inline %d): %w",
				cp.MaxSendWR, cp.MaxSendSGE, cp.MaxRecvWR, cp.MaxRecvSGE, int(hw.max_inline_data), e)
		}
		hw.max_inline_data /= 2
	}
	q.c, q.num = c, uint32(c.qp_num)
	q.cap.MaxInline = min(q.cap.MaxInline, int(hw.max_inline_data))
	q.limits = provider.QPLimits{Type: q.typ, Cap: q.cap, MTU: q.dev.attr.MTU, MaxMsgSize: q.dev.attr.MaxMsgSize}
	if err := q.initQueues(); err != nil {
		return err
	}
	if q.grh != nil {
		n := len(q.rp.wq.grh)
		m, merr := C.jia_reg_mr(q.pd.p, C.uintptr_t(uintptr(q.grh)), C.size_t(n), C.int(accessFlags(rdmaio.AccessLocalWrite)))
		if m == nil {
			return regError(n, errnoOf(merr))
		}
		q.grhMR = m
		q.rp.grhLKey = uint32(m.lkey)
	}
	return nil
}

// initQueues sets up the software side of a QP whose hardware QP exists:
// CQ accounting, work queues and their keys, the posting arrays and the
// UD header slots (registered by the caller).
func (q *qp) initQueues() error {
	d, cp := q.dev, q.cap
	var err error
	if err := q.scq.attach(cp.MaxSendWR); err != nil {
		return err
	}
	q.sAttached = true
	q.sq = newSendQueue(cp.MaxSendWR, cp.MaxSendSGE)
	q.sqw = &workQueue{qp: q, send: q.sq}
	if q.sqKey, err = d.wqs.Insert(q.sqw); err != nil {
		return err
	}
	if err := q.sp.init(cp.MaxSendSGE, cp.MaxInline); err != nil {
		return err
	}
	q.rdepth = cp.MaxRecvWR
	if q.srq != nil {
		q.rdepth = q.srq.depth
	}
	if err := q.rcq.attach(q.rdepth); err != nil {
		return err
	}
	q.rAttached = true
	if q.srq != nil {
		q.srq.users++
		return nil
	}
	rq := newRecvQueue(cp.MaxRecvWR, cp.MaxRecvSGE)
	q.rp = &recvPost{rq: rq, wq: &workQueue{qp: q, recv: rq, ud: q.typ == rdmaio.UD}}
	if q.typ == rdmaio.UD {
		n := cp.MaxRecvWR * grhLen
		if q.grh, err = cAlloc(n, 1); err != nil {
			return err
		}
		q.rp.wq.grh = unsafe.Slice((*byte)(q.grh), n)
		q.rp.grhAddr = uint64(uintptr(q.grh))
	}
	if q.rp.key, err = d.wqs.Insert(q.rp.wq); err != nil {
		q.rp.key = 0
		return err
	}
	return q.rp.init(cp.MaxRecvSGE)
}

// release frees what create made (of a QP never handed out, or one being
// destroyed). The Go-side queues stay, so that late callers see ErrClosed.
// dev.mu is held.
func (q *qp) release() error {
	var errs []error
	if q.c != nil {
		if rc, err := C.ibv_destroy_qp(q.c); rc != 0 {
			errs = append(errs, fmt.Errorf("ibv_destroy_qp: %w", rcErrno(rc, err)))
		}
		q.c = nil
	}
	if q.sAttached {
		q.scq.detach(q.cap.MaxSendWR)
		q.sAttached = false
	}
	if q.rAttached {
		q.rcq.detach(q.rdepth)
		if q.srq != nil {
			q.srq.users--
		}
		q.rAttached = false
	}
	if q.sqKey != 0 {
		q.dev.wqs.Remove(q.sqKey)
		q.sqKey = 0
	}
	q.sp.free()
	if q.rp != nil {
		if q.rp.key != 0 {
			q.dev.wqs.Remove(q.rp.key)
			q.rp.key = 0
		}
		q.rp.free()
	}
	if q.grhMR != nil {
		if rc, err := C.ibv_dereg_mr(q.grhMR); rc != 0 {
			errs = append(errs, fmt.Errorf("deregister the GRH slots: %w", rcErrno(rc, err)))
		}
		q.grhMR = nil
	}
	if q.grh != nil {
		C.free(q.grh)
		q.grh = nil
	}
	return errors.Join(errs...)
}

func (q *qp) errf(format string, a ...any) error {
	return q.dev.errf("qp %d: "+format, append([]any{q.num}, a...)...)
}

// QPN returns the queue pair number.
func (q *qp) QPN() uint32 { return q.num }

// Type returns RC or UD.
func (q *qp) Type() rdmaio.QPType { return q.typ }

// State returns the state as last set by Modify or by an error completion.
func (q *qp) State() rdmaio.QPState { return rdmaio.QPState(q.state.Load()) }

// Cap returns the queue sizes in effect.
func (q *qp) Cap() rdmaio.QPCap { return q.cap }

// Modify moves the QP to attr.State with ibv_modify_qp.
func (q *qp) Modify(attr rdmaio.QPAttr) error {
	q.mmu.Lock()
	defer q.mmu.Unlock()
	cur := q.State()
	if err := provider.CheckTransition(q.typ, cur, &attr); err != nil {
		return q.errf("modify: %w", err)
	}
	var peer *portAddr
	if attr.State == rdmaio.StateRTR && cur == rdmaio.StateInit && q.typ == rdmaio.RC {
		a, err := q.dev.peer(attr.Dest.Addr)
		if err != nil {
			return q.errf("modify %v → RTR: %w", cur, err)
		}
		peer = &a
	}
	s, err := modifySpec(q.typ, cur, &attr, &q.dev.local, peer, q.dev.rdAtom, q.dev.initRdAtom)
	if err != nil {
		return q.errf("modify %v → %v: %w", cur, attr.State, err)
	}
	var ca C.struct_jia_qp_attr
	cQPAttr(&ca, &s)
	q.sq.mu.Lock()
	dead := q.sdead
	q.sq.mu.Unlock()
	if dead {
		return q.errf("modify: %w", rdmaio.ErrClosed)
	}
	if rc, err := C.jia_modify_qp(q.c, &ca); rc != 0 {
		e := rcErrno(rc, err)
		if e == syscall.EINVAL {
			return q.errf("modify %v → %v: %w: the device refused the attributes: %w", cur, attr.State, rdmaio.ErrInvalidArgument, e)
		}
		return q.errf("modify %v → %v: %w", cur, attr.State, e)
	}
	q.state.Store(uint32(attr.State))
	if attr.State == rdmaio.StateReset {
		q.rekey()
	}
	return nil
}

// rekey forgets the outstanding work of a QP moved to RESET: its queues
// get new keys, so that completions still in a CQ are dropped.
func (q *qp) rekey() {
	d := q.dev
	q.sq.mu.Lock()
	d.wqs.Remove(q.sqKey)
	q.sq.head = q.sq.tail
	if k, err := d.wqs.Insert(q.sqw); err == nil {
		q.sqKey = k
	}
	q.sq.mu.Unlock()
	if rp := q.rp; rp != nil {
		rp.rq.mu.Lock()
		d.wqs.Remove(rp.key)
		rp.rq.resetLocked()
		if k, err := d.wqs.Insert(rp.wq); err == nil {
			rp.key = k
		}
		rp.rq.mu.Unlock()
	}
}

func cQPAttr(c *C.struct_jia_qp_attr, s *qpAttrSpec) {
	*c = C.struct_jia_qp_attr{
		mask:               C.uint32_t(s.mask),
		state:              C.uint32_t(s.state),
		access:             C.uint32_t(s.access),
		qkey:               C.uint32_t(s.qkey),
		dest_qpn:           C.uint32_t(s.destQPN),
		rq_psn:             C.uint32_t(s.rqPSN),
		sq_psn:             C.uint32_t(s.sqPSN),
		pkey_index:         C.uint16_t(s.pkeyIndex),
		port:               C.uint8_t(s.port),
		path_mtu:           C.uint8_t(s.pathMTU),
		min_rnr_timer:      C.uint8_t(s.minRNRTimer),
		timeout:            C.uint8_t(s.timeout),
		retry_cnt:          C.uint8_t(s.retryCnt),
		rnr_retry:          C.uint8_t(s.rnrRetry),
		max_rd_atomic:      C.uint8_t(s.maxRdAtomic),
		max_dest_rd_atomic: C.uint8_t(s.maxDestRdAtomic),
	}
	cAH(&c.ah, &s.ah)
}

// PostSend checks and posts a chain of send work requests, in batches of
// at most postBatch per ibv_post_send.
func (q *qp) PostSend(wrs []rdmaio.SendWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	sq := q.sq
	sq.mu.Lock()
	defer sq.mu.Unlock()
	if q.sdead {
		return 0, q.errf("post send: %w", rdmaio.ErrClosed)
	}
	if err := provider.CanPostSend(q.State()); err != nil {
		return 0, q.errf("post send: %w", err)
	}
	sp := &q.sp
	posted := 0
	for posted < len(wrs) {
		n, ns := 0, 0
		var werr error
		for posted+n < len(wrs) && n < postBatch {
			wr := &wrs[posted+n]
			if werr = provider.CheckSendWR(&q.limits, wr); werr != nil {
				break
			}
			var a *ah
			if q.typ == rdmaio.UD {
				x, ok := wr.AH.(*ah)
				if !ok || x.pd.dev != q.dev {
					werr = fmt.Errorf("%w: address handle of another provider or device", rdmaio.ErrInvalidArgument)
					break
				}
				a = x
			}
			if sq.room() == 0 {
				werr = fmt.Errorf("%w: %d sends outstanding (signal at least every MaxSendWR requests)", rdmaio.ErrQueueFull, q.cap.MaxSendWR)
				break
			}
			q.fillSend(&sp.d[n], wr, a, n, &ns)
			n++
		}
		if n > 0 {
			rc := C.jia_post_send(q.c, &sp.d[0], C.int(n), &sp.sge[0], sp.wrs, sp.done)
			done := *sp.done
			sq.unadd(n - int(done))
			posted += int(done)
			if rc != 0 {
				return posted, q.errf("post send: work request %d (id %d): %w", posted, wrs[posted].ID, postError("ibv_post_send", postErrno(rc)))
			}
		}
		if werr != nil {
			return posted, q.errf("post send: work request %d (id %d): %w", posted, wrs[posted].ID, werr)
		}
	}
	return posted, nil
}

// fillSend builds descriptor d of batch entry n from wr, appending its
// SGEs at *ns. sq.mu is held.
func (q *qp) fillSend(d *C.struct_jia_swr, wr *rdmaio.SendWR, a *ah, n int, ns *int) {
	sp := &q.sp
	var sgl []rdmaio.SGE
	if wr.Inline == nil {
		sgl = wr.SGL
	}
	slot := q.sq.add(wr.ID, wr.Opcode.WCOpcode(), sgl)
	*d = C.struct_jia_swr{
		wr_id:       C.uint64_t(wrID(q.sqKey, slot)),
		raddr:       C.uint64_t(wr.RemoteAddr),
		compare_add: C.uint64_t(wr.CompareAdd),
		swap:        C.uint64_t(wr.Swap),
		rkey:        C.uint32_t(wr.RKey),
		imm:         C.uint32_t(wr.Imm),
		opcode:      C.uint32_t(wr.Opcode),
		flags:       C.uint32_t(sendFlags(wr.Flags, wr.Inline != nil, q.sigAll)),
	}
	if a != nil {
		d.ah, d.rqpn, d.rqkey = a.a, C.uint32_t(wr.RemoteQPN), C.uint32_t(wr.RemoteQKey)
	}
	if wr.Inline != nil {
		if len(wr.Inline) > 0 {
			off := n * q.cap.MaxInline
			copy(sp.inline[off:], wr.Inline)
			sp.sge[*ns] = C.struct_ibv_sge{addr: C.uint64_t(uintptr(unsafe.Pointer(&sp.inline[off]))), length: C.uint32_t(len(wr.Inline))}
			d.nsge = 1
			*ns++
		}
		return
	}
	for _, s := range wr.SGL {
		sp.sge[*ns] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
		*ns++
	}
	d.nsge = C.uint32_t(len(wr.SGL))
}

// PostRecv posts receive work requests; it fails on a QP with an SRQ.
func (q *qp) PostRecv(wrs []rdmaio.RecvWR) (int, error) {
	if q.rp == nil {
		if q.srq != nil {
			return 0, q.errf("post recv: %w: the QP uses an SRQ", rdmaio.ErrInvalidArgument)
		}
		return 0, q.errf("post recv: %w", rdmaio.ErrClosed)
	}
	if len(wrs) == 0 {
		return 0, nil
	}
	if err := provider.CanPostRecv(q.State()); err != nil {
		return 0, q.errf("post recv: %w", err)
	}
	n, err := q.rp.post(q.c, nil, wrs)
	if err != nil {
		return n, q.errf("post recv: work request %d (id %d): %w", n, wrs[n].ID, err)
	}
	return n, nil
}

// Close destroys the QP; outstanding work is discarded.
func (q *qp) Close() error {
	p := q.pd
	if err := p.begin("close qp"); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	if _, ok := p.qps[q]; !ok {
		return q.errf("close: %w", rdmaio.ErrClosed)
	}
	return q.destroy()
}

// destroy destroys the QP. dev.mu is held.
func (q *qp) destroy() error {
	p, d := q.pd, q.dev
	delete(p.qps, q)
	p.use.Add(provider.ObjQP, -1)
	d.peerMu.Lock()
	delete(d.byNum, q.num)
	d.peerMu.Unlock()
	q.mmu.Lock()
	defer q.mmu.Unlock()
	q.sq.mu.Lock()
	q.sdead = true
	q.sq.mu.Unlock()
	if rp := q.rp; rp != nil {
		rp.rq.mu.Lock()
		rp.closed = true
		rp.rq.mu.Unlock()
	}
	if err := q.release(); err != nil {
		return q.errf("close: %w", err)
	}
	return nil
}
