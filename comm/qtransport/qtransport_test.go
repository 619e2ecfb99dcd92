package qtransport_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jiarun/jia/comm/internal/transporttest"
	"github.com/jiarun/jia/comm/qtransport"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/shm"
)

// testJob names the shm segments of these tests.
const testJob = "qtransport-test"

// TestMain removes the segments that killed runs of these tests left
// behind (those whose process is gone).
func TestMain(m *testing.M) {
	for _, job := range []string{testJob, "example"} {
		if _, err := shm.Cleanup(shm.DefaultDir, job, false); err != nil {
			fmt.Fprintln(os.Stderr, "shm cleanup:", err)
		}
	}
	os.Exit(m.Run())
}

// devOpts keep the shm devices of the tests small.
var devOpts = map[string]string{"max_qp": "16", "ring_bytes": "65536"}

// open builds n in-process ranks over shm and closes them at the end of
// the test.
func open(t testing.TB, n int, opt qtransport.Options) []*qtransport.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	trs, err := qtransport.OpenLocal(ctx, "shm", testJob, n, devOpts, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tr := range trs {
			if err := tr.Close(); err != nil && !errors.Is(err, transport.ErrClosed) {
				t.Errorf("close: %v", err)
			}
		}
	})
	return trs
}

// sink is a Handler that keeps copies of what it is handed.
type sink struct {
	msgs  [][][]byte // by source
	comps map[uint64]error
	n     int
}

func newSink(size int) *sink {
	return &sink{msgs: make([][][]byte, size), comps: map[uint64]error{}}
}

func (s *sink) Deliver(src int, msg []byte) {
	s.msgs[src] = append(s.msgs[src], append([]byte(nil), msg...))
	s.n++
}

func (s *sink) Complete(id uint64, err error) {
	if _, dup := s.comps[id]; dup {
		panic(fmt.Sprintf("completion %d reported twice", id))
	}
	s.comps[id] = err
	s.n++
}

// pollAll polls every rank until cond holds, failing after a long while
// (a hang, not a timing assertion).
func pollAll(t testing.TB, trs []*qtransport.Transport, sinks []*sink, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; !cond(); i++ {
		for r, tr := range trs {
			if tr != nil {
				tr.Poll(sinks[r])
			}
		}
		if i&1023 == 1023 {
			if time.Now().After(deadline) {
				t.Fatal("no progress")
			}
			runtime.Gosched()
		}
	}
}

// TestSendOrderExactlyOnce: every rank sends messages of every size class
// (empty, inline, bounced, the largest) to every rank, itself included;
// each receiver gets each sender's messages once, in order, intact.
func TestSendOrderExactlyOnce(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			trs := open(t, n, qtransport.Options{EagerLimit: 4096})
			maxMsg := trs[0].Caps().MaxMsg
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			const per = 300
			sizes := make([]int, per)
			for i := range sizes {
				switch rng.IntN(5) {
				case 0:
					sizes[i] = rng.IntN(12)
				case 1:
					sizes[i] = 12 + rng.IntN(250)
				case 2:
					sizes[i] = maxMsg
				default:
					sizes[i] = 12 + rng.IntN(maxMsg-12)
				}
			}
			sinks := make([]*sink, n)
			for r := range sinks {
				sinks[r] = newSink(n)
			}
			var want [][][][]byte // [dst][src] messages
			want = make([][][][]byte, n)
			for d := range want {
				want[d] = make([][][]byte, n)
			}
			for i := 0; i < per; i++ {
				for src := 0; src < n; src++ {
					for dst := 0; dst < n; dst++ {
						hdr, data := transporttest.Payload(src, dst, i, sizes[(i+src+dst)%per])
						if err := trs[src].Send(dst, hdr, data); err != nil {
							t.Fatal(err)
						}
						want[dst][src] = append(want[dst][src], transporttest.Joined(hdr, data))
					}
				}
				if i%7 == 0 {
					for r := range trs {
						trs[r].Poll(sinks[r])
					}
				}
			}
			pollAll(t, trs, sinks, func() bool {
				for _, s := range sinks {
					if s.n < n*per {
						return false
					}
				}
				return true
			})
			for dst, s := range sinks {
				for src := range s.msgs {
					if len(s.msgs[src]) != per {
						t.Fatalf("rank %d got %d messages from %d, want %d", dst, len(s.msgs[src]), src, per)
					}
					for i, m := range s.msgs[src] {
						if !bytes.Equal(m, want[dst][src][i]) {
							t.Fatalf("rank %d: message %d from %d: %d bytes differ from the %d sent", dst, i, src, len(m), len(want[dst][src][i]))
						}
					}
				}
			}
			for _, tr := range trs {
				if err := tr.Err(); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestBacklogUnderPressure: a sender sends far more than the send queue,
// the bounce ring and the receiver's buffers hold while the receiver does
// not poll; Send never waits, and once the receiver polls everything
// arrives in order. Send queues of a power of two and of another depth.
func TestBacklogUnderPressure(t *testing.T) {
	for _, tc := range []struct{ recvBufs, depth int }{{4, 8}, {256, 8}, {4, 6}} {
		t.Run(fmt.Sprintf("%dbuffers/depth%d", tc.recvBufs, tc.depth), func(t *testing.T) {
			trs := open(t, 2, qtransport.Options{EagerLimit: 2048, RecvBuffers: tc.recvBufs, SendDepth: tc.depth, SendRing: 8192})
			const total = 3000
			var sent [][]byte
			for i := 0; i < total; i++ {
				hdr, data := transporttest.Payload(0, 1, i, 12+(i*37)%2000)
				if err := trs[0].Send(1, hdr, data); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, transporttest.Joined(hdr, data))
			}
			if st := trs[0].Stats(); st.Backlogged == 0 {
				t.Fatalf("nothing backlogged: %+v", st)
			}
			sinks := []*sink{newSink(2), newSink(2)}
			pollAll(t, trs, sinks, func() bool { return sinks[1].n == total })
			for i, m := range sinks[1].msgs[0] {
				if !bytes.Equal(m, sent[i]) {
					t.Fatalf("message %d differs", i)
				}
			}
			t.Logf("sender: %+v", trs[0].Stats())
		})
	}
}

// TestSendsPostTheirBacklog: a rank that streams sends and never polls
// (blocking eager sends return without a poll) takes the completions its
// receiver's receipts made itself, in a later Send, and posts its backlog
// from there, instead of leaving every message to the progress goroutine.
// Each round the receiver drains what reached it, then the sender sends
// once more; every message arrives, in order.
func TestSendsPostTheirBacklog(t *testing.T) {
	trs := open(t, 2, qtransport.Options{EagerLimit: 1024, SendDepth: 8, SendRing: 4096})
	sinks := []*sink{newSink(2), newSink(2)}
	var sent [][]byte
	send := func() {
		hdr, data := transporttest.Payload(0, 1, len(sent), 900)
		if err := trs[0].Send(1, hdr, data); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, transporttest.Joined(hdr, data))
	}
	for range 64 { // far more than the ring and the queue hold
		send()
	}
	if st := trs[0].Stats(); st.Backlogged == 0 {
		t.Fatalf("nothing backlogged: %+v", st)
	}
	for round := 0; round < 200 && trs[0].Stats().Reaps == 0; round++ {
		for trs[1].Poll(sinks[1]) > 0 {
		}
		send()
	}
	if st := trs[0].Stats(); st.Reaps == 0 {
		t.Fatalf("no send took the completions of its backlog: %+v", st)
	}
	pollAll(t, trs, sinks, func() bool { return sinks[1].n == len(sent) })
	for i, m := range sinks[1].msgs[0] {
		if !bytes.Equal(m, sent[i]) {
			t.Fatalf("message %d differs", i)
		}
	}
}

