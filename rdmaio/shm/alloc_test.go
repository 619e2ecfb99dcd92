package shm_test

import (
	"os"
	"strings"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	"github.com/jiarun/jia/rdmaio/shm"
)

// pair is two in-process devices with one connected RC QP pair and one UD QP
// each, for the tests of this package.
type pair struct {
	dev      [2]rdmaio.Device
	pd       [2]rdmaio.PD
	cq       [2]rdmaio.CQ
	rc       [2]rdmaio.QP
	ud       [2]rdmaio.QP
	ah       [2]rdmaio.AH
	heap     [2]rdmaio.MR // ordinary memory
	shared   [2]rdmaio.MR // PD.Alloc memory
	sharedMB [2][]byte
}

const qkey = 0x600d

func newPair(tb testing.TB, size int, opts map[string]string) *pair {
	tb.Helper()
	if opts == nil {
		opts = envOptions()
	}
	p := &pair{}
	job := newJob()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	var err error
	for i := range 2 {
		p.dev[i], err = rdmaio.Open(shm.Name, rdmaio.Config{Job: job, Rank: i, LocalSize: 2, Options: opts})
		must(err)
		p.pd[i], err = p.dev[i].AllocPD()
		must(err)
		p.cq[i], err = p.dev[i].CreateCQ(4096)
		must(err)
		cp := rdmaio.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxInline: 64}
		p.rc[i], err = p.pd[i].CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: p.cq[i], RecvCQ: p.cq[i], Cap: cp})
		must(err)
		p.ud[i], err = p.pd[i].CreateQP(rdmaio.QPInitAttr{Type: rdmaio.UD, SendCQ: p.cq[i], RecvCQ: p.cq[i], Cap: cp})
		must(err)
		heapAccess := rdmaio.AccessAll &^ rdmaio.AccessRemoteAtomic
		if opts["cma"] == "off" {
			heapAccess = rdmaio.AccessLocalWrite
		}
		p.heap[i], err = p.pd[i].RegMR(make([]byte, size), heapAccess)
		must(err)
		p.sharedMB[i], err = p.pd[i].Alloc(size)
		must(err)
		p.shared[i], err = p.pd[i].RegMR(p.sharedMB[i], rdmaio.AccessAll)
		must(err)
	}
	for i := range 2 {
		j := 1 - i
		must(p.rc[i].Modify(rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote}))
		must(p.ud[i].Modify(rdmaio.QPAttr{State: rdmaio.StateInit, QKey: qkey}))
		p.ah[i], err = p.pd[i].CreateAH(rdmaio.AHAttr{Addr: p.dev[j].Addr()})
		must(err)
	}
	for i := range 2 {
		j := 1 - i
		must(p.rc[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: p.dev[j].Addr()}, DestQPN: p.rc[j].QPN()}))
		must(p.ud[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTR}))
	}
	for i := range 2 {
		must(p.rc[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite}))
		must(p.ud[i].Modify(rdmaio.QPAttr{State: rdmaio.StateRTS}))
	}
	tb.Cleanup(func() {
		for i := range 2 {
			if err := p.dev[i].Close(); err != nil {
				tb.Error(err)
			}
		}
	})
	return p
}

// envOptions reads provider options for benchmarks from JIA_SHM_OPTS
// ("key=value,key=value").
func envOptions() map[string]string {
	v := os.Getenv("JIA_SHM_OPTS")
	if v == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		m[k] = val
	}
	return m
}

// pollN polls cq until it has returned n completions and fails on an error
// status. It does not allocate.
func pollN(tb testing.TB, cq rdmaio.CQ, wc []rdmaio.WorkCompletion, n int) {
	for n > 0 {
		k := cq.Poll(wc)
		for i := range wc[:k] {
			if wc[i].Status != rdmaio.StatusSuccess {
				tb.Fatalf("completion %+v", wc[i])
			}
		}
		n -= k
	}
}

// TestZeroAllocs: posting and polling allocate nothing on the hot paths
// (the allocation check of package rdmaiotest).
func TestZeroAllocs(t *testing.T) { rdmaiotest.Allocs(t, &fabric{}) }
