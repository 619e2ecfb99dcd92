package comm

import (
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Number is the set of fixed-size numeric element types: every integer,
// floating-point and complex type, and types defined on them.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// Real is the set of ordered numeric types: the values of a Loc.
type Real interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// Loc is a value with the index (typically a rank) it came from: the
// element type of the MinLoc and MaxLoc reductions (MPI_DOUBLE_INT and
// friends).
type Loc[V Real] struct {
	Val V
	Idx int
}

// Elem is the set of element types messages and collectives take: the
// Number types and the Loc pairs.
type Elem interface {
	Number | Loc[float64] | Loc[float32] | Loc[int] | Loc[int64] | Loc[int32]
}

// Special ranks and tags.
const (
	// AnySource as the source of a receive or probe matches any sender.
	AnySource = -1
	// AnyTag as the tag of a receive or probe matches any tag.
	AnyTag = -1
	// ProcNull as a peer makes a send or receive complete at once without
	// moving data (its Status has Source ProcNull, Tag AnyTag, Count 0).
	ProcNull = -2
	// TagUB is the largest tag.
	TagUB = math.MaxInt32
	// Undefined as the color of Split leaves the rank out of every new
	// communicator.
	Undefined = -1
)

// Status describes a completed receive or a probed message.
type Status struct {
	// Source is the sender's rank in the communicator.
	Source int
	// Tag is the message's tag.
	Tag int
	// Count is the number of elements received (of the receive's element
	// type; bytes for byte receives and for Probe).
	Count int
	// Bytes is the number of bytes received; for Probe, the length of the
	// message.
	Bytes int
}

// CountOf returns the number of T elements a probed message holds.
func CountOf[T Elem](st Status) int {
	return st.Bytes / int(unsafe.Sizeof(*new(T)))
}

// Error classes. Every error comm returns is an *Error that wraps one of
// these (or a transport error), so errors.Is(err, comm.ErrTruncate) works.
var (
	// ErrTruncate: a message was longer than the receive buffer
	// (MPI_ERR_TRUNCATE). The bytes that fit were delivered.
	ErrTruncate = errors.New("message truncated")
	// ErrRank: a rank outside the communicator (MPI_ERR_RANK).
	ErrRank = errors.New("invalid rank")
	// ErrTag: a negative tag other than AnyTag, or AnyTag on a send
	// (MPI_ERR_TAG).
	ErrTag = errors.New("invalid tag")
	// ErrCommFreed: the communicator was freed (MPI_ERR_COMM).
	ErrCommFreed = errors.New("communicator freed")
	// ErrCount: buffer sizes or counts are inconsistent, or the ranks of a
	// collective passed mismatched arguments (MPI_ERR_COUNT).
	ErrCount = errors.New("invalid count")
	// ErrRoot: the root of a collective is not a rank of the communicator.
	ErrRoot = errors.New("invalid root")
	// ErrOp: the reduction is not defined for the element type
	// (MPI_ERR_OP).
	ErrOp = errors.New("invalid reduction operation")
	// ErrBuffer: a malformed buffer layout (MPI_ERR_BUFFER).
	ErrBuffer = errors.New("invalid buffer")
	// ErrCanceled: the receive was canceled.
	ErrCanceled = errors.New("request canceled")
	// ErrComm: an operation not allowed on this communicator, such as
	// freeing the world.
	ErrComm = errors.New("invalid communicator")
)

// Error is the error type of every comm call: which call, on which
// communicator, with which peer and tag, and the error class.
type Error struct {
	// Call is the function, e.g. "Recv" or "Allreduce".
	Call string
	// Comm names the communicator.
	Comm string
	// Peer is the rank involved (-1 when none; AnySource for a wildcard
	// receive).
	Peer int
	// Tag is the tag involved (-1 when none).
	Tag int
	// Err is the class: one of the Err* values or a transport error.
	Err error
	// Detail says more, e.g. the lengths of a truncated message.
	Detail string
}

// Error formats the error as "comm: Call on comm rank r tag t: class (detail)".
func (e *Error) Error() string {
	s := "comm: " + e.Call + " on " + e.Comm
	if e.Peer != noPeer {
		switch e.Peer {
		case AnySource:
			s += " from any source"
		default:
			s += fmt.Sprintf(" rank %d", e.Peer)
		}
	}
	if e.Tag != noTag {
		if e.Tag == AnyTag {
			s += " any tag"
		} else {
			s += fmt.Sprintf(" tag %d", e.Tag)
		}
	}
	s += ": " + e.Err.Error()
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// Unwrap returns the error class.
func (e *Error) Unwrap() error { return e.Err }

const (
	noPeer = math.MinInt32
	noTag  = math.MinInt32
)

func elemSize[T any]() int { return int(unsafe.Sizeof(*new(T))) }

// overlaps reports whether a and b share memory.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// asBytes views a slice of plain data as bytes, without copying.
func asBytes[T any](s []T) []byte {
	if cap(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*elemSize[T]())
}

// fromBytes views bytes as a slice of T (len(b) must be a multiple of the
// element size and b suitably aligned).
func fromBytes[T any](b []byte) []T {
	if cap(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/elemSize[T]())
}
