package shm

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jiarun/jia/internal/osyield"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// cq is a completion queue. It stores nothing itself: Poll runs the progress
// of the QPs attached to it (acknowledgements and ordering of their send
// queues, delivery from their inbound rings) and writes their completions,
// in order, straight into the caller's slice. Peers wake a sleeping Wait
// through the CQ's doorbell word in the main segment.
type cq struct {
	dev   *Device
	idx   int
	depth int
	db    []byte

	// The QP lists are copied on write so that Poll takes no lock of its
	// own: each QP's progress runs under that QP's locks.
	listMu  sync.Mutex
	sendQPs atomic.Pointer[[]*qp]
	recvQPs atomic.Pointer[[]*qp]
	// rot rotates the first receiving QP a Poll checks, so that none of
	// several starves. It is advanced without a locked instruction: two
	// Polls at once may lose a step, which does no harm.
	rot atomic.Uint64
	// polls counts the Polls of a CQ with at most one receiving QP (for
	// every64), advanced as rot is. Idle leaves it alone: with rot shared,
	// a waiter whose Idle reported a busy send queue at a multiple of 64
	// would Poll one step later, every time.
	polls atomic.Uint64

	shut    atomic.Bool
	blocked atomic.Int32 // Waits asleep on the doorbell
}

// CreateCQ creates a completion queue. Its depth is advisory: completions
// are produced by Poll straight into the caller's slice, so a CQ never
// overflows.
func (d *Device) CreateCQ(depth int) (rdmaio.CQ, error) {
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("create cq: %w", err)
	}
	defer d.life.End()
	if depth <= 0 || depth > maxQPWR*maxQPs {
		return nil, d.errf("create cq: %w: depth %d", rdmaio.ErrInvalidArgument, depth)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, c := range d.cqs {
		if c == nil {
			o := d.lay.cqdb(i)
			c = &cq{dev: d, idx: i, depth: depth, db: d.main.mem[o : o+cqdbBytes]}
			empty := []*qp{}
			c.sendQPs.Store(&empty)
			c.recvQPs.Store(&empty)
			store32(c.db, dbWaiters, 0)
			d.cqs[i] = c
			return c, nil
		}
	}
	return nil, d.errf("create cq: %w: all %d CQs in use (option max_cq)", rdmaio.ErrInvalidArgument, d.lay.maxCQ)
}

func (c *cq) attach(q *qp, send, recv bool) {
	c.listMu.Lock()
	defer c.listMu.Unlock()
	add := func(l *atomic.Pointer[[]*qp]) {
		old := *l.Load()
		n := append(append(make([]*qp, 0, len(old)+1), old...), q)
		l.Store(&n)
	}
	if send {
		add(&c.sendQPs)
	}
	if recv {
		add(&c.recvQPs)
	}
}

func (c *cq) detach(q *qp) {
	c.listMu.Lock()
	defer c.listMu.Unlock()
	for _, l := range []*atomic.Pointer[[]*qp]{&c.sendQPs, &c.recvQPs} {
		old := *l.Load()
		n := make([]*qp, 0, len(old))
		for _, x := range old {
			if x != q {
				n = append(n, x)
			}
		}
		l.Store(&n)
	}
}

func (c *cq) users() int {
	c.listMu.Lock()
	defer c.listMu.Unlock()
	return len(*c.sendQPs.Load()) + len(*c.recvQPs.Load())
}

// Poll runs the progress of the CQ's QPs and returns their completions. A
// send queue whose outstanding work is all unsignaled and successful so far
// cannot produce a completion; it is progressed only on about every 64th
// poll, which is enough to notice a peer that stopped consuming (RNR, exit)
// in time.
//
// Poll checks each receiving QP for news without its lock (recvIdle) and
// takes the lock only when there is some: an idle poll costs no locked
// instruction, a message that lock and one CAS on the ring entry (none for
// entries never withdrawn, see efNoAbort). With several receiving QPs, it
// starts at a rotating one so that none starves. The check reads the QP's
// inbound ring outside its locks: the
// main segment is never unmapped while the device's QPs can be polled
// (Device.Close blanks it instead, see segment.blank), so no Poll needs
// to be counted.
func (c *cq) Poll(wc []rdmaio.WorkCompletion) int { return c.poll(wc, nil, false) }

