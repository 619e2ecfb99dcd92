package shm_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	"github.com/jiarun/jia/rdmaio/shm"
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

// TestAckCarriedBack: in a ping-pong of inline SENDs, each answer carries
// back the acknowledgement of the message it answers (efAck), and the
// sender completes its signaled SENDs without reading the consumer's
// cAcked word; with the answers gone, it reads the word and still
// completes what was consumed. The ring wraps many times: an
// acknowledgement ahead of what was consumed would let the sender
// overwrite a message before it was read.
func TestAckCarriedBack(t *testing.T) {
	s := newDirectPair(t, rdmaio.RNRRetryInfinite)
	tq := s.qp[1].(rdmaio.TakeQP)
	wc := make([]rdmaio.WorkCompletion, 8)
	const rounds = 3000 // 64 KiB ring of 64-byte entries: some 3 wraps
	k := &testTaker{accept: true}
	signaled := 0
	for i := range rounds {
		if _, err := s.qp[0].PostRecv([]rdmaio.RecvWR{{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(s.srcM, 0, 64)}}}); err != nil {
			t.Fatal(err)
		}
		ping := rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpSend, Inline: []byte(fmt.Sprintf("ping %d", i))}
		if i%4 == 3 {
			ping.Flags = rdmaio.SendSignaled
			signaled++
		}
		if _, err := s.qp[0].PostSend([]rdmaio.SendWR{ping}); err != nil {
			t.Fatal(err)
		}
		k.offers = k.offers[:0]
		for j := 0; !tq.Take(k, 0); j++ {
			if j == 1e7 {
				t.Fatalf("round %d: the ping never came", i)
			}
		}
		if want := fmt.Sprintf("ping %d", i); string(k.offers[0]) != want {
			t.Fatalf("round %d: took %q, want %q", i, k.offers[0], want)
		}
		pong := fmt.Sprintf("pong %d", i)
		if _, err := s.qp[1].PostSend([]rdmaio.SendWR{{ID: uint64(i), Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, Inline: []byte(pong)}}); err != nil {
			t.Fatal(err)
		}
		s.cq[1].Poll(wc) // the answerer's own send completions
		for got := false; !got; {
			n := s.cq[0].Poll(wc)
			for _, c := range wc[:n] {
				switch {
				case c.Status != rdmaio.StatusSuccess:
					t.Fatalf("round %d: completion %+v", i, c)
				case c.Opcode == rdmaio.WCSend:
					signaled--
				case string(s.src[:c.ByteLen]) != pong:
					t.Fatalf("round %d: got %q, want %q", i, s.src[:c.ByteLen], pong)
				default:
					got = true
				}
			}
		}
	}
	if reads := shm.AckReads(s.qp[0]); reads > rounds/100 {
		t.Errorf("the sender read cAcked %d times in %d rounds, each answer carrying the acknowledgement", reads, rounds)
	}
	// The last signaled SEND was answered, but only cAcked (written at
	// the consumer's next post) or the consumer's next answer tell.
	for j := 0; signaled > 0; j++ {
		if j == 1e7 {
			t.Fatalf("%d signaled SENDs never completed", signaled)
		}
		if n := s.cq[0].Poll(wc); n > 0 {
			signaled -= n
		}
		s.cq[1].Poll(wc) // the consumer's acknowledgement
	}
}

// TestAckCarriedBackUnderPressure: a sender keeps a small ring full of
// 900-byte messages while its receiver takes them one at a time and
// answers each, its answers carrying acknowledgements back (efAck). Every
// message arrives intact and in order: an acknowledgement ahead of what
// was consumed would let the sender write over a message not yet read.
func TestAckCarriedBackUnderPressure(t *testing.T) {
	const n, size, slots = 2000, 900, 64
	cp := rdmaio.QPCap{MaxSendWR: slots, MaxRecvWR: slots, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}
	f := &fabric{opts: map[string]string{"ring_bytes": "16384", "eager": "4096"}}
	// The sender's messages come from slots of 1 KiB, its answers arrive
	// after them.
	s := &directPair{newRCPair(t, f, cp, true, slots<<10+64, slots<<12, rdmaio.RNRRetryInfinite)}
	s.postRecvs(t, 0, slots)
	for i := range slots {
		if _, err := s.qp[0].PostRecv([]rdmaio.RecvWR{{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(s.srcM, slots<<10, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	fill := func(b []byte, seq int) {
		for j := range b {
			b[j] = byte(seq*7 + j)
		}
	}
	wc := make([]rdmaio.WorkCompletion, 16)
	want := make([]byte, size)
	sent, outstanding, got, answers := 0, 0, 0, 0
	for round := 0; got < n; round++ {
		if round == 1e7 {
			t.Fatalf("%d of %d messages arrived", got, n)
		}
		// The sender fills its queue (and so the ring).
		for sent < n && outstanding < slots {
			b := s.src[sent%slots<<10:][:size]
			fill(b, sent)
			wr := rdmaio.SendWR{ID: uint64(sent), Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(s.srcM, sent%slots<<10, size)}}
			if _, err := s.qp[0].PostSend([]rdmaio.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
			sent++
			outstanding++
		}
		for _, c := range wc[:s.cq[0].Poll(wc)] {
			switch {
			case c.Status != rdmaio.StatusSuccess:
				t.Fatalf("sender: completion %+v", c)
			case c.Opcode == rdmaio.WCSend:
				outstanding--
			default: // an answer: post the receive again
				answers++
				if _, err := s.qp[0].PostRecv([]rdmaio.RecvWR{{ID: c.ID, SGL: []rdmaio.SGE{rdmaio.MRSGE(s.srcM, slots<<10, 64)}}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The receiver takes one message (its send completions aside)
		// and answers it.
		for _, c := range wc[:s.cq[1].Poll(wc[:1])] {
			if c.Status != rdmaio.StatusSuccess {
				t.Fatalf("receiver: completion %+v", c)
			}
			if c.Opcode == rdmaio.WCSend {
				continue
			}
			fill(want, got)
			if slot := s.dst[c.ID%slots<<12:][:c.ByteLen]; !bytes.Equal(slot, want) {
				t.Fatalf("message %d (%d bytes, receive %d) differs from what was sent: % x, want % x", got, c.ByteLen, c.ID, slot[:8], want[:8])
			}
			got++
			s.postRecvs(t, int(c.ID)+slots, 1)
			if _, err := s.qp[1].PostSend([]rdmaio.SendWR{{ID: uint64(got), Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, Inline: []byte("ok")}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d answers, %d reads of cAcked", answers, shm.AckReads(s.qp[0]))
}
