package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

func pktSeq(p []byte) uint32 { return binary.LittleEndian.Uint32(p[4:]) }

// out collects a link's ready packets (copied) and messages.
func out(l *Link) (pkts [][]byte, msgs []string) {
	rd := l.Ready()
	for _, p := range rd.Packets {
		pkts = append(pkts, append([]byte(nil), p...))
	}
	for _, m := range rd.Messages {
		msgs = append(msgs, string(m))
	}
	l.Advance()
	return
}

func TestLinkSteps(t *testing.T) {
	cfg := LinkConfig{MTU: LinkHeader + 4, Window: 8, RTO: 10 * time.Millisecond}
	t.Run("fragments are numbered and reassembled in order", func(t *testing.T) {
		a, b := NewLink(cfg), NewLink(cfg)
		a.Send(t0, []byte("hello"), []byte(" world"))
		pk, _ := out(a)
		if len(pk) != 3 {
			t.Fatalf("%d packets for 11 bytes in 4-byte fragments", len(pk))
		}
		for i, p := range pk {
			if pktSeq(p) != uint32(i) {
				t.Fatalf("packet %d has seq %d", i, pktSeq(p))
			}
			b.Receive(t0, p)
		}
		_, m := out(b)
		if len(m) != 1 || m[0] != "hello world" {
			t.Fatalf("delivered %q", m)
		}
	})
	t.Run("a message longer than MaxMsg is dropped and reported, naming the peer", func(t *testing.T) {
		// The sender's side has no bound (as a peer that ignores the
		// protocol's limits); the receiver takes at most 10 bytes.
		a, b := NewLink(cfg), NewLink(LinkConfig{MTU: cfg.MTU, Window: cfg.Window, MaxMsg: 10, Peer: 7})
		a.Send(t0, []byte("ok"))
		a.Send(t0, bytes.Repeat([]byte("x"), 1000))
		a.Send(t0, []byte("exactly 10"))
		var errs []error
		for i := 0; !a.Idle(); i++ {
			if i == 1000 {
				t.Fatal("the link does not drain")
			}
			a.Tick(t0)
			pk, _ := out(a)
			for _, p := range pk {
				if err := b.Receive(t0, p); err != nil {
					errs = append(errs, err)
				}
			}
			ack, _ := out(b)
			for _, p := range ack {
				a.Receive(t0, p)
			}
		}
		if len(errs) != 1 || !errors.Is(errs[0], ErrLinkTooLong) || !strings.Contains(errs[0].Error(), "rank 7") {
			t.Fatalf("errors %v, want one ErrLinkTooLong naming rank 7", errs)
		}
		if b.Stats.TooLong != 1 || b.Stats.Delivered != 2 {
			t.Fatalf("stats %+v", b.Stats)
		}
		if cap(b.asm) > 10+cfg.MTU {
			t.Fatalf("reassembly buffer grew to %d bytes", cap(b.asm))
		}
	})
	t.Run("an empty message is one packet", func(t *testing.T) {
		a, b := NewLink(cfg), NewLink(cfg)
		a.Send(t0)
		pk, _ := out(a)
		b.Receive(t0, pk[0])
		if _, m := out(b); len(m) != 1 || m[0] != "" {
			t.Fatalf("delivered %q", m)
		}
	})
	t.Run("a lost packet is retransmitted after its timeout, and only then", func(t *testing.T) {
		a, b := NewLink(cfg), NewLink(cfg)
		a.Send(t0, []byte("abc"))
		out(a) // lost
		a.Tick(t0.Add(5 * time.Millisecond))
		if pk, _ := out(a); len(pk) != 0 {
			t.Fatalf("retransmitted early")
		}
		a.Tick(t0.Add(10 * time.Millisecond))
		pk, _ := out(a)
		if len(pk) != 1 || a.Stats.Retransmits != 1 {
			t.Fatalf("no retransmission: %d packets", len(pk))
		}
		b.Receive(t0, pk[0])
		ack, m := out(b)
		if len(m) != 1 || len(ack) != 1 || ack[0][0] != pktAck {
			t.Fatalf("delivered %q, acks %d", m, len(ack))
		}
		a.Receive(t0, ack[0])
		if !a.Idle() {
			t.Fatal("acknowledged packet still outstanding")
		}
		// Backoff: the timeout doubled for that packet; nothing left anyway.
		a.Tick(t0.Add(time.Second))
		if pk, _ := out(a); len(pk) != 0 {
			t.Fatal("retransmitted an acknowledged packet")
		}
	})
	t.Run("duplicates are delivered once and acknowledged again", func(t *testing.T) {
		a, b := NewLink(cfg), NewLink(cfg)
		a.Send(t0, []byte("x"))
		pk, _ := out(a)
		b.Receive(t0, pk[0])
		b.Receive(t0, pk[0])
		ack, m := out(b)
		if len(m) != 1 || b.Stats.Duplicates != 1 || len(ack) != 1 {
			t.Fatalf("delivered %q, dups %d, acks %d", m, b.Stats.Duplicates, len(ack))
		}
		b.Receive(t0, pk[0]) // the ack was lost: answer again
		if ack, _ := out(b); len(ack) != 1 {
			t.Fatal("duplicate not acknowledged")
		}
	})
	t.Run("early packets wait for the missing one; delivery stays in order", func(t *testing.T) {
		a, b := NewLink(cfg), NewLink(cfg)
		for _, s := range []string{"m0", "m1", "m2", "m3"} {
			a.Send(t0, []byte(s))
		}
		pk, _ := out(a)
		for _, i := range []int{1, 3, 2} {
			b.Receive(t0, pk[i])
		}
		ack, m := out(b)
		if len(m) != 0 {
			t.Fatalf("delivered %q before m0", m)
		}
		// The acknowledgement reports 1..3 selectively; three later packets
		// trigger a fast retransmission of 0.
		a.Receive(t0.Add(time.Millisecond), ack[0])
		re, _ := out(a)
		if len(re) != 1 || pktSeq(re[0]) != 0 || a.Stats.FastRetransmits != 1 {
			t.Fatalf("fast retransmit: %d packets, stats %+v", len(re), a.Stats)
		}
		b.Receive(t0, re[0])
		if _, m := out(b); fmt.Sprint(m) != "[m0 m1 m2 m3]" {
			t.Fatalf("delivered %q", m)
		}
	})
	t.Run("the window bounds unacknowledged packets", func(t *testing.T) {
		a := NewLink(cfg)
		for i := 0; i < 20; i++ {
			a.Send(t0, []byte{byte(i)})
		}
		if pk, _ := out(a); len(pk) != cfg.Window {
			t.Fatalf("%d packets in flight, window %d", len(pk), cfg.Window)
		}
	})
	t.Run("data piggybacks acknowledgements", func(t *testing.T) {
		a, b := NewLink(cfg), NewLink(cfg)
		a.Send(t0, []byte("ping"))
		pk, _ := out(a)
		b.Receive(t0, pk[0])
		b.Send(t0, []byte("pong"))
		pk, _ = out(b)
		if len(pk) != 1 || pk[0][0] != pktData || b.Stats.Acks != 0 {
			t.Fatalf("%d packets, %d separate acks", len(pk), b.Stats.Acks)
		}
		a.Receive(t0, pk[0])
		if !a.Idle() {
			t.Fatal("piggybacked acknowledgement not taken")
		}
	})
	t.Run("a stale selective acknowledgement does not cover newer packets in the same slot", func(t *testing.T) {
		a, b := NewLink(cfg), NewLink(cfg)
		var first [][]byte
		for i := 0; i < cfg.Window; i++ {
			a.Send(t0, []byte{byte(i)})
		}
		first, _ = out(a)
		// b gets packet 1 only: its acknowledgement says "expect 0, have 1".
		b.Receive(t0, first[1])
		stale, _ := out(b)
		// Then everything arrives and is acknowledged; a sends a new window.
		for _, p := range first {
			b.Receive(t0, p)
		}
		ack, _ := out(b)
		a.Receive(t0, ack[0])
		for i := 0; i < cfg.Window; i++ {
			a.Send(t0, []byte{byte(i)})
		}
		out(a) // all lost
		// The stale acknowledgement arrives late: packet 1+Window shares
		// packet 1's slot and must still be retransmitted.
		a.Receive(t0, stale[0])
		a.Tick(t0.Add(cfg.RTO))
		if pk, _ := out(a); len(pk) != cfg.Window {
			t.Fatalf("retransmitted %d of %d lost packets", len(pk), cfg.Window)
		}
	})
	t.Run("malformed packets are dropped", func(t *testing.T) {
		a := NewLink(cfg)
		a.Receive(t0, []byte{1, 2, 3})
		a.Receive(t0, make([]byte, LinkHeader))
		if a.Stats.Malformed != 2 {
			t.Fatalf("malformed %d", a.Stats.Malformed)
		}
	})
}

