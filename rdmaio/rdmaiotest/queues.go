package rdmaiotest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// testCompletionBatching: a chain of work requests posted in one call
// completes in order, polled in small batches; unsignaled requests produce
// no completion; SigAll signals everything.
func testCompletionBatching(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	const n = 200
	qa, qb := w.rc(0, 1, qpOpt{cap: rdmaio.QPCap{MaxSendWR: 256}}, qpOpt{cap: rdmaio.QPCap{MaxRecvWR: 256}})
	src := a.reg(make([]byte, 8), 0)
	dst := b.reg(make([]byte, 8*n), rdmaio.AccessLocalWrite)
	recvs := make([]rdmaio.RecvWR, n)
	sends := make([]rdmaio.SendWR, n)
	for i := range sends {
		recvs[i] = rdmaio.RecvWR{ID: uint64(i), SGL: sge(dst, 8*i, 8)}
		sends[i] = rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpSend, SGL: sge(src, 0, 8), Flags: rdmaio.SendSignaled}
	}
	postRecv(t, qb, recvs...)
	post(t, qa, sends...)
	batch := make([]rdmaio.WorkCompletion, 7)
	var got []rdmaio.WorkCompletion
	deadline := time.Now().Add(waitTimeout)
	for len(got) < n {
		// The receiver progresses with big batches, the sender's CQ is
		// drained 7 at a time.
		k := b.cq.Poll(w.wc)
		w.got[b.cq] = append(w.got[b.cq], w.wc[:k]...)
		m := a.cq.Poll(batch)
		if m > len(batch) {
			t.Fatalf("Poll returned %d > batch %d", m, len(batch))
		}
		got = append(got, batch[:m]...)
		if k+m == 0 && time.Now().After(deadline) {
			t.Fatalf("timed out with %d of %d completions", len(got), n)
		}
	}
	w.ok(got)
	for i, c := range got {
		if c.ID != uint64(i) {
			t.Fatalf("completion %d has id %d", i, c.ID)
		}
	}
	rc := w.wait(b.cq, n)
	for i, c := range rc {
		if c.ID != uint64(i) || c.Status != rdmaio.StatusSuccess {
			t.Fatalf("receive completion %d: %+v", i, c)
		}
	}

	// Unsignaled: only every 16th request reports.
	tgt := b.reg(make([]byte, 64), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite)
	for i := range sends[:64] {
		sends[i] = rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpRDMAWrite, SGL: sge(src, 0, 8), RemoteAddr: tgt.Addr(), RKey: tgt.RKey()}
		if i%16 == 15 {
			sends[i].Flags = rdmaio.SendSignaled
		}
	}
	post(t, qa, sends[:64]...)
	sc := w.wait(a.cq, 4)
	w.ok(sc)
	for i, c := range sc {
		if c.ID != uint64(16*i+15) {
			t.Fatalf("signaled completions %s", describe(sc))
		}
	}
	if extra := w.settle(a.cq, 10*time.Millisecond); len(extra) != 0 {
		t.Fatalf("unsignaled requests completed: %s", describe(extra))
	}
	// SigAll.
	qs, _ := w.rc(0, 1, qpOpt{sigAll: true}, qpOpt{})
	post(t, qs, sends[:3]...)
	if sc := w.wait(a.cq, 3); sc[0].ID != 0 || sc[2].ID != 2 {
		t.Fatalf("SigAll completions %s", describe(sc))
	}
}

// testManyQPs: many QPs share one CQ on each side; completions name their
// QP and each QP's completions stay in order.
func testManyQPs(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	const pairs, per = 24, 3
	src := a.reg(make([]byte, 8), 0)
	dst := b.reg(make([]byte, 8*pairs*per), rdmaio.AccessLocalWrite)
	byQPN := map[uint32]int{}
	var qas []rdmaio.QP
	for p := 0; p < pairs; p++ {
		qa, qb := w.rc(0, 1, qpOpt{}, qpOpt{})
		byQPN[qb.QPN()] = p
		qas = append(qas, qa)
		for j := 0; j < per; j++ {
			postRecv(t, qb, rdmaio.RecvWR{ID: uint64(j), SGL: sge(dst, 8*(p*per+j), 8)})
		}
	}
	for _, qa := range qas {
		for j := 0; j < per; j++ {
			post(t, qa, rdmaio.SendWR{ID: uint64(j), Opcode: rdmaio.OpSend, SGL: sge(src, 0, 8), Flags: rdmaio.SendSignaled})
		}
	}
	rc := w.wait(b.cq, pairs*per)
	w.ok(rc)
	next := map[uint32]uint64{}
	for _, c := range rc {
		if _, ok := byQPN[c.QPN]; !ok {
			t.Fatalf("completion for unknown QP %d", c.QPN)
		}
		if c.ID != next[c.QPN] {
			t.Fatalf("QP %d: completion id %d, want %d", c.QPN, c.ID, next[c.QPN])
		}
		next[c.QPN]++
	}
	sc := w.wait(a.cq, pairs*per)
	w.ok(sc)
}

