package jia

import "github.com/jiarun/jia/comm"

// JIAJIA's message calls, on World's message passing. Like the other Jia
// calls they return no errors: a failure ends the job through JiaError.

// JiaSend sends buf to rank toproc with tag (JIAJIA's jia_send).
func JiaSend(buf []byte, toproc, tag int) {
	if err := comm.Send(World(), buf, toproc, tag); err != nil {
		JiaError("jia_send to rank %d, tag %d: %v", toproc, tag, err)
	}
}

// JiaRecv receives into buf a message from rank fromproc (or any rank,
// with fromproc < 0) with tag (any tag, with tag < 0), and returns its
// length (JIAJIA's jia_recv). A message longer than buf ends the job.
func JiaRecv(buf []byte, fromproc, tag int) int {
	if fromproc < 0 {
		fromproc = comm.AnySource
	}
	if tag < 0 {
		tag = comm.AnyTag
	}
	st, err := comm.Recv(World(), buf, fromproc, tag)
	if err != nil {
		JiaError("jia_recv from rank %d, tag %d: %v", fromproc, tag, err)
	}
	return st.Count
}

// JiaBcast broadcasts buf from rank root to every rank (JIAJIA's
// jia_bcast).
func JiaBcast(buf []byte, root int) {
	if err := comm.Bcast(World(), buf, root); err != nil {
		JiaError("jia_bcast from rank %d: %v", root, err)
	}
}

// JiaReduce combines every rank's send with op (comm.Sum, comm.Max,
// comm.Min, …) into recv on rank root (JIAJIA's jia_reduce).
func JiaReduce[T comm.Elem](send, recv []T, op comm.Op, root int) {
	if err := comm.Reduce(World(), send, recv, op, root); err != nil {
		JiaError("jia_reduce to rank %d: %v", root, err)
	}
}
