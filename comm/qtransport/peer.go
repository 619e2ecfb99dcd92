package qtransport

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/jiarun/jia/comm/internal/bufpool"
	"github.com/jiarun/jia/comm/internal/qpbind"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/internal/qlock"
	"github.com/jiarun/jia/rdmaio"
)

// recKind is what a posted work request was for.
type recKind uint8

const (
	recSend recKind = iota
	recRead
	recWrite
	recFence
)

// wrec records a posted work request until it retires (its completion, or
// a later one, has been polled). Records are indexed by sequence number
// modulo the send queue depth.
type wrec struct {
	kind   recKind
	last   bool   // the last work request of a read or write
	bounce bool   // a read into the bounce ring: scatter at retirement
	end    uint64 // bounce ring tail after the request's allocation
	id     uint64
	off    uint64 // bounce ring offset of a bounced read
	n      int
	local  [][]byte  // destination of a bounced read
	regs   []*region // registrations of the local pieces, released at retirement
}

// pending is an operation in a peer's backlog.
type pending struct {
	kind  recKind
	buf   []byte // a message (pooled)
	id    uint64
	rkey  uint32
	raddr uint64
	n     int
	local [][]byte
}

type peerStats struct {
	Inline, Bounced, Backlogged, Signaled, Chains uint64
	ReadsBounced, ReadsRegistered                 uint64
	BacklogPeak                                   int
}

// chainMax is the longest chain of work requests the backlog flush posts
// at once.
const chainMax = 16

// oneSidedChain is the longest chain of reads and writes: the READs of one
// rendezvous (one per vector block, or per gather list of the receiving
// vector) go in one chain, which a provider that batches them (shm moves a
// run of reads with one system call) executes at once. The chain and its
// gather lists grow to it at the first such rendezvous and keep their room.
const oneSidedChain = 128

// chainFull reports whether the chain must be posted before nwr more reads
// or writes with nsge gather entries in all join it.
func (p *peer) chainFull(nwr, nsge int) bool {
	limit := min(oneSidedChain, int(p.depth))
	return len(p.chain)+nwr > max(limit, cap(p.chain)) || len(p.sges)+nsge > max(limit*p.d.sge, cap(p.sges))
}

// peer is the connection to one rank. Everything below mu is guarded by it.
type peer struct {
	refill    bool // in d.refill (pollMu held)
	t         *Transport
	rank      int
	d         *device
	qp        rdmaio.QP
	iqp       rdmaio.InlineQP // qp, when it posts inline SENDs in pieces
	tqp       rdmaio.TakeQP   // qp, when its messages may be taken where they lie (Take)
	rslot     uint            // the peer's device slot: which key of a Region is ours
	fenceRKey uint32
	fenceAddr uint64
	depth     uint64
	recMask   uint64 // len(recs) - 1
	reserve   int    // send queue slots one operation may need
	sigEvery  int

	mu      qlock.Mutex // short sections on the send path: see package qlock
	err     error       // sticky: the connection failed
	closed  bool
	posted  uint64 // sequence number of the next work request
	retired uint64 // sequence number of the next to retire
	sigRun  int    // unsignaled requests since the last signaled one
	lastSig uint64 // posted count after the last signaled request
	recs    []wrec
	opErr   error // first error of the read or write being retired

	ring   []byte
	ringMR rdmaio.MR
	rhead  uint64
	rtail  uint64

	bl     []pending // backlog: bl[blHead:]
	blHead int
	// waiting: the backlog is not empty (read without mu by Backlogged).
	waiting atomic.Bool
	pool    bufpool.Pool

	chain   []rdmaio.SendWR
	sges    []rdmaio.SGE
	inl     []byte                         // inline payloads of the chain
	hdr     [transport.ShortHeaderLen]byte // sendInline's copy of a header
	inlUsed int
	// held: the chain holds messages of SendShortHeld not posted yet, and
	// the peer is in the transport's held list.
	held bool
	st   peerStats
}

