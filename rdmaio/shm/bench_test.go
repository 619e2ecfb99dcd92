package shm_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	"github.com/jiarun/jia/rdmaio/shm"
)

const stopImm = 0xffffffff

// serveEcho answers every 8-byte control message with an 8-byte message
// until one carries stopImm. Sends are unsignaled but every 32nd.
func (e *endpoint) serveEcho() error {
	wc := make([]rdmaio.WorkCompletion, 32)
	send := []rdmaio.SendWR{{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.ctrl, ctrlSlots*ctrlSize, 8)}}}
	ctx := context.Background()
	for sent := 0; ; {
		n, err := e.cq.Wait(ctx, wc)
		if err != nil {
			return err
		}
		for _, c := range wc[:n] {
			if c.Status != rdmaio.StatusSuccess {
				return c.Err()
			}
			if !c.Opcode.IsRecv() {
				continue
			}
			if c.Imm == stopImm && c.Flags&rdmaio.WCWithImm != 0 {
				return nil
			}
			if _, err := e.rc.PostRecv(e.rwrs[c.ID]); err != nil {
				return err
			}
			sent++
			send[0].Flags = 0
			if sent%32 == 0 {
				send[0].Flags = rdmaio.SendSignaled
			}
			if _, err := e.rc.PostSend(send); err != nil {
				return err
			}
		}
	}
}

// pinger runs ping-pongs of 8 bytes against serveEcho.
type pinger struct {
	e    *endpoint
	wc   []rdmaio.WorkCompletion
	send []rdmaio.SendWR
	sent int
}

func newPinger(e *endpoint) *pinger {
	return &pinger{e: e, wc: make([]rdmaio.WorkCompletion, 32),
		send: []rdmaio.SendWR{{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.ctrl, ctrlSlots*ctrlSize, 8)}}}}
}

func (p *pinger) run(tb testing.TB, n int) {
	ctx := context.Background()
	for i := 0; i < n; i++ {
		p.sent++
		p.send[0].Flags = 0
		if p.sent%32 == 0 {
			p.send[0].Flags = rdmaio.SendSignaled
		}
		if _, err := p.e.rc.PostSend(p.send); err != nil {
			tb.Fatal(err)
		}
		for got := false; !got; {
			k, err := p.e.cq.Wait(ctx, p.wc)
			if err != nil {
				tb.Fatal(err)
			}
			for _, c := range p.wc[:k] {
				if c.Status != rdmaio.StatusSuccess {
					tb.Fatalf("completion %+v", c)
				}
				if c.Opcode.IsRecv() {
					if _, err := p.e.rc.PostRecv(p.e.rwrs[c.ID]); err != nil {
						tb.Fatal(err)
					}
					got = true
				}
			}
		}
	}
}

func (p *pinger) stop(tb testing.TB) {
	if _, err := p.e.rc.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSendImm, Imm: stopImm, Inline: []byte("stop")}}); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkPingPong measures the 8-byte SEND half round trip (ns/hop):
// between two goroutines on two devices of one process, and between two
// processes (the harness of package rdmaiotest). "raw" is the floor of the
// machine at the time: two threads spinning on atomic words in separate
// cache lines, no queues at all.
func BenchmarkPingPong(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		el := rdmaiotest.SpinPingPong(b.N)
		b.ReportMetric(float64(el.Nanoseconds())/float64(b.N)/2, "ns/hop")
	})
	rdmaiotest.BenchPingPong(b, newBenchFabric())
}

// benchFabric is the fabric of the benchmarks, with provider options from
// JIA_SHM_OPTS ("key=value,key=value"); its ranks can live in different
// processes.
type benchFabric struct{ *fabric }

func newBenchFabric() benchFabric { return benchFabric{&fabric{opts: envOptions()}} }

// NewJob returns the name of a new job (one that TestMain cleans up after a
// crash).
func (benchFabric) NewJob() string { return newJob() }

