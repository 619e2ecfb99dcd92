package pager

import (
	"fmt"
	"testing"

	"github.com/jiarun/jia/shmem/protocol"
)

// Protect and Zap act on runs of consecutive pages of one region: one
// system call per run.
func TestRunsCoalesceConsecutivePagesOfOneRegion(t *testing.T) {
	m := &memory{ps: 4096}
	m.add(&region{first: 10, n: 5, addr: 0x10000})
	m.add(&region{first: 0, n: 10, addr: 0x1000})
	var got []string
	err := m.runs([]protocol.PageID{1, 2, 3, 9, 10, 11, 5, 14}, func(r *region, first protocol.PageID, n int) error {
		got = append(got, fmt.Sprintf("%d+%d@%d", first, n, r.first))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1+3@0 9+1@0 10+2@10 5+1@0 14+1@10]" {
		t.Fatalf("runs %v", got)
	}
	if err := m.runs([]protocol.PageID{15}, func(*region, protocol.PageID, int) error { return nil }); err == nil {
		t.Fatal("a page outside every region was accepted")
	}
	m.remove(m.regions[0])
	if _, err := m.find(3); err == nil {
		t.Fatal("a removed region is still found")
	}
}

func TestCollectiveCallsCompare(t *testing.T) {
	a := &arrival{Op: "Alloc", First: 4, Pages: 2, Size: 5000, Placement: protocol.Placement{Kind: protocol.BlockCyclic}}
	same := *a
	same.Placement.Block = 1 // block 0 means 1
	if !sameCall(a, &same) {
		t.Error("block 0 and block 1 differ")
	}
	for name, mod := range map[string]func(*arrival){
		"size":  func(b *arrival) { b.Size = 4097 },
		"op":    func(b *arrival) { b.Op = "Free" },
		"start": func(b *arrival) { b.Placement.Start = 1 },
		"homes": func(b *arrival) { b.Placement = protocol.Placement{Kind: protocol.Explicit, Homes: []int{0, 1}} },
	} {
		b := *a
		mod(&b)
		if sameCall(a, &b) {
			t.Errorf("%s: calls compare equal", name)
		}
	}
	for want, p := range map[string]protocol.Placement{
		"block-cyclic by 2 pages from rank 1": {Kind: protocol.BlockCyclic, Block: 2, Start: 1},
		"all on rank 3":                       {Kind: protocol.OnRank, Start: 3},
		"explicit homes [1 0] by 1 pages":     {Kind: protocol.Explicit, Homes: []int{1, 0}},
	} {
		if got := placementString(p); got != want {
			t.Errorf("placement %q, want %q", got, want)
		}
	}
	if got := (&arrival{Op: "Free", First: 7}).call(4096); got != "Free(region at page 7)" {
		t.Errorf("call %q", got)
	}
}

// A frame is handed back once its message is stepped unless the message's
// data, which aliases the frame, may be kept: a grant's is copied, a
// diff batch may wait.
func TestKeepsFrameOnlyWhenDataMayOutliveTheStep(t *testing.T) {
	for _, c := range []struct {
		msg  protocol.Message
		keep bool
	}{
		{protocol.Message{Kind: protocol.MsgPageGrant, From: 1, Pages: []protocol.PageID{3}, Data: make([]byte, 4096)}, false},
		{protocol.Message{Kind: protocol.MsgDiff, From: 1, Pages: []protocol.PageID{3}, Data: make([]byte, 40)}, true},
		{protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 2}, false},
		{protocol.Message{Kind: protocol.MsgPageReq, From: 1, Pages: []protocol.PageID{3, 4}}, false},
	} {
		frame, err := c.msg.AppendBinary([]byte{frameMsg})
		if err != nil {
			t.Fatal(err)
		}
		var msg protocol.Message
		if err := msg.UnmarshalBinary(frame[1:]); err != nil {
			t.Fatal(err)
		}
		if got := keepsFrame(&msg); got != c.keep {
			t.Errorf("%v: keeps the frame %t, want %t", msg.Kind, got, c.keep)
		}
	}
}