// create makes the peer's queue pair and moves it to INIT.
func (p *peer) create() error {
	d := p.d
	qp, err := d.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: d.cq, RecvCQ: d.cq, SRQ: d.srq,
		Cap: rdmaio.QPCap{MaxSendWR: d.depth, MaxRecvWR: 1, MaxSendSGE: d.sge, MaxRecvSGE: 1, MaxInline: d.inline}})
	if err != nil {
		return err
	}
	p.qp = qp
	p.iqp, _ = qp.(rdmaio.InlineQP)
	if d.directCQ != nil {
		// Take consumes what PollDirect would copy: only where Poll
		// delivers the same messages without receive buffers.
		p.tqp, _ = qp.(rdmaio.TakeQP)
	}
	d.qpPeer[qp.QPN()] = int32(p.rank)
	if err := qp.Modify(rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemoteRead | rdmaio.AccessRemoteWrite}); err != nil {
		return err
	}
	p.depth = uint64(d.depth)
	p.reserve = d.depth / 2
	p.sigEvery = max(1, min(16, d.depth/4))
	// A power of two of records, so that a request's record is its
	// sequence number masked, not divided.
	p.recs = warm(make([]wrec, 1<<bits.Len(uint(d.depth-1))))
	p.recMask = uint64(len(p.recs) - 1)
	// Room for one registration per request, so that a contiguous Read or
	// Write does not allocate the first time it lands on a request.
	regs := make([]*region, len(p.recs))
	for i := range p.recs {
		p.recs[i].regs = regs[i : i : i+1]
	}
	p.chain = warm(make([]rdmaio.SendWR, 0, chainMax))
	p.sges = warm(make([]rdmaio.SGE, 0, 2*chainMax))
	p.inl = warm(make([]byte, chainMax*d.inline))
	return nil
}

// wrap gives an error of the connection its context.
func (p *peer) wrap(what string, err error) error {
	return fmt.Errorf("qtransport: rank %d: %s rank %d: %w", p.t.rank, what, p.rank, err)
}

// free is the number of free send queue slots.
func (p *peer) free() int { return int(p.depth - (p.posted - p.retired)) }

// blLen is the number of backlogged operations.
func (p *peer) blLen() int { return len(p.bl) - p.blHead }

func (p *peer) pushBacklog(it pending) {
	if n := p.blLen() + 1; n > p.st.BacklogPeak {
		p.st.BacklogPeak = n
	}
	if p.blLen() == 0 {
		p.waiting.Store(true)
		p.d.noteBacklog()
	}
	if p.blHead > 0 && p.blHead == len(p.bl) {
		p.bl, p.blHead = p.bl[:0], 0
	}
	if len(p.bl) == cap(p.bl) && p.blHead >= len(p.bl)/2 {
		// Compact instead of growing.
		n := copy(p.bl, p.bl[p.blHead:])
		clear(p.bl[n:])
		p.bl, p.blHead = p.bl[:n], 0
	}
	if len(p.bl) < cap(p.bl) {
		// Reuse the slot's local slice.
		p.bl = p.bl[:len(p.bl)+1]
		e := &p.bl[len(p.bl)-1]
		loc := e.local[:0]
		*e = it
		e.local = append(loc, it.local...)
		return
	}
	it.local = append([][]byte(nil), it.local...)
	p.bl = append(p.bl, it)
}

func (p *peer) popBacklog() {
	e := &p.bl[p.blHead]
	clear(e.local)
	loc := e.local[:0]
	*e = pending{local: loc}
	p.blHead++
	if p.blHead == len(p.bl) {
		p.bl, p.blHead = p.bl[:0], 0
		p.waiting.Store(false)
		p.d.backlogged.Add(-1)
		p.t.backlogged.Add(-1)
	}
}

// send sends or queues one message (mu held).
func (p *peer) send(hdr []byte, data [][]byte, n int) error {
	if p.closed {
		return p.wrap("send to", transport.ErrClosed)
	}
	if p.err != nil {
		return p.err
	}
	if p.blLen() == 0 {
		if len(hdr) <= len(p.hdr) && len(data) <= 1 && p.inlineNow(n) {
			return p.sendInline(hdr, data)
		}
		ok, err := p.addSend(hdr, data, nil, n)
		if err != nil {
			return err
		}
		if ok {
			return p.post(false)
		}
	}
	buf := p.pool.Get(n)
	qpbind.Gather(buf, hdr, data)
	p.pushBacklog(pending{kind: recSend, buf: buf, n: n})
	p.st.Backlogged++
	return nil
}

// inlineNow reports whether a message of n bytes (a header of at most
// len(p.hdr) bytes and at most one piece of data) may go out at once
// through InlineQP: the peer is usable, nothing waits before it (backlog,
// chain) and the send queue has room (mu held).
func (p *peer) inlineNow(n int) bool {
	return p.iqp != nil && !p.closed && p.err == nil && p.blLen() == 0 && len(p.chain) == 0 &&
		n <= p.d.inline && p.free() >= 1
}