var _ rdmaio.DirectCQ = (*cq)(nil)

// PollDirect is Poll that copies the SENDs carried inline in the ring of
// a QP attached to an SRQ into buf instead of into a receive request
// (rdmaio.DirectCQ).
func (c *cq) PollDirect(wc []rdmaio.WorkCompletion, buf []byte, id uint64) int {
	dr := direct{buf: buf, id: id}
	return c.poll(wc, &dr, false)
}

// direct is where PollDirect copies messages: buf[n:] is free.
type direct struct {
	buf []byte
	n   int
	id  uint64
}

var _ rdmaio.SendCQ = (*cq)(nil)

// PollSend is Poll without the receiving QPs (rdmaio.SendCQ): their rings
// are not even looked at.
func (c *cq) PollSend(wc []rdmaio.WorkCompletion) int { return c.poll(wc, nil, true) }

// poll is Poll, or PollDirect with a non-nil dr, or PollSend (sendOnly).
func (c *cq) poll(wc []rdmaio.WorkCompletion, dr *direct, sendOnly bool) int {
	if len(wc) == 0 || c.shut.Load() {
		return 0
	}
	rq := *c.recvQPs.Load()
	var rot uint32
	if len(rq) > 1 {
		r := c.rot.Load()
		storeHint(&c.rot, r+1)
		rot = uint32(r)
	}
	n := 0
	for _, q := range *c.sendQPs.Load() {
		if q.sendHot.Load() || q.sendBusy.Load() && c.every64(len(rq) > 1, rot) {
			n += q.pollSend(wc[n:])
			if n == len(wc) {
				break
			}
		}
	}
	switch k := uint32(len(rq)); {
	case n == len(wc) || k == 0 || sendOnly:
	case k == 1:
		n += rq[0].pollRecv(wc[n:], dr)
	default:
		start := rot % k
		for i := uint32(0); i < k && n < len(wc); i++ {
			j := start + i
			if j >= k {
				j -= k
			}
			n += rq[j].pollRecv(wc[n:], dr)
		}
	}
	if c.dev.stalled.Load() > 0 {
		c.dev.kick()
	}
	return n
}

// Idle reports, without locks, that Poll would do nothing now: no send
// queue has work that can complete (one with only unsignaled work outstanding
// is reported busy about once in 64 calls, as Poll progresses it), no
// receiving QP has news, and no QP is stalled (rdmaio.IdleCQ).
func (c *cq) Idle() bool {
	if c.shut.Load() {
		return true
	}
	for _, q := range *c.sendQPs.Load() {
		if q.sendHot.Load() {
			return false
		}
		if q.sendBusy.Load() {
			// Counted like Poll's rotation: a lost step does no harm.
			r := c.rot.Load()
			storeHint(&c.rot, r+1)
			if r&63 == 0 {
				return false
			}
		}
	}
	for _, q := range *c.recvQPs.Load() {
		if !q.recvIdle() {
			return false
		}
	}
	return c.dev.stalled.Load() == 0
}

var _ rdmaio.IdleCQ = (*cq)(nil)

// every64 reports true for about one Poll in 64: by the rotation counter
// when this Poll advanced it, else by the count of Polls, advanced now (a
// plain store, cheaper than a random number; a lost step does no harm).
func (c *cq) every64(counted bool, rot uint32) bool {
	if !counted {
		r := c.polls.Load()
		storeHint(&c.polls, r+1)
		rot = uint32(r)
	}
	return rot&63 == 0
}

// Wait polls until a completion arrives: it spins, then yields, then sleeps
// on the doorbell (see provider.WaitPolicy).
func (c *cq) Wait(ctx context.Context, wc []rdmaio.WorkCompletion) (int, error) {
	if len(wc) == 0 {
		return 0, c.dev.errf("cq wait: %w: empty completion slice", rdmaio.ErrInvalidArgument)
	}
	return provider.WaitCQ(ctx, c, c.dev.opt.policy, wc)
}