// OpenRank opens rank of a job whose other ranks may be in other processes.
func (f benchFabric) OpenRank(job string, rank, size int) (rdmaio.Device, error) {
	return rdmaio.Open(shm.Name, rdmaio.Config{Job: job, Rank: rank, LocalSize: size, Options: f.opts})
}

// TestBenchPeer is the peer process of the "processes" benchmarks; it only
// serves when started by them.
func TestBenchPeer(t *testing.T) { rdmaiotest.BenchPeer(t, newBenchFabric()) }

// BenchmarkSameCore is the ping-pong with both ranks pinned to one
// processor, as when ranks outnumber cores: a waiter that spins keeps the
// rank it waits for from running. "spin" spins without limit (each hop then
// waits for the scheduler to preempt the spinner), "default" is the policy
// for ranks that fit on the cores (spin 50 µs, then yield), "oversubscribed"
// the policy chosen when Config.LocalSize exceeds the processors (spin 1 µs,
// then yield).
func BenchmarkSameCore(b *testing.B) {
	for _, c := range []struct {
		name      string
		localSize int
		opts      map[string]string
	}{
		{"spin", 2, map[string]string{"spin": "1h"}},
		{"default", 2, nil},
		{"oversubscribed", 64, nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			job := newJob()
			a := openEndpointCfg(b, rdmaio.Config{Job: job, Rank: 0, LocalSize: c.localSize, Options: c.opts})
			z := openEndpointCfg(b, rdmaio.Config{Job: job, Rank: 1, LocalSize: c.localSize, Options: c.opts})
			a.connect(parseCard(b, z.card()))
			z.connect(parseCard(b, a.card()))
			// Pin every thread of the process (threads created later inherit
			// it) rather than locking goroutines to threads, which would turn
			// runtime.Gosched into thread hand-offs.
			var one unix.CPUSet
			one.Set(0)
			restore, err := pinProcess(&one)
			if err != nil {
				b.Skip(err)
			}
			defer restore()
			done := make(chan error, 1)
			go func() { done <- z.serveEcho() }()
			p := newPinger(a)
			p.run(b, 10)
			b.ResetTimer()
			p.run(b, b.N)
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/hop")
			p.stop(b)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			a.dev.Close()
			z.dev.Close()
		})
	}
}

// BenchmarkIdlePoll is the processor cost of one poll of an idle CQ with
// three receiving QPs (and three sending ones), as each spin of CQ.Wait
// polls: a spinning waiter notices a message up to one such poll late.
func BenchmarkIdlePoll(b *testing.B) {
	job := newJob()
	a := openEndpointCfg(b, rdmaio.Config{Job: job, Rank: 0, LocalSize: 2})
	z := openEndpointCfg(b, rdmaio.Config{Job: job, Rank: 1, LocalSize: 2})
	defer a.dev.Close()
	defer z.dev.Close()
	a.connect(parseCard(b, z.card()))
	z.connect(parseCard(b, a.card()))
	wc := make([]rdmaio.WorkCompletion, 16)
	for b.Loop() {
		if n := a.cq.Poll(wc); n != 0 {
			b.Fatalf("idle CQ polled %d completions", n)
		}
	}
}

// pinProcess sets the CPU affinity of every thread of this process and
// returns a function that restores the previous one.
func pinProcess(set *unix.CPUSet) (func(), error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, err
	}
	apply := func(s *unix.CPUSet) error {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, s); err != nil && err != unix.ESRCH {
				return err
			}
		}
		return nil
	}
	if err := apply(set); err != nil {
		apply(&old)
		return nil, err
	}
	return func() { apply(&old) }, nil
}

// BenchmarkOneSided: 8-byte RDMA WRITE, READ and fetch-and-add latency into
// shared memory (PD.Alloc).
func BenchmarkOneSided(b *testing.B) { rdmaiotest.BenchOneSided(b, newBenchFabric()) }

// BenchmarkBandwidth: RDMA WRITE and SEND bandwidth between shared memory
// regions, 4 KiB to 4 MiB.
func BenchmarkBandwidth(b *testing.B) { rdmaiotest.BenchBandwidth(b, newBenchFabric()) }

