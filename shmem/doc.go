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
//   - shmem/tcpnet: the pagers' first transport, TCP authenticated with the
//     job secret, behind engine.Transport until the rdmaio queues replace
//     it.
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
//     pagers' addresses and agree on an address range of dsm.max_alloc
//     bytes free in every rank (runtime.Exchange, one round unless a
//     candidate range is taken somewhere), reserved PROT_NONE.
//  3. Alloc maps a memfd (MAP_SHARED) at the next pages of the range,
//     registers it with the userfaultfd for missing and write-protect
//     faults (Linux 6.1 or later for write protection of shared memory;
//     UFFD_USER_MODE_ONLY when unprivileged), and passes the memfd to the
//     pager, which maps its own view of it. Page numbers are offsets in the
//     range, the same on every rank.
//  4. The pager runs the rank's protocol.Machine and an engine.Executor.
//     Its Memory is its view of the memfds, which never faults and ignores
//     the program's protection: it reads home pages and twins there and
//     applies diffs there. It maps pages into the program with UFFDIO_COPY
//     (write-protected for reads), lets writes through with
//     UFFDIO_WRITEPROTECT, and invalidates with fallocate(PUNCH_HOLE) on the
//     memfd, which empties the page from every mapping. All of these act on
//     the program's memory from the pager's process.
//  5. Lock, Unlock, Barrier, Wait and the condition-variable calls go from
//     the program to its pager over the socket pair; the calling goroutine
//     parks (its P is free) and resumes on the pager's answer, sent when the
//     machine's ActDone for the call comes out. Alloc and Free are agreed
//     among the pagers (every pager sends its arrival to every other, on
//     the same ordered connections as the protocol's messages), so that no
//     message about a region reaches a pager before it allocated it or
//     after it freed it.
//  6. Close waits (a plain barrier) until every rank is done with the DSM,
//     then stops the pager: a rank that ended earlier would take away the
//     pages homed there.
//  7. In user-mode-only mode a system call that touches an unmapped DSM
//     page fails with EFAULT instead of faulting; such buffers must be
//     touched (or copied through ordinary memory) before passing them to
//     the kernel.
//
// Later: the rdmaio queues instead of tcpnet, a shared-memory ring with a
// futex doorbell instead of the socket pair, page data received straight
// into the pager's view and mapped with UFFDIO_CONTINUE, home pages shared
// between ranks on one host.
package shmem
