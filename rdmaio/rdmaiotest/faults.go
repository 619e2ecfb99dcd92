package rdmaiotest

import (
	"bytes"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// errorPair runs one operation that must fail with want on a fresh QP pair:
// the operation completes with want, a following request is flushed and
// the QP is in ERR.
func errorPair(t *testing.T, w *world, want rdmaio.Status, oa, ob qpOpt, wr rdmaio.SendWR, what string) {
	t.Helper()
	qa, _ := w.rc(0, 1, oa, ob)
	a := w.ranks[0]
	wr.ID, wr.Flags = 1, rdmaio.SendSignaled
	post(t, qa, wr, rdmaio.SendWR{ID: 2, Opcode: rdmaio.OpRDMAWrite, Inline: []byte("x"), RKey: wr.RKey, RemoteAddr: wr.RemoteAddr, Flags: rdmaio.SendSignaled})
	wcs := w.wait(a.cq, 2)
	if wcs[0].ID != 1 || wcs[0].Status != want || wcs[1].ID != 2 || wcs[1].Status != rdmaio.StatusWRFlushErr {
		t.Fatalf("%s: completions %s, want %v then WR_FLUSH_ERR", what, describe(wcs), want)
	}
	if qa.State() != rdmaio.StateErr {
		t.Fatalf("%s: QP state %v after an error completion", what, qa.State())
	}
	if e := wcs[0].Err(); e == nil || !errors.As(e, new(*rdmaio.WCError)) {
		t.Fatalf("%s: WorkCompletion.Err() = %v", what, e)
	}
}

// testRemoteAccessErrors: bad keys, out-of-bounds addresses and missing
// rights on the target region or QP complete with REM_ACCESS_ERR.
func testRemoteAccessErrors(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	local := a.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	full := b.reg(b.buf(4096, true), rdmaio.AccessAll)
	heap := b.reg(make([]byte, 4096), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite|rdmaio.AccessRemoteRead)
	noWrite := b.reg(b.buf(4096, true), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteRead|rdmaio.AccessRemoteAtomic)
	noRead := b.reg(b.buf(4096, true), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite)
	gone := b.reg(b.buf(4096, true), rdmaio.AccessAll)
	goneKey, goneAddr := gone.RKey(), gone.Addr()
	b.dereg(gone)
	write := func(m rdmaio.MR, off uint64, n int) rdmaio.SendWR {
		return rdmaio.SendWR{Opcode: rdmaio.OpRDMAWrite, SGL: sge(local, 0, n), RemoteAddr: m.Addr() + off, RKey: m.RKey()}
	}
	read := func(m rdmaio.MR, off uint64, n int) rdmaio.SendWR {
		wr := write(m, off, n)
		wr.Opcode = rdmaio.OpRDMARead
		return wr
	}
	rae := rdmaio.StatusRemAccessErr
	cases := []struct {
		what   string
		wr     rdmaio.SendWR
		ob     qpOpt
		status rdmaio.Status
	}{
		{"wrong rkey", rdmaio.SendWR{Opcode: rdmaio.OpRDMAWrite, SGL: sge(local, 0, 8), RemoteAddr: full.Addr(), RKey: full.RKey() ^ 0x5a5a00}, qpOpt{}, rae},
		{"stale rkey tag", rdmaio.SendWR{Opcode: rdmaio.OpRDMAWrite, SGL: sge(local, 0, 8), RemoteAddr: full.Addr(), RKey: full.RKey() + 1}, qpOpt{}, rae},
		{"deregistered rkey", rdmaio.SendWR{Opcode: rdmaio.OpRDMAWrite, SGL: sge(local, 0, 8), RemoteAddr: goneAddr, RKey: goneKey}, qpOpt{}, rae},
		{"write past the end", write(full, 4092, 8), qpOpt{}, rae},
		{"write past the end (ordinary memory)", write(heap, 4090, 8), qpOpt{}, rae},
		{"read before the start", rdmaio.SendWR{Opcode: rdmaio.OpRDMARead, SGL: sge(local, 0, 8), RemoteAddr: full.Addr() - 8, RKey: full.RKey()}, qpOpt{}, rae},
		{"read past the end", read(full, 4050, 60), qpOpt{}, rae},
		{"huge length wraps", rdmaio.SendWR{Opcode: rdmaio.OpRDMARead, SGL: []rdmaio.SGE{{Addr: local.Addr(), Length: 8, LKey: local.LKey()}}, RemoteAddr: ^uint64(0) - 3, RKey: full.RKey()}, qpOpt{}, rae},
		{"write without remote write", write(noWrite, 0, 8), qpOpt{}, rae},
		{"read without remote read", read(noRead, 0, 8), qpOpt{}, rae},
		{"atomic without remote atomic", rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, SGL: sge(local, 0, 8), RemoteAddr: noRead.Addr(), RKey: noRead.RKey(), CompareAdd: 1}, qpOpt{}, rae},
		{"responder QP without remote write", write(full, 0, 8), qpOpt{noAcc: true}, rae},
		{"responder QP with read only", write(full, 0, 8), qpOpt{access: rdmaio.AccessRemoteRead}, rae},
	}
	for _, c := range cases {
		errorPair(t, w, c.status, qpOpt{}, c.ob, c.wr, c.what)
	}
	// Nothing was written anywhere.
	for _, m := range []rdmaio.MR{full, heap, noWrite, noRead} {
		if !bytes.Equal(m.Bytes(), make([]byte, len(m.Bytes()))) {
			t.Fatalf("a refused write modified the target")
		}
	}
}

