// Package protocol is the DSM's coherence protocol, home-based scope
// consistency as in JIAJIA 2.1, written as a pure state machine in the
// style of etcd's raft: one Machine per rank, fed events through Step,
// answering with the actions its engine must carry out, in order, before
// the next Step. It does no I/O, starts no goroutines, reads no clock and
// makes no system call; its tests need no memory tricks and no sockets.
//
// # Events and actions
//
// Events (Event.Kind): a read or write fault on a page (EvReadFault,
// EvWriteFault), a message from another rank (EvRecv), the program's
// synchronisation calls (EvLock, EvUnlock, EvBarrier, EvWait, EvSetCV,
// EvResetCV, EvWaitCV), memory pressure (EvEvict), the collective
// allocation and release of regions (EvAlloc, EvFree), and the pages other
// ranks read directly (EvShared, see below).
//
// Actions (Action.Kind): send a message (ActSend), send a page grant or a
// diff batch whose data the engine fills in from memory and twins
// (ActSendPages, ActSendDiffs), install a page read-only or writable,
// possibly keeping a twin (ActInstall), make or drop a twin (ActMakeTwin,
// ActDropTwin), write-protect or unprotect (ActProtect, ActUnprotect),
// invalidate (ActZap), apply diffs at the home (ActApplyDiffs), wake
// faulted threads (ActWake), complete a blocked call (ActDone), and read
// pages of a home directly (ActReadDirect).
// Install and Unprotect also wake the threads faulted on the page.
//
// Messages have a wire form for transports between ranks
// (Message.AppendBinary, MarshalBinary and UnmarshalBinary; see wire.go),
// fuzzed by FuzzMessageWire.
//
// # The rules (JIAJIA 2.1, src/mem.c and src/syn.c)
//
//   - Every page has a home rank, from the region's Placement: block-cyclic
//     from a starting rank (jia_alloc3), all on one rank (jia_alloc2p), or an
//     explicit home per block.
//   - A read fault on a page homed elsewhere fetches it from the home and
//     installs it write-protected; a write fault makes a twin and
//     unprotects (fetching first if needed). A fault on a home page maps it
//     (zeros the first time) and, for a write, only records the page: home
//     pages have no twin.
//   - An interval ends at every Lock, Unlock and Barrier: the diffs of the
//     dirty cached pages (byte runs against their twins, package diff) go to
//     their homes, batched per home; every written page is write-protected
//     again; the pages written become write notices in the scope of every
//     lock held and of the next barrier. A written home page counts only if
//     another rank fetched it since its last barrier notice (JIAJIA's rdnt).
//   - Unlock sends the lock's notices to its manager (rank lock mod size)
//     once every diff is acknowledged, so that the homes hold the data
//     before anyone acts on a notice (diffs to the manager excepted: see
//     Beyond JIAJIA). The manager grants the lock in request order with
//     the notices released after the acquirer's last grant of
//     that lock (JIAJIA's scope counter). At the grant the acquirer
//     invalidates those pages. Home pages are never invalidated.
//   - Barrier sends every notice of the barrier interval to the barrier
//     manager, which combines all ranks' notices (a page written by two
//     ranks has Writer Several) and grants the barrier to all; each rank
//     invalidates the pages written by others, and the lock notices of past
//     epochs are dropped. Barrier while holding a lock is an error, and so
//     are re-locking a held lock and unlocking one not held; locks nest, and
//     may be released in any order.
//   - With Config.HomeMigration (off by default), a page written in a
//     barrier interval by a single rank that holds a copy moves its home to
//     that rank at the barrier.
//   - A bounded cache (Config.CachePages) holds remote pages; a fault that
//     needs a slot drops the least recently faulted page, a dirty one after
//     its diff went home. A read fault also fetches the next
//     Config.Prefetch pages that are invalid here into free slots.
//   - Condition variables (SetCV, ResetCV, WaitCV) are JIAJIA's: a flag per
//     variable at its manager; WaitCV returns once it is set. They order no
//     memory: pair them with locks.
//   - Wait is a barrier without coherence.
//
// # Beyond JIAJIA
//
// A Go rank has many goroutines, so faults and calls of one rank may
// overlap, and the network may reorder messages. The Machine handles both:
// a page invalidated while dirty sends its diff home first; a fetch
// overtaken by a write notice is answered stale and fetched again; a rank
// refetches a page only after its own diff of it was acknowledged; homes
// apply each sender's diffs in the order it made them (Message.Order);
// lock notices carry the barrier epoch of their release (where JIAJIA has
// noclearlocks); requests that reach an old home after a migration are
// forwarded, and those that reach a new home too early wait for its barrier;
// while a barrier is pending a dirty page is not evicted (its home may be
// about to move) and a home page written meanwhile gets a twin, so that its
// new writes can follow it if it migrates (a copy served meanwhile is that
// twin, which the diff fits); a lock manager leaves out of a grant the
// notices of the acquirer's home pages only in the acquirer's epoch, as
// homes may have moved at a barrier it has not passed yet. Diffs are byte-exact, so ranks
// may write neighbouring bytes of one word under different locks.
//
// A release whose unacknowledged diffs all went to the lock's manager does
// not wait for their acknowledgement (JIAJIA does): it goes to the manager
// right after them, naming in Message.Order how many of the sender's diffs
// the manager must have applied before it handles the release, so the
// manager applies them before it can grant the lock to anyone. Over a
// transport that keeps each pair of ranks' messages in order, the release
// never waits there, and an acquire by a rank whose pages are homed at the
// manager costs a round trip less. A barrier arrival whose unacknowledged
// diffs all went to the barrier manager does the same, unless a release
// still waits for acknowledgements (it goes first). The sender's own
// later fetches of those pages still wait for the acknowledgements.
//
// A written home page that no other rank fetched since its last barrier
// notice is not write-protected at the end of an interval (JIAJIA protects
// it, to learn of its next write): no copy elsewhere can go stale, so its
// writes need no notice. When the home serves a copy of such a writable
// page, the page counts as written in the current interval, so it is
// noticed at the interval's end, and protected (its later writes fault
// again) unless it is watched (see Watched home pages). With Config.HomeMigration every written home page is protected as
// in JIAJIA, so that writes made while a barrier is pending get a twin.
//
// # Direct reads between ranks that share memory
//
// With Config.Direct, a rank reads the pages homed on the ranks it names
// straight from their memory (ranks on one host), instead of asking for
// them: the read fault yields ActReadDirect, whose engine marks the pages
// as read at the home, copies the home's copies and feeds them back as a
// page grant. The home learns of the reads through EvShared, which its
// engine steps before every Lock, Unlock and Barrier with the pages read
// since the previous one, and treats those pages as if it had served them:
// their later writes become write notices. A read that the home learns of
// only at its next release is safe: it saw every write made before the
// release it missed. Direct reads are off with home migration, where a
// page's home may move under the reader. A read fault also prefetches, and
// the prefetch window grows on a stream of faults (Config.PrefetchMax); a
// fault on an untouched home page maps the untouched home pages after it.
//
// # Watched home pages
//
// With Config.Watch, a home page that other ranks hold copies of stays
// writable, or is made writable, instead of being write-protected for
// them: the engine keeps a snapshot of it (its twin) and, before every
// Lock, Unlock and Barrier, steps EvWritten with the watched pages
// (Watched) that differ from their snapshots, which count as written in
// the interval that ends. A snapshot and a few comparisons cost far less
// than a write fault. A page is watched, while there are fewer than Watch:
//
//   - when the home serves it unmapped (ActInstall writable with a twin:
//     zeros) or write-protected (ActMakeTwin, then ActUnprotect), or learns
//     that another rank read it directly (EvShared), or maps it after such
//     a read;
//   - at the end of an interval that is not a barrier's, when it was
//     written and others hold copies (served while writable, or written
//     again after a protection).
//
// A page not written for a few intervals is write-protected again, and
// watched again only once written (it stays shared until a barrier
// notices its writes). A barrier, which invalidates every other copy of a
// written page, ends its watch: the page stays writable when it was
// watched or written again after a protection, and is protected
// otherwise, so that a copy fetched again right after the barrier
// (Config.Refetch) does not count as written. The watched pages make the
// machine not Quiet.
//
// Config.Watch covers cached copies of pages homed elsewhere too: a copy
// written again after an interval's end protected it stays writable at the
// next one, where its diff goes home and a new twin, the base of its next
// diff, is made while it is still protected (ActProtect, ActSendDiffs,
// ActMakeTwin, ActUnprotect). Before every Lock, Unlock and Barrier the
// engine steps EvWritten with the copies (WatchedCopies) that differ from
// their twins, which stay. A watched copy that is invalidated or evicted
// sends its diff home first and counts as written in the current interval
// (its writes since the last comparison are unknown); one not written for
// a few intervals is sent home, noticed and protected again.
//
// # Kept locks
//
// With Config.CacheLocks, a manager lets a rank that was granted a lock
// twice in a row, with nobody else waiting, keep it after its release
// (MsgGrant with Seq 1), as TreadMarks' last owner does: that rank's next
// Locks of it are granted on the spot, with no message and no
// invalidation (nobody else held it since), and its releases keep their
// write notices there. When another rank asks for the lock, the manager
// recalls it (MsgRecall, once); the keeper sends its release, with every
// page written under the lock since the grant, as soon as the lock is
// free here, and the manager grants it on as usual. A recall may overtake
// the grant it recalls. A barrier empties a kept lock's notices, as the
// managers drop the notices of past epochs. AppendFreeKept lists the kept
// locks that a Lock would take at once, which the pager lets its program
// take without waiting. The Unlock of a kept lock completes once its diffs
// are acknowledged or went to the manager only; its release at the recall
// then names the diffs the manager must apply first (Message.Order), as
// an ordinary release does.
//
// # Pages with a grant
//
// With Config.GrantPages, a lock manager sends with a grant (as
// ActSendPages) its copies of up to GrantPages of the noticed pages homed
// at it, marked as served (onPageReq's rule: written again, they are
// noticed), and in Order how many of the acquirer's diffs it has applied.
// The acquirer invalidates the noticed pages as usual and installs
// read-only, in free cache slots, the copies of those it held valid copies
// of, unless it heard of a write to the page since it sent its acquire
// (the copy may predate that write) or the manager had not applied all
// its diffs (the copy may lack its own writes). A page whose copy from
// the previous grant it wrote (since the last barrier) it installs
// writable with a twin instead, as its write fault would leave it, so
// that the data written under a lock costs no fault either; every
// maxGrantsRW+1st such grant installs it read-only, and only a write
// fault on that copy re-arms it. Off with HomeMigration.
//
// # What the engine must do
//
// Carry out the actions of a Step in order before the next Step; fill
// ActSendPages and ActSendDiffs from memory at that moment (package engine
// does this); never read or write a page the Machine has not mapped; and
// feed back every message, fault and call as an event. Errors from Step are
// *Error values naming the rank and the call: the ErrLock…, ErrBarrierInCS,
// ErrBusy, ErrBadID, ErrNoRegion, ErrPlacement and ErrOverlap kinds are
// mistakes of the program and change nothing; ErrProtocol means the job
// must stop.
package protocol
