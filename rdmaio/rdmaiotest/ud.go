package rdmaiotest

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// testUD: one UD QP receives from several peers' UD QPs; completions name
// the source QP (and rank); immediates arrive.
func testUD(t *testing.T, f Fabric) {
	const qkey = 0x1111
	w := newWorld(t, f, 3)
	r0 := w.ranks[0]
	u0 := w.ud(0, qkey, qpOpt{})
	rb := r0.reg(make([]byte, 64*16), rdmaio.AccessLocalWrite)
	for i := 0; i < 16; i++ {
		postRecv(t, u0, rdmaio.RecvWR{ID: uint64(i), SGL: sge(rb, 64*i, 64)})
	}
	qpnOf := map[int]uint32{}
	for s := 1; s <= 2; s++ {
		u := w.ud(s, qkey, qpOpt{})
		qpnOf[s] = u.QPN()
		ah := w.ah(s, 0)
		for j := 0; j < 4; j++ {
			msg := []byte(fmt.Sprintf("from %d #%d", s, j))
			post(t, u, rdmaio.SendWR{ID: uint64(j), Opcode: rdmaio.OpSendImm, Imm: uint32(s*100 + j), Inline: msg,
				AH: ah, RemoteQPN: u0.QPN(), RemoteQKey: qkey, Flags: rdmaio.SendSignaled})
		}
		w.ok(w.wait(w.ranks[s].cq, 4))
	}
	rc := w.wait(r0.cq, 8)
	w.ok(rc)
	next := map[int]int{}
	for _, c := range rc {
		// QPNs of different devices may coincide: the payload names the
		// sender.
		var s int
		if _, err := fmt.Sscanf(string(rb.Bytes()[64*c.ID:]), "from %d", &s); err != nil || qpnOf[s] == 0 {
			t.Fatalf("unexpected datagram %q", rb.Bytes()[64*c.ID:64*c.ID+uint64(c.ByteLen)])
		}
		if c.SrcQPN != qpnOf[s] {
			t.Fatalf("datagram from rank %d (QP %d) reports SrcQPN %d", s, qpnOf[s], c.SrcQPN)
		}
		if c.SrcRank != int32(s) && c.SrcRank != -1 {
			t.Fatalf("completion from rank %d reports SrcRank %d", s, c.SrcRank)
		}
		j := next[s]
		next[s]++
		want := fmt.Sprintf("from %d #%d", s, j)
		if c.Imm != uint32(s*100+j) || c.Flags&rdmaio.WCWithImm == 0 || c.ByteLen != uint32(len(want)) || c.QPN != u0.QPN() {
			t.Fatalf("datagram %s: completion %+v", want, c)
		}
		got := rb.Bytes()[64*c.ID : 64*c.ID+uint64(c.ByteLen)]
		same(t, "datagram", got, []byte(want))
	}
	// A datagram to a QP number that does not exist completes at the
	// sender and goes nowhere.
	u1 := w.ranks[1].qps[0]
	post(t, u1, rdmaio.SendWR{ID: 99, Opcode: rdmaio.OpSend, Inline: []byte("void"), AH: w.ranks[1].ahs[0], RemoteQPN: u0.QPN() + 77, RemoteQKey: qkey, Flags: rdmaio.SendSignaled})
	w.ok(w.wait(w.ranks[1].cq, 1))
	if got := w.settle(r0.cq, 20*time.Millisecond); len(got) != 0 {
		t.Fatalf("datagram to a missing QP arrived: %s", describe(got))
	}
}

// testUDQKey: the receiver drops datagrams whose Q_Key does not match its
// own, and datagrams that find no receive posted.
func testUDQKey(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	r0, r1 := w.ranks[0], w.ranks[1]
	u0 := w.ud(0, 0x1111, qpOpt{})
	u1 := w.ud(1, 0x1111, qpOpt{})
	ah := w.ah(1, 0)
	rb := r0.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	postRecv(t, u0, rdmaio.RecvWR{ID: 1, SGL: sge(rb, 0, 64)})
	send := func(id uint64, qkey uint32, msg string) {
		post(t, u1, rdmaio.SendWR{ID: id, Opcode: rdmaio.OpSend, Inline: []byte(msg), AH: ah, RemoteQPN: u0.QPN(), RemoteQKey: qkey, Flags: rdmaio.SendSignaled})
		w.ok(w.wait(r1.cq, 1))
	}
	send(1, 0x2222, "wrong key")
	send(2, 0x1111, "right key")
	c := w.wait(r0.cq, 1)[0]
	if c.Status != rdmaio.StatusSuccess || c.ByteLen != uint32(len("right key")) {
		t.Fatalf("completion %+v", c)
	}
	same(t, "datagram with the right Q_Key", rb.Bytes()[:c.ByteLen], []byte("right key"))
	if got := w.settle(r0.cq, 20*time.Millisecond); len(got) != 0 {
		t.Fatalf("extra completions: %s", describe(got))
	}
	// No receive posted: dropped, not kept for a later receive.
	send(3, 0x1111, "nobody listens")
	w.settle(r0.cq, 20*time.Millisecond)
	postRecv(t, u0, rdmaio.RecvWR{ID: 2, SGL: sge(rb, 0, 64)})
	send(4, 0x1111, "listening")
	c = w.wait(r0.cq, 1)[0]
	same(t, "datagram after a drop", rb.Bytes()[:c.ByteLen], []byte("listening"))
}

