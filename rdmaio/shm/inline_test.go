package shm_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/shm"
)

// inlinePair is an RC connection from device 0 to device 1 whose receiver
// has its own receive queue of 4 KiB buffers, on devices with the smallest
// ring, so that a few hundred bytes of SENDs fill it.
type inlinePair struct{ *rcPair }

const inlineDepth = 64

func newInlinePair(t *testing.T, rnrRetry int) *inlinePair {
	t.Helper()
	f := &fabric{opts: map[string]string{"ring_bytes": "16384", "eager": "4096"}}
	cp := rdmaio.QPCap{MaxSendWR: inlineDepth, MaxRecvWR: inlineDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 256}
	s := &inlinePair{newRCPair(t, f, cp, false, 64<<10, inlineDepth<<12, rnrRetry)}
	wrs := make([]rdmaio.RecvWR, inlineDepth)
	for i := range wrs {
		wrs[i] = rdmaio.RecvWR{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(s.dstM, i<<12, 1<<12)}}
	}
	if k, err := s.qp[1].PostRecv(wrs); err != nil || k != len(wrs) {
		t.Fatalf("post receives: %d, %v", k, err)
	}
	return s
}

// TestPostSendInline checks rdmaio.InlineQP: SENDs posted in two pieces
// arrive whole and in posting order among SENDs that PostSend posts, both
// when they go straight into the ring and when they must wait (the ring
// full, work queued ahead of them); only the signaled ones complete at the
// sender, with their ID and length, once the receiver has taken them. It
// runs with entries the sender never withdraws and with ones it may.
func TestPostSendInline(t *testing.T) {
	for _, rnr := range []int{rdmaio.RNRRetryInfinite, 3} {
		t.Run(fmt.Sprint("rnr", rnr), func(t *testing.T) {
			s := newInlinePair(t, rnr)
			iqp, ok := s.qp[0].(rdmaio.InlineQP)
			if !ok {
				t.Fatalf("the QP %T is not an rdmaio.InlineQP", s.qp[0])
			}
			// 64 messages of up to 256 bytes, mostly in 320-byte ring
			// entries, of which 51 fit in the 16 KiB ring: the last ones
			// wait. Every 5th
			// goes through PostSend, every 7th is signaled.
			var want [][]byte
			signaled := map[uint64]int{}
			for i := range inlineDepth {
				n := []int{256, 250, 256, 0, 256, 230, 256}[i%7]
				msg := make([]byte, n)
				for j := range msg {
					msg[j] = byte(i*31 + j)
				}
				want = append(want, msg)
				var flags rdmaio.SendFlags
				if i%7 == 3 {
					flags = rdmaio.SendSignaled
					signaled[uint64(i)] = n
				}
				if i%5 == 0 {
					copy(s.src[i<<8:], msg)
					wr := rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpSend, Flags: flags}
					if n > 0 {
						wr.SGL = []rdmaio.SGE{rdmaio.MRSGE(s.srcM, i<<8, n)}
					}
					if k, err := s.qp[0].PostSend([]rdmaio.SendWR{wr}); err != nil || k != 1 {
						t.Fatalf("post send %d: %d, %v", i, k, err)
					}
					continue
				}
				h := min(n, i%11)
				// The pieces are scribbled over after the post: the
				// provider must not keep them.
				hdr, payload := bytes.Clone(msg[:h]), bytes.Clone(msg[h:])
				if err := iqp.PostSendInline(uint64(i), flags, hdr, payload); err != nil {
					t.Fatalf("post inline %d: %v", i, err)
				}
				clear(hdr)
				clear(payload)
			}
			// The receiver has taken nothing yet: no signaled SEND may
			// have completed.
			var wc [16]rdmaio.WorkCompletion
			if k := s.cq[0].Poll(wc[:]); k != 0 {
				t.Fatalf("%d send completions before the receiver polled: %+v", k, wc[:k])
			}
			got := 0
			for spins := 0; got < len(want) || len(signaled) > 0; spins++ {
				if spins > 1<<24 {
					t.Fatalf("stuck: %d of %d received, %d signaled SENDs not completed", got, len(want), len(signaled))
				}
				k := s.cq[1].Poll(wc[:])
				for _, c := range wc[:k] {
					if c.Status != rdmaio.StatusSuccess || c.Opcode != rdmaio.WCRecv || c.ID != uint64(got) || int(c.ByteLen) != len(want[got]) {
						t.Fatalf("receive %d: completion %+v, want ID %d, %d bytes", got, c, got, len(want[got]))
					}
					if b := s.dst[got<<12 : got<<12+len(want[got])]; !bytes.Equal(b, want[got]) {
						t.Fatalf("message %d: got %x, want %x", got, b, want[got])
					}
					got++
				}
				k = s.cq[0].Poll(wc[:])
				for _, c := range wc[:k] {
					n, ok := signaled[c.ID]
					if !ok || c.Status != rdmaio.StatusSuccess || c.Opcode != rdmaio.WCSend || int(c.ByteLen) != n {
						t.Fatalf("send completion %+v: not a signaled SEND or wrong (%d bytes wanted)", c, n)
					}
					if c.ID >= uint64(got) {
						t.Fatalf("send %d completed before the receiver took it (%d received)", c.ID, got)
					}
					delete(signaled, c.ID)
				}
			}
		})
	}
}

