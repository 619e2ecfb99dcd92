package qtransport

import (
	"runtime"
	"sync"
	"time"

	"github.com/jiarun/jia/comm/internal/qpbind"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/rdmaio"
)

// Send sends hdr followed by data to rank dst: inline or through the
// peer's bounce ring, or into the peer's backlog when neither has room. It
// never waits for the peer. The bytes are copied before it returns.
func (t *Transport) Send(dst int, hdr []byte, data [][]byte) error {
	if uint(dst) >= uint(t.size) {
		return t.errf("send to rank %d of %d: %w", dst, t.size, transport.ErrRank)
	}
	n := qpbind.MsgLen(hdr, data)
	lim := t.maxMsg
	if dst != t.rank {
		lim = t.peers[dst].d.maxMsg
	}
	if n > lim {
		return t.errf("send of %d bytes to rank %d (max %d): %w", n, dst, lim, transport.ErrTooLong)
	}
	if t.closed.Load() {
		return t.errf("send to rank %d: %w", dst, transport.ErrClosed)
	}
	if dst == t.rank {
		t.selfMu.Lock()
		b := t.selfPool.Get(n)
		qpbind.Gather(b, hdr, data)
		t.selfQ = append(t.selfQ, selfItem{msg: b})
		t.selfN.Add(1)
		t.selfMu.Unlock()
		t.selfCount.Add(1)
		t.wctx.Cancel()
		return nil
	}
	p := t.peers[dst]
	p.mu.Lock()
	err := p.send(hdr, data, n)
	p.mu.Unlock()
	if t.heldN.Load() != 0 {
		t.flushHeld()
	}
	if p.d.backlogged.Load() != 0 {
		t.reap(p.d)
	}
	return err
}

// reap takes the completions waiting in d's queue, as the progress
// goroutine would after progressGrace, when a send finds messages of the
// device waiting in a backlog: a rank that streams sends without polling
// (a blocking eager Send returns without a poll) frees the room its peers'
// receipts made and posts its backlog from there, instead of leaving each
// message to wait for the progress goroutine. What the poll takes for the
// owner is handed out by its next Poll.
//
// Where the queue can (sendCQ), only the completions of sends are taken:
// a message that arrived stays where it lies, for a Take.
func (t *Transport) reap(d *device) {
	if !d.pollMu.TryLock() {
		return // the owner or the progress goroutine polls
	}
	if k := d.pollSends(); k > 0 {
		t.progress(d, d.wc[:k])
		t.reaps.Add(1)
	}
	d.unlockPoll()
}

var _ transport.Backlogger = (*Transport)(nil)

// Backlogged reports that messages to rank dst wait in its peer's backlog
// (transport.Backlogger).
func (t *Transport) Backlogged(dst int) bool {
	if uint(dst) >= uint(t.size) || dst == t.rank {
		return false
	}
	return t.peers[dst].waiting.Load()
}

var _ transport.ShortSender = (*Transport)(nil)

// SendShort is Send(dst, hdr[:hn], [][]byte{data}) without the gather
// list: comm's small messages come this way.
func (t *Transport) SendShort(dst int, hdr transport.ShortHeader, hn int, data []byte) error {
	return t.sendShort(dst, hdr, hn, data, false)
}

var _ transport.Batcher = (*Transport)(nil)

// SendShortHeld is SendShort, except that a message to a peer may stay in
// the peer's chain of work requests, its bytes copied, to be posted with
// later ones by one doorbell (transport.Batcher): at the latest at the
// next Flush, Poll, Wait, Send, SendShort or Close, when the chain is
// full, or by the progress goroutine once the owner has not polled for
// progressGrace. The first message after a Flush or Poll is posted at
// once (a lone Isend between waits is not delayed and costs no wake-up of
// the progress goroutine); the ones that follow it are held.
func (t *Transport) SendShortHeld(dst int, hdr transport.ShortHeader, hn int, data []byte) error {
	held := t.burst.Load()
	if !held {
		t.burst.Store(true)
	}
	return t.sendShort(dst, hdr, hn, data, held)
}

// endBurst ends a burst of SendShortHeld calls (a store only when one was
// under way).
func (t *Transport) endBurst() {
	if t.burst.Load() {
		t.burst.Store(false)
	}
}