// TestProgressWhenOwnerIdle: a rank sends far more than its queues hold
// and then never polls again (it went on computing, or finished); its
// progress goroutine flushes the backlog so that the receiver gets every
// message, in order.
func TestProgressWhenOwnerIdle(t *testing.T) {
	trs := open(t, 2, qtransport.Options{EagerLimit: 1024, SendDepth: 8, SendRing: 4096})
	const total = 2000
	var sent [][]byte
	for i := 0; i < total; i++ {
		hdr, data := transporttest.Payload(0, 1, i, 12+(i*53)%1100)
		if err := trs[0].Send(1, hdr, data); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, transporttest.Joined(hdr, data))
	}
	s := newSink(2)
	deadline := time.Now().Add(60 * time.Second)
	for s.n < total {
		if trs[1].Poll(s) == 0 {
			trs[1].Wait(time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d messages", s.n, total)
		}
	}
	for i, m := range s.msgs[0] {
		if !bytes.Equal(m, sent[i]) {
			t.Fatalf("message %d differs", i)
		}
	}
}

// TestConcurrentSenders: several goroutines of a rank send at once while
// the receiver polls in its own goroutine with Wait; per goroutine order
// and exactly-once hold.
func TestConcurrentSenders(t *testing.T) {
	trs := open(t, 3, qtransport.Options{EagerLimit: 1024, SendDepth: 16})
	const goroutines, per = 4, 400
	var wg sync.WaitGroup
	for src := 1; src < 3; src++ {
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					b := make([]byte, 16+(i*13)%900)
					binary.LittleEndian.PutUint32(b, uint32(g))
					binary.LittleEndian.PutUint32(b[4:], uint32(i))
					if err := trs[src].Send(0, b[:8], [][]byte{b[8:]}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	// Senders poll too, so that their backlogs drain.
	stop := make(chan struct{})
	for src := 1; src < 3; src++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSink(3)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if trs[src].Poll(s) == 0 {
					trs[src].Wait(time.Millisecond)
				}
			}
		}()
	}
	s := newSink(3)
	next := make([][goroutines]int, 3)
	deadline := time.Now().Add(60 * time.Second)
	for s.n < 2*goroutines*per {
		if trs[0].Poll(s) == 0 {
			trs[0].Wait(time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatal("no progress")
		}
	}
	close(stop)
	wg.Wait()
	for src := 1; src < 3; src++ {
		for _, m := range s.msgs[src] {
			g, i := binary.LittleEndian.Uint32(m), binary.LittleEndian.Uint32(m[4:])
			if int(i) != next[src][g] || len(m) != 16+(int(i)*13)%900 {
				t.Fatalf("from rank %d goroutine %d: message %d (%d bytes), want %d", src, g, i, len(m), next[src][g])
			}
			next[src][g]++
		}
	}
}

// TestMessageLimits: the largest message passes, a larger one is refused.
func TestMessageLimits(t *testing.T) {
	trs := open(t, 2, qtransport.Options{EagerLimit: 30000})
	c := trs[0].Caps()
	if c.MaxMsg < 30000 || c.EagerLimit != 30000 || c.Name != "shm" || !c.OneSided {
		t.Fatalf("caps %+v", c)
	}
	big := make([]byte, c.MaxMsg)
	big[c.MaxMsg-1] = 7
	if err := trs[0].Send(1, big[:5], [][]byte{big[5:]}); err != nil {
		t.Fatal(err)
	}
	err := trs[0].Send(1, big, [][]byte{{1}})
	if !errors.Is(err, transport.ErrTooLong) {
		t.Fatalf("oversize send: %v", err)
	}
	sinks := []*sink{newSink(2), newSink(2)}
	pollAll(t, trs, sinks, func() bool { return sinks[1].n == 1 })
	if m := sinks[1].msgs[0][0]; len(m) != c.MaxMsg || m[c.MaxMsg-1] != 7 {
		t.Fatalf("got %d bytes", len(m))
	}
}

// TestProviderEagerLimit: a provider's own eager limit overrides
// EagerLimit for the peers it reaches, and sizes their messages.
func TestProviderEagerLimit(t *testing.T) {
	trs := open(t, 2, qtransport.Options{EagerLimit: 30000, EagerLimits: map[string]int{"shm": 5000, "tcp": 70000}})
	c := trs[0].Caps()
	if c.EagerLimit != 5000 || c.MaxMsg < 5000 || c.MaxMsg >= 30000 {
		t.Fatalf("caps %+v: want the shm limit, 5000", c)
	}
	big := make([]byte, c.MaxMsg+1)
	if err := trs[0].Send(1, big, nil); !errors.Is(err, transport.ErrTooLong) {
		t.Fatalf("send of %d bytes: %v", len(big), err)
	}
	if err := trs[0].Send(1, big[:c.MaxMsg], nil); err != nil {
		t.Fatal(err)
	}
	sinks := []*sink{newSink(2), newSink(2)}
	pollAll(t, trs, sinks, func() bool { return sinks[1].n == 1 })
}

