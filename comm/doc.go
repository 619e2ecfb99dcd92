// Package comm is jiarun's message passing: MPI's point-to-point semantics,
// communicators and collectives, in Go, on any transport that implements
// the small interface of package transport (rdmaio's queue pairs in a job;
// the in-memory transport of package memtransport in tests).
//
// # Ranks and communicators
//
// Every rank of a job calls NewWorld once with its transport and gets the
// world communicator: Rank() is this rank, Size() the number of ranks.
// (Programs normally get it from package jia, which builds the transport.)
//
//	world, err := comm.NewWorld(tr, nil)
//
// A Comm is a group of ranks with a communication context of its own:
// messages sent on one communicator never match receives on another.
// Dup makes a copy with a new context (for a library's private traffic),
// Split(color, key) partitions a communicator, Free releases one. All three
// are collective: every member calls them, in the same order.
//
// # Point to point
//
// Buffers are typed slices of any fixed-size numeric type (the Number
// constraint: every integer, float and complex type and types defined on
// them) or of Loc pairs; []byte works as is, and SendBytes, RecvBytes,
// IsendBytes and IrecvBytes are method forms for it.
//
//	err := comm.Send(world, []float64{1, 2, 3}, 1, 7)     // to rank 1, tag 7
//	st, err := comm.Recv(world, buf, comm.AnySource, comm.AnyTag)
//	// st.Source, st.Tag, st.Count (elements), st.Bytes
//
// Receives match by (source, tag, communicator); AnySource and AnyTag are
// wildcards. Messages from one sender on one communicator are matched in
// the order they were sent, wildcards included (MPI's non-overtaking rule);
// among posted receives, the earliest matching one wins. A message longer
// than the receive buffer fills the buffer and the receive fails with an
// error wrapping ErrTruncate. ProcNull as a peer makes a send or receive a
// no-op, which simplifies the edges of a non-periodic shift.
//
// Isend and Irecv start operations and return a Request; Wait and Test
// complete one, WaitAll, WaitAny and TestAll several. A Request is a small
// value; once a call has reported it complete it is inactive (the request
// object went back to a pool), like MPI_REQUEST_NULL. Sendrecv exchanges
// with two peers at once without deadlock. Probe and Iprobe report the
// envelope and length of a message without receiving it; CountOf converts
// the length to elements.
//
// Strided data is described by Vector (count blocks of BlockLen elements,
// Stride apart: MPI_Type_vector). SendVector and IsendVector hand the
// blocks to the transport as a gather list, so they go from user memory
// without a packing copy, unless the blocks are small or more numerous
// than the transport's gather limit (Options.PackVectors forces packing);
// a vector of 32 KiB or more to a rank of the same host is packed into
// memory of the transport that the ranks of the host read directly
// (transport.Stager: shared memory segments of the host, at most 32 MiB a
// rank, kept for the next sends and freed with the transport), 16 KiB at
// a time in the sender's polls while the receiver copies out what is
// packed (a staged rendezvous: the two copies overlap; like Open MPI's
// pipelined copies of non-contiguous data, it needs the sender to keep
// calling comm); RecvVector and IrecvVector scatter straight into the blocks (a
// rendezvous into blocks under 2 KiB reads the message in large pieces
// into a staging buffer and scatters it from there).
//
// # Protocols
//
// Messages up to the eager limit (Options.EagerLimit; default the
// transport's preference for the path to the destination — over
// qtransport 16 KiB through shared memory and 64 KiB over tcp, where a
// rendezvous costs two more network crossings — else 16 KiB) are sent at
// once and copied by the
// transport: the send completes immediately, unless the transport had to
// keep the message in a backlog of its own because the destination has no
// room (transport.Backlogger): then a blocking send, or the Wait of an
// Isend, drives progress until the backlog has left, so that a rank
// streaming sends to a slower one waits for it (as MPI_Send may) instead
// of buffering without bound. Larger messages use the
// rendezvous protocol (package proto): the sender announces the message
// (RTS); when a receive matches, the receiver either reads the data
// straight from the sender's memory with one-sided READs into its buffer
// and answers FIN (zero copy, when the transport has one-sided
// operations), or answers CTS and the sender streams the data. A
// rendezvous send completes when the receiver has the data. With
// Options.SplitMin, large messages between contiguous buffers are copied
// by both ends at once: the receiver reads one half while the sender
// writes the other into the receive buffer.
//
// Progress is made inside comm calls: a rank that computes without calling
// comm does not serve the rendezvous of its peers until its next call (as
// in most MPI libraries). A waiting call polls, then yields the processor,
// then blocks in the transport (Options.Spin, Yield, Sleep), so that ranks
// that share cores do not starve the rank they wait for. While it spins
// for a receive from a known rank, a waiting call watches that rank alone
// where the transport allows it (transport.Taker) and takes an eager
// message straight into the receive's buffer; it polls the whole transport
// when the rank sends anything else and, once the spinning is over, every
// few rounds. A blocking receive goes further while nothing else on its
// communicator could match first (no receive posted, no message queued
// that it would match): it posts nothing and takes its message from the
// transport itself, so that no request, matching queue or completion lies
// between the message's arrival and the call's return. For the first few
// microseconds it waits for the message with the rank's lock held (and the
// transport's), so that nothing stands between the message and the call's
// return: another goroutine of the rank that calls comm meanwhile may wait
// that long.
//
// # Collectives
//
// Collectives run on a second context of the communicator, so they never
// match user messages. The algorithm depends on the message size and the
// number of ranks, after MPICH's choices; every algorithm is correct for
// any rank count, powers of two or not:
//
//	Barrier     dissemination
//	Bcast       binomial tree; large (≥ 12 KiB and ≥ 8 ranks): binomial
//	            scatter + ring allgather; ≤ 4 ranks on one host, > 16 KiB:
//	            linear (≤ 64 KiB in 16 KiB eager chunks; 32 KiB with
//	            2 ranks)
//	Reduce      binomial tree; large commutative: Rabenseifner (recursive-
//	            halving reduce-scatter, then the pieces to the root)
//	Allreduce   recursive doubling (≤ 2 KiB, or non-commutative);
//	            Rabenseifner; 3 or 4 ranks up to 2 KiB: gather-all (every
//	            vector to every rank at once, combined in rank order);
//	            3 or 4 ranks up to 64 KiB: direct (reduce-scatter and
//	            allgather, each with every message posted at once); ring
//	            (≥ 512 KiB on non-power-of-two counts, ≥ 2 MiB on more
//	            than 4 ranks)
//	Gather,     binomial tree (total ≤ 64 KiB); linear
//	Scatter
//	Allgather   recursive doubling (power of two, < 512 KiB); Bruck
//	            (< 80 KiB); ring
//	Alltoall    Bruck (blocks ≤ 256 B, ≥ 8 ranks); all posted at once
//	            (≤ 32 KiB, or ≤ 4 ranks); pairwise exchange
//	ReduceScatter  pairwise exchange; non-commutative: reduce + scatter
//	Scan, Exscan   recursive doubling
//	Gatherv, Scatterv  linear;  Allgatherv ring;  Alltoallv pairwise order,
//	            up to 32 peers at once, the block to itself copied meanwhile
//
// Reductions take an Op: Sum, Prod, Min, Max, LAnd, LOr, LXor, BAnd, BOr,
// BXor, MinLoc and MaxLoc (on Loc value–index pairs), or one made with
// NewOp. Contributions are combined in an order fixed by the algorithm and
// the rank count, never by message timing, so results are bit-identical on
// every rank and in every run with the same number of ranks;
// non-commutative operations are combined in rank order. send and recv may
// be the same slice for Reduce, Allreduce, Scan and Exscan (MPI_IN_PLACE).
// A rank whose counts disagree with its peers' gets ErrCount where the
// mismatch shows in a message.
//
// Collectives, Dup, Split and Free on one communicator must be called by
// one goroutine at a time and in the same order on every rank;
// point-to-point calls may come from several goroutines at once.
//
// # Errors
//
// Every error is an *Error naming the call, the communicator, the peer
// rank and the tag, wrapping a class: ErrTruncate, ErrRank, ErrTag,
// ErrCommFreed, ErrCount, ErrRoot, ErrOp, ErrBuffer, ErrCanceled, ErrComm,
// or a transport error. Test with errors.Is:
//
//	if _, err := comm.Recv(world, buf, 0, 1); errors.Is(err, comm.ErrTruncate) { … }
//
// # Performance
//
// The steady state of point-to-point calls and of small collectives
// allocates nothing: requests, protocol state, match-queue entries and
// eager buffers are pooled, and typed slices are sent as their bytes
// without conversion (all ranks must share the byte order). An eager send,
// blocking or not, goes straight to the transport without the protocol
// engine or the rank's lock; a waiting call whose transport can tell that
// nothing arrived (transport.Idler) spins on that check alone.
//
// # MPI names
//
//	MPI_Send/Recv/Sendrecv      Send, Recv, Sendrecv (+ Vector, Bytes forms)
//	MPI_Isend/Irecv             Isend, Irecv → Request
//	MPI_Wait/Test/Cancel        Request.Wait, Request.Test, Request.Cancel
//	MPI_Waitall/Waitany/Testall WaitAll, WaitAny, TestAll
//	MPI_Probe/Iprobe            Comm.Probe, Comm.Iprobe; MPI_Get_count: CountOf
//	MPI_Comm_dup/split/free     Comm.Dup, Comm.Split, Comm.Free
//	MPI_Op_create               NewOp
//	MPI_ANY_SOURCE/ANY_TAG/PROC_NULL/UNDEFINED  AnySource, AnyTag, ProcNull, Undefined
package comm