// sendShort is SendShort, or SendShortHeld with held.
func (t *Transport) sendShort(dst int, hdr transport.ShortHeader, hn int, data []byte, held bool) error {
	if uint(hn) > transport.ShortHeaderLen {
		return t.errf("send to rank %d: header of %d bytes (max %d)", dst, hn, transport.ShortHeaderLen)
	}
	if uint(dst) >= uint(t.size) || dst == t.rank {
		var h [transport.ShortHeaderLen]byte
		hdr.Put(h[:])
		d := [1][]byte{data}
		return t.Send(dst, h[:hn], d[:])
	}
	n := hn + len(data)
	p := t.peers[dst]
	if n > p.d.maxMsg {
		return t.errf("send of %d bytes to rank %d (max %d): %w", n, dst, p.d.maxMsg, transport.ErrTooLong)
	}
	if t.closed.Load() {
		return t.errf("send to rank %d: %w", dst, transport.ErrClosed)
	}
	d := [1][]byte{data}
	p.mu.Lock()
	hdr.Put(p.hdr[:])
	var err error
	switch h := p.hdr[:hn]; {
	case held:
		err = p.sendHeld(h, d[:], n)
	case p.inlineNow(n):
		err = p.postInline(h, data)
	default:
		err = p.send(h, d[:], n)
	}
	// Completions lagging by half the send queue: nobody polls them often
	// enough (a rank that only sends, or whose waits find their messages
	// without polling); collect them now, after the message went out,
	// rather than ask for a completion at every send until someone does.
	lag := p.free() < p.reserve
	p.mu.Unlock()
	if !held && t.heldN.Load() != 0 {
		t.flushHeld()
	}
	if lag || p.d.backlogged.Load() != 0 {
		t.reap(p.d)
	}
	return err
}

// Flush posts every message SendShortHeld holds (transport.Batcher).
func (t *Transport) Flush() {
	t.endBurst()
	if t.heldN.Load() != 0 {
		t.flushHeld()
	}
}

// noteHeld adds a peer whose chain started holding messages to the held
// list and wakes its device's progress goroutine (p.mu held).
func (t *Transport) noteHeld(p *peer) {
	t.heldMu.Lock()
	t.held = append(t.held, p)
	t.heldN.Store(int32(len(t.held)))
	t.heldMu.Unlock()
	t.wakeHelper(p.d)
}

// flushHeld posts the chains of the peers in the held list. A failed post
// is recorded in the peer's error, which its next Send returns. The spare
// list becomes the held list and is no longer the spare one, so that a
// flush running meanwhile cannot hand it out again while this one (or
// noteHeld) uses it.
func (t *Transport) flushHeld() {
	t.heldMu.Lock()
	list := t.held
	t.held, t.heldSpare = t.heldSpare[:0], nil
	t.heldN.Store(0)
	t.heldMu.Unlock()
	for i, p := range list {
		p.mu.Lock()
		p.held = false
		p.post(false)
		p.mu.Unlock()
		list[i] = nil
	}
	t.heldMu.Lock()
	if cap(list) > cap(t.heldSpare) {
		t.heldSpare = list[:0]
	}
	t.heldMu.Unlock()
}

// deferComplete queues a completion for the next Poll.
func (t *Transport) deferComplete(id uint64, err error) {
	t.selfMu.Lock()
	t.selfQ = append(t.selfQ, selfItem{id: id, err: err, comp: true})
	t.selfN.Add(1)
	t.selfMu.Unlock()
	t.wctx.Cancel()
}

// Poll hands every message and completion that has arrived to h and
// returns how many it handed. It never blocks and does not allocate. A
// device whose queue another goroutine is waiting on (Wait) is skipped: the
// waiter keeps what it takes for the next Poll.
func (t *Transport) Poll(h transport.Handler) int { return t.poll(h, false) }

var _ transport.Reaper = (*Transport)(nil)

// Reap is Poll without the messages that arrived since the last Poll
// (transport.Reaper): it collects the completions of sends and hands out
// what earlier polls collected; new messages stay in the queue pairs'
// rings, for Take or the next Poll. Where a device's queue cannot collect
// send completions alone (rdmaio.SendCQ), Reap polls it as Poll does.
func (t *Transport) Reap(h transport.Handler) int { return t.poll(h, true) }

