package provider

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// TestBackoffDeadline: a wait with a deadline expires at the first clock
// reading of Next after it, in every phase, and stays expired; Reset drops
// the deadline.
func TestBackoffDeadline(t *testing.T) {
	past := time.Now().Add(-time.Millisecond)
	for _, p := range []WaitPolicy{
		{Spin: time.Hour, Yield: time.Hour, Sleep: time.Millisecond},
		{Yield: time.Hour, Sleep: time.Millisecond},
		{Sleep: time.Millisecond},
	} {
		var b Backoff
		b.Reset(p)
		b.SetDeadline(past)
		calls := 0
		for b.Next() != PhaseExpired {
			if calls++; calls > 8 {
				t.Fatalf("policy %+v: not expired after %d calls", p, calls)
			}
		}
		if b.Next() != PhaseExpired {
			t.Fatalf("policy %+v: expired, then not", p)
		}
		b.Reset(p)
		for range 64 {
			if b.Next() == PhaseExpired {
				t.Fatalf("policy %+v: expired after Reset without a deadline", p)
			}
		}
	}
}

// idleCQ is a WaitableCQ on which nothing ever completes; its sleeps keep
// the context's deadline, as every provider's do.
type idleCQ struct{ sleeps atomic.Int64 }

func (*idleCQ) Poll([]rdmaio.WorkCompletion) int { return 0 }
func (*idleCQ) WaitClosed() error                { return nil }
func (*idleCQ) WaitYield()                       {}

func (c *idleCQ) WaitSleep(ctx context.Context, _ []rdmaio.WorkCompletion, bound time.Duration) (int, error) {
	c.sleeps.Add(1)
	d := bound
	if dl, ok := ctx.Deadline(); ok {
		d = max(min(d, time.Until(dl)), time.Microsecond)
	}
	time.Sleep(d)
	return 0, nil
}

// openCtx is a context whose Done never closes: its deadline is its only
// end.
type openCtx struct {
	context.Context
	deadline time.Time
	done     chan struct{}
}

func (c *openCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *openCtx) Done() <-chan struct{}       { return c.done }
func (c *openCtx) Err() error                  { return nil }

// TestWaitCQDeadline: WaitCQ and SleepCQ return context.DeadlineExceeded
// at (never before) a deadline whose context's Done never closes, without
// allocating, and a cancelled context still ends a wait with its error.
func TestWaitCQDeadline(t *testing.T) {
	c := new(idleCQ)
	wc := make([]rdmaio.WorkCompletion, 1)
	ctx := &openCtx{Context: context.Background(), done: make(chan struct{})}
	waits := map[string]func() (int, error){
		"WaitCQ": func() (int, error) {
			return WaitCQ(ctx, c, WaitPolicy{Spin: 10 * time.Microsecond, Yield: 100 * time.Microsecond, Sleep: time.Millisecond}, wc)
		},
		"SleepCQ": func() (int, error) { return SleepCQ(ctx, c, time.Hour, wc) },
	}
	for name, wait := range waits {
		for _, d := range []time.Duration{-time.Millisecond, 0, 5 * time.Microsecond, 50 * time.Microsecond, 2 * time.Millisecond} {
			ctx.deadline = time.Now().Add(d)
			n, err := wait()
			if now := time.Now(); now.Before(ctx.deadline) {
				t.Fatalf("%s with a deadline in %v returned %v early", name, d, ctx.deadline.Sub(now))
			}
			if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s with a deadline in %v: %d, %v", name, d, n, err)
			}
		}
		if allocs := testing.AllocsPerRun(20, func() {
			ctx.deadline = time.Now().Add(20 * time.Microsecond)
			if _, err := wait(); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: %v", name, err)
			}
		}); allocs != 0 {
			t.Fatalf("%s that ends at its deadline allocates %.1f times", name, allocs)
		}
	}
	if c.sleeps.Load() == 0 {
		t.Fatalf("no wait reached its sleep phase")
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := WaitCQ(cctx, c, DefaultWaitPolicy(1), wc); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitCQ with a cancelled context: %v", err)
	}
}