// sendInline posts a short SEND of hdr and data (at most one piece)
// through InlineQP, which copies them once (mu held; inlineNow).
func (p *peer) sendInline(hdr []byte, data [][]byte) error {
	var payload []byte
	if len(data) == 1 {
		payload = data[0]
	}
	// The header is copied first: passed to an interface method, a
	// caller's array would escape to the heap.
	return p.postInline(p.hdr[:copy(p.hdr[:], hdr)], payload)
}

// postInline is sendInline of a header already in p.hdr (hdr).
func (p *peer) postInline(hdr, payload []byte) error {
	id, flags := p.record(recSend, false)
	p.st.Inline++
	if err := p.iqp.PostSendInline(id, flags, hdr, payload); err != nil {
		return p.postFailed(1, 0, err, false)
	}
	return nil
}

// sendHeld is send, except that the message may stay in the chain, to be
// posted with later ones (mu held).
func (p *peer) sendHeld(hdr []byte, data [][]byte, n int) error {
	if p.closed || p.err != nil || p.blLen() > 0 {
		return p.send(hdr, data, n)
	}
	ok, err := p.addSend(hdr, data, nil, n)
	if err != nil {
		return err
	}
	if !ok {
		// No room: post what the chain holds and queue the message.
		if err := p.post(false); err != nil {
			return err
		}
		return p.send(hdr, data, n)
	}
	if !p.held {
		p.held = true
		p.t.noteHeld(p)
	}
	return nil
}

// addSend adds a SEND of hdr+data (or of msg) to the chain if the send
// queue and the bounce ring have room, and reports whether it did.
func (p *peer) addSend(hdr []byte, data [][]byte, msg []byte, n int) (bool, error) {
	if p.free() < 1 {
		return false, nil
	}
	d := p.d
	if n <= d.inline {
		if p.inlUsed+n > len(p.inl) || len(p.chain) == cap(p.chain) {
			if err := p.post(true); err != nil {
				return false, err
			}
		}
		b := p.inl[p.inlUsed : p.inlUsed+n]
		if msg != nil {
			copy(b, msg)
		} else {
			qpbind.Gather(b, hdr, data)
		}
		p.inlUsed += n
		wr := p.add(recSend, false)
		wr.Opcode = rdmaio.OpSend
		wr.Inline = b
		p.st.Inline++
		return true, nil
	}
	var off uint64
	if n > 0 {
		var ok bool
		var err error
		if off, ok, err = p.alloc(n); err != nil || !ok {
			return false, err
		}
		b := p.ring[off : off+uint64(n)]
		if msg != nil {
			copy(b, msg)
		} else {
			qpbind.Gather(b, hdr, data)
		}
	}
	if len(p.chain) == cap(p.chain) || len(p.sges) == cap(p.sges) {
		if err := p.post(true); err != nil {
			return false, err
		}
	}
	wr := p.add(recSend, false)
	wr.Opcode = rdmaio.OpSend
	if n > 0 {
		p.sges = append(p.sges, rdmaio.SGE{Addr: p.ringMR.Addr() + off, Length: uint32(n), LKey: p.ringMR.LKey()})
		wr.SGL = p.sges[len(p.sges)-1:]
	}
	p.st.Bounced++
	return true, nil
}

// add appends a work request to the chain and records it. A SEND is
// signaled every sigEvery requests and whenever the send queue or the
// bounce ring is low after it: then, when an operation cannot be posted
// for lack of room, a signaled request is outstanding whose completion
// will free room and flush the backlog. One-sided operations signal their
// last request (signalLast).
func (p *peer) add(kind recKind, noSignal bool) *rdmaio.SendWR {
	id, flags := p.record(kind, noSignal)
	// The entries past the chain's end are zero (post clears what it
	// posted): extending it is cheaper than appending a whole request.
	if len(p.chain) < cap(p.chain) {
		p.chain = p.chain[:len(p.chain)+1]
	} else {
		p.chain = append(p.chain, rdmaio.SendWR{})
	}
	wr := &p.chain[len(p.chain)-1]
	if kind == recRead {
		// A rendezvous READs the sender's buffer or its staging area,
		// never memory that a SEND delivers into.
		flags |= rdmaio.SendUnordered
	}
	wr.ID, wr.Flags = id, flags
	return wr
}