// pollSends takes the completions of d's queue, only those of sends where
// the queue can tell them apart, into d.wc (pollMu held).
func (d *device) pollSends() int {
	if d.sendCQ != nil {
		return d.sendCQ.PollSend(d.wc)
	}
	return d.cq.Poll(d.wc)
}

// poll is Poll, or Reap with sendsOnly.
func (t *Transport) poll(h transport.Handler, sendsOnly bool) int {
	if t.closed.Load() {
		return 0
	}
	if t.backlogged.Load() != 0 {
		t.polls.Add(1) // the progress goroutines watch it
	}
	t.Flush()
	n := 0
	if t.selfN.Load() > 0 {
		n += t.pollSelf(h)
	}
	for _, d := range t.devs {
		if !d.pollMu.TryLock() {
			continue
		}
		if sendsOnly && d.sendCQ != nil {
			if k := d.sendCQ.PollSend(d.wc); k > 0 {
				t.progress(d, d.wc[:k])
			}
			n += t.handOut(d, h)
		} else {
			n += t.pollLocked(d, h)
		}
		d.unlockPoll()
	}
	return n
}

var _ transport.Idler = (*Transport)(nil)

// Idle reports, without taking a lock, that Poll would hand out nothing
// and has nothing of its own to do now (transport.Idler): no message to
// self, no backlog, and on every device nothing owed and an idle
// completion queue. It reports false when a device's queue cannot tell.
func (t *Transport) Idle() bool {
	if t.closed.Load() {
		return true
	}
	if t.selfN.Load() > 0 || t.backlogged.Load() != 0 || t.heldN.Load() != 0 {
		return false
	}
	for _, d := range t.devs {
		if d.idleCQ == nil || d.owed.Load() || !d.idleCQ.Idle() {
			return false
		}
	}
	return true
}

// unlockPoll releases pollMu, first noting in owed whether the next Poll
// has items to hand out or buffers to repost (a store only when that
// changes).
func (d *device) unlockPoll() {
	owed := d.rn > 0 || len(d.repost) >= d.repostBatch
	if d.owed.Load() != owed {
		d.owed.Store(owed)
	}
	d.pollMu.Unlock()
}

func (t *Transport) pollSelf(h transport.Handler) int {
	t.selfMu.Lock()
	q := t.selfQ
	t.selfQ = t.selfSpare[:0]
	t.selfN.Store(0)
	t.selfMu.Unlock()
	for i := range q {
		if q[i].comp {
			h.Complete(q[i].id, q[i].err)
		} else {
			h.Deliver(t.rank, q[i].msg)
		}
	}
	t.selfMu.Lock()
	for i := range q {
		if q[i].msg != nil {
			t.selfPool.Put(q[i].msg)
		}
		q[i] = selfItem{}
	}
	t.selfSpare = q[:0]
	t.selfMu.Unlock()
	return len(q)
}

// pollLocked drains a device's completion queue and hands out what is
// ready (pollMu held).
func (t *Transport) pollLocked(d *device, h transport.Handler) int {
	d.dused = 0
	for round := 0; round < 4; round++ {
		var k int
		if d.directCQ != nil {
			k = d.directCQ.PollDirect(d.wc, d.dbuf[d.dused:], directID)
		} else {
			k = d.cq.Poll(d.wc)
		}
		if k == 0 {
			if round == 0 && d.rn == 0 && len(d.repost) >= d.repostBatch {
				// Nothing arrived: repost now, while the rank waits.
				d.flushReposts()
			}
			break
		}
		t.progress(d, d.wc[:k])
		if k < len(d.wc) {
			break
		}
	}
	return t.handOut(d, h)
}

// readyItem is a message (receive buffer idx, or with direct at offset
// idx of the direct buffer; n bytes from src) or a finished read or
// write, waiting for Poll to hand it out.
type readyItem struct {
	comp   bool
	direct bool
	src    int32
	idx    uint32
	n      uint32
	id     uint64
	err    error
}

