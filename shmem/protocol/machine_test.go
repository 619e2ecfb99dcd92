package protocol_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jiarun/jia/shmem/protocol"
)

// Table tests of single transitions. Each test is named after the rule it
// checks; "JIAJIA x.c f" cites the function of JIAJIA 2.1 (src/x.c) whose
// behaviour the rule follows, "ScC" the scope-consistency model (Iftode,
// Singh and Li, "Scope Consistency: A Bridge between Release Consistency
// and Entry Consistency", SPAA 1996; JIAJIA's manual, section "Memory
// consistency model").

const ps = 16 // page size in these tests

// rig is one Machine under test, with a region of pages 0..7.
type rig struct {
	t *testing.T
	m *protocol.Machine
}

func newRig(t *testing.T, cfg protocol.Config, pl protocol.Placement) *rig {
	t.Helper()
	if cfg.PageSize == 0 {
		cfg.PageSize = ps
	}
	m, err := protocol.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, m: m}
	r.do(protocol.Event{Kind: protocol.EvAlloc, Page: 0, N: 8, Placement: pl})
	return r
}

// onRank places every page on rank h.
func onRank(h int) protocol.Placement { return protocol.Placement{Kind: protocol.OnRank, Start: h} }

// do steps an event that must succeed and returns its actions as strings.
func (r *rig) do(ev protocol.Event) []string {
	r.t.Helper()
	acts, err := r.m.Step(ev)
	if err != nil {
		r.t.Fatalf("Step(%v): %v", ev.Kind, err)
	}
	out := make([]string, len(acts))
	for i, a := range acts {
		out[i] = a.String()
	}
	return out
}

func (r *rig) read(p protocol.PageID) []string {
	return r.do(protocol.Event{Kind: protocol.EvReadFault, Page: p})
}

func (r *rig) write(p protocol.PageID) []string {
	return r.do(protocol.Event{Kind: protocol.EvWriteFault, Page: p})
}

func (r *rig) call(kind protocol.EventKind, id int) []string {
	return r.do(protocol.Event{Kind: kind, ID: id})
}

func (r *rig) recv(msg protocol.Message) []string {
	msg.To = r.m.Config().Rank
	return r.do(protocol.Event{Kind: protocol.EvRecv, Msg: &msg})
}

// grant answers page request seq with pages of the given byte value.
func (r *rig) grant(from int, seq uint64, pages ...protocol.PageID) []string {
	data := make([]byte, 0, len(pages)*ps)
	for _, p := range pages {
		data = append(data, slices.Repeat([]byte{byte(p + 1)}, ps)...)
	}
	return r.recv(protocol.Message{Kind: protocol.MsgPageGrant, From: from, Seq: seq, Pages: pages, Data: data})
}

func (r *rig) ack(from int, seq uint64, pages ...protocol.PageID) []string {
	return r.recv(protocol.Message{Kind: protocol.MsgDiffAck, From: from, Seq: seq, Pages: pages})
}

func (r *rig) state(p protocol.PageID) protocol.PageState {
	s, _, _ := r.m.PageState(p)
	return s
}

// want compares actions with the expected lines.
func want(t *testing.T, got []string, exp ...string) {
	t.Helper()
	if len(exp) == 0 {
		exp = []string{}
	}
	if !slices.Equal(got, exp) {
		t.Fatalf("actions:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(exp, "\n\t"))
	}
}

func wantState(t *testing.T, r *rig, p protocol.PageID, s protocol.PageState) {
	t.Helper()
	if got := r.state(p); got != s {
		t.Fatalf("page %d is %v, want %v", p, got, s)
	}
}

// ---- faults on pages homed elsewhere -------------------------------------------

func TestFaultTransitions(t *testing.T) {
	// Rank 1 of 2, every page homed on rank 0.
	tests := []struct {
		name  string
		setup func(r *rig)
		ev    protocol.Event
		want  []string
		state protocol.PageState
	}{
		{
			name:  "read fault on an invalid page asks its home (JIAJIA mem.c sigsegv_handler/getpage)",
			ev:    protocol.Event{Kind: protocol.EvReadFault, Page: 2},
			want:  []string{"Send(PageReq 1→0 seq=1 pages=[2] epoch=0)"},
			state: protocol.Fetching,
		},
		{
			name:  "write fault on an invalid page asks its home too",
			ev:    protocol.Event{Kind: protocol.EvWriteFault, Page: 2},
			want:  []string{"Send(PageReq 1→0 seq=1 pages=[2] epoch=0)"},
			state: protocol.Fetching,
		},
		{
			name:  "grant after a read fault installs the page write-protected",
			setup: func(r *rig) { r.read(2) },
			ev:    protocol.Event{Kind: protocol.EvRecv, Msg: grantMsg(0, 1, 1, 2)},
			want:  []string{"Install(2,ro)"},
			state: protocol.ReadOnly,
		},
		{
			name:  "grant after a write fault installs the page writable with a twin",
			setup: func(r *rig) { r.write(2) },
			ev:    protocol.Event{Kind: protocol.EvRecv, Msg: grantMsg(0, 1, 1, 2)},
			want:  []string{"Install(2,rw+twin)"},
			state: protocol.Writable,
		},
		{
			name:  "second fault while fetching sends nothing more",
			setup: func(r *rig) { r.read(2) },
			ev:    protocol.Event{Kind: protocol.EvReadFault, Page: 2},
			want:  nil,
			state: protocol.Fetching,
		},
		{
			name:  "write fault on a read-only page makes a twin, then unprotects (JIAJIA mem.c sigsegv_handler)",
			setup: func(r *rig) { r.read(2); r.grant(0, 1, 2) },
			ev:    protocol.Event{Kind: protocol.EvWriteFault, Page: 2},
			want:  []string{"MakeTwin(2)", "Unprotect(2)"},
			state: protocol.Writable,
		},
		{
			name:  "read fault on a mapped page only wakes the thread",
			setup: func(r *rig) { r.read(2); r.grant(0, 1, 2) },
			ev:    protocol.Event{Kind: protocol.EvReadFault, Page: 2},
			want:  []string{"Wake(2)"},
			state: protocol.ReadOnly,
		},
		{
			name:  "write fault on a writable page only wakes the thread",
			setup: func(r *rig) { r.write(2); r.grant(0, 1, 2) },
			ev:    protocol.Event{Kind: protocol.EvWriteFault, Page: 2},
			want:  []string{"Wake(2)"},
			state: protocol.Writable,
		},
		{
			name:  "an answer nobody waits for is ignored",
			ev:    protocol.Event{Kind: protocol.EvRecv, Msg: grantMsg(0, 1, 9, 2)},
			want:  nil,
			state: protocol.Invalid,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
			if tc.setup != nil {
				tc.setup(r)
			}
			want(t, r.do(tc.ev), tc.want...)
			wantState(t, r, 2, tc.state)
		})
	}
}

func grantMsg(from, to int, seq uint64, pages ...protocol.PageID) *protocol.Message {
	return &protocol.Message{Kind: protocol.MsgPageGrant, From: from, To: to, Seq: seq, Pages: pages, Data: make([]byte, len(pages)*ps)}
}

func TestWriteWhileFetchingForReadInstallsWritable(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	r.read(2)
	want(t, r.write(2))
	want(t, r.grant(0, 1, 2), "Install(2,rw+twin)")
}

// ---- home pages -------------------------------------------------------------------

func TestHomePageRules(t *testing.T) {
	tests := []struct {
		name  string
		setup func(r *rig)
		ev    protocol.Event
		want  []string
		state protocol.PageState
	}{
		{
			name:  "first read of a home page nobody else holds maps zeros writable, so that its first write does not fault",
			ev:    protocol.Event{Kind: protocol.EvReadFault, Page: 1},
			want:  []string{"Install(1,rw,zero)"},
			state: protocol.HomeWritable,
		},
		{
			name:  "first read of a home page another rank read directly maps zeros write-protected",
			setup: func(r *rig) { r.do(protocol.Event{Kind: protocol.EvShared, Pages: []protocol.PageID{1}}) },
			ev:    protocol.Event{Kind: protocol.EvReadFault, Page: 1},
			want:  []string{"Install(1,ro,zero)"},
			state: protocol.HomeReadOnly,
		},
		{
			name:  "first write of a home page maps zeros writable, without a twin",
			ev:    protocol.Event{Kind: protocol.EvWriteFault, Page: 1},
			want:  []string{"Install(1,rw,zero)"},
			state: protocol.HomeWritable,
		},
		{
			name: "write to a protected home page unprotects it without a twin (JIAJIA mem.c sigsegv_handler, homehost branch)",
			setup: func(r *rig) {
				r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, To: 0, Seq: 7, Pages: []protocol.PageID{1}})
			},
			ev:    protocol.Event{Kind: protocol.EvWriteFault, Page: 1},
			want:  []string{"Unprotect(1)"},
			state: protocol.HomeWritable,
		},
		{
			name:  "the home serves a page request with its copy (JIAJIA mem.c getpserver)",
			setup: func(r *rig) { r.read(1) },
			ev:    protocol.Event{Kind: protocol.EvRecv, Msg: &protocol.Message{Kind: protocol.MsgPageReq, From: 1, To: 0, Seq: 7, Pages: []protocol.PageID{1}}},
			want:  []string{"SendPages(PageGrant 0→1 seq=7 pages=[1] epoch=0)"},
			state: protocol.HomeWritable,
		},
		{
			name:  "a request for a never-touched home page maps zeros first",
			ev:    protocol.Event{Kind: protocol.EvRecv, Msg: &protocol.Message{Kind: protocol.MsgPageReq, From: 1, To: 0, Seq: 7, Pages: []protocol.PageID{1}}},
			want:  []string{"Install(1,ro,zero)", "SendPages(PageGrant 0→1 seq=7 pages=[1] epoch=0)"},
			state: protocol.HomeReadOnly,
		},
		{
			name:  "the home applies diffs and acknowledges them (JIAJIA mem.c diffserver)",
			setup: func(r *rig) { r.read(1) },
			ev:    protocol.Event{Kind: protocol.EvRecv, Msg: &protocol.Message{Kind: protocol.MsgDiff, From: 1, To: 0, Seq: 4, Pages: []protocol.PageID{1}}},
			want:  []string{"ApplyDiffs(Diff 1→0 seq=4 order=0 pages=[1] epoch=0)", "Send(DiffAck 0→1 seq=4 pages=[1] epoch=0)"},
			state: protocol.HomeWritable,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
			if tc.setup != nil {
				tc.setup(r)
			}
			want(t, r.do(tc.ev), tc.want...)
			wantState(t, r, 1, tc.state)
		})
	}
}