// Sleep is Wait without spinning and yielding first (rdmaio.SleepCQ). Its
// sleeps keep the bound of Wait's: the retry timers of a SEND waiting for
// a receive run in the sender's polls.
func (c *cq) Sleep(ctx context.Context, wc []rdmaio.WorkCompletion) (int, error) {
	if len(wc) == 0 {
		return 0, c.dev.errf("cq sleep: %w: empty completion slice", rdmaio.ErrInvalidArgument)
	}
	return provider.SleepCQ(ctx, c, c.dev.opt.policy.Sleep, wc)
}

var _ rdmaio.SleepCQ = (*cq)(nil)

// WaitClosed implements provider.WaitableCQ.
func (c *cq) WaitClosed() error {
	if c.shut.Load() {
		return c.dev.errf("cq wait: %w", rdmaio.ErrClosed)
	}
	return nil
}

// WaitYield implements provider.WaitableCQ: the thread yields too.
func (c *cq) WaitYield() { osyield.Thread() }

// WaitSleep implements provider.WaitableCQ.
func (c *cq) WaitSleep(ctx context.Context, wc []rdmaio.WorkCompletion, bound time.Duration) (int, error) {
	n, ok := c.sleep(ctx, wc, bound)
	if !ok {
		return 0, c.dev.errf("cq wait: %w", rdmaio.ErrClosed)
	}
	return n, nil
}

// sleep announces a sleeper on the doorbell, runs its half of the
// asymmetric fence (sleepFence), polls once more and sleeps on
// the futex until a peer rings, bound passes or ctx's deadline comes. ok
// is false when the CQ was shut down.
func (c *cq) sleep(ctx context.Context, wc []rdmaio.WorkCompletion, bound time.Duration) (n int, ok bool) {
	c.blocked.Add(1)
	defer c.blocked.Add(-1)
	if c.shut.Load() {
		return 0, false
	}
	waiters := p32(c.db, dbWaiters)
	seq := p32(c.db, dbSeq)
	atomic.AddUint32(waiters, 1)
	s := atomic.LoadUint32(seq)
	d := sleepFence(bound)
	if n = c.Poll(wc); n == 0 && !c.shut.Load() {
		if dl, has := ctx.Deadline(); has {
			if r := time.Until(dl); r < d {
				d = max(r, time.Microsecond)
			}
		}
		futexWait(seq, s, d)
	}
	atomic.AddUint32(waiters, ^uint32(0))
	return n, true
}

// wake rings the CQ's own doorbell (a local event: a completion made by a
// post, an error, a shutdown).
func (c *cq) wake() { ringDoorbell(c.db) }

// shutdown closes the CQ for Device.Close: no more polls, sleepers woken
// and waited for, since they use the doorbell words. (A Poll that started
// before still runs: it reads the QPs' inbound rings, which stay mapped
// (blanked), and does everything else under the locks of QPs, which
// Device.Close takes and marks closed.) It reports whether every sleeper
// left in time.
func (c *cq) shutdown() bool {
	c.shut.Store(true)
	deadline := time.Now().Add(closeTimeout)
	for c.blocked.Load() != 0 {
		if time.Now().After(deadline) {
			return false
		}
		atomic.AddUint32(p32(c.db, dbSeq), 1)
		futexWake(p32(c.db, dbSeq))
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

func (c *cq) Close() error {
	d := c.dev
	if err := d.life.Begin(); err != nil {
		return d.errf("close cq: %w", err)
	}
	defer d.life.End()
	if c.shut.Load() {
		return d.errf("close cq: %w", rdmaio.ErrClosed)
	}
	if c.users() > 0 {
		return d.errf("close cq: used by QPs: %w", rdmaio.ErrInUse)
	}
	// A poller still inside after the timeout only touches words of the
	// mapped segment; the slot may be reused meanwhile.
	_ = c.shutdown()
	d.mu.Lock()
	d.cqs[c.idx] = nil
	d.mu.Unlock()
	return nil
}