// record records the next work request as add does and returns its ID
// and flags, for a request posted outside the chain.
func (p *peer) record(kind recKind, noSignal bool) (uint64, rdmaio.SendFlags) {
	seq := p.posted
	p.posted++
	r := &p.recs[seq&p.recMask]
	r.kind, r.last, r.bounce, r.end, r.id, r.off, r.n = kind, false, false, p.rtail, 0, 0, 0
	var flags rdmaio.SendFlags
	if !noSignal && kind == recSend {
		if p.sigRun+1 >= p.sigEvery || p.free() < p.reserve || !p.canAlloc(p.t.maxBounce) {
			flags = rdmaio.SendSignaled
			p.sigRun = 0
			p.lastSig = p.posted
			p.st.Signaled++
		} else {
			p.sigRun++
		}
	} else {
		p.sigRun++
	}
	return uint64(p.rank)<<seqBits | seq&seqMask, flags
}

// signalLast makes the last request of the chain signaled.
func (p *peer) signalLast() *wrec {
	p.chain[len(p.chain)-1].Flags |= rdmaio.SendSignaled
	p.sigRun = 0
	p.lastSig = p.posted
	r := &p.recs[(p.posted-1)&p.recMask]
	r.last = true
	return r
}

// post posts the chain with one doorbell. On failure the connection is
// broken: the requests not posted are rolled back, their registrations
// removed, and (with report) their reads and writes completed with the
// error at the next Poll.
func (p *peer) post(report bool) error {
	k := len(p.chain)
	if k == 0 {
		return nil
	}
	if k > 1 {
		p.st.Chains++
	}
	n, err := p.qp.PostSend(p.chain)
	clear(p.chain)
	p.chain, p.sges, p.inlUsed = p.chain[:0], p.sges[:0], 0
	if err == nil && n == k {
		return nil
	}
	return p.postFailed(k, n, err, report)
}

// postFailed breaks the connection after a post of k requests of which n
// were posted failed with err (see post).
func (p *peer) postFailed(k, n int, err error, report bool) error {
	if err == nil {
		err = fmt.Errorf("%d of %d work requests posted", n, k)
	}
	werr := p.wrap("post to", err)
	if p.err == nil {
		p.err = werr
	}
	first := p.posted - uint64(k-n)
	for s := first; s < p.posted; s++ {
		r := &p.recs[s&p.recMask]
		var errs []error
		for _, reg := range r.regs {
			if e := p.t.release(reg); e != nil {
				errs = append(errs, e)
			}
		}
		clear(r.regs)
		r.regs = r.regs[:0]
		clear(r.local)
		r.local = r.local[:0]
		if report && r.last && (r.kind == recRead || r.kind == recWrite) {
			p.t.deferComplete(r.id, errors.Join(append([]error{werr}, errs...)...))
		}
	}
	p.posted = first
	if first > 0 {
		p.rtail = p.recs[(first-1)&p.recMask].end
	} else {
		p.rtail = 0
	}
	p.failBacklog()
	return werr
}

// alloc takes n contiguous bytes of the bounce ring, allocating the ring
// at first use. ok is false when the ring is too full.
func (p *peer) alloc(n int) (off uint64, ok bool, err error) {
	if p.ring == nil {
		if err := p.allocRing(); err != nil {
			return 0, false, err
		}
	}
	c := uint64(len(p.ring))
	pos := p.rtail % c
	need, start := uint64(n), p.rtail
	if pos+need > c {
		need += c - pos
		start += c - pos
	}
	if p.rtail+need-p.rhead > c {
		return 0, false, nil
	}
	p.rtail += need
	return start % c, true, nil
}

// canAlloc reports whether alloc(n) would succeed.
func (p *peer) canAlloc(n int) bool {
	if p.ring == nil {
		return true
	}
	c := uint64(len(p.ring))
	pos := p.rtail % c
	need := uint64(n)
	if pos+need > c {
		need += c - pos
	}
	return p.rtail+need-p.rhead <= c
}

func (p *peer) allocRing() error {
	b, err := p.d.pd.Alloc(p.t.ringSize)
	if err != nil {
		err = p.wrap("bounce ring for", err)
		p.err = err
		return err
	}
	if !p.t.opt.Lazy {
		prefault(b)
	}
	mr, err := p.d.pd.RegMR(b, rdmaio.AccessLocalWrite)
	if err != nil {
		p.d.pd.Free(b)
		err = p.wrap("bounce ring for", err)
		p.err = err
		return err
	}
	p.ring, p.ringMR = b, mr
	return nil
}

