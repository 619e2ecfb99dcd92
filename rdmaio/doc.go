// Package rdmaio is jiarun's RDMA-style queue API: the verbs model of
// InfiniBand and RoCE (devices, protection domains, memory regions,
// completion queues, queue pairs) in Go shape, with providers that implement
// it over shared memory (package shm), TCP/UDP (package tcp) or libibverbs
// (package verbs). The message passing and DSM layers are written against
// this package only; which provider is underneath is chosen per peer.
//
// Like database/sql/driver, the package is a small set of interfaces (what a
// provider implements) and plain data types (what crosses them). A provider
// package registers itself in an init function:
//
//	import _ "github.com/jiarun/jia/rdmaio/shm"
//
//	dev, err := rdmaio.Open("shm", rdmaio.Config{Job: job, Rank: rank, LocalSize: n})
//
// Provider-independent rules (the QP state machine, work request checks,
// memory key checks) live in package rdmaio/provider so that every provider
// enforces them identically, and package rdmaio/rdmaiotest is the
// conformance suite every provider passes.
//
// # Objects
//
//   - Device: one per rank and provider. Device.Addr is the blob the rank
//     publishes for this provider in its endpoint Card.
//   - PD: protection domain, the scope of the objects below.
//   - MR: a registered buffer with a local key (LKey, for local SGEs) and a
//     remote key (RKey, for peers' RDMA and atomics) and an address range
//     [Addr, Addr+Len). PD.Alloc returns memory best suited to the provider
//     (shm: shared memory that peers reach directly).
//   - CQ: completion queue. Poll returns completions without blocking;
//     Wait spins, then yields, then sleeps (see provider.WaitPolicy), so
//     that ranks that outnumber the cores do not steal each other's time.
//   - QP: a queue pair, RC (reliable connected) or UD (unreliable datagram),
//     with a send queue and a receive queue (or an SRQ).
//   - SRQ: a shared receive queue, one receive pool for many RC QPs.
//   - AH: address handle, a UD destination device.
//
// # Memory addressing
//
// An SGE names local memory as (LKey, address, length); an RDMA or atomic
// work request names remote memory as (RKey, remote address). Addresses are
// in the region's own address space: MR.Addr() plus an offset (use MRSGE).
// The side that owns a region checks every reference against its own
// registration: the key must be valid, the range inside the region, and the
// region (and, for RC responders, the QP: QPAttr.Access) must grant the
// right. Nothing is ever done with a pointer received from a peer, so
// addressing works across processes and hosts.
//
// # Queue pair states
//
// A QP starts in RESET and moves with Modify: RESET → INIT (remote rights,
// Q_Key) → RTR (for RC, the peer's address and QPN) → RTS (retry counts).
// Any state may move to ERR or RESET; other moves fail with
// ErrInvalidTransition. Receives may be posted from INIT on, sends only in
// RTS. In ERR every outstanding and newly posted work request completes with
// StatusWRFlushErr.
//
// # Work requests and completions
//
// PostSend and PostRecv take a slice of work requests: a chain posted with
// one notification of the peer (a doorbell). They return how many were
// posted; the error says why the next one was refused. Requests that are
// malformed are refused at post time: an opcode the QP type does not have
// (UD has only SEND and SEND_WITH_IMM; atomics are RC only), too many SGEs, a
// UD payload over the path MTU, an inline payload over QPCap.MaxInline, an
// atomic that is not one 8-byte SGE at an 8-byte aligned remote address, a
// full queue (ErrQueueFull), the wrong QP state. Problems found when the
// request executes complete it with an error Status that mirrors verbs:
// StatusLocProtErr (bad local key, range or right), StatusRemAccessErr (bad
// remote key, range or right), StatusLocLenErr / StatusRemInvReqErr (message
// longer than the receive buffer), StatusRNRRetryExcErr, StatusRetryExcErr
// (peer gone). Every error completion moves the QP to ERR, and the requests
// after it are flushed.
//
// A send request completes with a WorkCompletion only when it is signaled
// (SendSignaled or QPInitAttr.SigAll) or fails. As in verbs, the send queue
// slots of successful unsignaled requests are reclaimed only when a later
// completion is polled, so a QP must signal at least every MaxSendWR
// requests.
//
// RC delivers in order: completions of one send queue come in posting order,
// receives complete in arrival order, and an operation is executed after
// every operation posted before it on the same QP (data written by an RDMA
// WRITE is in place when a later SEND is received). A SEND that finds no
// receive posted is retried for QPAttr.RNRRetry times QPAttr.MinRNRTimer (of
// the receiver) and then fails with StatusRNRRetryExcErr; RNRRetryInfinite
// retries for ever.
//
// UD: one QP sends to any UD QP given an AH, the remote QPN and its Q_Key,
// at most Attr().MTU bytes. The receiver drops datagrams whose Q_Key differs
// from its own and datagrams that find no receive posted; delivery is not
// guaranteed. Receive completions carry SrcQPN and SrcRank.
//
// # Endpoint cards
//
// A Card is what a rank publishes at rendezvous: job, rank, host identity and
// one EndpointAddr (provider name, address blob, well-known UD QPN and Q_Key)
// per provider. MarshalBinary writes a versioned binary form; ParseCard reads
// it and rejects a card of another job with ErrWrongJob. A card is public:
// providers whose connections cross the network (tcp) authenticate every
// connection with the job's secret (Config.Secret) and refuse a peer that
// cannot prove it knows it.
//
// # Concurrency
//
// Every method of every object is safe for concurrent use. Posting and
// polling do not allocate. A provider may make progress only inside Poll,
// Wait and Post calls (shm does: it has no goroutines), so a rank waiting for
// anything must keep polling the CQs it expects completions on.
package rdmaio
