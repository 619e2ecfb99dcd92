package protocol_test

import (
	"errors"
	"testing"

	"github.com/jiarun/jia/shmem/protocol"
)

// A barrier met outside the messages (EvLocalBarrier) completes at once,
// with no message and no ActDone, starts the next epoch everywhere, and
// the next full barrier agrees on that epoch at the manager.
func TestLocalBarrierStartsTheNextEpoch(t *testing.T) {
	mgr := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	other := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	for _, r := range []*rig{mgr, other} {
		if !r.m.BarrierQuiet() {
			t.Fatalf("rank %d: a fresh machine is not BarrierQuiet", r.m.Config().Rank)
		}
		want(t, r.call(protocol.EvLocalBarrier, 0))
		if r.m.Epoch() != 1 || r.m.Stats().LocalBarriers != 1 || r.m.Stats().Barriers != 1 {
			t.Fatalf("rank %d: epoch %d, stats %+v", r.m.Config().Rank, r.m.Epoch(), r.m.Stats())
		}
	}
	want(t, other.call(protocol.EvBarrier, 0), "Send(Barrier 1→0 epoch=1)")
	want(t, mgr.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1, Epoch: 1}))
	want(t, mgr.call(protocol.EvBarrier, 0),
		"Send(BarrierGrant 0→1 epoch=2)", "Done(Barrier,0)")
}

// An arrival at the full barrier from a rank that stepped a local barrier
// the manager has not stepped yet waits for it.
func TestArrivalFromALaterEpochWaitsForTheLocalBarrier(t *testing.T) {
	mgr := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	want(t, mgr.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1, Epoch: 1}))
	want(t, mgr.call(protocol.EvLocalBarrier, 0))
	want(t, mgr.call(protocol.EvBarrier, 0),
		"Send(BarrierGrant 0→1 epoch=2)", "Done(Barrier,0)")
}

// A written page, a release waiting for its acknowledgement, or a barrier
// in progress make a barrier publish something: not BarrierQuiet.
func TestBarrierQuietOnlyWithNothingToPublish(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	r.read(2)
	r.grant(0, 1, 2)
	if !r.m.BarrierQuiet() {
		t.Fatal("a read makes the machine not BarrierQuiet")
	}
	r.call(protocol.EvLock, 1) // managed here: granted at once
	r.write(2)
	if r.m.BarrierQuiet() {
		t.Fatal("BarrierQuiet after a write")
	}
	r.call(protocol.EvUnlock, 1) // the diff waits for its acknowledgement
	if r.m.BarrierQuiet() {
		t.Fatal("BarrierQuiet with a diff on its way")
	}
	r.ack(0, 2, 2)
	if r.m.BarrierQuiet() {
		t.Fatal("BarrierQuiet with a page written since the last barrier")
	}
	r.call(protocol.EvBarrier, 0)
	if r.m.BarrierQuiet() {
		t.Fatal("BarrierQuiet during a barrier")
	}
	if _, err := r.m.Step(protocol.Event{Kind: protocol.EvLocalBarrier}); !errors.Is(err, protocol.ErrProtocol) {
		t.Fatalf("local barrier during a barrier: %v", err)
	}
}

// A local barrier ends the interval, and a page served from a writable
// home page meanwhile counts as written in it: the page, which became
// shared then, is watched from then on, with a snapshot, because the
// local barrier invalidates no copy elsewhere. The next full barrier,
// whose notice invalidates the copies, ends the watch and drops the
// snapshot.
func TestLocalBarrierMayStartAWatchTheNextBarrierEnds(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, Watch: 4}, onRank(1))
	r.write(2)
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 0, Seq: 1, Pages: []protocol.PageID{2}}),
		"SendPages(PageGrant 1→0 seq=1 pages=[2] epoch=0)")
	want(t, r.call(protocol.EvLock, 1), "MakeTwin(2)", "Done(Lock,1)")
	want(t, r.call(protocol.EvUnlock, 1), "Done(Unlock,1)")
	want(t, r.call(protocol.EvBarrier, 0), "DropTwin(2)", "Send(Barrier 1→0 epoch=0 notices=[{2 1 false false}])")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrierGrant, From: 0, Epoch: 1,
		Notices: []protocol.Notice{{Page: 2, Writer: 1}}}), "Done(Barrier,0)")
	// No copy elsewhere any more: it stays writable and unnoticed across
	// the interval's end.
	wantState(t, r, 2, protocol.HomeWritable)
	want(t, r.call(protocol.EvLock, 1), "Done(Lock,1)")
	want(t, r.call(protocol.EvUnlock, 1), "Done(Unlock,1)")
	if !r.m.BarrierQuiet() {
		t.Fatal("not BarrierQuiet with nothing written since the barrier")
	}
	// Arrived clean at the board, the rank serves the writable page before
	// it learns that the barrier was met.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 0, Seq: 2, Epoch: 1, Pages: []protocol.PageID{2}}),
		"SendPages(PageGrant 1→0 seq=2 pages=[2] epoch=1)")
	want(t, r.call(protocol.EvLocalBarrier, 0), "MakeTwin(2)")
	if w := r.m.Watched(); len(w) != 1 || w[0] != 2 {
		t.Fatalf("watched %v after the local barrier", w)
	}
	want(t, r.call(protocol.EvBarrier, 0), "DropTwin(2)", "Send(Barrier 1→0 epoch=2 notices=[{2 1 false false}])")
	if w := r.m.Watched(); len(w) != 0 {
		t.Fatalf("watched %v after the full barrier", w)
	}
}
