package tcpnet_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/tcpnet"
)

type inbox struct {
	mu     sync.Mutex
	frames map[int][][]byte
	lost   map[int]error
	cond   *sync.Cond
}

func newInbox() *inbox {
	b := &inbox{frames: map[int][][]byte{}, lost: map[int]error{}}
	b.cond = sync.NewCond(&b.mu)
	return b
}

func (b *inbox) deliver(from int, f []byte) {
	b.mu.Lock()
	b.frames[from] = append(b.frames[from], f)
	b.cond.Broadcast()
	b.mu.Unlock()
}

func (b *inbox) wait(t *testing.T, from, n int) [][]byte {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.frames[from]) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames from rank %d", len(b.frames[from]), n, from)
		}
		b.mu.Unlock()
		time.Sleep(time.Millisecond)
		b.mu.Lock()
	}
	return b.frames[from]
}

func start(t *testing.T, size int, secret string) ([]*tcpnet.Net, []*inbox) {
	t.Helper()
	boxes := make([]*inbox, size)
	cfgs := make([]tcpnet.Config, size)
	for r := range cfgs {
		boxes[r] = newInbox()
		b := boxes[r]
		cfgs[r] = tcpnet.Config{Rank: r, Size: size, Job: "job", Secret: []byte(secret),
			Deliver: b.deliver,
			Lost: func(from int, err error) {
				b.mu.Lock()
				b.lost[from] = err
				b.mu.Unlock()
			}}
	}
	return listenAll(t, cfgs), boxes
}

