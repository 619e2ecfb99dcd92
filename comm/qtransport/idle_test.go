package qtransport_test

import (
	"testing"
	"time"

	"github.com/jiarun/jia/comm/qtransport"
	"github.com/jiarun/jia/comm/transport"
)

// TestIdle checks transport.Idler: Idle reports false while a message to
// the rank (from a peer or from itself) waits, or while receive buffers
// wait to be reposted, so that a Poll after Idle reported true hands out
// nothing; and true once Poll has handed everything out. A message that
// Wait took from the queue keeps Idle false until Poll hands it out.
func TestIdle(t *testing.T) {
	trs := open(t, 2, qtransport.Options{})
	s := [2]*sink{newSink(2), newSink(2)}
	// settle polls rank r until Idle reports true, checking that a Poll
	// after a true Idle hands out nothing.
	settle := func(r int) {
		t.Helper()
		for n := 0; ; n++ {
			if n == 10000 {
				t.Fatalf("rank %d: Idle never reports true", r)
			}
			was := trs[r].Idle()
			before := s[r].n
			trs[r].Poll(s[r])
			if was && s[r].n != before {
				t.Fatalf("rank %d: Idle reported true, then Poll handed out %d items", r, s[r].n-before)
			}
			if was && trs[r].Idle() {
				return
			}
		}
	}
	hdr := []byte("hdr")
	for i := range 100 {
		settle(0)
		settle(1)
		// A peer's message, through Send and through SendShort.
		if i%2 == 0 {
			if err := trs[0].Send(1, hdr, [][]byte{[]byte("data")}); err != nil {
				t.Fatal(err)
			}
		} else {
			var h transport.ShortHeader
			if err := trs[0].SendShort(1, h, 3, []byte("data")); err != nil {
				t.Fatal(err)
			}
		}
		if trs[1].Idle() {
			t.Fatalf("message %d: rank 1 idle with a message waiting", i)
		}
		n := s[1].n
		for s[1].n == n {
			trs[1].Poll(s[1])
		}
	}
	// A message to self.
	settle(0)
	if err := trs[0].Send(0, hdr, nil); err != nil {
		t.Fatal(err)
	}
	if trs[0].Idle() {
		t.Fatal("rank 0 idle with a message to itself waiting")
	}
	settle(0)
	// A message Wait took from the queue stays owed to the next Poll.
	settle(1)
	if err := trs[0].Send(1, hdr, nil); err != nil {
		t.Fatal(err)
	}
	n := s[1].n
	// Wait takes the message from the queue (it is there already) and
	// keeps it for the next Poll, which Idle must then ask for.
	trs[1].Wait(time.Second)
	if trs[1].Idle() {
		t.Fatal("rank 1 idle with a message Wait took and Poll has not handed out")
	}
	trs[1].Poll(s[1])
	if s[1].n != n+1 {
		t.Fatalf("Poll handed out %d messages, want 1", s[1].n-n)
	}
	settle(1)
}
