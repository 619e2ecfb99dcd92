package provider

import (
	"fmt"

	"github.com/jiarun/jia/rdmaio"
)

// QPLimits are what CheckSendWR and CheckRecvWR check work requests against.
type QPLimits struct {
	Type rdmaio.QPType
	Cap  rdmaio.QPCap
	// MTU bounds UD payloads; MaxMsgSize bounds RC messages and transfers.
	MTU, MaxMsgSize int
}

// CheckSendWR checks the shape of a send work request: opcode allowed on the
// QP type, SGL length, inline payload, UD payload against the MTU, message
// size, and for atomics exactly one 8-byte SGE and an 8-byte aligned remote
// address. Memory keys are not checked here (they produce error completions,
// see CheckLocal and CheckRemote). The error wraps one of rdmaio's sentinel
// errors.
func CheckSendWR(l *QPLimits, wr *rdmaio.SendWR) error {
	op := wr.Opcode
	if op > rdmaio.OpAtomicFetchAdd {
		return fmt.Errorf("%w: %v", rdmaio.ErrOpcode, op)
	}
	if l.Type == rdmaio.UD && op != rdmaio.OpSend && op != rdmaio.OpSendImm {
		return fmt.Errorf("%w: %v on a UD QP (only SEND and SEND_WITH_IMM)", rdmaio.ErrOpcode, op)
	}
	if wr.Inline != nil {
		if op == rdmaio.OpRDMARead || op.IsAtomic() {
			return fmt.Errorf("%w: %v cannot be inline", rdmaio.ErrOpcode, op)
		}
		if len(wr.SGL) != 0 {
			return fmt.Errorf("%w: inline send with %d SGEs (the payload is Inline)", rdmaio.ErrInvalidArgument, len(wr.SGL))
		}
		if len(wr.Inline) > l.Cap.MaxInline {
			return fmt.Errorf("%w: inline payload of %d bytes (max %d)", rdmaio.ErrMessageTooLong, len(wr.Inline), l.Cap.MaxInline)
		}
	} else if len(wr.SGL) > l.Cap.MaxSendSGE {
		return fmt.Errorf("%w: %d SGEs (max %d)", rdmaio.ErrTooManySGE, len(wr.SGL), l.Cap.MaxSendSGE)
	}
	n := wr.Length()
	switch {
	case l.Type == rdmaio.UD:
		if n > uint64(l.MTU) {
			return fmt.Errorf("%w: UD payload of %d bytes exceeds the path MTU %d", rdmaio.ErrMessageTooLong, n, l.MTU)
		}
		if wr.AH == nil {
			return fmt.Errorf("%w: UD send without an address handle", rdmaio.ErrInvalidArgument)
		}
	case n > uint64(l.MaxMsgSize):
		return fmt.Errorf("%w: %d bytes (max %d)", rdmaio.ErrMessageTooLong, n, l.MaxMsgSize)
	}
	if op.IsAtomic() {
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return fmt.Errorf("%w: %v needs one 8-byte SGE for the result", rdmaio.ErrAtomic, op)
		}
		if wr.RemoteAddr%8 != 0 {
			return fmt.Errorf("%w: %v at remote address %#x, not 8-byte aligned", rdmaio.ErrAtomic, op, wr.RemoteAddr)
		}
	}
	return nil
}

// CheckRecvWR checks the shape of a receive work request.
func CheckRecvWR(maxSGE int, wr *rdmaio.RecvWR) error {
	if len(wr.SGL) > maxSGE {
		return fmt.Errorf("%w: %d SGEs (max %d)", rdmaio.ErrTooManySGE, len(wr.SGL), maxSGE)
	}
	return nil
}

// LocalAccess returns the right the local SGEs of a send work request with
// opcode op need: local write for RDMA READ and atomics (they write the local
// buffer), none otherwise.
func LocalAccess(op rdmaio.Opcode) rdmaio.Access {
	if op == rdmaio.OpRDMARead || op.IsAtomic() {
		return rdmaio.AccessLocalWrite
	}
	return 0
}

// RemoteAccess returns the right an operation needs on the target region and
// on the target RC QP: remote write for RDMA WRITE (with immediate), remote
// read for RDMA READ, remote atomic for atomics, none for SEND.
func RemoteAccess(op rdmaio.Opcode) rdmaio.Access {
	switch op {
	case rdmaio.OpRDMAWrite, rdmaio.OpRDMAWriteImm:
		return rdmaio.AccessRemoteWrite
	case rdmaio.OpRDMARead:
		return rdmaio.AccessRemoteRead
	case rdmaio.OpAtomicCmpSwp, rdmaio.OpAtomicFetchAdd:
		return rdmaio.AccessRemoteAtomic
	}
	return 0
}

