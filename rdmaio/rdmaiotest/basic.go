package rdmaiotest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/jiarun/jia/rdmaio"
)

// testObjects: device attributes are sane and object lifetimes follow verbs
// (a PD or CQ in use cannot be destroyed; objects of another device are
// refused).
func testObjects(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	at := a.dev.Attr()
	if at.MTU < 256 || at.MaxSGE < 1 || at.MaxQPWR < 16 || at.MaxMsgSize < 1<<20 || at.MaxQP < 2 || at.Provider == "" {
		t.Fatalf("implausible device attributes %+v", at)
	}
	if a.dev.Provider() != at.Provider {
		t.Fatalf("Provider() %q, Attr().Provider %q", a.dev.Provider(), at.Provider)
	}
	if len(a.dev.Addr()) == 0 || bytes.Equal(a.dev.Addr(), b.dev.Addr()) {
		t.Fatalf("device addresses empty or equal")
	}
	q := a.qp(rdmaio.RC, qpOpt{})
	if q.Type() != rdmaio.RC || q.State() != rdmaio.StateReset || q.QPN() == 0 {
		t.Fatalf("new QP: type %v state %v qpn %d", q.Type(), q.State(), q.QPN())
	}
	if c := q.Cap(); c.MaxSendWR < 1 || c.MaxRecvWR < 1 || c.MaxSendSGE < 1 {
		t.Fatalf("QP caps %+v", c)
	}
	expectErr(t, a.pd.Close(), rdmaio.ErrInUse, "close PD with a QP")
	expectErr(t, a.cq.Close(), rdmaio.ErrInUse, "close CQ with a QP")
	_, err := a.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: b.cq, RecvCQ: b.cq})
	if err == nil {
		t.Fatalf("CreateQP with another device's CQ succeeded")
	}
	_, err = a.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: a.cq, RecvCQ: a.cq, Cap: rdmaio.QPCap{MaxSendWR: at.MaxQPWR + 1}})
	expectErr(t, err, rdmaio.ErrInvalidArgument, "CreateQP deeper than MaxQPWR")
	_, err = a.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.QPType(9), SendCQ: a.cq, RecvCQ: a.cq})
	expectErr(t, err, rdmaio.ErrInvalidArgument, "CreateQP of unknown type")
	if _, err := a.dev.CreateCQ(0); err == nil {
		t.Fatalf("CreateCQ(0) succeeded")
	}
	if err := q.Close(); err != nil {
		t.Fatalf("close QP: %v", err)
	}
	expectErr(t, q.Close(), rdmaio.ErrClosed, "second close of a QP")
	if _, err := q.PostSend([]rdmaio.SendWR{{}}); !errors.Is(err, rdmaio.ErrClosed) {
		t.Fatalf("PostSend on a closed QP: %v", err)
	}
}

