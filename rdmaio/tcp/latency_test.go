package tcp_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// BenchmarkHopQuantiles times every round trip of an 8-byte ping-pong
// between two goroutines and reports quantiles of the half round trip
// (p10-ns/hop, p50-ns/hop): "raw" on two raw busy-polling sockets, "tcp" with
// SENDs between two devices that wait with CQ.Wait. On a loaded machine the
// mean mostly measures who else runs; the lower quantiles are the hops
// neither side was descheduled in, so they compare the two paths fairly.
func BenchmarkHopQuantiles(b *testing.B) {
	b.Run("raw", func(b *testing.B) {
		fa, fb := rawPair(b)
		n := b.N + 1000
		done := make(chan error, 1)
		go func() {
			var buf [8]byte
			for range n {
				if err := rdmaiotest.RawRead(fb, buf[:]); err != nil {
					done <- err
					return
				}
				if err := rdmaiotest.RawWrite(fb, buf[:]); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		var buf [8]byte
		hopQuantiles(b, func() {
			if err := rdmaiotest.RawWrite(fa, buf[:]); err != nil {
				b.Fatal(err)
			}
			if err := rdmaiotest.RawRead(fa, buf[:]); err != nil {
				b.Fatal(err)
			}
		})
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
	b.Run("tcp", func(b *testing.B) {
		p := newPair(b, 1<<16, nil)
		ctx := context.Background()
		recv := func(i int) []rdmaio.RecvWR {
			return []rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[i], 64, 64)}}}
		}
		send := func(i int) []rdmaio.SendWR {
			return []rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(p.Heap[i], 0, 8)}}}
		}
		n := b.N + 1000
		for i := range 2 {
			for range 4 {
				if _, err := p.RC[i].PostRecv(recv(i)); err != nil {
					b.Fatal(err)
				}
			}
		}
		// wait waits for the receive of side i, reposting it; send
		// completions (every 32nd send is signaled) are taken on the way.
		wait := func(i int, wc []rdmaio.WorkCompletion, rq []rdmaio.RecvWR) error {
			for {
				k, err := p.CQ[i].Wait(ctx, wc)
				if err != nil {
					return err
				}
				got := false
				for j := range wc[:k] {
					if wc[j].Status != rdmaio.StatusSuccess {
						return wc[j].Err()
					}
					if wc[j].Opcode.IsRecv() {
						if _, err := p.RC[i].PostRecv(rq); err != nil {
							return err
						}
						got = true
					}
				}
				if got {
					return nil
				}
			}
		}
		done := make(chan error, 1)
		go func() {
			wc := make([]rdmaio.WorkCompletion, 4)
			rq, sq := recv(1), send(1)
			for i := range n {
				if err := wait(1, wc, rq); err != nil {
					done <- err
					return
				}
				sq[0].Flags = 0
				if i%32 == 31 {
					sq[0].Flags = rdmaio.SendSignaled
				}
				if _, err := p.RC[1].PostSend(sq); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		wc := make([]rdmaio.WorkCompletion, 4)
		rq, sq := recv(0), send(0)
		i := 0
		hopQuantiles(b, func() {
			sq[0].Flags = 0
			if i%32 == 31 {
				sq[0].Flags = rdmaio.SendSignaled
			}
			i++
			if _, err := p.RC[0].PostSend(sq); err != nil {
				b.Fatal(err)
			}
			if err := wait(0, wc, rq); err != nil {
				b.Fatal(err)
			}
		})
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
}

// hopQuantiles runs rt (one round trip) 1000 times to warm up and then b.N
// times, timing each, and reports quantiles of the half round trip.
func hopQuantiles(b *testing.B, rt func()) {
	for range 1000 {
		rt()
	}
	ts := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range ts {
		t0 := time.Now()
		rt()
		ts[i] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(ts)
	q := func(f float64) float64 { return float64(ts[int(f*float64(len(ts)-1))].Nanoseconds()) / 2 }
	b.ReportMetric(q(0.1), "p10-ns/hop")
	b.ReportMetric(q(0.5), "p50-ns/hop")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/hop")
}
