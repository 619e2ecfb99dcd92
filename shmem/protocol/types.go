package protocol

import (
	"fmt"
	"strings"
)

// PageID numbers a page of the shared space. The engine allocates regions
// in one global page space (as JIAJIA's jia_alloc3 advances globaladdr), so
// a page's number is the same on every rank.
type PageID uint32

// Several is the Writer of a barrier notice for a page that more than one
// rank wrote in the interval.
const Several = -1

// PlacementKind chooses how the pages of a region get their home ranks.
type PlacementKind uint8

const (
	// BlockCyclic deals blocks of Block pages to ranks Start, Start+1, …
	// (mod the number of ranks): JIAJIA's jia_alloc3(size, block, start).
	BlockCyclic PlacementKind = iota
	// OnRank homes every page on rank Start: JIAJIA's jia_alloc2p(size, proc)
	// (and jia_alloc3 with a block as large as the region).
	OnRank
	// Explicit homes block i (of Block pages) on Homes[i]; Homes must name a
	// home for every block.
	Explicit
)

// Placement says where the pages of a region live.
type Placement struct {
	Kind  PlacementKind
	Block int   // pages per block (BlockCyclic, Explicit); 0 means 1
	Start int   // first rank (BlockCyclic) or the rank (OnRank)
	Homes []int // home of each block (Explicit)
}

// home returns the home of the i-th page of a region under p.
func (p *Placement) home(i uint32, size int) int {
	block := p.Block
	if block <= 0 {
		block = 1
	}
	b := int(i) / block
	switch p.Kind {
	case OnRank:
		return p.Start
	case Explicit:
		return p.Homes[b]
	default:
		return (p.Start + b) % size
	}
}

// check validates p for a region of n pages among size ranks.
func (p *Placement) check(n, size int) error {
	if p.Block < 0 {
		return fmt.Errorf("block of %d pages", p.Block)
	}
	block := max(p.Block, 1)
	switch p.Kind {
	case BlockCyclic, OnRank:
		if p.Start < 0 || p.Start >= size {
			return fmt.Errorf("rank %d outside 0..%d", p.Start, size-1)
		}
	case Explicit:
		blocks := (n + block - 1) / block
		if len(p.Homes) != blocks {
			return fmt.Errorf("%d homes for %d blocks of %d pages", len(p.Homes), blocks, block)
		}
		for i, h := range p.Homes {
			if h < 0 || h >= size {
				return fmt.Errorf("home %d of block %d outside 0..%d", h, i, size-1)
			}
		}
	default:
		return fmt.Errorf("unknown placement kind %d", p.Kind)
	}
	return nil
}