// testStateMachine: RESET → INIT → RTR → RTS; illegal transitions and posts
// in the wrong state are errors; receives may be posted in INIT; ERR
// flushes; RESET brings a QP back.
func testStateMachine(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	buf := a.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	q := a.qp(rdmaio.RC, qpOpt{})
	send := rdmaio.SendWR{ID: 1, Opcode: rdmaio.OpSend, SGL: sge(buf, 0, 8), Flags: rdmaio.SendSignaled}
	recv := rdmaio.RecvWR{ID: 2, SGL: sge(buf, 8, 8)}

	_, err := q.PostSend([]rdmaio.SendWR{send})
	expectErr(t, err, rdmaio.ErrInvalidState, "post send in RESET")
	_, err = q.PostRecv([]rdmaio.RecvWR{recv})
	expectErr(t, err, rdmaio.ErrInvalidState, "post recv in RESET")
	for _, s := range []rdmaio.QPState{rdmaio.StateRTR, rdmaio.StateRTS} {
		expectErr(t, q.Modify(rdmaio.QPAttr{State: s, Dest: rdmaio.AHAttr{Addr: b.dev.Addr()}, DestQPN: 1}),
			rdmaio.ErrInvalidTransition, "RESET → "+s.String())
	}
	w.modify(a, q, rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote})
	w.modify(a, q, rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote})
	postRecv(t, q, recv)
	_, err = q.PostSend([]rdmaio.SendWR{send})
	expectErr(t, err, rdmaio.ErrInvalidState, "post send in INIT")
	expectErr(t, q.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS}), rdmaio.ErrInvalidTransition, "INIT → RTS")
	expectErr(t, q.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR}), rdmaio.ErrInvalidArgument, "INIT → RTR without a destination")
	expectErr(t, q.Modify(rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessLocalWrite}), rdmaio.ErrInvalidArgument, "QP access with local rights")

	qb := b.qp(rdmaio.RC, qpOpt{})
	w.modify(b, qb, rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote})
	w.modify(a, q, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: b.dev.Addr()}, DestQPN: qb.QPN()})
	if q.State() != rdmaio.StateRTR {
		t.Fatalf("state %v after RTR", q.State())
	}
	_, err = q.PostSend([]rdmaio.SendWR{send})
	expectErr(t, err, rdmaio.ErrInvalidState, "post send in RTR")
	expectErr(t, q.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: 8}), rdmaio.ErrInvalidArgument, "RNRRetry 8")
	w.modify(a, q, rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite})
	w.modify(a, q, rdmaio.QPAttr{State: rdmaio.StateRTS})
	expectErr(t, q.Modify(rdmaio.QPAttr{State: rdmaio.StateInit}), rdmaio.ErrInvalidTransition, "RTS → INIT")
	expectErr(t, q.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR}), rdmaio.ErrInvalidTransition, "RTS → RTR")

	w.modify(a, q, rdmaio.QPAttr{State: rdmaio.StateErr})
	if q.State() != rdmaio.StateErr {
		t.Fatalf("state %v after ERR", q.State())
	}
	post(t, q, send) // accepted in ERR, flushed
	postRecv(t, q, rdmaio.RecvWR{ID: 3, SGL: sge(buf, 16, 8)})
	wcs := w.wait(a.cq, 3)
	ids := map[uint64]rdmaio.WorkCompletion{}
	for _, c := range wcs {
		ids[c.ID] = c
		if c.Status != rdmaio.StatusWRFlushErr || c.QPN != q.QPN() {
			t.Fatalf("in ERR: completion %+v, want WR_FLUSH_ERR", c)
		}
	}
	if ids[1].Opcode != rdmaio.WCSend || ids[2].Opcode != rdmaio.WCRecv || ids[3].Opcode != rdmaio.WCRecv {
		t.Fatalf("flushed completions %s", describe(wcs))
	}
	expectErr(t, q.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS}), rdmaio.ErrInvalidTransition, "ERR → RTS")
	w.modify(a, q, rdmaio.QPAttr{State: rdmaio.StateReset})
	w.modify(b, qb, rdmaio.QPAttr{State: rdmaio.StateReset})
	// After RESET the pair connects again and works.
	w.connect(a, q, qpOpt{}, b, qb, qpOpt{})
	rb := b.reg(make([]byte, 8), rdmaio.AccessLocalWrite)
	postRecv(t, qb, rdmaio.RecvWR{ID: 7, SGL: sge(rb, 0, 8)})
	copy(buf.Bytes(), "reconnct")
	post(t, q, send)
	w.ok(w.wait(a.cq, 1))
	w.ok(w.wait(b.cq, 1))
	same(t, "after reset", rb.Bytes(), []byte("reconnct"))

	u := a.qp(rdmaio.UD, qpOpt{})
	w.modify(a, u, rdmaio.QPAttr{State: rdmaio.StateInit, QKey: 5})
	w.modify(a, u, rdmaio.QPAttr{State: rdmaio.StateRTR})
	w.modify(a, u, rdmaio.QPAttr{State: rdmaio.StateRTS})
}

var sizes = []int{1, 8, 63, 4095, 4097, 65536, 1<<20 + 3}

