package rdmaio

import "strconv"

// Access is a set of memory access rights. It is used for memory regions
// (what the region may be used for) and for RC queue pairs (which remote
// operations the queue pair accepts as a responder). The values are those of
// libibverbs' IBV_ACCESS_* flags.
type Access uint32

// Access rights. Local read access is always granted.
const (
	// AccessLocalWrite lets the local side write into the region: receive
	// buffers, RDMA READ destinations and atomic result buffers need it.
	AccessLocalWrite Access = 1 << 0
	// AccessRemoteWrite lets peers RDMA WRITE into the region.
	AccessRemoteWrite Access = 1 << 1
	// AccessRemoteRead lets peers RDMA READ from the region.
	AccessRemoteRead Access = 1 << 2
	// AccessRemoteAtomic lets peers run atomic operations on the region.
	AccessRemoteAtomic Access = 1 << 3

	// AccessRemote is every remote right.
	AccessRemote = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	// AccessAll is every right.
	AccessAll = AccessLocalWrite | AccessRemote

	accessKnown = AccessAll
)

// Valid reports whether a holds only known rights and is consistent: verbs
// require local write access for remote write and remote atomic access.
func (a Access) Valid() bool {
	if a&^accessKnown != 0 {
		return false
	}
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return false
	}
	return true
}

// String returns the rights as "local-write|remote-read|…", or "none".
func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	s := ""
	add := func(f Access, name string) {
		if a&f != 0 {
			if s != "" {
				s += "|"
			}
			s += name
		}
	}
	add(AccessLocalWrite, "local-write")
	add(AccessRemoteWrite, "remote-write")
	add(AccessRemoteRead, "remote-read")
	add(AccessRemoteAtomic, "remote-atomic")
	if rest := a &^ accessKnown; rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(rest), 16)
	}
	return s
}

// QPType is the transport service of a queue pair. The values are those of
// libibverbs' IBV_QPT_*.
type QPType uint8

// Queue pair types.
const (
	// RC is reliable connected: one QP talks to exactly one remote QP,
	// delivery is reliable and in order, and every operation is available.
	RC QPType = 2
	// UD is unreliable datagram: one QP talks to any UD QP by address handle,
	// remote QPN and Q_Key; messages are at most one path MTU, may be lost and
	// carry no one-sided operations.
	UD QPType = 4
)

// String returns "RC", "UD" or "QPType(n)".
func (t QPType) String() string {
	switch t {
	case RC:
		return "RC"
	case UD:
		return "UD"
	}
	return "QPType(" + strconv.Itoa(int(t)) + ")"
}

// QPState is the state of a queue pair. The values are those of libibverbs'
// IBV_QPS_*; the send-queue-drain and send-queue-error states of verbs are
// not modelled.
type QPState uint8

// Queue pair states, in the order a queue pair normally goes through them.
const (
	// StateReset is the state of a new queue pair. Nothing can be posted.
	StateReset QPState = 0
	// StateInit accepts receive work requests but sends nothing.
	StateInit QPState = 1
	// StateRTR (ready to receive) has the remote end configured and
	// delivers incoming messages.
	StateRTR QPState = 2
	// StateRTS (ready to send) accepts send work requests.
	StateRTS QPState = 3
	// StateErr completes every outstanding and newly posted work request with
	// StatusWRFlushErr. A queue pair enters it on Modify or on a fatal error
	// completion; only a move to StateReset leaves it.
	StateErr QPState = 6
)

// String returns "RESET", "INIT", "RTR", "RTS", "ERR" or "QPState(n)".
func (s QPState) String() string {
	switch s {
	case StateReset:
		return "RESET"
	case StateInit:
		return "INIT"
	case StateRTR:
		return "RTR"
	case StateRTS:
		return "RTS"
	case StateErr:
		return "ERR"
	}
	return "QPState(" + strconv.Itoa(int(s)) + ")"
}

// Opcode is the operation of a send work request. The values are those of
// libibverbs' IBV_WR_*.
type Opcode uint8