// TestOneSided reads and writes a peer's registered memory, small (bounce
// ring) and large (registered pieces), in one piece and in many, with and
// without the registration cache.
func TestOneSided(t *testing.T) {
	for _, cache := range []int{0, -1} {
		t.Run(fmt.Sprint("cache", cache), func(t *testing.T) {
			testOneSided(t, qtransport.Options{EagerLimit: 1024, ReadBounce: 4096, MaxSGE: 4, RegCache: cache})
		})
	}
}

func testOneSided(t *testing.T, opt qtransport.Options) {
	trs := open(t, 2, opt)
	sinks := []*sink{newSink(2), newSink(2)}
	remote := make([]byte, 1<<20)
	for i := range remote {
		remote[i] = byte(i * 7)
	}
	reg, err := trs[1].Register(remote)
	if err != nil {
		t.Fatal(err)
	}
	id := uint64(0)
	for round := 0; round < 2; round++ {
		for _, tc := range []struct {
			off, n, pieces int
			scattered      bool
		}{{0, 8, 1, false}, {100, 4000, 3, false}, {5, 4096, 1, false}, {1000, 300000, 1, false},
			{3, 1<<20 - 3, 10, false}, {77, 50000, 37, false}, {77, 50000, 5, true}} {
			for _, write := range []bool{false, true} {
				id++
				local := make([][]byte, tc.pieces)
				var check func() []byte
				if tc.scattered {
					// Pieces in separate arrays, in no particular order.
					for i := range local {
						local[i] = make([]byte, tc.n/tc.pieces+tc.n%tc.pieces*(i/(tc.pieces-1)))
						for k := range local[i] {
							local[i][k] = byte(k + i + int(id))
						}
					}
					check = func() []byte { return bytes.Join(local, nil) }
				} else {
					buf := make([]byte, tc.n)
					for i := range buf {
						buf[i] = byte(i*3 + int(id))
					}
					for i, at := 0, 0; i < tc.pieces; i++ {
						end := tc.n * (i + 1) / tc.pieces
						local[i] = buf[at:end]
						at = end
					}
					check = func() []byte { return buf }
				}
				r := transport.Region{Key: reg.Key, Addr: reg.Addr + uint64(tc.off)}
				if write {
					err = trs[0].Write(1, r, local, id)
				} else {
					err = trs[0].Read(1, r, local, id)
				}
				if err != nil {
					t.Fatal(err)
				}
				pollAll(t, trs, sinks, func() bool { _, ok := sinks[0].comps[id]; return ok })
				if err := sinks[0].comps[id]; err != nil {
					t.Fatalf("%+v write=%v: %v", tc, write, err)
				}
				if !bytes.Equal(remote[tc.off:tc.off+tc.n], check()) {
					t.Fatalf("%+v write=%v: wrong data", tc, write)
				}
			}
		}
	}
	st := trs[0].Stats()
	if st.ReadsBounced == 0 || st.ReadsRegistered == 0 {
		t.Errorf("stats %+v: both ways should have been used", st)
	}
	t.Logf("stats %+v", st)
	if err := trs[1].Deregister(reg); err != nil {
		t.Fatal(err)
	}
	if err := trs[1].Deregister(reg); !errors.Is(err, transport.ErrRegion) {
		t.Fatalf("second deregister: %v", err)
	}
	if opt.RegCache >= 0 {
		return // the cache keeps the region registered
	}
	// Without the cache, a read of a deregistered region fails, and breaks
	// the connection (verbs semantics): later sends report it.
	id++
	if err := trs[0].Read(1, reg, [][]byte{make([]byte, 64)}, id); err != nil {
		t.Fatal(err)
	}
	pollAll(t, trs, sinks, func() bool { _, ok := sinks[0].comps[id]; return ok })
	if sinks[0].comps[id] == nil {
		t.Fatal("read of a deregistered region succeeded")
	}
	if err := trs[0].Send(1, []byte("x"), nil); err == nil {
		t.Fatal("send on a broken connection succeeded")
	}
}

// TestRegistrationCache: repeated registrations of one buffer, and of
// pieces inside it, register once; the cache is bounded.
func TestRegistrationCache(t *testing.T) {
	trs := open(t, 2, qtransport.Options{RegCache: 2})
	tr := trs[0]
	buf := make([]byte, 1<<16)
	for i := 0; i < 10; i++ {
		reg, err := tr.Register(buf)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := tr.Register(buf[100:200])
		if err != nil {
			t.Fatal(err)
		}
		if sub.Key != reg.Key || sub.Addr != reg.Addr+100 {
			t.Fatalf("sub-buffer region %+v of %+v", sub, reg)
		}
		if err := tr.Deregister(sub); err != nil {
			t.Fatal(err)
		}
		if err := tr.Deregister(reg); err != nil {
			t.Fatal(err)
		}
	}
	if st := tr.Stats(); st.Registrations != 1 || st.Cached != 1 {
		t.Fatalf("stats %+v: want 1 registration, 1 cached", st)
	}
	for i := 0; i < 5; i++ {
		reg, err := tr.Register(make([]byte, 100))
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Deregister(reg); err != nil {
			t.Fatal(err)
		}
	}
	if st := tr.Stats(); st.Registrations != 6 || st.Cached != 2 {
		t.Fatalf("stats %+v: want 6 registrations, 2 cached", st)
	}
}