// testUDMTU: a UD payload of exactly the MTU is delivered; one byte more is
// refused at post time.
func testUDMTU(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	r0, r1 := w.ranks[0], w.ranks[1]
	mtu := r1.dev.Attr().MTU
	u0 := w.ud(0, 9, qpOpt{})
	u1 := w.ud(1, 9, qpOpt{})
	ah := w.ah(1, 0)
	src := r1.reg(make([]byte, mtu+1), 0)
	fill(src.Bytes(), 4)
	dst := r0.reg(make([]byte, mtu+1), rdmaio.AccessLocalWrite)
	_, err := u1.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSend, SGL: sge(src, 0, mtu+1), AH: ah, RemoteQPN: u0.QPN(), RemoteQKey: 9}})
	expectErr(t, err, rdmaio.ErrMessageTooLong, "UD send of MTU+1 bytes")
	postRecv(t, u0, rdmaio.RecvWR{ID: 1, SGL: sge(dst, 0, mtu+1)})
	post(t, u1, rdmaio.SendWR{ID: 1, Opcode: rdmaio.OpSend, SGL: sge(src, 0, mtu), AH: ah, RemoteQPN: u0.QPN(), RemoteQKey: 9, Flags: rdmaio.SendSignaled})
	w.ok(w.wait(r1.cq, 1))
	c := w.wait(r0.cq, 1)[0]
	if c.Status != rdmaio.StatusSuccess || c.ByteLen != uint32(mtu) {
		t.Fatalf("MTU-sized datagram: %+v", c)
	}
	same(t, "MTU-sized datagram", dst.Bytes()[:mtu], src.Bytes()[:mtu])
}

// testUDInjectedLoss: with the provider's fault injector dropping 10% of the
// UD datagrams, the receiver gets every datagram the injector let through,
// intact and once, and nothing else. The sender sends in small batches and
// the receiver keeps enough receives posted, so that no datagram may be
// lost to a full socket or receive queue: any loss but the injected one
// fails the test (as a timeout).
func testUDInjectedLoss(t *testing.T, f Fabric) {
	ff, ok := f.(FaultFabric)
	if !ok {
		t.Skip("the fabric cannot inject UD loss")
	}
	const (
		qkey   = 0x1055
		total  = 2000
		batch  = 16
		loss   = 0.1
		window = 64
	)
	devs := ff.OpenLossy(t, 2, loss, 1)
	if len(devs) != 2 {
		t.Fatalf("fabric opened %d devices, want 2", len(devs))
	}
	w := newWorldOf(t, f, devs)
	r0, r1 := w.ranks[0], w.ranks[1]
	u0 := w.ud(0, qkey, qpOpt{cap: rdmaio.QPCap{MaxRecvWR: window}})
	u1 := w.ud(1, qkey, qpOpt{cap: rdmaio.QPCap{MaxSendWR: 2 * batch}})
	ah := w.ah(1, 0)
	rb := r0.reg(make([]byte, 8*window), rdmaio.AccessLocalWrite)
	recv := func(i uint64) rdmaio.RecvWR { return rdmaio.RecvWR{ID: i, SGL: sge(rb, 8*int(i), 8)} }
	for i := uint64(0); i < window; i++ {
		postRecv(t, u0, recv(i))
	}
	seen := make([]bool, total)
	delivered := 0
	var payload [8]byte
	for sent := 0; sent < total; sent += batch {
		before := ff.Dropped(devs[1])
		for j := 0; j < batch; j++ {
			binary.LittleEndian.PutUint64(payload[:], uint64(sent+j))
			wr := rdmaio.SendWR{ID: uint64(sent + j), Opcode: rdmaio.OpSend, Inline: payload[:], AH: ah, RemoteQPN: u0.QPN(), RemoteQKey: qkey}
			if j == batch-1 {
				wr.Flags = rdmaio.SendSignaled
			}
			post(t, u1, wr)
		}
		w.ok(w.wait(r1.cq, 1))
		dropped := int(ff.Dropped(devs[1]) - before)
		if dropped < 0 || dropped > batch {
			t.Fatalf("injector reports %d drops in a batch of %d", dropped, batch)
		}
		for _, c := range w.wait(r0.cq, batch-dropped) {
			if c.Status != rdmaio.StatusSuccess || c.ByteLen != 8 || c.QPN != u0.QPN() || c.SrcQPN != u1.QPN() {
				t.Fatalf("datagram completion %+v", c)
			}
			seq := binary.LittleEndian.Uint64(rb.Bytes()[8*c.ID:])
			if seq < uint64(sent) || seq >= uint64(sent+batch) || seen[seq] {
				t.Fatalf("datagram %d delivered in batch %d..%d (twice: %v)", seq, sent, sent+batch-1, seq < total && seen[seq])
			}
			seen[seq] = true
			delivered++
			postRecv(t, u0, recv(c.ID))
		}
	}
	if extra := w.settle(r0.cq, 20*time.Millisecond); len(extra) != 0 {
		t.Fatalf("datagrams beyond those the injector let through: %s", describe(extra))
	}
	dropped := int(ff.Dropped(devs[1]))
	if delivered+dropped != total {
		t.Fatalf("%d delivered + %d dropped by the injector != %d sent", delivered, dropped, total)
	}
	// 10% of 2000: 200 expected, standard deviation 13.4.
	if dropped < total*loss/2 || dropped > total*loss*3/2 {
		t.Fatalf("injector dropped %d of %d datagrams at loss %v", dropped, total, loss)
	}
}
