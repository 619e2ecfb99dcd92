package shm_test

import (
	"testing"

	"github.com/jiarun/jia/rdmaio"
)

// rcPair is an RC connection in RTS from a QP of device 0 to a QP of
// device 1 (each with its own CQ), with a registered source buffer on
// device 0 and a registered destination buffer on device 1; with an SRQ,
// device 1's QP takes its receives from srq.
type rcPair struct {
	cq   [2]rdmaio.CQ
	qp   [2]rdmaio.QP
	srq  rdmaio.SRQ // nil: the receiver's QP has its own receive queue
	src  []byte     // sender's registered memory (heap)
	srcM rdmaio.MR
	dst  []byte // receiver's registered memory (heap)
	dstM rdmaio.MR
}

func newRCPair(t *testing.T, f *fabric, cp rdmaio.QPCap, withSRQ bool, srcLen, dstLen, rnrRetry int) *rcPair {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	devs := f.Open(t, 2)
	s := &rcPair{src: make([]byte, srcLen), dst: make([]byte, dstLen)}
	var pds [2]rdmaio.PD
	for i := range 2 {
		var err error
		pds[i], err = devs[i].AllocPD()
		must(err)
		s.cq[i], err = devs[i].CreateCQ(1024)
		must(err)
	}
	var err error
	if withSRQ {
		s.srq, err = pds[1].CreateSRQ(rdmaio.SRQAttr{MaxWR: 64, MaxSGE: 1})
		must(err)
	}
	for i := range 2 {
		attr := rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: s.cq[i], RecvCQ: s.cq[i], Cap: cp}
		if i == 1 {
			attr.SRQ = s.srq
		}
		s.qp[i], err = pds[i].CreateQP(attr)
		must(err)
	}
	s.srcM, err = pds[0].RegMR(s.src, rdmaio.AccessLocalWrite)
	must(err)
	s.dstM, err = pds[1].RegMR(s.dst, rdmaio.AccessLocalWrite)
	must(err)
	for i := range 2 {
		must(s.qp[i].Modify(rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote}))
	}
	for i := range 2 {
		must(s.qp[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: devs[1-i].Addr()}, DestQPN: s.qp[1-i].QPN()}))
	}
	for i := range 2 {
		must(s.qp[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rnrRetry, RetryCount: 7}))
	}
	return s
}
