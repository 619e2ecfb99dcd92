package shm_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// testTaker records what rdmaio.TakeQP.Take offers it and takes it when
// accept is set.
type testTaker struct {
	accept bool
	offers [][]byte
}

func (k *testTaker) Take(msg []byte) bool {
	k.offers = append(k.offers, append([]byte(nil), msg...))
	return k.accept
}

// TestTake checks rdmaio.TakeQP: an inline SEND is offered where it lies,
// stays when the taker declines and is consumed, without a completion,
// when it takes it; a SEND with immediate data (which needs a completion)
// is never offered and leaves what follows it to Poll; a taken message is
// acknowledged (the sender's signaled SEND completes) at the receiver's
// next poll, not before. Entries the sender may withdraw (finite RNR
// retries) are never offered.
func TestTake(t *testing.T) {
	for _, rnr := range []int{rdmaio.RNRRetryInfinite, 3} {
		t.Run(fmt.Sprint("rnr", rnr), func(t *testing.T) {
			s := newDirectPair(t, rnr)
			tq, ok := s.qp[1].(rdmaio.TakeQP)
			if !ok {
				t.Fatalf("the QP %T is not an rdmaio.TakeQP", s.qp[1])
			}
			k := &testTaker{accept: true}
			if tq.Arrived() || tq.Take(k, 0) || len(k.offers) != 0 {
				t.Fatalf("empty ring: Arrived %v, offers %q", tq.Arrived(), k.offers)
			}
			big := s.src[:900]
			for i := range big {
				big[i] = byte(i)
			}
			wrs := []rdmaio.SendWR{
				{ID: 1, Opcode: rdmaio.OpSend, Inline: []byte("first")},
				{ID: 2, Opcode: rdmaio.OpSendImm, Imm: 7, SGL: []rdmaio.SGE{rdmaio.MRSGE(s.srcM, 0, len(big))}},
				{ID: 3, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, Inline: []byte("third")},
			}
			if n, err := s.qp[0].PostSend(wrs); err != nil || n != len(wrs) {
				t.Fatalf("post sends: %d, %v", n, err)
			}
			s.postRecvs(t, 0, 4)
			wc := make([]rdmaio.WorkCompletion, 4)
			if rnr != rdmaio.RNRRetryInfinite {
				if !tq.Arrived() || tq.Take(k, 0) || len(k.offers) != 0 {
					t.Fatalf("withdrawable entry: Arrived %v, offers %q", tq.Arrived(), k.offers)
				}
				rdmaiotest.PollN(t, s.cq[1], wc[:3], 3)
				for i, c := range wc[:3] {
					if c.ID != uint64(i) || c.Status != rdmaio.StatusSuccess {
						t.Fatalf("completion %d: %+v", i, c)
					}
				}
				rdmaiotest.PollN(t, s.cq[0], wc[:1], 1)
				return
			}
			if !tq.Arrived() {
				t.Fatal("Arrived false with a message in the ring")
			}
			k.accept = false
			if tq.Take(k, 0) || len(k.offers) != 1 || string(k.offers[0]) != "first" {
				t.Fatalf("declined: offers %q", k.offers)
			}
			k.accept, k.offers = true, nil
			if !tq.Take(k, 0) || len(k.offers) != 1 || string(k.offers[0]) != "first" {
				t.Fatalf("taken: offers %q", k.offers)
			}
			// The next entry carries immediate data: not offered, and
			// "third" waits behind it.
			k.offers = nil
			if tq.Take(k, 0) || len(k.offers) != 0 {
				t.Fatalf("descriptor entry offered: %q", k.offers)
			}
			rdmaiotest.PollN(t, s.cq[1], wc[:1], 1)
			if c := wc[0]; c.ID != 0 || c.Imm != 7 || int(c.ByteLen) != len(big) || !bytes.Equal(s.dst[:len(big)], big) {
				t.Fatalf("the SEND with immediate: %+v", c)
			}
			if !tq.Take(k, 0) || len(k.offers) != 1 || string(k.offers[0]) != "third" {
				t.Fatalf("after the SEND with immediate: offers %q", k.offers)
			}
			// "third" is taken but not acknowledged yet: the sender's
			// signaled SEND does not complete until the receiver posts,
			// takes or polls again, and Arrived reports news until then.
			for range 1000 {
				if n := s.cq[0].Poll(wc[:1]); n != 0 {
					t.Fatalf("sender completion before the acknowledgement: %+v", wc[0])
				}
			}
			if !tq.Arrived() {
				t.Fatal("Arrived false with an acknowledgement owed")
			}
			if n := s.cq[1].Poll(wc); n != 0 {
				t.Fatalf("receiver poll after the takes: %d completions %+v", n, wc[:n])
			}
			if tq.Arrived() || tq.Take(k, 0) {
				t.Fatal("Arrived or Take with nothing left")
			}
			rdmaiotest.PollN(t, s.cq[0], wc[:1], 1)
			if c := wc[0]; c.ID != 3 || c.Status != rdmaio.StatusSuccess {
				t.Fatalf("sender completion %+v, want the signaled SEND 3", c)
			}
		})
	}
}

// TestTakeWaits: Take with spin waits for a message that arrives while it
// spins, holding the receive side, and takes it; with nothing arriving it
// returns false once the spinning is over.
func TestTakeWaits(t *testing.T) {
	s := newDirectPair(t, rdmaio.RNRRetryInfinite)
	tq := s.qp[1].(rdmaio.TakeQP)
	k := &testTaker{accept: true}
	if tq.Take(k, 1000) || len(k.offers) != 0 {
		t.Fatalf("Take of an empty ring: offers %q", k.offers)
	}
	posted := make(chan error, 1)
	go func() {
		time.Sleep(time.Millisecond)
		_, err := s.qp[0].PostSend([]rdmaio.SendWR{{ID: 1, Opcode: rdmaio.OpSend, Inline: []byte("late")}})
		posted <- err
	}()
	took := false
	for i := 0; !took && i < 1e4; i++ {
		took = tq.Take(k, 1e6)
	}
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	if !took || len(k.offers) != 1 || string(k.offers[0]) != "late" {
		t.Fatalf("Take waiting for a message: took %v, offers %q", took, k.offers)
	}
}