// testSendRecvSizes: SENDs of many sizes arrive intact, from and into both
// ordinary and provider-allocated memory.
func testSendRecvSizes(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, qb := w.rc(0, 1, qpOpt{}, qpOpt{})
	for i, n := range sizes {
		for _, mode := range []struct{ srcShared, dstShared bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			src := a.buf(n, mode.srcShared)
			dst := b.buf(n, mode.dstShared)
			fill(src, i)
			ms := a.reg(src, 0)
			md := b.reg(dst, rdmaio.AccessLocalWrite)
			postRecv(t, qb, rdmaio.RecvWR{ID: uint64(100 + i), SGL: sge(md, 0, n)})
			post(t, qa, rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: sge(ms, 0, n)})
			rc := w.wait(b.cq, 1)[0]
			sc := w.wait(a.cq, 1)[0]
			what := fmt.Sprintf("%d bytes (src shared %v, dst shared %v)", n, mode.srcShared, mode.dstShared)
			if rc.Status != rdmaio.StatusSuccess || rc.ID != uint64(100+i) || rc.Opcode != rdmaio.WCRecv || rc.ByteLen != uint32(n) || rc.QPN != qb.QPN() || rc.Flags&rdmaio.WCWithImm != 0 {
				t.Fatalf("%s: receive completion %+v", what, rc)
			}
			if sc.Status != rdmaio.StatusSuccess || sc.ID != uint64(i) || sc.Opcode != rdmaio.WCSend || sc.QPN != qa.QPN() {
				t.Fatalf("%s: send completion %+v", what, sc)
			}
			same(t, what, dst, src)
			a.dereg(ms)
			b.dereg(md)
		}
	}
}

// testSendRecv64MiB: one 64 MiB message.
func testSendRecv64MiB(t *testing.T, f Fabric) {
	if testing.Short() {
		t.Skip("64 MiB message in -short mode")
	}
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, qb := w.rc(0, 1, qpOpt{}, qpOpt{})
	const n = 64 << 20
	src := a.buf(n, true)
	dst := b.buf(n, false)
	fill(src[:4096], 1)
	copy(src[n-4096:], src[:4096])
	src[n/2] = 0x5a
	ms, md := a.reg(src, 0), b.reg(dst, rdmaio.AccessLocalWrite)
	postRecv(t, qb, rdmaio.RecvWR{ID: 1, SGL: sge(md, 0, n)})
	post(t, qa, rdmaio.SendWR{ID: 2, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: sge(ms, 0, n)})
	rc := w.wait(b.cq, 1)[0]
	w.ok(w.wait(a.cq, 1))
	if rc.Status != rdmaio.StatusSuccess || rc.ByteLen != n {
		t.Fatalf("receive completion %+v", rc)
	}
	if !bytes.Equal(dst, src) {
		t.Fatalf("64 MiB message corrupted")
	}
}

