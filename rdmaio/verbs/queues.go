package verbs

import (
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// Defaults of QP capabilities (rdmaio.QPCap zero fields) and of options.
const (
	DefaultMaxSendWR = 256
	DefaultMaxRecvWR = 256
	DefaultMaxSGE    = 4
	DefaultMaxInline = 256
)

// Limits the provider adds to the device's own.
const (
	// postBatch is the number of work requests built per post call: a
	// longer chain is posted in several calls.
	postBatch = 64
	// pollBatch is the number of completions taken per ibv_poll_cq.
	pollBatch = 64
	// maxKeySlots bounds the table of work queues (two per QP, one per SRQ).
	maxKeySlots = 1 << 16
)

type options struct {
	device    string
	port      int // 0: the first active port
	gidIndex  int // -1: selectGID chooses
	maxInline int
	policy    provider.WaitPolicy
}

func defaultPolicy(localSize int) provider.WaitPolicy { return provider.DefaultWaitPolicy(localSize) }

// wrID is the work request ID given to the hardware: the key of the work
// queue (in the device's table) and the slot of the request in it. The
// caller's ID stays in the slot.
func wrID(key, slot uint32) uint64 { return uint64(key)<<32 | uint64(slot) }

func splitWRID(id uint64) (key, slot uint32) { return uint32(id >> 32), uint32(id) }

// span is the memory range of one SGE of an outstanding work request.
type span struct {
	addr uint64
	n    uint32
}

// spans records the SGE ranges of outstanding work requests, maxSGE per
// slot, so that PD.Free can refuse memory the adapter may still access.
type spans struct {
	maxSGE int
	r      []span
	n      []uint8
}

func newSpans(slots, maxSGE int) spans {
	return spans{maxSGE: maxSGE, r: make([]span, slots*maxSGE), n: make([]uint8, slots)}
}

func (s *spans) set(slot int, sgl []rdmaio.SGE) {
	k := min(len(sgl), s.maxSGE)
	r := s.r[slot*s.maxSGE:]
	for i := 0; i < k; i++ {
		r[i] = span{sgl[i].Addr, sgl[i].Length}
	}
	s.n[slot] = uint8(k)
}

// overlaps reports whether a recorded SGE of slot lies (partly) in
// [lo, hi).
func (s *spans) overlaps(slot int, lo, hi uint64) bool {
	r := s.r[slot*s.maxSGE:]
	for i := 0; i < int(s.n[slot]); i++ {
		if r[i].n > 0 && r[i].addr < hi && r[i].addr+uint64(r[i].n) > lo {
			return true
		}
	}
	return false
}

// sendQueue records the outstanding work requests of a send queue: their
// IDs, completion opcodes and SGE ranges, in posting order. The hardware
// completes a send queue in order, and a completion at position p also
// retires the unsignaled requests before it (verbs reclaims their slots
// then).
type sendQueue struct {
	mu    sync.Mutex
	ids   []uint64
	ops   []rdmaio.WCOpcode
	sg    spans
	mask  uint64
	depth uint64
	head  uint64 // oldest outstanding position
	tail  uint64 // next position
}

func newSendQueue(depth, maxSGE int) *sendQueue {
	n := 1
	for n < depth {
		n <<= 1
	}
	return &sendQueue{ids: make([]uint64, n), ops: make([]rdmaio.WCOpcode, n), sg: newSpans(n, maxSGE),
		mask: uint64(n - 1), depth: uint64(depth)}
}

// room returns how many more requests fit. q.mu is held.
func (q *sendQueue) room() int { return int(q.depth - (q.tail - q.head)) }

// add records a request and returns its slot. q.mu is held; room() > 0.
// sgl is nil for inline requests.
func (q *sendQueue) add(id uint64, op rdmaio.WCOpcode, sgl []rdmaio.SGE) uint32 {
	i := q.tail & q.mask
	q.ids[i], q.ops[i] = id, op
	q.sg.set(int(i), sgl)
	q.tail++
	return uint32(q.tail - 1)
}

// unadd forgets the last n requests, which the hardware refused.
func (q *sendQueue) unadd(n int) { q.tail -= uint64(n) }

// done retires the request in slot and every one before it, and returns its
// ID and opcode; ok is false for a slot that is not outstanding (a stale
// completion).
func (q *sendQueue) done(slot uint32) (id uint64, op rdmaio.WCOpcode, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	pos := q.head + uint64(slot-uint32(q.head))
	if pos >= q.tail {
		return 0, 0, false
	}
	i := pos & q.mask
	q.head = pos + 1
	return q.ids[i], q.ops[i], true
}

// references reports whether an outstanding request has an SGE in
// [lo, hi).
func (q *sendQueue) references(lo, hi uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for p := q.head; p < q.tail; p++ {
		if q.sg.overlaps(int(p&q.mask), lo, hi) {
			return true
		}
	}
	return false
}

// reset forgets every outstanding request (the QP went to RESET).
func (q *sendQueue) reset() {
	q.mu.Lock()
	q.head = q.tail
	q.mu.Unlock()
}

// recvQueue records the outstanding receive work requests of a receive
// queue or SRQ in slots. An SRQ's receives complete in any order, so slots
// come from a free list; a UD QP's header slot for a receive is its slot.
type recvQueue struct {
	mu    sync.Mutex
	ids   []uint64
	busy  []bool
	free  []uint32
	sg    spans
	depth int
}

func newRecvQueue(depth, maxSGE int) *recvQueue {
	q := &recvQueue{ids: make([]uint64, depth), busy: make([]bool, depth), free: make([]uint32, depth),
		sg: newSpans(depth, maxSGE), depth: depth}
	q.resetLocked()
	return q
}

func (q *recvQueue) resetLocked() {
	q.free = q.free[:q.depth]
	for i := range q.free {
		q.free[i] = uint32(q.depth - 1 - i)
		q.busy[i] = false
	}
}

// room returns how many more receives fit. q.mu is held.
func (q *recvQueue) room() int { return len(q.free) }

// add records a receive and returns its slot. q.mu is held; room() > 0.
func (q *recvQueue) add(id uint64, sgl []rdmaio.SGE) uint32 {
	s := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	q.ids[s], q.busy[s] = id, true
	q.sg.set(int(s), sgl)
	return s
}

// unadd releases slots the hardware refused. q.mu is held.
func (q *recvQueue) unadd(slot uint32) {
	q.busy[slot] = false
	q.free = append(q.free, slot)
}

// done releases slot and returns its ID; ok is false for a slot that is
// not outstanding.
func (q *recvQueue) done(slot uint32) (id uint64, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if int(slot) >= q.depth || !q.busy[slot] {
		return 0, false
	}
	q.busy[slot] = false
	q.free = append(q.free, slot)
	return q.ids[slot], true
}

// references reports whether an outstanding receive has an SGE in
// [lo, hi).
func (q *recvQueue) references(lo, hi uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for s, b := range q.busy {
		if b && q.sg.overlaps(s, lo, hi) {
			return true
		}
	}
	return false
}

func (q *recvQueue) reset() {
	q.mu.Lock()
	q.resetLocked()
	q.mu.Unlock()
}

// postError converts the errno of a refused ibv_post_send or ibv_post_recv.
func postError(op string, errno syscall.Errno) error {
	switch errno {
	case syscall.ENOMEM:
		return fmt.Errorf("verbs: %s: %w (the hardware queue is full)", op, rdmaio.ErrQueueFull)
	case syscall.EINVAL:
		return fmt.Errorf("verbs: %s: %w: the hardware refused the work request: %w", op, rdmaio.ErrInvalidArgument, errno)
	}
	return fmt.Errorf("verbs: %s: %w", op, errno)
}

// regError converts the errno of a failed ibv_reg_mr, explaining the
// locked-memory limit that is its usual cause.
func regError(n int, errno syscall.Errno) error {
	if errors.Is(errno, syscall.ENOMEM) || errors.Is(errno, syscall.EPERM) {
		return fmt.Errorf("verbs: register %d bytes: %w (registration locks memory: raise RLIMIT_MEMLOCK, ulimit -l)", n, errno)
	}
	return fmt.Errorf("verbs: register %d bytes: %w", n, errno)
}

// noDeviceError is Open's error when libibverbs finds no device: why, as
// far as can be told.
func noDeviceError(errno syscall.Errno) error {
	switch errno {
	case 0:
		return fmt.Errorf("%w: libibverbs lists no device", ErrNoDevice)
	case syscall.ENOSYS:
		return fmt.Errorf("%w: the kernel has no RDMA support (%w)", ErrNoDevice, errno)
	}
	return fmt.Errorf("%w: listing devices: %w", ErrNoDevice, errno)
}
