package tcp

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
)

// The retry timer. TCP retransmits by itself, so RC requests are never sent
// twice; what rdmaio.QPAttr.RetryCount and Timeout bound here is how long a
// connected peer may stay silent while requests are outstanding: a peer
// whose process is stopped or hung still has its kernel acknowledge the
// bytes, but neither its program nor its service goroutine answers. When a
// QP with outstanding work has seen nothing move on its connection (no byte
// read, none written) for Timeout × (RetryCount+1), the connection is
// dropped and the oldest outstanding request completes with
// StatusRetryExcErr (VendorErr ETIMEDOUT). Receiver-not-ready waits do not
// count: the peer answered them. The bound is at least minRetryBound; it
// must exceed the longest time a live peer's process may go without a
// processor (on an oversubscribed host, seconds), or live peers are taken
// for hung ones.
//
// Acknowledgements of unsignaled requests wait for company (the next frame
// in that direction); one still waiting when the timer passes by (every
// ackTick while there are such) is sent on its own, so that a live but
// quiet peer always answers well within the bound.
//
// The timer is one per device: a timer pass (armed by the first post after
// the device went idle, or by an acknowledgement held back) looks at every
// RC QP and rearms itself while any has work outstanding, so posting costs
// one atomic load.

// DefaultRetryTimeout is the Timeout used when rdmaio.QPAttr.Timeout is zero
// (option retry_timeout).
const DefaultRetryTimeout = 4 * time.Second

// Bounds of the period of the retry timer's passes, the period while
// acknowledgements wait, and the shortest retry bound.
const (
	minWatchTick  = 5 * time.Millisecond
	maxWatchTick  = 250 * time.Millisecond
	ackTick       = minWatchTick
	minRetryBound = 10 * ackTick
)

// retryBound is how long outstanding work may see no progress.
func retryBound(count int, timeout, def time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = def
	}
	return max(timeout*time.Duration(count+1), minRetryBound)
}

// watchTick is the period of the timer passes for a QP with the given bound:
// it fires at most a quarter of the bound late.
func watchTick(bound time.Duration) time.Duration {
	return min(max(bound/4, minWatchTick), maxWatchTick)
}

// startWatch arms the retry timer for a pass after tick, if it is not
// armed.
func (d *Device) startWatch(tick time.Duration) {
	if d.watchOn.CompareAndSwap(false, true) {
		d.arm(time.Now().Add(tick))
	}
}

// watch is a pass of the retry timer, from runTimers (pmu is held). It
// sends the acknowledgements that wait and rearms the timer while any QP
// has work outstanding.
func (d *Device) watch(now time.Time) {
	// Cleared first: a post (or a held-back acknowledgement) racing with
	// this pass either is seen below or finds the timer unarmed and arms it.
	d.watchOn.Store(false)
	d.ackWait.Store(false)
	var tick time.Duration
	for i := range d.qps {
		q := d.qps[i].Load()
		if q == nil || q.typ != rdmaio.RC {
			continue
		}
		q.mu.Lock()
		q.sendLoneAck()
		if q.watch(now) {
			if t := watchTick(q.bound); tick == 0 || t < tick {
				tick = t
			}
		}
		q.mu.Unlock()
	}
	if tick > 0 {
		d.watchOn.Store(true)
		d.arm(now.Add(tick))
	}
}

// holdAck notes that an acknowledgement waits for company: the next pass
// of the retry timer comes within ackTick and sends it.
func (d *Device) holdAck() {
	if !d.ackWait.Load() && d.ackWait.CompareAndSwap(false, true) {
		d.arm(time.Now().Add(ackTick))
	}
}

// watch checks the QP's progress and fails its outstanding work when there
// was none for q.bound. It reports whether the QP still needs watching. q.mu
// is held.
func (q *qp) watch(now time.Time) bool {
	c := q.conn
	if q.closed || c == nil || c.kind != kRC || q.State() != rdmaio.StateRTS || q.sqAck >= q.sqTail {
		q.wSince = time.Time{}
		return false
	}
	if q.wSince.IsZero() || q.act != q.wAct || q.rnrWait {
		q.wAct, q.wSince = q.act, now
		return true
	}
	if now.Sub(q.wSince) < q.bound {
		return true
	}
	q.wSince = time.Time{}
	q.lost(c, uint32(unix.ETIMEDOUT))
	return false
}

// sendLoneAck sends an acknowledgement that waits for company on its own.
// q.mu is held.
func (q *qp) sendLoneAck() {
	c := q.conn
	if c == nil || c.kind != kRC || c.part != partNone || q.rspTail-q.rspHead != 1 {
		return
	}
	r := &q.rsps[q.rspHead%uint64(len(q.rsps))]
	if !r.ack || r.now {
		return
	}
	r.now = true
	q.flush()
}
