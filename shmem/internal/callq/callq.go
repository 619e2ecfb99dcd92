// Package callq is the fast path of the control protocol between a rank's
// program and its DSM pager: the program's synchronisation calls (Lock,
// Unlock, Barrier, Wait and the condition variables) and their answers,
// through a memfd that both processes map, with futex doorbells. A call
// costs no system call when the other side is polling, and one wake-up
// when it sleeps; the socket pair of package ctl stays for everything else
// (setup, allocation, descriptors, fatal errors).
//
// Layout of the shared memory (little-endian words, each group on its own
// cache line):
//
//	header       magic, number of slots, ring entries
//	(reserved)
//	head, tail   request ring positions (written by the program, the pager)
//	ring         entries of 32 bytes: stamp (position+1 once written), slot, kind, id
//	slots        one per call in progress: state (futex word), sleeping, code, message
//
// The program is the only producer of the ring (under a mutex) and the
// pager its only consumer. A call takes a free slot, writes a ring entry
// naming it and rings the pager's bell (package bell: a system call only if
// the pager sleeps); the pager answers in the slot and wakes the caller if
// it sleeps (futex).
package callq

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/internal/backoff"
)

const (
	magic     = 0x6a696163 // "jiac"
	line      = 64
	entrySize = 32
	slotSize  = 1024
	msgOff    = 64 // of a slot: the message
	// MaxMessage is the longest answer message; longer ones are cut.
	MaxMessage = slotSize - msgOff

	offHeader = 0
	offHead   = 2 * line
	offTail   = 3 * line
	offRing   = 4 * line
)

// Slot states.
const (
	stateFree    = 0
	statePending = 1
	stateDone    = 2
	stateGone    = 3 // the pager can no longer answer
)

// ErrGone is returned by Call when the pager can no longer answer.
var ErrGone = errors.New("callq: the pager is gone")

// layout computes the offsets of a queue with n slots (and as many ring
// entries, rounded up to a power of two).
type layout struct {
	slots, ring int
	slotsOff    int
	size        int
}

func newLayout(slots int) layout {
	ring := 1
	for ring < slots {
		ring <<= 1
	}
	l := layout{slots: slots, ring: ring}
	l.slotsOff = offRing + ring*entrySize
	l.slotsOff = (l.slotsOff + line - 1) / line * line
	l.size = l.slotsOff + slots*slotSize
	l.size = (l.size + 4095) / 4096 * 4096
	return l
}

// queue is the mapped memory, as both sides see it.
type queue struct {
	mem []byte
	l   layout
}

func (q *queue) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&q.mem[off])) }
func (q *queue) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&q.mem[off])) }
func (q *queue) entry(i uint64) int  { return offRing + int(i&uint64(q.l.ring-1))*entrySize }
func (q *queue) slot(s uint32) int   { return q.l.slotsOff + int(s)*slotSize }

// Call is one synchronisation call: Kind and ID are the control protocol's
// (a protocol.EventKind and a lock or condition variable), Slot is where
// the answer goes.
type Call struct {
	Slot uint32
	Kind int64
	ID   int64
}

// Client is the program's side.
type Client struct {
	q      queue
	fd     int
	policy backoff.Policy
	ring   func()

	mu     sync.Mutex
	cond   *sync.Cond
	free   []uint32
	head   uint64
	failed error
}

