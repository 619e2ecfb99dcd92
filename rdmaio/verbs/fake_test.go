//go:build verbs

package verbs

import (
	"errors"
	"testing"

	"github.com/jiarun/jia/rdmaio"
)

// These tests run the posting and polling paths — the C work request
// chains, the SGE and header-slot layout, completion conversion — against
// a fake adapter (fakehw.go) that reads work requests the way a device
// does, so that they run on machines without RDMA hardware.

func fakeSetup(t *testing.T, local portAddr) (*Device, *fakeHW, *cq) {
	t.Helper()
	d, err := newFakeDevice(local, rdmaio.DeviceAttr{Provider: Name, MaxQPWR: 1024, MaxSGE: 8, MaxInline: 64, MaxMsgSize: 1 << 31, MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	h := newFakeHW()
	c, err := h.cq(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.free(c) })
	return d, h, c
}

func fakeQP(t *testing.T, d *Device, h *fakeHW, c *cq, typ rdmaio.QPType, cp rdmaio.QPCap, num uint32) *qp {
	t.Helper()
	q, err := h.qp(d, typ, cp, c, false, num)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.freeQP(q) })
	return q
}

var fakeCap = rdmaio.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 4, MaxRecvSGE: 2, MaxInline: 64}

func TestFakePostSendChain(t *testing.T) {
	d, h, c := fakeSetup(t, ibAddr())
	q := fakeQP(t, d, h, c, rdmaio.RC, fakeCap, 0x101)
	wrs := []rdmaio.SendWR{
		{ID: 1, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{{Addr: 0x1000, Length: 10, LKey: 5}, {Addr: 0x2000, Length: 20, LKey: 6}}},
		{ID: 2, Opcode: rdmaio.OpRDMAWriteImm, Inline: []byte("hello"), Imm: 0x01020304, RemoteAddr: 0x9000, RKey: 77, Flags: rdmaio.SendFence},
		{ID: 3, Opcode: rdmaio.OpAtomicFetchAdd, SGL: []rdmaio.SGE{{Addr: 0x3000, Length: 8, LKey: 5}}, RemoteAddr: 0x8008, RKey: 78, CompareAdd: 5, Flags: rdmaio.SendSignaled},
		{ID: 4, Opcode: rdmaio.OpAtomicCmpSwp, SGL: []rdmaio.SGE{{Addr: 0x3008, Length: 8, LKey: 5}}, RemoteAddr: 0x8010, RKey: 78, CompareAdd: 1, Swap: 2, Flags: rdmaio.SendSignaled},
		{ID: 5, Opcode: rdmaio.OpRDMARead, SGL: []rdmaio.SGE{{Addr: 0x4000, Length: 64, LKey: 5}}, RemoteAddr: 0xa000, RKey: 79},
	}
	n, err := q.PostSend(wrs)
	if n != len(wrs) || err != nil {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	s := h.sent()
	if len(s) != len(wrs) || h.posts() != 1 {
		t.Fatalf("adapter saw %d work requests in %d posts, want %d in 1", len(s), h.posts(), len(wrs))
	}
	for i, x := range s {
		key, slot := splitWRID(x.id)
		if key != q.sqKey || slot != uint32(i) || !x.chained || x.opcode != uint32(wrs[i].Opcode) {
			t.Fatalf("work request %d: key %d slot %d chained %v opcode %d", i, key, slot, x.chained, x.opcode)
		}
	}
	if len(s[0].sgl) != 2 || s[0].sgl[1] != wrs[0].SGL[1] || s[0].flags != 0 {
		t.Errorf("SEND as read: %+v", s[0])
	}
	if string(s[1].inline) != "hello" || s[1].flags != ibvSendInline|ibvSendFence || s[1].imm != 0x01020304 || s[1].raddr != 0x9000 || s[1].rkey != 77 {
		t.Errorf("inline WRITE_WITH_IMM as read: %+v", s[1])
	}
	if s[2].raddr != 0x8008 || s[2].rkey != 78 || s[2].compareAdd != 5 || s[2].flags != ibvSendSignaled || s[2].sgl[0] != wrs[2].SGL[0] {
		t.Errorf("FETCH_ADD as read: %+v", s[2])
	}
	if s[3].compareAdd != 1 || s[3].swap != 2 || s[3].raddr != 0x8010 {
		t.Errorf("CMP_SWP as read: %+v", s[3])
	}
	if s[4].raddr != 0xa000 || s[4].rkey != 79 || s[4].sgl[0].Length != 64 {
		t.Errorf("READ as read: %+v", s[4])
	}

	// The FETCH_ADD completes: the unsignaled SEND and WRITE before it are
	// retired with it.
	h.complete(fakeWC{wrID: s[2].id, opcode: uint32(rdmaio.WCFetchAdd), byteLen: 8, qpNum: q.num})
	wc := make([]rdmaio.WorkCompletion, 8)
	if n := c.Poll(wc); n != 1 {
		t.Fatalf("Poll = %d, want 1", n)
	}
	if w := wc[0]; w.ID != 3 || w.Status != rdmaio.StatusSuccess || w.Opcode != rdmaio.WCFetchAdd || w.ByteLen != 8 || w.QPN != 0x101 {
		t.Fatalf("completion %+v", w)
	}
	q.sq.mu.Lock()
	room := q.sq.room()
	q.sq.mu.Unlock()
	if room != fakeCap.MaxSendWR-2 {
		t.Fatalf("send queue room %d after the third of five completed, want %d", room, fakeCap.MaxSendWR-2)
	}
	// A failed request's opcode comes from the provider's records (verbs
	// leaves it undefined), and the QP is in ERR.
	h.complete(fakeWC{wrID: s[3].id, status: uint32(rdmaio.StatusRemAccessErr), opcode: 0xff, qpNum: q.num})
	if n := c.Poll(wc); n != 1 || wc[0].ID != 4 || wc[0].Opcode != rdmaio.WCCompSwap || wc[0].Status != rdmaio.StatusRemAccessErr {
		t.Fatalf("error completion: %d %+v", n, wc[0])
	}
	if q.State() != rdmaio.StateErr {
		t.Fatalf("state %v after an error completion", q.State())
	}
	h.complete(fakeWC{wrID: s[4].id, status: uint32(rdmaio.StatusWRFlushErr), qpNum: q.num})
	if n := c.Poll(wc); n != 1 || wc[0].ID != 5 || wc[0].Opcode != rdmaio.WCRDMARead || wc[0].Status != rdmaio.StatusWRFlushErr {
		t.Fatalf("flush completion: %d %+v", n, wc[0])
	}
	// Completions of a queue that is gone, or of a slot never posted, are dropped.
	h.complete(fakeWC{wrID: wrID(0xffff00, 0)}, fakeWC{wrID: s[4].id})
	if n := c.Poll(wc); n != 0 {
		t.Fatalf("stale completions delivered: %+v", wc[:n])
	}
}

func TestFakePostSendLimits(t *testing.T) {
	d, h, c := fakeSetup(t, ibAddr())
	cp := fakeCap
	cp.MaxSendWR = 128
	q := fakeQP(t, d, h, c, rdmaio.RC, cp, 0x102)
	wrs := make([]rdmaio.SendWR, 130)
	for i := range wrs {
		wrs[i] = rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{{Addr: uint64(0x1000 + i), Length: 1, LKey: 1}}}
	}
	n, err := q.PostSend(wrs[:100])
	if n != 100 || err != nil || h.posts() != 2 || len(h.sent()) != 100 {
		t.Fatalf("chain of 100: posted %d (%v) in %d posts, adapter saw %d", n, err, h.posts(), len(h.sent()))
	}
	n, err = q.PostSend(wrs[100:130])
	if n != 28 || !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Fatalf("past the queue depth: %d, %v", n, err)
	}
	// Refused shapes post nothing.
	q2 := fakeQP(t, d, h, c, rdmaio.RC, fakeCap, 0x103)
	h.resetRecords()
	five := make([]rdmaio.SGE, 5)
	for _, c := range []struct {
		wr   rdmaio.SendWR
		want error
	}{
		{rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: five}, rdmaio.ErrTooManySGE},
		{rdmaio.SendWR{Opcode: rdmaio.OpSend, Inline: make([]byte, 65)}, rdmaio.ErrMessageTooLong},
		{rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, SGL: five[:1], RemoteAddr: 8}, rdmaio.ErrAtomic},
		{rdmaio.SendWR{Opcode: 9}, rdmaio.ErrOpcode},
	} {
		if n, err := q2.PostSend([]rdmaio.SendWR{c.wr}); n != 0 || !errors.Is(err, c.want) {
			t.Errorf("PostSend(%+v) = %d, %v, want %v", c.wr, n, err, c.want)
		}
	}
	if len(h.sent()) != 0 {
		t.Fatalf("refused requests reached the adapter: %+v", h.sent())
	}
	q2.state.Store(uint32(rdmaio.StateInit))
	if _, err := q2.PostSend(wrs[:1]); !errors.Is(err, rdmaio.ErrInvalidState) {
		t.Fatalf("post send in INIT: %v", err)
	}
	q2.state.Store(uint32(rdmaio.StateRTS))
	// The adapter refuses the second of three (its queue is full): one is
	// posted and the slots of the others are free again.
	h.failAt(1)
	n, err = q2.PostSend(wrs[:3])
	h.failAt(-1)
	if n != 1 || !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Fatalf("adapter refusal: %d, %v", n, err)
	}
	q2.sq.mu.Lock()
	room := q2.sq.room()
	q2.sq.mu.Unlock()
	if room != fakeCap.MaxSendWR-1 {
		t.Fatalf("room %d after a partial post, want %d", room, fakeCap.MaxSendWR-1)
	}
}

