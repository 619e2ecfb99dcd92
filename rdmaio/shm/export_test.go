package shm

import "github.com/jiarun/jia/rdmaio"

// CMACalls returns how many process_vm_readv/writev calls the one-sided
// operations of x, an RC QP of this provider, have made.
func CMACalls(x rdmaio.QP) uint64 {
	q := x.(*qp)
	q.smu.Lock()
	defer q.smu.Unlock()
	return q.cmaCalls
}

// RingBytes returns how many bytes of its peer's ring x, an RC QP of this
// provider, has filled with entries since it was connected.
func RingBytes(x rdmaio.QP) uint64 {
	q := x.(*qp)
	q.smu.Lock()
	defer q.smu.Unlock()
	return q.prod
}

// AckReads returns how many times x, an RC QP of this provider, read its
// consumer's cAcked word to complete its SENDs.
func AckReads(x rdmaio.QP) uint64 {
	q := x.(*qp)
	q.smu.Lock()
	defer q.smu.Unlock()
	return q.ackReads
}
