package udtransport

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/rdmaio"
	_ "github.com/jiarun/jia/rdmaio/tcp"
)

type collect struct{ msgs [][]byte }

func (c *collect) Deliver(_ int, m []byte) { c.msgs = append(c.msgs, append([]byte(nil), m...)) }
func (c *collect) Complete(uint64, error)  {}

// TestMalformedDatagrams feeds crafted receive completions to a rank: short
// datagrams, unknown senders, wrong cookies or queue pairs, malformed Link
// packets, bad buffer indices. None panics, none is delivered, and a real
// message still gets through afterwards.
func TestMalformedDatagrams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	trs, err := OpenLocal(ctx, "tcp", "udtransport-internal", 2, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		done := make(chan struct{})
		go func() { trs[1].Close(); close(done) }()
		trs[0].Close()
		<-done
	}()
	tr := trs[0]
	d := tr.devs[0]
	p := tr.peers[1]
	hdr := func(src, cookie uint32) []byte {
		b := make([]byte, udHeader)
		binary.LittleEndian.PutUint32(b, src)
		binary.LittleEndian.PutUint32(b[4:], cookie)
		return b
	}
	good := hdr(1, p.rcookie)
	pkt := make([]byte, proto.LinkHeader+4)
	pkt[0] = 1
	pkt[1] = 3
	cases := []struct {
		name string
		data []byte
		id   uint64
		qpn  uint32
		n    int // ByteLen, -1: len(data)
	}{
		{"empty", nil, 0, p.rqpn, -1},
		{"short", []byte{1, 2, 3}, 1, p.rqpn, -1},
		{"sender out of range", append(hdr(7, p.rcookie), pkt...), 2, p.rqpn, -1},
		{"sender is self", append(hdr(0, p.rcookie), pkt...), 3, p.rqpn, -1},
		{"huge sender", append(hdr(1<<31, p.rcookie), pkt...), 4, p.rqpn, -1},
		{"wrong cookie", append(hdr(1, p.rcookie+1), pkt...), 5, p.rqpn, -1},
		{"wrong queue pair", append(append([]byte(nil), good...), pkt...), 6, p.rqpn + 1, -1},
		{"length beyond buffer", append(append([]byte(nil), good...), pkt...), 7, p.rqpn, 1 << 20},
		{"no link header", append(append([]byte(nil), good...), 1, 2, 3), 8, p.rqpn, -1},
		{"bad link type", append(append([]byte(nil), good...), make([]byte, proto.LinkHeader)...), 9, p.rqpn, -1},
	}
	tr.pollMu.Lock()
	for _, c := range cases {
		off := int(c.id) * d.bufSize
		copy(d.rslab[off:off+d.bufSize], c.data)
		n := c.n
		if n < 0 {
			n = len(c.data)
		}
		wc := []rdmaio.WorkCompletion{{ID: c.id, Status: rdmaio.StatusSuccess, Opcode: rdmaio.WCRecv, ByteLen: uint32(n), QPN: d.qp.QPN(), SrcQPN: c.qpn}}
		// The buffer is posted already: take it out of the accounting by
		// not reposting it twice (the crafted completion stands for it).
		tr.received(d, wc, time.Now())
		d.repost = d.repost[:0]
	}
	// A completion naming no receive buffer.
	tr.received(d, []rdmaio.WorkCompletion{{ID: 1 << 40, Status: rdmaio.StatusSuccess}}, time.Now())
	tr.flushTouched(time.Now())
	tr.pollMu.Unlock()
	if tr.Err() == nil {
		t.Errorf("a completion for no receive buffer was not reported")
	}
	tr.errMu.Lock()
	tr.err = nil
	tr.hasErr.Store(false)
	tr.errMu.Unlock()
	s := tr.Stats()
	if s.Dropped != 8 || s.Link.Malformed != 2 || s.Link.Delivered != 0 {
		t.Errorf("stats %+v: want 8 dropped datagrams and 2 malformed packets", s)
	}
	// A real message still gets through, both ways.
	if err := trs[1].Send(0, []byte("after"), nil); err != nil {
		t.Fatal(err)
	}
	if err := trs[0].Send(1, []byte("back"), nil); err != nil {
		t.Fatal(err)
	}
	var c0, c1 collect
	deadline := time.Now().Add(time.Minute)
	for len(c0.msgs) < 1 || len(c1.msgs) < 1 {
		trs[0].Poll(&c0)
		trs[1].Poll(&c1)
		if time.Now().After(deadline) {
			t.Fatal("messages after the malformed datagrams did not arrive")
		}
	}
	if string(c0.msgs[0]) != "after" || string(c1.msgs[0]) != "back" {
		t.Fatalf("got %q and %q", c0.msgs, c1.msgs)
	}
}

// TestDecodeCard: a card survives encoding, and no truncation or
// corruption of it makes the decoder panic.
func TestDecodeCard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	trs, err := OpenLocal(ctx, "tcp", "udtransport-internal", 2, nil, Options{Linger: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, tr := range trs {
			tr.Close()
		}
	}()
	b := trs[0].encodeCard()
	c, err := decodeCard(b)
	if err != nil {
		t.Fatal(err)
	}
	d := trs[0].devs[0]
	if c.rank != 0 || c.size != 2 || len(c.devs) != 1 || c.devs[0].qpn != d.qp.QPN() || c.devs[0].qkey != d.qkey ||
		c.devs[0].cookie != d.cookie || c.devs[0].mtu != d.mtu || !bytes.Equal(c.devs[0].addr, d.dev.Addr()) ||
		c.slots[0] != noSlot || c.slots[1] != 0 {
		t.Fatalf("decoded card %+v", c)
	}
	for i := 0; i < len(b); i++ {
		if _, err := decodeCard(b[:i]); err == nil {
			t.Errorf("card truncated to %d bytes decoded", i)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		m := append([]byte(nil), b...)
		for range 1 + rng.IntN(4) {
			m[rng.IntN(len(m))] = byte(rng.Uint32())
		}
		_, _ = decodeCard(m)
	}
	if err := remoteError(3, append([]byte(errMagic), context.Canceled.Error()...)); err == nil {
		t.Errorf("error blob not recognised")
	}
}
