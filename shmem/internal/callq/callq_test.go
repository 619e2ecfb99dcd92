package callq

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/internal/backoff"
)

// serve answers every call with code kind*1000+id and a message naming it,
// until stop is closed. With bell it sleeps whenever the queue is empty,
// until rung (the path of a pager that stopped polling).
func serve(t *testing.T, s *Server, bell chan struct{}, stop chan struct{}) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var calls [8]Call
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := s.Take(calls[:])
			for _, c := range calls[:n] {
				s.Answer(c.Slot, c.Kind*1000+c.ID, fmt.Sprintf("call %d/%d", c.Kind, c.ID))
			}
			if n == 0 {
				if bell != nil {
					select {
					case <-bell:
					case <-stop:
					}
				} else {
					backoff.Yield()
				}
			}
		}
	}()
	return &wg
}

func pair(t *testing.T, slots int, p backoff.Policy) (*Client, *Server) {
	t.Helper()
	c, err := New(slots, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fd, err := unix.Dup(c.FD())
	if err != nil {
		t.Fatal(err)
	}
	s, err := Attach(fd)
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// Many goroutines call at once, more than there are slots; every call gets
// its own answer, whether the two sides poll or sleep.
func TestConcurrentCallsGetTheirOwnAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		p     backoff.Policy
		sleep bool
	}{
		{"polling", backoff.Policy{Spin: time.Millisecond, Yield: time.Millisecond}, false},
		{"sleeping", backoff.Policy{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := pair(t, 4, tc.p)
			stop := make(chan struct{})
			var bell chan struct{}
			if tc.sleep {
				bell = make(chan struct{}, 1)
				c.SetRing(func() {
					select {
					case bell <- struct{}{}:
					default:
					}
				})
			}
			wg := serve(t, s, bell, stop)
			defer wg.Wait()
			defer close(stop)
			var cw sync.WaitGroup
			errs := make(chan error, 32)
			for g := 0; g < 32; g++ {
				cw.Add(1)
				go func() {
					defer cw.Done()
					for i := 0; i < 50; i++ {
						kind, id := int64(g%7+1), int64(i)
						code, msg, err := c.Call(kind, id)
						if err != nil || code != kind*1000+id || msg != fmt.Sprintf("call %d/%d", kind, id) {
							errs <- fmt.Errorf("goroutine %d call %d: code %d msg %q err %v", g, i, code, msg, err)
							return
						}
					}
				}()
			}
			cw.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// A caller waiting for an answer that will never come returns the error
// given to Fail, and so does every later call.
func TestFailEndsCallsInProgress(t *testing.T) {
	c, _ := pair(t, 2, backoff.Policy{})
	res := make(chan error, 1)
	go func() {
		_, _, err := c.Call(4, 1)
		res <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cause := errors.New("pager exited")
	c.Fail(cause)
	select {
	case err := <-res:
		if !errors.Is(err, ErrGone) || !errors.Is(err, cause) {
			t.Fatalf("call in progress: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in progress did not return after Fail")
	}
	if _, _, err := c.Call(4, 2); !errors.Is(err, cause) {
		t.Fatalf("call after Fail: %v", err)
	}
}

// An answer longer than a slot holds is cut, not spilled into the next
// slot.
func TestLongMessagesAreCut(t *testing.T) {
	c, s := pair(t, 2, backoff.Policy{Yield: time.Second})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var calls [1]Call
		for s.Take(calls[:]) == 0 {
			backoff.Yield()
		}
		s.Answer(calls[0].Slot, 3, strings.Repeat("x", 5000))
	}()
	code, msg, err := c.Call(1, 1)
	<-done
	if err != nil || code != 3 || len(msg) != MaxMessage {
		t.Fatalf("code %d, message of %d bytes, err %v", code, len(msg), err)
	}
}

// A memfd that is not a call queue is refused.
func TestAttachRefusesOtherMemory(t *testing.T) {
	fd, err := unix.MemfdCreate("other", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 1<<16); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(fd); err == nil {
		t.Fatal("a zeroed memfd was taken for a call queue")
	}
}

// Posted calls reach the pager in order with the calls waited for, their
// slots come back (more posts than slots succeed), and a posted call that
// fails makes the next call fail, naming it.
func TestPostedCallsKeepOrderAndReportFailures(t *testing.T) {
	c, s := pair(t, 2, backoff.Policy{})
	var mu sync.Mutex
	var seen []int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var calls [4]Call
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := s.Take(calls[:])
			for _, cl := range calls[:n] {
				mu.Lock()
				seen = append(seen, cl.ID)
				mu.Unlock()
				code := int64(0)
				if cl.Kind == 9 {
					code = 5
				}
				s.Answer(cl.Slot, code, "refused")
			}
			if n == 0 {
				backoff.Yield()
			}
		}
	}()
	defer func() { close(stop); <-done }()

	var want []int64
	for i := int64(0); i < 20; i++ {
		if i%5 == 4 {
			if code, _, err := c.Call(1, i); err != nil || code != 0 {
				t.Fatalf("call %d: code %d, %v", i, code, err)
			}
		} else if err := c.Post(1, i); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		want = append(want, i)
	}
	if code, _, err := c.Call(1, 20); err != nil || code != 0 {
		t.Fatalf("last call: code %d, %v", code, err)
	}
	want = append(want, 20)
	mu.Lock()
	got := slices.Clone(seen)
	mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("the pager saw %v, want %v", got, want)
	}

	if err := c.Post(9, 7); err != nil {
		t.Fatal(err)
	}
	// Wait until the pager answered it, then the next call reports it.
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == len(want)+1 {
			break
		}
		backoff.Yield()
	}
	for { // the answer follows the record of the call
		c.mu.Lock()
		c.reap()
		lost := c.lost != nil
		c.mu.Unlock()
		if lost {
			break
		}
		backoff.Yield()
	}
	_, _, err := c.Call(1, 21)
	if err == nil || !strings.Contains(err.Error(), "call 9(7), posted earlier, failed with code 5: refused") {
		t.Fatalf("call after a failed post: %v", err)
	}
	if code, _, err := c.Call(1, 22); err != nil || code != 0 {
		t.Fatalf("call after the reported failure: code %d, %v", code, err)
	}
}

// Quiet follows the pager's SetQuiet.
func TestQuietFollowsTheServer(t *testing.T) {
	c, s := pair(t, 2, backoff.Policy{})
	if c.Quiet() {
		t.Fatal("quiet before the pager said so")
	}
	s.SetQuiet(true)
	if !c.Quiet() {
		t.Fatal("not quiet after SetQuiet(true)")
	}
	s.SetQuiet(false)
	if c.Quiet() {
		t.Fatal("quiet after SetQuiet(false)")
	}
}

// A caller told that its answer waits for another rank (Far) stops
// polling and sleeps, however long its policy would poll.
func TestFarCallerSleeps(t *testing.T) {
	c, s := pair(t, 2, backoff.Policy{Yield: time.Hour})
	res := make(chan error, 1)
	go func() {
		code, _, err := c.Call(3, 4)
		if err == nil && code != 7 {
			err = fmt.Errorf("code %d", code)
		}
		res <- err
	}()
	var calls [1]Call
	for s.Take(calls[:]) == 0 {
		backoff.Yield()
	}
	s.Far(calls[0].Slot)
	sleeping := s.q.u32(s.q.slot(calls[0].Slot) + 4)
	deadline := time.Now().Add(10 * time.Second)
	for atomic.LoadUint32(sleeping) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the caller still polls 10 s after Far")
		}
		time.Sleep(time.Millisecond)
	}
	s.Answer(calls[0].Slot, 7, "")
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// A Far caller gets its answer whenever it comes: while it polls, in its
// first sleep with the P held, in the longer one that follows Far, and in
// the ordinary sleep after both.
func TestFarCallerGetsLateAnswers(t *testing.T) {
	for _, delay := range []time.Duration{0, heldSleep / 2, (heldSleep + farHeldSleep) / 2, 2 * farHeldSleep} {
		c, s := pair(t, 2, backoff.Policy{})
		res := make(chan error, 1)
		go func() {
			code, msg, err := c.Call(5, 6)
			if err == nil && (code != 11 || msg != "late") {
				err = fmt.Errorf("answer %d %q", code, msg)
			}
			res <- err
		}()
		var calls [1]Call
		for s.Take(calls[:]) == 0 {
			backoff.Yield()
		}
		s.Far(calls[0].Slot)
		time.Sleep(delay)
		s.Answer(calls[0].Slot, 11, "late")
		if err := <-res; err != nil {
			t.Fatalf("answered after %v: %v", delay, err)
		}
	}
}