// oneSided starts or queues a Read or Write (mu held); with held, one that
// fits in the chain stays there unposted (ReadHeld).
func (p *peer) oneSided(kind recKind, rkey uint32, raddr uint64, local [][]byte, n int, id uint64, held bool) error {
	if p.closed {
		return p.wrap(opName(kind), transport.ErrClosed)
	}
	if p.err != nil {
		return p.err
	}
	if p.blLen() == 0 {
		ok, err := p.addOneSided(kind, rkey, raddr, local, n, id)
		if err != nil {
			return err
		}
		if ok && held {
			// Left in the chain for the next operation to the peer (or
			// the held list's flush) to post.
			if !p.held {
				p.held = true
				p.t.noteHeld(p)
			}
			return nil
		}
		if ok {
			return p.post(false)
		}
	}
	if err := p.checkShape(local); err != nil {
		return err
	}
	p.pushBacklog(pending{kind: kind, id: id, rkey: rkey, raddr: raddr, n: n, local: local})
	p.st.Backlogged++
	return nil
}

func opName(k recKind) string {
	if k == recWrite {
		return "write to"
	}
	return "read from"
}

// wrCount returns how many work requests the registered form of a read or
// write of local takes, and how many SGEs.
func (p *peer) wrCount(local [][]byte) (wrs, sges int) {
	d := p.d
	cur, curN := 0, 0
	for _, b := range local {
		for off := 0; off < len(b); {
			c := min(len(b)-off, d.maxWR)
			if wrs == 0 || curN == d.sge || cur+c > d.maxWR {
				wrs++
				cur, curN = 0, 0
			}
			cur += c
			curN++
			sges++
			off += c
		}
	}
	return wrs, sges
}

// checkShape refuses a read or write that could never be posted.
func (p *peer) checkShape(local [][]byte) error {
	if w, _ := p.wrCount(local); w > p.reserve {
		return p.wrap(fmt.Sprintf("%d pieces (%d work requests, max %d) in one transfer with", len(local), w, p.reserve),
			transport.ErrTooLong)
	}
	return nil
}

// addOneSided adds the work requests of a read or write to the chain if
// there is room. The local pieces are used in place when they are
// registered already (the registration cache); otherwise a transfer of at
// most the device's bounce limit (Options.ReadBounce) goes through the bounce ring (a copy costs
// less than a registration), a larger one registers them.
func (p *peer) addOneSided(kind recKind, rkey uint32, raddr uint64, local [][]byte, n int, id uint64) (bool, error) {
	if n <= p.d.readBounce {
		ok, miss, err := p.addRegistered(kind, rkey, raddr, local, n, id, true)
		if !miss {
			return ok, err
		}
		return p.addBounced(kind, rkey, raddr, local, n, id)
	}
	ok, _, err := p.addRegistered(kind, rkey, raddr, local, n, id, false)
	return ok, err
}

func opcode(kind recKind) rdmaio.Opcode {
	if kind == recWrite {
		return rdmaio.OpRDMAWrite
	}
	return rdmaio.OpRDMARead
}

// addBounced adds a read into (or a write from) the bounce ring.
func (p *peer) addBounced(kind recKind, rkey uint32, raddr uint64, local [][]byte, n int, id uint64) (bool, error) {
	d := p.d
	nwr := (n + d.maxWR - 1) / d.maxWR
	if p.free() < nwr {
		return false, nil
	}
	if p.chainFull(nwr, nwr) {
		if err := p.post(true); err != nil {
			return false, err
		}
	}
	off, ok, err := p.alloc(n)
	if err != nil || !ok {
		return false, err
	}
	if kind == recWrite {
		qpbind.Gather(p.ring[off:off+uint64(n)], nil, local)
	}
	for done := 0; done < n; {
		c := min(n-done, d.maxWR)
		wr := p.add(kind, true)
		wr.Opcode, wr.RemoteAddr, wr.RKey = opcode(kind), raddr+uint64(done), rkey
		p.sges = append(p.sges, rdmaio.SGE{Addr: p.ringMR.Addr() + off + uint64(done), Length: uint32(c), LKey: p.ringMR.LKey()})
		wr.SGL = p.sges[len(p.sges)-1:]
		done += c
	}
	r := p.signalLast()
	r.id, r.n, r.off = id, n, off
	if kind == recRead {
		r.bounce = true
		r.local = append(r.local[:0], local...)
	}
	p.st.ReadsBounced++
	return true, nil
}

