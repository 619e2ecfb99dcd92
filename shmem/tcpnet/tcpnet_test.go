package tcpnet_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

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
	nets := make([]*tcpnet.Net, size)
	boxes := make([]*inbox, size)
	addrs := make([]string, size)
	for r := range nets {
		boxes[r] = newInbox()
		b := boxes[r]
		n, err := tcpnet.Listen(tcpnet.Config{Rank: r, Size: size, Job: "job", Secret: []byte(secret),
			Deliver: b.deliver,
			Lost: func(from int, err error) {
				b.mu.Lock()
				b.lost[from] = err
				b.mu.Unlock()
			}})
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
	return nets, boxes
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