func (d *device) pushReady(it readyItem) {
	if d.rn == len(d.ready) {
		// Cannot happen with the sizes of setup (buffers are not reposted
		// before they are handed out), but never lose an item.
		grown := make([]readyItem, 2*len(d.ready)+16)
		for i := 0; i < d.rn; i++ {
			grown[i] = d.ready[(d.rh+i)%len(d.ready)]
		}
		d.ready, d.rh = grown, 0
	}
	d.ready[(d.rh+d.rn)%len(d.ready)] = it
	d.rn++
}

// progress processes completions in order (pollMu held): a message is
// queued for Poll; a send completion retires requests, frees room and
// flushes the peer's backlog, and the reads and writes it finishes are
// queued for Poll (after their registrations are removed). A backlog that
// starts with a READ or WRITE is flushed after the last completion, as one
// chain: flushed after each completion, a backlog of READs went out one
// READ per post, each then a system call of its own on shared memory,
// where a chain is one (a batched process_vm_readv). A backlog of messages
// is flushed at once, so that the receiver copies one out while the next
// is copied in.
func (t *Transport) progress(d *device, wcs []rdmaio.WorkCompletion) {
	for i := range wcs {
		wc := &wcs[i]
		if wc.ID&recvFlag != 0 {
			t.received(d, wc)
			continue
		}
		pi := wc.ID >> seqBits
		if pi >= uint64(len(t.peers)) || t.peers[pi] == nil || t.peers[pi].d != d {
			t.setErr(t.errf("completion %#x (%v) for no known peer", wc.ID, wc.Status))
			continue
		}
		t.sendDone(d, t.peers[pi], wc)
	}
	if len(d.refill) > 0 {
		t.refill(d)
	}
}

func (t *Transport) received(d *device, wc *rdmaio.WorkCompletion) {
	idx := wc.ID &^ recvFlag
	direct := wc.ID == directID
	if direct {
		// Its bytes follow those of the direct messages of this Poll
		// before it.
		idx = uint64(d.dused)
		d.dused += int(wc.ByteLen)
	} else if idx >= uint64(len(d.rwrs)) {
		t.setErr(t.errf("receive completion %#x for no receive buffer", wc.ID))
		return
	}
	src, known := d.lastSrc, d.lastSrc >= 0 && d.lastQPN == wc.QPN
	if !known {
		// Messages come in runs from one peer: a map lookup only when
		// the queue pair changes.
		if src, known = d.qpPeer[wc.QPN]; known {
			d.lastQPN, d.lastSrc = wc.QPN, src
		}
	}
	switch {
	case !known:
		t.setErr(t.errf("receive completion on unknown queue pair %d (%v)", wc.QPN, wc.Status))
	case wc.Status != rdmaio.StatusSuccess:
		p := t.peers[src]
		p.mu.Lock()
		if p.err == nil {
			p.err = p.wrap("receive from", wc.Err())
		}
		p.mu.Unlock()
	case direct:
		d.pushReady(readyItem{direct: true, src: src, idx: uint32(idx), n: wc.ByteLen})
		return
	case int(wc.ByteLen) > d.bufSize:
		t.setErr(t.errf("receive of %d bytes from rank %d into a buffer of %d", wc.ByteLen, src, d.bufSize))
	default:
		d.pushReady(readyItem{src: src, idx: uint32(idx), n: wc.ByteLen})
		return
	}
	if !direct {
		d.repostBuf(uint32(idx))
	}
}

// sendDone handles a completion of a peer's send queue (pollMu held).
func (t *Transport) sendDone(d *device, p *peer, wc *rdmaio.WorkCompletion) {
	p.mu.Lock()
	p.complete(wc)
	if p.err != nil {
		p.failBacklog()
	} else if p.blLen() > 0 {
		if p.bl[p.blHead].kind == recSend {
			// A message posted at once is copied out by the receiver
			// while the next one is copied in.
			p.flush()
		} else if !p.refill {
			p.refill = true
			d.refill = append(d.refill, p)
		}
	}
	p.mu.Unlock()
	if len(d.done) == 0 {
		return
	}
	for i := range d.done {
		op := &d.done[i]
		for _, r := range d.doneRegs[op.r0:op.r1] {
			if err := t.release(r); err != nil && op.err == nil {
				op.err = err
			}
		}
		d.pushReady(readyItem{comp: true, id: op.id, err: op.err})
		op.err = nil
	}
	clear(d.doneRegs)
	d.done, d.doneRegs = d.done[:0], d.doneRegs[:0]
}

