// Package board is the barrier board of a host: a page of shared memory
// where the programs of a job whose ranks all run on one host meet at a
// barrier without their pagers, when none of them has anything to publish.
//
// Each arriving program adds itself to a counter with one atomic
// instruction, saying whether it is dirty (it has write notices to
// publish, or cannot tell); the last to arrive starts the counter's next
// generation, records whether anyone was dirty (the outcome) and wakes
// every sleeper with one futex wake. When the outcome is clean the barrier
// is over; when it is dirty every rank takes the full barrier through its
// pager, so that all of them agree. A dirty rank takes the full path at
// once, without waiting on the board, and the first one wakes the
// sleepers, which need not wait for the last arrival either: the outcome
// can only be dirty.
//
// Layout (little-endian words, each group on its own cache line):
//
//	header     magic, ranks
//	barrier    counter word (generation<<32 | outcome | dirty | count), sleepers
//	wait       the same, for the plain barrier (never dirty)
//	broken     non-zero once a rank gave up: every wait fails
//	slots      one per rank: (generation+1)<<32 | call-queue head at its
//	           last arrival at the barrier (see SetSlot); the rank's
//	           process id (SetPid)
//
// The counter word's logic is the pure function Step, so that it can be
// tested without processes.
package board

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/internal/backoff"
	"github.com/jiarun/jia/shmem/internal/procfd"
)

const (
	magic = 0x6a696162 // "jiab"
	line  = 64

	offHeader  = 0
	offBarrier = 1 * line
	offWait    = 2 * line
	offBroken  = 3 * line
	offSlots   = 4 * line
)

// The low half of a counter word.
const (
	countMask  = 1<<30 - 1
	dirtyBit   = 1 << 30 // someone of this generation arrived dirty
	outcomeBit = 1 << 31 // the previous generation ended dirty
)

// MaxRanks is the most ranks a board counts.
const MaxRanks = countMask

// heldSleep is how long a waiter sleeps with its Go P held before it
// sleeps in an ordinary system call (see backoff.SleepHeld and package
// callq's farHeldSleep).
const heldSleep = 5 * time.Millisecond

// checkEvery is how often a waiter asleep in an ordinary system call looks
// whether it should stop waiting (Counter.Await's stop).
const checkEvery = 50 * time.Millisecond

// ErrBroken is returned by the calls of a board that a rank gave up on.
var ErrBroken = errors.New("board: a rank left the barrier board")

// Arrival is what one arrival at a counter learned.
type Arrival struct {
	// Gen is the generation arrived at.
	Gen uint32
	// Last: this arrival completed the generation.
	Last bool
	// Dirty is the outcome of the generation, if Last: someone arrived
	// dirty.
	Dirty bool
}

// Step is the counter word after an arrival at word w of a counter of n
// ranks, dirty or not, and what the arrival learned.
func Step(w uint64, n int, dirty bool) (uint64, Arrival) {
	gen, lo := uint32(w>>32), uint32(w)
	count := lo&countMask + 1
	d := lo&dirtyBit != 0 || dirty
	if int(count) >= n {
		next := uint64(gen+1) << 32
		if d {
			next |= outcomeBit
		}
		return next, Arrival{Gen: gen, Last: true, Dirty: d}
	}
	lo = lo&outcomeBit | count
	if d {
		lo |= dirtyBit
	}
	return uint64(gen)<<32 | uint64(lo), Arrival{Gen: gen}
}

// Outcome returns the generation of counter word w and whether the
// generation before it ended dirty.
func Outcome(w uint64) (gen uint32, dirty bool) {
	return uint32(w >> 32), uint32(w)&outcomeBit != 0
}

// Board is a mapped board.
type Board struct {
	mem []byte
	fd  int
	n   int
}

func size(n int) int { return (offSlots + n*line + 4095) / 4096 * 4096 }

// Create makes a board for n ranks in a new memfd.
func Create(n int) (*Board, error) {
	if n < 1 || n > MaxRanks {
		return nil, fmt.Errorf("board: %d ranks", n)
	}
	fd, err := unix.MemfdCreate("jiarun-dsm-board", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("board: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size(n))); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("board: ftruncate: %w", err)
	}
	b, err := mapBoard(fd, n)
	if err != nil {
		return nil, err
	}
	atomic.StoreUint32(b.u32(offHeader+4), uint32(n))
	atomic.StoreUint32(b.u32(offHeader), magic)
	return b, nil
}

// Open maps the board of descriptor fd of process pid, made by Create
// for n ranks.
func Open(pid, fd, n int) (*Board, error) {
	f, bytes, err := procfd.Open(pid, fd, true)
	if err != nil {
		return nil, fmt.Errorf("board: %w", err)
	}
	if n < 1 || n > MaxRanks || int(bytes) != size(n) {
		unix.Close(f)
		return nil, fmt.Errorf("board: %d bytes for %d ranks", bytes, n)
	}
	b, err := mapBoard(f, n)
	if err != nil {
		return nil, err
	}
	if atomic.LoadUint32(b.u32(offHeader)) != magic || int(atomic.LoadUint32(b.u32(offHeader+4))) != n {
		b.Close()
		return nil, fmt.Errorf("board: process %d's descriptor %d is not a board of %d ranks", pid, fd, n)
	}
	return b, nil
}

func mapBoard(fd, n int) (*Board, error) {
	mem, err := unix.Mmap(fd, 0, size(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("board: mmap: %w", err)
	}
	return &Board{mem: mem, fd: fd, n: n}, nil
}

// FD returns the board's memfd, for Open in another process.
func (b *Board) FD() int { return b.fd }

// Close unmaps the board and closes its memfd.
func (b *Board) Close() error {
	err := unix.Close(b.fd)
	if merr := unix.Munmap(b.mem); err == nil {
		err = merr
	}
	if err != nil {
		return fmt.Errorf("board: close: %w", err)
	}
	return nil
}

func (b *Board) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&b.mem[off])) }
func (b *Board) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&b.mem[off])) }

