package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jiarun/jia/comm/memtransport"
	"github.com/jiarun/jia/comm/qtransport"
	"github.com/jiarun/jia/comm/transport"
)

// withTransport runs fn with runRanks and worlds building transports of
// the given kind ("mem" or "q").
func withTransport(kind string, fn func()) {
	old := testTransport
	testTransport = kind
	defer func() { testTransport = old }()
	fn()
}

// suiteTest is a test of the suite that runs over each transport.
type suiteTest struct {
	name string
	fn   func(*testing.T)
}

// transportSuite returns the point-to-point and collective tests that run
// over a transport (TestOverQTransport, TestOverUDTransport): the
// point-to-point tests, then the transport's choice of collective tests,
// then the other collective tests, then extra.
func transportSuite(collectives []suiteTest, extra ...suiteTest) []suiteTest {
	tests := []suiteTest{
		{"NonOvertaking", TestNonOvertaking},
		{"StatusAndWildcards", TestStatusAndWildcards},
		{"Truncation", TestTruncation},
		{"ArgumentErrors", TestArgumentErrors},
		{"ProcNull", TestProcNull},
		{"SendrecvRing", TestSendrecvRing},
		{"CompletionCalls", TestCompletionCalls},
		{"Communicators", TestCommunicators},
		{"Vector", TestVector},
		{"SelfMessages", TestSelfMessages},
		{"Stress", TestStress},
		{"ConcurrentWaitsOnOneRequest", TestConcurrentWaitsOnOneRequest},
	}
	tests = append(tests, collectives...)
	tests = append(tests, []suiteTest{
		{"CollectivesOtherTransports", TestCollectivesOtherTransports},
		{"PredefinedOps", TestPredefinedOps},
		{"Deterministic", TestDeterministic},
		{"LargeCollectives", TestLargeCollectives},
		{"MismatchedArguments", TestMismatchedArguments},
	}...)
	return append(tests, extra...)
}

// runSuite runs tests as subtests of t over the transport kind (see
// withTransport).
func runSuite(t *testing.T, kind string, tests []suiteTest) {
	withTransport(kind, func() {
		for _, tc := range tests {
			t.Run(tc.name, tc.fn)
		}
	})
}

// benchSuite runs the point-to-point and collective benchmarks as
// sub-benchmarks of b over the transport kind.
func benchSuite(b *testing.B, kind string) {
	withTransport(kind, func() {
		b.Run("Latency", BenchmarkLatency)
		b.Run("Bandwidth", BenchmarkBandwidth)
		b.Run("Allreduce", BenchmarkAllreduce)
		b.Run("Barrier", BenchmarkBarrier)
	})
}

// TestOverQTransport runs the point-to-point and collective tests over
// qtransport: ranks are goroutines, each with its own shm device, connected
// by RC queue pairs. (go test -comm.transport=q runs every test that way.)
func TestOverQTransport(t *testing.T) {
	if useQ() {
		t.Skip("every test already runs over qtransport")
	}
	runSuite(t, "q", transportSuite(
		[]suiteTest{{"Collectives", TestCollectives}, {"CollectivesHierarchical", TestCollectivesHierarchical}},
		suiteTest{"HotPathsDoNotAllocate", TestHotPathsDoNotAllocate}))
}

// BenchmarkQTransport runs the point-to-point benchmarks over qtransport
// (two ranks, two shm devices of this process); BenchmarkLatency and
// BenchmarkBandwidth are the same over memtransport.
func BenchmarkQTransport(b *testing.B) { benchSuite(b, "q") }

