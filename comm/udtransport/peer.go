package udtransport

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/rdmaio"
)

// peer is the state of one remote rank: where its UD queue pair is and the
// Link to it.
type peer struct {
	t    *Transport
	rank int
	d    *device
	ah   rdmaio.AH

	// From the peer's card: its queue pair, Q_Key and the cookie its
	// datagrams carry.
	rqpn, rqkey, rcookie uint32

	mu    sync.Mutex
	link  *proto.Link
	parts [][]byte       // scratch of Send
	hdr   [udHeader]byte // this rank's datagram header towards the peer
	mark  uint64         // epoch in which the peer was last touched (pollMu)
	// waiting: packets to the peer wait behind a full window (set by
	// flush, read without mu by Backlogged).
	waiting atomic.Bool
}

// flush carries out what the Link has ready: packets go to the device,
// messages to the ready queue; then it notes the Link's next
// retransmission deadline (p.mu held).
func (p *peer) flush() {
	l := p.link
	if l.HasReady() {
		rd := l.Ready()
		if len(rd.Packets) > 0 {
			p.d.transmit(p, rd.Packets)
		}
		if len(rd.Messages) > 0 {
			p.t.enqueue(p.rank, rd.Messages)
		}
		l.Advance()
	}
	if at, ok := l.NextTimeout(); ok {
		p.t.noteDeadline(p.t.mono(at))
	}
	if q := l.Queued() > 0; q != p.waiting.Load() {
		p.waiting.Store(q)
	}
}

// transmit posts packets to peer p as datagrams, in chains: inline when
// they are small, else from the send ring. A datagram the send queue has
// no room for is dropped (the Link retransmits it). p.mu is held.
func (d *device) transmit(p *peer, pkts [][]byte) {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	if d.qp == nil {
		return // torn down by Close
	}
	d.swrs = d.swrs[:0]
	d.inlUsed = 0
	sigEvery := uint64(max(1, d.depth/4))
	for _, pkt := range pkts {
		n := udHeader + len(pkt)
		if len(d.swrs) == cap(d.swrs) {
			d.post()
		}
		seq := d.posted + uint64(len(d.swrs))
		if seq-d.retired >= uint64(d.depth) {
			d.post()
			d.reap()
			seq = d.posted
			if seq-d.retired >= uint64(d.depth) {
				d.t.stats.localDrops.Add(1)
				continue
			}
		}
		if n > d.bufSize {
			// Cannot happen: the Link's MTU is below the path MTU.
			d.t.stats.localDrops.Add(1)
			continue
		}
		i := len(d.swrs)
		d.swrs = d.swrs[:i+1]
		wr := &d.swrs[i]
		*wr = rdmaio.SendWR{ID: seq, Opcode: rdmaio.OpSend, AH: p.ah, RemoteQPN: p.rqpn, RemoteQKey: p.rqkey}
		if (seq+1)%sigEvery == 0 {
			wr.Flags = rdmaio.SendSignaled
		}
		if n <= d.inline {
			b := d.inl[d.inlUsed : d.inlUsed+n]
			copy(b, p.hdr[:])
			copy(b[udHeader:], pkt)
			d.inlUsed += n
			wr.Inline = b
		} else {
			off := int(seq%uint64(d.depth)) * d.bufSize
			copy(d.sslab[off:], p.hdr[:])
			copy(d.sslab[off+udHeader:], pkt)
			d.ssges[i] = rdmaio.MRSGE(d.smr, off, n)
			wr.SGL = d.ssges[i : i+1]
		}
	}
	d.post()
}

// post posts the chain in d.swrs; what the queue refuses is dropped
// (sendMu held).
func (d *device) post() {
	if len(d.swrs) == 0 {
		return
	}
	k, err := d.qp.PostSend(d.swrs)
	d.posted += uint64(k)
	if err != nil {
		d.t.stats.localDrops.Add(uint64(len(d.swrs) - k))
		if !errors.Is(err, rdmaio.ErrQueueFull) {
			d.t.setErr(d.t.errf("device %d: post send: %w", d.slot, err))
		}
	}
	clear(d.swrs)
	d.swrs = d.swrs[:0]
	d.inlUsed = 0
}

// reap polls the send completions and retires the work requests they
// cover (sendMu held).
func (d *device) reap() {
	for {
		k := d.scq.Poll(d.swc)
		for i := range d.swc[:k] {
			wc := &d.swc[i]
			if wc.Status != rdmaio.StatusSuccess {
				if !d.t.closed.Load() {
					d.t.setErr(d.t.errf("device %d: send: %w", d.slot, wc.Err()))
				}
			}
			if wc.ID >= d.retired && wc.ID < d.posted {
				d.retired = wc.ID + 1
			}
		}
		if k < len(d.swc) {
			return
		}
	}
}

// enqueue copies messages the Link to src completed into the ready queue
// (the Link's peer lock is held).
func (t *Transport) enqueue(src int, msgs [][]byte) {
	t.readyMu.Lock()
	for _, m := range msgs {
		b := t.pool.Get(len(m))
		copy(b, m)
		t.readyQ = append(t.readyQ, item{src: src, buf: b})
	}
	t.readyN.Store(int32(len(t.readyQ)))
	t.readyMu.Unlock()
}

// noteDeadline lowers the earliest retransmission deadline to at (if it is
// earlier), cuts a Wait that would sleep past it short and wakes the
// progress goroutine.
func (t *Transport) noteDeadline(at int64) {
	for {
		cur := t.nextTick.Load()
		if at >= cur {
			return
		}
		if t.nextTick.CompareAndSwap(cur, at) {
			break
		}
	}
	if at < t.waitEnd.Load() {
		t.wctx.Cancel()
	}
	if t.parked.Load() {
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// tickAll runs the retransmission timers of every Link that waits for an
// acknowledgement and recomputes the earliest deadline. Only one goroutine
// ticks at a time; another that finds it busy returns.
func (t *Transport) tickAll(now time.Time) {
	if !t.tickMu.TryLock() {
		return
	}
	defer t.tickMu.Unlock()
	if t.torn {
		return
	}
	t.nextTick.Store(never)
	for _, p := range t.peers {
		if p == nil || p.link == nil {
			continue
		}
		p.mu.Lock()
		if !p.link.Idle() || p.link.HasReady() {
			p.link.Tick(now)
			p.flush()
		}
		p.mu.Unlock()
	}
}

// tickDue runs the timers if the earliest deadline has passed.
func (t *Transport) tickDue(now time.Time) {
	if t.mono(now) >= t.nextTick.Load() {
		t.tickAll(now)
	}
}
