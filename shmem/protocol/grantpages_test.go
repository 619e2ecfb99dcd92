package protocol_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jiarun/jia/shmem/protocol"
)

// pageData is the data of n pages of byte value v.
func pageData(n int, v byte) []byte { return slices.Repeat([]byte{v}, n*ps) }

func pages(p ...protocol.PageID) []protocol.PageID { return p }

func notices(p ...protocol.PageID) []protocol.Notice {
	var n []protocol.Notice
	for _, q := range p {
		n = append(n, protocol.Notice{Page: q, Writer: protocol.Several})
	}
	return n
}

// Config.GrantPages: a manager sends with a grant its copies of the
// noticed pages homed there (up to GrantPages of them), with how many of
// the acquirer's diffs it applied; without it, the grant names them only.
func TestGrantCarriesManagersPages(t *testing.T) {
	for _, c := range []struct {
		grantPages int
		grant      string
	}{
		{0, "Send(Grant 0→1 lock=0 scope=1 epoch=0 notices=[{3 -1 false false} {4 -1 false false}])"},
		{1, "SendPages(Grant 0→1 lock=0 scope=1 pages=[3] after=0 epoch=0 notices=[{3 -1 false false} {4 -1 false false}])"},
		{8, "SendPages(Grant 0→1 lock=0 scope=1 pages=[3 4] after=0 epoch=0 notices=[{3 -1 false false} {4 -1 false false}])"},
	} {
		// Rank 1 holds copies of pages 3 and 4; rank 2 writes them under
		// lock 0.
		r := newRig(t, protocol.Config{Rank: 0, Size: 3, GrantPages: c.grantPages}, onRank(0))
		r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: pages(3, 4)})
		want(t, r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 2, ID: 0, Scope: -1}), "Send(Grant 0→2 lock=0 scope=0 epoch=0)")
		r.recv(protocol.Message{Kind: protocol.MsgDiff, From: 2, Seq: 2, Pages: pages(3)})
		want(t, r.recv(protocol.Message{Kind: protocol.MsgRelease, From: 2, ID: 0, Scope: 0, Pages: pages(3, 4)}))
		want(t, r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 0, Scope: -1}), c.grant)
	}
}

// acquirer returns rank 1 of 2 (of size ranks) holding valid copies of
// pages 3 and 5, homed on rank 0, having released lock 0.
func acquirer(t *testing.T, size int) *rig {
	r := newRig(t, protocol.Config{Rank: 1, Size: size, GrantPages: 8}, onRank(0))
	r.call(protocol.EvLock, 0)
	r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 0})
	r.read(3)
	r.read(5)
	r.grant(0, 1, 3)
	r.grant(0, 2, 5)
	want(t, r.call(protocol.EvUnlock, 0), "Send(Release 1→0 lock=0 scope=0 pages=[] epoch=0)", "Done(Unlock,0)")
	return r
}

// The copies that come with a grant replace the valid copies held here,
// which spares their fetches; pages not held here are not installed.
func TestGrantPagesReplaceValidCopies(t *testing.T) {
	r := acquirer(t, 2)
	want(t, r.call(protocol.EvLock, 0), "Send(Acquire 1→0 lock=0 scope=0 epoch=0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 1, Notices: notices(3, 5, 6), Pages: pages(3, 5, 6), Data: pageData(3, 9)}),
		"Zap[3 5]", "Install(3,ro)", "Install(5,ro)", "Done(Lock,0)")
	if s := r.state(3); s != protocol.ReadOnly {
		t.Fatalf("page 3 is %v", s)
	}
	if s := r.state(6); s != protocol.Invalid {
		t.Fatalf("page 6 is %v", s)
	}
	// Read without a fetch.
	want(t, r.read(3), "Wake(3)")
}

// ScC: a copy that comes with a grant may predate a write noticed here
// after the acquire left (through another lock's grant): it is not
// installed.
func TestGrantPagesOlderThanANoticeAreDropped(t *testing.T) {
	r := acquirer(t, 3)
	want(t, r.call(protocol.EvLock, 0), "Send(Acquire 1→0 lock=0 scope=0 epoch=0)")
	want(t, r.call(protocol.EvLock, 2), "Send(Acquire 1→2 lock=2 scope=-1 epoch=0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 2, ID: 2, Scope: 1, Notices: notices(3)}), "Zap[3]", "Done(Lock,2)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 1, Notices: notices(3, 5), Pages: pages(3, 5), Data: pageData(2, 9)}),
		"Zap[5]", "Install(5,ro)", "Done(Lock,0)")
	want(t, r.read(3), "Send(PageReq 1→0 seq=3 pages=[3] epoch=0)")
}