// InRange reports whether [addr, addr+length) lies within [base, base+size),
// without overflow.
func InRange(base, size, addr, length uint64) bool {
	return addr >= base && length <= size && addr-base <= size-length
}

// CheckLocal checks a local SGE against the region it names (its rights and
// its range) and returns StatusSuccess or StatusLocProtErr.
func CheckLocal(mrAccess, need rdmaio.Access, base, size, addr, length uint64) rdmaio.Status {
	if mrAccess&need != need || !InRange(base, size, addr, length) {
		return rdmaio.StatusLocProtErr
	}
	return rdmaio.StatusSuccess
}

// CheckRemote is the target-side check of a remote reference (rkey, addr,
// length) for an operation that needs the given right: the region must grant
// it, the responder QP must accept it, and the range must lie in the region.
// It returns StatusSuccess or StatusRemAccessErr.
func CheckRemote(mrAccess, qpAccess, need rdmaio.Access, base, size, addr, length uint64) rdmaio.Status {
	if mrAccess&need != need || qpAccess&need != need || !InRange(base, size, addr, length) {
		return rdmaio.StatusRemAccessErr
	}
	return rdmaio.StatusSuccess
}

// CheckRegister checks the arguments of PD.RegMR.
func CheckRegister(buf []byte, access rdmaio.Access, maxSize int) error {
	if len(buf) == 0 {
		return fmt.Errorf("%w: register an empty buffer", rdmaio.ErrInvalidArgument)
	}
	if len(buf) > maxSize {
		return fmt.Errorf("%w: register %d bytes (max %d)", rdmaio.ErrInvalidArgument, len(buf), maxSize)
	}
	if !access.Valid() {
		return fmt.Errorf("%w: access %v (remote write and remote atomic need local write)", rdmaio.ErrInvalidArgument, access)
	}
	return nil
}

// FillCap replaces the zero fields of c by the defaults d and checks the
// result against the device limits.
func FillCap(c rdmaio.QPCap, d rdmaio.QPCap, a *rdmaio.DeviceAttr) (rdmaio.QPCap, error) {
	def := func(v *int, dv int) {
		if *v == 0 {
			*v = dv
		}
	}
	def(&c.MaxSendWR, d.MaxSendWR)
	def(&c.MaxRecvWR, d.MaxRecvWR)
	def(&c.MaxSendSGE, d.MaxSendSGE)
	def(&c.MaxRecvSGE, d.MaxRecvSGE)
	def(&c.MaxInline, d.MaxInline)
	check := func(name string, v, lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%w: %s %d (want %d..%d)", rdmaio.ErrInvalidArgument, name, v, lo, hi)
		}
		return nil
	}
	for _, e := range []error{
		check("MaxSendWR", c.MaxSendWR, 1, a.MaxQPWR),
		check("MaxRecvWR", c.MaxRecvWR, 1, a.MaxQPWR),
		check("MaxSendSGE", c.MaxSendSGE, 1, a.MaxSGE),
		check("MaxRecvSGE", c.MaxRecvSGE, 1, a.MaxSGE),
		check("MaxInline", c.MaxInline, 0, a.MaxInline),
	} {
		if e != nil {
			return c, e
		}
	}
	return c, nil
}

// FillSRQ replaces the zero fields of a by the defaults defWR and defSGE
// and checks the result: MaxWR in 1..maxWR, MaxSGE in 1..maxSGE.
func FillSRQ(a rdmaio.SRQAttr, defWR, defSGE, maxWR, maxSGE int) (rdmaio.SRQAttr, error) {
	if a.MaxWR == 0 {
		a.MaxWR = defWR
	}
	if a.MaxSGE == 0 {
		a.MaxSGE = defSGE
	}
	if a.MaxWR < 1 || a.MaxWR > maxWR || a.MaxSGE < 1 || a.MaxSGE > maxSGE {
		return a, fmt.Errorf("%w: MaxWR %d (1..%d), MaxSGE %d (1..%d)", rdmaio.ErrInvalidArgument,
			a.MaxWR, maxWR, a.MaxSGE, maxSGE)
	}
	return a, nil
}