func TestFakeUD(t *testing.T) {
	local := roceAddr()
	d, h, c := fakeSetup(t, local)
	peer := roceAddr()
	peer.rank, peer.gid[15] = 5, 9
	if _, err := d.peer(peer.encode()); err != nil {
		t.Fatal(err)
	}
	q := fakeQP(t, d, h, c, rdmaio.UD, fakeCap, 0x201)
	buf := rdmaio.SGE{Addr: 0x5000, Length: 100, LKey: 3}
	n, err := q.PostRecv([]rdmaio.RecvWR{{ID: 10, SGL: []rdmaio.SGE{buf}}, {ID: 11, SGL: []rdmaio.SGE{buf, buf}}})
	if n != 2 || err != nil {
		t.Fatalf("PostRecv = %d, %v", n, err)
	}
	r := h.recvd()
	if len(r) != 2 || len(r[0].sgl) != 2 || len(r[1].sgl) != 3 {
		t.Fatalf("receives as read: %+v", r)
	}
	var slots [2]uint32
	for i, x := range r {
		key, slot := splitWRID(x.id)
		slots[i] = slot
		g := x.sgl[0]
		if key != q.rp.key || g.Length != grhLen || g.LKey != fakeLKey || g.Addr != q.rp.grhAddr+uint64(slot)*grhLen || x.sgl[1] != buf {
			t.Fatalf("receive %d: header SGE %+v, key %d slot %d, then %+v", i, g, key, slot, x.sgl[1:])
		}
	}
	if slots[0] == slots[1] {
		t.Fatal("two receives share a header slot")
	}
	// The adapter writes the GRH (sender's GID) into the slot.
	grh := q.rp.wq.grh[int(slots[0])*grhLen:]
	grh[0] = 0x60
	copy(grh[8:24], peer.gid[:])
	h.complete(fakeWC{wrID: r[0].id, opcode: uint32(rdmaio.WCRecv), byteLen: grhLen + 5, imm: 0xabcdef01,
		flags: ibvWCGRH | ibvWCWithImm, srcQP: 0x55, qpNum: q.num},
		fakeWC{wrID: r[1].id, opcode: uint32(rdmaio.WCRecv), byteLen: grhLen, flags: ibvWCGRH, srcQP: 0x56, qpNum: q.num})
	wc := make([]rdmaio.WorkCompletion, 4)
	if n := c.Poll(wc); n != 2 {
		t.Fatalf("Poll = %d", n)
	}
	if w := wc[0]; w.ID != 10 || w.Opcode != rdmaio.WCRecv || w.ByteLen != 5 || w.Flags != rdmaio.WCWithImm || w.Imm != 0xabcdef01 ||
		w.SrcQPN != 0x55 || w.SrcRank != 5 || w.QPN != 0x201 {
		t.Fatalf("UD receive: %+v", w)
	}
	if w := wc[1]; w.ID != 11 || w.ByteLen != 0 || w.SrcRank != -1 || w.Flags != 0 {
		t.Fatalf("empty UD datagram from an unknown sender: %+v", w)
	}
	// UD sends carry the address handle, remote QPN and Q_Key.
	a := h.ah(d)
	h.resetRecords()
	if n, err := q.PostSend([]rdmaio.SendWR{{ID: 1, Opcode: rdmaio.OpSendImm, Imm: 7, Inline: []byte("x"), AH: a, RemoteQPN: 0x66, RemoteQKey: 0x11}}); n != 1 || err != nil {
		t.Fatalf("UD send: %d, %v", n, err)
	}
	if s := h.sent(); len(s) != 1 || !s[0].hasAH || s[0].rqpn != 0x66 || s[0].rqkey != 0x11 || s[0].imm != 7 || string(s[0].inline) != "x" {
		t.Fatalf("UD send as read: %+v", s)
	}
	big := rdmaio.SGE{Addr: 0x5000, Length: 1025, LKey: 3}
	if _, err := q.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{big}, AH: a}}); !errors.Is(err, rdmaio.ErrMessageTooLong) {
		t.Fatalf("UD send over the MTU: %v", err)
	}
	if _, err := q.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpRDMAWrite, Inline: []byte("x"), AH: a}}); !errors.Is(err, rdmaio.ErrOpcode) {
		t.Fatalf("RDMA WRITE on UD: %v", err)
	}
	// Refused receives give their slots back.
	h.failAt(0)
	n, err = q.PostRecv([]rdmaio.RecvWR{{ID: 12, SGL: []rdmaio.SGE{buf}}})
	h.failAt(-1)
	if n != 0 || !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Fatalf("refused receive: %d, %v", n, err)
	}
	q.rp.rq.mu.Lock()
	room := q.rp.rq.room()
	q.rp.rq.mu.Unlock()
	if room != fakeCap.MaxRecvWR {
		t.Fatalf("receive room %d, want %d", room, fakeCap.MaxRecvWR)
	}
	if _, err := q.PostRecv([]rdmaio.RecvWR{{SGL: []rdmaio.SGE{buf, buf, buf}}}); !errors.Is(err, rdmaio.ErrTooManySGE) {
		t.Fatalf("receive with 3 SGEs on a QP of 2: %v", err)
	}
}

