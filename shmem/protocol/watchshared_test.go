package protocol_test

import (
	"math/rand/v2"
	"testing"

	"github.com/jiarun/jia/shmem/engine"
	"github.com/jiarun/jia/shmem/protocol"
)

// A home page that another rank fetched while it was unmapped here is
// mapped writable with a snapshot (zeros) and watched: the home's next
// write costs no fault; the comparison before the next release finds it,
// and the barrier notices it. JIAJIA maps it write-protected, and its next
// write faults.
func TestServedHomePageIsWatchedAtOnce(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, Watch: 4, BarrierManager: 1}, onRank(0))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{2}}),
		"Install(2,rw+twin,zero)", "SendPages(PageGrant 0→1 seq=1 pages=[2] epoch=0)")
	wantState(t, r, 2, protocol.HomeWritable)
	if w := r.m.Watched(); len(w) != 1 || w[0] != 2 {
		t.Fatalf("watched %v", w)
	}
	if r.m.Quiet() {
		t.Fatal("quiet with a watched page")
	}
	// Not written: no notice, and no ActProtect at the interval's end.
	want(t, r.call(protocol.EvBarrier, 0), "Send(Barrier 0→1 epoch=0)")
	// The watch survives the barrier, which invalidated no copy of it.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrierGrant, From: 1, Epoch: 1}), "Done(Barrier,0)")
	if w := r.m.Watched(); len(w) != 1 || w[0] != 2 {
		t.Fatalf("watched %v after the barrier", w)
	}
	// The home writes it with no fault; the comparison finds the write.
	want(t, r.do(protocol.Event{Kind: protocol.EvWritten, Pages: []protocol.PageID{2}}))
	if n := r.m.Stats().WriteFaults; n != 0 {
		t.Fatalf("%d write faults", n)
	}
	// Its barrier notice invalidates the reader's copy, and ends the watch.
	want(t, r.call(protocol.EvBarrier, 0), "DropTwin(2)", "Send(Barrier 0→1 epoch=1 notices=[{2 0 false false}])")
	if w := r.m.Watched(); len(w) != 0 {
		t.Fatalf("watched %v after a noticed barrier", w)
	}
	wantState(t, r, 2, protocol.HomeWritable)
	if !r.m.Quiet() {
		t.Fatal("not quiet after the barrier")
	}
}

// A home page written here and then served stays writable: it counts as
// written in the interval (its later writes must become notices) and is
// watched from the interval's end on instead of write-protected.
func TestServedWritableHomePageIsWatchedAtTheIntervalEnd(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, Watch: 4, BarrierManager: 1}, onRank(0))
	want(t, r.write(2), "Install(2,rw,zero)")
	want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)") // nobody else holds it: no notice
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{2}}),
		"SendPages(PageGrant 0→1 seq=1 pages=[2] epoch=0)")
	want(t, r.call(protocol.EvUnlock, 0), "MakeTwin(2)", "Done(Unlock,0)")
	wantState(t, r, 2, protocol.HomeWritable)
	if w := r.m.Watched(); len(w) != 1 || w[0] != 2 {
		t.Fatalf("watched %v", w)
	}
	// Noticed at the barrier, which ends the watch.
	want(t, r.call(protocol.EvBarrier, 0), "DropTwin(2)", "Send(Barrier 0→1 epoch=0 notices=[{2 0 false false}])")
}

// A page read directly by another rank (Config.Direct) while it was
// write-protected here is watched the same way, at the EvShared that
// tells of the read; one read while unmapped here is watched once it is
// mapped.
func TestDirectlyReadHomePageIsWatched(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, Watch: 4, Direct: []bool{false, true}}, onRank(0))
	// Mapped write-protected: the page is shared (a grant).
	r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{2}})
	want(t, r.do(protocol.Event{Kind: protocol.EvShared, Pages: []protocol.PageID{5}}))
	// Page 5, unmapped, stays so; a read maps it write-protected (it is
	// shared), and watches it.
	want(t, r.read(5), "Install(5,rw+twin,zero)")
	if w := r.m.Watched(); len(w) != 2 || w[0] != 2 || w[1] != 5 {
		t.Fatalf("watched %v", w)
	}
}

