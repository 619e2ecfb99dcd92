package shm_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
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
// processes. "raw" is the floor of the machine at the time: two goroutines
// spinning on atomic words in separate cache lines, no queues at all.
func BenchmarkPingPong(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		type line struct {
			v atomic.Uint64
			_ [56]byte
		}
		var x, y line
		n := uint64(b.N)
		go func() {
			runtime.LockOSThread()
			for i := uint64(1); i <= n; i++ {
				for x.v.Load() != i {
				}
				y.v.Store(i)
			}
		}()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		b.ResetTimer()
		for i := uint64(1); i <= n; i++ {
			x.v.Store(i)
			for y.v.Load() != i {
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/hop")
	})
	b.Run("goroutines", func(b *testing.B) {
		job := newJob()
		a, c := openEndpoint(b, job, 0), openEndpoint(b, job, 1)
		a.connect(parseCard(b, c.card()))
		c.connect(parseCard(b, a.card()))
		done := make(chan error, 1)
		go func() { done <- c.serveEcho() }()
		p := newPinger(a)
		p.run(b, 1000)
		b.ResetTimer()
		p.run(b, b.N)
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/hop")
		p.stop(b)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		a.dev.Close()
		c.dev.Close()
	})
	b.Run("processes", func(b *testing.B) {
		e, ch, _ := startPair(b, "echo")
		p := newPinger(e)
		p.run(b, 1000)
		b.ResetTimer()
		p.run(b, b.N)
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/hop")
		p.stop(b)
		if l := ch.line(b); l != "bye" {
			b.Fatalf("helper says %q", l)
		}
		e.dev.Close()
	})
}

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

// BenchmarkOneSided measures the latency of an 8-byte RDMA WRITE, RDMA READ
// and fetch-and-add (post to completion), to shared and to ordinary memory.
func BenchmarkOneSided(b *testing.B) {
	p := newPair(b, 1<<20, nil)
	wc := make([]rdmaio.WorkCompletion, 4)
	for _, c := range []struct {
		name string
		op   rdmaio.Opcode
		tgt  rdmaio.MR
	}{
		{"write/shared", rdmaio.OpRDMAWrite, p.shared[1]},
		{"write/ordinary", rdmaio.OpRDMAWrite, p.heap[1]},
		{"read/shared", rdmaio.OpRDMARead, p.shared[1]},
		{"read/ordinary", rdmaio.OpRDMARead, p.heap[1]},
		{"fetch-add/shared", rdmaio.OpAtomicFetchAdd, p.shared[1]},
	} {
		wr := []rdmaio.SendWR{{Opcode: c.op, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[0], 0, 8)},
			RemoteAddr: c.tgt.Addr(), RKey: c.tgt.RKey(), CompareAdd: 1}}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := p.rc[0].PostSend(wr); err != nil {
					b.Fatal(err)
				}
				pollN(b, p.cq[0], wc, 1)
			}
		})
	}
}

