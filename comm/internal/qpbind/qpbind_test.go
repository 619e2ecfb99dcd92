package qpbind

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReaderBounds(t *testing.T) {
	r := NewReader([]byte{1, 2, 0, 3, 0, 0, 0})
	if r.U8() != 1 || r.U16() != 2 || r.U32() != 3 || !r.OK() || r.Left() != 0 {
		t.Fatalf("decoded wrongly")
	}
	if r.U64() != 0 || r.OK() {
		t.Fatalf("a read past the end must yield zero and mark the reader bad")
	}
}

// runHandshake runs the handshake on n in-process ranks; fail names the
// rank whose setup fails (-1: none) and bad the rank whose connect fails.
func runHandshake(n, fail, bad int) []error {
	ex := LocalExchange(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := Handshake{Exchange: ex[r], CardKey: "c", ReadyKey: "r", Magic: "TSTE", Size: n,
				Errorf: func(f string, a ...any) error { return fmt.Errorf("rank %d: "+f, append([]any{r}, a...)...) }}
			var setup error
			if r == fail {
				setup = errors.New("no device")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs[r] = h.Run(ctx, []byte{byte(r)}, setup, func(cards [][]byte) error {
				for j, c := range cards {
					if err := h.RemoteError(j, c); err != nil {
						return err
					}
					if len(c) != 1 || int(c[0]) != j {
						return fmt.Errorf("card of rank %d is %v", j, c)
					}
				}
				if r == bad {
					return errors.New("cannot connect")
				}
				return nil
			})
		}()
	}
	wg.Wait()
	return errs
}

func TestHandshake(t *testing.T) {
	for r, err := range runHandshake(3, -1, -1) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	// A setup failure on rank 1 fails every rank: rank 1 with its own
	// error, the others naming rank 1.
	for r, err := range runHandshake(3, 1, -1) {
		if err == nil || (r != 1 && !strings.Contains(err.Error(), "rank 1 failed")) || !strings.Contains(err.Error(), "no device") {
			t.Errorf("rank %d after rank 1's setup failed: %v", r, err)
		}
	}
	// A connect failure on rank 2 fails every rank too.
	for r, err := range runHandshake(3, -1, 2) {
		if err == nil || !strings.Contains(err.Error(), "cannot connect") {
			t.Errorf("rank %d after rank 2 failed to connect: %v", r, err)
		}
	}
}

// TestWaitCtx: a wait's channel stays open at its deadline and is reused by
// the next wait (nothing allocated); Sleep ends at the deadline or on
// Cancel; a cancelled wait's channel closes and the next wait gets a new
// one; after Kill every wait ends at once.
func TestWaitCtx(t *testing.T) {
	var w WaitCtx // the zero value is ready
	if w.Err() != nil {
		t.Fatalf("err %v before any wait", w.Err())
	}
	done := w.Arm(time.Millisecond)
	dl, ok := w.Deadline()
	if !ok {
		t.Fatalf("an armed wait has no deadline")
	}
	w.Sleep()
	if now := time.Now(); now.Before(dl) {
		t.Fatalf("Sleep returned %v before the deadline", dl.Sub(now))
	}
	select {
	case <-done:
		t.Fatalf("the channel closed at the deadline")
	default:
	}
	if w.Err() != nil {
		t.Fatalf("err %v after the deadline", w.Err())
	}
	w.Disarm()
	if again := w.Arm(time.Microsecond); again != done {
		t.Fatalf("the wait after one that ended at its deadline has a new channel")
	}
	w.Disarm()
	if n := testing.AllocsPerRun(100, func() {
		w.Arm(time.Microsecond)
		w.Sleep()
		w.Disarm()
	}); n != 0 {
		t.Fatalf("a wait that ends at its deadline allocates %.1f times", n)
	}

	w.Disarm()
	w.Cancel() // no wait armed: nothing to end
	if again := w.Arm(time.Hour); again != done || w.Err() != nil {
		t.Fatalf("Cancel without a wait ended the next one (err %v)", w.Err())
	}
	go func() {
		time.Sleep(time.Millisecond)
		w.Cancel()
	}()
	w.Sleep() // ends on Cancel, not in an hour
	<-done
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("err %v after Cancel", w.Err())
	}
	w.Disarm()
	next := w.Arm(time.Hour)
	if next == done || w.Err() != nil {
		t.Fatalf("the wait after a cancelled one reuses its closed channel (err %v)", w.Err())
	}
	w.Disarm()

	w.Kill()
	<-w.Arm(time.Hour) // every wait after Kill ends at once
	w.Sleep()
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("err %v after Kill", w.Err())
	}
	w.Disarm()
}

// TestWaitCtxFailed: a wait that ended at its deadline, or was cancelled,
// did not fail; any other error did.
func TestWaitCtxFailed(t *testing.T) {
	var w WaitCtx
	w.Arm(time.Hour)
	defer w.Disarm()
	other := errors.New("device gone")
	if w.Failed(nil) || w.Failed(context.DeadlineExceeded) || w.Failed(fmt.Errorf("wait: %w", context.DeadlineExceeded)) || !w.Failed(other) {
		t.Fatal("Failed before a cancel: nil, deadline or other error misjudged")
	}
	w.Cancel()
	if w.Failed(other) || w.Failed(context.Canceled) {
		t.Fatal("an error after Cancel counted as a failure")
	}
}

// waitCloser is a transport whose Close waits until every other one has
// started closing (as a Close that lingers for its peers does) and then
// returns err.
type waitCloser struct {
	started *sync.WaitGroup
	err     error
}

func (c *waitCloser) Close() error {
	c.started.Done()
	c.started.Wait()
	return c.err
}

// TestCloseAll: CloseAll closes every transport at once (one by one, the
// first Close would wait for the others forever) and joins the errors,
// each naming its rank.
func TestCloseAll(t *testing.T) {
	var started sync.WaitGroup
	started.Add(3)
	boom := errors.New("boom")
	trs := []*waitCloser{{started: &started}, {started: &started, err: boom}, {started: &started}}
	done := make(chan error, 1)
	go func() { done <- CloseAll(trs) }()
	select {
	case err := <-done:
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "rank 1: boom") {
			t.Fatalf("CloseAll: %v, want rank 1's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CloseAll closed the transports one after the other")
	}
}
