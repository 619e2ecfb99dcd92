package rdmaio

import "context"

// Provider opens devices. A provider package registers one value under its
// name with Register, typically in an init function.
type Provider interface {
	// Open opens a device for the rank described by cfg. A provider that has
	// no usable device on this machine returns an error wrapping ErrNoDevice.
	Open(cfg Config) (Device, error)
}

// A Prober is a Provider that needs hardware and can tell cheaply, without
// opening a device, whether this host has one (the verbs provider lists the
// RDMA devices). Providers that need no hardware do not implement it.
type Prober interface {
	// Probe returns nil when this host has a device the provider could
	// open, else an error wrapping ErrNoDevice that says why not.
	Probe() error
}

// Device is an opened provider instance, one per rank. All methods of all
// objects of a device are safe for concurrent use.
type Device interface {
	// Provider returns the name the provider registered.
	Provider() string
	// Attr returns the device's limits.
	Attr() DeviceAttr
	// Addr returns the device's address blob: what this rank publishes in its
	// endpoint card for this provider and what peers give to CreateAH and to
	// the RTR transition as AHAttr.Addr.
	Addr() []byte
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue for about depth outstanding
	// completions.
	CreateCQ(depth int) (CQ, error)
	// Close releases the device and everything created from it. Work still
	// outstanding is abandoned; peers' operations on this device fail with
	// error completions. Close does not wait for peers.
	Close() error
}

// PD is a protection domain: the scope of memory regions, address handles,
// QPs and SRQs.
type PD interface {
	// RegMR registers buf for the given access. The buffer must stay
	// allocated (and, for Go memory, referenced) until Deregister; providers
	// keep it reachable while it is registered.
	RegMR(buf []byte, access Access) (MR, error)
	// Alloc returns size bytes of zeroed memory that is best suited for
	// registration with this provider (for shm, shared memory that peers
	// access directly). Free it with Free.
	Alloc(size int) ([]byte, error)
	// Free releases memory from Alloc. It fails while the memory is
	// registered or referenced by outstanding work requests. Like munmap,
	// it invalidates buf: the slice must not be used (or registered) again.
	Free(buf []byte) error
	// CreateAH creates an address handle for UD sends to a peer device.
	CreateAH(attr AHAttr) (AH, error)
	// CreateQP creates a QP in StateReset.
	CreateQP(attr QPInitAttr) (QP, error)
	// CreateSRQ creates a shared receive queue.
	CreateSRQ(attr SRQAttr) (SRQ, error)
	// Close releases the PD. It fails with ErrInUse while objects created
	// from it remain.
	Close() error
}

// MR is a registered memory region. Local work requests name it by LKey,
// remote ones by RKey; both use addresses in [Addr, Addr+Len).
type MR interface {
	// LKey is the key local SGEs use.
	LKey() uint32
	// RKey is the key peers use for RDMA and atomics.
	RKey() uint32
	// Addr is the address of the first byte in the region's address space.
	Addr() uint64
	// Len is the length of the region in bytes.
	Len() int
	// Access is the rights the region was registered with.
	Access() Access
	// Bytes returns the registered buffer.
	Bytes() []byte
	// Deregister invalidates both keys. It waits until no peer is still
	// accessing the region.
	Deregister() error
}

// CQ is a completion queue.
type CQ interface {
	// Poll stores up to len(wc) completions in wc and returns their number.
	// It never blocks and does not allocate. Completions of one QP's send
	// queue (and of one receive queue) come in posting order.
	Poll(wc []WorkCompletion) int
	// Wait is Poll that waits until at least one completion is available,
	// ctx is done (returning ctx.Err()), ctx's deadline passes (returning
	// context.DeadlineExceeded) or the CQ is closed (ErrClosed). It
	// spins, then yields, then sleeps, so that waiting ranks do not take the
	// processors from working ones. It keeps the deadline by itself,
	// without waiting for Done to close: a caller may reuse one context
	// from wait to wait, moving its deadline and closing Done only to
	// cancel (which saves a channel per wait that ends at its deadline).
	Wait(ctx context.Context, wc []WorkCompletion) (int, error)
	// Close destroys the CQ. It fails with ErrInUse while QPs use it.
	Close() error
}

// IdleCQ is implemented by CQs that can tell cheaply that a Poll would
// find nothing, so that a spinning consumer need not take the locks a
// Poll takes.
type IdleCQ interface {
	CQ
	// Idle reports, without taking a lock, that Poll would neither return
	// a completion nor make progress now. It may report false when Poll
	// then finds nothing; it reports false whenever a completion is
	// available. A Poll that makes only background progress (checks a few
	// Polls in a hundred do) is asked for as often as Poll would do it.
	Idle() bool
}

// SendCQ is implemented by CQs that can collect the completions of their
// QPs' send queues alone: a consumer that waits for a message it will
// take where it lies (TakeQP) frees the room of its earlier sends without
// moving that message into a receive request.
type SendCQ interface {
	CQ
	// PollSend is Poll restricted to the QPs' send queues: what arrived
	// on their receive sides stays for the next Poll (or Take).
	PollSend(wc []WorkCompletion) int
}

