package tcp_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
)

const stopImm = 0xffffffff

// echo answers every 8-byte SEND on p.rc[1] with an 8-byte SEND until one
// carries stopImm. Sends are unsignaled but every 32nd.
func echo(p *pair) error {
	wc := make([]rdmaio.WorkCompletion, 32)
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[1], 0, 64)}}}
	send := []rdmaio.SendWR{{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[1], 64, 8)}}}
	ctx := context.Background()
	for sent := 0; ; {
		n, err := p.cq[1].Wait(ctx, wc)
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
			if c.Flags&rdmaio.WCWithImm != 0 && c.Imm == stopImm {
				return nil
			}
			if _, err := p.rc[1].PostRecv(recv); err != nil {
				return err
			}
			sent++
			send[0].Flags = 0
			if sent%32 == 0 {
				send[0].Flags = rdmaio.SendSignaled
			}
			if _, err := p.rc[1].PostSend(send); err != nil {
				return err
			}
		}
	}
}

// pinger runs 8-byte ping-pongs on p.rc[0] against echo.
type pinger struct {
	p    *pair
	wc   []rdmaio.WorkCompletion
	recv []rdmaio.RecvWR
	send []rdmaio.SendWR
	sent int
}

func newPinger(p *pair) *pinger {
	for _, q := range []int{0, 1} {
		r := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[q], 0, 64)}}}
		if _, err := p.rc[q].PostRecv(r); err != nil {
			panic(err)
		}
	}
	return &pinger{p: p, wc: make([]rdmaio.WorkCompletion, 32),
		recv: []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[0], 0, 64)}}},
		send: []rdmaio.SendWR{{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[0], 64, 8)}}}}
}

func (pp *pinger) run(tb testing.TB, n int) {
	ctx := context.Background()
	for i := 0; i < n; i++ {
		pp.sent++
		pp.send[0].Flags = 0
		if pp.sent%32 == 0 {
			pp.send[0].Flags = rdmaio.SendSignaled
		}
		if _, err := pp.p.rc[0].PostSend(pp.send); err != nil {
			tb.Fatal(err)
		}
		for got := false; !got; {
			k, err := pp.p.cq[0].Wait(ctx, pp.wc)
			if err != nil {
				tb.Fatal(err)
			}
			for _, c := range pp.wc[:k] {
				if c.Status != rdmaio.StatusSuccess {
					tb.Fatalf("completion %+v", c)
				}
				if c.Opcode.IsRecv() {
					if _, err := pp.p.rc[0].PostRecv(pp.recv); err != nil {
						tb.Fatal(err)
					}
					got = true
				}
			}
		}
	}
}

func (pp *pinger) stop(tb testing.TB) {
	if _, err := pp.p.rc[0].PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSendImm, Imm: stopImm, Inline: []byte("stop")}}); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkPingPong measures the 8-byte SEND half round trip (ns/hop)
// between two goroutines on two devices of one process, over loopback TCP,
// against "raw": the same ping-pong on two raw non-blocking TCP sockets
// that busy-poll read(2), the floor of the machine at the time.
func BenchmarkPingPong(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		fa, fb := rawPair(b)
		defer unix.Close(fa)
		defer unix.Close(fb)
		n := b.N
		done := make(chan error, 1)
		go func() { done <- rawEcho(fb, n) }()
		var buf [8]byte
		b.ResetTimer()
		for i := 0; i < n; i++ {
			if err := rawWrite(fa, buf[:]); err != nil {
				b.Fatal(err)
			}
			if err := rawRead(fa, buf[:]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/hop")
	})
	b.Run("tcp", func(b *testing.B) {
		p := newPair(b, 1<<20, nil)
		pp := newPinger(p)
		done := make(chan error, 1)
		go func() { done <- echo(p) }()
		pp.run(b, 1000)
		b.ResetTimer()
		pp.run(b, b.N)
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/hop")
		pp.stop(b)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
}

// rawPair returns the two ends of a loopback TCP connection, non-blocking,
// with TCP_NODELAY.
func rawPair(tb testing.TB) (int, int) {
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer unix.Close(l)
	if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Listen(l, 1); err != nil {
		tb.Fatal(err)
	}
	sa, err := unix.Getsockname(l)
	if err != nil {
		tb.Fatal(err)
	}
	a, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	if err := unix.Connect(a, sa); err != nil {
		tb.Fatal(err)
	}
	c, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
	if err != nil {
		tb.Fatal(err)
	}
	for _, fd := range []int{a, c} {
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		unix.SetNonblock(fd, true)
	}
	return a, c
}

// rawRead busy-polls fd until b is full. Like the provider it uses
// RawSyscall: the floor is what the kernel costs, not the scheduler.
func rawRead(fd int, b []byte) error {
	for got := 0; got < len(b); {
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[got])), uintptr(len(b)-got))
		if e == unix.EAGAIN {
			continue
		}
		if e != 0 {
			return e
		}
		if n == 0 {
			return fmt.Errorf("end of stream")
		}
		got += int(n)
	}
	return nil
}

