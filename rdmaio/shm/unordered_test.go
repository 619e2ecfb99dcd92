package shm_test

import (
	"bytes"
	"testing"

	"github.com/jiarun/jia/rdmaio"
)

// TestUnorderedRead: RDMA READs posted behind a SEND that the peer has not
// received yet wait for it (RC order), unless they carry SendUnordered:
// those read at once. Their completions still come after the SEND's, in
// posting order. An ordered READ behind an unordered one waits, and stops
// the run of READs there.
func TestUnorderedRead(t *testing.T) {
	const blk = 4096
	for _, tc := range []struct {
		name  string
		flags [2]rdmaio.SendFlags
		early int // READs done before the peer polls
	}{
		{"ordered", [2]rdmaio.SendFlags{0, 0}, 0},
		{"unordered", [2]rdmaio.SendFlags{rdmaio.SendUnordered, rdmaio.SendUnordered}, 2},
		{"mixed", [2]rdmaio.SendFlags{rdmaio.SendUnordered, 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 3*blk, nil)
			local, remote := p.Heap[0].Bytes(), p.Heap[1].Bytes()
			fillPattern(remote[blk:], 0x33)
			if _, err := p.RC[1].PostRecv([]rdmaio.RecvWR{{ID: 9, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[1], 0, 64)}}}); err != nil {
				t.Fatal(err)
			}
			wrs := []rdmaio.SendWR{{ID: 0, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled,
				SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[0], 0, 64)}}}
			for i := range 2 {
				off := (i + 1) * blk
				wrs = append(wrs, rdmaio.SendWR{ID: uint64(i + 1), Opcode: rdmaio.OpRDMARead,
					Flags: rdmaio.SendSignaled | tc.flags[i], SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[0], off, blk)},
					RemoteAddr: p.Heap[1].Addr() + uint64(off), RKey: p.Heap[1].RKey()})
			}
			if n, err := p.RC[0].PostSend(wrs); err != nil || n != len(wrs) {
				t.Fatalf("posted %d of %d: %v", n, len(wrs), err)
			}
			wc := make([]rdmaio.WorkCompletion, 4)
			for range 100 {
				if n := p.CQ[0].Poll(wc); n != 0 {
					t.Fatalf("%d completions (first %+v) before the peer received the SEND", n, wc[0])
				}
			}
			for i := range 2 {
				off := (i + 1) * blk
				if got, want := bytes.Equal(local[off:off+blk], remote[off:off+blk]), i < tc.early; got != want {
					t.Fatalf("READ %d done before the peer polled: %v, want %v", i+1, got, want)
				}
			}
			pollN(t, p.CQ[1], wc, 1) // the SEND received, acknowledged
			pollN(t, p.CQ[0], wc, 3)
			for i, c := range wc[:3] {
				if c.ID != uint64(i) {
					t.Fatalf("completion %d is of work request %d: out of posting order", i, c.ID)
				}
			}
			if !bytes.Equal(local[blk:], remote[blk:]) {
				t.Fatal("the READs did not bring the peer's data")
			}
		})
	}
}
