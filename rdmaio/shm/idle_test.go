package shm_test

import (
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// TestIdleCQ checks rdmaio.IdleCQ: Idle reports false while a message or a
// send completion waits, so that a Poll after Idle reported true finds
// nothing, and true once everything has been polled.
func TestIdleCQ(t *testing.T) {
	f := &fabric{}
	devs := f.Open(t, 2)
	p := rdmaiotest.NewPair(t, func(r int) (rdmaio.Device, error) { return devs[r], nil }, 4096, rdmaio.AccessLocalWrite)
	var idle [2]rdmaio.IdleCQ
	for i := range idle {
		var ok bool
		if idle[i], ok = p.CQ[i].(rdmaio.IdleCQ); !ok {
			t.Fatalf("the CQ %T is not an rdmaio.IdleCQ", p.CQ[i])
		}
	}
	wc := make([]rdmaio.WorkCompletion, 8)
	// settle polls cq until Idle reports true, checking that a Poll after
	// Idle reported true finds nothing.
	settle := func(i int) {
		t.Helper()
		for n := 0; ; n++ {
			if n == 1000 {
				t.Fatalf("CQ %d: Idle never reports true", i)
			}
			was := idle[i].Idle()
			k := p.CQ[i].Poll(wc)
			if was && k > 0 {
				t.Fatalf("CQ %d: Idle reported true, then Poll returned %d completions", i, k)
			}
			if was && idle[i].Idle() {
				return
			}
		}
	}
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[1], 0, 64)}}}
	for round := range 100 {
		settle(0)
		settle(1)
		if _, err := p.RC[1].PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		var flags rdmaio.SendFlags
		if round%4 == 0 {
			flags = rdmaio.SendSignaled
		}
		send := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, Flags: flags, Inline: []byte("12345678")}}
		if _, err := p.RC[0].PostSend(send); err != nil {
			t.Fatal(err)
		}
		if idle[1].Idle() {
			t.Fatalf("round %d: receiver's CQ idle with a message in its ring", round)
		}
		rdmaiotest.PollN(t, p.CQ[1], wc[:1], 1)
		if wc[0].Opcode != rdmaio.WCRecv || wc[0].ID != 1 {
			t.Fatalf("round %d: receiver got %+v", round, wc[0])
		}
		if flags != 0 {
			if idle[0].Idle() {
				t.Fatalf("round %d: sender's CQ idle with a signaled send completed", round)
			}
			rdmaiotest.PollN(t, p.CQ[0], wc[:1], 1)
			if wc[0].ID != 2 {
				t.Fatalf("round %d: sender got %+v", round, wc[0])
			}
		}
	}
}
