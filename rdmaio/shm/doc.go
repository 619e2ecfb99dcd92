// Package shm is the rdmaio provider for ranks on the same host: queue pairs
// over shared memory, with no sockets and no goroutines on the data path.
// Import it for its side effect of registering the provider "shm":
//
//	import _ "github.com/jiarun/jia/rdmaio/shm"
//
// # Segments
//
// Each device (rank) creates a main segment in /dev/shm named
//
//	jia-<job>-r<rank>-p<pid>-d<serial>-main
//
// holding its CQ doorbells, a table of its memory regions, the control words
// of its QPs and one inbound ring per QP. Memory from PD.Alloc is a further
// segment each (…-a<id>) that peers map when they first access a region in
// it. Peers find the main segment through the device's address blob (in the
// endpoint card) and map it when they first connect (CreateAH, RTR).
//
// A segment is unlinked as soon as every expected peer (Config.LocalSize-1)
// has mapped it, by the last of them; otherwise when it is freed or its
// device closes. A crash therefore leaves at most the segments no peer had
// mapped yet; Leftovers lists them and Cleanup removes those whose creating
// process is gone (the launcher calls it after a job).
//
// # Transport
//
// RC: each QP has an inbound single-producer single-consumer ring in its own
// segment; the connected peer QP (which claims it at RTR) is the only
// producer. A SEND of at most the eager limit is copied into the ring; a
// larger one puts descriptors of the sender's buffers in the ring and the
// receiver copies straight from them into the receive buffers (one copy):
// from the sender's shared memory when the buffer came from PD.Alloc,
// otherwise from the sender's process with process_vm_readv. Since the
// first costs no system call, SENDs from PD.Alloc memory use descriptors
// from 1 KiB on, SENDs from ordinary memory only above the eager limit. The producer
// learns from the consumer's position that an entry was consumed; only then
// does the send complete (a SEND is acknowledged, as in RC). A SEND that
// finds no receive posted stays in the ring; the sender decides, from the
// receiver's posted-receive count and the RNR timer, when it has waited
// long enough and withdraws it (StatusRNRRetryExcErr).
//
// RDMA WRITE, READ and atomics are executed by the initiator directly on the
// target's memory, after checking the target's published registration of
// the key (never the initiator's idea of an address): regions in shared
// memory are copied to or from the mapped segment (atomics use the
// processor's atomic instructions, so they are atomic with respect to
// everything, including the target's own CPU atomics); regions of ordinary
// Go memory go through process_vm_readv/writev, a single copy by the kernel;
// a run of queued READs (or WRITEs) on such memory takes one call of up to
// 1024 iovecs, each operation still completing on its own. Remote atomics
// therefore need memory from PD.Alloc. A one-sided operation posted behind
// SENDs that are not yet consumed waits for them (RC order).
//
// UD: each UD QP has an inbox in its segment, a bounded multi-producer
// queue of MTU-sized slots. A full inbox drops the datagram.
//
// Completion queues hold no memory of their own: Poll runs the progress of
// the QPs attached to the CQ and writes their completions straight into the
// caller's slice. Wait spins, then yields (runtime.Gosched and sched_yield),
// then sleeps on a futex word in the segment that producers ring only when a
// waiter announced itself; the sleep is bounded (option sleep) so that
// retry timers run. Where the kernel offers global expedited memory
// barriers (membarrier), producers publish ring entries and
// acknowledgements with plain stores instead of locked instructions, and a
// waiter about to sleep issues such a barrier so that it cannot miss them.
//
// # Kernel permissions
//
// process_vm_readv/writev need ptrace access to the peer. Under Yama's
// ptrace_scope=1 the provider allows it with prctl(PR_SET_PTRACER); with
// ptrace_scope ≥ 2 (or option cma=off) it is unavailable, and then
// registering ordinary Go memory for remote access, and SENDs larger than the
// eager limit from ordinary Go memory, fail with an error that says so: use
// PD.Alloc memory instead. Device.CMAError reports the reason.
//
// # Options
//
// Config.Options may set (defaults in parentheses):
//
//	dir         segment directory (/dev/shm)
//	ring_bytes  inbound ring (and UD inbox) size per QP (131072; a power of two, 16 KiB to 64 MiB)
//	eager       largest SEND from ordinary memory copied through the ring (8192; at most ring_bytes/4)
//	mtu         UD path MTU (4096)
//	max_qp, max_mr, max_cq, max_srq   table sizes (128, 4096, 64, 16)
//	spin, yield, sleep                Wait policy as durations (from provider.DefaultWaitPolicy)
//	cma         "auto" or "off"
//	warm        "on" or "off": write to the pages of rings and send queues when they are made (on)
//
// # Errors
//
// StatusRetryExcErr completions carry in VendorErr why the peer stopped
// responding (VendorPeerClosed, VendorPeerExited, VendorQPDestroyed,
// VendorQPNotReady); failed kernel copies carry the errno.
package shm
