package tcp_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	"github.com/jiarun/jia/rdmaio/tcp"
)

// The benchmarks are the harness of package rdmaiotest; "raw" beside them
// is the floor of the machine at the time: the same ping-pong (or hop) on
// two raw non-blocking TCP sockets that busy-poll read(2). Provider options
// come from JIA_TCP_OPTS ("key=value,key=value").

// NewJob returns the name of a new job.
func (f *fabric) NewJob() string { return newJob() }

// OpenRank opens rank of a job whose other ranks may be in other processes.
func (f *fabric) OpenRank(job string, rank, size int) (rdmaio.Device, error) {
	return rdmaio.Open(tcp.Name, rdmaio.Config{Job: job, Rank: rank, LocalSize: size, Options: f.opts, Secret: testSecret})
}

func benchFabric() *fabric { return &fabric{opts: envOptions()} }

// TestBenchPeer is the peer process of the "processes" benchmarks; it only
// serves when started by them.
func TestBenchPeer(t *testing.T) { rdmaiotest.BenchPeer(t, benchFabric()) }

// BenchmarkPingPong: 8-byte SEND half round trip (ns/hop).
func BenchmarkPingPong(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		el, err := rdmaiotest.TCPPingPong(b.N)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(el.Nanoseconds())/float64(b.N)/2, "ns/hop")
	})
	rdmaiotest.BenchPingPong(b, benchFabric())
}

// BenchmarkOneSided: 8-byte RDMA WRITE, READ and fetch-and-add latency.
func BenchmarkOneSided(b *testing.B) { rdmaiotest.BenchOneSided(b, benchFabric()) }

// BenchmarkBandwidth: RDMA WRITE and SEND bandwidth, 4 KiB to 4 MiB.
func BenchmarkBandwidth(b *testing.B) { rdmaiotest.BenchBandwidth(b, benchFabric()) }

// BenchmarkMessageRate: 8-byte SENDs per second, one per doorbell or 32.
func BenchmarkMessageRate(b *testing.B) { rdmaiotest.BenchMessageRate(b, benchFabric()) }

// BenchmarkHopCPU: the processor cost of one 8-byte message, against a
// write and a read of 8 bytes on a loopback TCP connection ("raw").
func BenchmarkHopCPU(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		fa, fb := rawPair(b)
		var buf [8]byte
		defer rdmaiotest.ThreadCPU(b)()
		for b.Loop() {
			if err := rdmaiotest.RawWrite(fa, buf[:]); err != nil {
				b.Fatal(err)
			}
			if err := rdmaiotest.RawRead(fb, buf[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tcp", func(b *testing.B) { rdmaiotest.BenchHopCPU(b, benchFabric()) })
}

// rawPair returns the two ends of a loopback TCP connection, closed when
// the benchmark ends.
func rawPair(b *testing.B) (fa, fb int) {
	fa, fb, err := rdmaiotest.TCPPair()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		unix.Close(fa)
		unix.Close(fb)
	})
	return fa, fb
}
