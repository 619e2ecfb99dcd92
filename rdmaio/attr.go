package rdmaio

import "time"

// Config tells a provider which rank of which job a device serves.
type Config struct {
	// Job identifies the job. Providers name shared resources after it (so a
	// cleanup tool can find leftovers) and endpoint cards carry it.
	Job string
	// Rank is this rank, published in the device's address.
	Rank int
	// LocalSize is the number of ranks of the job on this host, this one
	// included, or 0 when unknown. Providers use it to size their waiting
	// policy (spinning is pointless when ranks outnumber cores) and to
	// release shared resources as soon as every local peer has attached.
	LocalSize int
	// Options are provider-specific settings ("key" → "value"), documented
	// by each provider. Unknown keys are errors.
	Options map[string]string
	// Secret is the job's shared secret (the launcher's per-job secret).
	// Providers whose connections cross the network (tcp) authenticate
	// every connection with it and refuse peers that cannot prove they
	// know it; providers confined to one host may ignore it. A nil Secret
	// binds connections to the Job name only: enough for tests and
	// singletons, not for a shared network. Providers do not keep a
	// reference to the caller's slice.
	Secret []byte
}

// DeviceAttr describes a device's limits.
type DeviceAttr struct {
	// Provider is the name the provider registered.
	Provider string
	// MaxQP, MaxCQ, MaxSRQ and MaxMR bound the number of objects.
	MaxQP, MaxCQ, MaxSRQ, MaxMR int
	// MaxQPWR is the largest queue depth of a QP or SRQ.
	MaxQPWR int
	// MaxSGE is the longest scatter/gather list of a work request.
	MaxSGE int
	// MaxInline is the largest inline payload.
	MaxInline int
	// MaxMsgSize is the largest RC message or RDMA transfer in bytes.
	MaxMsgSize int
	// MTU is the path MTU: the largest UD payload.
	MTU int
}

// QPCap are the queue sizes of a QP. Zero fields take defaults (the
// provider's documented values); CreateQP rejects values above the device
// limits.
type QPCap struct {
	// MaxSendWR and MaxRecvWR are the depths of the send and receive queues.
	MaxSendWR, MaxRecvWR int
	// MaxSendSGE and MaxRecvSGE bound the SGL length of one work request.
	MaxSendSGE, MaxRecvSGE int
	// MaxInline is the largest SendWR.Inline payload.
	MaxInline int
}

// QPInitAttr describes a QP to create.
type QPInitAttr struct {
	// Type is RC or UD.
	Type QPType
	// SendCQ receives the completions of send work requests, RecvCQ those of
	// receive work requests; they may be the same CQ.
	SendCQ, RecvCQ CQ
	// SRQ, when not nil, supplies the receive work requests of this QP (RC
	// only); the QP then has no receive queue of its own.
	SRQ SRQ
	// Cap are the queue sizes.
	Cap QPCap
	// SigAll makes every send work request signaled.
	SigAll bool
}

// QPAttr is the argument of QP.Modify: the target State and the attributes
// that transition uses; the others are ignored.
//
// RESET → INIT: Access (RC; remote rights accepted as a responder) and QKey
// (UD). INIT → RTR (RC): Dest and DestQPN name the remote QP (required),
// MinRNRTimer is how long a sender should wait before retrying a SEND that
// found no receive posted here. RTR → RTS (RC): RNRRetry and RetryCount,
// Timeout. Every state → RESET or ERR needs nothing.
type QPAttr struct {
	// State is the state to move to.
	State QPState

	// Access is the set of remote operations (AccessRemote* rights) an RC QP
	// accepts as a responder. Set in RESET → INIT (or INIT → INIT).
	Access Access
	// QKey is the Q_Key of a UD QP: datagrams that carry another Q_Key are
	// dropped. Set in RESET → INIT (or INIT → INIT).
	QKey uint32

	// Dest is the address of the remote device, from the peer's card.
	Dest AHAttr
	// DestQPN is the number of the remote RC QP.
	DestQPN uint32
	// MinRNRTimer is the delay a sender waits before retrying a SEND that
	// found no receive work request posted on this QP. Zero means 1 ms.
	MinRNRTimer time.Duration

	// RNRRetry is how many times a SEND that found no receive posted is
	// retried before it completes with StatusRNRRetryExcErr; RNRRetryInfinite
	// retries for ever.
	RNRRetry int
	// RetryCount and Timeout bound how long an unresponsive peer is tolerated
	// before outstanding work completes with StatusRetryExcErr. Zero
	// Timeout means the provider's default.
	RetryCount int
	Timeout    time.Duration
}

// RNRRetryInfinite as QPAttr.RNRRetry retries a receiver-not-ready SEND for
// ever, as verbs' rnr_retry = 7.
const RNRRetryInfinite = 7

// AHAttr addresses a remote device: Addr is the provider address blob the
// peer published in its endpoint card (EndpointAddr.Addr, Device.Addr).
type AHAttr struct {
	Addr []byte
}

// SRQAttr describes a shared receive queue.
type SRQAttr struct {
	// MaxWR is the depth of the queue; MaxSGE bounds the SGL of one work
	// request. Zero takes the provider's default.
	MaxWR, MaxSGE int
}