// refill flushes the backlogs of the peers progress listed (pollMu held).
func (t *Transport) refill(d *device) {
	for i, p := range d.refill {
		p.mu.Lock()
		p.refill = false
		if p.err != nil {
			p.failBacklog()
		} else if p.blLen() > 0 {
			p.flush()
		}
		p.mu.Unlock()
		d.refill[i] = nil
	}
	d.refill = d.refill[:0]
}

// handOut hands the ready items to h and reposts the receive buffers
// (pollMu held).
func (t *Transport) handOut(d *device, h transport.Handler) int {
	n := 0
	for d.rn > 0 {
		it := d.ready[d.rh]
		if it.err != nil {
			d.ready[d.rh].err = nil // keep no error alive
		}
		d.rh++
		if d.rh == len(d.ready) {
			d.rh = 0
		}
		d.rn--
		n++
		if it.comp {
			h.Complete(it.id, it.err)
			continue
		}
		d.delivered++
		if it.direct {
			h.Deliver(int(it.src), d.dbuf[it.idx:it.idx+it.n])
			continue
		}
		off := int(it.idx) * d.bufSize
		h.Deliver(int(it.src), d.slab[off:off+int(it.n)])
		d.repostBuf(it.idx)
	}
	return n
}

// repostBuf queues a receive buffer for the SRQ; they are posted in
// chains, by a poll that finds nothing to do (off the path of a message
// to its receiver) or once repostMax wait (pollMu held).
func (d *device) repostBuf(idx uint32) {
	d.repost = append(d.repost, d.rwrs[idx])
	if len(d.repost) >= d.repostMax {
		d.flushReposts()
	}
}

// flushReposts gives consumed receive buffers back to the SRQ, as one
// chain (pollMu held).
func (d *device) flushReposts() {
	for len(d.repost) > 0 {
		n, err := d.srq.PostRecv(d.repost)
		if err != nil {
			d.t.setErr(d.t.errf("device %d: repost %d receive buffers: %w", d.slot, len(d.repost), err))
			d.repost = d.repost[:0]
			return
		}
		k := copy(d.repost, d.repost[n:])
		d.repost = d.repost[:k]
	}
}

// progressGrace is how long the owner of a transport may go without
// calling Poll while a backlog waits before the progress goroutine polls
// in its stead.
const progressGrace = 100 * time.Microsecond

// noteBacklog counts a peer whose backlog became non-empty and wakes the
// device's progress goroutine (starting it the first time).
func (d *device) noteBacklog() {
	d.backlogged.Add(1)
	t := d.t
	t.backlogged.Add(1)
	t.wakeHelper(d)
}

