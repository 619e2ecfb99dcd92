package shm_test

import (
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// rnrPair connects a further RC QP pair on p's devices (and CQs): the
// sender (rank 0) gives up after one RNR retry of a millisecond.
func rnrPair(t *testing.T, p *pair) (snd, rcv rdmaio.QP) {
	t.Helper()
	var q [2]rdmaio.QP
	for i := range 2 {
		var err error
		q[i], err = p.PD[i].CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: p.CQ[i], RecvCQ: p.CQ[i]})
		if err != nil {
			t.Fatal(err)
		}
		if err := q[i].Modify(rdmaio.QPAttr{State: rdmaio.StateInit}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		j := 1 - i
		if err := q[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: p.Dev[j].Addr()},
			DestQPN: q[j].QPN(), MinRNRTimer: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := q[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return q[0], q[1]
}

// pollOne polls cq until one completion arrives (failing after a generous
// bound, so that a lost completion fails instead of hanging).
func pollOne(t *testing.T, cq rdmaio.CQ) rdmaio.WorkCompletion {
	t.Helper()
	wc := make([]rdmaio.WorkCompletion, 1)
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		if cq.Poll(wc) == 1 {
			return wc[0]
		}
	}
	t.Fatal("no completion")
	return rdmaio.WorkCompletion{}
}

func sendOne(t *testing.T, p *pair, q rdmaio.QP, id uint64) {
	t.Helper()
	if _, err := q.PostSend([]rdmaio.SendWR{{ID: id, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled,
		SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[0], 0, 8)}}}); err != nil {
		t.Fatal(err)
	}
}

func recvOne(t *testing.T, p *pair, q rdmaio.QP, id uint64) {
	t.Helper()
	if _, err := q.PostRecv([]rdmaio.RecvWR{{ID: id, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[1], 0, 64)}}}); err != nil {
		t.Fatal(err)
	}
}

func expectWC(t *testing.T, wc rdmaio.WorkCompletion, id uint64, st rdmaio.Status) {
	t.Helper()
	if wc.ID != id || wc.Status != st {
		t.Fatalf("completion %+v, want id %d status %v", wc, id, st)
	}
}

// TestRNRAfterConsumedReceive: the sender tells a receiver without receives
// from the receives it saw consumed (a QP's posted count only grows), so a
// SEND after the only receive was used fails with RNR_RETRY_EXC_ERR.
func TestRNRAfterConsumedReceive(t *testing.T) {
	p := newPair(t, 4096, nil)
	snd, rcv := rnrPair(t, p)
	recvOne(t, p, rcv, 1)
	sendOne(t, p, snd, 2)
	expectWC(t, pollOne(t, p.CQ[1]), 1, rdmaio.StatusSuccess)
	expectWC(t, pollOne(t, p.CQ[0]), 2, rdmaio.StatusSuccess)
	sendOne(t, p, snd, 3)
	expectWC(t, pollOne(t, p.CQ[0]), 3, rdmaio.StatusRNRRetryExcErr)
	// The withdrawn message is not delivered to a receive posted later.
	recvOne(t, p, rcv, 4)
	wc := make([]rdmaio.WorkCompletion, 1)
	for range 10000 {
		if p.CQ[1].Poll(wc) != 0 {
			t.Fatalf("withdrawn message delivered: %+v", wc[0])
		}
	}
}

// TestNoRNRWithReceiveLeft: a receiver that has a receive left is never
// taken for not ready, however long it does not poll.
func TestNoRNRWithReceiveLeft(t *testing.T) {
	p := newPair(t, 4096, nil)
	snd, rcv := rnrPair(t, p)
	recvOne(t, p, rcv, 1)
	recvOne(t, p, rcv, 2)
	sendOne(t, p, snd, 3)
	expectWC(t, pollOne(t, p.CQ[1]), 1, rdmaio.StatusSuccess)
	expectWC(t, pollOne(t, p.CQ[0]), 3, rdmaio.StatusSuccess)
	sendOne(t, p, snd, 4)
	// Far beyond the sender's RNR budget (one retry of 1 ms), polled only
	// on the sender's side.
	wc := make([]rdmaio.WorkCompletion, 1)
	for end := time.Now().Add(30 * time.Millisecond); time.Now().Before(end); {
		if p.CQ[0].Poll(wc) != 0 {
			t.Fatalf("sender completed before the receiver polled: %+v", wc[0])
		}
	}
	expectWC(t, pollOne(t, p.CQ[1]), 2, rdmaio.StatusSuccess)
	expectWC(t, pollOne(t, p.CQ[0]), 4, rdmaio.StatusSuccess)
}