// Only Config.Watch pages are watched at once; a served page that finds
// no room is mapped write-protected as in JIAJIA, and its write fault
// makes it watched at the interval's end when there is room. A page
// write-protected here when it becomes shared is watched as soon as its
// copy is sent: its snapshot is taken while it is still protected, then
// it is made writable. Without Watch, or with home migration, nothing is
// watched.
func TestServedHomePagesWatchedWithinTheBudget(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, Watch: 1, BarrierManager: 1}, onRank(0))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{2, 3}}),
		"Install(2,rw+twin,zero)", "Install(3,ro,zero)", "SendPages(PageGrant 0→1 seq=1 pages=[2 3] epoch=0)")
	wantState(t, r, 3, protocol.HomeReadOnly)
	want(t, r.write(3), "Unprotect(3)")
	want(t, r.call(protocol.EvLock, 0), "Protect[3]", "Done(Lock,0)")
	want(t, r.call(protocol.EvUnlock, 0), "Done(Unlock,0)")
	want(t, r.call(protocol.EvBarrier, 0), "Send(Barrier 0→1 epoch=0 notices=[{3 0 false false}])")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrierGrant, From: 1, Epoch: 1}), "Done(Barrier,0)")
	r.call(protocol.EvLock, 0)
	r.call(protocol.EvUnlock, 0)
	// Page 2, unwritten, is protected again: room for page 3, which the
	// barrier made unshared, when it is served again.
	if w := r.m.Watched(); len(w) != 0 {
		t.Fatalf("watched %v", w)
	}
	wantState(t, r, 3, protocol.HomeReadOnly)
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 2, Epoch: 1, Pages: []protocol.PageID{3}}),
		"SendPages(PageGrant 0→1 seq=2 pages=[3] epoch=1)", "MakeTwin(3)", "Unprotect(3)")
	if w := r.m.Watched(); len(w) != 1 || w[0] != 3 {
		t.Fatalf("watched %v", w)
	}
	want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)")

	for _, cfg := range []protocol.Config{{Rank: 0, Size: 2}, {Rank: 0, Size: 2, Watch: 4, HomeMigration: true}} {
		r := newRig(t, cfg, onRank(0))
		want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{2}}),
			"Install(2,ro,zero)", "SendPages(PageGrant 0→1 seq=1 pages=[2] epoch=0)")
		want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)")
		wantState(t, r, 2, protocol.HomeReadOnly)
	}
}

// A served page that nobody writes is watched for watchQuiet intervals,
// then write-protected, and not watched again when it is served again
// (it is still shared): only a write after that protection makes it a
// candidate again, as before.
func TestServedHomePageOnlyReadIsProtectedAgain(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, Watch: 4}, onRank(0))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{2}}),
		"Install(2,rw+twin,zero)", "SendPages(PageGrant 0→1 seq=1 pages=[2] epoch=0)")
	want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)")
	want(t, r.call(protocol.EvUnlock, 0), "Done(Unlock,0)")
	want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)")
	want(t, r.call(protocol.EvUnlock, 0), "DropTwin(2)", "Protect[2]", "Done(Unlock,0)")
	wantState(t, r, 2, protocol.HomeReadOnly)
	if !r.m.Quiet() {
		t.Fatal("not quiet once the watch ended")
	}
	// Served again (the reader evicted its copy): still protected.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 2, Pages: []protocol.PageID{2}}),
		"SendPages(PageGrant 0→1 seq=2 pages=[2] epoch=0)")
	want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)")
	wantState(t, r, 2, protocol.HomeReadOnly)
	// Freed while watched: the snapshot goes with it.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 3, Pages: []protocol.PageID{4}}),
		"Install(4,rw+twin,zero)", "SendPages(PageGrant 0→1 seq=3 pages=[4] epoch=0)")
	want(t, r.call(protocol.EvUnlock, 0), "Done(Unlock,0)")
	want(t, r.do(protocol.Event{Kind: protocol.EvFree, Page: 0}), "DropTwin(4)", "Zap[2 4]")
	if w := r.m.Watched(); len(w) != 0 {
		t.Fatalf("watched %v after Free", w)
	}
}