// srqSetup is rank 1's SRQ with per receive requests of slot bytes for
// each of qps RC QPs from rank 0 attached to it (IDs in order, request i at
// dst offset slot*i), and rank 0's source buffer of the same size.
type srqSetup struct {
	srq       rdmaio.SRQ
	dst, src  rdmaio.MR
	idx       map[uint32]int // receiving QPN → sender index
	senders   []rdmaio.QP
	receivers []rdmaio.QP
}

func newSRQSetup(t *testing.T, w *world, qps, per, slot int) srqSetup {
	t.Helper()
	a, b := w.ranks[0], w.ranks[1]
	srq, err := b.pd.CreateSRQ(rdmaio.SRQAttr{MaxWR: 64})
	if err != nil {
		t.Fatalf("CreateSRQ: %v", err)
	}
	b.srqs = append(b.srqs, srq)
	s := srqSetup{srq: srq, idx: map[uint32]int{}}
	s.dst = b.reg(make([]byte, slot*qps*per), rdmaio.AccessLocalWrite)
	for i := 0; i < qps*per; i++ {
		postRecv(t, srq, rdmaio.RecvWR{ID: uint64(i), SGL: sge(s.dst, slot*i, slot)})
	}
	s.src = a.reg(make([]byte, slot*qps*per), 0)
	for p := 0; p < qps; p++ {
		qa, qb := w.rc(0, 1, qpOpt{}, qpOpt{srq: srq})
		s.idx[qb.QPN()] = p
		s.senders, s.receivers = append(s.senders, qa), append(s.receivers, qb)
	}
	return s
}

// testSRQ: several QPs draw receives from one shared receive queue.
func testSRQ(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	const qps, per = 4, 10
	b := w.ranks[1]
	s := newSRQSetup(t, w, qps, per, 16)
	srq, dst, src, idx, senders := s.srq, s.dst, s.src, s.idx, s.senders
	for _, q := range s.receivers {
		if _, err := q.PostRecv([]rdmaio.RecvWR{{ID: 1, SGL: sge(dst, 0, 16)}}); err == nil {
			t.Fatalf("PostRecv on a QP with an SRQ succeeded")
		}
	}
	expectErr(t, srq.Close(), rdmaio.ErrInUse, "close an SRQ in use")
	for j := 0; j < per; j++ {
		for p, qa := range senders {
			copy(src.Bytes()[16*(p*per+j):], fmt.Sprintf("qp%d msg%02d", p, j))
			post(t, qa, rdmaio.SendWR{ID: uint64(j), Opcode: rdmaio.OpSend, SGL: sge(src, 16*(p*per+j), 16)})
		}
	}
	rc := w.wait(b.cq, qps*per)
	w.ok(rc)
	next := map[int]int{}
	for _, c := range rc {
		p, ok := idx[c.QPN]
		if !ok {
			t.Fatalf("completion for unknown QP %d", c.QPN)
		}
		want := fmt.Sprintf("qp%d msg%02d", p, next[p])
		next[p]++
		same(t, "SRQ receive", dst.Bytes()[16*c.ID:16*c.ID+uint64(len(want))], []byte(want))
	}
}

// testQueueDepth: posting past a queue's depth is refused with
// ErrQueueFull after the requests that fit; unsignaled requests keep their
// slots until a later signaled completion is polled, as in verbs. Depths
// that are powers of two and one that is not.
func testQueueDepth(t *testing.T, f Fabric) {
	for _, d := range []int{8, 5} {
		t.Run(fmt.Sprint("depth", d), func(t *testing.T) { testQueueDepthOf(t, f, d) })
	}
}

