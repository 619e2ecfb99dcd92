package qpbind

import (
	"context"
	"errors"
	"sync"
	"time"
)

// WaitCtx is the context a binding's Wait gives CQ.Wait (or SleepCQ.Sleep),
// reused from wait to wait so that waiting does not allocate. Its deadline
// is the end of the current wait, which the CQ keeps by itself
// (rdmaio.CQ.Wait returns context.DeadlineExceeded once it passes), so Done
// stays open at the deadline and the next wait reuses the channel. Done
// closes only on Cancel (a completion on another device, a message to self,
// an earlier retransmission deadline) and on Kill (Close); only the wait
// after a cancelled one makes a new channel. The zero value is ready for
// use. Arm, Disarm and Sleep are for one waiter at a time; Cancel and Kill
// may come from any goroutine.
type WaitCtx struct {
	mu       sync.Mutex
	ch       chan struct{}
	closed   bool
	deadline time.Time
	armed    bool
	dead     bool
	timer    *time.Timer // Sleep's, made by its first call
}

var _ context.Context = (*WaitCtx)(nil)

// Arm starts a wait of d and returns its done channel, which closes only if
// the wait is cancelled (Cancel, Kill), not at its deadline.
func (w *WaitCtx) Arm(d time.Duration) <-chan struct{} {
	w.mu.Lock()
	if w.ch == nil || w.closed {
		w.ch = make(chan struct{})
		w.closed = false
	}
	w.deadline = time.Now().Add(d)
	w.armed = true
	if w.dead {
		w.closeLocked()
	}
	ch := w.ch
	w.mu.Unlock()
	return ch
}

// Disarm ends the current wait without closing its channel: a Cancel from
// now on does nothing.
func (w *WaitCtx) Disarm() {
	w.mu.Lock()
	w.armed = false
	w.mu.Unlock()
}

// Sleep blocks until the current wait's deadline passes or the wait is
// cancelled: the wait of a binding that has no CQ to wait on. It does not
// allocate after its first call.
func (w *WaitCtx) Sleep() {
	w.mu.Lock()
	ch, d := w.ch, time.Until(w.deadline)
	w.mu.Unlock()
	if d <= 0 {
		return
	}
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d)
	}
	select {
	case <-ch:
	case <-w.timer.C:
	}
	w.timer.Stop()
}

// Cancel ends the current wait, if any.
func (w *WaitCtx) Cancel() {
	w.mu.Lock()
	if w.armed {
		w.closeLocked()
	}
	w.mu.Unlock()
}

// Kill ends the current wait and every later one at once.
func (w *WaitCtx) Kill() {
	w.mu.Lock()
	w.dead = true
	if w.armed {
		w.closeLocked()
	}
	w.mu.Unlock()
}

func (w *WaitCtx) closeLocked() {
	if !w.closed {
		w.closed = true
		close(w.ch)
	}
}

// Deadline returns the end of the current wait.
func (w *WaitCtx) Deadline() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deadline, true
}

// Done returns the channel closed when the current wait is cancelled.
func (w *WaitCtx) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// Err returns context.Canceled once the current wait was cancelled, else
// nil, also after its deadline: the CQ reports that itself.
func (w *WaitCtx) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return context.Canceled
	}
	return nil
}

// Failed reports whether err, returned by a CQ's Wait or Sleep on w,
// means the wait failed: not an end at the deadline (the CQ reports it
// with context.DeadlineExceeded) nor a cancelled wait.
func (w *WaitCtx) Failed(err error) bool {
	return err != nil && !errors.Is(err, context.DeadlineExceeded) && w.Err() == nil
}

// Value returns nil: the context carries no values.
func (w *WaitCtx) Value(any) any { return nil }
