package qtransport_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/jiarun/jia/comm/qtransport"
	"github.com/jiarun/jia/comm/transport"
)

// BenchmarkHopCPU is the software cost of one message: a single goroutine
// sends from rank 0 and polls rank 1, then back (no cross-core hand-off,
// so it is the floor of the half round trip, not the latency).
func BenchmarkHopCPU(b *testing.B) {
	for _, size := range []int{8, 1024, 8192} {
		b.Run(fmt.Sprint(size, "B"), func(b *testing.B) {
			trs := open(b, 2, qtransport.Options{})
			msg := make([]byte, size)
			hdr, data := msg[:min(13, size)], [][]byte{msg[min(13, size):]}
			var s [2]countSink
			hop := func(from, to int) {
				if err := trs[from].Send(to, hdr, data); err != nil {
					b.Fatal(err)
				}
				for s[to].n == 0 {
					trs[to].Poll(&s[to])
				}
				s[to].n = 0
				trs[from].Poll(&s[from])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				hop(0, 1)
				hop(1, 0)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/hop")
		})
	}
}

// BenchmarkPingPong is the half round trip between two goroutines (two
// cores when they are free), through the transport alone.
func BenchmarkPingPong(b *testing.B) {
	for _, size := range []int{8, 4096, 16384} {
		b.Run(fmt.Sprint(size, "B"), func(b *testing.B) {
			trs := open(b, 2, qtransport.Options{})
			msg := make([]byte, size)
			done := make(chan struct{})
			n := b.N
			go func() {
				defer close(done)
				var s countSink
				for i := 0; i < n; i++ {
					for s.n == 0 {
						if trs[1].Poll(&s) == 0 {
							runtime.Gosched()
						}
					}
					s.n = 0
					if err := trs[1].Send(0, msg, nil); err != nil {
						b.Error(err)
						return
					}
				}
			}()
			var s countSink
			b.ResetTimer()
			for i := 0; i < n; i++ {
				if err := trs[0].Send(1, msg, nil); err != nil {
					b.Fatal(err)
				}
				for s.n == 0 {
					if trs[0].Poll(&s) == 0 {
						runtime.Gosched()
					}
				}
				s.n = 0
			}
			b.StopTimer()
			<-done
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/hop")
		})
	}
}

// BenchmarkRead is one-sided READ bandwidth of a peer's registered memory
// into ordinary memory, by the way the local pieces are reached; "shared"
// reads memory the peer took from its shared segment instead of ordinary
// Go memory.
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{16 << 10, 64 << 10, 1 << 20} {
		for _, mode := range []struct {
			name string
			opt  qtransport.Options
		}{
			{"bounce", qtransport.Options{ReadBounce: 1 << 20, SendRing: 4 << 20}},
			{"register", qtransport.Options{ReadBounce: -1, RegCache: -1}},
			{"cached", qtransport.Options{ReadBounce: -1}},
			{"shared", qtransport.Options{ReadBounce: -1, RegCache: -1}},
		} {
			b.Run(fmt.Sprintf("%s/%dKiB", mode.name, size>>10), func(b *testing.B) {
				trs := open(b, 2, mode.opt)
				remote := make([]byte, size)
				if mode.name == "shared" {
					// The peer's memory is in its shared segment: the READ is a
					// copy from the mapping, not process_vm_readv.
					var free func() error
					var err error
					if remote, free, err = trs[1].AllocShared(size); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() {
						if err := free(); err != nil {
							b.Error(err)
						}
					})
				}
				reg, err := trs[1].Register(remote)
				if err != nil {
					b.Fatal(err)
				}
				if mode.name == "shared" {
					b.Cleanup(func() {
						if err := trs[1].Deregister(reg); err != nil {
							b.Error(err)
						}
					})
				}
				local := [][]byte{make([]byte, size)}
				var s countSink
				var s1 countSink
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := trs[0].Read(1, transport.Region{Key: reg.Key, Addr: reg.Addr}, local, uint64(i)); err != nil {
						b.Fatal(err)
					}
					for s.n == 0 {
						trs[0].Poll(&s)
						trs[1].Poll(&s1)
					}
					s.n = 0
				}
			})
		}
	}
}