// BenchmarkHopCPU is the processor cost of one 8-byte message through
// comm, qtransport and shm: a single goroutine drives both ranks (posts the
// receive on one, sends from the other, tests until the receive completes,
// then back), so no cross-core hand-off or scheduling is measured.
func BenchmarkHopCPU(b *testing.B) {
	benchHops(b, 8, func(cs []*Comm, bufs [2][]byte, from, to int) {
		rq, err := Irecv(cs[to], bufs[to], from, 1)
		if err != nil {
			b.Fatal(err)
		}
		sq, err := Isend(cs[from], bufs[from], to, 1)
		if err != nil {
			b.Fatal(err)
		}
		for sent, got := false, false; !sent || !got; {
			if !got {
				if _, got, err = rq.Test(); err != nil {
					b.Fatal(err)
				}
			}
			if !sent {
				if _, sent, err = sq.Test(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkSendCPU is BenchmarkHopCPU with blocking Send and Recv (OSU's
// latency loop) driven by one goroutine, for a few small sizes: an eager
// Send completes when it is posted, and the Recv then finds the message on
// the peer.
func BenchmarkSendCPU(b *testing.B) {
	for _, size := range []int{0, 8, 64} {
		b.Run(sizeName(size), func(b *testing.B) {
			benchHops(b, size, func(cs []*Comm, bufs [2][]byte, from, to int) {
				if err := Send(cs[from], bufs[from], to, 1); err != nil {
					b.Fatal(err)
				}
				if _, err := Recv(cs[to], bufs[to], from, 1); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// benchHops times hop (one message of size bytes from rank from to rank
// to) back and forth between two ranks over qtransport, one goroutine
// driving both, and reports wall and processor time per hop.
func benchHops(b *testing.B, size int, hop func(cs []*Comm, bufs [2][]byte, from, to int)) {
	withTransport("q", func() {
		cs := worlds(b, 2, memtransport.Options{}, nil)
		bufs := [2][]byte{make([]byte, size), make([]byte, size)}
		b.ReportAllocs()
		cpu0 := processCPU(b)
		for b.Loop() {
			hop(cs, bufs, 0, 1)
			hop(cs, bufs, 1, 0)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/hop")
		b.ReportMetric((processCPU(b)-cpu0)*1e9/float64(2*b.N), "cpu-ns/hop")
	})
}

// BenchmarkCollCPU is BenchmarkSendCPU for a 2-rank Barrier and an 8-byte
// Allreduce: one goroutine drives both ranks. Rank 1's message of the
// first call is sent beforehand, so that each call finds its peer's
// message and completes without waiting; ns/call is the processor cost of
// one call on one rank, to compare with ns/hop.
func BenchmarkCollCPU(b *testing.B) {
	withTransport("q", func() {
		b.Run("Barrier", func(b *testing.B) {
			cs := worlds(b, 2, memtransport.Options{}, nil)
			if err := cs[1].csend("Barrier", nil, 0, tagBarrier); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if err := cs[0].Barrier(); err != nil {
					b.Fatal(err)
				}
				if err := cs[1].Barrier(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/call")
			b.ReportMetric((processCPU(b)-cpu0)*1e9/float64(2*b.N), "cpu-ns/call")
		})
		b.Run("Allreduce8B", func(b *testing.B) {
			cs := worlds(b, 2, memtransport.Options{}, nil)
			v := [2][]float64{{1}, {2}}
			if err := cs[1].csend("Allreduce", asBytes(v[1]), 0, tagAllreduce); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				v[0][0], v[1][0] = 1, 2
				if err := Allreduce(cs[0], v[0], v[0], Sum); err != nil {
					b.Fatal(err)
				}
				if err := Allreduce(cs[1], v[1], v[1], Sum); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/call")
			b.ReportMetric((processCPU(b)-cpu0)*1e9/float64(2*b.N), "cpu-ns/call")
		})
	})
}

// TestIsendHeldGoesOut: over qtransport, eager Isends may be held back to
// be posted together; they still reach a receiver whose sender makes no
// further call at all, in order, and after a Wait as well.
func TestIsendHeldGoesOut(t *testing.T) {
	withTransport("q", func() {
		cs := worlds(t, 2, memtransport.Options{}, nil)
		for round := range 2 {
			var reqs [5]Request
			for i := range reqs {
				var err error
				if reqs[i], err = Isend(cs[0], []int64{int64(10*round + i)}, 1, 7); err != nil {
					t.Fatal(err)
				}
			}
			if round == 1 {
				if err := WaitAll(reqs[:], nil); err != nil {
					t.Fatal(err)
				}
			}
			// Rank 0 calls nothing more in this round: rank 1 blocks
			// in Recv, polling only its own transport.
			for i := range reqs {
				v := []int64{-1}
				if _, err := Recv(cs[1], v, 0, 7); err != nil {
					t.Fatal(err)
				}
				if want := int64(10*round + i); v[0] != want {
					t.Fatalf("round %d: message %d is %d, want %d", round, i, v[0], want)
				}
			}
			if round == 0 {
				if err := WaitAll(reqs[:], nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// TestBlockingSendsWaitForBacklog: over qtransport (and udtransport, whose
// Links queue packets behind a full window), a rank that streams
// eager sends — blocking ones, or Isend each followed by its Wait — to a
// rank that takes none stops once the transport's rings toward it are full
// and its messages would wait in the backlog: the send (or its Wait) waits
// for the receiver, as MPI_Send may, instead of buffering without bound.
// Then every message arrives, in order; and two ranks that both stream
// blocking sends to each other before receiving (eager messages both ways)
// still finish, each draining the other while it waits.
func TestBlockingSendsWaitForBacklog(t *testing.T) {
	for _, kind := range []string{"q", "ud"} {
		t.Run(kind, func(t *testing.T) { blockingSendsWait(t, kind) })
	}
}

func blockingSendsWait(t *testing.T, kind string) {
	withTransport(kind, func() {
		cs := worlds(t, 2, memtransport.Options{}, nil)
		const n, size = 2000, 8 << 10
		styles := []struct {
			name string
			send func(buf []byte) error
		}{
			{"Send", func(buf []byte) error { return Send(cs[0], buf, 1, 3) }},
			{"Isend+Wait", func(buf []byte) error {
				q, err := Isend(cs[0], buf, 1, 3)
				if err != nil {
					return err
				}
				_, err = q.Wait()
				return err
			}},
		}
		for _, st := range styles {
			var sent atomic.Int64
			errc := make(chan error, 1)
			go func() {
				buf := make([]byte, size)
				for i := range n {
					buf[0], buf[size-1] = byte(i), byte(i>>8)
					if err := st.send(buf); err != nil {
						errc <- err
						return
					}
					sent.Add(1)
				}
				errc <- nil
			}()
			// Rank 1 takes nothing until rank 0's sends have stopped.
			stalled := false
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
				before := sent.Load()
				time.Sleep(50 * time.Millisecond)
				if after := sent.Load(); after == before && after > 0 {
					stalled = after < n
					break
				}
			}
			if !stalled {
				t.Fatalf("%s: %d of %d sends of %d bytes returned while the receiver took none: the sender buffers without bound", st.name, sent.Load(), n, size)
			}
			t.Logf("%s: the sender waited after %d sends", st.name, sent.Load())
			buf := make([]byte, size)
			for i := range n {
				if _, err := Recv(cs[1], buf, 0, 3); err != nil {
					t.Fatal(err)
				}
				if buf[0] != byte(i) || buf[size-1] != byte(i>>8) {
					t.Fatalf("%s: message %d carries %d", st.name, i, int(buf[0])|int(buf[size-1])<<8)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}

		// Both ways at once.
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for r, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = exchangeStream(c, 1-r, n, size)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	})
}

// exchangeStream sends n blocking messages of size bytes to peer, then
// receives n from it and checks their order.
func exchangeStream(c *Comm, peer, n, size int) error {
	buf := make([]byte, size)
	for i := range n {
		buf[0], buf[size-1] = byte(i), byte(i>>8)
		if err := Send(c, buf, peer, 4); err != nil {
			return err
		}
	}
	for i := range n {
		if _, err := Recv(c, buf, peer, 4); err != nil {
			return err
		}
		if buf[0] != byte(i) || buf[size-1] != byte(i>>8) {
			return fmt.Errorf("message %d carries %d", i, int(buf[0])|int(buf[size-1])<<8)
		}
	}
	return nil
}

// qranks returns a qtransport world of n ranks, closed at the end of the
// test.
func qranks(t *testing.T, n int) []*qtransport.Transport {
	trs := qworld(t, n, qtransport.Options{})
	t.Cleanup(func() {
		if err := qtransport.CloseAll(trs); err != nil && !errors.Is(err, transport.ErrClosed) {
			t.Errorf("close: %v", err)
		}
	})
	return trs
}

// onQRanks runs fn on a comm world (with opt) over each of trs, one
// goroutine per rank (runQRanks), and fails the test with the first
// rank's error, or with a dump of the goroutines when the ranks do not
// finish within runDeadline.
func onQRanks(t *testing.T, trs []*qtransport.Transport, opt *Options, fn func(c *Comm) error) {
	t.Helper()
	first, errs, dump := runQRanks(trs, opt, fn, runDeadline)
	if dump != "" {
		t.Fatalf("ranks did not finish within %v (errors so far: %v):\n%s", runDeadline, errs, dump)
	}
	if first >= 0 {
		for r, err := range errs {
			if err != nil && r != first {
				t.Logf("rank %d (after rank %d failed): %v", r, first, err)
			}
		}
		t.Fatalf("rank %d: %v", first, errs[first])
	}
}

// runQRanks is runWorlds over trs with a final Barrier.
func runQRanks(trs []*qtransport.Transport, opt *Options, fn func(c *Comm) error, deadline time.Duration) (first int, errs []error, dump string) {
	eps := make([]transport.Transport, len(trs))
	for r, tr := range trs {
		eps[r] = tr
	}
	return runWorlds(eps, opt, fn, true, deadline)
}

// TestRunQRanksFailsFast: when a rank of runQRanks returns an error, the
// ranks waiting for it (in a Recv, in the final Barrier) return too, with
// errPeerFailed, instead of leaving the test hanging.
func TestRunQRanksFailsFast(t *testing.T) {
	boom := errors.New("boom")
	for _, wait := range []string{"Recv", "Barrier"} {
		t.Run(wait, func(t *testing.T) {
			trs := qranks(t, 3)
			first, errs, dump := runQRanks(trs, nil, func(c *Comm) error {
				switch {
				case c.Rank() == 1:
					return boom
				case wait == "Recv":
					_, err := Recv(c, make([]byte, 8), 1, 0)
					return err
				}
				return nil
			}, 30*time.Second)
			if dump != "" {
				t.Fatalf("the ranks still wait after rank 1 failed (errors %v):\n%s", errs, dump)
			}
			if first != 1 || !errors.Is(errs[1], boom) {
				t.Fatalf("first failure: rank %d, errors %v; want rank 1's %v", first, errs, boom)
			}
			for _, r := range []int{0, 2} {
				if !errors.Is(errs[r], errPeerFailed) {
					t.Errorf("rank %d, waiting for rank 1: error %v, want %v", r, errs[r], errPeerFailed)
				}
			}
		})
	}
}

// sendVectors sends msgs messages of count blocks of block bytes, a block
// apart, from rank 0 to the same layout on rank 1, which checks every byte
// (the gaps stay untouched).
func sendVectors(c *Comm, block, count, msgs int) error {
	data := make([]byte, 2*count*block)
	v := Vector[byte]{Data: data, Count: count, BlockLen: block, Stride: 2 * block}
	for m := range msgs {
		if c.Rank() == 0 {
			for i := range data {
				data[i] = byte(i/block + m)
			}
			if err := SendVector(c, v, 1, m); err != nil {
				return err
			}
			continue
		}
		clear(data)
		if _, err := RecvVector(c, v, 0, m); err != nil {
			return err
		}
		for i, b := range data {
			want := byte(i/block + m)
			if (i/block)%2 == 1 {
				want = 0
			}
			if b != want {
				return fmt.Errorf("message %d: byte %d is %d, want %d", m, i, b, want)
			}
		}
	}
	return nil
}

// TestVectorReadsInPlace receives strided messages of 4 KiB blocks, each
// read by a READ of its own, into a vector no send has registered, over
// qtransport: every READ must go straight into its block (the vector is
// registered whole at the first one) rather than through the bounce ring,
// which costs a copy per block and, for a long vector, waits for ring
// room; and the READs of one message must go in one chain. (The sender
// has no staging memory, as toward a rank on another host.)
func TestVectorReadsInPlace(t *testing.T) {
	const block, count, msgs = 4096, 48, 3
	trs := qranks(t, 2)
	onQRanks(t, trs, nil, func(c *Comm) error {
		c.p.mu.Lock()
		c.p.stage.off = true
		c.p.mu.Unlock()
		return sendVectors(c, block, count, msgs)
	})
	st := trs[1].Stats()
	if st.ReadsBounced != 0 || st.ReadsRegistered != count*msgs {
		t.Errorf("receiver: %d reads bounced, %d registered; want 0 and %d (one per block, in place)",
			st.ReadsBounced, st.ReadsRegistered, count*msgs)
	}
	if st.Chains > msgs+2 {
		t.Errorf("receiver posted %d chains for %d messages of %d READs each; want about one per message", st.Chains, msgs, count)
	}
}

// TestVectorStaged: a vector send of a rendezvous to a rank on this host
// is packed into the transport's staging memory while the receiver copies
// out what is packed (a staged rendezvous, its watermark in the buffer's
// first line); the buffer is kept and serves the next sends, and the data
// arrives intact.
func TestVectorStaged(t *testing.T) {
	const block, count, msgs = 4096, 2 * maxReadBlocks, 3
	trs := qranks(t, 2)
	var sender *proc
	onQRanks(t, trs, nil, func(c *Comm) error {
		if c.Rank() == 0 {
			sender = c.p
		}
		return sendVectors(c, block, count, msgs)
	})
	sender.mu.Lock()
	defer sender.mu.Unlock()
	c := bits.Len(uint(count*block - 1))
	if sender.stage.bytes != 1<<c+stageHdr || len(sender.stage.free[c]) != 1 || len(sender.packing) != 0 {
		t.Errorf("sender: %d bytes of staging memory, %d buffers of the class idle, %d sends packing; want one buffer of %d bytes, kept, none packing",
			sender.stage.bytes, len(sender.stage.free[c]), len(sender.packing), 1<<c+stageHdr)
	}
}

// TestVectorStagedTruncated: a receive shorter than a staged vector send
// gets what fits and ErrTruncate, the sender completes before it has
// packed the rest and stops packing, and the next message is whole.
func TestVectorStagedTruncated(t *testing.T) {
	const block, count = 4096, 256
	trs := qranks(t, 2)
	var sender *proc
	onQRanks(t, trs, nil, func(c *Comm) error {
		data := make([]byte, 2*count*block)
		v := Vector[byte]{Data: data, Count: count, BlockLen: block, Stride: 2 * block}
		if c.Rank() == 0 {
			sender = c.p
			for i := range data {
				data[i] = byte(i/block + 1)
			}
			if err := SendVector(c, v, 1, 0); err != nil {
				return err
			}
			return sendVectors(c, block, count, 1)
		}
		short := make([]byte, 100<<10)
		st, err := Recv(c, short, 0, 0)
		if !errors.Is(err, ErrTruncate) || st.Bytes != len(short) {
			return fmt.Errorf("short receive: %+v, %v; want %d bytes and ErrTruncate", st, err, len(short))
		}
		for i, b := range short {
			if want := byte(2*(i/block) + 1); b != want {
				return fmt.Errorf("short receive: byte %d is %d, want %d", i, b, want)
			}
		}
		return sendVectors(c, block, count, 1)
	})
	sender.mu.Lock()
	defer sender.mu.Unlock()
	if len(sender.packing) != 0 || sender.packN.Load() != 0 {
		t.Errorf("sender: %d sends still packing", len(sender.packing))
	}
}

// TestVectorStagedSenderComputes: a staged vector send whose sender goes
// on computing (no comm call) after IsendVector completes once the sender
// waits (its Wait packs the rest): the receiver keeps reading the
// watermark meanwhile, and gets every byte.
func TestVectorStagedSenderComputes(t *testing.T) {
	const block, count, pause = 4096, 128, 50 * time.Millisecond
	trs := qranks(t, 2)
	onQRanks(t, trs, nil, func(c *Comm) error {
		data := make([]byte, 2*count*block)
		v := Vector[byte]{Data: data, Count: count, BlockLen: block, Stride: 2 * block}
		if c.Rank() == 0 {
			for i := range data {
				data[i] = byte(i/block + 3)
			}
			q, err := IsendVector(c, v, 1, 0)
			if err != nil {
				return err
			}
			time.Sleep(pause) // computing: the packing waits for the next call
			_, err = q.Wait()
			return err
		}
		if _, err := RecvVector(c, v, 0, 0); err != nil {
			return err
		}
		for i, b := range data {
			want := byte(i/block + 3)
			if (i/block)%2 == 1 {
				want = 0
			}
			if b != want {
				return fmt.Errorf("byte %d is %d, want %d", i, b, want)
			}
		}
		return nil
	})
}

// TestVectorStagedConcurrent: several staged vector sends in flight at
// once, to two ranks and two to each, pack side by side (one chunk of
// each per poll) and every receiver gets its bytes.
func TestVectorStagedConcurrent(t *testing.T) {
	const block, count, msgs = 4096, 64, 2
	trs := qranks(t, 3)
	fill := func(data []byte, dst, m int) {
		for i := range data {
			data[i] = byte(i/block + 7*dst + 3*m)
		}
	}
	var sender *proc
	onQRanks(t, trs, nil, func(c *Comm) error {
		if c.Rank() == 0 {
			sender = c.p
			var reqs []Request
			for dst := 1; dst <= 2; dst++ {
				for m := range msgs {
					data := make([]byte, 2*count*block)
					fill(data, dst, m)
					q, err := IsendVector(c, Vector[byte]{Data: data, Count: count, BlockLen: block, Stride: 2 * block}, dst, m)
					if err != nil {
						return err
					}
					reqs = append(reqs, q)
				}
			}
			return WaitAll(reqs, nil)
		}
		want := make([]byte, 2*count*block)
		for m := msgs - 1; m >= 0; m-- { // the later message first
			data := make([]byte, 2*count*block)
			if _, err := RecvVector(c, Vector[byte]{Data: data, Count: count, BlockLen: block, Stride: 2 * block}, 0, m); err != nil {
				return err
			}
			fill(want, c.Rank(), m)
			for i := range data {
				if (i/block)%2 == 1 {
					want[i] = 0
				}
				if data[i] != want[i] {
					return fmt.Errorf("message %d: byte %d is %d, want %d", m, i, data[i], want[i])
				}
			}
		}
		return nil
	})
	sender.mu.Lock()
	defer sender.mu.Unlock()
	if len(sender.packing) != 0 || sender.stage.bytes != 4*(count*block+stageHdr) {
		t.Errorf("sender: %d sends packing, %d bytes of staging memory; want none and 4 buffers of %d", len(sender.packing), sender.stage.bytes, count*block+stageHdr)
	}
}

// TestWaitTakes: a blocking receive that waits for a message from a rank
// on this host takes it where it lies in the provider's ring (qtransport's
// Take) instead of polling the completion queue for it, and the messages
// from that rank keep MPI's order around the ones taken: a ping-pong of
// eager messages, with now and then a message for another tag (received
// later, from the unexpected queue) before the ping and a rendezvous
// message on the same tag after it.
//
// The ranks then close together (CloseAll), which must not wait for
// Options.Linger: the acknowledgements of the last messages taken go out
// with each Close's first poll.
func TestWaitTakes(t *testing.T) {
	const rounds, every = 400, 50
	trs := qworld(t, 2, qtransport.Options{})
	defer qtransport.CloseAll(trs)
	onQRanks(t, trs, nil, func(c *Comm) error {
		buf, other := make([]byte, 8), make([]byte, 8)
		big := make([]byte, 64<<10)
		for i := range rounds {
			if c.Rank() == 0 {
				if i%every == 0 {
					binary.LittleEndian.PutUint64(other, uint64(1000+i))
					if err := Send(c, other, 1, 2); err != nil {
						return err
					}
				}
				binary.LittleEndian.PutUint64(buf, uint64(i))
				if err := Send(c, buf, 1, 1); err != nil {
					return err
				}
				if i%every == 0 {
					for j := range big {
						big[j] = byte(i + j)
					}
					if err := Send(c, big, 1, 1); err != nil {
						return err
					}
				}
				if _, err := Recv(c, buf, 1, 1); err != nil {
					return err
				}
				if v := binary.LittleEndian.Uint64(buf); v != uint64(i) {
					return fmt.Errorf("round %d: pong %d", i, v)
				}
				continue
			}
			if _, err := Recv(c, buf, 0, 1); err != nil {
				return err
			}
			if v := binary.LittleEndian.Uint64(buf); v != uint64(i) {
				return fmt.Errorf("round %d: ping %d", i, v)
			}
			if i%every == 0 {
				if _, err := Recv(c, big, 0, 1); err != nil {
					return err
				}
				for j, b := range big {
					if b != byte(i+j) {
						return fmt.Errorf("round %d: byte %d of the rendezvous message is %d", i, j, b)
					}
				}
				if _, err := Recv(c, other, 0, 2); err != nil {
					return err
				}
				if v := binary.LittleEndian.Uint64(other); v != uint64(1000+i) {
					return fmt.Errorf("round %d: tag 2 message %d", i, v)
				}
			}
			if err := Send(c, buf, 0, 1); err != nil {
				return err
			}
		}
		return nil
	})
	taken := trs[0].Stats().Taken + trs[1].Stats().Taken
	t.Logf("%d of %d ping-pong messages taken where they lay", taken, 2*rounds)
	if taken < rounds/2 {
		t.Errorf("%d of %d ping-pong messages taken where they lay; want at least %d", taken, 2*rounds, rounds/2)
	}
	start := time.Now()
	if err := qtransport.CloseAll(trs); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= qtransport.DefaultLinger/2 {
		t.Errorf("closing took %v: a rank lingered for acknowledgements of messages taken (Linger %v)", d, qtransport.DefaultLinger)
	}
}

// TestWaitCollectsSendCompletions: waits that watch one rank still collect
// the completions of the sends before them (in their first round), so that
// exchanges (an 8-byte Allreduce between two ranks: receive posted, send,
// wait), whose waits never poll otherwise, leave the transport asking for
// the completion of about one send in 16 and never let the send queue
// fill into the backlog.
func TestWaitCollectsSendCompletions(t *testing.T) {
	const calls = 5000
	trs := qranks(t, 2)
	onQRanks(t, trs, nil, func(c *Comm) error {
		a, b := []float64{float64(c.Rank() + 1)}, make([]float64, 1)
		for i := range calls {
			if err := Allreduce(c, a, b, Sum); err != nil {
				return err
			}
			if b[0] != 3 {
				return fmt.Errorf("call %d: sum %v, want 3", i, b[0])
			}
		}
		return nil
	})
	for r, tr := range trs {
		st := tr.Stats()
		if st.Signaled > st.Inline/8 || st.Backlogged != 0 {
			t.Errorf("rank %d: %d of %d sends signaled, %d backlogged; want about 1 in 16 and none", r, st.Signaled, st.Inline, st.Backlogged)
		}
	}
}