// BenchmarkMessageRate: 8-byte SENDs per second, one per doorbell or 32.
func BenchmarkMessageRate(b *testing.B) { rdmaiotest.BenchMessageRate(b, newBenchFabric()) }

// BenchmarkHopCPU is the processor cost of one 8-byte message in one
// goroutine (post a receive, post the SEND, poll it out).
func BenchmarkHopCPU(b *testing.B) { rdmaiotest.BenchHopCPU(b, newBenchFabric()) }

// BenchmarkHopCPUSRQ is BenchmarkHopCPU with the receiver's RC QP on a
// shared receive queue and alone on its CQ, as a message layer with one
// peer uses it: the processor cost of one 8-byte message in one goroutine
// (post a receive to the SRQ, post the SEND, poll it out).
func BenchmarkHopCPUSRQ(b *testing.B) {
	p := newSRQPair(b)
	wc := make([]rdmaio.WorkCompletion, 4)
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.z.ctrl, 0, 64)}}}
	send := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.a.ctrl, 0, 8)}}}
	poll := func(c rdmaio.CQ) {
		for {
			n := c.Poll(wc)
			for _, w := range wc[:n] {
				if w.Status != rdmaio.StatusSuccess {
					b.Fatalf("completion %+v", w)
				}
			}
			if n > 0 {
				return
			}
		}
	}
	defer rdmaiotest.ThreadCPU(b)()
	for i := 0; b.Loop(); i++ {
		send[0].Flags = 0
		if i%32 == 31 {
			send[0].Flags = rdmaio.SendSignaled
		}
		if _, err := p.srq.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		if _, err := p.aq.PostSend(send); err != nil {
			b.Fatal(err)
		}
		poll(p.rcq)
		if i%32 == 31 {
			poll(p.scq)
		}
	}
}

// BenchmarkIdlePollOne is the processor cost of one poll of an idle CQ with
// one receiving QP (on an SRQ), as each spin of CQ.Wait polls.
func BenchmarkIdlePollOne(b *testing.B) {
	p := newSRQPair(b)
	wc := make([]rdmaio.WorkCompletion, 4)
	for b.Loop() {
		if n := p.rcq.Poll(wc); n != 0 {
			b.Fatalf("idle CQ polled %d completions", n)
		}
	}
}

// srqPair is an RC connection from a.aq (alone on CQ scq) to z.zq (alone
// on CQ rcq, receiving from srq).
type srqPair struct {
	a, z     *endpoint
	srq      rdmaio.SRQ
	rcq, scq rdmaio.CQ
	aq, zq   rdmaio.QP
}

func newSRQPair(b *testing.B) *srqPair {
	job := newJob()
	p := &srqPair{a: openEndpointCfg(b, rdmaio.Config{Job: job, Rank: 0, LocalSize: 2}),
		z: openEndpointCfg(b, rdmaio.Config{Job: job, Rank: 1, LocalSize: 2})}
	b.Cleanup(func() {
		p.a.dev.Close()
		p.z.dev.Close()
	})
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	var err error
	p.srq, err = p.z.pd.CreateSRQ(rdmaio.SRQAttr{MaxWR: 64, MaxSGE: 1})
	must(err)
	p.rcq, err = p.z.dev.CreateCQ(64)
	must(err)
	p.scq, err = p.a.dev.CreateCQ(64)
	must(err)
	p.zq, err = p.z.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: p.rcq, RecvCQ: p.rcq, SRQ: p.srq})
	must(err)
	p.aq, err = p.a.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: p.scq, RecvCQ: p.scq})
	must(err)
	for _, s := range []struct {
		q    rdmaio.QP
		peer rdmaio.Device
		dest rdmaio.QP
	}{{p.aq, p.z.dev, p.zq}, {p.zq, p.a.dev, p.aq}} {
		must(s.q.Modify(rdmaio.QPAttr{State: rdmaio.StateInit}))
		must(s.q.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: s.peer.Addr()}, DestQPN: s.dest.QPN()}))
		must(s.q.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite}))
	}
	return p
}