// Config configures a Machine.
type Config struct {
	Rank int // this rank
	Size int // number of ranks
	// PageSize is the page size in bytes (default 4096); grants must carry
	// whole pages.
	PageSize int
	// CachePages bounds the remote (non-home) pages this rank keeps mapped;
	// 0 means no bound. When a fault needs a slot, the least recently
	// faulted page is dropped, after its diff went home if it was dirty.
	CachePages int
	// Prefetch is the number of pages after a read-faulted page that are
	// fetched with it when they are invalid here and a cache slot is free.
	Prefetch int
	// PrefetchMax, when larger than Prefetch, lets the prefetch window
	// grow: a read fault on the page right after the previous read
	// fault's window (a sequential stream) doubles the window, up to
	// PrefetchMax pages; any other read fault resets it to Prefetch.
	PrefetchMax int
	// HomeMigration moves, at a barrier, the home of a page that a single
	// rank wrote in the barrier interval to that rank (JIAJIA's H_MIG).
	// Off by default, as in JIAJIA.
	HomeMigration bool
	// BarrierManager is the rank that combines barrier arrivals and plain
	// Wait arrivals (default 0).
	BarrierManager int
	// Direct, indexed by rank, says which homes this rank reads pages from
	// directly instead of asking for them (ranks on one host, which share
	// memory): a read fault then yields ActReadDirect instead of a page
	// request. The home learns of such reads through EvShared, which its
	// engine must step before every Lock, Unlock and Barrier with the
	// pages read since the last one. Ignored with HomeMigration.
	Direct []bool
	// Watch, when positive, lets up to Watch home pages that other ranks
	// hold copies of stay writable, or become writable, where JIAJIA
	// write-protects them to learn of their next write: from the moment
	// another rank fetches a write-protected or unmapped one, and from the
	// end of a (non-barrier) interval where a written one was fetched or
	// written again. The engine keeps a snapshot of each (its twin) and,
	// before every Lock, Unlock and Barrier, steps EvWritten with the
	// watched pages (Watched) that differ from their snapshots, taking new
	// ones. A page not written for a few intervals is write-protected
	// again (see Watched home pages in the package doc). Cached copies of
	// pages homed elsewhere that this rank writes interval after interval
	// are watched the same way, up to Watch pages in all (WatchedCopies;
	// their twins stay, the base of their diffs). Ignored with
	// HomeMigration.
	Watch int
	// CacheLocks lets a rank keep a lock after its release when it took
	// the lock twice in a row with nobody else in between and nobody waits
	// for it: its next Lock is granted here, with no message, until another
	// rank asks the manager for the lock, which then recalls it (the release
	// goes to the manager only then, with every page written under the lock
	// meanwhile). Locks managed by the rank itself are not cached: their
	// acquires send no message anyway.
	CacheLocks bool
	// Refetch, when positive, fetches again right after a barrier the
	// pages it invalidated that this rank held valid copies of, as if
	// they had been read-faulted (installed read-only, in free cache slots
	// only), so that a rank that reads the same pages of others in every
	// barrier interval does not fault on them. A page is refetched at most
	// Refetch barriers in a row without a fault on it (a page not read any
	// more stops being fetched; at most 255), and counts as prefetched.
	Refetch int
	// GrantPages, when positive, lets a lock manager send with a grant the
	// data of up to GrantPages of the grant's write notices for pages
	// homed at the manager, so that an acquirer that held a valid copy of
	// such a page installs the new one at once (read-only, in a free cache
	// slot) instead of invalidating it and fetching it again at its next
	// fault: a round trip saved for the data a lock protects, when it is
	// homed at the lock's manager. The acquirer installs a page only if it
	// heard of no write to it since it asked for the lock and the manager
	// had applied all its diffs (the grant's Order). A page that this
	// rank wrote after the previous grant brought it (since the last
	// barrier) is installed writable with a twin, as a write fault would
	// leave it: the data a lock protects is mostly written under it, and
	// the fault is spared. Ignored with HomeMigration.
	GrantPages int
}

// EventKind names an Event.
type EventKind uint8

// The events a Machine takes. Fault events come from the fault handler;
// the synchronisation events are calls of the rank's program and complete
// with an ActDone action (at once or later); EvRecv delivers a message.
const (
	EvReadFault  EventKind = iota + 1 // a thread read Page, which is not mapped
	EvWriteFault                      // a thread wrote Page, which is not mapped or is write-protected
	EvRecv                            // Msg arrived
	EvLock                            // Lock(ID): acquire
	EvUnlock                          // Unlock(ID): release
	EvBarrier                         // Barrier(): release, wait for every rank, acquire
	EvWait                            // Wait(): barrier without coherence
	EvSetCV                           // SetCV(ID)
	EvResetCV                         // ResetCV(ID)
	EvWaitCV                          // WaitCV(ID)
	EvEvict                           // memory pressure: drop up to N cached pages
	EvAlloc                           // a region of N pages from Page, homed by Placement
	EvFree                            // the region that starts at Page is freed
	EvShared                          // other ranks read Pages, homed here, directly (see Config.Direct)
	EvWritten                         // watched home Pages were written (see Config.Watch)
	// EvLocalBarrier: a barrier that every rank met outside the protocol's
	// messages (on a barrier board in shared memory), each with nothing to
	// publish (see Machine.BarrierQuiet). It completes at once, as a barrier
	// whose grant carries no notice, and takes no ActDone.
	EvLocalBarrier
)