// A copy that comes with a grant from a manager that had not applied
// every diff of this rank yet (the grant's Order) lacks this rank's own
// writes: it is not installed.
func TestGrantPagesWaitForOwnDiffs(t *testing.T) {
	for _, c := range []struct {
		order uint64
		acts  []string
	}{
		{0, []string{"Zap[3]", "Done(Lock,0)"}},
		{1, []string{"Zap[3]", "Install(3,ro)", "Done(Lock,0)"}},
	} {
		r := newRig(t, protocol.Config{Rank: 1, Size: 2, GrantPages: 8}, onRank(0))
		r.call(protocol.EvLock, 0)
		r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 0})
		r.write(3)
		r.grant(0, 1, 3)
		want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "SendDiffs(Diff 1→0 seq=2 order=0 pages=[3] epoch=0)",
			"Send(Release 1→0 lock=0 scope=0 pages=[3] after=1 epoch=0)", "Done(Unlock,0)")
		want(t, r.ack(0, 2, 3)) // overtook the grant below
		r.call(protocol.EvLock, 0)
		want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 1, Order: c.order, Notices: notices(3), Pages: pages(3), Data: pageData(1, 9)}), c.acts...)
	}
}

// Config.Watch for copies of pages homed elsewhere: a copy written again
// after an interval's end protected it stays writable at the next one,
// with a fresh twin made while it is protected (the base of its next
// diff); its writes are found by comparison (EvWritten) and sent as diffs
// at each release; invalidated, it is sent home and counts as written; a
// copy not written for a few intervals is protected again.
func TestWatchedCopy(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, Watch: 4}, onRank(0))
	lock := func(notices ...protocol.PageID) []string {
		r.call(protocol.EvLock, 0)
		var n []protocol.Notice
		for _, p := range notices {
			n = append(n, protocol.Notice{Page: p, Writer: protocol.Several})
		}
		return r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 0, Notices: n})
	}
	lock()
	r.write(3)
	r.grant(0, 1, 3)
	want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "SendDiffs(Diff 1→0 seq=2 order=0 pages=[3] epoch=0)",
		"Send(Release 1→0 lock=0 scope=0 pages=[3] after=1 epoch=0)", "Done(Unlock,0)")
	r.ack(0, 2, 3)
	lock()
	want(t, r.write(3), "MakeTwin(3)", "Unprotect(3)")
	want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "SendDiffs(Diff 1→0 seq=3 order=1 pages=[3] epoch=0)", "MakeTwin(3)", "Unprotect(3)",
		"Send(Release 1→0 lock=0 scope=0 pages=[3] after=2 epoch=0)", "Done(Unlock,0)")
	r.ack(0, 3, 3)
	if w := r.m.WatchedCopies(); !slices.Equal(w, pages(3)) || r.state(3) != protocol.Writable || r.m.Quiet() {
		t.Fatalf("watched copies %v, page 3 %v, quiet %v", w, r.state(3), r.m.Quiet())
	}
	lock()
	want(t, r.do(protocol.Event{Kind: protocol.EvWritten, Pages: pages(3)}))
	want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "SendDiffs(Diff 1→0 seq=4 order=2 pages=[3] epoch=0)", "MakeTwin(3)", "Unprotect(3)",
		"Send(Release 1→0 lock=0 scope=0 pages=[3] after=3 epoch=0)", "Done(Unlock,0)")
	r.ack(0, 4, 3)
	// Not written (no EvWritten) in the next release: nothing to send.
	lock()
	want(t, r.call(protocol.EvUnlock, 0), "Send(Release 1→0 lock=0 scope=0 pages=[] epoch=0)", "Done(Unlock,0)")
	// Invalidated by a grant: its diff goes home first, and it counts as
	// written in the interval (its writes not compared yet).
	want(t, lock(3), "Protect[3]", "SendDiffs(Diff 1→0 seq=5 order=3 pages=[3] epoch=0)", "Zap[3]", "Done(Lock,0)")
	if w := r.m.WatchedCopies(); len(w) != 0 {
		t.Fatalf("watched copies %v after the invalidation", w)
	}
	want(t, r.call(protocol.EvUnlock, 0), "Send(Release 1→0 lock=0 scope=0 pages=[3] after=4 epoch=0)", "Done(Unlock,0)")
	r.ack(0, 5, 3)
	// Others write it too: it is not watched again.
	for range 2 {
		lock()
		r.write(3)
		r.grant(0, 6, 3)
		r.call(protocol.EvUnlock, 0)
	}
	if w := r.m.WatchedCopies(); len(w) != 0 || r.state(3) != protocol.ReadOnly {
		t.Fatalf("watched copies %v, page 3 %v after an invalidation while watched", w, r.state(3))
	}
}

