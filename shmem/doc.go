// Package shmem is jiarun's distributed shared memory (DSM): regions that
// every rank maps at the same address and reads and writes with ordinary Go
// code, kept coherent by locks and barriers under scope consistency, the
// memory model of JIAJIA (Hu, Shi and Tang, "JIAJIA: A Software DSM System
// Based on a New Cache Coherence Protocol", HPCN Europe 1999).
//
// A program uses it through package jia (jia.Alloc, jia.Lock, jia.Unlock,
// jia.DSMBarrier, …) or through a DSM directly:
//
//	d, err := shmem.Start(ctx, rt)                  // collective, once per rank
//	r, err := d.Alloc(n*8, shmem.BlockCyclic(1, 0)) // collective
//	a := shmem.Slice[float64](r)                    // same address on every rank
//	d.Lock(0); a[0] += 1; d.Unlock(0)               // seen by the next holder of lock 0
//	d.Barrier()                                     // every write before it is seen after it
//	d.Close()                                       // collective, before Finalize
//
// Alloc and Free are collective: every rank calls them in the same order with
// the same arguments, one call at a time; a rank that differs gets an error
// naming the other rank's call (ErrMismatch), and so do all the others. Lock,
// Unlock, Barrier, Wait (a plain barrier), SetCV, ResetCV and WaitCV may be
// called from any goroutine; the calling goroutine parks until the pager
// answers. Every error names the rank and the call, and errors.Is recognises
// the protocol's errors (protocol.ErrLockNotHeld, protocol.ErrBarrierInCS, …)
// and this package's (ErrSize, ErrFreed, ErrMismatch, ErrClosed,
// ErrUnavailable). An access to a freed region stops the job with an error
// naming the rank, the access and the region.
//
// Map maps plain regions outside the Go heap (private anonymous memory, or a
// memfd that other processes can map too), and Slice and SliceAt view any
// region as a slice of a fixed-size numeric type:
//
//	r, err := shmem.Map(n*8, shmem.MapOptions{Shared: true})
//	a := shmem.Slice[float64](r)
//
// A region holds plain data only: the garbage collector never scans it, so
// a Go pointer stored there keeps nothing alive.
//
// # Packages
//
//   - shmem/protocol: the coherence protocol as a pure state machine, in
//     the style of etcd's raft: Machine.Step takes an event (a fault, a
//     message, a Lock/Unlock/Barrier/Wait or condition-variable call, memory
//     pressure, an allocation) and returns actions (send, install a page,
//     make a twin, protect, unprotect, zap, apply diffs, wake, done). No I/O,
//     no goroutines, no clock. Its tests are table tests named after the
//     rules and a randomized checker of scope consistency.
//   - shmem/diff: the diff of a page against its twin as byte-exact runs,
//     batched per home.
//   - shmem/engine: the Executor that carries out a Machine's actions on a
//     rank's memory and network, and owns the twins.
//   - shmem/uffd: userfaultfd(2) without cgo, usable from another process.
//   - shmem/pager: the pager process (below).
//   - shmem/rdmanet: the pagers' transport between ranks on one host:
//     rdmaio RC queue pairs of the "shm" provider.
//   - shmem/tcpnet: the pagers' transport between hosts, TCP authenticated
//     with the job secret.
//   - shmem/internal/board: the barrier board of a host (below).
//   - shmem/internal/procfd: opening another process's memfd through
//     /proc, how a host's processes share the board, the direct-read
//     bitmaps and the host-shared memory.
//
// # Serving faults without a P: the pager process
//
// A goroutine that touches a page the DSM has not mapped blocks in the
// kernel until the page is resolved through the region's userfaultfd. The
// thread it runs on keeps its Go P while it waits: the scheduler does not
// see a page fault as a system call. A fault handler goroutine in the same
// process therefore deadlocks as soon as every P is held by a faulting
// thread: with GOMAXPROCS=1 at the first fault, and for any GOMAXPROCS when
// enough goroutines fault at once or a fault is taken where the runtime
// cannot preempt (memmove, for copy() into DSM memory). The DSM therefore
// never serves faults from the rank's own process:
//
//  1. Start (at the first jia.Alloc: a program that never allocates starts
//     nothing) opens a userfaultfd, starts the rank's pager — the same
//     binary re-executed with JIA_DSM_PAGER=1, which this package's init
//     turns into a call of pager.Main before the program's main package
//     runs — and hands it the userfaultfd over a Unix socket pair
//     (SCM_RIGHTS). The pager dies with the rank (PR_SET_PDEATHSIG, started
//     from a thread locked for the pager's life) and exits when the socket
//     closes; the rank aborts the job if its pager ends unexpectedly.
//  2. The pager opens a TCP port (package tcpnet); the ranks exchange the
//     pagers' addresses and hosts and agree on an address range of
//     dsm.max_alloc bytes free in every rank (runtime.Exchange, one round
//     unless a candidate range is taken somewhere), reserved PROT_NONE.
//     The pagers on one host then connect a queue pair for each pair of
//     them (package rdmanet; two more exchanges), unless the job's
//     transport is tcp; pagers on different hosts talk over TCP.
//  3. Alloc maps a memfd (MAP_SHARED) at the next pages of the range,
//     registers it with the userfaultfd for missing and write-protect
//     faults (Linux 6.1 or later for write protection of shared memory;
//     UFFD_USER_MODE_ONLY when unprivileged), and passes the memfd to the
//     pager, which maps its own view of it. Page numbers are offsets in the
//     range, the same on every rank.
//  4. The pager runs the rank's protocol.Machine and an engine.Executor.
//     Its Memory is its view of the memfds, which never faults and ignores
//     the program's protection: it applies diffs there, and reads pages
//     with pread(2) (mapping a page into the pager costs more than copying
//     it). It maps pages into the program with UFFDIO_COPY (write-protected
//     for reads; the pages of one grant in one call), lets writes through
//     with UFFDIO_WRITEPROTECT, and invalidates with fallocate(PUNCH_HOLE)
//     on the memfd, which empties the page from every mapping. All of these
//     act on the program's memory from the pager's process.
//  5. Lock, Unlock, Barrier, Wait and the condition-variable calls go from
//     the program to its pager through a call queue in shared memory
//     (package internal/callq); the calling goroutine polls briefly for
//     the answer and then sleeps on a futex in the queue: for a
//     millisecond keeping its P (handing the P over and taking it back
//     would wake two more threads of the program), or 5 ms when the
//     answer waits for another rank, then in a system call,
//     so that its P is free; it sleeps at once when the pager says that
//     the answer waits for another rank (a grant, a barrier), leaving the
//     processors to the pagers that poll for it. An Unlock made while
//     nothing was written since the last release does not wait at all,
//     and a barrier with nothing to publish, on a single host, involves
//     no pager (below). Alloc, Free and the statistics go over the socket pair,
//     with the memfds. Alloc and Free are agreed among the
//     pagers (every pager sends its arrival to every other, on the same
//     ordered connections as the protocol's messages), so that no message
//     about a region reaches a pager before it allocated it or after it
//     freed it.
//  6. Close waits (a plain barrier) until every rank is done with the DSM,
//     then stops the pager: a rank that ended earlier would take away the
//     pages homed there.
//  7. In user-mode-only mode a system call that touches an unmapped DSM
//     page fails with EFAULT instead of faulting; such buffers must be
//     touched (or copied through ordinary memory) before passing them to
//     the kernel.
//
// Steps 3 and 4 are those of jobs on several hosts, and of one-host jobs
// with dsm.host_share off; a one-host job shares its memory instead
// (below).
//
// # Ranks of one host share the memory
//
// When every rank of the job runs on one host (the condition of the
// barrier board, below) and dsm.host_share is on (the default;
// JIA_DSM_HOST_SHARE), the ranks share one copy of every region instead
// of keeping one each. Rank 0 makes a memfd as large as the DSM's range at
// Start, and the other ranks open it (/proc/<pid>/fd, agreed in Start's
// exchanges: if any rank cannot, none shares and the DSM works as above).
// Alloc maps the region's part of it (its page offset in the range, the
// same on every rank) at the region's address on every rank, registered
// with nothing: the program's loads and stores reach the host's only copy
// with no page fault through a pager, no fetch, no twin, no diff and no
// invalidation. The pagers still agree on Alloc and Free (mismatched calls
// and bad placements are errors as before; each pager gets an empty memfd
// of its own for the region, which nothing touches), and still run Lock,
// Unlock, Barrier, Wait, the condition variables and Stats, which count
// no faults and no pages. These calls are atomic instructions and system
// calls, and stores become visible to other processors in program order:
// a program free of data races (every access to shared data ordered by a
// lock or a barrier) sees everything scope consistency promises, and
// more. Free empties the region's part of the memfd (rank 0, once every
// rank has freed it) and puts memory registered with the userfaultfd in
// its place, so that a later access reaches the pager, which stops the
// job naming the access as it does otherwise. Home placement is still
// checked and reported, but moves no memory; home migration, prefetching,
// dsm.page_cache_pages and dsm.write_detection have nothing to do in this
// mode. Memory use is one copy per host.
//
// # Where the time goes
//
// Every fault and call crosses processes: the program's thread sleeps in
// the kernel and the pager wakes, and back, and a fault on a page homed
// elsewhere adds a round trip between two pagers. On a virtual machine a
// wake-up of another process costs tens of microseconds, far more than
// the protocol's work, so the pager is built to wake as seldom as it can:
//
//   - One poller thread per pager reads the userfaultfd, the call queue,
//     the queue pairs of its host and the connections from other hosts
//     (package tcpnet) and handles each event on the spot (no hand-over
//     between threads). After an event it keeps polling for
//     a while, giving the processor away after every poll (sched_yield),
//     never spinning: long (package backoff, Awaiting) while its program
//     waits for an answer from another pager, briefly (Idle) otherwise.
//     It stops polling at once when the host's runnable threads besides
//     itself outnumber its processors (backoff.Crowded), and then sleeps
//     in epoll_pwait(2) on one set holding the userfaultfd, the
//     connections from other hosts and its bell (package internal/bell),
//     a datagram socket that the program and the other pagers of the host
//     ring, only while it sleeps. Each poll and each sleep is that one
//     system call, which says which descriptors to read.
//
//   - A read fault on a page homed on another rank of the same host does
//     not ask that rank's pager: the pager reads the page from the home's
//     memfd itself (opened through /proc/<pid>/fd) after setting the
//     page's bit in the home's bitmap, which the home's pager collects
//     before every release of its program (protocol.Config.Direct). A
//     fault then costs two wake-ups instead of four.
//
//   - A read fault fetches the following pages too, and the window grows
//     while the faults follow each other's windows, up to 64 pages (or 16
//     times dsm.prefetch_pages), as readahead does; a fault on a home page
//     never touched maps the untouched home pages around it as well, and
//     maps them writable, even for a read, while no other rank holds a
//     copy: writing them then costs no fault.
//
//   - Messages allocate little and are copied once into the queue pair's
//     send arena; the receiver copies them out once.
//
//   - JIAJIA write-protects a home page that other ranks hold copies of,
//     so that its next write faults and becomes a write notice. Here such
//     a page is watched instead (protocol.Config.Watch), from the moment
//     another rank fetches it while it is unmapped or write-protected at
//     home, and from the end of a lock or unlock interval in which it was
//     written: it stays (or becomes) writable, and its pager compares it
//     with a snapshot before every release of its program, which costs a
//     fraction of a fault. A page watched but not written for a few
//     intervals is protected again, and watched again once written. A
//     cached copy of a page homed elsewhere that its
//     rank writes in interval after interval is watched the same way: at
//     each release its diff goes home and a new twin is made while it is
//     protected, and it stays writable, its writes found by comparison
//     with that twin, instead of costing a write fault per interval.
//
//   - A lock's manager sends with a grant its own copies of up to 8 of
//     the pages the grant invalidates that are homed there
//     (protocol.Config.GrantPages), and the acquirer installs those it
//     held valid copies of at once: the data a lock protects costs no
//     fetch after the acquire when it is homed at the lock's manager,
//     and no write fault either when the acquirer wrote the copy the
//     previous grant brought (it is installed writable, with a twin).
//
//   - An Unlock changes nothing in the program's memory when no page was
//     written since the last release and no home page is watched
//     (protocol.Machine.Quiet); the pager says so in the call queue
//     whenever it is true, and clears it before it serves any fault.
//     Unlock then posts its call and returns (callq.Client.Post): the
//     pager takes the calls of each round of its poller before its
//     faults, so it steps the Unlock before every later access of the
//     program, and an Unlock followed by a Lock costs the program one
//     wait instead of two.
//
//   - A rank that takes a lock twice in a row while nobody else asks for
//     it keeps it after its release (protocol.Config.CacheLocks): its next
//     Locks need no manager, until another rank asks for the lock and the
//     manager recalls it. While the pager is quiet, it offers such a free
//     kept lock, or a free lock managed by its rank that the rank held
//     last, in the call queue (callq.Server.Offer); Lock then claims it
//     there with one atomic instruction and posts the call, and the Unlock
//     of that hold is posted and gives the claim back: an uncontended
//     lock+unlock wakes nobody. The pager withdraws the offer before it
//     stops being quiet and before a recall (or an acquire of a lock it
//     manages), and brings the machine up to the claims made until then
//     (the calls still in the queue are answered without a step when they
//     arrive), so that the claimed holds keep their place before every
//     later fault and message. The Unlock of a kept lock whose diffs went
//     to the lock's manager only does not wait for their acknowledgement:
//     the release sent at the recall names them, and the manager applies
//     them first. A lock taken back and forth between ranks is not kept
//     and costs what it did.
//
//   - When every rank runs on one host, a barrier with nothing to publish
//     involves no pager: the programs meet on the host's barrier board, a
//     page of shared memory (package internal/board), each adding itself
//     to a counter with one atomic instruction; the last to arrive wakes
//     the others with one futex wake on the board. Waiters poll the board
//     briefly (yielding) only while the host's ranks fit on its
//     processors, and otherwise sleep at once. A rank arrives clean when
//     its pager says, in the call queue, that a barrier would publish
//     nothing (protocol.Machine.BarrierQuiet; the pager clears the word
//     before it handles anything and sets it again after), it holds no
//     lock, and no page of its was read directly since the last release
//     (it maps its pager's bitmap); if any rank arrives dirty, every rank
//     calls its pager for the full barrier, a dirty one at once. Each
//     pager steps the barriers met on the board lazily, in their place
//     among its program's calls (protocol.EvLocalBarrier; package pager
//     says how). Wait, and the wait of Close, meet on the board only. A
//     rank whose pager is lost breaks the board, and a waiter that finds
//     another rank's program gone breaks it too: the waiters return an
//     error instead of waiting for a rank that will never come.
package shmem