var eventNames = [...]string{"", "ReadFault", "WriteFault", "Recv", "Lock", "Unlock", "Barrier", "Wait",
	"SetCV", "ResetCV", "WaitCV", "Evict", "Alloc", "Free", "Shared", "Written", "LocalBarrier"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is one input to Machine.Step.
type Event struct {
	Kind      EventKind
	Page      PageID    // faults; first page of Alloc and Free
	ID        int       // lock or condition variable
	N         int       // Evict: pages to drop; Alloc: pages in the region
	Placement Placement // Alloc
	Msg       *Message  // Recv
	Pages     []PageID  // Shared, Written
}

// ActionKind names an Action.
type ActionKind uint8

// The actions a Machine asks of its engine, to be carried out in order.
const (
	// ActSend: send Msg to Msg.To.
	ActSend ActionKind = iota + 1
	// ActSendPages: Msg is a page grant; set Msg.Data to the current
	// contents of this rank's (home) copies of Msg.Pages, one page after the
	// other, and send it. With Twin, a page that has a twin goes as its
	// twin instead: a home page written while a barrier with home
	// migration is pending, whose writes since the twin (made after this
	// rank's arrival, so owed to nobody yet) follow the page as a diff
	// against the twin if it migrates, onto the copy served now.
	ActSendPages
	// ActSendDiffs: Msg carries diffs to the home Msg.To; set Msg.Data to
	// the diff batch of Msg.Pages against their twins (package diff), drop
	// the twins, and send it. The pages are already write-protected.
	ActSendDiffs
	// ActInstall: map Page with Data (nil: zeros), writable if Writable,
	// else write-protected; keep a copy of Data as the twin if Twin. Wakes
	// the threads faulted on Page.
	ActInstall
	// ActMakeTwin: copy Page's current contents as its twin.
	ActMakeTwin
	// ActDropTwin: forget Page's twin.
	ActDropTwin
	// ActUnprotect: make Page writable; wakes the threads faulted on it.
	ActUnprotect
	// ActProtect: write-protect Pages.
	ActProtect
	// ActZap: unmap Pages, so the next access faults as missing.
	ActZap
	// ActApplyDiffs: apply the diff batch Msg.Data to this rank's (home)
	// copies of its pages, and to their twins where they have one.
	ActApplyDiffs
	// ActWake: wake the threads faulted on Page; it is already mapped as
	// they need.
	ActWake
	// ActDone: the call Op(ID) of the rank's program completed.
	ActDone
	// ActReadDirect: Msg is a page grant from the home Msg.From, which
	// this rank reads directly (Config.Direct): mark Msg.Pages as read at
	// the home (which learns it as an EvShared before its next release),
	// then set Msg.Data to the home's copies of them and feed Msg back as
	// an EvRecv.
	ActReadDirect
)

var actionNames = [...]string{"", "Send", "SendPages", "SendDiffs", "Install", "MakeTwin", "DropTwin",
	"Unprotect", "Protect", "Zap", "ApplyDiffs", "Wake", "Done", "ReadDirect"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) && k != 0 {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", k)
}

// Action is one output of Machine.Step.
type Action struct {
	Kind     ActionKind
	Page     PageID
	Pages    []PageID
	Data     []byte
	Writable bool
	Twin     bool
	Msg      *Message
	Op       EventKind // ActDone: the call that completed
	ID       int       // ActDone: its lock or condition variable
}

func (a Action) String() string {
	switch a.Kind {
	case ActSend, ActSendPages, ActSendDiffs, ActApplyDiffs, ActReadDirect:
		if a.Kind == ActSendPages && a.Twin {
			return fmt.Sprintf("%v(%v, twins)", a.Kind, a.Msg)
		}
		return fmt.Sprintf("%v(%v)", a.Kind, a.Msg)
	case ActInstall:
		mode := "ro"
		if a.Writable {
			mode = "rw"
		}
		if a.Twin {
			mode += "+twin"
		}
		if a.Data == nil {
			mode += ",zero"
		}
		return fmt.Sprintf("Install(%d,%s)", a.Page, mode)
	case ActProtect, ActZap:
		return fmt.Sprintf("%v%v", a.Kind, a.Pages)
	case ActDone:
		return fmt.Sprintf("Done(%v,%d)", a.Op, a.ID)
	default:
		return fmt.Sprintf("%v(%d)", a.Kind, a.Page)
	}
}

// MsgKind names a Message.
type MsgKind uint8

// The messages between ranks. Every message carries its sender's barrier
// epoch. None relies on delivery order: diffs carry a per-destination
// Order, and condition-variable calls a per-destination Seq, so that the
// receiver applies each sender's in the order it made them; everything else
// is matched by sequence number, epoch or lock scope.
const (
	MsgPageReq      MsgKind = iota + 1 // ask the home for Pages (Seq)
	MsgPageGrant                       // the home's copies of Pages in Data (answers Seq)
	MsgDiff                            // diff batch for pages homed at To, in Data (Seq)
	MsgDiffAck                         // the diffs of Pages sent with Seq are applied
	MsgAcquire                         // ask the manager for lock ID; Scope: last scope of ID seen
	MsgGrant                           // lock ID granted; Scope: its scope now; Notices: pages to invalidate; Seq 1: keep it after the release (Config.CacheLocks); Pages, Data: the manager's copies of some of them (Config.GrantPages), Order: how many of the grantee's diffs it had applied
	MsgRelease                         // lock ID released; Pages: written in its scope; Order: the sender's diffs to apply first
	MsgBarrier                         // arrival at the barrier that ends Epoch; Notices: pages written; Order as for Release
	MsgBarrierGrant                    // every rank arrived; Epoch is the new epoch; Notices combined
	MsgWait                            // arrival at plain barrier Seq
	MsgWaitGrant                       // plain barrier Seq complete
	MsgSetCV                           // set condition variable ID (Seq orders the sender's cv calls)
	MsgResetCV                         // reset condition variable ID
	MsgWaitCV                          // wait for condition variable ID
	MsgCVGrant                         // condition variable ID was set
	MsgRecall                          // release lock ID, kept after a grant with Seq 1, once no longer held
)

var msgNames = [...]string{"", "PageReq", "PageGrant", "Diff", "DiffAck", "Acquire", "Grant", "Release",
	"Barrier", "BarrierGrant", "Wait", "WaitGrant", "SetCV", "ResetCV", "WaitCV", "CVGrant", "Recall"}

func (k MsgKind) String() string {
	if int(k) < len(msgNames) && k != 0 {
		return msgNames[k]
	}
	return fmt.Sprintf("MsgKind(%d)", k)
}

// Notice is a write notice: Page was written. In barrier messages Writer
// is the only rank that wrote it in the interval, or Several; Cached (in
// an arrival) says the writer holds a valid copy of the page, and Migrate
// (in a grant) moves the page's home to Writer.
type Notice struct {
	Page    PageID
	Writer  int
	Cached  bool
	Migrate bool
}

// Message is what ranks send each other.
type Message struct {
	Kind    MsgKind
	From    int
	To      int
	Seq     uint64 // request or diff batch number (answers carry it back)
	Order   uint64 // Diff: per-destination number, a home applies each sender's diffs in this order; Release, Barrier: how many of the sender's diffs To applies first
	ID      int
	Scope   int64
	Epoch   uint64
	Pages   []PageID
	Notices []Notice
	Data    []byte
}

func (m *Message) String() string {
	if m == nil {
		return "<nil>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%v %d→%d", m.Kind, m.From, m.To)
	switch m.Kind {
	case MsgPageReq, MsgPageGrant, MsgDiffAck:
		fmt.Fprintf(&b, " seq=%d pages=%v", m.Seq, m.Pages)
	case MsgDiff:
		fmt.Fprintf(&b, " seq=%d order=%d pages=%v", m.Seq, m.Order, m.Pages)
	case MsgAcquire, MsgGrant:
		fmt.Fprintf(&b, " lock=%d scope=%d", m.ID, m.Scope)
		if m.Kind == MsgGrant && m.Seq == grantKeep {
			b.WriteString(" keep")
		}
		if len(m.Pages) > 0 {
			fmt.Fprintf(&b, " pages=%v after=%d", m.Pages, m.Order)
		}
	case MsgRecall:
		fmt.Fprintf(&b, " lock=%d", m.ID)
	case MsgRelease:
		fmt.Fprintf(&b, " lock=%d scope=%d pages=%v", m.ID, m.Scope, m.Pages)
		if m.Order > 0 {
			fmt.Fprintf(&b, " after=%d", m.Order)
		}
	case MsgBarrier:
		if m.Order > 0 {
			fmt.Fprintf(&b, " after=%d", m.Order)
		}
	case MsgWait, MsgWaitGrant:
		fmt.Fprintf(&b, " seq=%d", m.Seq)
	case MsgSetCV, MsgResetCV, MsgWaitCV, MsgCVGrant:
		fmt.Fprintf(&b, " cv=%d seq=%d", m.ID, m.Seq)
	}
	fmt.Fprintf(&b, " epoch=%d", m.Epoch)
	if len(m.Notices) > 0 {
		fmt.Fprintf(&b, " notices=%v", m.Notices)
	}
	return b.String()
}

// Stats counts what a Machine did.
type Stats struct {
	ReadFaults, WriteFaults  uint64 // fault events
	HomeFaults               uint64 // of which on home pages
	PagesFetched, Prefetched uint64 // pages requested from homes (prefetched: without a fault)
	PagesServed              uint64 // pages sent to other ranks
	DiffMsgs, DiffPages      uint64 // diff batches and pages sent
	Invalidations, Evictions uint64 // pages zapped by notices, by cache pressure
	Migrations               uint64 // homes moved to or from this rank
	Locks, Barriers          uint64 // completed acquires and barriers
	LocalBarriers            uint64 // barriers among them met outside the messages (EvLocalBarrier)
	MsgsSent                 uint64 // messages to other ranks
	GrantInstalls            uint64 // pages installed from lock grants (Config.GrantPages)
}
