package tcp

import (
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// ackHoldPair connects two devices, makes rank 1's service goroutine leave
// progress to its poller, and has rank 0 send signaled SENDs to rank 1 until
// rank 1's poller holds back the acknowledgement of one, as it would with
// one device in the process (on a loaded host the service may be awake
// when the message comes, and then sends it at once). The backstop is taken
// out of play, so only the watchdog timer wakes a passive service.
func ackHoldPair(t *testing.T, name string) (*rdmaiotest.Pair, *qp) {
	holdWithPeers.Store(true)
	t.Cleanup(func() { holdWithPeers.Store(false) })
	p := watchdogPair(t, name)
	d1, q1 := p.Dev[1].(*Device), p.RC[1].(*qp)
	wc := make([]rdmaio.WorkCompletion, 4)
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[1], 64, 64)}}}
	send := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[0], 64, 8)}}}
	for try := range 1000 {
		// The first message makes the connection hot, which wakes a
		// blocked service; then it goes passive while rank 1 polls.
		for i := 0; i < 1<<16 && !d1.svcPassive.Load(); i++ {
			if p.CQ[1].Poll(wc) != 0 {
				t.Fatal("completion from nowhere")
			}
		}
		if _, err := p.RC[1].PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		if _, err := p.RC[0].PostSend(send); err != nil {
			t.Fatal(err)
		}
		rdmaiotest.PollN(t, p.CQ[1], wc, 1)
		q1.mu.Lock()
		held := heldAck.Load() == q1 && q1.rspTail-q1.rspHead == 1
		q1.mu.Unlock()
		if held {
			return p, q1
		}
		rdmaiotest.PollN(t, p.CQ[0], wc, 1)
		if try == 999 {
			t.Fatal("the poller never held an acknowledgement back")
		}
	}
	return p, q1
}

// TestSignaledAckRidesReply: the acknowledgement of a signaled SEND that a
// poller received goes out with the reply, in the same system call, and
// completes the SEND at the requester.
func TestSignaledAckRidesReply(t *testing.T) {
	p, q1 := ackHoldPair(t, "ackride")
	if _, err := p.RC[0].PostRecv([]rdmaio.RecvWR{{ID: 5, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[0], 128, 64)}}}); err != nil {
		t.Fatal(err)
	}
	q1.mu.Lock()
	act := q1.act
	q1.mu.Unlock()
	reply := []rdmaio.SendWR{{ID: 6, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Alloc[1], 0, 8)}}}
	if _, err := p.RC[1].PostSend(reply); err != nil {
		t.Fatal(err)
	}
	q1.mu.Lock()
	sends, left := q1.act-act, q1.rspTail-q1.rspHead
	q1.mu.Unlock()
	if sends != 1 || left != 0 {
		t.Fatalf("reply: %d writes, %d responses left; want 1 write carrying the acknowledgement", sends, left)
	}
	wc := make([]rdmaio.WorkCompletion, 4)
	got := map[uint64]rdmaio.WCOpcode{}
	for len(got) < 2 {
		k := p.CQ[0].Poll(wc)
		for _, c := range wc[:k] {
			if c.Status != rdmaio.StatusSuccess {
				t.Fatalf("completion %+v", c)
			}
			got[c.ID] = c.Opcode
		}
	}
	if got[2] != rdmaio.WCSend || got[5] != rdmaio.WCRecv {
		t.Fatalf("completions %v; want the SEND (2) and the reply's receive (5)", got)
	}
}

// TestHeldAckSentWithoutPollers: when the program that holds an
// acknowledgement back stops polling and sends nothing, its service
// goroutine sends it, and the requester's SEND completes.
func TestHeldAckSentWithoutPollers(t *testing.T) {
	p, q1 := ackHoldPair(t, "ackalone")
	// Nobody polls either device now.
	deadline := time.Now().Add(20 * time.Second)
	for {
		q1.mu.Lock()
		left := q1.rspTail - q1.rspHead
		q1.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held acknowledgement was never sent")
		}
		time.Sleep(100 * time.Microsecond)
	}
	wc := make([]rdmaio.WorkCompletion, 4)
	rdmaiotest.PollN(t, p.CQ[0], wc, 1)
	if wc[0].ID != 2 || wc[0].Opcode != rdmaio.WCSend {
		t.Fatalf("completion %+v; want the SEND (2)", wc[0])
	}
}