// Home pages are never invalidated (JIAJIA syn.c invalidate:
// homehost(addr) != jia_pid).
func TestHomePagesAreNeverInvalidated(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	r.read(1)
	r.call(protocol.EvLock, 1) // managed by rank 1
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 1, ID: 1, Notices: []protocol.Notice{{Page: 1, Writer: protocol.Several}}}),
		"Done(Lock,1)")
	wantState(t, r, 1, protocol.HomeWritable)
}

// A home page written in an interval yields a write notice only if another
// rank has fetched it (JIAJIA syn.c endinterval: home[].rdnt).
func TestHomeWriteNoticeOnlyWhenFetchedElsewhere(t *testing.T) {
	for _, fetched := range []bool{false, true} {
		t.Run(fmt.Sprintf("fetched=%v", fetched), func(t *testing.T) {
			r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
			want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)")
			if fetched {
				r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{3}})
			}
			r.write(3)
			pages := "[]"
			if fetched {
				pages = "[3]"
			}
			// The release goes to this rank itself (lock 0's manager): the
			// notice shows in the next acquire by rank 1. Only a page
			// fetched elsewhere is write-protected again.
			if fetched {
				want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "Done(Unlock,0)")
			} else {
				want(t, r.call(protocol.EvUnlock, 0), "Done(Unlock,0)")
			}
			acts := r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 0, Scope: -1})
			notices := "notices=[{3 -1 false false}]"
			if pages == "[]" {
				want(t, acts, "Send(Grant 0→1 lock=0 scope=1 epoch=0)")
			} else {
				want(t, acts, "Send(Grant 0→1 lock=0 scope=1 epoch=0 "+notices+")")
			}
		})
	}
}

// A written home page that no other rank fetched is not write-protected at
// the end of an interval, at a release or at a barrier: nobody holds a copy
// that its writes could make stale, so they need no notice, and protecting
// it would only cost a write fault per interval (beyond JIAJIA, which
// protects every written home page in endinterval).
func TestUnfetchedHomePageStaysWritableAcrossIntervals(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	want(t, r.write(3), "Install(3,rw,zero)")
	want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)")
	want(t, r.call(protocol.EvUnlock, 0), "Done(Unlock,0)")
	wantState(t, r, 3, protocol.HomeWritable)
	want(t, r.call(protocol.EvBarrier, 0))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1}),
		"Send(BarrierGrant 0→1 epoch=1)", "Done(Barrier,0)")
	wantState(t, r, 3, protocol.HomeWritable)
}

// When the home serves a copy of a home page that is writable across
// intervals, the page counts as written in the current interval: at its end
// it is write-protected and yields a notice, so that writes made after the
// copy left reach the fetcher's next acquire; later writes fault again.
func TestServingAWritableHomePageMakesItsWritesNoticed(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	r.write(3)
	want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{3}}),
		"SendPages(PageGrant 0→1 seq=1 pages=[3] epoch=0)")
	wantState(t, r, 3, protocol.HomeWritable)
	want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "Done(Unlock,0)")
	wantState(t, r, 3, protocol.HomeReadOnly)
	want(t, r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 0, Scope: -1}),
		"Send(Grant 0→1 lock=0 scope=1 epoch=0 notices=[{3 -1 false false}])")
	want(t, r.write(3), "Unprotect(3)")
}

// A fetched home page is protected and noticed at the barrier, whose
// notice invalidates every copy; afterwards it is unfetched again and its
// next write leaves it writable across the following barrier.
func TestBarrierNoticeMakesAHomePageUnfetchedAgain(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 1, Pages: []protocol.PageID{3}})
	r.write(3)
	want(t, r.call(protocol.EvBarrier, 0), "Protect[3]")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1}),
		"Send(BarrierGrant 0→1 epoch=1 notices=[{3 0 false false}])", "Done(Barrier,0)")
	want(t, r.write(3), "Unprotect(3)")
	want(t, r.call(protocol.EvBarrier, 0))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1, Epoch: 1}),
		"Send(BarrierGrant 0→1 epoch=2)", "Done(Barrier,0)")
	wantState(t, r, 3, protocol.HomeWritable)
}

// With home migration a written home page is write-protected at every
// interval end, fetched or not, as in JIAJIA: writes made while a barrier
// is pending must fault to get a twin, in case the page migrates away.
func TestHomeMigrationProtectsEveryWrittenHomePage(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, HomeMigration: true}, onRank(0))
	r.write(3)
	want(t, r.call(protocol.EvLock, 0), "Protect[3]", "Done(Lock,0)")
	want(t, r.write(3), "Unprotect(3)")
	want(t, r.call(protocol.EvUnlock, 0), "Protect[3]", "Done(Unlock,0)")
	r.write(3)
	want(t, r.call(protocol.EvBarrier, 0), "Protect[3]")
	want(t, r.write(3), "MakeTwin(3)", "Unprotect(3)")
}

// ---- release ----------------------------------------------------------------------