// addRegistered adds a read or write straight from the local pieces,
// registered (or found in the registration cache) as one span when they
// lie in order in one array, as vector blocks do, else one by one; they
// are released when the last request retires. With cachedOnly it only
// uses registrations the cache has, and reports a miss otherwise.
func (p *peer) addRegistered(kind recKind, rkey uint32, raddr uint64, local [][]byte, n int, id uint64, cachedOnly bool) (ok, miss bool, err error) {
	d := p.d
	t := p.t
	nwr, nsge := p.wrCount(local)
	if nwr > p.reserve {
		return false, false, p.checkShape(local)
	}
	if p.free() < nwr {
		return false, false, nil
	}
	if p.chainFull(nwr, nsge) {
		if err := p.post(true); err != nil {
			return false, false, err
		}
	}
	lastRec := &p.recs[(p.posted+uint64(nwr)-1)&p.recMask]
	regs := lastRec.regs[:0]
	undo := func() {
		for _, r := range regs {
			t.release(r)
		}
		clear(regs)
		lastRec.regs = regs[:0]
	}
	get := func(b []byte) (*region, error) {
		if cachedOnly {
			return t.lookup(b), nil
		}
		return t.acquire(b)
	}
	if span := spanOf(local); span != nil {
		r, err := get(span)
		if err != nil {
			undo()
			return false, false, p.wrap(fmt.Sprintf("register %d bytes to %s", n, opName(kind)), err)
		}
		if r == nil {
			return false, true, nil
		}
		regs = append(regs, r)
	} else {
		for _, b := range local {
			if len(b) == 0 {
				continue
			}
			r, err := get(b)
			if err != nil {
				undo()
				return false, false, p.wrap(fmt.Sprintf("register %d bytes to %s", n, opName(kind)), err)
			}
			if r == nil {
				undo()
				return false, true, nil
			}
			regs = append(regs, r)
		}
	}
	var wr *rdmaio.SendWR
	cur, curN, sg0 := 0, 0, 0
	at := raddr
	ri := 0
	for _, b := range local {
		if len(b) == 0 {
			continue
		}
		reg := regs[ri]
		if len(regs) > 1 {
			ri++
		}
		for off := 0; off < len(b); {
			c := min(len(b)-off, d.maxWR)
			if wr == nil || curN == d.sge || cur+c > d.maxWR {
				wr = p.add(kind, true)
				wr.Opcode, wr.RemoteAddr, wr.RKey = opcode(kind), at, rkey
				cur, curN, sg0 = 0, 0, len(p.sges)
			}
			p.sges = append(p.sges, reg.sge(d.slot, b[off:off+c]))
			wr.SGL = p.sges[sg0:len(p.sges)]
			cur += c
			curN++
			at += uint64(c)
			off += c
		}
	}
	r := p.signalLast()
	r.id, r.n = id, n
	r.regs = regs
	p.st.ReadsRegistered++
	return true, false, nil
}

// flush posts backlogged operations while there is room (mu held).
func (p *peer) flush() {
	for p.blLen() > 0 && p.err == nil && !p.closed {
		it := &p.bl[p.blHead]
		var ok bool
		var err error
		if it.kind == recSend {
			ok, err = p.addSend(nil, nil, it.buf, it.n)
		} else {
			ok, err = p.addOneSided(it.kind, it.rkey, it.raddr, it.local, it.n, it.id)
			if err != nil && p.err == nil {
				// This operation alone failed (registration): report it.
				p.t.deferComplete(it.id, err)
				ok, err = true, nil
			}
		}
		if err != nil || !ok {
			break
		}
		if it.buf != nil {
			p.pool.Put(it.buf)
		}
		p.popBacklog()
	}
	// A failed post is recorded in p.err, and fails the backlog.
	p.post(true)
}

// failBacklog drops the backlog of a failed connection; its reads and
// writes complete with the connection's error.
func (p *peer) failBacklog() {
	for p.blLen() > 0 {
		it := &p.bl[p.blHead]
		if it.kind != recSend {
			p.t.deferComplete(it.id, p.err)
		}
		if it.buf != nil {
			p.pool.Put(it.buf)
		}
		p.popBacklog()
	}
}