// A watched copy not written for a few intervals is sent home (an empty
// diff unless written since its last comparison), noticed, and protected.
func TestWatchedCopyExpires(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, Watch: 4}, onRank(0))
	for range 2 {
		r.call(protocol.EvLock, 0)
		r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 0})
		r.write(3)
		r.grant(0, 1, 3)
		r.call(protocol.EvUnlock, 0)
	}
	if w := r.m.WatchedCopies(); !slices.Equal(w, pages(3)) {
		t.Fatalf("watched copies %v", w)
	}
	// Lock and Unlock each end an interval.
	r.call(protocol.EvLock, 0)
	r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 0})
	want(t, r.call(protocol.EvUnlock, 0), "Send(Release 1→0 lock=0 scope=0 pages=[] after=2 epoch=0)", "Done(Unlock,0)")
	r.call(protocol.EvLock, 0)
	r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 0})
	want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "SendDiffs(Diff 1→0 seq=4 order=2 pages=[3] epoch=0)",
		"Send(Release 1→0 lock=0 scope=0 pages=[3] after=3 epoch=0)", "Done(Unlock,0)")
	if w := r.m.WatchedCopies(); len(w) != 0 || r.state(3) != protocol.ReadOnly || !r.m.Quiet() {
		t.Fatalf("watched copies %v, page 3 %v, quiet %v", w, r.state(3), r.m.Quiet())
	}
	// Written again: a fault, and not watched before it is written again
	// after the next protection.
	want(t, r.write(3), "MakeTwin(3)", "Unprotect(3)")
}

// A copy that came with a grant and was written is installed writable,
// with a twin, by the next grant that brings it (since the last barrier):
// the write needs no fault, and the release sends its diff as after one.
// A copy that came with a grant and was only read is installed read-only.
func TestGrantPagesWrittenLastTimeInstallWritable(t *testing.T) {
	r := acquirer(t, 2)
	grant := func(order uint64, data byte) []string {
		r.call(protocol.EvLock, 0)
		return r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 1, Order: order,
			Notices: notices(3, 5), Pages: pages(3, 5), Data: pageData(2, data)})
	}
	want(t, grant(0, 9), "Zap[3 5]", "Install(3,ro)", "Install(5,ro)", "Done(Lock,0)")
	want(t, r.write(3), "MakeTwin(3)", "Unprotect(3)")
	want(t, r.read(5), "Wake(5)")
	want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "SendDiffs(Diff 1→0 seq=3 order=0 pages=[3] epoch=0)",
		"Send(Release 1→0 lock=0 scope=1 pages=[3] after=1 epoch=0)", "Done(Unlock,0)")
	r.ack(0, 3, 3)
	want(t, grant(1, 10), "Zap[3 5]", "Install(3,rw+twin)", "Install(5,ro)", "Done(Lock,0)")
	if s := r.state(3); s != protocol.Writable {
		t.Fatalf("page 3 is %v", s)
	}
	// No fault: the engine lets the write through (a thread faulted
	// meanwhile is only woken).
	want(t, r.write(3), "Wake(3)")
	want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "SendDiffs(Diff 1→0 seq=4 order=1 pages=[3] epoch=0)",
		"Send(Release 1→0 lock=0 scope=1 pages=[3] after=2 epoch=0)", "Done(Unlock,0)")
	r.ack(0, 4, 3)
	// Every few grants in a row, one installs it read-only: a page no
	// longer written stops costing diffs and notices.
	order := uint64(2)
	for range 7 {
		want(t, grant(order, 11), "Zap[3 5]", "Install(3,rw+twin)", "Install(5,ro)", "Done(Lock,0)")
		var seq uint64
		for _, a := range r.call(protocol.EvUnlock, 0) {
			fmt.Sscanf(a, "SendDiffs(Diff 1→0 seq=%d", &seq)
		}
		if seq == 0 {
			t.Fatalf("no diff of page 3 sent at the release")
		}
		r.ack(0, seq, 3)
		order++
	}
	want(t, grant(order, 12), "Zap[3 5]", "Install(3,ro)", "Install(5,ro)", "Done(Lock,0)")
	// Not written this time: the next grant installs it read-only too.
	want(t, r.call(protocol.EvUnlock, 0), "Send(Release 1→0 lock=0 scope=1 pages=[] epoch=0)", "Done(Unlock,0)")
	want(t, grant(order, 13), "Zap[3 5]", "Install(3,ro)", "Install(5,ro)", "Done(Lock,0)")
}
