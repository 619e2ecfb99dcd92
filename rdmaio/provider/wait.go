package provider

import (
	"context"
	"runtime"
	"time"

	"github.com/jiarun/jia/internal/hostcpu"

	"github.com/jiarun/jia/rdmaio"
)

// WaitPolicy is how long a waiter spins and then yields before it sleeps.
// Spinning has the lowest latency (tens of nanoseconds between cores) but
// takes a processor; yielding lets other threads and processes run at a
// cost of about a microsecond; sleeping (futex, epoll) costs several
// microseconds per wake-up but takes no processor at all.
type WaitPolicy struct {
	// Spin is how long to poll without yielding.
	Spin time.Duration
	// Yield is how long to poll and yield the processor after each poll,
	// after spinning.
	Yield time.Duration
	// Sleep bounds one sleep, after which the waiter polls again: it is a
	// guard against lost wake-ups and lets time-based rules (retry timers)
	// run while nobody else makes progress.
	Sleep time.Duration
}

// DefaultWaitPolicy returns the policy for a rank that shares this host with
// localSize-1 others (0 = unknown). When the ranks fit on the processors the
// waiter spins for 50 µs and yields for 1 ms; when they outnumber the
// processors, spinning only steals time slices from the rank it waits for,
// so the waiter spins for 1 µs and then yields (as Open MPI does with
// mpi_yield_when_idle).
func DefaultWaitPolicy(localSize int) WaitPolicy {
	p := WaitPolicy{Spin: 50 * time.Microsecond, Yield: time.Millisecond, Sleep: time.Millisecond}
	if localSize > hostcpu.Count() {
		p.Spin = time.Microsecond
		p.Yield = 2 * time.Millisecond
	}
	return p
}

// Phase is what a waiter does next.
type Phase uint8

// Phases of a wait, in order.
const (
	PhaseSpin Phase = iota
	PhaseYield
	PhaseSleep
	// PhaseExpired follows any phase once the deadline given to
	// Backoff.SetDeadline has passed: the wait is over.
	PhaseExpired
)

// Backoff tracks one wait through the phases of a WaitPolicy. The zero value
// is not usable; call Reset before each wait. It does not allocate.
type Backoff struct {
	p        WaitPolicy
	start    time.Time
	deadline time.Time
	n        uint32
	phase    Phase
	hasDL    bool
}

// Reset starts a new wait under policy p, without a deadline.
func (b *Backoff) Reset(p WaitPolicy) {
	b.p = p
	b.n = 0
	b.hasDL = false
	b.phase = PhaseSpin
	if p.Spin <= 0 {
		b.phase = PhaseYield
		if p.Yield <= 0 {
			b.phase = PhaseSleep
		}
	}
	b.start = time.Now()
}

// SetDeadline ends the wait begun by the last Reset at t: from the first
// clock reading of Next at or after t on, Next returns PhaseExpired.
func (b *Backoff) SetDeadline(t time.Time) {
	b.deadline = t
	b.hasDL = true
}

// Next returns the phase for the next iteration of the wait loop. It reads
// the clock every 8 calls while spinning (a wait loop iteration polls, which
// costs far more than reading the clock), every 4 while yielding and, when
// the wait has a deadline, every call while sleeping (a sleep costs far more
// still); a reading at or after the deadline expires the wait.
func (b *Backoff) Next() Phase {
	b.n++
	var now time.Time
	switch b.phase {
	case PhaseSpin:
		if b.n&7 != 0 {
			return PhaseSpin
		}
		now = time.Now()
		if now.Sub(b.start) >= b.p.Spin {
			b.phase = PhaseYield
			if b.p.Yield <= 0 {
				b.phase = PhaseSleep
			}
		}
	case PhaseYield:
		if b.n&3 != 0 {
			return PhaseYield
		}
		now = time.Now()
		if now.Sub(b.start) >= b.p.Spin+b.p.Yield {
			b.phase = PhaseSleep
		}
	case PhaseSleep:
		if !b.hasDL {
			return PhaseSleep
		}
		now = time.Now()
	default:
		return b.phase
	}
	if b.hasDL && !now.Before(b.deadline) {
		b.phase = PhaseExpired
	}
	return b.phase
}

// WaitableCQ is a provider's completion queue as WaitCQ drives it.
type WaitableCQ interface {
	// Poll is the CQ's Poll: it never blocks.
	Poll(wc []rdmaio.WorkCompletion) int
	// WaitClosed returns nil while the CQ is open, else the error its
	// Wait returns (wrapping rdmaio.ErrClosed).
	WaitClosed() error
	// WaitYield gives the processor away in the yield phase, after
	// runtime.Gosched (a provider may do nothing more).
	WaitYield()
	// WaitSleep blocks until completions may have arrived, ctx is done,
	// ctx's deadline comes or bound (the policy's sleep bound) passes,
	// and returns what it polled; an error ends the wait. It need not
	// return an error at the deadline (WaitCQ does), but must not sleep
	// past it.
	WaitSleep(ctx context.Context, wc []rdmaio.WorkCompletion, bound time.Duration) (int, error)
}

// SleepBound bounds one sleep of CQ.Sleep (rdmaio.SleepCQ) when its
// context has no nearer deadline, for providers whose completions always
// wake a sleeper and whose timers run without it (a service goroutine,
// the hardware). It is long: every wake-up of a thread that finds nothing
// costs the processes of the host (the Go runtime's monitor, for one,
// then watches the threads closely for a while).
const SleepBound = 100 * time.Millisecond

// SleepCQ is the body of every provider's CQ.Sleep (rdmaio.SleepCQ):
// WaitCQ without spinning and yielding, with sleeps of up to bound (a
// provider whose retry timers run in its waiters' polls passes its wait
// policy's sleep bound, others SleepBound).
func SleepCQ[C WaitableCQ](ctx context.Context, c C, bound time.Duration, wc []rdmaio.WorkCompletion) (int, error) {
	return WaitCQ(ctx, c, WaitPolicy{Sleep: bound}, wc)
}

// WaitCQ is the body of every provider's CQ.Wait: it polls c until a
// completion arrives, ctx is done (ctx.Err()), ctx's deadline passes
// (context.DeadlineExceeded, whether or not Done is closed yet: see
// rdmaio.CQ) or c is closed, spinning, then yielding, then sleeping as
// policy says. It notices the deadline at Backoff.Next's clock readings
// (every 8 polls while spinning, every 4 while yielding, after every sleep).
// wc must not be empty. It does not allocate.
func WaitCQ[C WaitableCQ](ctx context.Context, c C, policy WaitPolicy, wc []rdmaio.WorkCompletion) (int, error) {
	if n := c.Poll(wc); n > 0 {
		return n, nil
	}
	var b Backoff
	b.Reset(policy)
	if dl, ok := ctx.Deadline(); ok {
		b.SetDeadline(dl)
	}
	done := ctx.Done()
	for i := 0; ; i++ {
		if n := c.Poll(wc); n > 0 {
			return n, nil
		}
		if err := c.WaitClosed(); err != nil {
			return 0, err
		}
		if done != nil && i&7 == 0 {
			select {
			case <-done:
				return 0, ctx.Err()
			default:
			}
		}
		switch b.Next() {
		case PhaseSpin:
		case PhaseYield:
			runtime.Gosched()
			c.WaitYield()
		case PhaseSleep:
			if n, err := c.WaitSleep(ctx, wc, policy.Sleep); n > 0 || err != nil {
				return n, err
			}
		case PhaseExpired:
			return 0, context.DeadlineExceeded
		}
	}
}