// TestOneSidedBacklog: reads queued behind a backlog complete in order.
func TestOneSidedBacklog(t *testing.T) {
	trs := open(t, 2, qtransport.Options{EagerLimit: 1024, SendDepth: 4, SendRing: 4096, ReadBounce: 512})
	sinks := []*sink{newSink(2), newSink(2)}
	remote, reg := registerPattern(t, trs[1], 64<<10, 1)
	bufs := make([][]byte, 40)
	for i := range bufs {
		hdr, data := transporttest.Payload(0, 1, i, 900)
		if err := trs[0].Send(1, hdr, data); err != nil {
			t.Fatal(err)
		}
		bufs[i] = make([]byte, 100+i*1000)
		if err := trs[0].Read(1, transport.Region{Key: reg.Key, Addr: reg.Addr + uint64(i)}, [][]byte{bufs[i]}, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	pollAll(t, trs, sinks, func() bool { return len(sinks[0].comps) == len(bufs) && sinks[1].n == len(bufs) })
	for i, b := range bufs {
		if err := sinks[0].comps[uint64(i)]; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, remote[i:i+len(b)]) {
			t.Fatalf("read %d wrong", i)
		}
	}
}

// TestBackloggedReadsChain: READs that wait in the backlog for room in the
// send queue go out in chains when completions make room (one post, and
// on shared memory one process_vm_readv, for several), not one READ per
// completion.
func TestBackloggedReadsChain(t *testing.T) {
	trs := open(t, 2, qtransport.Options{EagerLimit: 1024, SendDepth: 4, ReadBounce: 512})
	sinks := []*sink{newSink(2), newSink(2)}
	remote, reg := registerPattern(t, trs[1], 256<<10, 3)
	bufs := make([][]byte, 48)
	before := trs[0].Stats()
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
		r := transport.Region{Key: reg.Key, Addr: reg.Addr + uint64(i*4096+i)}
		if err := trs[0].Read(1, r, [][]byte{bufs[i]}, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	pollAll(t, trs, sinks, func() bool { return len(sinks[0].comps) == len(bufs) })
	checkReads(t, sinks[0], bufs, remote)
	st := trs[0].Stats()
	if st.Backlogged-before.Backlogged < 20 {
		t.Fatalf("%d READs backlogged, want most of %d (send depth 4)", st.Backlogged-before.Backlogged, len(bufs))
	}
	if got := st.Chains - before.Chains; got < 4 {
		t.Fatalf("%d chains for %d backlogged READs: they went out one per completion", got, st.Backlogged-before.Backlogged)
	}
}

// TestSelf: messages to self are delivered in order; reads and writes of
// one's own regions work.
func TestSelf(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			trs := open(t, n, qtransport.Options{})
			tr := trs[0]
			s := newSink(n)
			for i := 0; i < 100; i++ {
				hdr, data := transporttest.Payload(0, 0, i, i*50)
				if err := tr.Send(0, hdr, data); err != nil {
					t.Fatal(err)
				}
			}
			tr.Wait(time.Hour) // returns at once: something is queued
			if got := tr.Poll(s); got != 100 {
				t.Fatalf("polled %d", got)
			}
			for i, m := range s.msgs[0] {
				hdr, data := transporttest.Payload(0, 0, i, i*50)
				if !bytes.Equal(m, transporttest.Joined(hdr, data)) {
					t.Fatalf("message %d", i)
				}
			}
			mem := []byte("0123456789")
			reg, err := tr.Register(mem)
			if err != nil {
				t.Fatal(err)
			}
			a, b := make([]byte, 3), make([]byte, 2)
			if err := tr.Read(0, transport.Region{Key: reg.Key, Addr: reg.Addr + 2}, [][]byte{a, b}, 1); err != nil {
				t.Fatal(err)
			}
			if err := tr.Write(0, transport.Region{Key: reg.Key, Addr: reg.Addr + 8}, [][]byte{[]byte("x"), []byte("y")}, 2); err != nil {
				t.Fatal(err)
			}
			if err := tr.Read(0, transport.Region{Key: reg.Key, Addr: reg.Addr + 8}, [][]byte{make([]byte, 3)}, 3); !errors.Is(err, transport.ErrRegion) {
				t.Fatalf("read past the region: %v", err)
			}
			tr.Poll(s)
			if s.comps[1] != nil || s.comps[2] != nil || string(a)+string(b) != "23456" || string(mem) != "01234567xy" {
				t.Fatalf("comps %v, read %q%q, memory %q", s.comps, a, b, mem)
			}
			if err := tr.Deregister(reg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWaitWakes: a rank blocked in Wait returns when a message arrives.
func TestWaitWakes(t *testing.T) {
	trs := open(t, 2, qtransport.Options{})
	got := make(chan int, 1)
	go func() {
		s := newSink(2)
		for s.n == 0 {
			if trs[1].Poll(s) == 0 {
				trs[1].Wait(time.Hour)
			}
		}
		got <- len(s.msgs[0][0])
	}()
	time.Sleep(20 * time.Millisecond) // let the receiver block
	if err := trs[0].Send(1, []byte("wake up"), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 7 {
			t.Fatalf("got %d bytes", n)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Wait did not return")
	}
}

// TestMultiDevice: each rank reaches even peers over one device and odd
// peers over another; messages, one-sided operations and Wait work across
// both.
func TestMultiDevice(t *testing.T) {
	const n = 4
	devs := make([][2]rdmaio.Device, n)
	for r := range devs {
		for k := range devs[r] {
			d, err := rdmaio.Open("shm", rdmaio.Config{Job: testJob, Rank: r, LocalSize: n, Options: devOpts})
			if err != nil {
				t.Fatal(err)
			}
			devs[r][k] = d
		}
	}
	ex := qtransport.LocalExchange(n)
	trs := make([]*qtransport.Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range trs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			per := make([]rdmaio.Device, n)
			for p := range per {
				// The pair (r, p) uses device (r+p)%2 on both ends.
				per[p] = devs[r][(r+p)%2]
			}
			trs[r], errs[r] = qtransport.New(context.Background(), qtransport.Config{Rank: r, Size: n, Devices: per,
				Exchange: ex[r], CloseDevices: true, Options: qtransport.Options{EagerLimit: 1024}})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, tr := range trs {
			if err := tr.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	if !trs[0].Caps().OneSided {
		t.Fatal("two shm devices should allow one-sided operations")
	}
	mem := make([]byte, 1<<16)
	for i := range mem {
		mem[i] = byte(i ^ 0x5a)
	}
	reg, err := trs[0].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	var done sync.WaitGroup
	for r := 1; r < n; r++ {
		done.Add(1)
		go func() {
			defer done.Done()
			s := newSink(n)
			buf := make([]byte, 40000)
			if err := trs[r].Read(0, transport.Region{Key: reg.Key, Addr: reg.Addr + uint64(r)}, [][]byte{buf}, 9); err != nil {
				t.Error(err)
				return
			}
			for len(s.comps) == 0 {
				if trs[r].Poll(s) == 0 {
					trs[r].Wait(time.Second)
				}
			}
			if s.comps[9] != nil || !bytes.Equal(buf, mem[r:r+len(buf)]) {
				t.Errorf("rank %d: read %v", r, s.comps[9])
			}
			if err := trs[r].Send(0, []byte{byte(r)}, [][]byte{buf[:100]}); err != nil {
				t.Error(err)
			}
			// Keep polling until rank 0 has everything (our send completes).
			for i := 0; i < 1000; i++ {
				trs[r].Poll(s)
				runtime.Gosched()
			}
		}()
	}
	s := newSink(n)
	for s.n < n-1 {
		if trs[0].Poll(s) == 0 {
			trs[0].Wait(time.Second)
		}
	}
	done.Wait()
	for r := 1; r < n; r++ {
		if len(s.msgs[r]) != 1 || s.msgs[r][0][0] != byte(r) {
			t.Errorf("from rank %d: %v", r, s.msgs[r])
		}
	}
	if err := trs[0].Deregister(reg); err != nil {
		t.Fatal(err)
	}
}

// TestClose: Close drains what the receiver still takes, ends a Wait in
// progress, makes later calls fail with ErrClosed, and leaves no
// goroutine behind.
func TestClose(t *testing.T) {
	before := runtime.NumGoroutine()
	ctx := context.Background()
	trs, err := qtransport.OpenLocal(ctx, "shm", testJob, 2, devOpts, qtransport.Options{EagerLimit: 1024, SendDepth: 4, SendRing: 4096})
	if err != nil {
		t.Fatal(err)
	}
	// Queue more than fits, then close the sender while the receiver polls.
	for i := 0; i < 200; i++ {
		hdr, data := transporttest.Payload(0, 1, i, 20+i*3)
		if err := trs[0].Send(1, hdr, data); err != nil {
			t.Fatal(err)
		}
	}
	s := newSink(2)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		deadline := time.Now().Add(60 * time.Second)
		for s.n < 200 && time.Now().Before(deadline) {
			if trs[1].Poll(s) == 0 {
				trs[1].Wait(time.Millisecond)
			}
		}
	}()
	if err := trs[0].Close(); err != nil {
		t.Fatal(err)
	}
	<-recvDone
	if s.n != 200 {
		t.Fatalf("receiver got %d of 200 messages sent before Close", s.n)
	}
	if err := trs[0].Send(1, []byte("late"), nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if err := trs[0].Close(); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	// A Wait in progress ends when the transport closes.
	waited := make(chan struct{})
	go func() {
		trs[1].Wait(time.Hour)
		close(waited)
	}()
	time.Sleep(10 * time.Millisecond)
	if err := trs[1].Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not end at Close")
	}
	for i := 0; runtime.NumGoroutine() > before; i++ {
		if i == 1000 {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCloseWithPeerGone: closing after the peer closed does not hang.
func TestCloseWithPeerGone(t *testing.T) {
	trs, err := qtransport.OpenLocal(context.Background(), "shm", testJob, 2, devOpts, qtransport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := trs[0].Send(1, []byte("unread"), nil); err != nil {
		t.Fatal(err)
	}
	if err := trs[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := trs[0].Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBadInput: out-of-range ranks, foreign regions and bad configurations
// are errors, never panics or hangs.
func TestBadInput(t *testing.T) {
	trs := open(t, 2, qtransport.Options{})
	tr := trs[0]
	if err := tr.Send(2, nil, nil); !errors.Is(err, transport.ErrRank) {
		t.Errorf("send to rank 2: %v", err)
	}
	if err := tr.Send(-1, nil, nil); !errors.Is(err, transport.ErrRank) {
		t.Errorf("send to rank -1: %v", err)
	}
	if err := tr.Read(5, transport.Region{}, nil, 0); !errors.Is(err, transport.ErrRank) {
		t.Errorf("read from rank 5: %v", err)
	}
	if err := tr.Deregister(transport.Region{Key: 12345, Addr: 1}); !errors.Is(err, transport.ErrRegion) {
		t.Errorf("deregister of a foreign region: %v", err)
	}
	if err := tr.Read(0, transport.Region{Key: 12345, Addr: 1}, [][]byte{make([]byte, 4)}, 0); !errors.Is(err, transport.ErrRegion) {
		t.Errorf("read of an unknown own region: %v", err)
	}
	if reg, err := tr.Register(nil); err != nil || reg != (transport.Region{}) {
		t.Errorf("register of nothing: %v %v", reg, err)
	}

	ctx := context.Background()
	if _, err := qtransport.New(ctx, qtransport.Config{Rank: 3, Size: 2}); !errors.Is(err, transport.ErrRank) {
		t.Errorf("rank 3 of 2: %v", err)
	}
	if _, err := qtransport.New(ctx, qtransport.Config{Rank: 0, Size: 2}); err == nil {
		t.Error("no exchange, no devices: no error")
	}
	if _, err := qtransport.New(ctx, qtransport.Config{Rank: 0, Size: 1, Options: qtransport.Options{SendDepth: 2}}); err == nil {
		t.Error("send depth 2: no error")
	}
}

// TestNewMismatch: ranks that disagree (eager limits) all fail New, none
// hangs.
func TestNewMismatch(t *testing.T) {
	const n = 3
	ex := qtransport.LocalExchange(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := rdmaio.Open("shm", rdmaio.Config{Job: testJob, Rank: r, LocalSize: n, Options: devOpts})
			if err != nil {
				errs[r] = err
				return
			}
			var tr *qtransport.Transport
			tr, errs[r] = qtransport.New(context.Background(), qtransport.Config{Rank: r, Size: n, Devices: []rdmaio.Device{d},
				Exchange: ex[r], CloseDevices: true, Options: qtransport.Options{EagerLimit: 1024 * (1 + r/2)}})
			if tr != nil {
				tr.Close()
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: New succeeded", r)
		} else {
			t.Logf("rank %d: %v", r, err)
		}
	}
}

// TestHotPathDoesNotAllocate: Send (inline and bounced) and Poll (with
// delivery and receive buffer reposting) allocate nothing.
func TestHotPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	trs := open(t, 2, qtransport.Options{})
	sinks := []countSink{{}, {}}
	msg := make([]byte, 4000)
	for _, size := range []int{8, 200, 4000} {
		hdr, data := msg[:min(size, 13)], [][]byte{msg[min(size, 13):size]}
		step := func() {
			if err := trs[0].Send(1, hdr, data); err != nil {
				t.Fatal(err)
			}
			for sinks[1].n == 0 {
				trs[1].Poll(&sinks[1])
				trs[0].Poll(&sinks[0])
			}
			sinks[1].n = 0
			// A reply, so that the other direction is exercised as well.
			if err := trs[1].Send(0, hdr, data); err != nil {
				t.Fatal(err)
			}
			for sinks[0].n == 0 {
				trs[0].Poll(&sinks[0])
				trs[1].Poll(&sinks[1])
			}
			sinks[0].n = 0
		}
		for i := 0; i < 300; i++ {
			step() // warm up: the bounce ring, pools
		}
		if a := testing.AllocsPerRun(1000, step); a != 0 {
			t.Errorf("%d bytes: %v allocations per round trip", size, a)
		}
	}
}

type countSink struct{ n int }

func (c *countSink) Deliver(int, []byte)    { c.n++ }
func (c *countSink) Complete(uint64, error) { c.n++ }

// TestSendShort: SendShort delivers the header and the data as one
// message, in order with Send, to a peer (inline and bounced sizes) and to
// self, refuses what Send refuses, and does not allocate.
func TestSendShort(t *testing.T) {
	trs := open(t, 2, qtransport.Options{EagerLimit: 8000})
	sinks := []*sink{newSink(2), newSink(2)}
	var hb [transport.ShortHeaderLen]byte
	copy(hb[:], "header-bytes")
	h := transport.ShortHeaderOf(hb[:])
	data := bytes.Repeat([]byte("d"), 5000)
	sizes := []int{0, 8, 200, 5000}
	for _, dst := range []int{1, 0} {
		for i, n := range sizes {
			if err := trs[0].SendShort(dst, h, 6+i, data[:n]); err != nil {
				t.Fatalf("to %d, %d bytes: %v", dst, n, err)
			}
		}
		if err := trs[0].Send(dst, []byte("after"), nil); err != nil {
			t.Fatal(err)
		}
	}
	pollAll(t, trs, sinks, func() bool { return sinks[1].n == len(sizes)+1 && sinks[0].n == len(sizes)+1 })
	for _, dst := range []int{1, 0} {
		got := sinks[dst].msgs[0]
		for i, n := range sizes {
			if want := transporttest.Joined(hb[:6+i], [][]byte{data[:n]}); !bytes.Equal(got[i], want) {
				t.Errorf("to %d, message %d: %d bytes %.20q, want %d bytes %.20q", dst, i, len(got[i]), got[i], len(want), want)
			}
		}
		if string(got[len(sizes)]) != "after" {
			t.Errorf("to %d: last message %q, want the Send after them", dst, got[len(sizes)])
		}
	}
	if err := trs[0].SendShort(1, h, 16, make([]byte, trs[0].Caps().MaxMsg)); !errors.Is(err, transport.ErrTooLong) {
		t.Errorf("oversize SendShort: %v", err)
	}
	for _, hn := range []int{-1, 17} {
		if err := trs[0].SendShort(1, h, hn, nil); err == nil {
			t.Errorf("SendShort with a %d-byte header: no error", hn)
		}
	}
	if err := trs[0].SendShort(2, h, 1, nil); !errors.Is(err, transport.ErrRank) {
		t.Errorf("SendShort to rank 2 of 2: %v", err)
	}
	if raceEnabled {
		return
	}
	cs := []countSink{{}, {}}
	step := func() {
		if err := trs[0].SendShort(1, h, 13, data[:8]); err != nil {
			t.Fatal(err)
		}
		for cs[1].n == 0 {
			trs[1].Poll(&cs[1])
			trs[0].Poll(&cs[0])
		}
		cs[1].n = 0
	}
	for i := 0; i < 300; i++ {
		step()
	}
	if a := testing.AllocsPerRun(1000, step); a != 0 {
		t.Errorf("%v allocations per SendShort", a)
	}
}

// TestReadBounceDefault checks the default bounce limits: on shm a Read
// of more than 8 KiB into unregistered memory registers its pieces (a copy
// through the bounce ring costs more there), a smaller one is bounced.
func TestReadBounceDefault(t *testing.T) {
	trs := open(t, 2, qtransport.Options{})
	sinks := []*sink{newSink(2), newSink(2)}
	remote, reg := registerPattern(t, trs[1], 64<<10, 5)
	for i, tc := range []struct {
		n                   int
		bounced, registered uint64
	}{{8 << 10, 1, 0}, {8<<10 + 1, 1, 1}, {64 << 10, 1, 2}} {
		id := uint64(i + 1)
		local := make([]byte, tc.n)
		if err := trs[0].Read(1, transport.Region{Key: reg.Key, Addr: reg.Addr}, [][]byte{local}, id); err != nil {
			t.Fatal(err)
		}
		pollAll(t, trs, sinks, func() bool { _, ok := sinks[0].comps[id]; return ok })
		if err := sinks[0].comps[id]; err != nil {
			t.Fatalf("read of %d bytes: %v", tc.n, err)
		}
		if !bytes.Equal(local, remote[:tc.n]) {
			t.Fatalf("read of %d bytes: wrong data", tc.n)
		}
		if st := trs[0].Stats(); st.ReadsBounced != tc.bounced || st.ReadsRegistered != tc.registered {
			t.Fatalf("after a read of %d bytes: %d bounced, %d registered; want %d and %d",
				tc.n, st.ReadsBounced, st.ReadsRegistered, tc.bounced, tc.registered)
		}
	}
}

// TestDefaultEagerLimits: without EagerLimit, peers over tcp get 64 KiB,
// peers over shm 16 KiB; an EagerLimit that is set applies to both.
func TestDefaultEagerLimits(t *testing.T) {
	for _, tc := range []struct {
		provider string
		opt      qtransport.Options
		want     int
	}{
		{"shm", qtransport.Options{}, qtransport.DefaultEagerLimit},
		{"tcp", qtransport.Options{}, qtransport.DefaultTCPEagerLimit},
		{"tcp", qtransport.Options{EagerLimit: 20000}, 20000},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		trs, err := qtransport.OpenLocal(ctx, tc.provider, testJob, 2, nil, tc.opt)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", tc.provider, err)
		}
		c := trs[0].Caps()
		for _, tr := range trs {
			if err := tr.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
		if c.EagerLimit != tc.want || c.PeerEagerLimit != nil && c.PeerEagerLimit[1] != tc.want {
			t.Errorf("%s %+v: eager limit %d (peer %v), want %d", tc.provider, tc.opt, c.EagerLimit, c.PeerEagerLimit, tc.want)
		}
	}
}

// TestSendShortHeld: messages held back by SendShortHeld reach the peer
// in order with the Sends after them, several are posted with one
// doorbell, and they go out even when the sender never calls the
// transport again (its progress goroutine posts them).
func TestSendShortHeld(t *testing.T) {
	trs := open(t, 2, qtransport.Options{EagerLimit: 8000})
	var b transport.Batcher = trs[0]
	var hb [transport.ShortHeaderLen]byte
	copy(hb[:], "held-header")
	h := transport.ShortHeaderOf(hb[:])
	data := bytes.Repeat([]byte("h"), 5000)
	sizes := []int{0, 8, 200, 5000, 8, 8, 8, 8}
	var want [][]byte
	// The progress goroutine may post a chain early when the sender is
	// descheduled for long; of several rounds, one posts a chain.
	chained := false
	for round := 0; round < 20 && !chained; round++ {
		before := trs[0].Stats()
		for i, n := range sizes {
			if err := b.SendShortHeld(1, h, 4+i, data[:n]); err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
			want = append(want, transporttest.Joined(hb[:4+i], [][]byte{data[:n]}))
		}
		b.Flush()
		chained = trs[0].Stats().Chains > before.Chains
	}
	if !chained {
		t.Errorf("%d held messages posted one by one (no chain), 20 times", len(sizes))
	}
	// More than a chain's worth, then a Send: all in order.
	for i := range 40 {
		if err := b.SendShortHeld(1, h, 16, data[:i]); err != nil {
			t.Fatal(err)
		}
		want = append(want, transporttest.Joined(hb[:16], [][]byte{data[:i]}))
	}
	if err := trs[0].Send(1, []byte("after"), nil); err != nil {
		t.Fatal(err)
	}
	want = append(want, []byte("after"))
	// Held messages and no further call of the sender.
	for i := range 5 {
		if err := b.SendShortHeld(1, h, 1, data[:i]); err != nil {
			t.Fatal(err)
		}
		want = append(want, transporttest.Joined(hb[:1], [][]byte{data[:i]}))
	}
	// Only the receiver polls from here on.
	s := newSink(2)
	deadline := time.Now().Add(60 * time.Second)
	for s.n < len(want) {
		if trs[1].Poll(s) == 0 {
			trs[1].Wait(time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d messages", s.n, len(want))
		}
	}
	for i, m := range s.msgs[0] {
		if !bytes.Equal(m, want[i]) {
			t.Fatalf("message %d: %d bytes %.20q, want %d bytes %.20q", i, len(m), m, len(want[i]), want[i])
		}
	}
	// Held messages to self are sent at once.
	if err := b.SendShortHeld(0, h, 2, data[:3]); err != nil {
		t.Fatal(err)
	}
	s0 := newSink(2)
	pollAll(t, trs[:1], []*sink{s0}, func() bool { return s0.n == 1 })
}

// TestSendShortHeldFirstAtOnce: the first SendShortHeld after a Flush (or
// Poll) is posted at once, the next ones are held until the next Flush (or
// earlier, by the progress goroutine when the sender is descheduled for
// long: of several rounds, one must see them held), and all arrive in
// order.
func TestSendShortHeldFirstAtOnce(t *testing.T) {
	trs := open(t, 2, qtransport.Options{})
	var b transport.Batcher = trs[0]
	var h transport.ShortHeader
	var hb [transport.ShortHeaderLen]byte // h's bytes
	var want [][]byte
	sawHeld := false
	for round := range 20 {
		b.Flush()
		for i := range 3 {
			msg := []byte{byte(round), byte(i)}
			if err := b.SendShortHeld(1, h, 1, msg); err != nil {
				t.Fatal(err)
			}
			want = append(want, transporttest.Joined(hb[:1], [][]byte{msg}))
			held := trs[0].HeldPeers()
			if i == 0 && held != 0 {
				t.Fatalf("round %d: the first message of a burst is held", round)
			}
			sawHeld = sawHeld || held != 0
		}
		if round%2 == 1 {
			trs[0].Poll(newSink(2)) // a Poll ends the burst too
		} else {
			b.Flush()
		}
		if held := trs[0].HeldPeers(); held != 0 {
			t.Fatalf("round %d: %d peers hold messages after the flush", round, held)
		}
	}
	if !sawHeld {
		t.Error("no message after the first of a burst was held, 20 times")
	}
	s := newSink(2)
	pollAll(t, trs[1:], []*sink{s}, func() bool { return s.n == len(want) })
	for i, m := range s.msgs[0] {
		if !bytes.Equal(m, want[i]) {
			t.Fatalf("message %d: %q, want %q", i, m, want[i])
		}
	}
}

// TestSendShortHeldConcurrentFlushes: goroutines of one rank hold messages
// to different peers and flush at the same time (as comm's callers and
// its progress goroutine do): every message arrives once, in order.
func TestSendShortHeldConcurrentFlushes(t *testing.T) {
	const senders, per = 4, 300
	trs := open(t, senders+1, qtransport.Options{})
	var h transport.ShortHeader
	var hb [transport.ShortHeaderLen]byte // h's bytes
	errs := make(chan error, senders)
	for g := range senders {
		go func() {
			for i := range per {
				msg := []byte{byte(g), byte(i), byte(i >> 8)}
				if err := trs[0].SendShortHeld(g+1, h, 1, msg); err != nil {
					errs <- err
					return
				}
				if i%3 == 2 {
					trs[0].Flush()
				}
			}
			trs[0].Flush()
			errs <- nil
		}()
	}
	sinks := make([]*sink, senders+1)
	for r := range sinks {
		sinks[r] = newSink(senders + 1)
	}
	pollAll(t, trs, sinks, func() bool {
		for r := 1; r <= senders; r++ {
			if sinks[r].n < per {
				return false
			}
		}
		return true
	})
	for range senders {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for r := 1; r <= senders; r++ {
		got := sinks[r].msgs[0]
		if len(got) != per {
			t.Fatalf("rank %d got %d messages, want %d", r, len(got), per)
		}
		for i, m := range got {
			if want := transporttest.Joined(hb[:1], [][]byte{{byte(r - 1), byte(i), byte(i >> 8)}}); !bytes.Equal(m, want) {
				t.Fatalf("rank %d, message %d: %q, want %q", r, i, m, want)
			}
		}
	}
}

// TestReadHeld: READs given with ReadHeld stay in the peer's chain and are
// posted with the next Read as one chain (or by the progress goroutine,
// when the owner takes longer than its grace); held READs that no Read
// follows go out at the next Poll. Every READ completes with its data.
func TestReadHeld(t *testing.T) {
	trs := open(t, 2, qtransport.Options{})
	sinks := []*sink{newSink(2), newSink(2)}
	remote, reg := registerPattern(t, trs[1], 64<<10, 7)
	bufs := make([][]byte, 14)
	read := func(i int, held bool) {
		t.Helper()
		bufs[i] = make([]byte, 4096)
		r := transport.Region{Key: reg.Key, Addr: reg.Addr + uint64(i*4096+i)}
		f := trs[0].Read
		if held {
			f = trs[0].ReadHeld
		}
		if err := f(1, r, [][]byte{bufs[i]}, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	chains := trs[0].Stats().Chains
	for i := 0; i < 10; i++ {
		read(i, true)
	}
	read(10, false)
	// One chain, or a few when the progress goroutine posted what was
	// held in between (a slow run); never one READ per post.
	if got := trs[0].Stats().Chains - chains; got == 0 {
		t.Fatalf("10 held READs and a READ went out one by one, not as a chain")
	}
	for i := 11; i < len(bufs); i++ {
		read(i, true) // no Read follows: the next Poll posts them
	}
	pollAll(t, trs, sinks, func() bool { return len(sinks[0].comps) == len(bufs) })
	checkReads(t, sinks[0], bufs, remote)
}

// checkReads checks that the READs of bufs, bufs[i] from offset i*4096+i
// of remote, completed with no error and got the right bytes.
func checkReads(t *testing.T, s *sink, bufs [][]byte, remote []byte) {
	t.Helper()
	for i, b := range bufs {
		if err := s.comps[uint64(i)]; err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if off := i*4096 + i; !bytes.Equal(b, remote[off:off+len(b)]) {
			t.Fatalf("read %d wrong", i)
		}
	}
}

// registerPattern registers with tr a buffer of n bytes holding byte(i*mul)
// at offset i.
func registerPattern(t *testing.T, tr *qtransport.Transport, n, mul int) ([]byte, transport.Region) {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * mul)
	}
	reg, err := tr.Register(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, reg
}

// TestReadPassesUnreceivedSend: a READ (the rendezvous's) runs while a
// SEND posted before it to the same rank has not been received yet (the
// peer has not polled), instead of waiting for the peer's next poll
// (rdmaio.SendUnordered): on shared memory the two ranks of a
// bidirectional transfer would otherwise take turns. It still completes
// after the SEND.
func TestReadPassesUnreceivedSend(t *testing.T) {
	trs := open(t, 2, qtransport.Options{ReadBounce: 4096})
	sinks := []*sink{newSink(2), newSink(2)}
	remote := make([]byte, 64<<10)
	for i := range remote {
		remote[i] = byte(i*5 + 1)
	}
	reg, err := trs[1].Register(remote)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1000, 64 << 10} { // bounced, registered
		if err := trs[0].Send(1, []byte("first"), nil); err != nil {
			t.Fatal(err)
		}
		local := make([]byte, n)
		id := uint64(n)
		if err := trs[0].Read(1, transport.Region{Key: reg.Key, Addr: reg.Addr}, [][]byte{local}, id); err != nil {
			t.Fatal(err)
		}
		for range 100 {
			trs[0].Poll(sinks[0])
		}
		if sinks[1].n != 0 {
			t.Fatal("rank 1 received without polling")
		}
		if _, done := sinks[0].comps[id]; done {
			t.Fatalf("%d-byte READ completed before the SEND posted ahead of it", n)
		}
		if n > 4096 && !bytes.Equal(local, remote[:n]) {
			// A bounced READ lands in the bounce ring and is copied
			// out at its completion; a registered one lands in local.
			t.Fatalf("%d-byte READ waited for rank 1 to receive the SEND before it", n)
		}
		pollAll(t, trs, sinks, func() bool { _, ok := sinks[0].comps[id]; return ok })
		if err := sinks[0].comps[id]; err != nil || !bytes.Equal(local, remote[:n]) {
			t.Fatalf("%d-byte READ: %v, data intact %v", n, err, bytes.Equal(local, remote[:n]))
		}
		sinks[1].n = 0
	}
}

// takeAll is a transport.MsgTaker that takes every message offered.
type takeAll struct{ got [][]byte }

func (k *takeAll) Take(msg []byte) bool {
	k.got = append(k.got, append([]byte(nil), msg...))
	return true
}

// TestReapLeavesMessages: Reap hands out the completion of a READ (a send
// queue's work) while a message that arrived meanwhile stays where it
// lies, for Take; Poll would have delivered it.
func TestReapLeavesMessages(t *testing.T) {
	trs := open(t, 2, qtransport.Options{})
	remote := []byte("remote bytes")
	reg, err := trs[1].Register(remote)
	if err != nil {
		t.Fatal(err)
	}
	local := make([]byte, len(remote))
	if err := trs[0].Read(1, reg, [][]byte{local}, 42); err != nil {
		t.Fatal(err)
	}
	if err := trs[1].Send(0, []byte("message"), nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !trs[0].Arrived(1) {
		if time.Now().After(deadline) {
			t.Fatal("the message never arrived")
		}
		runtime.Gosched()
	}
	s := newSink(2)
	for len(s.comps) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Reap never handed out the READ's completion")
		}
		trs[0].Reap(s)
	}
	if err, ok := s.comps[42]; !ok || err != nil || string(local) != string(remote) {
		t.Fatalf("READ: completions %v, bytes %q", s.comps, local)
	}
	if len(s.msgs[1]) != 0 || !trs[0].Arrived(1) {
		t.Fatalf("Reap took the message (delivered %q)", s.msgs[1])
	}
	var k takeAll
	if !trs[0].Take(1, &k, 0) || len(k.got) != 1 || string(k.got[0]) != "message" {
		t.Fatalf("Take after Reap: %q", k.got)
	}
}
