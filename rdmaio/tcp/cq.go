package tcp

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// cqe is a queued completion. Send completions remember their QP and send
// queue position: polling one frees the send queue up to it.
type cqe struct {
	wc  rdmaio.WorkCompletion
	q   *qp
	pos uint64
}

// cq is a completion queue: a ring of completions produced by the device's
// progress (in Poll, in Post calls or in the service goroutine) and taken by
// Poll. The ring grows with the queues of the QPs attached, so that it never
// overflows.
type cq struct {
	dev   *Device
	idx   int
	depth int

	mu     sync.Mutex
	ring   []cqe
	head   uint64
	tail   uint64
	need   int // the sum of the queue depths of the attached QPs
	users  int
	closed bool

	count    atomic.Int64
	empty    atomic.Uint32 // Polls that found nothing
	shut     atomic.Bool
	sleepers atomic.Int32
	wake     chan struct{}
	done     chan struct{}

	// timer bounds the sleep of one waiter at a time (timerBusy), so that
	// Wait does not allocate; concurrent waiters make their own.
	timer     *time.Timer
	timerBusy atomic.Bool
}

// CreateCQ creates a completion queue for about depth completions. The
// queue grows as QPs attach to it, so it never overflows.
func (d *Device) CreateCQ(depth int) (rdmaio.CQ, error) {
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("create cq: %w", err)
	}
	defer d.life.End()
	if depth <= 0 || depth > maxQPWR*maxQPSlots {
		return nil, d.errf("create cq: %w: depth %d", rdmaio.ErrInvalidArgument, depth)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, c := range d.cqs {
		if c == nil {
			c = &cq{dev: d, idx: i, depth: depth, wake: make(chan struct{}, 1), done: make(chan struct{}), timer: time.NewTimer(time.Hour)}
			c.timer.Stop()
			c.ring = make([]cqe, ringSize(min(depth, 1<<12)))
			d.cqs[i] = c
			return c, nil
		}
	}
	return nil, d.errf("create cq: %w: all %d CQs in use (option max_cq)", rdmaio.ErrInvalidArgument, len(d.cqs))
}

func ringSize(n int) int {
	s := 64
	for s < n {
		s <<= 1
	}
	return s
}

// attach accounts for a QP queue of depth entries completing here.
func (c *cq) attach(depth int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.users++
	c.need += depth
	if c.need > len(c.ring) {
		c.grow(ringSize(c.need))
	}
}

func (c *cq) detach(depth int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.users--
	c.need -= depth
}

// grow replaces the ring by one of n entries. c.mu is held.
func (c *cq) grow(n int) {
	r := make([]cqe, n)
	k := 0
	for i := c.head; i < c.tail; i++ {
		r[k] = c.ring[i%uint64(len(c.ring))]
		k++
	}
	c.ring, c.head, c.tail = r, 0, uint64(k)
}

