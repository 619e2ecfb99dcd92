// Package rttransport runs message passing on the runtime's byte path: one
// authenticated TCP connection per ordered pair of ranks, opened on first
// use, reaching ranks on any host. It is the transport of comm until the
// rdmaio queues take over; it offers no one-sided operations, so large
// messages use comm's two-sided rendezvous.
package rttransport

import (
	"sync"
	"time"

	"github.com/jiarun/jia/comm/transport"
	rt "github.com/jiarun/jia/runtime"
)

// eagerLimit is the transport's preferred eager limit: on TCP a copy is
// cheap next to a round trip.
const eagerLimit = 64 << 10

// Transport is a transport.Transport over a *runtime.Runtime.
type Transport struct {
	rt   *rt.Runtime
	rank int
	size int

	mu     sync.Mutex
	inbox  []frame // arrived, not yet polled
	spare  []frame
	kick   chan struct{}
	closed bool
}

type frame struct {
	src int
	b   []byte
}

// New starts the transport on r. Only one transport may run on a runtime.
func New(r *rt.Runtime) *Transport {
	t := &Transport{rt: r, rank: r.Rank(), size: r.Size(), kick: make(chan struct{}, 1)}
	r.SetFrameHandler(t.arrive)
	return t
}

// arrive queues a frame from src; it runs on the runtime's reader goroutines.
func (t *Transport) arrive(src int, b []byte) {
	t.mu.Lock()
	t.inbox = append(t.inbox, frame{src, b})
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Rank returns this rank.
func (t *Transport) Rank() int { return t.rank }

// Size returns the number of ranks.
func (t *Transport) Size() int { return t.size }

// Caps describes the transport: two-sided only, no size or gather limit.
func (t *Transport) Caps() transport.Caps {
	return transport.Caps{Name: "tcp-bootstrap", EagerLimit: eagerLimit}
}

// Send sends hdr and data to dst as one frame.
func (t *Transport) Send(dst int, hdr []byte, data [][]byte) error {
	if dst < 0 || dst >= t.size {
		return transport.ErrRank
	}
	if dst == t.rank {
		n := len(hdr)
		for _, d := range data {
			n += len(d)
		}
		b := make([]byte, 0, n)
		b = append(b, hdr...)
		for _, d := range data {
			b = append(b, d...)
		}
		t.arrive(t.rank, b)
		return nil
	}
	return t.rt.SendFrame(dst, hdr, data)
}

// Register is not supported: the byte path has no one-sided access.
func (t *Transport) Register([]byte) (transport.Region, error) {
	return transport.Region{}, transport.ErrNotSupported
}

// Deregister is not supported.
func (t *Transport) Deregister(transport.Region) error { return transport.ErrNotSupported }

// Read is not supported.
func (t *Transport) Read(int, transport.Region, [][]byte, uint64) error {
	return transport.ErrNotSupported
}

// Write is not supported.
func (t *Transport) Write(int, transport.Region, [][]byte, uint64) error {
	return transport.ErrNotSupported
}

// Poll hands every arrived frame to h, in arrival order.
func (t *Transport) Poll(h transport.Handler) int {
	t.mu.Lock()
	if len(t.inbox) == 0 {
		t.mu.Unlock()
		return 0
	}
	got := t.inbox
	t.inbox = t.spare[:0]
	t.mu.Unlock()
	for i := range got {
		h.Deliver(got[i].src, got[i].b)
		got[i] = frame{}
	}
	t.mu.Lock()
	t.spare = got[:0]
	t.mu.Unlock()
	return len(got)
}

// Wait blocks until a frame may have arrived, or d has passed.
func (t *Transport) Wait(d time.Duration) {
	t.mu.Lock()
	ready := len(t.inbox) > 0
	t.mu.Unlock()
	if ready {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-t.kick:
	case <-tm.C:
	}
}

// Close stops delivering frames.
func (t *Transport) Close() error {
	t.rt.SetFrameHandler(func(int, []byte) {})
	t.mu.Lock()
	t.closed = true
	t.inbox = nil
	t.mu.Unlock()
	return nil
}

var _ transport.Transport = (*Transport)(nil)