func testQueueDepthOf(t *testing.T, f Fabric, d int) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, _ := w.rc(0, 1, qpOpt{cap: rdmaio.QPCap{MaxSendWR: d, MaxRecvWR: 4}}, qpOpt{})
	if c := qa.Cap(); c.MaxSendWR != d || c.MaxRecvWR != 4 {
		t.Fatalf("caps %+v, asked for %d and 4", c, d)
	}
	buf := a.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	tgt := b.reg(make([]byte, 64), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite)
	recvs := make([]rdmaio.RecvWR, 6)
	for i := range recvs {
		recvs[i] = rdmaio.RecvWR{ID: uint64(i), SGL: sge(buf, 0, 8)}
	}
	n, err := qa.PostRecv(recvs)
	if n != 4 || !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Fatalf("posting 6 receives into a queue of 4: %d posted, %v", n, err)
	}
	writes := make([]rdmaio.SendWR, d+2)
	for i := range writes {
		writes[i] = rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpRDMAWrite, SGL: sge(buf, 0, 8), RemoteAddr: tgt.Addr(), RKey: tgt.RKey(), Flags: rdmaio.SendSignaled}
	}
	n, err = qa.PostSend(writes)
	if n != d || !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Fatalf("posting %d into a send queue of %d: %d posted, %v", d+2, d, n, err)
	}
	w.ok(w.wait(a.cq, d))
	post(t, qa, writes[d:]...)
	w.ok(w.wait(a.cq, 2))
	// d-1 unsignaled and 1 signaled fill the queue; the queue frees only
	// when the signaled completion is polled.
	for i := range writes[:d] {
		writes[i].Flags = 0
	}
	writes[d-1].Flags = rdmaio.SendSignaled
	post(t, qa, writes[:d]...)
	if _, err := qa.PostSend(writes[:1]); !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Fatalf("posting into a full queue before polling: %v", err)
	}
	// Polling the signaled completion frees the queue. (Wait for it rather
	// than polling for a fixed time: a provider whose completions need a
	// network round trip may take longer on a loaded machine.)
	if sc := w.wait(a.cq, 1); sc[0].ID != uint64(d-1) || sc[0].Status != rdmaio.StatusSuccess {
		t.Fatalf("completion of the signaled request: %s", describe(sc))
	}
	post(t, qa, writes[:d]...)
	w.ok(w.wait(a.cq, 1))
	// d unsignaled: done, but their slots stay taken.
	for i := range writes[:d] {
		writes[i].Flags = 0
	}
	post(t, qa, writes[:d]...)
	w.settle(a.cq, 5*time.Millisecond)
	if _, err := qa.PostSend(writes[:1]); !errors.Is(err, rdmaio.ErrQueueFull) {
		t.Fatalf("posting into a queue full of unreported unsignaled requests: %v", err)
	}
}

// testTeardownFlush: moving a QP with outstanding sends and receives to ERR
// completes every one of them with WR_FLUSH_ERR, in order per queue.
func testTeardownFlush(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	a, b := w.ranks[0], w.ranks[1]
	qa, _ := w.rc(0, 1, qpOpt{}, qpOpt{}) // the receiver posts nothing: RNR, infinite retries
	buf := a.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
	tgt := b.reg(make([]byte, 64), rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite)
	var wrs []rdmaio.SendWR
	for i := 0; i < 4; i++ {
		wrs = append(wrs, rdmaio.SendWR{ID: uint64(i), Opcode: rdmaio.OpSend, SGL: sge(buf, 0, 8)})
	}
	// A write queued behind the sends, and an unsignaled one.
	wrs = append(wrs, rdmaio.SendWR{ID: 4, Opcode: rdmaio.OpRDMAWrite, SGL: sge(buf, 0, 8), RemoteAddr: tgt.Addr(), RKey: tgt.RKey(), Flags: rdmaio.SendSignaled})
	wrs[1].Flags = rdmaio.SendSignaled
	post(t, qa, wrs...)
	for i := 0; i < 3; i++ {
		postRecv(t, qa, rdmaio.RecvWR{ID: uint64(10 + i), SGL: sge(buf, 8*i, 8)})
	}
	if got := w.settle(a.cq, 10*time.Millisecond); len(got) != 0 {
		t.Fatalf("completions before the flush: %s", describe(got))
	}
	w.modify(a, qa, rdmaio.QPAttr{State: rdmaio.StateErr})
	wcs := w.wait(a.cq, 8)
	var sends, recvs []uint64
	for _, c := range wcs {
		if c.Status != rdmaio.StatusWRFlushErr {
			t.Fatalf("flush: %s", describe(wcs))
		}
		if c.Opcode.IsRecv() {
			recvs = append(recvs, c.ID)
		} else {
			sends = append(sends, c.ID)
		}
	}
	if fmt.Sprint(sends) != "[0 1 2 3 4]" || fmt.Sprint(recvs) != "[10 11 12]" {
		t.Fatalf("flushed sends %v, receives %v", sends, recvs)
	}
	if extra := w.settle(a.cq, 5*time.Millisecond); len(extra) != 0 {
		t.Fatalf("more completions after the flush: %s", describe(extra))
	}
}