// testImmediate: SEND with immediate and RDMA WRITE with immediate deliver
// the immediate in a receive completion; the write's data is in place when
// the completion arrives.
func testImmediate(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, qb := w.rc(0, 1, qpOpt{}, qpOpt{})
	src := a.reg(a.buf(256<<10, false), 0)
	fill(src.Bytes(), 3)
	rbuf := b.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	for _, shared := range []bool{false, true} {
		tgt := b.reg(b.buf(512<<10, shared), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite)
		postRecv(t, qb, rdmaio.RecvWR{ID: 10, SGL: sge(rbuf, 0, 64)}, rdmaio.RecvWR{ID: 11, SGL: sge(rbuf, 0, 64)}, rdmaio.RecvWR{ID: 12, SGL: sge(rbuf, 0, 64)})
		post(t, qa,
			rdmaio.SendWR{ID: 1, Opcode: rdmaio.OpSendImm, Imm: 0xdeadbeef, Flags: rdmaio.SendSignaled, SGL: sge(src, 0, 16)},
			rdmaio.SendWR{ID: 2, Opcode: rdmaio.OpRDMAWriteImm, Imm: 7, Flags: rdmaio.SendSignaled, SGL: sge(src, 0, 100),
				RemoteAddr: tgt.Addr() + 5, RKey: tgt.RKey()},
			rdmaio.SendWR{ID: 3, Opcode: rdmaio.OpRDMAWriteImm, Imm: 8, Flags: rdmaio.SendSignaled, SGL: sge(src, 0, 256<<10),
				RemoteAddr: tgt.Addr() + 4096, RKey: tgt.RKey()})
		rc := w.wait(b.cq, 3)
		w.ok(rc)
		if rc[0].Opcode != rdmaio.WCRecv || rc[0].Flags&rdmaio.WCWithImm == 0 || rc[0].Imm != 0xdeadbeef || rc[0].ByteLen != 16 {
			t.Fatalf("SEND_WITH_IMM completion %+v", rc[0])
		}
		for i, want := range []struct {
			imm uint32
			n   uint32
		}{{7, 100}, {8, 256 << 10}} {
			c := rc[1+i]
			if c.Opcode != rdmaio.WCRecvRDMAWithImm || c.Flags&rdmaio.WCWithImm == 0 || c.Imm != want.imm || c.ID != uint64(11+i) {
				t.Fatalf("RDMA_WRITE_WITH_IMM completion %+v", c)
			}
		}
		same(t, "write with imm (small)", tgt.Bytes()[5:105], src.Bytes()[:100])
		same(t, "write with imm (large)", tgt.Bytes()[4096:4096+256<<10], src.Bytes())
		sc := w.wait(a.cq, 3)
		w.ok(sc)
		if sc[0].Opcode != rdmaio.WCSend || sc[1].Opcode != rdmaio.WCRDMAWrite || sc[2].Opcode != rdmaio.WCRDMAWrite {
			t.Fatalf("send completions %s", describe(sc))
		}
	}
}

// testInline: inline payloads are copied at post time and need no memory
// region; inline limits and opcodes are checked.
func testInline(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, qb := w.rc(0, 1, qpOpt{cap: rdmaio.QPCap{MaxInline: 128}}, qpOpt{})
	if qa.Cap().MaxInline < 128 {
		t.Fatalf("MaxInline %d, asked for 128", qa.Cap().MaxInline)
	}
	rb := b.reg(make([]byte, 128), rdmaio.AccessLocalWrite)
	tgt := b.reg(make([]byte, 128), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite)
	payload := []byte("inline payload, reused right after the post")
	want := append([]byte(nil), payload...)
	postRecv(t, qb, rdmaio.RecvWR{ID: 1, SGL: sge(rb, 0, 128)})
	post(t, qa, rdmaio.SendWR{ID: 1, Opcode: rdmaio.OpSend, Inline: payload, Flags: rdmaio.SendSignaled},
		rdmaio.SendWR{ID: 2, Opcode: rdmaio.OpRDMAWrite, Inline: payload, RemoteAddr: tgt.Addr() + 3, RKey: tgt.RKey(), Flags: rdmaio.SendSignaled})
	for i := range payload {
		payload[i] = 'X'
	}
	rc := w.wait(b.cq, 1)[0]
	w.ok(w.wait(a.cq, 2))
	if rc.Status != rdmaio.StatusSuccess || rc.ByteLen != uint32(len(want)) {
		t.Fatalf("inline receive %+v", rc)
	}
	same(t, "inline send", rb.Bytes()[:len(want)], want)
	same(t, "inline write", tgt.Bytes()[3:3+len(want)], want)

	big := make([]byte, qa.Cap().MaxInline+1)
	_, err := qa.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSend, Inline: big}})
	expectErr(t, err, rdmaio.ErrMessageTooLong, "inline beyond MaxInline")
	_, err = qa.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSend, Inline: payload, SGL: sge(rb, 0, 1)}})
	expectErr(t, err, rdmaio.ErrInvalidArgument, "inline with an SGL")
	_, err = qa.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpRDMARead, Inline: payload, RKey: tgt.RKey(), RemoteAddr: tgt.Addr()}})
	expectErr(t, err, rdmaio.ErrOpcode, "inline RDMA READ")
}