// On simulated ranks, with the checker's reference memory: rank 1 reads a
// page homed on rank 0, rank 0 then reads and writes it without a write
// fault, and rank 1 reads the new value after the next barrier (as the
// dsmbench row "write of own home page another rank read" does).
func TestServedHomePageWriteReachesTheReader(t *testing.T) {
	for _, watch := range []int{0, 4} {
		s := &sim{rng: rand.New(rand.NewPCG(1, 1)), pageSize: ps, kinds: make(map[protocol.MsgKind]int)}
		s.vars = []variable{{page: 3, off: 0, size: 8}, {page: 3, off: 8, size: 8}}
		s.ref = make([]uint64, len(s.vars))
		progs := [][]op{
			{{kind: opBarrier}, {kind: opBarrier}, {kind: opRead, v: 1}, {kind: opWrite, v: 0, val: 7}, {kind: opBarrier}, {kind: opRead, v: 0}},
			{{kind: opRead, v: 0}, {kind: opBarrier}, {kind: opBarrier}, {kind: opBarrier}, {kind: opRead, v: 0}, {kind: opRead, v: 1}},
		}
		for r := range progs {
			m, err := protocol.New(protocol.Config{Rank: r, Size: 2, PageSize: ps, Watch: watch})
			if err != nil {
				t.Fatal(err)
			}
			sr := &simRank{s: s, rank: r, m: m}
			sr.mem = &simMem{r: sr, pages: make(map[protocol.PageID]*simPage)}
			sr.x = &engine.Executor{Rank: r, PageSize: ps, Mem: sr.mem, Net: sr, Done: sr.done, Loop: sr.loop}
			sr.threads = []*thread{{r: sr, ops: progs[r]}}
			s.ranks = append(s.ranks, sr)
			sr.step(protocol.Event{Kind: protocol.EvAlloc, Page: 3, N: 1, Placement: onRank(0)})
		}
		if !s.loop(100_000) || s.failed != "" {
			t.Fatalf("watch %d: %s\n%s", watch, s.failed, s.lastTrace())
		}
		if s.reads != 5 {
			t.Fatalf("watch %d: %d checked reads, want 5", watch, s.reads)
		}
		wantFaults := uint64(1) // JIAJIA's: the page was protected for the reader
		if watch > 0 {
			wantFaults = 0
		}
		if st := s.ranks[0].m.Stats(); st.WriteFaults != wantFaults || st.ReadFaults != 0 {
			t.Fatalf("watch %d: rank 0 took %d write faults and %d read faults, want %d and 0",
				watch, st.WriteFaults, st.ReadFaults, wantFaults)
		}
		if n := s.ranks[1].m.Stats().ReadFaults; n != 2 {
			t.Fatalf("watch %d: rank 1 took %d read faults, want 2 (the second after the barrier's invalidation)", watch, n)
		}
	}
}

// A written home page that others fetched is write-protected at a barrier
// (unless it was watched or written again after a protection), so that a
// copy fetched again right after the barrier (Config.Refetch) does not
// count as written; served then, it becomes shared again and is watched
// at once: the snapshots of all the pages of the grant are taken before
// any is made writable.
func TestHomePagesFetchedAgainAfterABarrierAreWatched(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, Watch: 4, BarrierManager: 1}, onRank(0))
	want(t, r.write(2), "Install(2,rw,zero)")
	want(t, r.write(3), "Install(3,rw,zero)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{2, 3}}),
		"SendPages(PageGrant 0→1 seq=1 pages=[2 3] epoch=0)")
	want(t, r.call(protocol.EvBarrier, 0), "Protect[2 3]", "Send(Barrier 0→1 epoch=0 notices=[{2 0 false false} {3 0 false false}])")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrierGrant, From: 1, Epoch: 1,
		Notices: []protocol.Notice{{Page: 2, Writer: 0}, {Page: 3, Writer: 0}}}), "Done(Barrier,0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 2, Epoch: 1, Pages: []protocol.PageID{2, 3}}),
		"SendPages(PageGrant 0→1 seq=2 pages=[2 3] epoch=1)", "MakeTwin(2)", "MakeTwin(3)", "Unprotect(2)", "Unprotect(3)")
	// Not written: the next barrier notices nothing, and the watch goes on.
	want(t, r.call(protocol.EvBarrier, 0), "Send(Barrier 0→1 epoch=1)")
	if w := r.m.Watched(); len(w) != 2 {
		t.Fatalf("watched %v", w)
	}
}