// At a release the diffs go home (batched per home) and the page is
// protected again; the release reaches the lock's manager (lock id mod
// size) only after every diff is acknowledged, so that whoever acts on the
// write notice finds the data at the home (JIAJIA syn.c jia_unlock,
// endinterval: while(diffwait)).
func TestReleaseSendsDiffsHomeThenNoticesToManager(t *testing.T) {
	// Rank 1 of 3; pages block-cyclic from rank 0: page p on rank p%3.
	r := newRig(t, protocol.Config{Rank: 1, Size: 3}, protocol.Placement{Kind: protocol.BlockCyclic})
	want(t, r.call(protocol.EvLock, 5), "Send(Acquire 1→2 lock=5 scope=-1 epoch=0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 2, ID: 5, Scope: 0}), "Done(Lock,5)")
	r.write(0)
	r.grant(0, 1, 0)
	r.write(3)
	r.grant(0, 2, 3)
	r.write(2)
	r.grant(2, 3, 2)
	want(t, r.call(protocol.EvUnlock, 5),
		"Protect[0 3 2]",
		"SendDiffs(Diff 1→0 seq=4 order=0 pages=[0 3] epoch=0)",
		"SendDiffs(Diff 1→2 seq=5 order=0 pages=[2] epoch=0)")
	wantState(t, r, 0, protocol.ReadOnly)
	want(t, r.ack(2, 5, 2))
	want(t, r.ack(0, 4, 0, 3), "Send(Release 1→2 lock=5 scope=0 pages=[0 3 2] epoch=0)", "Done(Unlock,5)")
}

// A release whose unacknowledged diffs all went to the lock's manager
// goes there at once, right after them, naming how many of this rank's
// diffs the manager must have applied first (after=); the Unlock completes
// without waiting for the acknowledgement. Diffs still unacknowledged at
// another home hold the release back as before. (JIAJIA always waits.)
func TestReleaseToTheHomeOfItsDiffsDoesNotWait(t *testing.T) {
	type ack struct {
		from int
		seq  uint64
		page protocol.PageID
		want []string
	}
	for _, tc := range []struct {
		name   string
		lock   int               // managed by rank lock%3
		before []protocol.PageID // written before the Lock
		under  []protocol.PageID // written under the lock
		unlock []string
		acks   []ack
	}{{
		name:  "diffs homed at the manager",
		lock:  3,
		under: []protocol.PageID{0, 3},
		unlock: []string{"Protect[0 3]", "SendDiffs(Diff 1→0 seq=3 order=0 pages=[0 3] epoch=0)",
			"Send(Release 1→0 lock=3 scope=0 pages=[0 3] after=1 epoch=0)", "Done(Unlock,3)"},
		acks: []ack{{from: 0, seq: 3}},
	}, {
		name:   "diffs homed elsewhere",
		lock:   5,
		under:  []protocol.PageID{0, 3},
		unlock: []string{"Protect[0 3]", "SendDiffs(Diff 1→0 seq=3 order=0 pages=[0 3] epoch=0)"},
		acks: []ack{{from: 0, seq: 3, want: []string{
			"Send(Release 1→2 lock=5 scope=0 pages=[0 3] epoch=0)", "Done(Unlock,5)"}}},
	}, {
		name:   "an older diff to another home",
		lock:   3,
		before: []protocol.PageID{2},
		under:  []protocol.PageID{0},
		unlock: []string{"Protect[0]", "SendDiffs(Diff 1→0 seq=4 order=0 pages=[0] epoch=0)"},
		acks: []ack{{from: 2, seq: 2, page: 2, want: []string{
			"Send(Release 1→0 lock=3 scope=0 pages=[0] after=1 epoch=0)", "Done(Unlock,3)"}}, {from: 0, seq: 4}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			// Rank 1 of 3; page p is homed at rank p%3.
			r := newRig(t, protocol.Config{Rank: 1, Size: 3}, protocol.Placement{Kind: protocol.BlockCyclic})
			var seq uint64
			writeAll := func(pages []protocol.PageID) {
				for _, p := range pages {
					r.write(p)
					seq++
					r.grant(int(p)%3, seq, p)
				}
			}
			writeAll(tc.before)
			r.call(protocol.EvLock, tc.lock)
			if len(tc.before) > 0 {
				seq++ // the diffs of the writes before the Lock
			}
			r.recv(protocol.Message{Kind: protocol.MsgGrant, From: tc.lock % 3, ID: tc.lock, Scope: 0})
			writeAll(tc.under)
			want(t, r.call(protocol.EvUnlock, tc.lock), tc.unlock...)
			for _, a := range tc.acks {
				pages := tc.under
				if a.page != 0 {
					pages = []protocol.PageID{a.page}
				}
				want(t, r.ack(a.from, a.seq, pages...), a.want...)
			}
			for _, p := range tc.under {
				wantState(t, r, p, protocol.ReadOnly)
			}
			// Every diff is acknowledged: the barrier arrival waits for
			// nothing and names none.
			var notices []string
			for _, p := range append(tc.before, tc.under...) {
				notices = append(notices, fmt.Sprintf("{%d 1 true false}", p))
			}
			want(t, r.call(protocol.EvBarrier, 0), "Send(Barrier 1→0 epoch=0 notices=["+strings.Join(notices, " ")+"])")
		})
	}
}

// A barrier arrival whose unacknowledged diffs all went to the barrier
// manager goes at once, like such a release, but never before a release
// still waiting for acknowledgements.
func TestBarrierArrivalToTheHomeOfItsDiffs(t *testing.T) {
	// Rank 1 of 3; page p is homed at rank p%3; rank 0 manages barriers.
	r := newRig(t, protocol.Config{Rank: 1, Size: 3}, protocol.Placement{Kind: protocol.BlockCyclic})
	r.write(3)
	r.grant(0, 1, 3)
	want(t, r.call(protocol.EvBarrier, 0), "Protect[3]", "SendDiffs(Diff 1→0 seq=2 order=0 pages=[3] epoch=0)",
		"Send(Barrier 1→0 after=1 epoch=0 notices=[{3 1 true false}])")
	want(t, r.ack(0, 2, 3))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrierGrant, From: 0, Epoch: 1}), "Done(Barrier,0)")

	// Lock 5 is managed by rank 2: its release waits for rank 0's
	// acknowledgement, and so does the arrival.
	r.call(protocol.EvLock, 5)
	r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 2, ID: 5, Scope: 0, Epoch: 1})
	r.write(3)
	want(t, r.call(protocol.EvUnlock, 5), "Protect[3]", "SendDiffs(Diff 1→0 seq=3 order=1 pages=[3] epoch=1)")
	want(t, r.call(protocol.EvBarrier, 0))
	want(t, r.ack(0, 3, 3), "Send(Release 1→2 lock=5 scope=0 pages=[3] epoch=1)", "Done(Unlock,5)",
		"Send(Barrier 1→0 epoch=1 notices=[{3 1 true false}])")
}

// The manager handles a release (or a barrier arrival) that names the
// sender's diffs to apply first only once they were applied: the next
// acquirer, told by the grant to fetch the pages, finds the new data.
func TestManagerAppliesDiffsBeforeTheReleaseThatFollowsThem(t *testing.T) {
	// Rank 0 of 3 manages lock 3 and is the home of every page.
	r := newRig(t, protocol.Config{Rank: 0, Size: 3}, onRank(0))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 3, Scope: -1}), "Send(Grant 0→1 lock=3 scope=0 epoch=0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 2, ID: 3, Scope: -1}))
	// The release overtook the diffs it follows: held.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgRelease, From: 1, ID: 3, Pages: []protocol.PageID{4, 5}, Order: 2}))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgDiff, From: 1, Seq: 7, Order: 1, Pages: []protocol.PageID{5}})) // early
	want(t, r.recv(protocol.Message{Kind: protocol.MsgDiff, From: 1, Seq: 6, Order: 0, Pages: []protocol.PageID{4}}),
		"Install(4,ro,zero)", "ApplyDiffs(Diff 1→0 seq=6 order=0 pages=[4] epoch=0)", "Send(DiffAck 0→1 seq=6 pages=[4] epoch=0)",
		"Install(5,ro,zero)", "ApplyDiffs(Diff 1→0 seq=7 order=1 pages=[5] epoch=0)", "Send(DiffAck 0→1 seq=7 pages=[5] epoch=0)",
		"Send(Grant 0→2 lock=3 scope=1 epoch=0 notices=[{4 -1 false false} {5 -1 false false}])")

	// The same for a barrier arrival, here at the barrier manager.
	want(t, r.call(protocol.EvBarrier, 0))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 2, Notices: []protocol.Notice{{Page: 6, Writer: 2}}, Order: 1}))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1}))
	grant := "BarrierGrant 0→%d epoch=1 notices=[{6 2 false false}]"
	want(t, r.recv(protocol.Message{Kind: protocol.MsgDiff, From: 2, Seq: 3, Order: 0, Pages: []protocol.PageID{6}}),
		"Install(6,ro,zero)", "ApplyDiffs(Diff 2→0 seq=3 order=0 pages=[6] epoch=0)", "Send(DiffAck 0→2 seq=3 pages=[6] epoch=0)",
		"Send("+fmt.Sprintf(grant, 1)+")", "Send("+fmt.Sprintf(grant, 2)+")", "Done(Barrier,0)")
}

// JIAJIA's jia_lock ends the interval too (endinterval(ACQ)): the diffs of
// writes made before the acquire go home, so they are not attributed to the
// new lock's scope.
func TestAcquireEndsTheInterval(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	r.write(4)
	r.grant(0, 1, 4)
	want(t, r.call(protocol.EvLock, 0),
		"Protect[4]", "SendDiffs(Diff 1→0 seq=2 order=0 pages=[4] epoch=0)", "Send(Acquire 1→0 lock=0 scope=-1 epoch=0)")
}

// ScC: a write made while holding several locks is in the scope of each,
// and a write made before a lock was acquired is not in its scope (JIAJIA
// syn.c: notices go to the top of the lock stack, popstack merges them into
// the enclosing level). Locks may be released in any order.
func TestNestedLocksNoticeEveryHeldScope(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	grantLock := func(id int) []string {
		return r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: id, Scope: 0})
	}
	r.call(protocol.EvLock, 2)
	grantLock(2)
	r.write(1) // in lock 2's scope only
	r.grant(0, 1, 1)
	want(t, r.call(protocol.EvLock, 4), "Protect[1]", "SendDiffs(Diff 1→0 seq=2 order=0 pages=[1] epoch=0)", "Send(Acquire 1→0 lock=4 scope=-1 epoch=0)")
	r.ack(0, 2, 1)
	grantLock(4)
	r.write(3) // in the scopes of locks 2 and 4
	r.grant(0, 3, 3)
	want(t, r.call(protocol.EvUnlock, 2), "Protect[3]", "SendDiffs(Diff 1→0 seq=4 order=1 pages=[3] epoch=0)",
		"Send(Release 1→0 lock=2 scope=0 pages=[1 3] after=2 epoch=0)", "Done(Unlock,2)")
	want(t, r.ack(0, 4, 3))
	want(t, r.call(protocol.EvUnlock, 4), "Send(Release 1→0 lock=4 scope=0 pages=[3] epoch=0)", "Done(Unlock,4)")
	// Both go to the next barrier's notices.
	want(t, r.call(protocol.EvBarrier, 0), "Send(Barrier 1→0 epoch=0 notices=[{1 1 true false} {3 1 true false}])")
}

// ---- acquire ----------------------------------------------------------------------

// ScC: at an acquire, the pages named by newer write notices of the lock
// are invalidated (JIAJIA syn.c acqgrantserver/invalidate).
func TestAcquireInvalidatesNoticedPages(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	r.read(2)
	r.grant(0, 1, 2)
	r.read(6)
	r.grant(0, 2, 6)
	want(t, r.call(protocol.EvLock, 0), "Send(Acquire 1→0 lock=0 scope=-1 epoch=0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 3, Notices: []protocol.Notice{{Page: 2, Writer: protocol.Several}, {Page: 5, Writer: protocol.Several}}}),
		"Zap[2]", "Done(Lock,0)")
	wantState(t, r, 2, protocol.Invalid)
	wantState(t, r, 6, protocol.ReadOnly)
	// The next acquire of lock 0 asks only for notices after scope 3.
	r.call(protocol.EvUnlock, 0)
	want(t, r.call(protocol.EvLock, 0), "Send(Acquire 1→0 lock=0 scope=3 epoch=0)")
}