// New creates a queue for up to slots calls in progress at once and maps
// it; FD is the memfd to pass to the pager. Callers poll for their answer
// as p says before they sleep. Set the pager's bell with SetRing before
// the first call.
func New(slots int, p backoff.Policy) (*Client, error) {
	if slots < 1 || slots > 1<<16 {
		return nil, fmt.Errorf("callq: %d slots", slots)
	}
	l := newLayout(slots)
	fd, err := unix.MemfdCreate("jiarun-dsm-calls", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("callq: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(l.size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("callq: ftruncate: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, l.size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("callq: mmap: %w", err)
	}
	c := &Client{q: queue{mem: mem, l: l}, fd: fd, policy: p}
	c.cond = sync.NewCond(&c.mu)
	atomic.StoreUint32(c.q.u32(offHeader), magic)
	atomic.StoreUint32(c.q.u32(offHeader+4), uint32(slots))
	atomic.StoreUint32(c.q.u32(offHeader+8), uint32(l.ring))
	for s := slots - 1; s >= 0; s-- {
		c.free = append(c.free, uint32(s))
	}
	return c, nil
}

// FD returns the queue's memfd.
func (c *Client) FD() int { return c.fd }

// SetRing sets what wakes the pager after a call was published (nil: the
// pager polls).
func (c *Client) SetRing(ring func()) {
	c.mu.Lock()
	c.ring = ring
	c.mu.Unlock()
}

// Call makes a call and waits for its answer: the pager's code (0 for
// success) and message. Any number of goroutines may call at once; beyond
// the queue's slots they wait for a free one.
func (c *Client) Call(kind, id int64) (code int64, msg string, err error) {
	c.mu.Lock()
	for len(c.free) == 0 && c.failed == nil {
		c.cond.Wait()
	}
	if c.failed != nil {
		err := c.failed
		c.mu.Unlock()
		return 0, "", err
	}
	s := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	so := c.q.slot(s)
	state := c.q.u32(so)
	atomic.StoreUint32(state, statePending)
	// Publish the request. At most as many entries as slots are
	// outstanding, so the ring (as large as that) is never full.
	i := c.head
	c.head++
	e := c.q.entry(i)
	*c.q.u32(e + 8) = s
	*c.q.u64(e + 16) = uint64(kind)
	*c.q.u64(e + 24) = uint64(id)
	atomic.StoreUint64(c.q.u64(e), i+1)
	atomic.StoreUint64(c.q.u64(offHead), i+1)
	ring := c.ring
	c.mu.Unlock()
	if ring != nil {
		ring()
	}

	// Wait for the answer: poll, then sleep on the slot's state.
	var w backoff.Waiter
	w.Reset(c.policy)
	sleeping := c.q.u32(so + 4)
	for {
		st := atomic.LoadUint32(state)
		if st != statePending {
			break
		}
		if w.Pause() {
			continue
		}
		atomic.StoreUint32(sleeping, 1)
		if atomic.LoadUint32(state) == statePending {
			backoff.Sleep(state, statePending, -1)
		}
		atomic.StoreUint32(sleeping, 0)
	}
	st := atomic.LoadUint32(state)
	if st == stateDone {
		code = int64(atomic.LoadUint64(c.q.u64(so + 8)))
		if n := int(atomic.LoadUint32(c.q.u32(so + 16))); n > 0 {
			msg = string(c.q.mem[so+msgOff : so+msgOff+min(n, MaxMessage)])
		}
	}
	c.mu.Lock()
	if st == stateDone {
		atomic.StoreUint32(state, stateFree)
		c.free = append(c.free, s)
		c.cond.Signal()
	} else {
		err = c.failed
		if err == nil {
			err = ErrGone
		}
	}
	c.mu.Unlock()
	return code, msg, err
}

// Fail makes every call in progress, and every later one, return err: the
// pager can no longer answer.
func (c *Client) Fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return
	}
	c.failed = fmt.Errorf("%w: %w", ErrGone, err)
	for s := 0; s < c.q.l.slots; s++ {
		st := c.q.u32(c.q.slot(uint32(s)))
		if atomic.CompareAndSwapUint32(st, statePending, stateGone) {
			backoff.Wake(st)
		}
	}
	c.cond.Broadcast()
}

// Close fails the calls in progress and later ones (as Fail) and closes
// the memfd. The mapping stays, so that a call still returning may read
// it.
func (c *Client) Close() error {
	c.Fail(errors.New("callq: closed"))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

// Server is the pager's side. It is not safe for concurrent use, except
// Answer, which any goroutine may call.
type Server struct {
	q    queue
	tail uint64
}

// Attach maps the queue of memfd fd (which it then owns) for the pager.
func Attach(fd int) (*Server, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("callq: fstat: %w", err)
	}
	size := int(st.Size)
	if size < offRing+line {
		unix.Close(fd)
		return nil, fmt.Errorf("callq: queue of %d bytes", size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("callq: mmap: %w", err)
	}
	q := queue{mem: mem}
	slots := int(atomic.LoadUint32(q.u32(offHeader + 4)))
	if atomic.LoadUint32(q.u32(offHeader)) != magic || slots < 1 {
		unix.Munmap(mem)
		return nil, errors.New("callq: not a call queue")
	}
	q.l = newLayout(slots)
	if q.l.size > size || q.l.ring != int(atomic.LoadUint32(q.u32(offHeader+8))) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("callq: queue of %d bytes for %d slots", size, slots)
	}
	return &Server{q: q}, nil
}

// Take stores the calls that arrived in calls and returns how many. It
// does not block.
func (s *Server) Take(calls []Call) int {
	n := 0
	for n < len(calls) {
		e := s.q.entry(s.tail)
		if atomic.LoadUint64(s.q.u64(e)) != s.tail+1 {
			break
		}
		slot := *s.q.u32(e + 8)
		if int(slot) >= s.q.l.slots {
			slot = 0 // a corrupt entry answers slot 0; the program never sends one
		}
		calls[n] = Call{Slot: slot, Kind: int64(*s.q.u64(e + 16)), ID: int64(*s.q.u64(e + 24))}
		s.tail++
		atomic.StoreUint64(s.q.u64(offTail), s.tail)
		n++
	}
	return n
}

// Pending reports whether a call is waiting to be taken.
func (s *Server) Pending() bool {
	return atomic.LoadUint64(s.q.u64(s.q.entry(s.tail))) == s.tail+1
}

// Answer completes the call in slot with code and msg (cut to MaxMessage
// bytes) and wakes its caller.
func (s *Server) Answer(slot uint32, code int64, msg string) {
	if int(slot) >= s.q.l.slots {
		return
	}
	so := s.q.slot(slot)
	n := copy(s.q.mem[so+msgOff:so+slotSize], msg)
	atomic.StoreUint64(s.q.u64(so+8), uint64(code))
	atomic.StoreUint32(s.q.u32(so+16), uint32(n))
	state := s.q.u32(so)
	if !atomic.CompareAndSwapUint32(state, statePending, stateDone) {
		return
	}
	if atomic.LoadUint32(s.q.u32(so+4)) != 0 {
		backoff.Wake(state)
	}
}
