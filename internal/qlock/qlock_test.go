package qlock_test

import (
	"sync"
	"testing"

	"github.com/jiarun/jia/internal/qlock"
)

// TestMutualExclusion: goroutines incrementing a plain counter under the
// lock lose no increment, and the critical sections never overlap.
func TestMutualExclusion(t *testing.T) {
	const goroutines, iters = 8, 20000
	var mu qlock.Mutex
	var wg sync.WaitGroup
	n, inside := 0, 0
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iters {
				if i%3 == 0 {
					for !mu.TryLock() {
					}
				} else {
					mu.Lock()
				}
				inside++
				if inside != 1 {
					panic("two holders")
				}
				n++
				inside--
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n != goroutines*iters {
		t.Fatalf("counter %d, want %d", n, goroutines*iters)
	}
}

// TestTryLock: TryLock fails while the lock is held and succeeds once it
// is released.
func TestTryLock(t *testing.T) {
	var mu qlock.Mutex
	if !mu.TryLock() {
		t.Fatal("TryLock of a free lock failed")
	}
	if mu.TryLock() {
		t.Fatal("TryLock of a held lock succeeded")
	}
	done := make(chan struct{})
	go func() {
		mu.Lock() // waits for the Unlock below
		mu.Unlock()
		close(done)
	}()
	mu.Unlock()
	<-done
	if !mu.TryLock() {
		t.Fatal("TryLock after Unlock failed")
	}
	mu.Unlock()
}

// TestUnlockUnlocked: unlocking a free lock panics.
func TestUnlockUnlocked(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Unlock of a free lock did not panic")
		}
	}()
	var mu qlock.Mutex
	mu.Unlock()
}

func BenchmarkLockUnlock(b *testing.B) {
	var mu qlock.Mutex
	for b.Loop() {
		mu.Lock()
		mu.Unlock()
	}
}

func BenchmarkSyncMutex(b *testing.B) {
	var mu sync.Mutex
	for b.Loop() {
		mu.Lock()
		mu.Unlock()
	}
}