// Send opcodes.
const (
	// OpRDMAWrite writes the gathered local data at (RKey, RemoteAddr).
	OpRDMAWrite Opcode = 0
	// OpRDMAWriteImm is OpRDMAWrite that also consumes a receive work request
	// at the target and delivers Imm in its completion.
	OpRDMAWriteImm Opcode = 1
	// OpSend sends the gathered local data to the next receive work request
	// of the remote queue pair.
	OpSend Opcode = 2
	// OpSendImm is OpSend with a 32-bit immediate delivered in the receive
	// completion.
	OpSendImm Opcode = 3
	// OpRDMARead reads from (RKey, RemoteAddr) into the local scatter list.
	OpRDMARead Opcode = 4
	// OpAtomicCmpSwp compares the 8 bytes at (RKey, RemoteAddr) with
	// CompareAdd and, if equal, replaces them with Swap. The original value is
	// written to the single 8-byte local SGE. RC only; the remote address must
	// be 8-byte aligned. Values are in host byte order.
	OpAtomicCmpSwp Opcode = 5
	// OpAtomicFetchAdd adds CompareAdd to the 8 bytes at (RKey, RemoteAddr)
	// and writes the original value to the single 8-byte local SGE. RC only;
	// the remote address must be 8-byte aligned.
	OpAtomicFetchAdd Opcode = 6
)

