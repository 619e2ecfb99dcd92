package shm

import (
	"sync"
	"testing"
	"time"
)

// TestQLockExclusion: goroutines that increment a plain counter under a
// qlock (by Lock or TryLock) lose no increment, and under the race
// detector its release orders the critical sections.
func TestQLockExclusion(t *testing.T) {
	var l qlock
	const workers, rounds = 8, 2000
	n := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if w%2 == 0 || !l.TryLock() {
					l.Lock()
				}
				n++
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	if n != workers*rounds {
		t.Fatalf("counter %d, want %d", n, workers*rounds)
	}
}

// TestQLockLongHold: a waiter behind a holder that keeps the lock for a
// while (past the spinning and yielding stages) gets it once it is
// released, and not before.
func TestQLockLongHold(t *testing.T) {
	var l qlock
	l.Lock()
	if l.TryLock() {
		t.Fatal("TryLock acquired a held lock")
	}
	released := make(chan struct{})
	got := make(chan bool)
	go func() {
		l.Lock()
		select {
		case <-released:
			got <- true
		default:
			got <- false
		}
		l.Unlock()
	}()
	time.Sleep(20 * time.Millisecond)
	close(released)
	l.Unlock()
	if !<-got {
		t.Fatal("waiter acquired the lock while it was held")
	}
	if !l.TryLock() {
		t.Fatal("TryLock failed on a released lock")
	}
	l.Unlock()
}