// testOrdering: RC delivers in order, and a write is visible when a later
// SEND on the same QP is received.
func testOrdering(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	const n = 2000
	qa, qb := w.rc(0, 1, qpOpt{cap: rdmaio.QPCap{MaxSendWR: 4096, MaxRecvWR: 4096}, sigAll: true}, qpOpt{cap: rdmaio.QPCap{MaxSendWR: 64, MaxRecvWR: 4096}})
	src := a.reg(make([]byte, 8*n), 0)
	dst := b.reg(make([]byte, 8*n), rdmaio.AccessLocalWrite)
	recvs := make([]rdmaio.RecvWR, n)
	for i := range recvs {
		recvs[i] = rdmaio.RecvWR{ID: uint64(i), SGL: sge(dst, 8*i, 8)}
		binary.LittleEndian.PutUint64(src.Bytes()[8*i:], uint64(i))
	}
	postRecv(t, qb, recvs...)
	for i := 0; i < n; i += 100 {
		chain := make([]rdmaio.SendWR, 100)
		for j := range chain {
			chain[j] = rdmaio.SendWR{ID: uint64(i + j), Opcode: rdmaio.OpSend, SGL: sge(src, 8*(i+j), 8)}
		}
		post(t, qa, chain...)
	}
	rc := w.wait(b.cq, n)
	w.ok(rc)
	for i, c := range rc {
		if c.ID != uint64(i) {
			t.Fatalf("receive completion %d has id %d", i, c.ID)
		}
		if v := binary.LittleEndian.Uint64(dst.Bytes()[8*i:]); v != uint64(i) {
			t.Fatalf("receive %d holds message %d", i, v)
		}
	}
	sc := w.wait(a.cq, n)
	w.ok(sc)
	for i, c := range sc {
		if c.ID != uint64(i) {
			t.Fatalf("send completion %d has id %d", i, c.ID)
		}
	}

	// WRITE then SEND: the data is there when the SEND is received; a READ
	// after a WRITE on the same QP sees the written data.
	big := a.reg(a.buf(1<<20, false), 0)
	back := a.reg(make([]byte, 1<<20), rdmaio.AccessLocalWrite)
	tgt := b.reg(b.buf(1<<20, true), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite|rdmaio.AccessRemoteRead)
	flag := b.reg(make([]byte, 8), rdmaio.AccessLocalWrite)
	for round := 0; round < 5; round++ {
		fill(big.Bytes(), 100+round)
		postRecv(t, qb, rdmaio.RecvWR{ID: 1, SGL: sge(flag, 0, 8)})
		post(t, qa,
			rdmaio.SendWR{ID: 1, Opcode: rdmaio.OpRDMAWrite, SGL: sge(big, 0, 1<<20), RemoteAddr: tgt.Addr(), RKey: tgt.RKey()},
			rdmaio.SendWR{ID: 2, Opcode: rdmaio.OpSend, Inline: []byte{byte(round)}},
			rdmaio.SendWR{ID: 3, Opcode: rdmaio.OpRDMARead, SGL: sge(back, 0, 1<<20), RemoteAddr: tgt.Addr(), RKey: tgt.RKey()})
		w.ok(w.wait(b.cq, 1))
		same(t, fmt.Sprintf("round %d: write before send", round), tgt.Bytes(), big.Bytes())
		w.ok(w.wait(a.cq, 3))
		same(t, fmt.Sprintf("round %d: read after write", round), back.Bytes(), big.Bytes())
	}

	// An unordered READ (rdmaio.SendUnordered) behind a SEND brings the
	// data and completes after the SEND, in posting order.
	for round := 0; round < 3; round++ {
		fill(tgt.Bytes(), 200+round)
		postRecv(t, qb, rdmaio.RecvWR{ID: 1, SGL: sge(flag, 0, 8)})
		post(t, qa,
			rdmaio.SendWR{ID: 4, Opcode: rdmaio.OpSend, Inline: []byte{byte(round)}},
			rdmaio.SendWR{ID: 5, Opcode: rdmaio.OpRDMARead, Flags: rdmaio.SendUnordered, SGL: sge(back, 0, 1<<20), RemoteAddr: tgt.Addr(), RKey: tgt.RKey()})
		w.ok(w.wait(b.cq, 1))
		sc := w.wait(a.cq, 2)
		w.ok(sc)
		if sc[0].ID != 4 || sc[1].ID != 5 {
			t.Fatalf("round %d: unordered READ: completions %d, %d, want 4, 5", round, sc[0].ID, sc[1].ID)
		}
		same(t, fmt.Sprintf("round %d: unordered read", round), back.Bytes(), tgt.Bytes())
	}
}