// String returns the verbs name of the opcode, e.g. "SEND_WITH_IMM".
func (o Opcode) String() string {
	switch o {
	case OpRDMAWrite:
		return "RDMA_WRITE"
	case OpRDMAWriteImm:
		return "RDMA_WRITE_WITH_IMM"
	case OpSend:
		return "SEND"
	case OpSendImm:
		return "SEND_WITH_IMM"
	case OpRDMARead:
		return "RDMA_READ"
	case OpAtomicCmpSwp:
		return "ATOMIC_CMP_AND_SWP"
	case OpAtomicFetchAdd:
		return "ATOMIC_FETCH_AND_ADD"
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// IsAtomic reports whether o is one of the two atomic operations.
func (o Opcode) IsAtomic() bool { return o == OpAtomicCmpSwp || o == OpAtomicFetchAdd }

// IsOneSided reports whether o is executed against remote memory without a
// receive work request: RDMA WRITE, RDMA READ and the atomics.
func (o Opcode) IsOneSided() bool {
	return o == OpRDMAWrite || o == OpRDMARead || o.IsAtomic()
}

// ConsumesRecv reports whether o consumes a receive work request at the
// target: SEND, SEND with immediate and RDMA WRITE with immediate.
func (o Opcode) ConsumesRecv() bool {
	return o == OpSend || o == OpSendImm || o == OpRDMAWriteImm
}

// HasImm reports whether o carries an immediate value.
func (o Opcode) HasImm() bool { return o == OpSendImm || o == OpRDMAWriteImm }

// WCOpcode returns the work completion opcode reported for a send work
// request with opcode o.
func (o Opcode) WCOpcode() WCOpcode {
	switch o {
	case OpRDMAWrite, OpRDMAWriteImm:
		return WCRDMAWrite
	case OpRDMARead:
		return WCRDMARead
	case OpAtomicCmpSwp:
		return WCCompSwap
	case OpAtomicFetchAdd:
		return WCFetchAdd
	}
	return WCSend
}

// WCOpcode is the operation a work completion reports. The values are those
// of libibverbs' IBV_WC_*.
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// String returns the verbs name of the completion opcode, e.g. "RECV".
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}

// IsRecv reports whether o is a receive-side completion.
func (o WCOpcode) IsRecv() bool { return o >= WCRecv }

// Status is the outcome of a work request. The values and meanings are those
// of libibverbs' enum ibv_wc_status.
type Status uint8

// Completion statuses.
const (
	// StatusSuccess: the operation completed.
	StatusSuccess Status = 0
	// StatusLocLenErr: a receive buffer was too small for the incoming
	// message, or a send was longer than the transport allows.
	StatusLocLenErr Status = 1
	// StatusLocQPOpErr: an internal consistency error of the local QP.
	StatusLocQPOpErr Status = 2
	// StatusLocProtErr: a local SGE names an invalid key, lies outside its
	// memory region or needs a right the region lacks.
	StatusLocProtErr Status = 4
	// StatusWRFlushErr: the work request was outstanding or posted while the
	// QP was in the error state.
	StatusWRFlushErr Status = 5
	// StatusBadRespErr: an unexpected transport response.
	StatusBadRespErr Status = 7
	// StatusLocAccessErr: a protection error on local data during an RDMA
	// READ or atomic response.
	StatusLocAccessErr Status = 8
	// StatusRemInvReqErr: the responder found the request invalid, for
	// example a message longer than the receive buffer.
	StatusRemInvReqErr Status = 9
	// StatusRemAccessErr: the remote key is invalid, the remote range lies
	// outside the region, or the region or QP lacks the right.
	StatusRemAccessErr Status = 10
	// StatusRemOpErr: the responder could not complete the operation.
	StatusRemOpErr Status = 11
	// StatusRetryExcErr: the peer stopped responding (it closed or died).
	StatusRetryExcErr Status = 12
	// StatusRNRRetryExcErr: the receiver had no receive work request posted
	// for longer than the receiver-not-ready retries allow.
	StatusRNRRetryExcErr Status = 13
	// StatusRemAbortErr: the responder aborted the operation.
	StatusRemAbortErr Status = 16
	// StatusFatalErr: the device failed.
	StatusFatalErr Status = 19
	// StatusRespTimeoutErr: a response timed out.
	StatusRespTimeoutErr Status = 20
	// StatusGeneralErr: any other error.
	StatusGeneralErr Status = 21
)

// String returns the verbs name of the status, e.g. "REM_ACCESS_ERR".
func (s Status) String() string {
	switch s {
	case StatusSuccess:
		return "SUCCESS"
	case StatusLocLenErr:
		return "LOC_LEN_ERR"
	case StatusLocQPOpErr:
		return "LOC_QP_OP_ERR"
	case StatusLocProtErr:
		return "LOC_PROT_ERR"
	case StatusWRFlushErr:
		return "WR_FLUSH_ERR"
	case StatusBadRespErr:
		return "BAD_RESP_ERR"
	case StatusLocAccessErr:
		return "LOC_ACCESS_ERR"
	case StatusRemInvReqErr:
		return "REM_INV_REQ_ERR"
	case StatusRemAccessErr:
		return "REM_ACCESS_ERR"
	case StatusRemOpErr:
		return "REM_OP_ERR"
	case StatusRetryExcErr:
		return "RETRY_EXC_ERR"
	case StatusRNRRetryExcErr:
		return "RNR_RETRY_EXC_ERR"
	case StatusRemAbortErr:
		return "REM_ABORT_ERR"
	case StatusFatalErr:
		return "FATAL_ERR"
	case StatusRespTimeoutErr:
		return "RESP_TIMEOUT_ERR"
	case StatusGeneralErr:
		return "GENERAL_ERR"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// SendFlags modify a send work request. The values are those of libibverbs'
// IBV_SEND_*; inline data is given with SendWR.Inline instead of a flag.
type SendFlags uint8

// Send flags.
const (
	// SendFence makes the work request wait until earlier RDMA READs and
	// atomics on the QP have completed.
	SendFence SendFlags = 1 << 0
	// SendSignaled asks for a completion on success. Without it (and without
	// QPInitAttr.SigAll) a successful work request completes silently; errors
	// always produce a completion.
	SendSignaled SendFlags = 1 << 1
	// SendSolicited sets the solicited event bit in the receive completion.
	SendSolicited SendFlags = 1 << 2
	// SendUnordered, on an RDMA READ, says that the READ reads no memory
	// that the earlier SENDs of the QP deliver into (the peer's receive
	// buffers), so that it need not wait for the peer to receive them. A
	// provider whose peer receives SENDs only when it polls (shm) then
	// runs the READ at once, where RC order would have it wait for that
	// poll; the other providers ignore the flag, as every provider does
	// on other operations. Completions stay in posting order, and an
	// unordered READ that ran completes successfully even when an earlier
	// SEND fails.
	SendUnordered SendFlags = 1 << 3
)

// WCFlags describe a work completion.
type WCFlags uint8

// Work completion flags (IBV_WC_*).
const (
	// WCWithImm: WorkCompletion.Imm holds the sender's immediate value.
	WCWithImm WCFlags = 1 << 1
)
