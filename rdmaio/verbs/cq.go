//go:build verbs

package verbs

/*
#include "jia_verbs.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// workQueue is an entry of the device's work queue table: a send queue, a
// receive queue or an SRQ, named by the key in the work request IDs the
// hardware returns.
type workQueue struct {
	qp   *qp // owner; nil for an SRQ
	send *sendQueue
	recv *recvQueue
	ud   bool
	grh  []byte // UD header slots, grhLen bytes per receive slot
}

// cq is a completion queue with its completion channel.
type cq struct {
	dev *Device
	c   *C.struct_ibv_cq
	ch  *C.struct_ibv_comp_channel
	fd  int

	pmu   sync.Mutex // polling, resizing
	wcs   *C.struct_jia_wc
	view  []C.struct_jia_wc
	cqe   int
	need  int
	users int

	life   sync.RWMutex // sleepers hold it shared, destroy exclusively
	closed atomic.Bool
}

// CreateCQ creates a completion queue of at least depth entries. It grows
// as QPs attach to it.
func (d *Device) CreateCQ(depth int) (rdmaio.CQ, error) {
	if err := d.begin(); err != nil {
		return nil, d.errf("create cq: %w", err)
	}
	defer d.mu.Unlock()
	if depth <= 0 || depth > d.maxCQE {
		return nil, d.errf("create cq: %w: depth %d (want 1..%d)", rdmaio.ErrInvalidArgument, depth, d.maxCQE)
	}
	ch, err := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, d.errf("create cq: completion channel: %w", errnoOf(err))
	}
	fd := int(ch.fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, d.errf("create cq: completion channel: %w", err)
	}
	c, err := C.ibv_create_cq(d.ctx, C.int(depth), nil, ch, 0)
	if c == nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, d.errf("create cq of %d entries: %w", depth, errnoOf(err))
	}
	x, err := d.wrapCQ(c, ch, fd)
	if err != nil {
		C.ibv_destroy_cq(c)
		C.ibv_destroy_comp_channel(ch)
		return nil, d.errf("create cq: %w", err)
	}
	d.cqs[x] = struct{}{}
	return x, nil
}

// wrapCQ makes the software side of a hardware CQ.
func (d *Device) wrapCQ(c *C.struct_ibv_cq, ch *C.struct_ibv_comp_channel, fd int) (*cq, error) {
	p, err := cAlloc(pollBatch, int(unsafe.Sizeof(C.struct_jia_wc{})))
	if err != nil {
		return nil, err
	}
	wcs := (*C.struct_jia_wc)(p)
	return &cq{dev: d, c: c, ch: ch, fd: fd, wcs: wcs, view: unsafe.Slice(wcs, pollBatch), cqe: int(c.cqe)}, nil
}

// attach accounts for a queue of depth entries completing here, growing
// the CQ so that it cannot overflow.
func (c *cq) attach(depth int) error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.need+depth > c.cqe {
		want := c.need + depth
		if want > c.dev.maxCQE {
			return fmt.Errorf("%w: the CQ would need %d entries (device max %d)", rdmaio.ErrInvalidArgument, want, c.dev.maxCQE)
		}
		if rc, err := C.ibv_resize_cq(c.c, C.int(want)); rc != 0 {
			return fmt.Errorf("resize CQ to %d entries: %w", want, rcErrno(rc, err))
		}
		c.cqe = int(c.c.cqe)
	}
	c.need += depth
	c.users++
	return nil
}

func (c *cq) detach(depth int) {
	c.pmu.Lock()
	c.need -= depth
	c.users--
	c.pmu.Unlock()
}

// Poll takes up to len(wc) completions. It does not block or allocate.
func (c *cq) Poll(wc []rdmaio.WorkCompletion) int {
	if len(wc) == 0 || c.closed.Load() {
		return 0
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.closed.Load() {
		return 0
	}
	out := 0
	for out < len(wc) {
		n := int(C.jia_poll(c.c, C.int(min(len(wc)-out, pollBatch)), c.wcs))
		if n <= 0 {
			break
		}
		for i := 0; i < n; i++ {
			if c.convert(&c.view[i], &wc[out]) {
				out++
			}
		}
	}
	return out
}

// convert turns a hardware completion into an rdmaio one; false for a
// completion of a queue that is gone or was reset.
func (c *cq) convert(w *C.struct_jia_wc, o *rdmaio.WorkCompletion) bool {
	d := c.dev
	key, slot := splitWRID(uint64(w.wr_id))
	q := d.wqs.Lookup(key)
	if q == nil {
		return false
	}
	st := wcStatus(uint32(w.status))
	*o = rdmaio.WorkCompletion{Status: st, QPN: uint32(w.qp_num), VendorErr: uint32(w.vendor_err), SrcRank: -1}
	if q.send != nil {
		id, op, ok := q.send.done(slot)
		if !ok {
			return false
		}
		o.ID, o.Opcode = id, op
		if st == rdmaio.StatusSuccess {
			o.ByteLen = uint32(w.byte_len)
		}
	} else {
		id, ok := q.recv.done(slot)
		if !ok {
			return false
		}
		o.ID, o.Opcode = id, rdmaio.WCRecv
		if st == rdmaio.StatusSuccess {
			o.Opcode = recvOpcode(uint32(w.opcode))
			o.ByteLen = uint32(w.byte_len)
			if uint32(w.wc_flags)&ibvWCWithImm != 0 {
				o.Flags |= rdmaio.WCWithImm
				o.Imm = uint32(w.imm)
			}
			if q.ud {
				o.ByteLen = max(o.ByteLen, grhLen) - grhLen
				o.SrcQPN = uint32(w.src_qp)
				g := q.grh[int(slot)*grhLen : int(slot+1)*grhLen]
				o.SrcRank = d.srcRank(g, uint32(w.wc_flags)&ibvWCGRH != 0, uint16(w.slid))
			}
		}
	}
	if st != rdmaio.StatusSuccess {
		x := q.qp
		if x == nil {
			x = d.qpOf(o.QPN)
		}
		if x != nil {
			x.state.Store(uint32(rdmaio.StateErr))
		}
	}
	return true
}

// Wait polls until a completion arrives, ctx is done or the CQ is closed:
// it spins, yields, then sleeps on the completion channel.
func (c *cq) Wait(ctx context.Context, wc []rdmaio.WorkCompletion) (int, error) {
	if len(wc) == 0 {
		return 0, c.dev.errf("cq wait: %w: empty completion slice", rdmaio.ErrInvalidArgument)
	}
	return provider.WaitCQ(ctx, c, c.dev.opt.policy, wc)
}

// Sleep is Wait without spinning and yielding first (rdmaio.SleepCQ), in
// sleeps of up to provider.SleepBound: completions wake the channel.
func (c *cq) Sleep(ctx context.Context, wc []rdmaio.WorkCompletion) (int, error) {
	if len(wc) == 0 {
		return 0, c.dev.errf("cq sleep: %w: empty completion slice", rdmaio.ErrInvalidArgument)
	}
	return provider.SleepCQ(ctx, c, provider.SleepBound, wc)
}

var _ rdmaio.SleepCQ = (*cq)(nil)

// WaitClosed implements provider.WaitableCQ.
func (c *cq) WaitClosed() error {
	if c.closed.Load() {
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

// sleep arms the CQ's notification and sleeps on the completion channel
// for at most bound.
func (c *cq) sleep(ctx context.Context, wc []rdmaio.WorkCompletion, bound time.Duration) (int, error) {
	d := c.dev
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed.Load() {
		return 0, d.errf("cq wait: %w", rdmaio.ErrClosed)
	}
	if rc := C.ibv_req_notify_cq(c.c, 0); rc != 0 {
		return 0, d.errf("cq wait: ibv_req_notify_cq: %w", rcErrno(rc, nil))
	}
	if n := c.Poll(wc); n > 0 {
		return n, nil
	}
	dur := bound
	if dl, ok := ctx.Deadline(); ok {
		dur = max(min(dur, time.Until(dl)), time.Microsecond)
	}
	ts := unix.NsecToTimespec(int64(dur))
	fds := [1]unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
	if _, err := unix.Ppoll(fds[:], &ts, nil); err != nil && err != unix.EINTR {
		return 0, d.errf("cq wait: ppoll: %w", err)
	}
	if fds[0].Revents&unix.POLLIN != 0 {
		C.jia_cq_event(c.ch)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return c.Poll(wc), nil
}

// Close destroys the CQ; it fails with ErrInUse while QPs use it.
func (c *cq) Close() error {
	d := c.dev
	if err := d.begin(); err != nil {
		return d.errf("close cq: %w", err)
	}
	defer d.mu.Unlock()
	if _, ok := d.cqs[c]; !ok {
		return d.errf("close cq: %w", rdmaio.ErrClosed)
	}
	c.pmu.Lock()
	users := c.users
	c.pmu.Unlock()
	if users > 0 {
		return d.errf("close cq: used by %d queues: %w", users, rdmaio.ErrInUse)
	}
	return c.destroy()
}

// destroy destroys the CQ and its channel. dev.mu is held.
func (c *cq) destroy() error {
	d := c.dev
	delete(d.cqs, c)
	c.closed.Store(true)
	c.life.Lock()
	defer c.life.Unlock()
	c.pmu.Lock()
	defer c.pmu.Unlock()
	rc, err := C.ibv_destroy_cq(c.c)
	C.ibv_destroy_comp_channel(c.ch)
	C.free(unsafe.Pointer(c.wcs))
	c.view = nil
	if rc != 0 {
		return d.errf("close cq: %w", rcErrno(rc, err))
	}
	return nil
}
