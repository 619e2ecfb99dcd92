package shm_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// directPair is an RC connection from device 0 to a QP of device 1 whose
// receives come from an SRQ (dst: the receiver's buffers, 4 KiB each).
type directPair struct{ *rcPair }

func newDirectPair(t *testing.T, rnrRetry int) *directPair {
	t.Helper()
	cp := rdmaio.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}
	return &directPair{newRCPair(t, &fabric{}, cp, true, 64<<10, 256<<10, rnrRetry)}
}

// postRecvs posts receives ids first..first+n-1 into 4 KiB buffers.
func (s *directPair) postRecvs(t *testing.T, first, n int) {
	t.Helper()
	wrs := make([]rdmaio.RecvWR, n)
	for i := range wrs {
		id := first + i
		wrs[i] = rdmaio.RecvWR{ID: uint64(id), SGL: []rdmaio.SGE{rdmaio.MRSGE(s.dstM, (id%64)<<12, 1<<12)}}
	}
	if k, err := s.srq.PostRecv(wrs); err != nil || k != n {
		t.Fatalf("post %d receives: %d, %v", n, k, err)
	}
}

// TestPollDirect checks rdmaio.DirectCQ: a SEND carried inline goes into
// the poller's buffer without taking a receive request, back to back with
// the others of the call; one with immediate data, one too large for the
// ring or for what is left of the buffer takes the next receive request;
// completions keep the sending order; Poll delivers as before. It runs with
// entries the sender never withdraws (infinite RNR retries) and with ones
// it may withdraw (claimed by a CAS).
func TestPollDirect(t *testing.T) {
	for _, rnr := range []int{rdmaio.RNRRetryInfinite, 3} {
		t.Run(fmt.Sprint("rnr", rnr), func(t *testing.T) {
			s := newDirectPair(t, rnr)
			dcq, ok := s.cq[1].(rdmaio.DirectCQ)
			if !ok {
				t.Fatalf("the CQ %T is not an rdmaio.DirectCQ", s.cq[1])
			}
			const directID = 1 << 40
			// The messages: lengths, and whether they carry immediate data.
			type msg struct {
				n   int
				imm bool
			}
			msgs := []msg{{8, false}, {0, false}, {21, false}, {8, true}, {900, false}, {4000, false}, {40, false}, {64, false}}
			s.postRecvs(t, 0, 16)
			var wrs []rdmaio.SendWR
			for i, m := range msgs {
				b := s.src[i<<13 : i<<13+m.n]
				for j := range b {
					b[j] = byte(i*31 + j)
				}
				wr := rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpSend}
				if m.imm {
					wr.Opcode, wr.Imm = rdmaio.OpSendImm, 7
				}
				if m.n > 0 {
					wr.SGL = []rdmaio.SGE{rdmaio.MRSGE(s.srcM, i<<13, m.n)}
				}
				wrs = append(wrs, wr)
			}
			wrs[len(wrs)-1].Flags = rdmaio.SendSignaled
			if k, err := s.qp[0].PostSend(wrs); err != nil || k != len(wrs) {
				t.Fatalf("post sends: %d, %v", k, err)
			}
			// A buffer with room for the first three small ones and the
			// 40-byte one, not for the 64-byte one after it.
			buf := make([]byte, 8+0+21+40+10)
			wc := make([]rdmaio.WorkCompletion, 16)
			var got []rdmaio.WorkCompletion
			sent := 0 // the sender's completions (one: the last send is signaled)
			for i := 0; len(got) < len(msgs); i++ {
				if i == 1e7 {
					t.Fatalf("%d of %d messages arrived: %+v", len(got), len(msgs), got)
				}
				k := dcq.PollDirect(wc[:len(msgs)-len(got)], buf[used(got, directID):], directID)
				got = append(got, wc[:k]...)
				sent += s.cq[0].Poll(wc[len(wc)-1:]) // the sender's progress
			}
			off, nextRecv := 0, uint64(0)
			for i, c := range got {
				m := msgs[i]
				want := s.src[i<<13 : i<<13+m.n]
				if c.Status != rdmaio.StatusSuccess || c.Opcode != rdmaio.WCRecv && c.Opcode != rdmaio.WCRecvRDMAWithImm || int(c.ByteLen) != m.n {
					t.Fatalf("message %d: completion %+v", i, c)
				}
				isDirect := m.n <= 64 && !m.imm && m.n != 64
				switch {
				case isDirect && c.ID != directID:
					t.Fatalf("message %d (%d bytes) not delivered directly: %+v", i, m.n, c)
				case !isDirect && c.ID != nextRecv:
					t.Fatalf("message %d (%d bytes): completion %+v, want receive %d", i, m.n, c, nextRecv)
				case isDirect:
					if !bytes.Equal(buf[off:off+m.n], want) {
						t.Fatalf("message %d: direct bytes % x, want % x", i, buf[off:off+m.n], want)
					}
					off += m.n
				default:
					slot := s.dst[(nextRecv%64)<<12:]
					if !bytes.Equal(slot[:m.n], want) {
						t.Fatalf("message %d: received bytes differ", i)
					}
					if m.imm && (c.Flags&rdmaio.WCWithImm == 0 || c.Imm != 7) {
						t.Fatalf("message %d: immediate lost: %+v", i, c)
					}
					nextRecv++
				}
			}
			if nextRecv != 4 {
				t.Fatalf("%d receive requests consumed, want 4", nextRecv)
			}
			rdmaiotest.PollN(t, s.cq[0], wc[:1], 1-sent)
			// Plain Poll takes receive requests for small messages too, the
			// next ones in posting order.
			send := []rdmaio.SendWR{{ID: 9, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, Inline: []byte("12345678")}}
			if _, err := s.qp[0].PostSend(send); err != nil {
				t.Fatal(err)
			}
			rdmaiotest.PollN(t, s.cq[1], wc[:1], 1)
			if wc[0].ID != nextRecv || !bytes.Equal(s.dst[(nextRecv%64)<<12:][:8], []byte("12345678")) {
				t.Fatalf("Poll after PollDirect: %+v, want receive %d", wc[0], nextRecv)
			}
			rdmaiotest.PollN(t, s.cq[0], wc[:1], 1)
		})
	}
}

