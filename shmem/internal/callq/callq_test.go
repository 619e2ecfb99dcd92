package callq

import (
	"errors"
	"fmt"
	"strings"
	"sync"
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