// Barrier returns the counter of the coherence barrier.
func (b *Board) Barrier() Counter { return b.counter(offBarrier) }

// Wait returns the counter of the plain barrier.
func (b *Board) Wait() Counter { return b.counter(offWait) }

func (b *Board) counter(off int) Counter {
	return Counter{w: b.u64(off), gen: b.u32(off + 4), sleepers: b.u32(off + 8), broken: b.u32(offBroken), n: b.n}
}

// Break marks the board broken and wakes every waiter: their waits and
// every later arrival fail with ErrBroken.
func (b *Board) Break() {
	atomic.StoreUint32(b.u32(offBroken), 1)
	for _, off := range []int{offBarrier, offWait} {
		backoff.Wake(b.u32(off + 4))
	}
}

// SetSlot records rank's arrival at generation gen of the barrier, with
// its call queue's head then (the calls it made before).
func (b *Board) SetSlot(rank int, gen, head uint32) {
	atomic.StoreUint64(b.u64(offSlots+rank*line), uint64(gen+1)<<32|uint64(head))
}

// Slot returns what rank recorded at its last arrival (SetSlot), and
// whether it ever arrived.
func (b *Board) Slot(rank int) (gen, head uint32, ok bool) {
	v := atomic.LoadUint64(b.u64(offSlots + rank*line))
	return uint32(v>>32) - 1, uint32(v), v>>32 != 0
}

// SetPid records the process id of rank's program (see Gone).
func (b *Board) SetPid(rank, pid int) {
	atomic.StoreUint32(b.u32(offSlots+rank*line+8), uint32(pid))
}

// Gone returns a rank whose program recorded its process id (SetPid) and
// has ended since, or -1: a rank that died without breaking the board
// (Break), which its waiters must not wait for.
func (b *Board) Gone() int {
	for r := 0; r < b.n; r++ {
		pid := int(atomic.LoadUint32(b.u32(offSlots + r*line + 8)))
		if pid > 0 && unix.Kill(pid, 0) == unix.ESRCH {
			return r
		}
	}
	return -1
}

// Fence orders every memory access of the caller before it before every
// one after it (a locked instruction): in particular the program's writes
// to shared memory before its loads of the pager's flags.
func Fence() {
	var x uint32
	atomic.AddUint32(&x, 1)
}

// Counter is one of a board's counters.
type Counter struct {
	w        *uint64
	gen      *uint32 // the high half of w
	sleepers *uint32
	broken   *uint32
	n        int
}

// Arrive adds the caller to the counter's current generation, dirty or
// not. The last arrival starts the next generation and wakes the
// sleepers of this one.
func (c Counter) Arrive(dirty bool) (Arrival, error) {
	if atomic.LoadUint32(c.broken) != 0 {
		return Arrival{}, ErrBroken
	}
	for {
		w := atomic.LoadUint64(c.w)
		nw, a := Step(w, c.n, dirty)
		if !atomic.CompareAndSwapUint64(c.w, w, nw) {
			continue
		}
		first := dirty && !a.Last && uint32(w)&dirtyBit == 0
		if (a.Last || first) && atomic.LoadUint32(c.sleepers) != 0 {
			backoff.Wake(c.gen)
		}
		return a, nil
	}
}

// Gen returns the counter's current generation and the outcome of the
// one before.
func (c Counter) Gen() (gen uint32, dirty bool) { return Outcome(atomic.LoadUint64(c.w)) }

// settled reports the outcome of generation gen if it is known: the
// generation is complete, or someone arrived dirty.
func (c Counter) settled(gen uint32) (dirty, ok bool) {
	w := atomic.LoadUint64(c.w)
	if g, d := Outcome(w); g != gen {
		return d, true
	}
	if uint32(w)&dirtyBit != 0 {
		return true, true
	}
	return false, false
}

// Await waits until the outcome of generation gen is known and returns
// it: until the generation is complete, or someone arrived dirty.
// It polls as p says first (see backoff.Waiter), then sleeps on a futex;
// every few tens of milliseconds of sleep it calls stop, if not nil, and
// gives up with its error.
func (c Counter) Await(gen uint32, p backoff.Policy, stop func() error) (dirty bool, err error) {
	var w backoff.Waiter
	w.Reset(p)
	held := true
	for {
		if d, ok := c.settled(gen); ok {
			return d, nil
		}
		if atomic.LoadUint32(c.broken) != 0 {
			return false, ErrBroken
		}
		if w.Pause() {
			continue
		}
		atomic.AddUint32(c.sleepers, 1)
		if _, ok := c.settled(gen); !ok && atomic.LoadUint32(c.broken) == 0 {
			if held {
				backoff.SleepHeld(c.gen, gen, heldSleep)
				held = false
			} else {
				backoff.Sleep(c.gen, gen, checkEvery)
			}
		}
		atomic.AddUint32(c.sleepers, ^uint32(0))
		if _, ok := c.settled(gen); !ok && !held && stop != nil {
			if err := stop(); err != nil {
				return false, err
			}
		}
	}
}