// complete retires the requests up to the one wc reports (mu held).
// Finished reads and writes are appended to the device's done list.
func (p *peer) complete(wc *rdmaio.WorkCompletion) {
	t := p.t
	seq := wc.ID & seqMask
	cnt := (seq-p.retired)&seqMask + 1
	if cnt > p.posted-p.retired {
		t.setErr(t.errf("completion %#x for no outstanding request to rank %d", wc.ID, p.rank))
		return
	}
	var werr error
	if wc.Status != rdmaio.StatusSuccess {
		if p.err == nil {
			p.err = p.wrap("connection to", wc.Err())
		}
		werr = p.err
	}
	for i := uint64(0); i < cnt; i++ {
		r := &p.recs[p.retired&p.recMask]
		var e error
		if i == cnt-1 {
			e = werr
		}
		p.retire(r, e)
		p.retired++
	}
}

// retire releases one request's resources; a read or write's last request
// reports the operation.
func (p *peer) retire(r *wrec, err error) {
	if r.kind == recRead || r.kind == recWrite {
		if err != nil && p.opErr == nil {
			p.opErr = err
		}
		if r.last {
			if r.bounce && p.opErr == nil {
				scatterFrom(r.local, p.ring[r.off:r.off+uint64(r.n)])
			}
			d := p.d
			r0 := len(d.doneRegs)
			d.doneRegs = append(d.doneRegs, r.regs...)
			d.done = append(d.done, doneOp{id: r.id, err: p.opErr, r0: r0, r1: len(d.doneRegs)})
			clear(r.regs)
			r.regs = r.regs[:0]
			clear(r.local)
			r.local = r.local[:0]
			p.opErr = nil
		}
	}
	p.rhead = r.end
}

// lingering reports whether the peer still has messages to deliver, and
// posts a signaled fence (an 8-byte READ, which completes after every
// request before it) when the last request was unsignaled (mu held).
func (p *peer) lingering() bool {
	if p.err != nil || p.qp == nil {
		return false
	}
	if p.blLen() > 0 {
		return true
	}
	if p.posted == p.retired {
		return false
	}
	if p.lastSig != p.posted && p.free() > 0 {
		wr := p.add(recFence, true)
		wr.Opcode, wr.RemoteAddr, wr.RKey = rdmaio.OpRDMARead, p.fenceAddr, p.fenceRKey
		p.sges = append(p.sges, rdmaio.MRSGE(p.d.fenceMR, 8, 8))
		wr.SGL = p.sges[len(p.sges)-1:]
		p.chain[len(p.chain)-1].Flags |= rdmaio.SendSignaled
		p.lastSig = p.posted
		if p.post(false) != nil {
			return false // recorded in p.err
		}
	}
	return true
}

// destroy closes the queue pair and frees the bounce ring (at Close).
func (p *peer) destroy() []error {
	var errs []error
	add := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %s: %w", p.rank, what, err))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.qp != nil {
		add("close queue pair", p.qp.Close())
		p.qp = nil
	}
	// Registrations of requests that never retired.
	for s := p.retired; s < p.posted; s++ {
		r := &p.recs[s&p.recMask]
		for _, reg := range r.regs {
			add("release registration", p.t.release(reg))
		}
		clear(r.regs)
		r.regs = r.regs[:0]
	}
	p.retired = p.posted
	if p.ringMR != nil {
		add("deregister bounce ring", p.ringMR.Deregister())
		p.ringMR = nil
	}
	if p.ring != nil {
		add("free bounce ring", p.d.pd.Free(p.ring))
		p.ring = nil
	}
	for p.blLen() > 0 {
		p.popBacklog()
	}
	return errs
}

// spanOf returns the memory from the first to the end of the last of
// several pieces that lie in ascending order inside the first piece's
// array (as the blocks of a vector do), or nil.
func spanOf(local [][]byte) []byte {
	first, last := -1, -1
	for i, b := range local {
		if len(b) > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 || first == last {
		return nil
	}
	f := local[first]
	lo := addrOf(f)
	end := lo
	for _, b := range local[first:] {
		if len(b) == 0 {
			continue
		}
		a := addrOf(b)
		if a < end {
			return nil
		}
		end = a + uintptr(len(b))
	}
	if end-lo > uintptr(cap(f)) {
		return nil
	}
	return f[:end-lo]
}
