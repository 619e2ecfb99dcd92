package rdmaio

// SGE is one element of a scatter/gather list: Length bytes at Addr in the
// memory region whose local key is LKey. Addr is an address in the region's
// address space, that is MR.Addr() plus an offset; providers check it against
// the region and never dereference it. Use MRSGE to build one from an offset.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// MRSGE returns the SGE for n bytes at offset off of mr.
func MRSGE(mr MR, off, n int) SGE {
	return SGE{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}

// SendWR is a send work request. Fields that an opcode does not use are
// ignored. A SendWR is read only during QP.PostSend: the caller may reuse it
// (and the SGL slice) as soon as PostSend returns, but the memory the SGEs
// describe must stay untouched until the work request completes.
type SendWR struct {
	// ID is returned in the work completion.
	ID uint64
	// Opcode is the operation.
	Opcode Opcode
	// Flags modify the request.
	Flags SendFlags
	// SGL gathers the local data for SEND and RDMA WRITE, scatters the data
	// read by RDMA READ, and for atomics is exactly one 8-byte SGE that
	// receives the original remote value.
	SGL []SGE
	// Inline, when not nil, is the payload of a SEND or RDMA WRITE (with or
	// without immediate), copied during PostSend so that the slice may be
	// reused at once. It needs no memory region; SGL must then be empty and
	// len(Inline) at most QPCap.MaxInline.
	Inline []byte
	// Imm is the immediate value of OpSendImm and OpRDMAWriteImm.
	Imm uint32

	// RemoteAddr and RKey name the remote memory of RDMA and atomic
	// operations: RemoteAddr is an address in the remote region's address
	// space (the peer's MR.Addr() plus an offset) and is checked by the
	// target against the region that RKey names.
	RemoteAddr uint64
	RKey       uint32

	// CompareAdd is the compare value of OpAtomicCmpSwp and the addend of
	// OpAtomicFetchAdd; Swap is the replacement value of OpAtomicCmpSwp.
	CompareAdd uint64
	Swap       uint64

	// AH, RemoteQPN and RemoteQKey address the destination of a UD send.
	AH         AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// Length returns the number of payload bytes of wr: len(Inline) for an
// inline request, the sum of the SGE lengths otherwise.
func (wr *SendWR) Length() uint64 {
	if wr.Inline != nil {
		return uint64(len(wr.Inline))
	}
	return SGLLength(wr.SGL)
}

// RecvWR is a receive work request: a scatter list for one incoming message.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// SGLLength returns the total length of an SGE list.
func SGLLength(sgl []SGE) uint64 {
	var n uint64
	for i := range sgl {
		n += uint64(sgl[i].Length)
	}
	return n
}

// WorkCompletion reports the outcome of one work request.
type WorkCompletion struct {
	// ID is the ID of the work request.
	ID uint64
	// Status is the outcome; when it is not StatusSuccess only ID, Status,
	// QPN, Opcode and VendorErr are meaningful.
	Status Status
	// Opcode is the completed operation.
	Opcode WCOpcode
	// Flags tell which optional fields are valid.
	Flags WCFlags
	// ByteLen is the number of bytes received (receive completions) or
	// transferred (RDMA READ and atomics).
	ByteLen uint32
	// Imm is the sender's immediate value when Flags has WCWithImm.
	Imm uint32
	// QPN is the local queue pair the work request was posted to.
	QPN uint32
	// SrcQPN is the sender's queue pair number of a UD receive.
	SrcQPN uint32
	// SrcRank is the rank of the sending device of a UD receive, from the
	// peer's address, or -1 when the provider cannot tell.
	SrcRank int32
	// VendorErr is a provider-specific detail of an error, such as an errno
	// of the operating system.
	VendorErr uint32
}

// Err returns nil for a successful completion and otherwise a *WCError
// describing it.
func (wc *WorkCompletion) Err() error {
	if wc.Status == StatusSuccess {
		return nil
	}
	return &WCError{ID: wc.ID, QPN: wc.QPN, Opcode: wc.Opcode, Status: wc.Status, VendorErr: wc.VendorErr}
}
