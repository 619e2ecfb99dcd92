package qpbind

import (
	"context"
	"sync"
	"time"
)

// WaitCtx is the context a binding's Wait gives CQ.Wait, reused from wait
// to wait so that waiting does not allocate (but for a new channel after
// one was closed): it ends at the deadline, on Cancel (a completion on
// another device, a message to self, an earlier retransmission deadline)
// and on Kill (Close). Call Init before use.
type WaitCtx struct {
	mu       sync.Mutex
	ch       chan struct{}
	closed   bool
	err      error
	deadline time.Time
	armed    bool
	dead     bool
	timer    *time.Timer
}

var _ context.Context = (*WaitCtx)(nil)

// Init prepares w; call it once.
func (w *WaitCtx) Init() {
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
}

// Arm starts a wait of d and returns its done channel.
func (w *WaitCtx) Arm(d time.Duration) <-chan struct{} {
	w.mu.Lock()
	if w.ch == nil || w.closed {
		w.ch = make(chan struct{})
		w.closed, w.err = false, nil
	}
	w.deadline = time.Now().Add(d)
	w.armed = true
	if w.dead {
		w.closeLocked(context.Canceled)
	}
	ch := w.ch
	w.mu.Unlock()
	w.timer.Reset(d)
	return ch
}

// Disarm ends the current wait without closing its channel.
func (w *WaitCtx) Disarm() {
	w.timer.Stop()
	w.mu.Lock()
	w.armed = false
	w.mu.Unlock()
}

func (w *WaitCtx) fire() {
	w.mu.Lock()
	if w.armed {
		w.closeLocked(context.DeadlineExceeded)
	}
	w.mu.Unlock()
}

// Cancel ends the current wait, if any.
func (w *WaitCtx) Cancel() {
	w.mu.Lock()
	if w.armed {
		w.closeLocked(context.Canceled)
	}
	w.mu.Unlock()
}

// Kill ends the current wait and every later one at once.
func (w *WaitCtx) Kill() {
	w.mu.Lock()
	w.dead = true
	if w.armed {
		w.closeLocked(context.Canceled)
	}
	w.mu.Unlock()
	w.timer.Stop()
}

func (w *WaitCtx) closeLocked(err error) {
	if !w.closed {
		w.closed, w.err = true, err
		close(w.ch)
	}
}

// Deadline returns the end of the current wait.
func (w *WaitCtx) Deadline() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deadline, true
}

// Done returns the channel closed when the current wait ends.
func (w *WaitCtx) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

// Err returns why the current wait ended, or nil.
func (w *WaitCtx) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Value returns nil: the context carries no values.
func (w *WaitCtx) Value(any) any { return nil }
