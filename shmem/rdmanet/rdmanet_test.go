package rdmanet

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/internal/backoff"
	"github.com/jiarun/jia/shmem/internal/bell"
)

// poller polls n until stop is closed, as a pager does: polling as p says
// after each completion, then sleeping on its bell.
func poller(t testing.TB, n *Net, b *bell.Bell, p backoff.Policy, stop chan struct{}) {
	var w backoff.Waiter
	fds := []unix.PollFd{{Fd: int32(b.FD()), Events: unix.POLLIN}}
	for {
		select {
		case <-stop:
			return
		default:
		}
		if n.Poll() > 0 {
			w.Reset(p)
			continue
		}
		if w.Pause() {
			continue
		}
		b.SetSleeping(true)
		if n.Poll() == 0 {
			timeout := 100
			if n.Busy() {
				timeout = 1
			}
			unix.Poll(fds, timeout)
		}
		b.SetSleeping(false)
		b.Drain()
		w.Reset(p)
	}
}

// pollers starts a poller for each Net.
func pollers(t testing.TB, nets []*Net, bells []*bell.Bell, p backoff.Policy) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range nets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			poller(t, nets[i], bells[i], p, stop)
		}()
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
}

// connect opens, prepares and connects n Nets of one job, with deliver
// giving each rank's Deliver.
func connect(t testing.TB, n int, deliver func(r int) func(int, []byte)) ([]*Net, []*bell.Bell) {
	t.Helper()
	job := fmt.Sprintf("rdmanet-test-%d", time.Now().UnixNano())
	nets := make([]*Net, n)
	bells := make([]*bell.Bell, n)
	qpns := make([]map[int]uint32, n)
	for r := range n {
		b, err := bell.New(job, r)
		if err != nil {
			t.Fatal(err)
		}
		bells[r] = b
		net, err := Open(Config{Rank: r, Size: n, Job: job, LocalSize: n, Deliver: deliver(r),
			Lost: func(from int, err error) { t.Errorf("rank %d lost rank %d: %v", r, from, err) },
			Wake: b.Ring})
		if err != nil {
			t.Fatal(err)
		}
		nets[r] = net
		t.Cleanup(func() {
			net.Close()
			b.Close()
		})
		var peers []int
		for q := range n {
			if q != r {
				peers = append(peers, q)
			}
		}
		if qpns[r], err = net.Prepare(peers); err != nil {
			t.Fatal(err)
		}
	}
	for r := range n {
		for q := range n {
			if q != r {
				if err := nets[r].Connect(q, nets[q].Addr(), bells[q].Addr(), qpns[q][r]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, b := range bells {
		b.Unlink()
	}
	return nets, bells
}

// received collects the frames delivered to one rank.
type received struct {
	mu     sync.Mutex
	frames map[int][][]byte
	n      int
	want   int
	done   chan struct{}
}

func (r *received) deliver(from int, f []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames[from] = append(r.frames[from], f)
	r.n++
	if r.n == r.want {
		close(r.done)
	}
}

// mesh connects n Nets of one job, every rank expecting want frames,
// and starts their pollers.
func mesh(t *testing.T, n, want int, p backoff.Policy) ([]*Net, []*received) {
	t.Helper()
	recs := make([]*received, n)
	for r := range n {
		recs[r] = &received{frames: map[int][][]byte{}, want: want, done: make(chan struct{})}
	}
	nets, bells := connect(t, n, func(r int) func(int, []byte) { return recs[r].deliver })
	pollers(t, nets, bells, p)
	return nets, recs
}

// frameOf returns the i-th frame rank from sends: its size cycles through
// inline, single-fragment and many-fragment sizes, and its bytes name it.
func frameOf(from, i int) []byte {
	sizes := []int{1, 100, maxInline, maxInline + 1, 4096 + 20, FragmentSize, FragmentSize + 1, 3*FragmentSize + 77, 700 << 10}
	b := make([]byte, sizes[i%len(sizes)])
	for k := range b {
		b[k] = byte(from*31 + i*7 + k)
	}
	return b
}

// Frames of every size, sent by three ranks to each other at once, more
// than the queues and arenas hold, arrive whole and in the order sent.
func TestFramesArriveWholeAndInOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    backoff.Policy
	}{
		{"polling", backoff.Policy{Spin: 50 * time.Microsecond, Yield: time.Millisecond}},
		{"sleeping", backoff.Policy{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n, per = 3, 60
			nets, recs := mesh(t, n, (n-1)*per, tc.p)
			var wg sync.WaitGroup
			for r := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < per; i++ {
						for q := range n {
							if q == r {
								continue
							}
							if err := nets[r].Send(q, frameOf(r, i)); err != nil {
								t.Error(err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			for r, rec := range recs {
				select {
				case <-rec.done:
				case <-time.After(30 * time.Second):
					t.Fatalf("rank %d got %d of %d frames", r, rec.n, rec.want)
				}
				for from, fs := range rec.frames {
					for i, f := range fs {
						if !bytes.Equal(f, frameOf(from, i)) {
							t.Fatalf("rank %d: frame %d from rank %d: %d bytes, not as sent (%d bytes)", r, i, from, len(f), len(frameOf(from, i)))
						}
					}
				}
			}
		})
	}
}

// Sending to a rank that has no queue pair here is an error, and so is an
// empty frame.
func TestSendToUnknownRankFails(t *testing.T) {
	nets, _ := mesh(t, 2, 0, backoff.Policy{})
	if err := nets[0].Send(5, []byte{1}); err == nil {
		t.Error("send to a rank without a queue pair worked")
	}
	if err := nets[0].Send(1, nil); err == nil {
		t.Error("an empty frame was sent")
	}
	if !nets[0].Has(1) || nets[0].Has(0) {
		t.Error("Has is wrong")
	}
}

// BenchmarkPingPong measures a round trip of a small frame between two
// Nets of this process, each answering from its poller.
func BenchmarkPingPong(b *testing.B) {
	for _, tc := range []struct {
		name string
		p    backoff.Policy
	}{
		{"spin", backoff.Policy{Spin: 50 * time.Microsecond, Yield: time.Millisecond}},
		{"yield", backoff.Policy{Yield: 300 * time.Microsecond}},
		{"sleep", backoff.Policy{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			done := make(chan struct{})
			var nets []*Net
			msg := make([]byte, 64)
			left := b.N
			nets, bells := connect(b, 2, func(r int) func(int, []byte) {
				return func(from int, f []byte) {
					if r == 1 {
						nets[1].Send(0, f)
						return
					}
					if left--; left == 0 {
						close(done)
						return
					}
					nets[0].Send(1, msg)
				}
			})
			pollers(b, nets, bells, tc.p)
			b.ResetTimer()
			nets[0].Send(1, msg)
			<-done
		})
	}
}

// BenchmarkLargeFrames measures the throughput of 1 MiB frames from one Net
// to another, each delivered before the next is sent.
func BenchmarkLargeFrames(b *testing.B) {
	done := make(chan struct{}, 1)
	nets, bells := connect(b, 2, func(r int) func(int, []byte) {
		return func(from int, f []byte) { done <- struct{}{} }
	})
	pollers(b, nets, bells, backoff.Policy{Yield: time.Millisecond})
	frame := make([]byte, 1<<20)
	b.SetBytes(int64(len(frame)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := nets[0].Send(1, frame); err != nil {
			b.Fatal(err)
		}
		<-done
	}
}
