// Package shmem is jiarun's distributed shared memory (DSM): regions that
// every rank maps at the same address and reads and writes with ordinary Go
// code, kept coherent by locks and barriers under scope consistency, the
// memory model of JIAJIA (Hu, Shi and Tang, "JIAJIA: A Software DSM System
// Based on a New Cache Coherence Protocol", HPCN Europe 1999).
//
// This package holds the memory: Map maps a Region outside the Go heap
// (private anonymous memory, or a memfd that other processes can map too),
// and Slice and SliceAt view it as a slice of a fixed-size numeric type:
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
// cannot preempt (memmove, for copy() into DSM memory). The engine therefore
// never serves faults from the rank's own process. The plan, of which the
// test TestPagerProcessServesFaultsWithOneP in shmem/uffd already runs the
// memory half (GOMAXPROCS=1, 64 goroutines faulting at once, copy() into
// and out of the region, all complete):
//
//  1. A rank maps each DSM region from a memfd (MAP_SHARED) at the address
//     every rank agreed on, and registers it with a userfaultfd for missing
//     and write-protect faults (Linux 6.1 or later for write protection of
//     shared memory; UFFD_USER_MODE_ONLY when unprivileged).
//  2. At start-up the rank starts its pager: the same binary re-executed in
//     pager mode, tied to the rank's life (PR_SET_PDEATHSIG one way, a
//     hang-up on their socket the other). The rank passes it the
//     userfaultfd and the memfds over a Unix socket pair (SCM_RIGHTS).
//  3. The pager runs the rank's protocol.Machine and an engine.Executor.
//     Its Memory is its own mapping of the memfds, which never faults and
//     ignores the program's protection: it reads home pages and twins there
//     and applies diffs there. It maps pages into the program with
//     UFFDIO_COPY (write-protected for reads), lets writes through with
//     UFFDIO_WRITEPROTECT, and invalidates with fallocate(PUNCH_HOLE) on the
//     memfd, which empties the page from every mapping (MADV_DONTNEED would
//     leave it in the page cache). All of these act on the program's memory
//     from the pager's process. A later fast path receives page data
//     straight into the pager's mapping (one-sided READ where the provider
//     allows it) and maps it with UFFDIO_CONTINUE, copying nothing.
//  4. The pager has its own endpoint on the rdmaio queues and talks to the
//     other ranks' pagers; fault service never waits for the program.
//  5. Lock, Unlock, Barrier, Wait and the condition-variable calls go from
//     the program to its pager over the socket pair (later a shared-memory
//     ring with a futex doorbell): the calling goroutine blocks in a system
//     call, which gives its P back, and resumes on the pager's ActDone.
//  6. In user-mode-only mode a system call that touches an unmapped DSM
//     page fails with EFAULT instead of faulting; the runtime touches such
//     buffers before passing them to the kernel.
package shmem
