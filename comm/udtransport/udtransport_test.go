package udtransport_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jiarun/jia/comm/internal/transporttest"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/comm/udtransport"
	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/shm"
	"github.com/jiarun/jia/rdmaio/tcp"
)

// testJob names the shm segments and tcp devices of these tests.
const testJob = "udtransport-test"

// hang bounds a test that would otherwise hang; no test asserts on time.
const hang = 2 * time.Minute

// TestMain removes the segments that killed runs of these tests left
// behind (those whose process is gone).
func TestMain(m *testing.M) {
	if _, err := shm.Cleanup(shm.DefaultDir, testJob, false); err != nil {
		fmt.Fprintln(os.Stderr, "shm cleanup:", err)
	}
	os.Exit(m.Run())
}

// shmOpts keep the shm devices of the tests small.
func shmOpts(int) map[string]string { return map[string]string{"max_qp": "8", "ring_bytes": "131072"} }

// lossyOpts inject 10% loss, 5% duplication and 10% reordering into every
// rank's UD datagrams (seeded per rank), with the given MTU (0: default).
func lossyOpts(seed uint64, mtu int) func(int) map[string]string {
	return func(r int) map[string]string {
		o := map[string]string{"ud_drop": "0.1", "ud_dup": "0.05", "ud_reorder": "0.1",
			"ud_seed": strconv.FormatUint(seed*1000+uint64(r), 10)}
		if mtu > 0 {
			o["mtu"] = strconv.Itoa(mtu)
		}
		return o
	}
}

// open builds n in-process ranks and closes them (all at once, so that
// each lingers while the others still answer) at the end of the test.
func open(t testing.TB, provider string, n int, devOpts func(int) map[string]string, opt udtransport.Options) []*udtransport.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	trs, err := udtransport.OpenLocal(ctx, provider, testJob, n, devOpts, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(t, trs) })
	return trs
}

func closeAll(t testing.TB, trs []*udtransport.Transport) {
	var wg sync.WaitGroup
	for _, tr := range trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tr.Close(); err != nil && !errors.Is(err, transport.ErrClosed) {
				t.Errorf("close: %v", err)
			}
		}()
	}
	wg.Wait()
}

// sink is a Handler that keeps copies of what it is handed, by source.
type sink struct {
	mu   sync.Mutex
	msgs [][][]byte
	n    int
}

func newSink(size int) *sink { return &sink{msgs: make([][][]byte, size)} }

func (s *sink) Deliver(src int, msg []byte) {
	s.mu.Lock()
	s.msgs[src] = append(s.msgs[src], append([]byte(nil), msg...))
	s.n++
	s.mu.Unlock()
}