// push queues a completion; q and pos name the send queue entry of a send
// completion (q is nil for receive completions).
func (c *cq) push(wc *rdmaio.WorkCompletion, q *qp, pos uint64) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.tail-c.head == uint64(len(c.ring)) {
		c.grow(2 * len(c.ring)) // more completions than queue entries: only when receives are reposted unpolled
	}
	e := &c.ring[c.tail%uint64(len(c.ring))]
	e.wc, e.q, e.pos = *wc, q, pos
	c.tail++
	c.count.Store(int64(c.tail - c.head))
	c.mu.Unlock()
	if c.sleepers.Load() > 0 {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// pushRecv queues a receive completion produced by a progress pass (pmu is
// held). In the pass of a Poll of c, while nothing is queued before it, the
// completion goes straight into the Poll's slice. Completions of one QP
// keep their order: they are produced under the QP's lock, so an earlier
// one still queued is seen in count.
func (c *cq) pushRecv(wc *rdmaio.WorkCompletion) {
	if d := c.dev; d.dcq == c && d.dn < len(d.dwc) && c.count.Load() == 0 && !c.shut.Load() {
		d.dwc[d.dn] = *wc
		d.dn++
		return
	}
	c.push(wc, nil, 0)
}

// pop takes up to len(wc) completions.
func (c *cq) pop(wc []rdmaio.WorkCompletion) int {
	if c.count.Load() == 0 {
		return 0
	}
	c.mu.Lock()
	n := 0
	mask := uint64(len(c.ring))
	for c.head < c.tail && n < len(wc) {
		e := &c.ring[c.head%mask]
		wc[n] = e.wc
		if e.q != nil {
			e.q.reclaim(e.pos)
			e.q = nil
		}
		c.head++
		n++
	}
	c.count.Store(int64(c.tail - c.head))
	c.mu.Unlock()
	return n
}

// Poll runs a progress pass of the device (unless another goroutine is
// running one) and returns the queued completions. A Poll that finds
// nothing yields the processor now and then (yieldEvery), so that a
// goroutine polling in a loop does not keep the devices' service goroutines
// (or anything else) from running.
func (c *cq) Poll(wc []rdmaio.WorkCompletion) int {
	if len(wc) == 0 || c.shut.Load() {
		return 0
	}
	d := c.dev
	d.pollGen.Add(1)
	if heldAck.Load() != nil {
		d.releaseHeldAck(true)
	}
	n := 0
	if c.count.Load() < int64(len(wc)) {
		n = d.pollProgress(c, wc)
	}
	if n < len(wc) {
		n += c.pop(wc[n:])
	}
	if n == 0 {
		e := c.empty.Add(1)
		if e%feedWatchdogEvery == 0 && d.svcPassive.Load() {
			d.feedWatchdog() // off the path of a message
		}
		if e%yieldEvery == 0 && (e%yieldEveryMP == 0 || runtime.GOMAXPROCS(0) == 1) {
			runtime.Gosched()
		}
	}
	return n
}

// A Poll that finds nothing yields every yieldEvery-th time with one
// processor (GOMAXPROCS=1), where nothing else runs until it does, and only
// every yieldEveryMP-th time with more. runtime.Gosched wakes a thread for
// an idle processor when there is one (the polling goroutine goes to the
// global run queue): on a host whose cores are all busy polling, that
// thread takes a core from a peer rank's poller at every yield, which costs
// microseconds per message. With idle processors other goroutines run
// there anyway; without, the rarer yield (about every millisecond) still
// lets them run.
const (
	yieldEvery   = 64
	yieldEveryMP = 2048
)

// Wait polls until a completion arrives: it spins, then yields, then sleeps
// while the device's service goroutine makes progress (see
// provider.WaitPolicy).
func (c *cq) Wait(ctx context.Context, wc []rdmaio.WorkCompletion) (int, error) {
	if len(wc) == 0 {
		return 0, c.dev.errf("cq wait: %w: empty completion slice", rdmaio.ErrInvalidArgument)
	}
	return provider.WaitCQ(ctx, c, c.dev.opt.policy, wc)
}

// Sleep is Wait without spinning and yielding first (rdmaio.SleepCQ), in
// sleeps of up to provider.SleepBound: the service goroutine runs the timers
// and wakes sleepers when it queues a completion.
func (c *cq) Sleep(ctx context.Context, wc []rdmaio.WorkCompletion) (int, error) {
	if len(wc) == 0 {
		return 0, c.dev.errf("cq sleep: %w: empty completion slice", rdmaio.ErrInvalidArgument)
	}
	return provider.SleepCQ(ctx, c, provider.SleepBound, wc)
}

var _ rdmaio.SleepCQ = (*cq)(nil)

// WaitClosed implements provider.WaitableCQ.
func (c *cq) WaitClosed() error {
	if c.shut.Load() {
		return c.dev.errf("cq wait: %w", rdmaio.ErrClosed)
	}
	return nil
}

// WaitYield implements provider.WaitableCQ (runtime.Gosched is enough).
func (c *cq) WaitYield() {}

// WaitSleep implements provider.WaitableCQ.
func (c *cq) WaitSleep(ctx context.Context, wc []rdmaio.WorkCompletion, bound time.Duration) (int, error) {
	return c.sleep(ctx, wc, bound)
}

// sleep hands progress to the service goroutine and sleeps until a
// completion is queued, bound passes, ctx is done or the CQ is closed.
func (c *cq) sleep(ctx context.Context, wc []rdmaio.WorkCompletion, bound time.Duration) (int, error) {
	d := c.dev
	c.sleepers.Add(1)
	d.sleeping.Add(1)
	defer func() {
		c.sleepers.Add(-1)
		d.sleeping.Add(-1)
	}()
	d.kickService()
	if n := c.pop(wc); n > 0 {
		return n, nil
	}
	if c.shut.Load() {
		return 0, d.errf("cq wait: %w", rdmaio.ErrClosed)
	}
	dur := bound
	if dl, ok := ctx.Deadline(); ok {
		dur = max(min(dur, time.Until(dl)), time.Microsecond)
	}
	var t *time.Timer
	if c.timerBusy.CompareAndSwap(false, true) {
		defer c.timerBusy.Store(false)
		t = c.timer
		t.Reset(dur)
	} else {
		t = time.NewTimer(dur) // another goroutine sleeps on this CQ
	}
	defer t.Stop()
	select {
	case <-c.wake:
	case <-t.C:
	case <-c.done:
		return 0, d.errf("cq wait: %w", rdmaio.ErrClosed)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return c.pop(wc), nil
}

// shutdown closes the CQ for Device.Close and wakes its waiters.
func (c *cq) shutdown() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.shut.Store(true)
		close(c.done)
	}
	c.mu.Unlock()
}

// Close destroys the CQ. It fails with ErrInUse while QPs use it.
func (c *cq) Close() error {
	d := c.dev
	if err := d.life.Begin(); err != nil {
		return d.errf("close cq: %w", err)
	}
	defer d.life.End()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return d.errf("close cq: %w", rdmaio.ErrClosed)
	}
	if c.users > 0 {
		c.mu.Unlock()
		return d.errf("close cq: used by %d QPs: %w", c.users, rdmaio.ErrInUse)
	}
	c.mu.Unlock()
	c.shutdown()
	d.mu.Lock()
	d.cqs[c.idx] = nil
	d.mu.Unlock()
	return nil
}