// testLargeSGL: a long gather list arrives as one message scattered over a
// different receive list, in order.
func testLargeSGL(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	const nsge = 32
	if a.dev.Attr().MaxSGE < nsge {
		t.Skipf("device MaxSGE %d < %d", a.dev.Attr().MaxSGE, nsge)
	}
	qa, qb := w.rc(0, 1, qpOpt{cap: rdmaio.QPCap{MaxSendSGE: nsge}}, qpOpt{cap: rdmaio.QPCap{MaxRecvSGE: nsge}})
	for round, unit := range []int{37, 64 << 10} {
		heap := a.reg(a.buf(nsge*unit*2, false), 0)
		shared := a.reg(a.buf(nsge*unit*2, true), 0)
		fill(heap.Bytes(), 7+round)
		fill(shared.Bytes(), 9+round)
		var sgl []rdmaio.SGE
		var want []byte
		for i := 0; i < nsge; i++ {
			m := heap
			if i%2 == 1 {
				m = shared
			}
			off, n := i*unit+i, unit+i%5
			sgl = append(sgl, rdmaio.MRSGE(m, off, n))
			want = append(want, m.Bytes()[off:off+n]...)
		}
		// Receive into 5 pieces of odd sizes (the last takes the rest).
		dst := b.reg(make([]byte, len(want)+100), rdmaio.AccessLocalWrite)
		cuts := []int{0, 1, len(want) / 3, len(want)/3 + 7, len(want) - 2, len(dst.Bytes())}
		var rsgl []rdmaio.SGE
		for i := 0; i+1 < len(cuts); i++ {
			rsgl = append(rsgl, rdmaio.MRSGE(dst, cuts[i], cuts[i+1]-cuts[i]))
		}
		postRecv(t, qb, rdmaio.RecvWR{ID: 1, SGL: rsgl})
		post(t, qa, rdmaio.SendWR{ID: 1, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: sgl})
		rc := w.wait(b.cq, 1)[0]
		w.ok(w.wait(a.cq, 1))
		if rc.Status != rdmaio.StatusSuccess || rc.ByteLen != uint32(len(want)) {
			t.Fatalf("unit %d: receive %+v, want %d bytes", unit, rc, len(want))
		}
		same(t, fmt.Sprintf("unit %d: gathered message", unit), dst.Bytes()[:len(want)], want)
	}
	_, err := qa.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSend, SGL: make([]rdmaio.SGE, qa.Cap().MaxSendSGE+1)}})
	expectErr(t, err, rdmaio.ErrTooManySGE, "SGL longer than MaxSendSGE")
	_, err = qb.PostRecv([]rdmaio.RecvWR{{SGL: make([]rdmaio.SGE, qb.Cap().MaxRecvSGE+1)}})
	expectErr(t, err, rdmaio.ErrTooManySGE, "receive SGL longer than MaxRecvSGE")
}

