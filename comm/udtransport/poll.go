package udtransport

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/jiarun/jia/comm/internal/qpbind"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/rdmaio"
)

var _ transport.Backlogger = (*Transport)(nil)

// Backlogged reports that packets to rank dst wait behind the Link's full
// window (transport.Backlogger).
func (t *Transport) Backlogged(dst int) bool {
	if uint(dst) >= uint(t.size) || dst == t.rank {
		return false
	}
	p := t.peers[dst]
	return p != nil && p.waiting.Load()
}

// Send hands hdr followed by data to the Link to rank dst, which copies
// them into packets, and transmits what the window allows. It never waits
// for the peer.
func (t *Transport) Send(dst int, hdr []byte, data [][]byte) error {
	if uint(dst) >= uint(t.size) {
		return t.errf("send to rank %d of %d: %w", dst, t.size, transport.ErrRank)
	}
	n := qpbind.MsgLen(hdr, data)
	if n > t.opt.MaxMsg {
		return t.errf("send of %d bytes to rank %d (max %d): %w", n, dst, t.opt.MaxMsg, transport.ErrTooLong)
	}
	if t.opt.MaxSGE > 0 && len(data) > t.opt.MaxSGE {
		return t.errf("send to rank %d: gather list of %d pieces (max %d)", dst, len(data), t.opt.MaxSGE)
	}
	if t.closed.Load() {
		return t.errf("send to rank %d: %w", dst, transport.ErrClosed)
	}
	if dst == t.rank {
		t.selfMu.Lock()
		b := t.selfPool.Get(n)
		qpbind.Gather(b, hdr, data)
		t.selfQ = append(t.selfQ, item{src: dst, buf: b})
		t.selfN.Add(1)
		t.selfMu.Unlock()
		t.stats.self.Add(1)
		t.wctx.Cancel()
		return nil
	}
	if err := t.stickyErr(); err != nil {
		return fmt.Errorf("udtransport: rank %d: send to rank %d: %w", t.rank, dst, err)
	}
	p := t.peers[dst]
	p.mu.Lock()
	p.parts = append(p.parts[:0], hdr)
	p.parts = append(p.parts, data...)
	p.link.Send(time.Now(), p.parts...)
	clear(p.parts)
	p.flush()
	p.mu.Unlock()
	return nil
}

// stickyErr returns the transport's recorded error, cheaply when there is
// none.
func (t *Transport) stickyErr() error {
	if !t.hasErr.Load() {
		return nil
	}
	return t.Err()
}

// Poll hands every message that has arrived to h and returns how many it
// handed. It takes the datagrams from the receive queues (unless a Wait
// or the progress goroutine is doing so: what they take is kept for the
// next Poll), runs the retransmission timers when one is due, and never
// blocks. It allocates nothing in the steady state.
func (t *Transport) Poll(h transport.Handler) int {
	if t.closed.Load() {
		return 0
	}
	t.activity.Add(1)
	n := 0
	if t.selfN.Load() > 0 {
		n += t.pollSelf(h)
	}
	if len(t.devs) > 0 {
		now := time.Now()
		if t.pollMu.TryLock() {
			t.recvAll(now)
			t.pollMu.Unlock()
		}
		t.tickDue(now)
	}
	if t.readyN.Load() > 0 {
		n += t.handOut(h)
	}
	return n
}

func (t *Transport) pollSelf(h transport.Handler) int {
	t.selfMu.Lock()
	q := t.selfQ
	t.selfQ = t.selfSpare[:0]
	t.selfN.Store(0)
	t.selfMu.Unlock()
	for i := range q {
		h.Deliver(t.rank, q[i].buf)
	}
	t.selfMu.Lock()
	for i := range q {
		t.selfPool.Put(q[i].buf)
		q[i] = item{}
	}
	t.selfSpare = q[:0]
	t.selfMu.Unlock()
	return len(q)
}

// handOut hands the messages of the ready queue to h.
func (t *Transport) handOut(h transport.Handler) int {
	t.readyMu.Lock()
	q := t.readyQ
	t.readyQ = t.readySpare[:0]
	t.readySpare = nil
	t.readyN.Store(0)
	t.readyMu.Unlock()
	for i := range q {
		h.Deliver(q[i].src, q[i].buf)
	}
	t.stats.delivered.Add(uint64(len(q)))
	t.readyMu.Lock()
	for i := range q {
		t.pool.Put(q[i].buf)
		q[i] = item{}
	}
	if t.readySpare == nil {
		t.readySpare = q[:0]
	}
	t.readyMu.Unlock()
	return len(q)
}