// The manager grants in request order and sends each acquirer the notices
// released after its last grant (scope), except for pages homed at the
// acquirer (JIAJIA syn.c acqserver/relserver/grantlock/appendlockwtnts).
func TestManagerGrantsWithNewerNotices(t *testing.T) {
	// Rank 0 of 3 manages lock 3; page p is homed at rank p%3.
	r := newRig(t, protocol.Config{Rank: 0, Size: 3}, protocol.Placement{Kind: protocol.BlockCyclic})
	acq := func(from int, scope int64) []string {
		return r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: from, ID: 3, Scope: scope})
	}
	rel := func(from int, pages ...protocol.PageID) []string {
		return r.recv(protocol.Message{Kind: protocol.MsgRelease, From: from, ID: 3, Pages: pages})
	}
	want(t, acq(1, -1), "Send(Grant 0→1 lock=3 scope=0 epoch=0)")
	want(t, acq(2, -1))                                                                          // queued
	want(t, rel(1, 4, 5), "Send(Grant 0→2 lock=3 scope=1 epoch=0 notices=[{4 -1 false false}])") // page 5 is homed at rank 2
	want(t, acq(1, 0))
	// Page 4 was rank 1's own release (scope 0), page 7 is homed at rank 1.
	want(t, rel(2, 6, 7), "Send(Grant 0→1 lock=3 scope=2 epoch=0 notices=[{6 -1 false false}])")
}

func TestReleaseByNonHolderIsAProtocolError(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	_, err := r.m.Step(protocol.Event{Kind: protocol.EvRecv, Msg: &protocol.Message{Kind: protocol.MsgRelease, From: 1, To: 0, ID: 0}})
	if !errors.Is(err, protocol.ErrProtocol) {
		t.Fatalf("err = %v", err)
	}
}

// ---- misuse of locks and barriers -------------------------------------------------------

func TestCallErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup []protocol.Event
		ev    protocol.Event
		err   error
		msg   string
	}{
		{"re-locking a held lock is an error (JIAJIA syn.c jia_lock: embedding of the same lock)",
			[]protocol.Event{{Kind: protocol.EvLock, ID: 2}}, protocol.Event{Kind: protocol.EvLock, ID: 2},
			protocol.ErrLockHeld, "shmem: rank 0: Lock(2): lock already held"},
		{"locking a lock being acquired is an error",
			[]protocol.Event{{Kind: protocol.EvLock, ID: 3}}, protocol.Event{Kind: protocol.EvLock, ID: 3},
			protocol.ErrLockHeld, "Lock(3)"},
		{"unlock of a lock not held is an error",
			nil, protocol.Event{Kind: protocol.EvUnlock, ID: 4},
			protocol.ErrLockNotHeld, "shmem: rank 0: Unlock(4): lock not held by this rank"},
		{"unlock of a lock still being acquired is an error",
			[]protocol.Event{{Kind: protocol.EvLock, ID: 3}}, protocol.Event{Kind: protocol.EvUnlock, ID: 3},
			protocol.ErrLockNotHeld, "Unlock(3)"},
		{"barrier while holding a lock is an error (JIAJIA syn.c jia_barrier: barrier can not be used in CS)",
			[]protocol.Event{{Kind: protocol.EvLock, ID: 2}}, protocol.Event{Kind: protocol.EvBarrier},
			protocol.ErrBarrierInCS, "shmem: rank 0: Barrier(): barrier while holding"},
		{"lock during a pending barrier is an error",
			[]protocol.Event{{Kind: protocol.EvBarrier}}, protocol.Event{Kind: protocol.EvLock, ID: 1},
			protocol.ErrBusy, "Lock(1)"},
		{"two barriers at once are an error",
			[]protocol.Event{{Kind: protocol.EvBarrier}}, protocol.Event{Kind: protocol.EvBarrier},
			protocol.ErrBusy, "Barrier()"},
		{"negative lock number", nil, protocol.Event{Kind: protocol.EvLock, ID: -1}, protocol.ErrBadID, "Lock(-1)"},
		{"negative condition variable", nil, protocol.Event{Kind: protocol.EvWaitCV, ID: -1}, protocol.ErrBadID, "WaitCV(-1)"},
		{"fault outside every region", nil, protocol.Event{Kind: protocol.EvReadFault, Page: 100}, protocol.ErrNoRegion, "ReadFault(page 100)"},
		{"overlapping allocation", nil, protocol.Event{Kind: protocol.EvAlloc, Page: 4, N: 8, Placement: onRank(0)}, protocol.ErrOverlap, "Alloc(page 4, 8 pages)"},
		{"placement on a rank that does not exist", nil, protocol.Event{Kind: protocol.EvAlloc, Page: 20, N: 8, Placement: onRank(3)}, protocol.ErrPlacement, "Alloc"},
		{"explicit placement with too few homes", nil, protocol.Event{Kind: protocol.EvAlloc, Page: 20, N: 8,
			Placement: protocol.Placement{Kind: protocol.Explicit, Block: 4, Homes: []int{1}}}, protocol.ErrPlacement, "1 homes for 2 blocks"},
		{"free of no region", nil, protocol.Event{Kind: protocol.EvFree, Page: 3}, protocol.ErrNoRegion, "Free(page 3)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(1))
			for _, ev := range tc.setup {
				r.do(ev)
			}
			held := r.m.Held()
			acts, err := r.m.Step(tc.ev)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Rank != 0 || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %q, want a *protocol.Error naming rank 0 and %q", err, tc.msg)
			}
			if len(acts) != 0 || !slices.Equal(r.m.Held(), held) {
				t.Fatalf("a refused call changed something: %v, held %v", acts, r.m.Held())
			}
		})
	}
}

// ---- barriers -----------------------------------------------------------------------

// The barrier manager combines every rank's notices; a page written by two
// ranks gets Writer Several (JIAJIA syn.c barrserver/recordwtnts/savewtnt).
func TestBarrierCombinesEveryRanksNotices(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 3}, onRank(0))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1, Notices: []protocol.Notice{{Page: 2, Writer: 1}, {Page: 5, Writer: 1, Cached: true}}}))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 2, Notices: []protocol.Notice{{Page: 2, Writer: 2}}}))
	grant := "BarrierGrant 0→%d epoch=1 notices=[{2 -1 false false} {5 1 false false}]"
	want(t, r.call(protocol.EvBarrier, 0),
		"Send("+fmt.Sprintf(grant, 1)+")", "Send("+fmt.Sprintf(grant, 2)+")", "Done(Barrier,0)")
}

// After a barrier, every page written by another rank is invalidated; the
// only writer keeps its copy (JIAJIA syn.c invalidate: from != jia_pid).
func TestBarrierInvalidatesPagesWrittenByOthers(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	for i, p := range []protocol.PageID{2, 3, 4} {
		r.read(p)
		r.grant(0, uint64(i+1), p)
	}
	r.write(3)
	want(t, r.call(protocol.EvBarrier, 0), "Protect[3]", "SendDiffs(Diff 1→0 seq=4 order=0 pages=[3] epoch=0)",
		"Send(Barrier 1→0 after=1 epoch=0 notices=[{3 1 true false}])")
	want(t, r.ack(0, 4, 3))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgBarrierGrant, From: 0, Epoch: 1,
		Notices: []protocol.Notice{{Page: 2, Writer: 0}, {Page: 3, Writer: 1}, {Page: 4, Writer: protocol.Several}}}),
		"Zap[2 4]", "Done(Barrier,0)")
	wantState(t, r, 3, protocol.ReadOnly)
	if r.m.Epoch() != 1 {
		t.Fatalf("epoch %d", r.m.Epoch())
	}
}

