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
//	quiet        1 while a call may be posted without waiting; then 1 while
//	             a barrier would publish nothing (written by the pager)
//	head, tail   request ring positions (written by the program, the pager)
//	ring         entries of 32 bytes: stamp (position+1 once written), slot
//	             (NoSlot: nobody waits for an answer), kind, id
//	slots        one per call in progress: state (futex word), sleeping, code,
//	             message length, far (the answer waits for another rank), message
//	free locks   64 words, each claims<<34 | lock id<<2 | state: state 1 while
//	             the pager offers the lock (Offer), 2 while the program holds
//	             it by a claim (Claim); claims counts the claims since the
//	             offer; 0 for none (written by both)
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
	"time"
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
	offQuiet  = 1 * line
	offHead   = 2 * line
	offTail   = 3 * line
	offRing   = 4 * line
)

// heldSleep is how long a caller sleeps with its Go P held before it
// sleeps in an ordinary system call (see backoff.SleepHeld): long enough
// for most answers of its pager, short enough not to stall the program's
// other goroutines (and a garbage collection) for long.
const heldSleep = time.Millisecond

// farHeldSleep is heldSleep for an answer that waits for another rank (a
// lock grant, a barrier; see Server.Far). On a host whose ranks outnumber
// its processors such an answer often takes longer than heldSleep, and the
// sleep in an ordinary system call that follows costs the program two or
// three more wake-ups of its threads (the runtime hands the P to another
// thread, which finds nothing to do, and takes it back at the wake-up).
// The program's other goroutines wait meanwhile, as they would for any
// call, but for 5 ms at most.
const farHeldSleep = 5 * time.Millisecond

// Slot states.
const (
	stateFree    = 0
	statePending = 1
	stateDone    = 2
	stateGone    = 3 // the pager can no longer answer
)

// ErrGone is returned by Call when the pager can no longer answer.
var ErrGone = errors.New("callq: the pager is gone")

// layout computes the offsets of a queue with n slots and twice as many
// ring entries, rounded up to a power of two: every call in progress holds
// a slot, and may have an announcement (Client.Announce) before it in the
// ring, so the entries the pager has not taken never outnumber the ring.
type layout struct {
	slots, ring int
	slotsOff    int
	freeOff     int // the free-lock words
	size        int
}

// Free-lock words (Server.Offer, Client.Claim).
const (
	freeWords   = 64
	freeOffered = 1
	freeClaimed = 2
)