// listenAll starts a rank for each configuration and tells every rank
// the others' addresses.
func listenAll(t testing.TB, cfgs []tcpnet.Config) []*tcpnet.Net {
	t.Helper()
	nets := make([]*tcpnet.Net, len(cfgs))
	addrs := make([]string, len(cfgs))
	for r, cfg := range cfgs {
		n, err := tcpnet.Listen(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		nets[r], addrs[r] = n, n.Addr()
	}
	for _, n := range nets {
		if err := n.SetPeers(addrs); err != nil {
			t.Fatal(err)
		}
	}
	return nets
}

// Every rank sends every other rank numbered frames from several
// goroutines at once; each receiver sees each sender's frames whole and,
// per sending goroutine, in order.
func TestFramesArriveWholeAndInOrder(t *testing.T) {
	const size, per = 3, 300
	nets, boxes := start(t, size, "s3cret")
	var wg sync.WaitGroup
	for from := range nets {
		for to := range nets {
			if to == from {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < per; i++ {
					var hdr [4]byte
					binary.BigEndian.PutUint32(hdr[:], uint32(i))
					body := bytes.Repeat([]byte{byte(from)}, i*37%5000)
					if err := nets[from].Send(to, hdr[:], body); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for to := range nets {
		for from := range nets {
			if to == from {
				continue
			}
			got := boxes[to].wait(t, from, per)
			for i, f := range got {
				if binary.BigEndian.Uint32(f) != uint32(i) || len(f) != 4+i*37%5000 || (len(f) > 4 && f[4] != byte(from)) {
					t.Fatalf("frame %d from %d at %d: %d bytes, number %d", i, from, to, len(f), binary.BigEndian.Uint32(f))
				}
			}
		}
	}
}

func TestWrongSecretIsRefused(t *testing.T) {
	good, _ := start(t, 2, "right")
	bad, err := tcpnet.Listen(tcpnet.Config{Rank: 1, Size: 2, Job: "job", Secret: []byte("wrong"), Deliver: func(int, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.SetPeers([]string{good[0].Addr(), bad.Addr()})
	err = bad.Send(0, []byte("hello"))
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("send with the wrong secret: %v", err)
	}
}

func TestBadDestinationsAndLostPeers(t *testing.T) {
	nets, boxes := start(t, 2, "x")
	for _, to := range []int{-1, 0, 2} {
		if err := nets[0].Send(to, nil); err == nil {
			t.Errorf("send to %d succeeded", to)
		}
	}
	if err := nets[1].Send(0, []byte("a")); err != nil {
		t.Fatal(err)
	}
	boxes[0].wait(t, 1, 1)
	nets[1].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		boxes[0].mu.Lock()
		_, lost := boxes[0].lost[1]
		boxes[0].mu.Unlock()
		if lost {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed peer was not reported lost")
		}
		time.Sleep(time.Millisecond)
	}
	if err := nets[1].Send(0, []byte("b")); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("send after Close: %v", err)
	}
}

// polledPair starts two ranks whose owners poll (Config.Polled) and
// records on which goroutine frames are delivered.
func polledPair(t testing.TB) ([]*tcpnet.Net, *[][]byte, *error) {
	t.Helper()
	var got [][]byte
	var lost error
	cfgs := make([]tcpnet.Config, 2)
	for r := range cfgs {
		cfgs[r] = tcpnet.Config{Rank: r, Size: 2, Job: "job", Secret: []byte("k"), Polled: true,
			Deliver: func(int, []byte) { t.Error("rank 0 received a frame") },
			Lost:    func(int, error) {}}
	}
	cfgs[1].Deliver = func(from int, f []byte) { got = append(got, f) }
	cfgs[1].Lost = func(from int, err error) { lost = err }
	return listenAll(t, cfgs), &got, &lost
}

// pollUntil waits on n's descriptor and polls it until cond holds.
func pollUntil(t *testing.T, n *tcpnet.Net, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out polling")
		}
		fds := []unix.PollFd{{Fd: int32(n.FD()), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 100); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		n.Poll()
	}
}

// A polled Net delivers nothing by itself: frames wait, its descriptor
// turns readable, and Poll delivers them whole and in order on the
// caller's goroutine, small and larger than the read buffer alike.
func TestPolledDeliversOnlyFromPoll(t *testing.T) {
	nets, got, _ := polledPair(t)
	sizes := []int{0, 1, 4093, 300 << 10, 17, 3 << 20, 5}
	for i, n := range sizes {
		body := bytes.Repeat([]byte{byte(i + 1)}, n)
		if err := nets[0].Send(1, []byte{byte(i)}, body); err != nil {
			t.Fatal(err)
		}
	}
	fds := []unix.PollFd{{Fd: int32(nets[1].FD()), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 20000); err != nil || n != 1 {
		t.Fatalf("the descriptor did not turn readable: %d, %v", n, err)
	}
	time.Sleep(10 * time.Millisecond) // a goroutine delivering would have by now
	if len(*got) != 0 {
		t.Fatalf("%d frames delivered without Poll", len(*got))
	}
	pollUntil(t, nets[1], func() bool { return len(*got) == len(sizes) })
	for i, f := range *got {
		if len(f) != 1+sizes[i] || f[0] != byte(i) || (sizes[i] > 0 && (f[1] != byte(i+1) || f[len(f)-1] != byte(i+1))) {
			t.Fatalf("frame %d: %d bytes, first %d, want %d bytes", i, len(f), f[0], 1+sizes[i])
		}
	}
	if n := nets[1].Poll(); n != 0 {
		t.Fatalf("Poll delivered %d more frames", n)
	}
}

// Sends never wait for the peer to read: far more than the sockets hold
// is queued at once, in order, and arrives whole once the peer polls.
func TestSendDoesNotWaitForThePeer(t *testing.T) {
	nets, got, _ := polledPair(t)
	const frames, size = 64, 256 << 10 // 16 MiB, nobody reading meanwhile
	done := make(chan error, 1)
	go func() {
		for i := range frames {
			body := bytes.Repeat([]byte{byte(i)}, size)
			if err := nets[0].Send(1, body); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Send waited for a peer that does not read")
	}
	pollUntil(t, nets[1], func() bool { return len(*got) == frames })
	for i, f := range *got {
		if len(f) != size || f[0] != byte(i) || f[size-1] != byte(i) {
			t.Fatalf("frame %d: %d bytes of %d", i, len(f), f[0])
		}
	}
}

// A polled Net reports a lost peer from Poll, and has no descriptor once
// closed.
func TestPolledLostAndClose(t *testing.T) {
	nets, got, lost := polledPair(t)
	if err := nets[0].Send(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, nets[1], func() bool { return len(*got) == 1 })
	nets[0].Close()
	pollUntil(t, nets[1], func() bool { return *lost != nil })
	if fd := nets[1].FD(); fd < 0 {
		t.Fatalf("FD = %d before Close", fd)
	}
	nets[1].Close()
	if fd := nets[1].FD(); fd != -1 {
		t.Fatalf("FD = %d after Close, want -1", fd)
	}
	if n := nets[1].Poll(); n != 0 {
		t.Fatalf("Poll after Close delivered %d frames", n)
	}
}

// A receiver that releases the frames it was delivered receives them
// without allocating, whole and intact, small frames, page-sized ones and
// ones read into a buffer of their own alike; sending allocates nothing
// either.
func TestReleasedFramesAreReusedWithoutAllocating(t *testing.T) {
	nets, got, _ := polledPair(t)
	for _, size := range []int{64, 4096 + 40, 40 << 10, 100 << 10} {
		msg := make([]byte, size)
		round := 0
		var fds [1]unix.PollFd
		exchange := func() {
			round++
			for i := range msg {
				msg[i] = byte(round + i)
			}
			if err := nets[0].Send(1, msg); err != nil {
				t.Fatal(err)
			}
			for len(*got) == 0 {
				fds[0] = unix.PollFd{Fd: int32(nets[1].FD()), Events: unix.POLLIN}
				if _, err := unix.Poll(fds[:], 1000); err != nil && err != unix.EINTR {
					t.Fatal(err)
				}
				nets[1].Poll()
			}
			f := (*got)[0]
			*got = (*got)[:0]
			if !bytes.Equal(f, msg) {
				t.Fatalf("frame of %d bytes in round %d: got %d bytes, not what was sent", size, round, len(f))
			}
			clear(f) // a buffer handed out again must be filled afresh
			nets[1].Release(f)
		}
		for range 3 { // dial, and fill the pool
			exchange()
		}
		if allocs := testing.AllocsPerRun(50, exchange); allocs != 0 {
			t.Errorf("%.1f allocations per frame of %d bytes sent, received and released, want 0", allocs, size)
		}
	}
}

// A frame that is not released is the receiver's for good: later frames
// are received into other buffers.
func TestUnreleasedFramesAreKept(t *testing.T) {
	nets, got, _ := polledPair(t)
	for i := range 20 {
		if err := nets[0].Send(1, bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, nets[1], func() bool { return len(*got) == i+1 })
		if i%2 == 1 {
			nets[1].Release((*got)[i-1][:0:0]) // not a pooled buffer: ignored
			nets[1].Release(make([]byte, 0, 3000))
		}
	}
	for i, f := range *got {
		if !bytes.Equal(f, bytes.Repeat([]byte{byte(i)}, 100)) {
			t.Fatalf("frame %d was overwritten: % x", i, f[:8])
		}
	}
}

// BenchmarkRoundTrip sends a page-sized frame and polls until it is
// delivered, with the receiver releasing each frame or keeping it (as a
// receiver that never calls Release does).
func BenchmarkRoundTrip(b *testing.B) {
	for _, release := range []bool{true, false} {
		name := "keep"
		if release {
			name = "release"
		}
		b.Run(name, func(b *testing.B) {
			nets, got, _ := polledPair(b)
			msg := make([]byte, 4096+40)
			var fds [1]unix.PollFd
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				if err := nets[0].Send(1, msg); err != nil {
					b.Fatal(err)
				}
				for len(*got) == 0 {
					fds[0] = unix.PollFd{Fd: int32(nets[1].FD()), Events: unix.POLLIN}
					if _, err := unix.Poll(fds[:], 1000); err != nil && err != unix.EINTR {
						b.Fatal(err)
					}
					nets[1].Poll()
				}
				if release {
					nets[1].Release((*got)[0])
				}
				(*got)[0] = nil
				*got = (*got)[:0]
			}
		})
	}
}

// Wait waits for frames and for the owner's own descriptors (Watch) in
// one call: it sleeps while nothing is readable, delivers the frames that
// arrived, reports the watched descriptors that are readable by key, and
// says when the Net is closed.
func TestWaitWatchesOwnDescriptors(t *testing.T) {
	nets, got, _ := polledPair(t)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if err := nets[1].Watch(p[0], 5); err != nil {
		t.Fatal(err)
	}
	if err := nets[1].Watch(p[0], tcpnet.MaxWatch); err == nil {
		t.Fatal("Watch took a key out of range")
	}
	// (The runtime's signals may end the sleep early.)
	if n, ready, err := nets[1].Wait(20 * time.Millisecond); n != 0 || ready != 0 || err != nil {
		t.Fatalf("Wait with nothing readable = %d, %#x, %v", n, ready, err)
	}
	if _, err := unix.Write(p[1], []byte{1}); err != nil {
		t.Fatal(err)
	}
	if _, ready, err := nets[1].Wait(20 * time.Second); ready != 1<<5 || err != nil {
		t.Fatalf("Wait with the pipe readable: ready %#x, %v", ready, err)
	}
	// Level-triggered: readable until read.
	if _, ready, _ := nets[1].Wait(0); ready != 1<<5 {
		t.Fatalf("Wait(0) with the pipe still readable: ready %#x", ready)
	}
	var b [1]byte
	unix.Read(p[0], b[:])
	if err := nets[0].Send(1, []byte("frame")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(*got) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no frame delivered by Wait")
		}
		if _, ready, err := nets[1].Wait(100 * time.Millisecond); ready != 0 || err != nil {
			t.Fatalf("Wait for a frame: ready %#x, %v", ready, err)
		}
	}
	if string((*got)[0]) != "frame" {
		t.Fatalf("frame %q", (*got)[0])
	}
	nets[1].Close()
	if _, _, err := nets[1].Wait(0); !errors.Is(err, tcpnet.ErrClosed) {
		t.Fatalf("Wait after Close: %v, want ErrClosed", err)
	}
	if err := nets[1].Watch(p[0], 6); err == nil {
		t.Fatal("Watch after Close succeeded")
	}
}