// With Config.Refetch, the pages a barrier invalidated that were valid
// here are fetched again once the barrier is done (in free cache slots),
// for at most Refetch barriers in a row without a fault on them (JIAJIA
// has no such rule: it reads them at their next fault).
func TestBarrierRefetchesInvalidatedPages(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, Refetch: 2, CachePages: 3}, onRank(0))
	for i, p := range []protocol.PageID{2, 3, 4} {
		r.read(p)
		r.grant(0, uint64(i+1), p)
	}
	r.write(3)
	r.call(protocol.EvBarrier, 0)
	r.ack(0, 4, 3)
	r.write(3) // by another thread, while the barrier is on its way
	barrier := func(epoch uint64, pages ...protocol.PageID) []string {
		var ns []protocol.Notice
		for _, p := range pages {
			ns = append(ns, protocol.Notice{Page: p, Writer: 0})
		}
		return r.recv(protocol.Message{Kind: protocol.MsgBarrierGrant, From: 0, Epoch: epoch, Notices: ns})
	}
	// Page 3, dirty here, sends its diff home first: it is not refetched
	// before that diff is acknowledged. Page 5 was never valid here.
	want(t, barrier(1, 2, 3, 4, 5), "Protect[3]", "SendDiffs(Diff 1→0 seq=5 order=1 pages=[3] epoch=1)",
		"Zap[2 3 4]", "Done(Barrier,0)", "Send(PageReq 1→0 seq=6 pages=[2 4] epoch=1)")
	wantState(t, r, 2, protocol.Fetching)
	wantState(t, r, 3, protocol.Invalid)
	r.ack(0, 5, 3)
	r.grant(0, 6, 2, 4)
	wantState(t, r, 4, protocol.ReadOnly)
	// The second barrier in a row refetches them again, a third does not;
	// a fault on page 4 counts as a use.
	want(t, r.call(protocol.EvBarrier, 0), "Send(Barrier 1→0 epoch=1 notices=[{3 1 false false}])")
	want(t, barrier(2, 2, 4), "Zap[2 4]", "Done(Barrier,0)", "Send(PageReq 1→0 seq=7 pages=[2 4] epoch=2)")
	r.grant(0, 7, 2, 4)
	r.call(protocol.EvBarrier, 0)
	want(t, barrier(3, 2, 4), "Zap[2 4]", "Done(Barrier,0)")
	want(t, r.read(4), "Send(PageReq 1→0 seq=8 pages=[4] epoch=3)")
	r.grant(0, 8, 4)
	r.call(protocol.EvBarrier, 0)
	want(t, barrier(4, 2, 4), "Zap[4]", "Done(Barrier,0)", "Send(PageReq 1→0 seq=9 pages=[4] epoch=4)")
	if s := r.m.Stats(); s.Prefetched != 5 {
		t.Fatalf("stats %+v", s)
	}
}

// Lock notices older than the last barrier are dropped: the barrier
// invalidated those pages everywhere (JIAJIA syn.c barrgrantserver/clearlocks).
func TestBarrierDropsOlderLockNotices(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(1))
	r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 0, Scope: -1})
	r.recv(protocol.Message{Kind: protocol.MsgRelease, From: 1, ID: 0, Pages: []protocol.PageID{2}})
	r.call(protocol.EvBarrier, 0)
	r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1})
	// Rank 0 acquires lock 0 after the barrier: nothing to invalidate.
	want(t, r.call(protocol.EvLock, 0), "Done(Lock,0)")
	// A release from a later epoch that arrived early is kept.
	r2 := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(1))
	r2.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 0, Scope: -1, Epoch: 1})
	r2.recv(protocol.Message{Kind: protocol.MsgRelease, From: 1, ID: 0, Pages: []protocol.PageID{2}, Epoch: 1})
	r2.read(2)
	r2.grant(1, 1, 2)
	r2.call(protocol.EvBarrier, 0)
	r2.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1})
	want(t, r2.call(protocol.EvLock, 0), "Zap[2]", "Done(Lock,0)")
}

// With home migration on, a page written by a single rank that holds a copy
// moves its home to that rank at the barrier (JIAJIA syn.c migcheckcache,
// migpage; H_MIG). Off by default.
func TestHomeMigrationToTheSoleWriter(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("HomeMigration=%v", on), func(t *testing.T) {
			// Manager side: the grant says whether to migrate.
			mgr := newRig(t, protocol.Config{Rank: 0, Size: 2, HomeMigration: on}, onRank(0))
			mgr.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1, Notices: []protocol.Notice{{Page: 2, Writer: 1, Cached: true}}})
			acts := mgr.call(protocol.EvBarrier, 0)
			flag := fmt.Sprint(on)
			want(t, acts, "Send(BarrierGrant 0→1 epoch=1 notices=[{2 1 false "+flag+"}])", "Done(Barrier,0)")
			_, home, _ := mgr.m.PageState(2)
			if want := map[bool]int{false: 0, true: 1}[on]; home != want {
				t.Fatalf("home of page 2 is %d, want %d", home, want)
			}
			if on {
				wantState(t, mgr, 2, protocol.Invalid) // the old home had not mapped it
			}
			// Writer side: its cached copy becomes the home copy.
			w := newRig(t, protocol.Config{Rank: 1, Size: 2, HomeMigration: on}, onRank(0))
			w.write(2)
			w.grant(0, 1, 2)
			w.call(protocol.EvBarrier, 0)
			w.ack(0, 2, 2)
			w.recv(protocol.Message{Kind: protocol.MsgBarrierGrant, From: 0, Epoch: 1, Notices: []protocol.Notice{{Page: 2, Writer: 1, Migrate: on}}})
			if on {
				wantState(t, w, 2, protocol.HomeReadOnly)
				want(t, w.write(2), "Unprotect(2)")
			} else {
				wantState(t, w, 2, protocol.ReadOnly)
			}
		})
	}
}

// A page request that reaches the old home after the migration is
// forwarded to the new home (found by the random checker, seed 2622).
func TestRequestToOldHomeIsForwarded(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 3, HomeMigration: true}, onRank(0))
	r.read(2)
	r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 1})
	r.recv(protocol.Message{Kind: protocol.MsgBarrier, From: 2, Notices: []protocol.Notice{{Page: 2, Writer: 2, Cached: true}}})
	r.call(protocol.EvBarrier, 0)
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 9, Pages: []protocol.PageID{2}, Epoch: 0}),
		"Send(PageReq 1→2 seq=9 pages=[2] epoch=1)")
	// And the new home holds a request from a later epoch until it gets there.
	n := newRig(t, protocol.Config{Rank: 2, Size: 3, HomeMigration: true}, onRank(0))
	want(t, n.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 1, Seq: 9, Pages: []protocol.PageID{2}, Epoch: 1}))
}

// ---- diffs ----------------------------------------------------------------------------

// Two diffs of one page from one rank must be applied in the order they
// were made, whatever the network does (found by the random checker,
// seed 4088).
func TestDiffsAreAppliedInSenderOrder(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	r.read(3)
	diffMsg := func(order uint64, seq uint64) protocol.Message {
		return protocol.Message{Kind: protocol.MsgDiff, From: 1, Seq: seq, Order: order, Pages: []protocol.PageID{3}}
	}
	want(t, r.recv(diffMsg(1, 8))) // early: held
	want(t, r.recv(diffMsg(0, 5)),
		"ApplyDiffs(Diff 1→0 seq=5 order=0 pages=[3] epoch=0)", "Send(DiffAck 0→1 seq=5 pages=[3] epoch=0)",
		"ApplyDiffs(Diff 1→0 seq=8 order=1 pages=[3] epoch=0)", "Send(DiffAck 0→1 seq=8 pages=[3] epoch=0)")
	_, err := r.m.Step(protocol.Event{Kind: protocol.EvRecv, Msg: &protocol.Message{Kind: protocol.MsgDiff, From: 1, To: 0, Order: 0, Pages: []protocol.PageID{3}}})
	if !errors.Is(err, protocol.ErrProtocol) {
		t.Fatalf("repeated diff: %v", err)
	}
}

// A rank refetches a page only after its own diff of the page reached the
// home: otherwise it could read its own writes undone.
func TestRefetchWaitsForOwnDiff(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, CachePages: 1}, onRank(0))
	r.write(2)
	r.grant(0, 1, 2)
	want(t, r.read(3), "Protect[2]", "SendDiffs(Diff 1→0 seq=2 order=0 pages=[2] epoch=0)", "Zap[2]",
		"Send(PageReq 1→0 seq=3 pages=[3] epoch=0)")
	r.grant(0, 3, 3)
	want(t, r.read(2), "Zap[3]") // evicts page 3; the request for page 2 waits
	want(t, r.ack(0, 2, 2), "Send(PageReq 1→0 seq=5 pages=[2] epoch=0)")
}

// A write notice that arrives while a fetch of the page is in flight makes
// the answer stale: it is dropped and the page fetched again.
func TestStaleFetchIsFetchedAgain(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	r.call(protocol.EvLock, 0)
	r.read(2) // another thread faults while the acquire is pending
	r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 1, Notices: []protocol.Notice{{Page: 2, Writer: protocol.Several}}})
	want(t, r.grant(0, 1, 2), "Send(PageReq 1→0 seq=2 pages=[2] epoch=0)")
	want(t, r.grant(0, 2, 2), "Install(2,ro)")
}

// A dirty page named by a notice (written by another thread meanwhile)
// sends its diff home before it is zapped.
func TestInvalidatingADirtyPageSendsItsDiffFirst(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	r.call(protocol.EvLock, 0)
	r.write(2)
	r.grant(0, 1, 2)
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 0, Scope: 1, Notices: []protocol.Notice{{Page: 2, Writer: protocol.Several}}}),
		"Protect[2]", "SendDiffs(Diff 1→0 seq=2 order=0 pages=[2] epoch=0)", "Zap[2]", "Done(Lock,0)")
}

// ---- cache -------------------------------------------------------------------------------