func rawWrite(fd int, b []byte) error {
	for len(b) > 0 {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if e == unix.EAGAIN {
			continue
		}
		if e != 0 {
			return e
		}
		b = b[n:]
	}
	return nil
}

func rawEcho(fd, n int) error {
	var buf [8]byte
	for i := 0; i < n; i++ {
		if err := rawRead(fd, buf[:]); err != nil {
			return err
		}
		if err := rawWrite(fd, buf[:]); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkOneSided measures the latency of an 8-byte RDMA WRITE, RDMA READ
// and fetch-and-add (post to completion). The target program does not poll:
// its device's service goroutine serves the requests.
func BenchmarkOneSided(b *testing.B) {
	p := newPair(b, 1<<20, nil)
	wc := make([]rdmaio.WorkCompletion, 4)
	for _, c := range []struct {
		name string
		op   rdmaio.Opcode
	}{
		{"write", rdmaio.OpRDMAWrite},
		{"read", rdmaio.OpRDMARead},
		{"fetch-add", rdmaio.OpAtomicFetchAdd},
	} {
		wr := []rdmaio.SendWR{{Opcode: c.op, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[0], 0, 8)},
			RemoteAddr: p.alloc[1].Addr(), RKey: p.alloc[1].RKey(), CompareAdd: 1}}
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
// RDMA WRITE (the target's service goroutine receives) and SEND (a
// goroutine of the target polls and reposts receives).
func BenchmarkBandwidth(b *testing.B) {
	const window = 16
	for _, size := range bwSizes {
		b.Run("write/"+sizeName(size), func(b *testing.B) {
			p := newPair(b, 4<<20, nil)
			wr := []rdmaio.SendWR{{Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.alloc[0], 0, size)},
				RemoteAddr: p.alloc[1].Addr(), RKey: p.alloc[1].RKey()}}
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
		b.Run("send/"+sizeName(size), func(b *testing.B) {
			p := newPair(b, 4<<20, nil)
			benchSend(b, p, p.alloc[0], p.alloc[1], size, window, 1)
		})
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
// in flight, posted one per PostSend or in chains of 32 (one sendmsg per
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
// goroutine (post a receive, post the SEND, poll it out) against "raw", a
// write and a read of 8 bytes on a loopback TCP connection: a ping-pong hop
// minus the scheduling and the transfer between cores.
//
// Besides ns/op it reports cpu-ns/op, the processor time of the thread per
// operation, which does not count time spent waiting for a processor on a
// busy machine.
func BenchmarkHopCPU(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		fa, fb := rawPair(b)
		defer unix.Close(fa)
		defer unix.Close(fb)
		var buf [8]byte
		defer threadCPU(b)()
		for b.Loop() {
			if err := rawWrite(fa, buf[:]); err != nil {
				b.Fatal(err)
			}
			if err := rawRead(fb, buf[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tcp", func(b *testing.B) {
		p := newPair(b, 1<<20, nil)
		wc := make([]rdmaio.WorkCompletion, 4)
		recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[1], 0, 64)}}}
		send := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.heap[0], 0, 8)}}}
		defer threadCPU(b)()
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
	})
}

// threadCPU locks the goroutine to its thread and returns a function that
// reports the thread's processor time per operation and unlocks it.
func threadCPU(b *testing.B) func() {
	runtime.LockOSThread()
	var r0 unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &r0)
	return func() {
		var r1 unix.Rusage
		unix.Getrusage(unix.RUSAGE_THREAD, &r1)
		runtime.UnlockOSThread()
		ns := (r1.Utime.Nano() + r1.Stime.Nano()) - (r0.Utime.Nano() + r0.Stime.Nano())
		b.ReportMetric(float64(ns)/float64(b.N), "cpu-ns/op")
	}
}
