package backoff

import (
	"testing"
	"time"
)

func TestParseRunning(t *testing.T) {
	for in, want := range map[string]int{
		"0.52 0.58 0.59 3/467 12345\n": 3,
		"10.00 9.00 8.00 128/2000 1":   128,
		"1 2 3 x/4 5":                  -1,
		"1 2 3":                        -1,
		"1 2 3 7":                      -1,
	} {
		n, ok := parseRunning([]byte(in))
		if want < 0 && ok || want >= 0 && (!ok || n != want) {
			t.Errorf("%q: %d %v, want %d", in, n, ok, want)
		}
	}
}

// A poller counts the runnable threads besides itself: crowded only when
// they outnumber the processors.
func TestCrowdedAt(t *testing.T) {
	for _, c := range []struct {
		running, cpus int
		want          bool
	}{
		{1, 1, false}, // alone
		{2, 1, false}, // one other thread, one processor: it waits a poll at most
		{3, 1, true},
		{3, 2, false}, // a program, its pager and the pager it waits for
		{4, 2, true},
		{9, 8, false},
		{10, 8, true},
	} {
		if got := crowdedAt(c.running, c.cpus); got != c.want {
			t.Errorf("crowdedAt(%d, %d) = %v, want %v", c.running, c.cpus, got, c.want)
		}
	}
}

// A waiter polls for its policy's time at most, and the zero policy
// sleeps at once.
func TestWaiterStopsPolling(t *testing.T) {
	var w Waiter
	w.Reset(Policy{})
	if w.Pause() {
		t.Error("the zero policy polls")
	}
	if w.Polls() {
		t.Error("the zero policy says it polls")
	}
	w.Reset(Policy{Yield: 2 * time.Millisecond})
	start := time.Now()
	for w.Pause() {
		if time.Since(start) > time.Second {
			t.Fatal("still polling after a second")
		}
	}
	if w.Polls() {
		t.Error("a wait whose time is up says it polls")
	}
}

// Sleep returns at once when the word does not hold the value, and Wake
// ends a sleep.
func TestSleepAndWake(t *testing.T) {
	var word uint32 = 1
	Sleep(&word, 0, -1)
	done := make(chan struct{})
	go func() {
		Sleep(&word, 1, 10*time.Second)
		close(done)
	}()
	// The sleeper may not sleep yet at the first Wake: wake until it ends.
	deadline := time.After(5 * time.Second)
	for {
		Wake(&word)
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatal("Wake did not end the sleep")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// SleepHeld returns at once when the word does not hold the value, at its
// timeout when nobody wakes it, and at Wake otherwise.
func TestSleepHeld(t *testing.T) {
	var word uint32 = 1
	SleepHeld(&word, 0, time.Hour) // returns at once: the word holds 1
	SleepHeld(&word, 1, time.Millisecond)
	done := make(chan struct{})
	go func() {
		SleepHeld(&word, 1, time.Minute)
		close(done)
	}()
	deadline := time.After(30 * time.Second)
	for {
		Wake(&word)
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatal("Wake did not end the sleep")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