// The cache keeps at most CachePages remote pages; the least recently
// faulted one goes, a dirty one after its diff went home (JIAJIA mem.c
// findposition/flushpage, savepage).
func TestCacheReplacement(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, CachePages: 2}, onRank(0))
	r.read(1)
	r.grant(0, 1, 1)
	r.write(2)
	r.grant(0, 2, 2)
	r.read(1) // spurious: page 1 is now the most recently used
	want(t, r.read(3), "Protect[2]", "SendDiffs(Diff 1→0 seq=3 order=0 pages=[2] epoch=0)", "Zap[2]",
		"Send(PageReq 1→0 seq=4 pages=[3] epoch=0)")
	r.grant(0, 4, 3)
	want(t, r.do(protocol.Event{Kind: protocol.EvEvict, N: 5}), "Zap[1]", "Zap[3]")
	if s := r.m.Stats(); s.Evictions != 3 {
		t.Fatalf("evictions %d", s.Evictions)
	}
	// The evicted dirty page still yields its write notice at the release.
	r.ack(0, 3, 2)
	want(t, r.call(protocol.EvBarrier, 0), "Send(Barrier 1→0 epoch=0 notices=[{2 1 false false}])")
}

func TestFaultWaitsForACacheSlot(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, CachePages: 1}, onRank(0))
	r.read(1)
	want(t, r.read(2)) // the only slot is being fetched
	want(t, r.grant(0, 1, 1), "Install(1,ro)")
	want(t, r.do(protocol.Event{Kind: protocol.EvEvict, N: 0}), "Zap[1]", "Send(PageReq 1→0 seq=2 pages=[2] epoch=0)")
}

// A read fault also fetches the following pages into free slots, one
// request per home.
func TestPrefetchFollowingPages(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 3, Prefetch: 3, CachePages: 3},
		protocol.Placement{Kind: protocol.Explicit, Block: 2, Homes: []int{0, 2, 1, 0}})
	// Pages 0,1 on rank 0; 2,3 on rank 2; 4,5 here; 6,7 on rank 0.
	want(t, r.read(1), "Send(PageReq 1→0 seq=1 pages=[1] epoch=0)", "Send(PageReq 1→2 seq=2 pages=[2 3] epoch=0)")
	want(t, r.read(5), "Install(4,rw,zero)", "Install(5,rw,zero)") // home pages, untouched
	r.grant(0, 1, 1)
	want(t, r.grant(2, 2, 2, 3), "Install(2,ro)", "Install(3,ro)")
	// A write fault does not prefetch.
	r2 := newRig(t, protocol.Config{Rank: 1, Size: 2, Prefetch: 3}, onRank(0))
	want(t, r2.write(1), "Send(PageReq 1→0 seq=1 pages=[1] epoch=0)")
	if s := r.m.Stats(); s.Prefetched != 2 || s.PagesFetched != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// Read faults that follow each other's prefetch windows double the
// window up to PrefetchMax; any other read fault starts again from
// Prefetch.
func TestPrefetchWindowGrowsOnSequentialFaults(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, Prefetch: 2, PrefetchMax: 8}, onRank(0))
	r.do(protocol.Event{Kind: protocol.EvAlloc, Page: 100, N: 64, Placement: onRank(0)})
	want(t, r.read(100), "Send(PageReq 1→0 seq=1 pages=[100 101 102] epoch=0)")
	want(t, r.read(103), "Send(PageReq 1→0 seq=2 pages=[103 104 105 106 107] epoch=0)")
	want(t, r.read(108), "Send(PageReq 1→0 seq=3 pages=[108 109 110 111 112 113 114 115 116] epoch=0)")
	want(t, r.read(117), "Send(PageReq 1→0 seq=4 pages=[117 118 119 120 121 122 123 124 125] epoch=0)")
	want(t, r.read(140), "Send(PageReq 1→0 seq=5 pages=[140 141 142] epoch=0)")
}

// A fault on an untouched home page maps the untouched home pages after
// and before it too (zeros, writable), within the prefetch window.
func TestHomeFaultMapsTheFollowingUntouchedPages(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, Prefetch: 2}, onRank(1))
	want(t, r.write(0), "Install(0,rw,zero)", "Install(1,rw,zero)", "Install(2,rw,zero)")
	want(t, r.read(4), "Install(3,rw,zero)", "Install(4,rw,zero)", "Install(5,rw,zero)", "Install(6,rw,zero)") // page 2 is mapped already
	want(t, r.read(3), "Wake(3)")
	want(t, r.write(1), "Wake(1)")
	want(t, r.write(3), "Wake(3)")           // not noticed: nobody else holds it
	want(t, r.read(7), "Install(7,rw,zero)") // the region ends
	// Page 2, mapped ahead writable, counts as written once another rank
	// fetched it: its writes must reach that rank.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 0, Seq: 1, Pages: []protocol.PageID{2}}),
		"SendPages(PageGrant 1→0 seq=1 pages=[2] epoch=0)")
	want(t, r.call(protocol.EvBarrier, 0), "Protect[2]", "Send(Barrier 1→0 epoch=0 notices=[{2 1 false false}])")
}

// Faults on untouched home pages that follow each other's windows
// backwards (a loop running down) double the window too.
func TestHomeFaultWindowGrowsBackwards(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, Prefetch: 2, PrefetchMax: 8}, onRank(1))
	r.do(protocol.Event{Kind: protocol.EvAlloc, Page: 100, N: 64, Placement: onRank(1)})
	installs := func(pages ...int) []string {
		var s []string
		for _, p := range pages {
			s = append(s, fmt.Sprintf("Install(%d,rw,zero)", p))
		}
		return s
	}
	want(t, r.write(163), installs(161, 162, 163)...)
	want(t, r.write(160), installs(156, 157, 158, 159, 160)...)
	want(t, r.write(155), installs(147, 148, 149, 150, 151, 152, 153, 154, 155)...)
	want(t, r.write(120), installs(118, 119, 120, 121, 122)...) // elsewhere: back to Prefetch
	if s := r.m.Stats(); s.HomeFaults != 4 {
		t.Fatalf("stats %+v", s)
	}
}

// A rank that reads a home's pages directly (Config.Direct) gets them
// through ActReadDirect instead of a page request; its engine feeds the
// filled grant back.
func TestDirectReadInsteadOfPageRequest(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 3, Prefetch: 1, Direct: []bool{true, false, false}},
		protocol.Placement{Kind: protocol.Explicit, Block: 4, Homes: []int{0, 2}})
	want(t, r.read(1), "ReadDirect(PageGrant 0→1 seq=1 pages=[1 2] epoch=0)")
	want(t, r.grant(0, 1, 1, 2), "Install(1,ro)", "Install(2,ro)")
	want(t, r.read(5), "Send(PageReq 1→2 seq=2 pages=[5 6] epoch=0)") // rank 2 is not direct
	// With home migration, homes may move: pages are asked for.
	r2 := newRig(t, protocol.Config{Rank: 1, Size: 2, Direct: []bool{true, false}, HomeMigration: true}, onRank(0))
	want(t, r2.read(1), "Send(PageReq 1→0 seq=1 pages=[1] epoch=0)")
}

// A home learns of its pages read directly by other ranks through
// EvShared: their writes are noticed from then on, as if it had served
// them.
func TestSharedPagesAreNoticedWhenWritten(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(1))
	r.write(2) // writable, nobody else has a copy
	want(t, r.call(protocol.EvLock, 1), "Done(Lock,1)")
	want(t, r.do(protocol.Event{Kind: protocol.EvShared, Pages: []protocol.PageID{2, 3}}))
	want(t, r.call(protocol.EvUnlock, 1), "Protect[2]", "Done(Unlock,1)")
	// Page 3, unmapped when it was read (zeros), counts as written once
	// mapped writable.
	want(t, r.write(3), "Install(3,rw,zero)")
	want(t, r.call(protocol.EvBarrier, 0), "Protect[3]", "Send(Barrier 1→0 epoch=0 notices=[{2 1 false false} {3 1 false false}])")
}

// With Config.Watch, a written home page that another rank holds a copy of
// stays writable at the end of the interval where it became shared, with
// a snapshot (a twin): its next writes come as EvWritten, not as write
// faults; after a few intervals without writes it is write-protected
// again, and watched again only once written after that.
func TestWatchedHomePagesStayWritable(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, Watch: 4}, onRank(1))
	r.write(2)
	r.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 0, Seq: 1, Pages: []protocol.PageID{2}})
	// Served while writable: written in this interval, watched from its
	// end on instead of protected.
	want(t, r.call(protocol.EvLock, 1), "MakeTwin(2)", "Done(Lock,1)")
	if w := r.m.Watched(); len(w) != 1 || w[0] != 2 {
		t.Fatalf("watched %v", w)
	}
	wantState(t, r, 2, protocol.HomeWritable)
	// Written: noticed at the release, still watched, no new snapshot.
	want(t, r.do(protocol.Event{Kind: protocol.EvWritten, Pages: []protocol.PageID{2}}))
	want(t, r.call(protocol.EvUnlock, 1), "Done(Unlock,1)")
	want(t, r.call(protocol.EvLock, 1), "Done(Lock,1)")
	want(t, r.call(protocol.EvUnlock, 1), "Done(Unlock,1)")
	want(t, r.call(protocol.EvLock, 1), "Done(Lock,1)")
	// The fourth interval without a write: protected again.
	want(t, r.call(protocol.EvUnlock, 1), "DropTwin(2)", "Protect[2]", "Done(Unlock,1)")
	if w := r.m.Watched(); len(w) != 0 {
		t.Fatalf("still watched %v", w)
	}
	// Written again after that protection: watched again from the end of
	// the interval.
	want(t, r.write(2), "Unprotect(2)")
	want(t, r.call(protocol.EvLock, 1), "MakeTwin(2)", "Done(Lock,1)")
	if w := r.m.Watched(); len(w) != 1 || w[0] != 2 {
		t.Fatalf("watched %v", w)
	}
}