// A lock is claimed only while offered, once per offer until unclaimed,
// and its withdrawal counts the claims since the offer and says whether
// the program holds it; a lock sharing the word of an offered one is not
// offered.
func TestClaimsFollowTheOffer(t *testing.T) {
	c, s := pair(t, 2, backoff.Policy{})
	if c.Claim(5) {
		t.Fatal("claimed a lock never offered")
	}
	if !s.Offer(5) || s.Offer(5+64) {
		t.Fatal("Offer(5) refused, or Offer(69) accepted on the same word")
	}
	for i := 0; i < 3; i++ {
		if !c.Claim(5) || c.Claim(5) {
			t.Fatalf("claim %d: not exactly one claim", i)
		}
		if !c.Unclaim(5) {
			t.Fatalf("claim %d: not unclaimed", i)
		}
	}
	if !c.Claim(5) {
		t.Fatal("fourth claim refused")
	}
	if claims, held := s.Withdraw(5); claims != 4 || !held {
		t.Fatalf("Withdraw = %d, %v; want 4, true", claims, held)
	}
	if c.Unclaim(5) || c.Claim(5) {
		t.Fatal("claimed or unclaimed after the withdrawal")
	}
	if claims, held := s.Withdraw(5); claims != 0 || held {
		t.Fatalf("second Withdraw = %d, %v", claims, held)
	}
	if !s.Offer(69) || c.Claim(5) || !c.Claim(69) {
		t.Fatal("the word of lock 69 after lock 5's withdrawal")
	}
	if claims, held := s.Withdraw(69); claims != 1 || !held {
		t.Fatalf("Withdraw(69) = %d, %v", claims, held)
	}
	if c.Claim(-1) || s.Offer(-1) || c.Claim(1<<40) {
		t.Fatal("a lock outside the words' range")
	}
}