// TestFakeReset: after RESET the queues have new keys; completions of the
// old work are dropped.
func TestFakeReset(t *testing.T) {
	d, h, c := fakeSetup(t, ibAddr())
	q := fakeQP(t, d, h, c, rdmaio.RC, fakeCap, 0x301)
	if _, err := q.PostSend([]rdmaio.SendWR{{ID: 1, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.PostRecv([]rdmaio.RecvWR{{ID: 2}}); err != nil {
		t.Fatal(err)
	}
	old := []uint64{h.sent()[0].id, h.recvd()[0].id}
	q.rekey()
	h.complete(fakeWC{wrID: old[0], qpNum: q.num}, fakeWC{wrID: old[1], opcode: uint32(rdmaio.WCRecv), qpNum: q.num})
	wc := make([]rdmaio.WorkCompletion, 4)
	if n := c.Poll(wc); n != 0 {
		t.Fatalf("completions of work from before RESET: %+v", wc[:n])
	}
	q.sq.mu.Lock()
	room := q.sq.room()
	q.sq.mu.Unlock()
	if room != fakeCap.MaxSendWR {
		t.Fatalf("send room %d after RESET", room)
	}
}

// TestFakeNoAllocation: a post and a poll allocate nothing.
func TestFakeNoAllocation(t *testing.T) {
	d, h, c := fakeSetup(t, ibAddr())
	q := fakeQP(t, d, h, c, rdmaio.RC, fakeCap, 0x401)
	wrs := []rdmaio.SendWR{{ID: 1, Opcode: rdmaio.OpRDMAWrite, SGL: []rdmaio.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}, RemoteAddr: 0x2000, RKey: 2, Flags: rdmaio.SendSignaled}}
	rwrs := []rdmaio.RecvWR{{ID: 2, SGL: []rdmaio.SGE{{Addr: 0x3000, Length: 64, LKey: 1}}}}
	wc := make([]rdmaio.WorkCompletion, 4)
	allocs := testing.AllocsPerRun(100, func() {
		h.resetRecords()
		h.resetCompletions()
		if _, err := q.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		if _, err := q.PostRecv(rwrs); err != nil {
			t.Fatal(err)
		}
		h.completeLast()
		if c.Poll(wc) != 2 {
			t.Fatal("completions lost")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per post and poll", allocs)
	}
}

// BenchmarkFakePostPoll measures the provider's own CPU cost per work
// request on the send and receive paths (building the chains, recording
// the work, converting completions) against the fake adapter, whose own
// cost is a copy of the request.
func BenchmarkFakePostPoll(b *testing.B) {
	local := ibAddr()
	d, err := newFakeDevice(local, rdmaio.DeviceAttr{Provider: Name, MaxQPWR: 1024, MaxSGE: 8, MaxInline: 64, MaxMsgSize: 1 << 31, MTU: 1024})
	if err != nil {
		b.Fatal(err)
	}
	h := newFakeHW()
	c, err := h.cq(d)
	if err != nil {
		b.Fatal(err)
	}
	defer h.free(c)
	q, err := h.qp(d, rdmaio.RC, fakeCap, c, false, 0x501)
	if err != nil {
		b.Fatal(err)
	}
	defer h.freeQP(q)
	wrs := []rdmaio.SendWR{{ID: 1, Opcode: rdmaio.OpRDMAWrite, SGL: []rdmaio.SGE{{Addr: 0x1000, Length: 64, LKey: 1}}, RemoteAddr: 0x2000, RKey: 2, Flags: rdmaio.SendSignaled}}
	rwrs := []rdmaio.RecvWR{{ID: 2, SGL: []rdmaio.SGE{{Addr: 0x3000, Length: 64, LKey: 1}}}}
	wc := make([]rdmaio.WorkCompletion, 4)
	b.ReportAllocs()
	for b.Loop() {
		h.resetRecords()
		h.resetCompletions()
		q.PostSend(wrs)
		q.PostRecv(rwrs)
		h.completeLast()
		if c.Poll(wc) != 2 {
			b.Fatal("completions lost")
		}
	}
}