// ---- plain barrier and condition variables ---------------------------------------------

func TestWaitCompletesWhenEveryRankArrived(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	want(t, r.call(protocol.EvWait, 0))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgWait, From: 1}),
		"Send(WaitGrant 0→1 seq=0 epoch=0)", "Done(Wait,0)")
	want(t, r.call(protocol.EvWait, 0))
}

// JIAJIA syn.c setcvserver/resetcvserver/waitcvserver: WaitCV returns once
// the variable is set; ResetCV clears it.
func TestConditionVariables(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	want(t, r.call(protocol.EvWaitCV, 2))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgSetCV, From: 1, ID: 2, Seq: 0}), "Done(WaitCV,2)")
	want(t, r.call(protocol.EvWaitCV, 2), "Done(WaitCV,2)") // still set
	want(t, r.call(protocol.EvResetCV, 2), "Done(ResetCV,2)")
	want(t, r.call(protocol.EvWaitCV, 2))
	want(t, r.call(protocol.EvSetCV, 2), "Done(SetCV,2)", "Done(WaitCV,2)")
	// Condition variable 3 is managed by rank 1.
	want(t, r.call(protocol.EvSetCV, 3), "Send(SetCV 0→1 cv=3 seq=0 epoch=0)", "Done(SetCV,3)")
	want(t, r.call(protocol.EvWaitCV, 3), "Send(WaitCV 0→1 cv=3 seq=1 epoch=0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgCVGrant, From: 1, ID: 3}), "Done(WaitCV,3)")
}

// A rank's condition-variable calls take effect in the order it made
// them, even when the network swaps them.
func TestConditionVariableCallsKeepSenderOrder(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 3}, onRank(0))
	r.recv(protocol.Message{Kind: protocol.MsgWaitCV, From: 2, ID: 3, Seq: 0})
	// Rank 1 did SetCV then ResetCV; the reset arrives first.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgResetCV, From: 1, ID: 3, Seq: 1}))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgSetCV, From: 1, ID: 3, Seq: 0}), "Send(CVGrant 0→2 cv=3 seq=0 epoch=0)")
	want(t, r.call(protocol.EvWaitCV, 3)) // reset again: waits
}

// ---- placement and regions ----------------------------------------------------------------

// Placement as JIAJIA's jia_alloc3 (block-cyclic from a starting rank),
// jia_alloc2p (all on one rank) and an explicit home per block.
func TestPlacement(t *testing.T) {
	tests := []struct {
		name string
		pl   protocol.Placement
		want []int // homes of pages 0..7
	}{
		{"block-cyclic, one page per block, from rank 0", protocol.Placement{Kind: protocol.BlockCyclic}, []int{0, 1, 2, 0, 1, 2, 0, 1}},
		{"block-cyclic, blocks of 3 from rank 2", protocol.Placement{Kind: protocol.BlockCyclic, Block: 3, Start: 2}, []int{2, 2, 2, 0, 0, 0, 1, 1}},
		{"all on rank 1", onRank(1), []int{1, 1, 1, 1, 1, 1, 1, 1}},
		{"explicit blocks of 2", protocol.Placement{Kind: protocol.Explicit, Block: 2, Homes: []int{2, 0, 0, 1}}, []int{2, 2, 0, 0, 0, 0, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, protocol.Config{Rank: 0, Size: 3}, tc.pl)
			for p, h := range tc.want {
				_, home, ok := r.m.PageState(protocol.PageID(p))
				if !ok || home != h {
					t.Fatalf("page %d: home %d (%v), want %d", p, home, ok, h)
				}
			}
		})
	}
}

func TestFreeDropsTheRegion(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	r.read(1)
	r.grant(0, 1, 1)
	r.write(2)
	r.grant(0, 2, 2)
	want(t, r.do(protocol.Event{Kind: protocol.EvFree, Page: 0}), "DropTwin(2)", "Zap[1 2]")
	if _, _, ok := r.m.PageState(1); ok {
		t.Fatal("page 1 still known")
	}
	if _, err := r.m.Step(protocol.Event{Kind: protocol.EvReadFault, Page: 1}); !errors.Is(err, protocol.ErrNoRegion) {
		t.Fatalf("fault after free: %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []protocol.Config{{Rank: 2, Size: 2}, {Rank: 0, Size: 0}, {Rank: 0, Size: 2, BarrierManager: 2}, {Rank: 0, Size: 1, CachePages: -1}, {Rank: 0, Size: 1, Refetch: -1}, {Rank: 0, Size: 1, Refetch: 256}} {
		if _, err := protocol.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// Quiet is true exactly while no page has been written since the last
// release and no home page is watched: an Unlock then changes nothing in
// the program's memory (the program may go on without waiting for it).
func TestQuietUntilWrittenOrWatched(t *testing.T) {
	// Rank 1 of 2, every page homed on rank 0.
	r := newRig(t, protocol.Config{Rank: 1, Size: 2}, onRank(0))
	if !r.m.Quiet() {
		t.Fatal("a fresh machine is not quiet")
	}
	r.read(2)
	r.grant(0, 1, 2)
	if !r.m.Quiet() {
		t.Fatal("not quiet after a read")
	}
	r.write(2)
	if r.m.Quiet() {
		t.Fatal("quiet with a page written in the interval")
	}
	r.call(protocol.EvBarrier, 0) // flushes page 2's diff
	if !r.m.Quiet() {
		t.Fatal("not quiet once the interval ended")
	}

	// A watched home page is written without faults: never quiet.
	w := newRig(t, protocol.Config{Rank: 1, Size: 2, Watch: 4}, onRank(1))
	w.write(2)
	w.recv(protocol.Message{Kind: protocol.MsgPageReq, From: 0, Seq: 1, Pages: []protocol.PageID{2}})
	w.call(protocol.EvLock, 1)
	w.write(2)
	w.call(protocol.EvUnlock, 1)
	if len(w.m.Watched()) != 1 {
		t.Fatalf("watched %v", w.m.Watched())
	}
	if w.m.Quiet() {
		t.Fatal("quiet with a watched page")
	}
}

// ---- kept locks (Config.CacheLocks) ---------------------------------------------

// A manager lets a rank keep a lock it was granted twice in a row with
// nobody waiting, recalls it once when another rank asks for it, and
// grants it on with the kept holder's release as usual.
func TestManagerLetsARepeatedHolderKeepTheLock(t *testing.T) {
	// Rank 0 of 3 manages lock 3; page p is homed at rank p%3.
	r := newRig(t, protocol.Config{Rank: 0, Size: 3, CacheLocks: true}, protocol.Placement{Kind: protocol.BlockCyclic})
	acq := func(from int, scope int64) []string {
		return r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: from, ID: 3, Scope: scope})
	}
	rel := func(from int, pages ...protocol.PageID) []string {
		return r.recv(protocol.Message{Kind: protocol.MsgRelease, From: from, ID: 3, Pages: pages})
	}
	want(t, acq(1, -1), "Send(Grant 0→1 lock=3 scope=0 epoch=0)") // first grant: not kept
	want(t, rel(1, 4))
	want(t, acq(1, 0), "Send(Grant 0→1 lock=3 scope=1 keep epoch=0)")
	want(t, acq(2, -1), "Send(Recall 0→1 lock=3 epoch=0)")
	want(t, r.call(protocol.EvLock, 3)) // recalled already: queued only
	// The kept holder's release names every page written under the lock
	// since its grant; rank 2 was not the last holder, and rank 0 waits.
	want(t, rel(1, 5, 1), "Send(Grant 0→2 lock=3 scope=2 epoch=0 notices=[{1 -1 false false} {4 -1 false false}])")
	want(t, rel(2), "Done(Lock,3)")
}

// Locks are kept only with Config.CacheLocks, never by their manager (its
// acquires send nothing), and not while others wait.
func TestManagerKeepsLocksOnlyWhenUseful(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache bool
		from  int
		queue bool
	}{
		{"off", false, 1, false},
		{"manager", true, 0, false},
		{"waiters", true, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, protocol.Config{Rank: 0, Size: 3, CacheLocks: tc.cache}, onRank(0))
			acq := func(from int) []string {
				return r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: from, ID: 3, Scope: -1})
			}
			rel := func(from int) []string {
				return r.recv(protocol.Message{Kind: protocol.MsgRelease, From: from, ID: 3})
			}
			if tc.from == 0 {
				r.call(protocol.EvLock, 3)
				r.call(protocol.EvUnlock, 3)
				want(t, r.call(protocol.EvLock, 3), "Done(Lock,3)")
				want(t, acq(1)) // not kept: no recall
				return
			}
			acq(tc.from)
			if tc.queue {
				// The holder's next acquire overtook its release, and
				// rank 2 waits behind it.
				acq(tc.from)
				acq(2)
				want(t, rel(tc.from), "Send(Grant 0→1 lock=3 scope=1 epoch=0)")
				want(t, rel(tc.from), "Send(Grant 0→2 lock=3 scope=2 epoch=0)")
				return
			}
			rel(tc.from)
			want(t, acq(tc.from), "Send(Grant 0→1 lock=3 scope=1 epoch=0)")
			want(t, acq(2)) // not kept: no recall
		})
	}
}