// TestPostSendInlineErrors: PostSendInline refuses what PostSend refuses,
// with the same errors: too long for MaxInline, a full send queue, a QP not
// in RTS, a closed QP.
func TestPostSendInlineErrors(t *testing.T) {
	s := newInlinePair(t, rdmaio.RNRRetryInfinite)
	iqp := s.qp[0].(rdmaio.InlineQP)
	if err := iqp.PostSendInline(1, 0, make([]byte, 100), make([]byte, 157)); !errors.Is(err, rdmaio.ErrMessageTooLong) {
		t.Errorf("257 bytes inline (max 256): %v, want ErrMessageTooLong", err)
	}
	// Fill the send queue with unsignaled SENDs the receiver never takes.
	for i := range inlineDepth {
		if err := iqp.PostSendInline(uint64(i), 0, nil, []byte{1}); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	if err := iqp.PostSendInline(99, 0, nil, []byte{1}); !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Errorf("post to a full send queue: %v, want ErrQueueFull", err)
	}
	iqp1 := s.qp[1].(rdmaio.InlineQP)
	if err := s.qp[1].Modify(rdmaio.QPAttr{State: rdmaio.StateReset}); err != nil {
		t.Fatal(err)
	}
	if err := iqp1.PostSendInline(1, 0, nil, []byte{1}); !errors.Is(err, rdmaio.ErrInvalidState) {
		t.Errorf("post in RESET: %v, want ErrInvalidState", err)
	}
	if err := s.qp[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := iqp1.PostSendInline(1, 0, nil, []byte{1}); !errors.Is(err, rdmaio.ErrClosed) {
		t.Errorf("post on a closed QP: %v, want ErrClosed", err)
	}
}

// TestPostSendInlineAllocs: an inline SEND posted in pieces, delivered and
// completed, allocates nothing.
func TestPostSendInlineAllocs(t *testing.T) {
	s := newInlinePair(t, rdmaio.RNRRetryInfinite)
	iqp := s.qp[0].(rdmaio.InlineQP)
	hdr, payload := make([]byte, 16), make([]byte, 8)
	recv := []rdmaio.RecvWR{{SGL: []rdmaio.SGE{rdmaio.MRSGE(s.dstM, 0, 1<<12)}}}
	var wc [4]rdmaio.WorkCompletion
	allocs := testing.AllocsPerRun(200, func() {
		if err := iqp.PostSendInline(7, rdmaio.SendSignaled, hdr, payload); err != nil {
			t.Fatal(err)
		}
		pollN(t, s.cq[1], wc[:], 1)
		if _, err := s.qp[1].PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		pollN(t, s.cq[0], wc[:], 1)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per inline SEND", allocs)
	}
}

// TestShortEntries: a SEND without immediate takes the ring entry's short
// header, so that 48 bytes (a 16-byte message header and 32 bytes of data)
// fill one 64-byte line, inline or through PostSend; with an immediate the
// full header makes it two. Every message arrives whole, with its
// immediate.
func TestShortEntries(t *testing.T) {
	s := newInlinePair(t, rdmaio.RNRRetryInfinite)
	iqp := s.qp[0].(rdmaio.InlineQP)
	msg := func(i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*7 + j + 1)
		}
		return b
	}
	type sent struct {
		data []byte
		imm  bool
	}
	var want []sent
	cases := []struct {
		n     int
		how   string // "inline", "post" or "imm"
		lines uint64
	}{
		{48, "inline", 1}, {48, "post", 1}, {48, "imm", 2}, {49, "inline", 2}, {1, "post", 1}, {16, "imm", 1}, {0, "inline", 1},
	}
	for i, c := range cases {
		b := msg(i, c.n)
		before := shm.RingBytes(s.qp[0])
		switch c.how {
		case "inline":
			if err := iqp.PostSendInline(uint64(i), 0, b[:min(c.n, 16)], b[min(c.n, 16):]); err != nil {
				t.Fatalf("post inline %d: %v", i, err)
			}
		default:
			copy(s.src[i<<8:], b)
			wr := rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpSend}
			if c.how == "imm" {
				wr.Opcode, wr.Imm = rdmaio.OpSendImm, uint32(1000+i)
			}
			if c.n > 0 {
				wr.SGL = []rdmaio.SGE{rdmaio.MRSGE(s.srcM, i<<8, c.n)}
			}
			if k, err := s.qp[0].PostSend([]rdmaio.SendWR{wr}); err != nil || k != 1 {
				t.Fatalf("post send %d: %d, %v", i, k, err)
			}
		}
		if used := shm.RingBytes(s.qp[0]) - before; used != 64*c.lines {
			t.Errorf("%s SEND of %d bytes took %d bytes of the ring, want %d", c.how, c.n, used, 64*c.lines)
		}
		want = append(want, sent{b, c.how == "imm"})
	}
	var wc [16]rdmaio.WorkCompletion
	got := 0
	for spins := 0; got < len(want); spins++ {
		if spins > 1<<24 {
			t.Fatalf("stuck: %d of %d received", got, len(want))
		}
		k := s.cq[1].Poll(wc[:])
		for _, c := range wc[:k] {
			w := want[got]
			if c.Status != rdmaio.StatusSuccess || c.ID != uint64(got) || int(c.ByteLen) != len(w.data) ||
				w.imm != (c.Flags&rdmaio.WCWithImm != 0) || w.imm && c.Imm != uint32(1000+got) {
				t.Fatalf("receive %d: completion %+v, want %d bytes, immediate %v", got, c, len(w.data), w.imm)
			}
			if b := s.dst[got<<12 : got<<12+len(w.data)]; !bytes.Equal(b, w.data) {
				t.Fatalf("message %d: got %x, want %x", got, b, w.data)
			}
			got++
		}
	}
}
