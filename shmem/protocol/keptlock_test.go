package protocol_test

import (
	"testing"

	"github.com/jiarun/jia/shmem/protocol"
)

// keptRig returns rank 0 of two keeping lock 1 (managed by rank 1) after
// two grants in a row, with home page 2 written and still writable: no
// other rank holds a copy of it as far as rank 0 knows.
func keptRig(t *testing.T) *rig {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, CacheLocks: true}, onRank(0))
	want(t, r.write(2), "Install(2,rw,zero)")
	want(t, r.call(protocol.EvLock, 1), "Send(Acquire 0→1 lock=1 scope=-1 epoch=0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 1, ID: 1, Scope: 0}), "Done(Lock,1)")
	want(t, r.call(protocol.EvUnlock, 1), "Send(Release 0→1 lock=1 scope=0 pages=[] epoch=0)", "Done(Unlock,1)")
	want(t, r.call(protocol.EvLock, 1), "Send(Acquire 0→1 lock=1 scope=0 epoch=0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 1, ID: 1, Scope: 1, Seq: 1}), "Done(Lock,1)")
	want(t, r.call(protocol.EvUnlock, 1), "Done(Unlock,1)")
	if free := r.m.AppendFreeKept(nil); len(free) != 1 || free[0] != 1 {
		t.Fatalf("free kept locks %v, want [1]", free)
	}
	return r
}

// A kept lock taken again by a claim (the program goes on without waiting
// for its Lock, see AppendFreeKept) may have written, in its hold, a home
// page that another rank read directly meanwhile: the engine learns of the
// read (EvShared) only when it collects, and must collect after it steps
// the claimed Lock. Then the page counts as written in the hold, and the
// release that the manager's recall brings names it, so that the next
// holder invalidates its copy. Collected before the Lock (what the pager
// once did), the page is noticed in the interval before the hold, outside
// the lock's scope, and the next holder reads its stale copy: a lost
// update (end to end: shmem's TestClaimedKeptLockCollectsDirectReadsInItsScope).
func TestClaimedKeptLockCollectsAfterTheLock(t *testing.T) {
	shared := protocol.Event{Kind: protocol.EvShared, Pages: []protocol.PageID{2}}
	recall := protocol.Message{Kind: protocol.MsgRecall, From: 1, ID: 1}

	r := keptRig(t)
	want(t, r.call(protocol.EvLock, 1), "Done(Lock,1)")
	want(t, r.do(shared))
	want(t, r.call(protocol.EvUnlock, 1), "Protect[2]", "Done(Unlock,1)")
	want(t, r.recv(recall), "Send(Release 0→1 lock=1 scope=1 pages=[2] epoch=0)")

	// The other order: the page is outside the lock's scope.
	w := keptRig(t)
	want(t, w.do(shared))
	want(t, w.call(protocol.EvLock, 1), "Protect[2]", "Done(Lock,1)")
	want(t, w.call(protocol.EvUnlock, 1), "Done(Unlock,1)")
	want(t, w.recv(recall), "Send(Release 0→1 lock=1 scope=1 pages=[] epoch=0)")
}
