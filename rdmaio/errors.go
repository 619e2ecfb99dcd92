package rdmaio

import (
	"errors"
	"fmt"
	"strconv"
)

// Errors returned by providers, wrapped with context; test them with
// errors.Is.
var (
	// ErrUnknownProvider: Open was given a name no provider registered.
	ErrUnknownProvider = errors.New("rdmaio: unknown provider")
	// ErrNoDevice: the provider has no usable device on this machine.
	ErrNoDevice = errors.New("rdmaio: no device")
	// ErrClosed: the object (or its device) was closed.
	ErrClosed = errors.New("rdmaio: closed")
	// ErrInvalidArgument: an attribute, size or flag is out of range.
	ErrInvalidArgument = errors.New("rdmaio: invalid argument")
	// ErrInvalidTransition: the QP state machine does not allow the
	// requested modification.
	ErrInvalidTransition = errors.New("rdmaio: invalid QP state transition")
	// ErrInvalidState: the QP's state does not allow the post.
	ErrInvalidState = errors.New("rdmaio: operation not allowed in QP state")
	// ErrQueueFull: posting would exceed the queue depth.
	ErrQueueFull = errors.New("rdmaio: work queue full")
	// ErrTooManySGE: the scatter/gather list is longer than the QP allows.
	ErrTooManySGE = errors.New("rdmaio: too many SGEs")
	// ErrMessageTooLong: the message exceeds the path MTU (UD), the inline
	// limit or the largest message the provider supports.
	ErrMessageTooLong = errors.New("rdmaio: message too long")
	// ErrOpcode: the opcode is unknown or not allowed on the QP type.
	ErrOpcode = errors.New("rdmaio: opcode not supported")
	// ErrAtomic: an atomic request is malformed (not one 8-byte SGE, or an
	// unaligned remote address).
	ErrAtomic = errors.New("rdmaio: malformed atomic request")
	// ErrInUse: the object still has dependants (a PD with QPs, a CQ with QPs,
	// memory that is still registered or referenced by work requests).
	ErrInUse = errors.New("rdmaio: in use")
	// ErrNotSupported: the provider cannot do this.
	ErrNotSupported = errors.New("rdmaio: not supported")
	// ErrBadAddress: a peer address (AHAttr.Addr) cannot be decoded or
	// resolved, or names a QP that does not exist.
	ErrBadAddress = errors.New("rdmaio: bad peer address")
	// ErrBadCard: an endpoint card cannot be decoded.
	ErrBadCard = errors.New("rdmaio: bad endpoint card")
	// ErrWrongJob: an endpoint card belongs to another job.
	ErrWrongJob = errors.New("rdmaio: endpoint card of another job")
)

// WCError is the error form of a failed work completion.
type WCError struct {
	ID        uint64
	QPN       uint32
	Opcode    WCOpcode
	Status    Status
	VendorErr uint32
}

// Error describes the failed work request.
func (e *WCError) Error() string {
	s := fmt.Sprintf("rdmaio: qp %d: work request %d (%v): %v", e.QPN, e.ID, e.Opcode, e.Status)
	if e.VendorErr != 0 {
		s += " (vendor error " + strconv.FormatUint(uint64(e.VendorErr), 10) + ")"
	}
	return s
}
