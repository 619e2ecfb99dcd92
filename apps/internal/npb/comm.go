package npb

// Op is a reduction operation for the Allreduce methods of [Comm].
type Op int

// The reductions the kernels use (MPI_SUM, MPI_MAX, MPI_MIN).
const (
	Sum Op = iota
	Max
	Min
)

// String returns the MPI name of the operation.
func (op Op) String() string {
	switch op {
	case Sum:
		return "MPI_SUM"
	case Max:
		return "MPI_MAX"
	case Min:
		return "MPI_MIN"
	}
	return "Op(?)"
}

// ProcNull is the rank that means "nobody" in [Comm.SendrecvFloat64], like
// MPI_PROC_NULL: sending to it or receiving from it completes at once and
// moves no data. It turns Sendrecv into a plain blocking send or receive.
const ProcNull = -1

// Comm is the communicator the kernels are written against: the few MPI
// calls that NPB-MPI uses for EP, IS, CG, MG and FT, slice-based so that a
// call allocates nothing. The jiarun comm package satisfies it through a thin
// adapter; package npbtest has an in-process implementation (goroutines).
//
// Every method has the semantics of the MPI call it is named after, on a
// communicator holding all ranks (MPI_COMM_WORLD). Collectives must be called
// by every rank in the same order. Counts, displacements and lengths are in
// elements, not bytes. Unless stated otherwise, input and output slices must
// not overlap. An error means the job cannot go on; the kernels return it.
type Comm interface {
	// Rank is this process's rank, 0 <= Rank() < Size() (MPI_Comm_rank).
	Rank() int
	// Size is the number of ranks (MPI_Comm_size).
	Size() int

	// Barrier blocks until every rank has called it (MPI_Barrier).
	Barrier() error

	// AllreduceFloat64 combines in element-wise over all ranks with op and
	// leaves the result in out on every rank (MPI_Allreduce, MPI_DOUBLE).
	// len(in) == len(out), the same on every rank; out may be in itself
	// (MPI_IN_PLACE). Every rank receives bit-identical results.
	AllreduceFloat64(in, out []float64, op Op) error
	// AllreduceInt64 is AllreduceFloat64 for int64 (MPI_INT64_T).
	AllreduceInt64(in, out []int64, op Op) error

	// AlltoallInt32 sends block p of send (block length len(send)/Size())
	// to rank p and receives rank p's block for this rank into block p of
	// recv (MPI_Alltoall, MPI_INT32_T). len(send) == len(recv), a multiple
	// of Size().
	AlltoallInt32(send, recv []int32) error
	// AlltoallvInt32 sends send[sendDispls[p]:][:sendCounts[p]] to rank p
	// and receives from rank p into recv[recvDispls[p]:][:recvCounts[p]]
	// (MPI_Alltoallv, MPI_INT32_T). The count arrays have Size() entries;
	// recvCounts[p] on this rank must equal sendCounts[me] on rank p.
	AlltoallvInt32(send []int32, sendCounts, sendDispls []int, recv []int32, recvCounts, recvDispls []int) error
	// AlltoallvComplex128 is AlltoallvInt32 for complex128
	// (MPI_DOUBLE_COMPLEX).
	AlltoallvComplex128(send []complex128, sendCounts, sendDispls []int, recv []complex128, recvCounts, recvDispls []int) error

	// SendrecvFloat64 sends send to rank dst with tag sendTag and receives
	// a message from rank src with tag recvTag into recv, as one call that
	// cannot deadlock against a matching SendrecvFloat64 on the other side
	// (MPI_Sendrecv, MPI_DOUBLE). Messages between a pair of ranks with the
	// same tag are received in the order they were sent (non-overtaking).
	// The received message may be shorter than recv, not longer. dst or
	// src may be ProcNull, and either may be this rank itself. The send may
	// block until the matching receive is posted (synchronous mode is a
	// valid implementation), so callers must order plain sends and receives
	// as MPI requires.
	SendrecvFloat64(send []float64, dst, sendTag int, recv []float64, src, recvTag int) error
}