// An announcement is written before the next call, with NoSlot, and the
// calls carry their positions; Clean follows the server.
func TestAnnounceComesBeforeTheNextCall(t *testing.T) {
	c, s := pair(t, 4, backoff.Policy{})
	if c.Clean() {
		t.Fatal("clean before the server said so")
	}
	s.SetClean(true)
	if !c.Clean() {
		t.Fatal("not clean after SetClean(true)")
	}
	s.SetClean(false)
	if c.Clean() {
		t.Fatal("clean after SetClean(false)")
	}
	if err := c.Post(4, 1); err != nil {
		t.Fatal(err)
	}
	if h := c.Head(); h != 1 {
		t.Fatalf("head %d after one call", h)
	}
	c.Announce(16, 7)
	c.Announce(16, 8) // replaces the first
	if err := c.Post(5, 2); err != nil {
		t.Fatal(err)
	}
	var calls [8]Call
	n := s.Take(calls[:])
	want := []Call{{Slot: calls[0].Slot, Kind: 4, ID: 1, Pos: 0}, {Slot: NoSlot, Kind: 16, ID: 8, Pos: 1}, {Slot: calls[2].Slot, Kind: 5, ID: 2, Pos: 2}}
	if !slices.Equal(calls[:n], want) {
		t.Fatalf("calls %+v, want %+v", calls[:n], want)
	}
	if calls[0].Slot == NoSlot || calls[2].Slot == NoSlot {
		t.Fatalf("calls without a slot: %+v", calls[:n])
	}
	s.Answer(NoSlot, 0, "") // answers nobody
}

// A program that runs a whole queue ahead of its pager (every slot held by
// a posted call, each with an announcement before it) overwrites no entry
// the pager has not taken: the pager takes every one, in order.
func TestFullQueueOfAnnouncedPostsKeepsEveryEntry(t *testing.T) {
	const slots = 8
	c, s := pair(t, slots, backoff.Policy{})
	for i := range int64(slots) {
		c.Announce(16, 100+i)
		if err := c.Post(4, i); err != nil {
			t.Fatal(err)
		}
	}
	calls := make([]Call, 4*slots)
	n := s.Take(calls)
	if n != 2*slots {
		t.Fatalf("took %d entries, want %d: %+v", n, 2*slots, calls[:n])
	}
	for i := range int64(slots) {
		a, p := calls[2*i], calls[2*i+1]
		if a.Slot != NoSlot || a.Kind != 16 || a.ID != 100+i || p.Slot == NoSlot || p.Kind != 4 || p.ID != i {
			t.Fatalf("entries %d and %d: %+v, %+v", 2*i, 2*i+1, a, p)
		}
	}
}