var bwSizes = []int{4 << 10, 64 << 10, 1 << 20, 4 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// BenchmarkBandwidth measures bandwidth (MB/s) with 16 operations in flight:
// RDMA WRITE and SEND, from and to shared memory (PD.Alloc, plain memcpy) or
// ordinary Go memory (process_vm_readv/writev).
func BenchmarkBandwidth(b *testing.B) {
	const window = 16
	for _, mem := range []string{"shared", "ordinary"} {
		mrs := func(p *pair) (rdmaio.MR, rdmaio.MR) {
			if mem == "ordinary" {
				return p.heap[0], p.heap[1]
			}
			return p.shared[0], p.shared[1]
		}
		for _, size := range bwSizes {
			b.Run("write/"+mem+"/"+sizeName(size), func(b *testing.B) {
				p := newPair(b, 4<<20, nil)
				src, dst := mrs(p)
				wr := []rdmaio.SendWR{{Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(src, 0, size)},
					RemoteAddr: dst.Addr(), RKey: dst.RKey()}}
				wc := make([]rdmaio.WorkCompletion, window)
				poll := func() int {
					k := p.cq[0].Poll(wc)
					for _, c := range wc[:k] {
						if c.Status != rdmaio.StatusSuccess {
							b.Fatal(c.Err())
						}
					}
					return k
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				inflight := 0
				for i := 0; i < b.N; i++ {
					for inflight >= window {
						inflight -= poll()
					}
					if _, err := p.rc[0].PostSend(wr); err != nil {
						b.Fatal(err)
					}
					inflight++
				}
				for inflight > 0 {
					inflight -= poll()
				}
			})
			b.Run("send/"+mem+"/"+sizeName(size), func(b *testing.B) {
				p := newPair(b, 4<<20, nil)
				src, dst := mrs(p)
				benchSend(b, p, src, dst, size, window, 1)
			})
		}
	}
}

// benchSend streams b.N SENDs of size bytes from src (rank 0) to dst (rank
// 1, whose receives a goroutine reposts), with window in flight, posted in
// chains of chain work requests.
func benchSend(b *testing.B, p *pair, src, dst rdmaio.MR, size, window, chain int) {
	b.SetBytes(int64(size))
	n := b.N
	recvs := make([]rdmaio.RecvWR, min(window, n))
	for i := range recvs {
		recvs[i] = rdmaio.RecvWR{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(dst, 0, size)}}
	}
	if _, err := p.rc[1].PostRecv(recvs); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		wc := make([]rdmaio.WorkCompletion, 64)
		ctx := context.Background()
		posted := len(recvs)
		re := make([]rdmaio.RecvWR, 0, len(wc))
		for got := 0; got < n; {
			k, err := p.cq[1].Wait(ctx, wc)
			if err != nil {
				done <- err
				return
			}
			re = re[:0]
			for _, c := range wc[:k] {
				if c.Status != rdmaio.StatusSuccess {
					done <- c.Err()
					return
				}
				got++
				if posted < n {
					re = append(re, recvs[c.ID])
					posted++
				}
			}
			// Repost the batch with one call (one doorbell).
			if _, err := p.rc[1].PostRecv(re); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	wrs := make([]rdmaio.SendWR, chain)
	for i := range wrs {
		wrs[i] = rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(src, 0, size)}}
		if size <= 64 {
			wrs[i] = rdmaio.SendWR{Opcode: rdmaio.OpSend, Inline: src.Bytes()[:size]}
		}
	}
	wrs[chain-1].Flags = rdmaio.SendSignaled
	wc := make([]rdmaio.WorkCompletion, 64)
	ctx := context.Background()
	wait := func() int {
		m, err := p.cq[0].Wait(ctx, wc)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range wc[:m] {
			if c.Status != rdmaio.StatusSuccess {
				b.Fatal(c.Err())
			}
		}
		return m
	}
	inflight := 0 // chains
	b.ResetTimer()
	for sent := 0; sent < n; {
		k := min(chain, n-sent)
		for inflight*chain+k > window {
			inflight -= wait()
		}
		if _, err := p.rc[0].PostSend(wrs[chain-k:]); err != nil {
			b.Fatal(err)
		}
		sent += k
		inflight++
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	for inflight > 0 {
		inflight -= wait()
	}
}

// BenchmarkMessageRate measures 8-byte (inline) SENDs per second with 256
// in flight, posted one per PostSend or in chains of 32 (one doorbell per
// chain).
func BenchmarkMessageRate(b *testing.B) {
	for _, chain := range []int{1, 32} {
		b.Run(fmt.Sprintf("chain%d", chain), func(b *testing.B) {
			p := newPair(b, 1<<20, nil)
			start := time.Now()
			benchSend(b, p, p.heap[0], p.heap[1], 8, 256, chain)
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds()/1e6, "Mmsg/s")
		})
	}
}

// BenchmarkHopCPU is the processor cost of one 8-byte message in one
// goroutine (post a receive, post the SEND, poll it out): a ping-pong hop
// minus the transfer of cache lines between cores.
func BenchmarkHopCPU(b *testing.B) {
	p := newPair(b, 1<<20, nil)
	wc := make([]rdmaio.WorkCompletion, 4)
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[1], 0, 64)}}}
	send := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[0], 0, 8)}}}
	for i := 0; b.Loop(); i++ {
		send[0].Flags = 0
		if i%32 == 31 {
			send[0].Flags = rdmaio.SendSignaled
		}
		if _, err := p.rc[1].PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		if _, err := p.rc[0].PostSend(send); err != nil {
			b.Fatal(err)
		}
		pollN(b, p.cq[1], wc, 1)
		if i%32 == 31 {
			pollN(b, p.cq[0], wc, 1)
		}
	}
}