// used returns how much of the direct buffer the completions so far took.
func used(wcs []rdmaio.WorkCompletion, id uint64) int {
	n := 0
	for _, c := range wcs {
		if c.ID == id {
			n += int(c.ByteLen)
		}
	}
	return n
}

// TestPollSend checks rdmaio.SendCQ: on a CQ that holds both a send
// completion and a message that arrived, PollSend returns the send's
// completion alone and leaves the message where it lies, for Take or the
// next Poll.
func TestPollSend(t *testing.T) {
	s := newDirectPair(t, rdmaio.RNRRetryInfinite)
	scq, ok := s.cq[1].(rdmaio.SendCQ)
	if !ok {
		t.Fatalf("the CQ %T is not an rdmaio.SendCQ", s.cq[1])
	}
	tq := s.qp[1].(rdmaio.TakeQP)
	s.postRecvs(t, 0, 1)
	if _, err := s.qp[0].PostRecv([]rdmaio.RecvWR{{ID: 5, SGL: []rdmaio.SGE{rdmaio.MRSGE(s.srcM, 0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	// Rank 1's signaled SEND, consumed by rank 0, which answers.
	ping := []rdmaio.SendWR{{ID: 7, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, Inline: []byte("ping")}}
	if _, err := s.qp[1].PostSend(ping); err != nil {
		t.Fatal(err)
	}
	wc := make([]rdmaio.WorkCompletion, 4)
	rdmaiotest.PollN(t, s.cq[0], wc[:1], 1)
	if wc[0].ID != 5 || string(s.src[:4]) != "ping" {
		t.Fatalf("rank 0 got %+v, %q", wc[0], s.src[:4])
	}
	pong := []rdmaio.SendWR{{ID: 8, Opcode: rdmaio.OpSend, Inline: []byte("pong")}}
	if _, err := s.qp[0].PostSend(pong); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i == 1e6 {
			t.Fatal("PollSend never returned the completion of the SEND")
		}
		if !tq.Arrived() {
			continue // the answer is on its way
		}
		k := scq.PollSend(wc)
		if k == 0 {
			continue
		}
		if k != 1 || wc[0].ID != 7 || wc[0].Opcode != rdmaio.WCSend || wc[0].Status != rdmaio.StatusSuccess {
			t.Fatalf("PollSend: %+v, want the completion of SEND 7 alone", wc[:k])
		}
		break
	}
	if !tq.Arrived() {
		t.Fatal("PollSend took the message that arrived")
	}
	k := &testTaker{accept: true}
	if !tq.Take(k, 0) || len(k.offers) != 1 || string(k.offers[0]) != "pong" {
		t.Fatalf("Take after PollSend: offers %q, want the answer", k.offers)
	}
}