// recvAll drains every device's receive queue through the Links and sends
// what they answer (pollMu held).
func (t *Transport) recvAll(now time.Time) {
	if t.torn {
		return
	}
	for _, d := range t.devs {
		for round := 0; round < 8; round++ {
			k := d.rcq.Poll(d.rwc)
			if k == 0 {
				break
			}
			t.received(d, d.rwc[:k], now)
			if k < len(d.rwc) {
				break
			}
		}
	}
	t.flushTouched(now)
}

// received runs receive completions through the Links (pollMu held). The
// buffers are reposted at once: a Link copies what it keeps.
func (t *Transport) received(d *device, wcs []rdmaio.WorkCompletion, now time.Time) {
	for i := range wcs {
		wc := &wcs[i]
		if wc.ID >= uint64(len(d.rwrs)) {
			t.setErr(t.errf("device %d: receive completion %#x for no receive buffer", d.slot, wc.ID))
			continue
		}
		if wc.Status != rdmaio.StatusSuccess {
			// The queue pair is in the error state: reposting would only
			// bring the buffer back flushed.
			if !t.closed.Load() {
				t.setErr(t.errf("device %d: receive: %w", d.slot, wc.Err()))
			}
			continue
		}
		if p := t.datagramPeer(d, wc); p != nil {
			off := int(wc.ID) * d.bufSize
			b := d.rslab[off+udHeader : off+int(wc.ByteLen)]
			p.mu.Lock()
			err := p.link.Receive(now, b)
			p.mu.Unlock()
			if err != nil {
				t.setErr(t.errf("device %d: %w", d.slot, err))
			}
			if p.mark != t.epoch {
				p.mark = t.epoch
				t.touched = append(t.touched, p)
			}
			t.lastRecv.Store(t.mono(now))
		} else {
			t.stats.dropped.Add(1)
		}
		d.repost = append(d.repost, d.rwrs[wc.ID])
		if len(d.repost) >= d.repostBatch {
			d.flushReposts()
		}
	}
}

// datagramPeer checks a received datagram and returns the peer that sent
// it, or nil when it is malformed or comes from no peer this device
// reaches (pollMu held).
func (t *Transport) datagramPeer(d *device, wc *rdmaio.WorkCompletion) *peer {
	n := int(wc.ByteLen)
	if n < udHeader || n > d.bufSize {
		return nil
	}
	off := int(wc.ID) * d.bufSize
	h := d.rslab[off : off+udHeader]
	src := binary.LittleEndian.Uint32(h[0:])
	if src >= uint32(t.size) {
		return nil
	}
	p := t.peers[src]
	if p == nil || p.d != d || p.link == nil || binary.LittleEndian.Uint32(h[4:]) != p.rcookie || wc.SrcQPN != p.rqpn {
		return nil
	}
	return p
}

// flushTouched lets the Links that received send their acknowledgements
// and the packets the acknowledgements let into the window (pollMu held).
func (t *Transport) flushTouched(now time.Time) {
	for _, p := range t.touched {
		p.mu.Lock()
		p.link.Tick(now)
		p.flush()
		p.mu.Unlock()
	}
	clear(t.touched)
	t.touched = t.touched[:0]
	t.epoch++
	for _, d := range t.devs {
		d.flushReposts()
	}
}

// flushReposts gives consumed receive buffers back to the queue pair, as
// one chain (pollMu held).
func (d *device) flushReposts() {
	for len(d.repost) > 0 {
		n, err := d.qp.PostRecv(d.repost)
		if err != nil {
			if !d.t.closed.Load() {
				d.t.setErr(d.t.errf("device %d: repost %d receive buffers: %w", d.slot, len(d.repost), err))
			}
			d.repost = d.repost[:0]
			return
		}
		k := copy(d.repost, d.repost[n:])
		d.repost = d.repost[:k]
	}
}

