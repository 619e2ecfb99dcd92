package rdmaiotest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
)

// RankOpener is implemented by fabrics whose ranks can live in different
// processes. The benchmarks then also run "processes" variants: the peer
// is this test binary started again with PeerEnv set, running the test
// named TestBenchPeer, which must call BenchPeer:
//
//	func TestBenchPeer(t *testing.T) { rdmaiotest.BenchPeer(t, myFabric{}) }
type RankOpener interface {
	// NewJob returns the name of a new job.
	NewJob() string
	// OpenRank opens, in this process, the device of rank of a job of size
	// ranks named job; the other ranks may be in other processes.
	OpenRank(job string, rank, size int) (rdmaio.Device, error)
}

// BandwidthSizes are the transfer sizes of the bandwidth benchmarks.
var BandwidthSizes = []int{4 << 10, 64 << 10, 1 << 20, 4 << 20}

// SizeName names a transfer size: "4KiB", "1MiB".
func SizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// Window is the number of operations in flight in the bandwidth
// benchmarks; RateWindow that of the message rate.
const (
	Window     = 16
	RateWindow = 256
)

// Bench runs every benchmark of the harness against f: PingPong,
// OneSided, Bandwidth, MessageRate and HopCPU, as sub-benchmarks.
func Bench(b *testing.B, f Fabric) {
	b.Run("PingPong", func(b *testing.B) { BenchPingPong(b, f) })
	b.Run("OneSided", func(b *testing.B) { BenchOneSided(b, f) })
	b.Run("Bandwidth", func(b *testing.B) { BenchBandwidth(b, f) })
	b.Run("MessageRate", func(b *testing.B) { BenchMessageRate(b, f) })
	b.Run("HopCPU", func(b *testing.B) { BenchHopCPU(b, f) })
}

// localSession opens two ranks of f in this process and serves rank 1 in a
// goroutine.
func localSession(tb testing.TB, f Fabric, cfg SessionConfig) *Session {
	tb.Helper()
	devs := f.Open(tb, 2)
	s, err := NewSession([2]rdmaio.Device{devs[0], devs[1]}, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// PeerCommand returns the command that starts this test binary again as the
// peer of job (running TestBenchPeer).
func PeerCommand(job string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchPeer$", "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), PeerEnv+"="+job)
	return cmd
}