// testLocalProtection: local SGEs with bad keys, bounds or rights complete
// with LOC_PROT_ERR.
func testLocalProtection(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	tgt := b.reg(b.buf(4096, true), rdmaio.AccessAll)
	ro := a.reg(make([]byte, 64), 0)
	rw := a.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	gone := a.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	goneSGE := sge(gone, 0, 8)
	a.dereg(gone)
	pd2, err := a.dev.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	other, err := pd2.RegMR(make([]byte, 64), rdmaio.AccessLocalWrite)
	if err != nil {
		t.Fatalf("RegMR in a second PD: %v", err)
	}
	lpe := rdmaio.StatusLocProtErr
	cases := []struct {
		what string
		wr   rdmaio.SendWR
	}{
		{"unknown lkey", rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{{Addr: rw.Addr(), Length: 8, LKey: rw.LKey() ^ 0x777700}}}},
		{"deregistered lkey", rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: goneSGE}},
		{"SGE past the end", rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: sge(rw, 60, 8)}},
		{"SGE before the start", rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{{Addr: rw.Addr() - 1, Length: 8, LKey: rw.LKey()}}}},
		{"READ into a region without local write", rdmaio.SendWR{Opcode: rdmaio.OpRDMARead, SGL: sge(ro, 0, 8), RemoteAddr: tgt.Addr(), RKey: tgt.RKey()}},
		{"atomic result into a region without local write", rdmaio.SendWR{Opcode: rdmaio.OpAtomicFetchAdd, SGL: sge(ro, 0, 8), RemoteAddr: tgt.Addr(), RKey: tgt.RKey()}},
		{"lkey of another PD", rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: sge(other, 0, 8)}},
	}
	for _, c := range cases {
		errorPair(t, w, lpe, qpOpt{}, qpOpt{}, c.wr, c.what)
	}
	// A receive into memory without local write fails when a message comes.
	qa, qb := w.rc(0, 1, qpOpt{rnrSet: true, rnr: 7}, qpOpt{})
	bro := b.reg(make([]byte, 64), 0)
	postRecv(t, qb, rdmaio.RecvWR{ID: 5, SGL: sge(bro, 0, 64)})
	post(t, qa, rdmaio.SendWR{ID: 6, Opcode: rdmaio.OpSend, SGL: sge(rw, 0, 8), Flags: rdmaio.SendSignaled})
	rc := w.wait(b.cq, 1)[0]
	expectStatus(t, rc, 5, lpe)
	if sc := w.wait(a.cq, 1)[0]; sc.ID != 6 || sc.Status == rdmaio.StatusSuccess {
		t.Fatalf("sender of a message into a bad receive: %+v", sc)
	}
	if err := other.Deregister(); err != nil {
		t.Fatalf("deregister: %v", err)
	}
	if err := pd2.Close(); err != nil {
		t.Fatalf("close second PD: %v", err)
	}
}