// wakeHelper wakes the device's progress goroutine, starting it the first
// time.
func (t *Transport) wakeHelper(d *device) {
	if !d.helper.Load() {
		t.helperMu.Lock()
		if !t.closed.Load() && !d.helper.Load() {
			d.helper.Store(true)
			t.helpers.Add(1)
			go t.progressLoop(d)
		}
		t.helperMu.Unlock()
	}
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// progressLoop drains the backlogs of a device when the transport's owner
// stops polling: a rank that sent its last messages and went on to compute
// (or finished) must not keep its peers waiting for them. While the owner
// polls it only watches.
func (t *Transport) progressLoop(d *device) {
	defer t.helpers.Done()
	for {
		select {
		case <-t.stop:
			return
		case <-d.kick:
		}
		for d.backlogged.Load() > 0 || t.heldN.Load() != 0 {
			n0 := t.polls.Load()
			time.Sleep(progressGrace)
			select {
			case <-t.stop:
				return
			default:
			}
			if t.heldN.Load() != 0 {
				// Held messages wait for no completion: post them.
				t.flushHeld()
			}
			if t.polls.Load() != n0 || !d.pollMu.TryLock() {
				continue
			}
			if k := d.cq.Poll(d.wc); k > 0 {
				t.progress(d, d.wc[:k])
			}
			d.unlockPoll()
		}
	}
}

// Wait blocks until Poll may have something to hand out or d has passed.
// It sleeps in the provider at once where the CQ can (rdmaio.SleepCQ):
// the caller has polled and yielded as long as it meant to, and a CQ.Wait
// would spin and yield for as long again before it freed the processor.
// Otherwise it waits with CQ.Wait. With several devices it waits on all
// at once. What it takes from a queue is kept, in
// order, for the next Poll. Another goroutine in Poll makes it return at
// once (spuriously).
func (t *Transport) Wait(d time.Duration) {
	if d <= 0 {
		return
	}
	if t.closed.Load() {
		time.Sleep(d)
		return
	}
	t.Flush()
	if t.selfN.Load() > 0 {
		return
	}
	t.waitMu.Lock()
	defer t.waitMu.Unlock()
	if t.closed.Load() {
		return
	}
	locked := 0
	for _, dv := range t.devs {
		if !dv.pollMu.TryLock() {
			break
		}
		locked++
	}
	defer func() {
		for _, dv := range t.devs[:locked] {
			dv.unlockPoll()
		}
	}()
	if locked < len(t.devs) {
		runtime.Gosched()
		return
	}
	for _, dv := range t.devs {
		if dv.rn > 0 {
			return
		}
	}
	for _, dv := range t.devs {
		dv.flushReposts() // every buffer ready for what comes while asleep
	}
	t.wctx.Arm(d)
	defer t.wctx.Disarm()
	if t.selfN.Load() > 0 {
		return
	}
	t.waits.Add(1)
	switch len(t.devs) {
	case 0:
		t.wctx.Sleep()
	case 1:
		t.waitOne(t.devs[0])
	default:
		var wg sync.WaitGroup
		for _, dv := range t.devs[1:] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.waitOne(dv)
			}()
		}
		t.waitOne(t.devs[0])
		wg.Wait()
	}
}

// waitOne waits on one device's queue and progresses what it takes; a
// completion ends the waits on the other devices.
func (t *Transport) waitOne(dv *device) {
	var n int
	var err error
	if dv.sleepCQ != nil {
		n, err = dv.sleepCQ.Sleep(&t.wctx, dv.wc)
	} else {
		n, err = dv.cq.Wait(&t.wctx, dv.wc)
	}
	if n > 0 {
		t.progress(dv, dv.wc[:n])
		if len(t.devs) > 1 {
			t.wctx.Cancel() // end the waits on the other devices
		}
	}
	if t.wctx.Failed(err) && !t.closed.Load() {
		t.setErr(t.errf("device %d: wait: %w", dv.slot, err))
	}
}

// discard is the handler of Close: it drops what arrives.
type discard struct{}

func (discard) Deliver(int, []byte)    {}
func (discard) Complete(uint64, error) {}

// linger polls until no peer has queued or unretired messages, or the
// deadline passes (poll locks held). It polls every device at least once:
// a message taken where it lay (Take) and answered by nothing is
// acknowledged at the next poll, and its sender may linger for that.
func (t *Transport) linger(deadline time.Time) {
	for i := 0; ; i++ {
		if i == 0 {
			for _, d := range t.devs {
				t.pollLocked(d, discard{})
			}
		}
		busy := false
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			p.mu.Lock()
			if p.lingering() {
				busy = true
			}
			p.mu.Unlock()
		}
		if !busy || time.Now().After(deadline) {
			return
		}
		for _, d := range t.devs {
			t.pollLocked(d, discard{})
			d.flushReposts()
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// drainFlushed collects the completions of queue pairs moved to the error
// state, so that every request retires and its memory may be freed (poll
// locks held).
func (t *Transport) drainFlushed(deadline time.Time) {
	for i := 0; ; i++ {
		busy := false
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			p.mu.Lock()
			if p.qp != nil && p.posted != p.retired {
				busy = true
			}
			p.mu.Unlock()
		}
		if !busy || time.Now().After(deadline) {
			return
		}
		for _, d := range t.devs {
			if d.cq != nil {
				t.pollLocked(d, discard{})
			}
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}