// testTeardownOutstanding: destroying QPs, CQs, PDs and devices with work
// outstanding returns promptly, without errors and without leaks.
func testTeardownOutstanding(t *testing.T, f Fabric) {
	before := runtime.NumGoroutine()
	func() {
		w := newWorld(t, f, 3)
		for i := 0; i < 3; i++ {
			qa, qb := w.rc(i, (i+1)%3, qpOpt{}, qpOpt{})
			a, b := w.ranks[i], w.ranks[(i+1)%3]
			src := a.reg(a.buf(1<<20, i%2 == 0), rdmaio.AccessLocalWrite)
			dst := b.reg(make([]byte, 64), rdmaio.AccessLocalWrite)
			for j := 0; j < 5; j++ {
				post(t, qa, rdmaio.SendWR{ID: uint64(j), Opcode: rdmaio.OpSend, SGL: sge(src, 0, 1<<20), Flags: rdmaio.SendSignaled})
				postRecv(t, qa, rdmaio.RecvWR{ID: uint64(j), SGL: sge(src, 0, 64)})
			}
			postRecv(t, qb, rdmaio.RecvWR{ID: 1, SGL: sge(dst, 0, 64)})
			u := w.ud(i, 3, qpOpt{})
			post(t, u, rdmaio.SendWR{Opcode: rdmaio.OpSend, Inline: []byte("x"), AH: w.ah(i, (i+1)%3), RemoteQPN: 12345, RemoteQKey: 3})
		}
		w.pollAll()
		// Close QPs straight away, then the rest (world.close).
		for _, r := range w.ranks {
			for _, q := range r.qps {
				if err := q.Close(); err != nil {
					t.Fatalf("close QP with outstanding work: %v", err)
				}
			}
		}
		done := make(chan struct{})
		go func() { w.close(); close(done) }()
		select {
		case <-done:
		case <-time.After(waitTimeout):
			t.Fatalf("teardown hangs")
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines before the test, %d after teardown", before, n)
	}
}

// waitCall is a way to wait on a CQ: CQ.Wait, or SleepCQ.Sleep.
type waitCall struct {
	name string
	wait func(rdmaio.CQ, context.Context, []rdmaio.WorkCompletion) (int, error)
}

// waitCalls returns the ways to wait that cq offers: Wait, and Sleep where
// the provider has it (rdmaio.SleepCQ).
func waitCalls(cq rdmaio.CQ) []waitCall {
	waits := []waitCall{{"Wait", rdmaio.CQ.Wait}}
	if _, ok := cq.(rdmaio.SleepCQ); ok {
		waits = append(waits, waitCall{"Sleep", func(c rdmaio.CQ, ctx context.Context, wc []rdmaio.WorkCompletion) (int, error) {
			return c.(rdmaio.SleepCQ).Sleep(ctx, wc)
		}})
	}
	return waits
}

// waitPair connects two ranks by RC QPs qa and qb for the wait tests:
// SENDs of 8 bytes go from src on a to dst on b.
func waitPair(t *testing.T, f Fabric) (a, b *rank, qa, qb rdmaio.QP, src, dst rdmaio.MR) {
	w := newWorld(t, f, 2)
	a, b = w.ranks[0], w.ranks[1]
	qa, qb = w.rc(0, 1, qpOpt{}, qpOpt{})
	return a, b, qa, qb, a.reg(make([]byte, 8), 0), b.reg(make([]byte, 8), rdmaio.AccessLocalWrite)
}

// testCQWait: Wait returns when a completion arrives from another goroutine
// and honours its context; so does Sleep (rdmaio.SleepCQ), where the
// provider has it.
func testCQWait(t *testing.T, f Fabric) {
	a, b, qa, qb, src, dst := waitPair(t, f)
	waits := waitCalls(b.cq)
	for i, wt := range waits {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		n, err := wt.wait(b.cq, ctx, make([]rdmaio.WorkCompletion, 1))
		cancel()
		if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s on an idle CQ: %d, %v", wt.name, n, err)
		}
		if _, err := wt.wait(b.cq, context.Background(), nil); err == nil {
			t.Fatalf("%s with an empty slice succeeded", wt.name)
		}
		id := uint64(i + 1)
		postRecv(t, qb, rdmaio.RecvWR{ID: id, SGL: sge(dst, 0, 8)})
		got := make(chan error, 1)
		go func() {
			ctx, cancel := waitCtx()
			defer cancel()
			wc := make([]rdmaio.WorkCompletion, 4)
			n, err := wt.wait(b.cq, ctx, wc)
			if err == nil && (n != 1 || wc[0].ID != id || wc[0].Status != rdmaio.StatusSuccess) {
				err = fmt.Errorf("%s returned %d: %s", wt.name, n, describe(wc[:n]))
			}
			got <- err
		}()
		time.Sleep(5 * time.Millisecond) // let the waiter reach its sleep
		post(t, qa, rdmaio.SendWR{ID: id, Opcode: rdmaio.OpSend, SGL: sge(src, 0, 8), Flags: rdmaio.SendSignaled})
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v", err)
		}
		ctx2, cancel2 := waitCtx()
		if _, err := wt.wait(a.cq, ctx2, make([]rdmaio.WorkCompletion, 1)); err != nil {
			cancel2()
			t.Fatalf("sender %s: %v", wt.name, err)
		}
		cancel2()
	}
}

