package qtransport_test

import (
	"testing"

	"github.com/jiarun/jia/comm/qtransport"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// readSink reads every message it is handed, as comm does.
type readSink struct {
	n   int
	sum byte
}

func (s *readSink) Deliver(_ int, msg []byte) {
	s.n++
	for _, b := range msg {
		s.sum += b
	}
}
func (s *readSink) Complete(uint64, error) { s.n++ }

// BenchmarkShortHopCPU is the processor time of the thread per 8-byte
// SendShort and the Poll that hands it to the receiver, one goroutine
// driving both ranks (cpu-ns/op, which does not count time spent waiting
// for a processor on a busy machine).
func BenchmarkShortHopCPU(b *testing.B) {
	trs := open(b, 2, qtransport.Options{})
	var h transport.ShortHeader
	msg := make([]byte, 8)
	var s [2]readSink
	hop := func(from, to int) {
		if err := trs[from].SendShort(to, h, 8, msg); err != nil {
			b.Fatal(err)
		}
		for s[to].n == 0 {
			trs[to].Poll(&s[to])
		}
		s[to].n = 0
	}
	b.ReportAllocs()
	defer rdmaiotest.ThreadCPU(b)()
	for b.Loop() {
		hop(0, 1)
		hop(1, 0)
	}
}