func (s *sink) Complete(id uint64, err error) { panic("no one-sided operations were started") }

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// exchange has every rank send msgs messages of the sizes given by size to
// every rank (itself included), each rank polling and waiting on its own
// goroutine, and checks that every message arrives once, intact and in
// order.
func exchange(t *testing.T, trs []*udtransport.Transport, msgs int, size func(src, dst, seq int) int) {
	t.Helper()
	n := len(trs)
	sinks := make([]*sink, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, tr := range trs {
		sinks[r] = newSink(n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := sinks[r]
			for seq := 0; seq < msgs; seq++ {
				for dst := 0; dst < n; dst++ {
					hdr, data := transporttest.Payload(r, dst, seq, size(r, dst, seq))
					if err := tr.Send(dst, hdr, data); err != nil {
						errs[r] = err
						return
					}
				}
				if seq%4 == 0 {
					tr.Poll(s) // receive while sending, as comm does
				}
			}
			deadline := time.Now().Add(hang)
			for s.count() < n*msgs {
				if tr.Poll(s) == 0 {
					tr.Wait(10 * time.Millisecond)
				}
				if time.Now().After(deadline) {
					errs[r] = fmt.Errorf("rank %d: %d of %d messages arrived", r, s.count(), n*msgs)
					return
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for dst, s := range sinks {
		for src := 0; src < n; src++ {
			got := s.msgs[src]
			if len(got) != msgs {
				t.Fatalf("rank %d got %d messages from rank %d, want %d", dst, len(got), src, msgs)
			}
			for seq, m := range got {
				if want := transporttest.Joined(transporttest.Payload(src, dst, seq, size(src, dst, seq))); !bytes.Equal(m, want) {
					t.Fatalf("rank %d: message %d from rank %d: %d bytes %.16x…, want %d bytes %.16x…", dst, seq, src, len(m), m, len(want), want)
				}
			}
		}
	}
	for _, tr := range trs {
		if err := tr.Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// sizes cycles through empty, small, inline-sized, one-MTU and
// several-MTU messages.
func sizes(mtu int) func(src, dst, seq int) int {
	list := []int{0, 1, 12, 100, 300, mtu - 50, mtu, 3*mtu + 17, 5000, 20000}
	return func(src, dst, seq int) int { return list[(src+dst+seq)%len(list)] }
}

func TestExchangeShm(t *testing.T) {
	trs := open(t, "shm", 3, shmOpts, udtransport.Options{})
	exchange(t, trs, 60, sizes(4096))
	if c := trs[0].Caps(); c.Name != "ud:shm" || c.OneSided || c.MaxMsg <= 0 {
		t.Errorf("caps %+v", c)
	}
}

func TestExchangeTCP(t *testing.T) {
	trs := open(t, "tcp", 4, nil, udtransport.Options{})
	exchange(t, trs, 60, sizes(4096))
}

func TestSingleRank(t *testing.T) {
	trs := open(t, "tcp", 1, nil, udtransport.Options{})
	exchange(t, trs, 20, sizes(4096))
}

// TestLossyTCP exchanges messages of every size over the tcp provider with
// 10% loss, 5% duplication and 10% reordering injected: each arrives once,
// in order and intact, and the Links did retransmit and drop duplicates.
func TestLossyTCP(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			trs := open(t, "tcp", n, lossyOpts(uint64(n), 0), udtransport.Options{})
			exchange(t, trs, 60, sizes(4096))
			var ls udtransport.Stats
			var dropped uint64
			for _, tr := range trs {
				s := tr.Stats()
				ls.Link.Retransmits += s.Link.Retransmits + s.Link.FastRetransmits
				ls.Link.Duplicates += s.Link.Duplicates
				ls.Link.Sent += s.Link.Sent
				dropped += faults(t, tr).Dropped
			}
			t.Logf("%d packets, %d retransmitted, %d duplicates received, %d datagrams dropped by the injector", ls.Link.Sent, ls.Link.Retransmits, ls.Link.Duplicates, dropped)
			if dropped == 0 || ls.Link.Retransmits == 0 || ls.Link.Duplicates == 0 {
				t.Errorf("faults not exercised")
			}
		})
	}
}

// faults returns the fault injector's counters of a tcp rank's device.
func faults(t testing.TB, tr *udtransport.Transport) tcp.FaultStats {
	t.Helper()
	for _, d := range tr.Devices() {
		if td, ok := d.(*tcp.Device); ok {
			return td.FaultStats()
		}
	}
	t.Fatalf("rank %d has no tcp device", tr.Rank())
	return tcp.FaultStats{}
}

// TestFragmentationUnderLoss sends messages of several MTUs (the tcp
// provider's MTU set to 1024) through 10% loss: they are cut into packets
// and reassembled intact.
func TestFragmentationUnderLoss(t *testing.T) {
	const mtu = 1024
	trs := open(t, "tcp", 2, lossyOpts(7, mtu), udtransport.Options{})
	size := func(src, dst, seq int) int { return 3*mtu + seq*517 + src } // 3 to 10 MTUs
	exchange(t, trs, 12, size)
	var packets, msgs uint64
	for _, tr := range trs {
		s := tr.Stats()
		packets += s.Link.Sent
		msgs += s.Link.Delivered
	}
	if msgs != 2*12 || packets < 4*msgs {
		t.Errorf("%d messages between the ranks went in %d packets: not fragmented", msgs, packets)
	}
}

// TestWaitRunsRetransmissions: rank 0's datagrams are all lost; a Wait of
// an hour still returns (for the retransmission timeout), and the
// retransmissions happen without any Poll.
func TestWaitRunsRetransmissions(t *testing.T) {
	trs := open(t, "tcp", 2, func(r int) map[string]string {
		if r == 0 {
			return map[string]string{"ud_drop": "1", "ud_seed": "1"}
		}
		return nil
	}, udtransport.Options{Linger: -1})
	if err := trs[0].Send(1, []byte("lost"), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for trs[0].Stats().Link.Retransmits < 3 {
			trs[0].Wait(time.Hour)
		}
	}()
	select {
	case <-done:
	case <-time.After(hang):
		t.Fatal("Wait did not return for the retransmissions")
	}
}

// TestCloseDrains: rank 0 sends and closes at once, through 10% loss;
// Close lingers until rank 1 has acknowledged every message.
func TestCloseDrains(t *testing.T) {
	trs := open(t, "tcp", 2, lossyOpts(11, 0), udtransport.Options{})
	const msgs = 200
	for seq := 0; seq < msgs; seq++ {
		hdr, data := transporttest.Payload(0, 1, seq, 100+seq*37)
		if err := trs[0].Send(1, hdr, data); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- trs[0].Close() }()
	s := newSink(2)
	deadline := time.Now().Add(hang)
	for s.count() < msgs {
		if trs[1].Poll(s) == 0 {
			trs[1].Wait(10 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages arrived", s.count(), msgs)
		}
	}
	for seq, m := range s.msgs[0] {
		if want := transporttest.Joined(transporttest.Payload(0, 1, seq, 100+seq*37)); !bytes.Equal(m, want) {
			t.Fatalf("message %d corrupted", seq)
		}
	}
	// Keep answering until rank 0's Close returns.
	for {
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
			if trs[1].Poll(s) == 0 {
				trs[1].Wait(time.Millisecond)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	trs := open(t, "shm", 2, shmOpts, udtransport.Options{MaxMsg: 1000, MaxSGE: 2})
	tr := trs[0]
	for _, dst := range []int{-1, 2, 1 << 40} {
		if err := tr.Send(dst, []byte("x"), nil); !errors.Is(err, transport.ErrRank) {
			t.Errorf("Send to rank %d: %v", dst, err)
		}
	}
	if err := tr.Send(1, make([]byte, 1001), nil); !errors.Is(err, transport.ErrTooLong) {
		t.Errorf("Send of 1001 bytes: %v", err)
	}
	if err := tr.Send(1, nil, [][]byte{{1}, {2}, {3}}); err == nil {
		t.Errorf("Send of 3 pieces with MaxSGE 2 succeeded")
	}
	if _, err := tr.Register(make([]byte, 8)); !errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("Register: %v", err)
	}
	if err := tr.Read(1, transport.Region{}, nil, 1); !errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("Read: %v", err)
	}
	if err := tr.Write(1, transport.Region{}, nil, 1); !errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("Write: %v", err)
	}
	if err := tr.Deregister(transport.Region{}); !errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("Deregister: %v", err)
	}
	closeAll(t, trs)
	if err := tr.Send(1, []byte("x"), nil); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close: %v", err)
	}
	if err := tr.Close(); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	tr.Poll(newSink(2))
	tr.Wait(time.Microsecond)
}

func TestNewErrors(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  udtransport.Config
	}{
		{"rank out of range", udtransport.Config{Rank: 2, Size: 2}},
		{"no ranks", udtransport.Config{Rank: 0, Size: 0}},
		{"no exchange", udtransport.Config{Rank: 0, Size: 2, Devices: []rdmaio.Device{nil}}},
		{"bad options", udtransport.Config{Rank: 0, Size: 1, Options: udtransport.Options{Window: -1}}},
		{"small MTU", udtransport.Config{Rank: 0, Size: 1, Options: udtransport.Options{MTU: 10}}},
		{"devices", udtransport.Config{Rank: 0, Size: 3, Devices: make([]rdmaio.Device, 2), Exchange: udtransport.LocalExchange(3)[0]}},
	} {
		if tr, err := udtransport.New(ctx, tc.cfg); err == nil {
			tr.Close()
			t.Errorf("%s: New succeeded", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}

// TestNewFailsEverywhere: a rank whose setup fails makes New fail on every
// rank instead of leaving them waiting.
func TestNewFailsEverywhere(t *testing.T) {
	ex := udtransport.LocalExchange(2)
	dev, err := rdmaio.Open("tcp", rdmaio.Config{Job: testJob, Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := udtransport.Config{Rank: r, Size: 2, Exchange: ex[r], CloseDevices: r == 0}
			if r == 0 {
				cfg.Devices = []rdmaio.Device{dev}
			} else {
				cfg.Devices = []rdmaio.Device{nil, nil} // no device for rank 0
			}
			tr, err := udtransport.New(ctx, cfg)
			if err == nil {
				tr.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: New succeeded", r)
		}
	}
}

// TestSteadyStateDoesNotAllocate: Send and Poll of small and multi-packet
// messages allocate nothing once the pools are warm.
func TestSteadyStateDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, provider := range []string{"shm", "tcp"} {
		t.Run(provider, func(t *testing.T) {
			var opts func(int) map[string]string
			if provider == "shm" {
				opts = shmOpts
			}
			trs := open(t, provider, 2, opts, udtransport.Options{})
			sinks := []*countSink{{}, {}}
			small := []byte("0123456789abcdef")
			big := [][]byte{make([]byte, 9000)}
			hop := func(from, to int, hdr []byte, data [][]byte) {
				want := sinks[to].n + 1
				if err := trs[from].Send(to, hdr, data); err != nil {
					t.Fatal(err)
				}
				for sinks[to].n < want {
					trs[to].Poll(sinks[to])
					trs[from].Poll(sinks[from])
				}
			}
			round := func() {
				hop(0, 1, small, nil)
				hop(1, 0, small, nil)
				hop(0, 1, small, big)
				hop(1, 0, small, big)
				hop(0, 0, small, nil)
			}
			for range 200 {
				round()
			}
			if a := testing.AllocsPerRun(200, round); a != 0 {
				t.Errorf("%v allocations per round", a)
			}
		})
	}
}

type countSink struct{ n int }

func (s *countSink) Deliver(int, []byte)    { s.n++ }
func (s *countSink) Complete(uint64, error) {}