// deadlineOnly is a context whose deadline is its only end: Done never
// closes, as with a context that a caller reuses from wait to wait and
// closes only to cancel (rdmaio.CQ.Wait).
type deadlineOnly struct {
	context.Context
	deadline time.Time
	done     chan struct{}
}

func (c deadlineOnly) Deadline() (time.Time, bool) { return c.deadline, true }
func (c deadlineOnly) Done() <-chan struct{}       { return c.done }
func (c deadlineOnly) Err() error                  { return nil }

// testCQWaitDeadline: Wait, and Sleep where the provider has it, return
// context.DeadlineExceeded once their context's deadline has passed and
// nothing arrived, although the context's Done never closes (never before
// the deadline; a wait that does not end is taken for a hang); a
// completion that comes before the deadline is still returned.
func testCQWaitDeadline(t *testing.T, f Fabric) {
	a, b, qa, qb, src, dst := waitPair(t, f)
	waits := waitCalls(b.cq)
	never := make(chan struct{})
	ctxIn := func(d time.Duration) deadlineOnly {
		return deadlineOnly{Context: context.Background(), deadline: time.Now().Add(d), done: never}
	}
	for i, wt := range waits {
		// Past, within the spin phase, within the yield phase, in the
		// sleep phase.
		for _, d := range []time.Duration{-time.Millisecond, 10 * time.Microsecond, 500 * time.Microsecond, 20 * time.Millisecond} {
			ctx := ctxIn(d)
			type result struct {
				n   int
				err error
				at  time.Time
			}
			got := make(chan result, 1)
			go func() {
				n, err := wt.wait(b.cq, ctx, make([]rdmaio.WorkCompletion, 1))
				got <- result{n, err, time.Now()}
			}()
			var r result
			select {
			case r = <-got:
			case <-time.After(waitTimeout):
				t.Fatalf("%s with a deadline in %v whose Done never closes did not return", wt.name, d)
			}
			if r.n != 0 || !errors.Is(r.err, context.DeadlineExceeded) {
				t.Fatalf("%s on an idle CQ with a deadline in %v: %d, %v", wt.name, d, r.n, r.err)
			}
			if r.at.Before(ctx.deadline) {
				t.Fatalf("%s with a deadline in %v returned %v before it", wt.name, d, ctx.deadline.Sub(r.at))
			}
		}
		id := uint64(i + 1)
		postRecv(t, qb, rdmaio.RecvWR{ID: id, SGL: sge(dst, 0, 8)})
		post(t, qa, rdmaio.SendWR{ID: id, Opcode: rdmaio.OpSend, SGL: sge(src, 0, 8), Flags: rdmaio.SendSignaled})
		wc := make([]rdmaio.WorkCompletion, 4)
		n, err := wt.wait(b.cq, ctxIn(waitTimeout), wc)
		if err != nil || n != 1 || wc[0].ID != id || wc[0].Status != rdmaio.StatusSuccess {
			t.Fatalf("%s with a deadline whose Done never closes: %d, %v: %s", wt.name, n, err, describe(wc[:n]))
		}
		if n, err := wt.wait(a.cq, ctxIn(waitTimeout), wc); err != nil || n != 1 || wc[0].ID != id {
			t.Fatalf("sender %s with a deadline whose Done never closes: %d, %v: %s", wt.name, n, err, describe(wc[:n]))
		}
	}
}