// testReadWriteOffsets: RDMA WRITE and READ at many offsets and sizes, into
// ordinary and provider-allocated memory.
func testReadWriteOffsets(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, _ := w.rc(0, 1, qpOpt{sigAll: true}, qpOpt{})
	const size = 1 << 20
	cases := []struct{ off, n int }{{0, 1}, {1, 7}, {4093, 10}, {65536, 65536}, {size - 5, 5}, {12345, 300000}, {0, size}}
	for _, shared := range []bool{false, true} {
		tgt := b.reg(b.buf(size, shared), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite|rdmaio.AccessRemoteRead)
		src := a.reg(make([]byte, size), 0)
		back := a.reg(a.buf(size, !shared), rdmaio.AccessLocalWrite)
		for i, c := range cases {
			fill(src.Bytes()[:c.n], 50+i)
			post(t, qa, rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpRDMAWrite, SGL: sge(src, 0, c.n), RemoteAddr: tgt.Addr() + uint64(c.off), RKey: tgt.RKey()})
			wc := w.wait(a.cq, 1)[0]
			if wc.Status != rdmaio.StatusSuccess || wc.Opcode != rdmaio.WCRDMAWrite {
				t.Fatalf("write %d@%d: %+v", c.n, c.off, wc)
			}
			same(t, fmt.Sprintf("write %d bytes at %d (shared %v)", c.n, c.off, shared), tgt.Bytes()[c.off:c.off+c.n], src.Bytes()[:c.n])
			clear(back.Bytes())
			post(t, qa, rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpRDMARead, SGL: sge(back, 7, c.n-min(c.n, 7)), RemoteAddr: tgt.Addr() + uint64(c.off), RKey: tgt.RKey()})
			wc = w.wait(a.cq, 1)[0]
			if wc.Status != rdmaio.StatusSuccess || wc.Opcode != rdmaio.WCRDMARead {
				t.Fatalf("read %d@%d: %+v", c.n, c.off, wc)
			}
			m := c.n - min(c.n, 7)
			same(t, fmt.Sprintf("read %d bytes at %d (shared %v)", m, c.off, shared), back.Bytes()[7:7+m], tgt.Bytes()[c.off:c.off+m])
		}
	}
}

// testAtomicsContention: several ranks run fetch-and-add and
// compare-and-swap on one location of rank 0 at the same time; the count
// is exact and every fetch-and-add sees a distinct value.
func testAtomicsContention(t *testing.T, f Fabric) {
	const ranks, k = 4, 300
	w := newWorld(t, f, ranks)
	r0 := w.ranks[0]
	counters := r0.reg(r0.buf(64, true), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteAtomic|rdmaio.AccessRemoteRead)
	type res struct {
		olds []uint64
		err  error
	}
	results := make(chan res, ranks)
	qps := make([]rdmaio.QP, ranks)
	for i := 1; i < ranks; i++ {
		qps[i], _ = w.rc(i, 0, qpOpt{sigAll: true}, qpOpt{})
	}
	for i := 1; i < ranks; i++ {
		r := w.ranks[i]
		local := r.reg(make([]byte, 8), rdmaio.AccessLocalWrite)
		go func(q rdmaio.QP, cq rdmaio.CQ, local rdmaio.MR) {
			ctx, cancel := waitCtx()
			defer cancel()
			var out res
			wc := make([]rdmaio.WorkCompletion, 1)
			do := func(wr rdmaio.SendWR) (uint64, error) {
				wr.SGL = sge(local, 0, 8)
				wr.RKey = counters.RKey()
				if _, err := q.PostSend([]rdmaio.SendWR{wr}); err != nil {
					return 0, err
				}
				if _, err := cq.Wait(ctx, wc); err != nil {
					return 0, err
				}
				if err := wc[0].Err(); err != nil {
					return 0, err
				}
				return binary.NativeEndian.Uint64(local.Bytes()), nil
			}
			for j := 0; j < k && out.err == nil; j++ {
				var old uint64
				old, out.err = do(rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, CompareAdd: 1, RemoteAddr: counters.Addr()})
				out.olds = append(out.olds, old)
				// Increment the second counter with a compare-and-swap loop.
				var cur uint64
				for out.err == nil {
					var seen uint64
					seen, out.err = do(rdmaio.SendWR{Opcode: rdmaio.OpAtomicCmpSwp, CompareAdd: cur, Swap: cur + 1, RemoteAddr: counters.Addr() + 8})
					if seen == cur {
						break
					}
					cur = seen
				}
			}
			results <- out
		}(qps[i], r.cq, local)
	}
	seen := map[uint64]bool{}
	for i := 1; i < ranks; i++ {
		r := <-results
		if r.err != nil {
			t.Fatalf("atomics: %v", r.err)
		}
		for _, o := range r.olds {
			if seen[o] {
				t.Fatalf("fetch-and-add returned %d twice", o)
			}
			seen[o] = true
		}
	}
	total := uint64((ranks - 1) * k)
	for v := uint64(0); v < total; v++ {
		if !seen[v] {
			t.Fatalf("no fetch-and-add returned %d", v)
		}
	}
	b := counters.Bytes()
	if got := binary.NativeEndian.Uint64(b); got != total {
		t.Fatalf("fetch-and-add counter %d, want %d", got, total)
	}
	if got := binary.NativeEndian.Uint64(b[8:]); got != total {
		t.Fatalf("compare-and-swap counter %d, want %d", got, total)
	}
}

