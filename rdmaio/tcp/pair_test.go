package tcp_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/tcp"
)

// pair is two in-process devices with one connected RC QP pair and one UD QP
// each, for the allocation tests and benchmarks.
type pair struct {
	dev    [2]rdmaio.Device
	pd     [2]rdmaio.PD
	cq     [2]rdmaio.CQ
	rc     [2]rdmaio.QP
	ud     [2]rdmaio.QP
	ah     [2]rdmaio.AH
	heap   [2]rdmaio.MR // ordinary memory
	alloc  [2]rdmaio.MR // PD.Alloc memory
	allocB [2][]byte
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
		p.dev[i], err = rdmaio.Open(tcp.Name, rdmaio.Config{Job: job, Rank: i, LocalSize: 2, Options: opts, Secret: testSecret})
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
		p.heap[i], err = p.pd[i].RegMR(make([]byte, size), rdmaio.AccessAll)
		must(err)
		p.allocB[i], err = p.pd[i].Alloc(size)
		must(err)
		p.alloc[i], err = p.pd[i].RegMR(p.allocB[i], rdmaio.AccessAll)
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

// envOptions reads provider options for benchmarks from JIA_TCP_OPTS
// ("key=value,key=value").
func envOptions() map[string]string {
	v := os.Getenv("JIA_TCP_OPTS")
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
// status, or after a minute without (a hang guard). It does not allocate.
func pollN(tb testing.TB, cq rdmaio.CQ, wc []rdmaio.WorkCompletion, n int) {
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

func post1(tb testing.TB, q rdmaio.QP, wr []rdmaio.SendWR) {
	if _, err := q.PostSend(wr); err != nil {
		tb.Fatal(err)
	}
}

// TestServiceTakesOver: a device whose program busy-polls and then stops
// (computes, or polls another device) keeps serving one-sided operations
// through its service goroutine. Busy polling takes the hot connection out
// of the epoll set; the service must put it back before it sleeps.
func TestServiceTakesOver(t *testing.T) {
	p := newPair(t, 1<<20, nil)
	wc := make([]rdmaio.WorkCompletion, 8)
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[1], 0, 64)}}}
	send := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[0], 0, 8)}}}
	write := []rdmaio.SendWR{{ID: 3, Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[0], 0, 8)},
		RemoteAddr: p.alloc[1].Addr(), RKey: p.alloc[1].RKey()}}
	for round := 0; round < 20; round++ {
		// Both programs poll: rank 1's connection becomes hot.
		for i := 0; i < 50; i++ {
			if _, err := p.rc[1].PostRecv(recv); err != nil {
				t.Fatal(err)
			}
			post1(t, p.rc[0], send)
			pollN(t, p.cq[1], wc, 1)
			pollN(t, p.cq[0], wc, 1)
		}
		// Rank 1's program stops polling: its service serves the writes.
		for i := 0; i < 50; i++ {
			post1(t, p.rc[0], write)
			pollN(t, p.cq[0], wc, 1)
		}
	}
}