func newLayout(slots int) layout {
	ring := 1
	for ring < 2*slots {
		ring <<= 1
	}
	l := layout{slots: slots, ring: ring}
	l.slotsOff = offRing + ring*entrySize
	l.slotsOff = (l.slotsOff + line - 1) / line * line
	l.freeOff = l.slotsOff + slots*slotSize
	l.size = l.freeOff + freeWords*8
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

// free returns the free-lock word of lock id.
func (q *queue) free(id int64) *uint64 { return q.u64(q.l.freeOff + int(uint64(id)%freeWords)*8) }

// freeID reports whether lock id fits a free-lock word.
func freeID(id int64) bool { return id >= 0 && id < 1<<32 }

// freeOf reports whether free-lock word v is about lock id, and its state.
func freeOf(v uint64, id int64) (state uint64, ok bool) {
	return v & 3, v&3 != 0 && (v>>2)&(1<<32-1) == uint64(id)
}

// Claimed marks the kind (below Claimed) of a call made under a claim
// (Client.Claim): the Lock posted after the claim and the Unlock that
// ends that hold.
const Claimed = 1 << 7

// Call is one synchronisation call: Kind and ID are the control protocol's
// (a protocol.EventKind and a lock or condition variable), Slot is where
// the answer goes.
type Call struct {
	Slot uint32
	Kind int64
	ID   int64
	Pos  uint64 // position in the ring: the calls' order
}

// NoSlot is the Slot of a call nobody waits for an answer to (Announce).
const NoSlot = ^uint32(0)

// Client is the program's side.
type Client struct {
	q      queue
	fd     int
	policy backoff.Policy
	ring   func()

	mu     sync.Mutex
	cond   *sync.Cond
	free   []uint32
	posted []posted // slots of calls posted without waiting, not yet reaped
	head   uint64
	// An entry written before the next call's (Announce).
	announce       bool
	annKind, annID int64
	failed         error
	lost           error // the failure of a posted call, reported by the next call
}

// posted is a call made with Post, whose answer nobody waits for.
type posted struct {
	slot     uint32
	kind, id int64
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
// the queue's slots they wait for a free one. The failure of an earlier
// posted call (Post) is returned as err, before this call is made.
func (c *Client) Call(kind, id int64) (code int64, msg string, err error) {
	s, err := c.enqueue(kind, id, false)
	if err != nil {
		return 0, "", err
	}
	so := c.q.slot(s)
	state := c.q.u32(so)

	var w backoff.Waiter
	w.Reset(c.policy)
	sleeping := c.q.u32(so + 4)
	far := c.q.u32(so + 20)
	for {
		st := atomic.LoadUint32(state)
		if st != statePending {
			break
		}
		// An answer that waits for another rank is a pager's round trip
		// away: polling for it would only take a processor from the
		// pagers that carry it (see Server.Far).
		if atomic.LoadUint32(far) == 0 && w.Pause() {
			continue
		}
		atomic.StoreUint32(sleeping, 1)
		if atomic.LoadUint32(state) == statePending {
			// Most answers come within heldSleep: wait for them with the
			// P held (no hand-over of the P), then release it.
			backoff.SleepHeld(state, statePending, heldSleep)
		}
		if atomic.LoadUint32(state) == statePending && atomic.LoadUint32(far) != 0 {
			// Told meanwhile, if not before, that it waits for another rank.
			backoff.SleepHeld(state, statePending, farHeldSleep-heldSleep)
		}
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

// Post makes a call without waiting for its answer; the pager answers
// it in turn, after every call made before it. Its slot is reclaimed by a
// later Call or Post, and a failure in its answer (a code other than 0) is
// returned by the next Call or Post as an error naming the call. It is for
// calls that cannot fail when the program makes them.
func (c *Client) Post(kind, id int64) error {
	_, err := c.enqueue(kind, id, true)
	return err
}

// Claim takes lock id if the pager offers it (Server.Offer): the lock is
// kept by this rank and free, and its Lock changes nothing in the
// program's memory while the pager is quiet. The caller then holds the
// lock and must post its Lock, with kind|Claimed, at once, and end the
// hold with an Unlock of kind|Claimed followed by Unclaim. Claim does not
// check Quiet.
func (c *Client) Claim(id int64) bool {
	if !freeID(id) {
		return false
	}
	w := c.q.free(id)
	v := atomic.LoadUint64(w)
	if st, ok := freeOf(v, id); !ok || st != freeOffered {
		return false
	}
	return atomic.CompareAndSwapUint64(w, v, (v+1<<34)&^3|freeClaimed)
}

// Unclaim ends a hold of lock id taken by Claim, after its Unlock was
// posted or made, so that the lock can be claimed again. It reports
// whether the lock is still offered (false: the pager withdrew it).
func (c *Client) Unclaim(id int64) bool {
	if !freeID(id) {
		return false
	}
	w := c.q.free(id)
	v := atomic.LoadUint64(w)
	if st, ok := freeOf(v, id); !ok || st != freeClaimed {
		return false
	}
	return atomic.CompareAndSwapUint64(w, v, v&^3|freeOffered)
}

// Quiet reports whether the pager says that a call may be posted (Post)
// instead of waited for now (see Server.SetQuiet).
func (c *Client) Quiet() bool { return atomic.LoadUint32(c.q.u32(offQuiet)) == 1 }

// Clean reports whether the pager says that a barrier would publish
// nothing now (see Server.SetClean).
func (c *Client) Clean() bool { return atomic.LoadUint32(c.q.u32(offQuiet+4)) == 1 }

// Head returns the position of the next call in the ring: every call
// made before has a lower one.
func (c *Client) Head() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.head
}

// Announce makes the next call (Call or Post) write an entry of kind and
// id, with NoSlot, before its own, without an answer: something the
// program did that the pager must learn of in its place among the calls.
// A later Announce before that call replaces it.
func (c *Client) Announce(kind, id int64) {
	c.mu.Lock()
	c.announce, c.annKind, c.annID = true, kind, id
	c.mu.Unlock()
}

// enqueue takes a free slot, writes a ring entry naming the call and
// rings the pager. A posted call's slot is remembered for reaping.
func (c *Client) enqueue(kind, id int64, post bool) (uint32, error) {
	c.mu.Lock()
	for c.failed == nil && c.lost == nil {
		if len(c.posted) > 0 {
			c.reap()
		}
		if len(c.free) > 0 || c.lost != nil {
			break
		}
		if len(c.posted) > 0 {
			// Posted calls free their slots without telling anyone.
			c.mu.Unlock()
			backoff.Yield()
			c.mu.Lock()
			continue
		}
		c.cond.Wait()
	}
	if c.failed != nil {
		err := c.failed
		c.mu.Unlock()
		return 0, err
	}
	if c.lost != nil {
		err := c.lost
		c.lost = nil
		c.mu.Unlock()
		return 0, err
	}
	s := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	atomic.StoreUint32(c.q.u32(c.q.slot(s)+20), 0) // not far (yet)
	atomic.StoreUint32(c.q.u32(c.q.slot(s)), statePending)
	if post {
		c.posted = append(c.posted, posted{slot: s, kind: kind, id: id})
	}
	if c.announce {
		c.announce = false
		c.write(NoSlot, c.annKind, c.annID)
	}
	c.write(s, kind, id)
	ring := c.ring
	c.mu.Unlock()
	if ring != nil {
		ring()
	}
	return s, nil
}

// write writes the next ring entry. c.mu is held.
func (c *Client) write(s uint32, kind, id int64) {
	i := c.head
	c.head++
	e := c.q.entry(i)
	*c.q.u32(e + 8) = s
	*c.q.u64(e + 16) = uint64(kind)
	*c.q.u64(e + 24) = uint64(id)
	atomic.StoreUint64(c.q.u64(e), i+1) // publishes the entry
	atomic.StoreUint64(c.q.u64(offHead), i+1)
}

// reap frees the slots of the posted calls the pager answered, and keeps
// the first failure among them for the next call. c.mu is held.
func (c *Client) reap() {
	keep := c.posted[:0]
	for _, p := range c.posted {
		so := c.q.slot(p.slot)
		if atomic.LoadUint32(c.q.u32(so)) != stateDone {
			keep = append(keep, p)
			continue
		}
		if code := int64(atomic.LoadUint64(c.q.u64(so + 8))); code != 0 && c.lost == nil {
			n := min(int(atomic.LoadUint32(c.q.u32(so+16))), MaxMessage)
			c.lost = fmt.Errorf("callq: call %d(%d), posted earlier, failed with code %d: %s",
				p.kind, p.id, code, c.q.mem[so+msgOff:so+msgOff+n])
		}
		atomic.StoreUint32(c.q.u32(so), stateFree)
		c.free = append(c.free, p.slot)
	}
	c.posted = keep
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
	q     queue
	tail  uint64
	quiet bool // as last set
	clean bool // as last set
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
		if int(slot) >= s.q.l.slots && slot != NoSlot {
			slot = 0 // a corrupt entry answers slot 0; the program never sends one
		}
		calls[n] = Call{Slot: slot, Kind: int64(*s.q.u64(e + 16)), ID: int64(*s.q.u64(e + 24)), Pos: s.tail}
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

// SetQuiet tells the program whether it may post calls (Client.Post)
// instead of waiting for them. The pager sets it only while a posted call
// would change nothing the program's next steps depend on, and clears it
// before it lets the program go on in any way that changes that.
func (s *Server) SetQuiet(quiet bool) { s.setFlag(&s.quiet, quiet, offQuiet) }

// SetClean tells the program whether a barrier would publish nothing now
// (no write notice, nothing to collect), so that it may meet the others
// on a barrier board instead of calling. The pager clears it before it
// handles anything that could change that, and sets it again after; like
// every store here it is a full memory barrier, so that the program,
// which fences its own writes before it loads the flag, either sees the
// flag cleared or had its writes seen by whatever the pager does next.
func (s *Server) SetClean(clean bool) { s.setFlag(&s.clean, clean, offQuiet+4) }

// setFlag publishes v in the word at off when it differs from *cur, the
// last value published there.
func (s *Server) setFlag(cur *bool, v bool, off int) {
	if v == *cur {
		return
	}
	*cur = v
	w := uint32(0)
	if v {
		w = 1
	}
	atomic.StoreUint32(s.q.u32(off), w)
}

// Offer lets the program claim lock id (Client.Claim) and post its Lock
// instead of waiting for it. It reports whether the lock is offered: a
// lock shares its word with others (id mod 64), and only one is offered
// at a time.
func (s *Server) Offer(id int64) bool {
	if !freeID(id) {
		return false
	}
	return atomic.CompareAndSwapUint64(s.q.free(id), 0, uint64(id)<<2|freeOffered)
}

// Withdraw ends the offer of lock id (Offer) and returns how many times
// the program claimed it since the offer, and whether it holds it now by
// a claim. The calls of those holds already made (with Claimed in their
// kind) are in the queue, the program's Lock of the last claim possibly
// not yet.
func (s *Server) Withdraw(id int64) (claims uint32, held bool) {
	if !freeID(id) {
		return 0, false
	}
	w := s.q.free(id)
	for {
		v := atomic.LoadUint64(w)
		st, ok := freeOf(v, id)
		if !ok {
			return 0, false
		}
		if atomic.CompareAndSwapUint64(w, v, 0) {
			return uint32(v >> 34), st == freeClaimed
		}
	}
}

// Far tells the caller in slot that its answer waits for another rank
// (a lock grant, a barrier): it stops polling and sleeps until Answer.
func (s *Server) Far(slot uint32) {
	if int(slot) < s.q.l.slots {
		atomic.StoreUint32(s.q.u32(s.q.slot(slot)+20), 1)
	}
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