// Wait blocks until Poll may have something to hand out, d has passed or
// the earliest retransmission timeout is due, whichever comes first. It
// waits in the provider (CQ.Wait: spin, yield, sleep); with several devices
// it waits on all at once. What it takes from the receive queues is run
// through the Links and kept for the next Poll. Spurious returns are
// allowed.
func (t *Transport) Wait(d time.Duration) {
	if d <= 0 {
		return
	}
	if t.closed.Load() {
		time.Sleep(min(d, time.Millisecond))
		return
	}
	t.activity.Add(1)
	if t.selfN.Load() > 0 || t.readyN.Load() > 0 {
		return
	}
	now := time.Now()
	if due := t.nextTick.Load(); due != never {
		left := time.Duration(due - t.mono(now))
		if left <= 0 {
			t.tickAll(now)
			return
		}
		d = min(d, left)
	}
	t.waitMu.Lock()
	defer t.waitMu.Unlock()
	if !t.pollMu.TryLock() {
		runtime.Gosched()
		return
	}
	defer t.pollMu.Unlock()
	end := t.mono(now) + int64(d)
	t.waitEnd.Store(end)
	t.wctx.Arm(d)
	if t.closed.Load() || t.selfN.Load() > 0 || t.readyN.Load() > 0 || t.nextTick.Load() < end {
		t.disarm()
		return
	}
	var one [1]int
	var got []int // completions taken from each device's receive queue
	switch len(t.devs) {
	case 0:
		t.wctx.Sleep()
	case 1:
		dv := t.devs[0]
		n, err := dv.rcq.Wait(&t.wctx, dv.rwc)
		t.waitErr(dv, err)
		one[0] = n
		got = one[:]
	default:
		got = t.waitAll()
	}
	// The wait is over before what it took runs through the Links: an
	// acknowledgement or retransmission they send may make a retransmission
	// deadline earlier (noteDeadline), which must not cancel the context of
	// a wait that already ended (a cancelled context needs a new channel
	// for the next wait).
	t.disarm()
	now = time.Now()
	for i, n := range got {
		if n > 0 {
			dv := t.devs[i]
			t.received(dv, dv.rwc[:n], now)
		}
	}
	t.recvAll(now)
	t.tickDue(now)
}

// waitAll waits on every device at once and returns how many completions
// each took; the first to take any ends the waits on the others. It
// allocates: several devices only.
func (t *Transport) waitAll() []int {
	got := make([]int, len(t.devs))
	var wg sync.WaitGroup
	for i, dv := range t.devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := dv.rcq.Wait(&t.wctx, dv.rwc)
			got[i] = n
			if n > 0 {
				t.wctx.Cancel() // end the waits on the other devices
			}
			t.waitErr(dv, err)
		}()
	}
	wg.Wait()
	return got
}

// disarm ends the wait of Wait's context: a deadline noted from now on no
// longer cancels it.
func (t *Transport) disarm() {
	t.wctx.Disarm()
	t.waitEnd.Store(never)
}

// waitErr records the error of a wait on dv's receive queue, unless the
// wait ended at its deadline (the CQ reports that, the context's channel
// stays open for the next wait) or was cancelled, or the transport closed.
func (t *Transport) waitErr(dv *device, err error) {
	if t.wctx.Failed(err) && !t.closed.Load() {
		t.setErr(t.errf("device %d: wait: %w", dv.slot, err))
	}
}

// progressLoop polls and runs the timers in the owner's stead while Links
// wait for acknowledgements and the owner neither polls nor waits: a rank
// that sent its last messages and went on computing must not keep its
// peers waiting for retransmissions or acknowledgements.
func (t *Transport) progressLoop() {
	defer t.helper.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	grace := max(t.opt.RTO/2, 100*time.Microsecond)
	for {
		due := t.nextTick.Load()
		if due == never {
			t.parked.Store(true)
			if t.nextTick.Load() == never {
				select {
				case <-t.stop:
					return
				case <-t.kick:
				}
			}
			t.parked.Store(false)
			continue
		}
		a0 := t.activity.Load()
		timer.Reset(max(time.Duration(due-t.mono(time.Now())), grace))
		select {
		case <-t.stop:
			timer.Stop()
			return
		case <-timer.C:
		}
		if t.activity.Load() != a0 || !t.pollMu.TryLock() {
			continue // the owner is active: it runs the timers itself
		}
		now := time.Now()
		t.recvAll(now)
		t.pollMu.Unlock()
		t.tickDue(now)
	}
}