// A lock granted to keep is taken again without a message, and its
// releases stay here until the manager recalls it: the recall's release
// names every page written under the lock since the grant.
func TestKeptLockIsRetakenWithoutMessages(t *testing.T) {
	// Rank 1 of 2; lock 2 is managed by rank 0, every page homed there.
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, CacheLocks: true}, onRank(0))
	want(t, r.call(protocol.EvLock, 2), "Send(Acquire 1→0 lock=2 scope=-1 epoch=0)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 2, Seq: 1, Scope: 4}), "Done(Lock,2)")
	r.write(3)
	r.grant(0, 1, 3)
	wantFree(t, r) // held
	// Its diff went to the manager only: the release is kept here at once,
	// without waiting for the acknowledgement.
	want(t, r.call(protocol.EvUnlock, 2), "Protect[3]", "SendDiffs(Diff 1→0 seq=2 order=0 pages=[3] epoch=0)", "Done(Unlock,2)")
	wantFree(t, r, 2)
	want(t, r.ack(0, 2, 3)) // no release
	wantFree(t, r, 2)
	want(t, r.call(protocol.EvLock, 2), "Done(Lock,2)")
	want(t, r.call(protocol.EvUnlock, 2), "Done(Unlock,2)")
	want(t, r.call(protocol.EvLock, 2), "Done(Lock,2)")
	r.write(5)
	r.grant(0, 3, 5)
	// Recalled while held: the release waits for the unlock, and names
	// the diff the manager must apply first, not acknowledged yet.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 2}))
	want(t, r.call(protocol.EvUnlock, 2), "Protect[5]", "SendDiffs(Diff 1→0 seq=4 order=1 pages=[5] epoch=0)", "Done(Unlock,2)",
		"Send(Release 1→0 lock=2 scope=4 pages=[3 5] after=2 epoch=0)")
	want(t, r.ack(0, 4, 5))
	// Given back: the next acquire asks the manager.
	want(t, r.call(protocol.EvLock, 2), "Send(Acquire 1→0 lock=2 scope=4 epoch=0)")
}

// A recall of a kept lock that is free sends its release at once, naming
// the diffs to the manager not acknowledged yet; one that arrives while a
// release of it waits for acknowledgements of diffs to other homes sends
// it after that release, and an acquire made meanwhile goes to the
// manager.
func TestRecallOfAFreeKeptLock(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, CacheLocks: true}, onRank(0))
	r.call(protocol.EvLock, 2)
	r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 2, Seq: 1, Scope: 0})
	want(t, r.call(protocol.EvUnlock, 2), "Done(Unlock,2)")
	wantFree(t, r, 2)
	want(t, r.recv(protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 2}), "Send(Release 1→0 lock=2 scope=0 pages=[] epoch=0)")
	wantFree(t, r)

	r = newRig(t, protocol.Config{Rank: 1, Size: 2, CacheLocks: true}, onRank(0))
	r.call(protocol.EvLock, 2)
	r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 2, Seq: 1, Scope: 0})
	r.write(3)
	r.grant(0, 1, 3)
	want(t, r.call(protocol.EvUnlock, 2), "Protect[3]", "SendDiffs(Diff 1→0 seq=2 order=0 pages=[3] epoch=0)", "Done(Unlock,2)")
	want(t, r.recv(protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 2}), "Send(Release 1→0 lock=2 scope=0 pages=[3] after=1 epoch=0)")
	want(t, r.ack(0, 2, 3))

	// Rank 1 of 3; lock 3 is managed by rank 0, the pages homed on rank 2.
	r = newRig(t, protocol.Config{Rank: 1, Size: 3, CacheLocks: true}, onRank(2))
	r.call(protocol.EvLock, 3)
	r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 3, Seq: 1, Scope: 0})
	r.write(3)
	r.grant(2, 1, 3)
	r.call(protocol.EvUnlock, 3) // waits for the diff's acknowledgement
	want(t, r.recv(protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 3}))
	want(t, r.call(protocol.EvLock, 3), "Send(Acquire 1→0 lock=3 scope=0 epoch=0)")
	want(t, r.ack(2, 2, 3), "Done(Unlock,3)", "Send(Release 1→0 lock=3 scope=0 pages=[3] epoch=0)")
	// The new grant is an ordinary one.
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 3, Scope: 1}), "Done(Lock,3)")
	want(t, r.call(protocol.EvUnlock, 3), "Send(Release 1→0 lock=3 scope=1 pages=[] epoch=0)", "Done(Unlock,3)")
}

// Messages may be reordered: a recall that overtakes the grant it recalls
// takes effect at the end of that hold.
func TestRecallOvertakingItsGrant(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, CacheLocks: true}, onRank(0))
	r.call(protocol.EvLock, 2)
	want(t, r.recv(protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 2}))
	want(t, r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 2, Seq: 1, Scope: 0}), "Done(Lock,2)")
	want(t, r.call(protocol.EvUnlock, 2), "Done(Unlock,2)", "Send(Release 1→0 lock=2 scope=0 pages=[] epoch=0)")
}

// ScC: pages written under a kept lock before a barrier were invalidated
// everywhere by it, so its release after the barrier does not name them
// (as a manager drops the notices of past epochs).
func TestBarrierDropsKeptLockNotices(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 1, Size: 2, CacheLocks: true}, onRank(0))
	r.call(protocol.EvLock, 2)
	r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 2, Seq: 1, Scope: 0})
	r.write(3)
	r.grant(0, 1, 3)
	r.call(protocol.EvUnlock, 2)
	r.ack(0, 2, 3)
	want(t, r.call(protocol.EvBarrier, 0), "Send(Barrier 1→0 epoch=0 notices=[{3 1 true false}])")
	r.recv(protocol.Message{Kind: protocol.MsgBarrierGrant, From: 0, Epoch: 1, Notices: []protocol.Notice{{Page: 3, Writer: 1}}})
	want(t, r.recv(protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 2, Epoch: 1}), "Send(Release 1→0 lock=2 scope=0 pages=[] epoch=1)")
}

func TestRecallErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(r *rig)
		msg   protocol.Message
	}{
		{"not kept", func(r *rig) {}, protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 2}},
		{"not from the manager", func(r *rig) { r.call(protocol.EvLock, 2) }, protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 3}},
		{"twice", func(r *rig) {
			r.call(protocol.EvLock, 2)
			r.recv(protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 2, Seq: 1})
			r.recv(protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 2})
		}, protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 2}},
		{"granted without keeping", func(r *rig) {
			r.call(protocol.EvLock, 2)
			r.recv(protocol.Message{Kind: protocol.MsgRecall, From: 0, ID: 2})
		}, protocol.Message{Kind: protocol.MsgGrant, From: 0, ID: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, protocol.Config{Rank: 1, Size: 2, CacheLocks: true}, onRank(0))
			tc.setup(r)
			tc.msg.To = 1
			_, err := r.m.Step(protocol.Event{Kind: protocol.EvRecv, Msg: &tc.msg})
			if !errors.Is(err, protocol.ErrProtocol) {
				t.Fatalf("err = %v, want a protocol error", err)
			}
		})
	}
}

// wantFree checks the locks a Lock would take at once (AppendFreeKept).
func wantFree(t *testing.T, r *rig, ids ...int) {
	t.Helper()
	got := r.m.AppendFreeKept(nil)
	slices.Sort(got)
	if !slices.Equal(got, ids) && len(got)+len(ids) > 0 {
		t.Fatalf("free kept locks %v, want %v", got, ids)
	}
}

// A lock managed here counts as free to take at once while this rank held
// it last and nobody holds or waits for it.
func TestFreeLocksManagedHere(t *testing.T) {
	r := newRig(t, protocol.Config{Rank: 0, Size: 2, CacheLocks: true}, onRank(0))
	wantFree(t, r) // never held
	want(t, r.call(protocol.EvLock, 2), "Done(Lock,2)")
	wantFree(t, r) // held
	want(t, r.call(protocol.EvUnlock, 2), "Done(Unlock,2)")
	wantFree(t, r, 2)
	want(t, r.recv(protocol.Message{Kind: protocol.MsgAcquire, From: 1, ID: 2, Scope: -1}), "Send(Grant 0→1 lock=2 scope=1 epoch=0)")
	wantFree(t, r) // held elsewhere
	r.recv(protocol.Message{Kind: protocol.MsgRelease, From: 1, ID: 2, Pages: []protocol.PageID{3}})
	wantFree(t, r) // rank 1 held it last: its notices wait for this rank's Lock
	want(t, r.call(protocol.EvLock, 2), "Done(Lock,2)")
	r.call(protocol.EvUnlock, 2)
	wantFree(t, r, 2)

	off := newRig(t, protocol.Config{Rank: 0, Size: 2}, onRank(0))
	off.call(protocol.EvLock, 2)
	off.call(protocol.EvUnlock, 2)
	wantFree(t, off) // without Config.CacheLocks
}