// testDirectCQ: where the provider has rdmaio.DirectCQ, PollDirect delivers
// every message of QPs on an SRQ exactly once and in order per QP, either
// into the poller's buffer (back to back from its start, each Poll anew,
// never past its end) or into the SRQ's receive requests, which it
// consumes in order; SENDs with immediate data always take a receive
// request.
func testDirectCQ(t *testing.T, f Fabric) {
	w := newWorld(t, f, 2)
	b := w.ranks[1]
	dcq, ok := b.cq.(rdmaio.DirectCQ)
	if !ok {
		t.Skip("the provider has no rdmaio.DirectCQ (an optional interface)")
	}
	const qps, per, slot, direct = 2, 12, 64, uint64(1) << 60
	st := newSRQSetup(t, w, qps, per, slot)
	dst, src, idx, senders := st.dst, st.src, st.idx, st.senders
	// Messages of 13 to 24 bytes, every fifth with immediate data.
	msg := func(p, j int) []byte { return []byte(fmt.Sprintf("qp%d msg%02d %s", p, j, strings.Repeat("x", j))) }
	for j := 0; j < per; j++ {
		for p, qa := range senders {
			m := msg(p, j)
			off := slot * (p*per + j)
			copy(src.Bytes()[off:], m)
			wr := rdmaio.SendWR{ID: uint64(j), Opcode: rdmaio.OpSend, SGL: sge(src, off, len(m))}
			if j%5 == 4 {
				wr.Opcode, wr.Imm = rdmaio.OpSendImm, uint32(j)
			}
			post(t, qa, wr)
		}
	}
	buf := make([]byte, 40) // room for one or two messages per Poll
	wc := make([]rdmaio.WorkCompletion, 8)
	next := map[int]int{}
	nextRecv, directs := uint64(0), 0
	deadline := time.Now().Add(waitTimeout)
	for got := 0; got < qps*per; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages after %v", got, qps*per, waitTimeout)
		}
		n := dcq.PollDirect(wc, buf, direct)
		used := 0
		for _, c := range wc[:n] {
			if c.Status != rdmaio.StatusSuccess || c.Opcode != rdmaio.WCRecv {
				t.Fatalf("completion %s", describe([]rdmaio.WorkCompletion{c}))
			}
			p, ok := idx[c.QPN]
			if !ok {
				t.Fatalf("completion for unknown QP %d", c.QPN)
			}
			j := next[p]
			next[p]++
			want := msg(p, j)
			if int(c.ByteLen) != len(want) {
				t.Fatalf("qp%d message %d: %d bytes, want %d", p, j, c.ByteLen, len(want))
			}
			var data []byte
			if c.ID == direct {
				if j%5 == 4 {
					t.Fatalf("qp%d message %d with immediate data delivered without a receive request", p, j)
				}
				if c.Flags&rdmaio.WCWithImm != 0 {
					t.Fatalf("qp%d message %d: direct completion flagged with immediate data", p, j)
				}
				if used+len(want) > len(buf) {
					t.Fatalf("direct messages of one Poll overrun the buffer: %d + %d > %d", used, len(want), len(buf))
				}
				data = buf[used : used+len(want)]
				used += len(want)
				directs++
			} else {
				if imm := c.Flags&rdmaio.WCWithImm != 0; imm != (j%5 == 4) || imm && c.Imm != uint32(j) {
					t.Fatalf("qp%d message %d: immediate flag %v, value %d", p, j, imm, c.Imm)
				}
				if c.ID != nextRecv {
					t.Fatalf("qp%d message %d took receive request %d, want %d (in order)", p, j, c.ID, nextRecv)
				}
				nextRecv++
				data = dst.Bytes()[slot*c.ID : slot*c.ID+uint64(len(want))]
			}
			same(t, fmt.Sprintf("qp%d message %d", p, j), data, want)
			got++
		}
	}
	t.Logf("%d messages into the poller's buffer, %d into receive requests", directs, nextRecv)
}