// lossyNet carries packets between two links with loss, duplication and
// reordering, on a virtual clock.
type lossyNet struct {
	rng                *rand.Rand
	loss, dup, reorder float64
	inflight           []flight
	dropped            int
}

type flight struct {
	to  int
	at  time.Time
	pkt []byte
}

func (n *lossyNet) send(now time.Time, to int, pkts [][]byte) {
	for _, p := range pkts {
		if n.rng.Float64() < n.loss {
			n.dropped++
			continue
		}
		copies := 1
		if n.rng.Float64() < n.dup {
			copies = 2
		}
		for c := 0; c < copies; c++ {
			d := time.Duration(n.rng.IntN(200)) * time.Microsecond
			if n.rng.Float64() < n.reorder {
				d += time.Duration(1+n.rng.IntN(5)) * time.Millisecond
			}
			n.inflight = append(n.inflight, flight{to, now.Add(d), append([]byte(nil), p...)})
		}
	}
}

// TestLinkLossy sends thousands of messages of random sizes (up to several
// fragments) in both directions through a network that loses 10% of the
// packets, duplicates 5% and delays 10% behind later ones, and requires
// every message to arrive exactly once and in order.
func TestLinkLossy(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { linkLossy(t, seed) })
	}
}

func linkLossy(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	cfg := LinkConfig{MTU: 64, Window: 32, RTO: 3 * time.Millisecond}
	links := [2]*Link{NewLink(cfg), NewLink(cfg)}
	net := &lossyNet{rng: rng, loss: 0.10, dup: 0.05, reorder: 0.10}
	const total = 1500
	var sent [2][][]byte
	var got [2][][]byte
	now := t0
	flush := func(i int) {
		rd := links[i].Ready()
		net.send(now, 1-i, rd.Packets)
		for _, m := range rd.Messages {
			got[i] = append(got[i], append([]byte(nil), m...))
		}
		links[i].Advance()
	}
	for step := 0; step < 200000; step++ {
		now = now.Add(50 * time.Microsecond)
		// Send new messages while some remain.
		for i := 0; i < 2; i++ {
			if len(sent[i]) < total && rng.IntN(2) == 0 {
				m := make([]byte, rng.IntN(3*cfg.MTU))
				for k := range m {
					m[k] = byte(rng.Uint32())
				}
				copy(m, fmt.Sprint(len(sent[i])))
				sent[i] = append(sent[i], m)
				links[i].Send(now, m)
			}
		}
		// Deliver due packets.
		keep := net.inflight[:0]
		var due []flight
		for _, f := range net.inflight {
			if !f.at.After(now) {
				due = append(due, f)
			} else {
				keep = append(keep, f)
			}
		}
		net.inflight = keep
		for _, f := range due {
			links[f.to].Receive(now, f.pkt)
		}
		for i := 0; i < 2; i++ {
			links[i].Tick(now)
			flush(i)
		}
		if len(got[0]) == total && len(got[1]) == total && links[0].Idle() && links[1].Idle() {
			break
		}
	}
	for i := 0; i < 2; i++ {
		recv := got[1-i]
		if len(recv) != len(sent[i]) {
			t.Fatalf("direction %d: %d of %d messages delivered (stats %+v / %+v)", i, len(recv), len(sent[i]), links[i].Stats, links[1-i].Stats)
		}
		for k := range recv {
			if !bytes.Equal(recv[k], sent[i][k]) {
				t.Fatalf("direction %d message %d: got %q…, want %q…", i, k, recv[k][:min(8, len(recv[k]))], sent[i][k][:min(8, len(sent[i][k]))])
			}
		}
	}
	if net.dropped == 0 || links[0].Stats.Retransmits+links[1].Stats.Retransmits == 0 || links[0].Stats.Duplicates+links[1].Stats.Duplicates == 0 {
		t.Fatalf("faults not exercised: dropped %d, stats %+v %+v", net.dropped, links[0].Stats, links[1].Stats)
	}
	t.Logf("dropped %d; stats %+v", net.dropped, links[0].Stats)
}

func TestLinkSteadyStateAllocs(t *testing.T) {
	// 600 bytes fit in the window; 256 KiB in 256-byte packets are many
	// times the window, queued whole when sent.
	for _, size := range []int{600, 256 << 10} {
		cfg := LinkConfig{MTU: 256}
		a, b := NewLink(cfg), NewLink(cfg)
		msg := make([]byte, size)
		step := func() {
			a.Send(t0, msg)
			for i := 0; !a.Idle() || a.HasReady() || b.HasReady(); i++ {
				if i == 100000 {
					t.Fatalf("%d-byte message: stuck (a idle %v, a ready %v, b ready %v)", size, a.Idle(), a.HasReady(), b.HasReady())
				}
				a.Tick(t0) // moves queued packets into the window
				rd := a.Ready()
				for _, p := range rd.Packets {
					b.Receive(t0, p)
				}
				a.Advance()
				rd = b.Ready()
				for _, p := range rd.Packets {
					a.Receive(t0, p)
				}
				b.Advance()
			}
		}
		for i := 0; i < 10; i++ {
			step()
		}
		if n := testing.AllocsPerRun(20, step); n > 0 {
			t.Fatalf("%d-byte messages: %v allocations per message", size, n)
		}
	}
}
