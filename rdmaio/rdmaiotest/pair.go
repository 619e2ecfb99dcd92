package rdmaiotest

import (
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// Pair is two devices of one provider in this process, each with a PD, a
// CQ, an RC QP connected to the other's, a UD QP in RTS with an address
// handle of the other device, and two registered buffers: one of ordinary
// Go memory and one from PD.Alloc. Providers' own tests and benchmarks use
// it for what the suite does not cover.
type Pair struct {
	Dev      [2]rdmaio.Device
	PD       [2]rdmaio.PD
	CQ       [2]rdmaio.CQ
	RC       [2]rdmaio.QP
	UD       [2]rdmaio.QP
	AH       [2]rdmaio.AH // AH[i] addresses device 1-i
	Heap     [2]rdmaio.MR // ordinary Go memory
	Alloc    [2]rdmaio.MR // PD.Alloc memory
	AllocBuf [2][]byte    // the memory of Alloc
}

// PairQKey is the Q_Key of a Pair's UD QPs.
const PairQKey = 0x600d

// NewPair opens two devices with open (called with rank 0 and 1), builds a
// Pair with buffers of size bytes (Heap registered with heapAccess, Alloc
// with every right) and closes the devices when the test ends. Any error
// fails tb.
func NewPair(tb testing.TB, open func(rank int) (rdmaio.Device, error), size int, heapAccess rdmaio.Access) *Pair {
	tb.Helper()
	p := &Pair{}
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	var err error
	for i := range 2 {
		p.Dev[i], err = open(i)
		must(err)
		dev := p.Dev[i]
		tb.Cleanup(func() {
			if err := dev.Close(); err != nil {
				tb.Error(err)
			}
		})
		p.PD[i], err = p.Dev[i].AllocPD()
		must(err)
		p.CQ[i], err = p.Dev[i].CreateCQ(4096)
		must(err)
		cp := rdmaio.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxInline: 64}
		p.RC[i], err = p.PD[i].CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: p.CQ[i], RecvCQ: p.CQ[i], Cap: cp})
		must(err)
		p.UD[i], err = p.PD[i].CreateQP(rdmaio.QPInitAttr{Type: rdmaio.UD, SendCQ: p.CQ[i], RecvCQ: p.CQ[i], Cap: cp})
		must(err)
		p.Heap[i], err = p.PD[i].RegMR(make([]byte, size), heapAccess)
		must(err)
		p.AllocBuf[i], err = p.PD[i].Alloc(size)
		must(err)
		p.Alloc[i], err = p.PD[i].RegMR(p.AllocBuf[i], rdmaio.AccessAll)
		must(err)
	}
	for i := range 2 {
		j := 1 - i
		must(p.RC[i].Modify(rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote}))
		must(p.UD[i].Modify(rdmaio.QPAttr{State: rdmaio.StateInit, QKey: PairQKey}))
		p.AH[i], err = p.PD[i].CreateAH(rdmaio.AHAttr{Addr: p.Dev[j].Addr()})
		must(err)
	}
	for i := range 2 {
		j := 1 - i
		must(p.RC[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: p.Dev[j].Addr()}, DestQPN: p.RC[j].QPN()}))
		must(p.UD[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTR}))
	}
	for i := range 2 {
		must(p.RC[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite}))
		must(p.UD[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTS}))
	}
	return p
}

// PollN polls cq until it has returned n completions, failing tb on an
// error status or after a minute without any completion (a hang guard).
// It does not allocate.
func PollN(tb testing.TB, cq rdmaio.CQ, wc []rdmaio.WorkCompletion, n int) {
	var start time.Time
	for i := 0; n > 0; i++ {
		k := cq.Poll(wc)
		for i := range wc[:k] {
			if wc[i].Status != rdmaio.StatusSuccess {
				tb.Fatalf("completion %+v", wc[i])
			}
		}
		n -= k
		if k > 0 {
			i, start = 0, time.Time{}
		} else if i&4095 == 4095 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > time.Minute {
				tb.Fatalf("no completion for a minute, %d missing", n)
			}
		}
	}
}
