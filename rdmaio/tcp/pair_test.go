package tcp_test

import (
	"os"
	"strings"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	"github.com/jiarun/jia/rdmaio/tcp"
)

// pair is two in-process devices with one connected RC QP pair and one UD QP
// each, for the allocation tests and benchmarks.
type pair = rdmaiotest.Pair

const qkey = rdmaiotest.PairQKey

func newPair(tb testing.TB, size int, opts map[string]string) *pair {
	tb.Helper()
	if opts == nil {
		opts = envOptions()
	}
	job := newJob()
	return rdmaiotest.NewPair(tb, func(rank int) (rdmaio.Device, error) {
		return rdmaio.Open(tcp.Name, rdmaio.Config{Job: job, Rank: rank, LocalSize: 2, Options: opts, Secret: testSecret})
	}, size, rdmaio.AccessAll)
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

// pollN polls cq until it has returned n completions (rdmaiotest.PollN).
func pollN(tb testing.TB, cq rdmaio.CQ, wc []rdmaio.WorkCompletion, n int) {
	rdmaiotest.PollN(tb, cq, wc, n)
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
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[1], 0, 64)}}}
	send := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[0], 0, 8)}}}
	write := []rdmaio.SendWR{{ID: 3, Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[0], 0, 8)},
		RemoteAddr: p.Alloc[1].Addr(), RKey: p.Alloc[1].RKey()}}
	for round := 0; round < 20; round++ {
		// Both programs poll: rank 1's connection becomes hot.
		for i := 0; i < 50; i++ {
			if _, err := p.RC[1].PostRecv(recv); err != nil {
				t.Fatal(err)
			}
			post1(t, p.RC[0], send)
			pollN(t, p.CQ[1], wc, 1)
			pollN(t, p.CQ[0], wc, 1)
		}
		// Rank 1's program stops polling: its service serves the writes.
		for i := 0; i < 50; i++ {
			post1(t, p.RC[0], write)
			pollN(t, p.CQ[0], wc, 1)
		}
	}
}