// testRecvTooSmall: a message longer than the receive buffer fails at both
// ends (receiver LOC_LEN_ERR, sender REM_INV_REQ_ERR).
func testRecvTooSmall(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, qb := w.rc(0, 1, qpOpt{}, qpOpt{})
	src := a.reg(make([]byte, 200), 0)
	dst := b.reg(make([]byte, 100), rdmaio.AccessLocalWrite)
	postRecv(t, qb, rdmaio.RecvWR{ID: 1, SGL: sge(dst, 0, 100)}, rdmaio.RecvWR{ID: 2, SGL: sge(dst, 0, 100)})
	post(t, qa, rdmaio.SendWR{ID: 1, Opcode: rdmaio.OpSend, SGL: sge(src, 0, 200), Flags: rdmaio.SendSignaled})
	rc := w.wait(b.cq, 2)
	expectStatus(t, rc[0], 1, rdmaio.StatusLocLenErr)
	expectStatus(t, rc[1], 2, rdmaio.StatusWRFlushErr)
	expectStatus(t, w.wait(a.cq, 1)[0], 1, rdmaio.StatusRemInvReqErr)
	if qa.State() != rdmaio.StateErr || qb.State() != rdmaio.StateErr {
		t.Fatalf("states after a length error: sender %v, receiver %v", qa.State(), qb.State())
	}
}

// testRNR: a SEND that finds no receive posted is retried as the RNR
// settings say, then fails with RNR_RETRY_EXC_ERR; with infinite retries it
// completes once a receive is posted.
func testRNR(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	src := a.reg(make([]byte, 64), 0)
	copy(src.Bytes(), "late")
	dst := b.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	for _, retries := range []int{0, 2} {
		qa, qb := w.rc(0, 1, qpOpt{rnrSet: true, rnr: retries}, qpOpt{rnrTime: time.Millisecond})
		post(t, qa, rdmaio.SendWR{ID: 1, Opcode: rdmaio.OpSend, SGL: sge(src, 0, 4), Flags: rdmaio.SendSignaled},
			rdmaio.SendWR{ID: 2, Opcode: rdmaio.OpSend, SGL: sge(src, 0, 4), Flags: rdmaio.SendSignaled})
		sc := w.wait(a.cq, 2)
		expectStatus(t, sc[0], 1, rdmaio.StatusRNRRetryExcErr)
		expectStatus(t, sc[1], 2, rdmaio.StatusWRFlushErr)
		// The aborted message is not delivered to a receive posted later.
		postRecv(t, qb, rdmaio.RecvWR{ID: 9, SGL: sge(dst, 0, 64)})
		if got := w.settle(b.cq, 10*time.Millisecond); len(got) != 0 {
			t.Fatalf("RNR retries %d: aborted message delivered: %s", retries, describe(got))
		}
		w.modify(b, qb, rdmaio.QPAttr{State: rdmaio.StateErr})
		w.wait(b.cq, 1)
	}
	qa, qb := w.rc(0, 1, qpOpt{}, qpOpt{rnrTime: time.Millisecond})
	post(t, qa, rdmaio.SendWR{ID: 3, Opcode: rdmaio.OpSend, SGL: sge(src, 0, 4), Flags: rdmaio.SendSignaled})
	if got := w.settle(a.cq, 20*time.Millisecond); len(got) != 0 {
		t.Fatalf("infinite RNR retries: completion before a receive was posted: %s", describe(got))
	}
	postRecv(t, qb, rdmaio.RecvWR{ID: 4, SGL: sge(dst, 0, 64)})
	w.ok(w.wait(a.cq, 1))
	rc := w.wait(b.cq, 1)[0]
	expectStatus(t, rc, 4, rdmaio.StatusSuccess)
	same(t, "message after RNR", dst.Bytes()[:4], []byte("late"))
}

// testPeerClosed: work outstanding towards a device that closes completes
// with RETRY_EXC_ERR instead of hanging.
func testPeerClosed(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, _ := w.rc(0, 1, qpOpt{}, qpOpt{})
	qa2, _ := w.rc(0, 1, qpOpt{}, qpOpt{})
	buf := a.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	tgt := b.reg(b.buf(64, true), rdmaio.AccessAll)
	post(t, qa, rdmaio.SendWR{ID: 1, Opcode: rdmaio.OpSend, SGL: sge(buf, 0, 8), Flags: rdmaio.SendSignaled})
	w.settle(a.cq, 5*time.Millisecond)
	if err := b.dev.Close(); err != nil {
		t.Fatalf("close the peer: %v", err)
	}
	expectStatus(t, w.wait(a.cq, 1)[0], 1, rdmaio.StatusRetryExcErr)
	post(t, qa2, rdmaio.SendWR{ID: 2, Opcode: rdmaio.OpRDMAWrite, SGL: sge(buf, 0, 8), RemoteAddr: tgt.Addr(), RKey: tgt.RKey(), Flags: rdmaio.SendSignaled})
	expectStatus(t, w.wait(a.cq, 1)[0], 2, rdmaio.StatusRetryExcErr)
	// The closed device's objects report ErrClosed.
	if _, err := b.pd.RegMR(make([]byte, 8), 0); !errors.Is(err, rdmaio.ErrClosed) {
		t.Fatalf("RegMR on a closed device: %v", err)
	}
	if n := b.cq.Poll(make([]rdmaio.WorkCompletion, 4)); n != 0 {
		t.Fatalf("Poll on a closed device returned %d", n)
	}
	ctx, cancel := waitCtx()
	defer cancel()
	if _, err := b.cq.Wait(ctx, make([]rdmaio.WorkCompletion, 1)); !errors.Is(err, rdmaio.ErrClosed) {
		t.Fatalf("Wait on a closed device: %v", err)
	}
	b.mem = nil // freed with the device
}