// testAtomicMalformed: atomics need one 8-byte SGE and an aligned address,
// and only exist on RC.
func testAtomicMalformed(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, _ := w.rc(0, 1, qpOpt{}, qpOpt{})
	tgt := b.reg(b.buf(64, true), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteAtomic)
	local := a.reg(make([]byte, 16), rdmaio.AccessLocalWrite)
	for _, c := range []struct {
		what string
		wr   rdmaio.SendWR
	}{
		{"unaligned", rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, SGL: sge(local, 0, 8), RemoteAddr: tgt.Addr() + 4, RKey: tgt.RKey()}},
		{"4-byte SGE", rdmaio.SendWR{Opcode: rdmaio.OpAtomicCmpSwp, SGL: sge(local, 0, 4), RemoteAddr: tgt.Addr(), RKey: tgt.RKey()}},
		{"two SGEs", rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, SGL: []rdmaio.SGE{rdmaio.MRSGE(local, 0, 8), rdmaio.MRSGE(local, 8, 8)}, RemoteAddr: tgt.Addr(), RKey: tgt.RKey()}},
		{"no SGE", rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, RemoteAddr: tgt.Addr(), RKey: tgt.RKey()}},
	} {
		_, err := qa.PostSend([]rdmaio.SendWR{c.wr})
		expectErr(t, err, rdmaio.ErrAtomic, c.what)
	}
	u := w.ud(0, 1, qpOpt{})
	ah := w.ah(0, 1)
	_, err := u.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpAtomicFetchAdd, SGL: sge(local, 0, 8), AH: ah, RemoteQPN: 1}})
	expectErr(t, err, rdmaio.ErrOpcode, "atomic on UD")
	_, err = u.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpRDMAWrite, SGL: sge(local, 0, 8), AH: ah, RemoteQPN: 1}})
	expectErr(t, err, rdmaio.ErrOpcode, "RDMA WRITE on UD")
	_, err = qa.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.Opcode(42)}})
	expectErr(t, err, rdmaio.ErrOpcode, "unknown opcode")
	// The QP is still usable after refused posts.
	post(t, qa, rdmaio.SendWR{ID: 9, Opcode: rdmaio.OpAtomicFetchAdd, CompareAdd: 5, SGL: sge(local, 0, 8), RemoteAddr: tgt.Addr() + 8, RKey: tgt.RKey(), Flags: rdmaio.SendSignaled})
	w.ok(w.wait(a.cq, 1))
	if v := binary.NativeEndian.Uint64(tgt.Bytes()[8:]); v != 5 {
		t.Fatalf("counter %d after fetch-and-add 5", v)
	}
}