// ProcessSession opens rank 0 of a new job of o in this process and starts
// rank 1 as another process (PeerCommand). The test closes both.
func ProcessSession(tb testing.TB, o RankOpener, cfg SessionConfig) *Session {
	tb.Helper()
	job := o.NewJob()
	dev, err := o.OpenRank(job, 0, 2)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := StartSession(dev, PeerCommand(job), cfg)
	if err != nil {
		dev.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
		if err := dev.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// BenchPeer serves as the peer of the "processes" benchmarks when this
// process was started as one (PeerEnv set) and returns at once otherwise.
// f must implement RankOpener.
func BenchPeer(t *testing.T, f Fabric) {
	job := os.Getenv(PeerEnv)
	if job == "" {
		return // an ordinary run: the peer only runs when started by the benchmarks
	}
	o, ok := f.(RankOpener)
	if !ok {
		t.Fatalf("fabric %T does not implement RankOpener", f)
	}
	dev, err := o.OpenRank(job, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := ServePeer(dev, os.Stdin, os.Stdout); err != nil {
		dev.Close()
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
}

func reportHop(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/hop")
}

// BenchPingPong measures the 8-byte SEND half round trip (ns/hop) between
// two goroutines on two devices of one process ("goroutines") and, for
// fabrics that implement RankOpener, between two processes ("processes").
func BenchPingPong(b *testing.B, f Fabric) {
	run := func(b *testing.B, s *Session) {
		if err := s.PingPong(1000); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		if err := s.PingPong(b.N); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		reportHop(b)
	}
	b.Run("goroutines", func(b *testing.B) { run(b, localSession(b, f, SessionConfig{})) })
	if o, ok := f.(RankOpener); ok {
		b.Run("processes", func(b *testing.B) { run(b, ProcessSession(b, o, SessionConfig{})) })
	}
}

// BenchOneSided measures the latency of an 8-byte RDMA WRITE, RDMA READ and
// fetch-and-add (post to completion) into memory from PD.Alloc. The target
// program does not take part.
func BenchOneSided(b *testing.B, f Fabric) {
	s := localSession(b, f, SessionConfig{})
	for _, c := range []struct {
		name string
		op   rdmaio.Opcode
	}{
		{"write", rdmaio.OpRDMAWrite},
		{"read", rdmaio.OpRDMARead},
		{"fetch-add", rdmaio.OpAtomicFetchAdd},
	} {
		b.Run(c.name, func(b *testing.B) {
			if err := s.OneSided(c.op, b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchBandwidth measures bandwidth (MB/s) with Window operations in
// flight, between regions from PD.Alloc: RDMA WRITE (the target program
// does not take part) and SEND (the target reposts receives).
func BenchBandwidth(b *testing.B, f Fabric) {
	for _, size := range BandwidthSizes {
		b.Run("write/"+SizeName(size), func(b *testing.B) {
			s := localSession(b, f, SessionConfig{})
			b.SetBytes(int64(size))
			b.ResetTimer()
			if err := s.Write(size, Window, b.N); err != nil {
				b.Fatal(err)
			}
		})
		b.Run("send/"+SizeName(size), func(b *testing.B) {
			s := localSession(b, f, SessionConfig{})
			b.SetBytes(int64(size))
			b.ResetTimer()
			if err := s.Send(size, Window, 1, b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchMessageRate measures 8-byte (inline) SENDs per second (Mmsg/s) with
// RateWindow in flight, posted one per PostSend ("chain1") or in chains of
// 32 with one doorbell per chain ("chain32").
func BenchMessageRate(b *testing.B, f Fabric) {
	for _, chain := range []int{1, 32} {
		b.Run(fmt.Sprintf("chain%d", chain), func(b *testing.B) {
			s := localSession(b, f, SessionConfig{})
			b.ResetTimer()
			if err := s.Send(8, RateWindow, chain, b.N); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mmsg/s")
		})
	}
}

// pair opens two ranks of f in this process with their endpoints connected
// and nobody serving them.
func pair(tb testing.TB, f Fabric) [2]*endpoint {
	tb.Helper()
	devs := f.Open(tb, 2)
	var es [2]*endpoint
	for i := range es {
		var err error
		if es[i], err = newEndpoint(devs[i]); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range es {
		if err := es[i].connect(es[1-i].card(), SessionConfig{}); err != nil {
			tb.Fatal(err)
		}
	}
	return es
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

// BenchHopCPU is the processor cost of one 8-byte message in one goroutine
// (post a receive, post the SEND, poll it out): a ping-pong hop minus the
// transfer between cores. Besides ns/op it reports cpu-ns/op, the
// processor time of the thread per operation, which does not count time
// spent waiting for a processor on a busy machine.
func BenchHopCPU(b *testing.B, f Fabric) {
	es := pair(b, f)
	a, z := es[0], es[1]
	wc := make([]rdmaio.WorkCompletion, 4)
	recv := []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(z.heap, 0, 64)}}}
	send := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(a.heap, 0, 8)}}}
	defer ThreadCPU(b)()
	for i := 0; b.Loop(); i++ {
		send[0].Flags = 0
		if i%32 == 31 {
			send[0].Flags = rdmaio.SendSignaled
		}
		if _, err := z.data.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		if _, err := a.data.PostSend(send); err != nil {
			b.Fatal(err)
		}
		pollN(b, z.cq, wc, 1)
		if i%32 == 31 {
			pollN(b, a.cq, wc, 1)
		}
	}
}

// ThreadCPU locks the goroutine to its thread and returns a function that
// reports the thread's processor time per operation (cpu-ns/op) and
// unlocks it.
func ThreadCPU(b *testing.B) func() {
	runtime.LockOSThread()
	var r0 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &r0)
	return func() {
		var r1 unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &r1)
		runtime.UnlockOSThread()
		ns := (r1.Utime.Nano() + r1.Stime.Nano()) - (r0.Utime.Nano() + r0.Stime.Nano())
		b.ReportMetric(float64(ns)/float64(b.N), "cpu-ns/op")
	}
}

// Allocs checks that posting and polling allocate nothing, for every
// operation, small and large, on both ends (testing.AllocsPerRun after a
// warm-up in which buffers reach their steady size).
func Allocs(t *testing.T, f Fabric) {
	es := pair(t, f)
	a, z := es[0], es[1]
	wc := make([]rdmaio.WorkCompletion, 8)
	sge := func(m rdmaio.MR, n int) []rdmaio.SGE { return []rdmaio.SGE{rdmaio.MRSGE(m, 0, n)} }
	recv := []rdmaio.RecvWR{{ID: 1, SGL: sge(z.heap, 64)}}
	bigRecv := []rdmaio.RecvWR{{ID: 1, SGL: sge(z.heap, 256<<10)}}
	send := func(op rdmaio.Opcode, flags rdmaio.SendFlags, m rdmaio.MR, n int) []rdmaio.SendWR {
		return []rdmaio.SendWR{{ID: 2, Opcode: op, Flags: flags, Imm: 7, SGL: sge(m, n)}}
	}
	inline := []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, Inline: []byte("12345678")}}
	oneSided := func(op rdmaio.Opcode, local rdmaio.MR, tgt uint64, key uint32, n int) []rdmaio.SendWR {
		return []rdmaio.SendWR{{ID: 3, Opcode: op, Flags: rdmaio.SendSignaled, SGL: sge(local, n),
			RemoteAddr: tgt, RKey: key, CompareAdd: 1}}
	}
	ud := []rdmaio.SendWR{{ID: 4, Opcode: rdmaio.OpSend, Flags: rdmaio.SendSignaled, SGL: sge(a.heap, 64),
		AH: a.ah, RemoteQPN: z.ud.QPN(), RemoteQKey: benchQKey}}
	sendRecv := func(s []rdmaio.SendWR, r []rdmaio.RecvWR) func() {
		return func() {
			if _, err := z.data.PostRecv(r); err != nil {
				t.Fatal(err)
			}
			if _, err := a.data.PostSend(s); err != nil {
				t.Fatal(err)
			}
			pollN(t, z.cq, wc, 1)
			if s[0].Flags&rdmaio.SendSignaled != 0 {
				pollN(t, a.cq, wc, 1)
			}
		}
	}
	one := func(wr []rdmaio.SendWR) func() {
		return func() {
			if _, err := a.data.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			pollN(t, a.cq, wc, 1)
		}
	}
	mem, heap := a.peer.memAddr, a.peer.heapAdr
	mkey, hkey := a.peer.memKey, a.peer.heapKey
	cases := []struct {
		name string
		f    func()
	}{
		{"send 8B", sendRecv(send(rdmaio.OpSend, rdmaio.SendSignaled, a.heap, 8), recv)},
		{"send 8B unsignaled", sendRecv(send(rdmaio.OpSend, 0, a.heap, 8), recv)},
		{"send inline", sendRecv(inline, recv)},
		{"send 256KiB ordinary memory", sendRecv(send(rdmaio.OpSend, rdmaio.SendSignaled, a.heap, 256<<10), bigRecv)},
		{"send 256KiB allocated memory", sendRecv(send(rdmaio.OpSendImm, rdmaio.SendSignaled, a.mem, 256<<10), bigRecv)},
		{"write 4KiB", one(oneSided(rdmaio.OpRDMAWrite, a.heap, mem, mkey, 4096))},
		{"write 256KiB", one(oneSided(rdmaio.OpRDMAWrite, a.mem, mem, mkey, 256<<10))},
		{"read 4KiB", one(oneSided(rdmaio.OpRDMARead, a.heap, mem, mkey, 4096))},
		{"read 256KiB", one(oneSided(rdmaio.OpRDMARead, a.mem, mem, mkey, 256<<10))},
		{"fetch-and-add", one(oneSided(rdmaio.OpAtomicFetchAdd, a.heap, mem, mkey, 8))},
		{"compare-and-swap", one(oneSided(rdmaio.OpAtomicCmpSwp, a.heap, mem, mkey, 8))},
		{"ud", func() {
			if _, err := z.ud.PostRecv(recv); err != nil {
				t.Fatal(err)
			}
			if _, err := a.ud.PostSend(ud); err != nil {
				t.Fatal(err)
			}
			pollN(t, a.cq, wc, 1)
			pollN(t, z.cq, wc, 1)
		}},
	}
	if z.heapRemote {
		cases = append(cases, []struct {
			name string
			f    func()
		}{
			{"write 4KiB to ordinary memory", one(oneSided(rdmaio.OpRDMAWrite, a.heap, heap, hkey, 4096))},
			{"read 4KiB from ordinary memory", one(oneSided(rdmaio.OpRDMARead, a.heap, heap, hkey, 4096))},
		}...)
	}
	for _, c := range cases {
		for range 64 {
			c.f() // warm up: buffers reach their steady size, peer memory is mapped
		}
		if n := testing.AllocsPerRun(500, c.f); n != 0 {
			t.Errorf("%s: %v allocations per operation", c.name, n)
		}
	}
}
