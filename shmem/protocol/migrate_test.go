package protocol_test

import (
	"testing"

	"github.com/jiarun/jia/shmem/protocol"
)

// A lock manager leaves out of a grant the notices of pages homed at the
// acquirer, which never invalidates its home pages (JIAJIA syn.c
// appendlockwtnts), but only while it knows the acquirer's homes: a
// manager that has not passed the barrier the acquirer passed (its grant
// still on its way) may not know that a page migrated away from the
// acquirer there, and then sends every notice. Leaving one out, the new
// home's writes under the lock were never seen by the old home's stale
// copy (found as checker seed 146640).
func TestManagerBehindTheAcquirerSendsEveryNotice(t *testing.T) {
	mgr := newRig(t, protocol.Config{Rank: 0, Size: 3, HomeMigration: true}, onRank(1))
	// Rank 2 (at epoch 1, where page 2 moved from rank 1 to it) writes
	// page 2 under lock 0; the manager is still at epoch 0.
	want(t, mgr.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 2, ID: 0, Scope: -1, Epoch: 1}),
		"Send(Grant 0→2 lock=0 scope=0 epoch=0)")
	want(t, mgr.recv(protocol.Message{Kind: protocol.MsgRelease, From: 2, ID: 0, Scope: 0, Epoch: 1, Pages: []protocol.PageID{2}}))
	// Rank 1 was page 2's home as far as the manager knows.
	want(t, mgr.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 0, Scope: -1, Epoch: 1}),
		"Send(Grant 0→1 lock=0 scope=1 epoch=0 notices=[{2 -1 false false}])")

	// In the acquirer's epoch the manager knows its homes: the notice of
	// its home page is left out.
	cur := newRig(t, protocol.Config{Rank: 0, Size: 3}, onRank(1))
	want(t, cur.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 2, ID: 0, Scope: -1}),
		"Send(Grant 0→2 lock=0 scope=0 epoch=0)")
	want(t, cur.recv(protocol.Message{Kind: protocol.MsgRelease, From: 2, ID: 0, Scope: 0, Pages: []protocol.PageID{2}}))
	want(t, cur.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 0, Scope: -1}),
		"Send(Grant 0→1 lock=0 scope=1 epoch=0)")
}

// A home page written while a barrier with home migration is pending has
// a twin, so that those writes follow it as a diff if it migrates; a copy
// of it served meanwhile is the twin (ActSendPages with Twin). Served as
// the page is, a byte written after the twin and written back to the
// twin's value before the migration was in the new home's copy but not
// in the diff, and the new home kept the intermediate value (found as
// checker seed 107414).
func TestHomePageWrittenDuringAPendingBarrierIsServedAsItsTwin(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, HomeMigration: true}, onRank(0))
	want(t, r.write(2), "Install(2,rw,zero)")
	want(t, r.call(protocol.EvBarrier, 0), "Protect[2]")
	want(t, r.write(2), "MakeTwin(2)", "Unprotect(2)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{2, 3}}),
		"Install(3,ro,zero)", "SendPages(PageGrant 0→1 seq=1 pages=[2 3] epoch=0, twins)")
	// Rank 1 wrote page 2 with the copy: it becomes the page's home, and
	// the writes since the twin go there as a diff.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1, Epoch: 0,
		Notices: []protocol.Notice{{Page: 2, Writer: 1, Cached: true}}}),
		"Send(BarrierGrant 0→1 epoch=1 notices=[{2 1 false true}])", "Done(Barrier,0)")
	wantState(t, r, 2, protocol.Writable)
	want(t, r.call(protocol.EvLock, 0), "Protect[2]", "SendDiffs(Diff 0→1 seq=1 order=0 pages=[2] epoch=1)", "Done(Lock,0)")

	// Without a twin, a page goes as it is.
	q := newRig(t, protocol.Config{Rank: 0, Size: 2, HomeMigration: true}, onRank(0))
	q.write(2)
	q.call(protocol.EvBarrier, 0)
	want(t, q.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{2}}),
		"SendPages(PageGrant 0→1 seq=1 pages=[2] epoch=0)")
}