// testFreedMemory: memory from Alloc cannot be freed while registered or
// referenced by outstanding work; bad buffers and double releases are
// errors.
func testFreedMemory(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a := w.ranks[0]
	qa, _ := w.rc(0, 1, qpOpt{}, qpOpt{})
	m, err := a.pd.Alloc(8192)
	if err != nil {
		t.Fatalf("Alloc: %v", err)
	}
	for i, x := range m {
		if x != 0 {
			t.Fatalf("Alloc memory not zeroed at %d", i)
		}
	}
	mr, err := a.pd.RegMR(m[4096:], rdmaio.AccessLocalWrite)
	if err != nil {
		t.Fatalf("RegMR of allocated memory: %v", err)
	}
	expectErr(t, a.pd.Free(m), rdmaio.ErrInUse, "free registered memory")
	postRecv(t, qa, rdmaio.RecvWR{ID: 1, SGL: sge(mr, 0, 64)})
	if err := mr.Deregister(); err != nil {
		t.Fatalf("Deregister: %v", err)
	}
	expectErr(t, mr.Deregister(), rdmaio.ErrClosed, "second Deregister")
	expectErr(t, a.pd.Free(m), rdmaio.ErrInUse, "free memory a posted receive uses")
	w.modify(a, qa, rdmaio.QPAttr{State: rdmaio.StateErr})
	expectStatus(t, w.wait(a.cq, 1)[0], 1, rdmaio.StatusWRFlushErr)
	if err := a.pd.Free(m); err != nil {
		t.Fatalf("Free: %v", err)
	}
	expectErr(t, a.pd.Free(m), rdmaio.ErrInvalidArgument, "second Free")
	expectErr(t, a.pd.Free(make([]byte, 10)), rdmaio.ErrInvalidArgument, "free memory not from Alloc")
	if _, err := a.pd.Alloc(0); err == nil {
		t.Fatalf("Alloc(0) succeeded")
	}
	if _, err := a.pd.RegMR(nil, 0); err == nil {
		t.Fatalf("RegMR(nil) succeeded")
	}
	_, err = a.pd.RegMR(make([]byte, 8), rdmaio.AccessRemoteWrite)
	expectErr(t, err, rdmaio.ErrInvalidArgument, "remote write without local write")
	_, err = a.pd.RegMR(make([]byte, 8), rdmaio.Access(1<<9))
	expectErr(t, err, rdmaio.ErrInvalidArgument, "unknown access flag")
}

// testBadAddress: garbage peer addresses and missing QPs are errors.
func testBadAddress(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	for _, addr := range [][]byte{nil, []byte("garbage"), bytes.Repeat([]byte{0xff}, 64), b.dev.Addr()[:len(b.dev.Addr())-1]} {
		if ah, err := a.pd.CreateAH(rdmaio.AHAttr{Addr: addr}); err == nil {
			ah.Close()
			t.Fatalf("CreateAH(%q) succeeded", addr)
		}
	}
	qa := a.qp(rdmaio.RC, qpOpt{})
	qb := b.qp(rdmaio.RC, qpOpt{})
	w.modify(a, qa, rdmaio.QPAttr{State: rdmaio.StateInit})
	err := qa.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: []byte("garbage")}, DestQPN: qb.QPN()})
	if err == nil {
		t.Fatalf("RTR to a garbage address succeeded")
	}
	if qa.State() != rdmaio.StateInit {
		t.Fatalf("state %v after a failed RTR", qa.State())
	}
	var ids []int
	for _, id := range []uint32{qb.QPN() + 1000, qb.QPN() ^ 0xff0000} {
		if err := qa.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: b.dev.Addr()}, DestQPN: id}); err != nil {
			ids = append(ids, int(id))
		}
	}
	sort.Ints(ids)
	if len(ids) != 2 {
		t.Logf("RTR to missing QPs refused: %v (providers that connect lazily may accept it)", ids)
	}
}