// DirectCQ is implemented by CQs that can deliver a small message without
// a receive request: into a buffer the poller passes, which saves the
// consumer the bookkeeping of a receive buffer (posting it back).
type DirectCQ interface {
	CQ
	// PollDirect is Poll, except that a SEND without immediate data that
	// arrives on an RC QP attached to an SRQ may be copied into buf
	// instead of into the buffers of the SRQ's next receive request, which
	// stays posted (none need be). Its completion is successful, of opcode WCRecv, with
	// ID id and the message's length in ByteLen. The messages so delivered
	// lie back to back from the start of buf, in the order of their
	// completions; only those that fit in what is left of buf are, and
	// the provider may deliver any of them the ordinary way (shm: those
	// its ring carries inline are copied).
	PollDirect(wc []WorkCompletion, buf []byte, id uint64) int
}

// InlineQP is implemented by queue pairs that post a short inline SEND
// given in two pieces, which saves the caller building a SendWR and
// gathering the pieces, and lets the provider copy them once, straight
// to where the message goes.
type InlineQP interface {
	QP
	// PostSendInline posts one SEND of hdr followed by payload, carried
	// inline, with work request id and flags (SendSignaled or not). It
	// must behave exactly as PostSend of the chain of one
	// SendWR{ID: id, Opcode: OpSend, Flags: flags, Inline: hdr+payload}:
	// the same checks and errors (the two pieces together at most
	// Cap().MaxInline bytes), the same place in the order of the QP's
	// work requests (after everything posted before, ahead of everything
	// posted after), the same completion (a signaled SEND completes only
	// once the remote side took it; an unsignaled one only frees its
	// slot). Neither slice is referenced after it returns.
	PostSendInline(id uint64, flags SendFlags, hdr, payload []byte) error
}

// TakeQP is implemented by RC queue pairs attached to an SRQ whose next
// incoming message can be read where it lies and consumed there, without a
// poll of the CQ: a consumer that waits for one message from one peer
// watches that peer's QP alone.
type TakeQP interface {
	QP
	// Arrived reports, without a lock, that an incoming message (or other
	// news) may wait on the QP: it is true whenever a Poll of its CQ
	// would find a receive completion of this QP, and may be true when
	// Take then finds nothing to take.
	Arrived() bool
	// Take hands the QP's next incoming message to t when it is a SEND
	// without immediate data that PollDirect would copy into its buffer
	// (shm: carried inline in the ring) and nothing the QP received
	// precedes it. t.Take sees the message where it lies, valid only
	// during the call. When it returns true the message is consumed as
	// PollDirect would consume it, except that no completion is reported
	// for it; when it returns false (or t is not called) the message stays
	// for the next Poll. Take reports whether the message was consumed.
	// The provider may acknowledge a taken message to its sender (which
	// completes the sender's SEND) only at the QP's next post, Take or
	// Poll of its CQ; Arrived reports true until then.
	//
	// With spin > 0, Take waits for a message when none has arrived: it
	// looks for one up to spin more times (a load each, no system call)
	// while it holds the QP's receive side, so that a consumer that
	// expects one message soon has taken its locks before the message
	// comes. Other users of the QP's receive side wait meanwhile: keep
	// spin short (hundreds).
	Take(t Taker, spin int) bool
}

// Taker examines the message TakeQP.Take offers it and reports whether it
// takes it.
type Taker interface {
	Take(msg []byte) bool
}

// SleepCQ is implemented by CQs that can wait without polling first: a
// caller that has polled and yielded for as long as it wanted to, and now
// wants its processor free until a completion comes, sleeps at once.
type SleepCQ interface {
	CQ
	// Sleep is Wait without its spinning and yielding: after one Poll it
	// sleeps until a completion arrives, ctx is done (returning ctx.Err()),
	// ctx's deadline passes (returning context.DeadlineExceeded, whether
	// or not Done is closed, as Wait) or the CQ is closed (ErrClosed).
	Sleep(ctx context.Context, wc []WorkCompletion) (int, error)
}

// QP is a queue pair.
type QP interface {
	// QPN is the queue pair number peers address.
	QPN() uint32
	// Type is RC or UD.
	Type() QPType
	// State is the current state.
	State() QPState
	// Cap returns the queue sizes in effect.
	Cap() QPCap
	// Modify moves the QP to attr.State. Transitions the verbs state machine
	// does not allow fail with ErrInvalidTransition.
	Modify(attr QPAttr) error
	// PostSend posts a chain of send work requests with one notification of
	// the peer. It returns how many were posted; when that is less than
	// len(wrs) the error describes why wrs[n] was refused. Malformed requests
	// (wrong opcode for the QP type, too many SGEs, oversize UD or inline
	// payload, malformed atomics, wrong state, full queue) are refused here;
	// problems with memory keys complete with an error status.
	PostSend(wrs []SendWR) (int, error)
	// PostRecv posts a chain of receive work requests, like PostSend. It
	// fails on a QP that uses an SRQ.
	PostRecv(wrs []RecvWR) (int, error)
	// Close destroys the QP. Outstanding work is discarded without
	// completions; move the QP to StateErr and poll first to get them.
	Close() error
}

// SRQ is a shared receive queue: one pool of receive work requests for
// several RC QPs.
type SRQ interface {
	// PostRecv posts receive work requests like QP.PostRecv.
	PostRecv(wrs []RecvWR) (int, error)
	// Close destroys the SRQ. It fails with ErrInUse while QPs use it.
	Close() error
}

// AH is an address handle: a UD destination device.
type AH interface {
	// Close destroys the address handle.
	Close() error
}
