package npb

import "errors"

// selfComm is a one-rank Comm for internal tests (npbtest imports this
// package, so internal tests cannot use it).
type selfComm struct{}

func (selfComm) Rank() int      { return 0 }
func (selfComm) Size() int      { return 1 }
func (selfComm) Barrier() error { return nil }
func (selfComm) AllreduceFloat64(in, out []float64, op Op) error {
	copy(out, in)
	return nil
}
func (selfComm) AllreduceInt64(in, out []int64, op Op) error {
	copy(out, in)
	return nil
}
func (selfComm) AlltoallInt32(send, recv []int32) error {
	copy(recv, send)
	return nil
}
func (selfComm) AlltoallvInt32(send []int32, sc, sd []int, recv []int32, rc, rd []int) error {
	copy(recv[rd[0]:rd[0]+rc[0]], send[sd[0]:sd[0]+sc[0]])
	return nil
}
func (selfComm) AlltoallvComplex128(send []complex128, sc, sd []int, recv []complex128, rc, rd []int) error {
	copy(recv[rd[0]:rd[0]+rc[0]], send[sd[0]:sd[0]+sc[0]])
	return nil
}
func (selfComm) SendrecvFloat64(send []float64, dst, st int, recv []float64, src, rt int) error {
	if dst != src {
		return errors.New("selfComm: only self messages")
	}
	copy(recv, send)
	return nil
}
