package runtime

import (
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/jiarun/jia/runtime/mesh"
)

// The bootstrap byte path between ranks: the job's TCP mesh on the rank's
// one listening port (runtime/mesh: one connection per ordered pair of
// ranks, dialled lazily, authenticated with the job secret). Each frame
// starts with a channel byte: SendBytes/RecvBytes traffic, or the frames of
// the message-passing transport (SendFrame and the frame handler).

const (
	peerProto    = "JIAP1"
	maxPeerFrame = 1 << 30
)

// Channels of the byte path.
const (
	chanBytes  byte = 0
	chanFrames byte = 1
)

// peerNet is a rank's bootstrap byte path.
type peerNet struct {
	rank int
	size int
	m    *mesh.Mesh

	mu      sync.Mutex
	cond    *sync.Cond
	in      map[int]*peerIn // chanBytes frames received, by source
	closed  bool
	handler func(src int, b []byte) // receives chanFrames frames
	pending []pendingFrame          // chanFrames frames before the handler
}

// peerIn holds what one source has sent and this rank has not yet received.
// The mesh drains each connection as data arrives, so a sender never waits
// for its receiver to call recv (no deadlock when every rank sends a large
// message before receiving).
type peerIn struct {
	frames [][]byte
	err    error // why the connection ended
}

type pendingFrame struct {
	src int
	b   []byte
}

// newPeerNet starts the byte path of rank on its listener, reaching the
// other ranks at the TCP addresses of their cards.
func newPeerNet(rank int, job string, secret []byte, ln *net.TCPListener, cards []Card, log *slog.Logger) (*peerNet, error) {
	p := &peerNet{rank: rank, size: len(cards), in: map[int]*peerIn{}}
	p.cond = sync.NewCond(&p.mu)
	m, err := mesh.New(mesh.Config{
		Rank: rank, Size: len(cards), Job: job, Secret: secret,
		Proto: peerProto, What: "a jia rank", Prefix: fmt.Sprintf("rank %d", rank),
		MaxFrame: maxPeerFrame, Self: true,
		Deliver: p.deliver, Lost: p.lost,
		Refused: func(remote string, err error) {
			log.Warn("refused a peer connection", "remote", remote, "err", err)
		},
	}, ln)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(cards))
	for i, c := range cards {
		addrs[i] = c.TCP
	}
	m.SetPeers(addrs)
	p.m = m
	return p, nil
}

// deliver dispatches a frame by its channel byte.
func (p *peerNet) deliver(from int, f []byte) {
	if len(f) == 0 {
		p.lost(from, fmt.Errorf("empty frame"))
		return
	}
	ch, b := f[0], f[1:]
	p.mu.Lock()
	if ch == chanFrames {
		if h := p.handler; h != nil {
			p.mu.Unlock()
			h(from, b)
			return
		}
		p.pending = append(p.pending, pendingFrame{from, b})
		p.mu.Unlock()
		return
	}
	in := p.source(from)
	in.frames = append(in.frames, b)
	p.cond.Broadcast()
	p.mu.Unlock()
}

// lost records why the connection from a rank ended.
func (p *peerNet) lost(from int, err error) {
	p.mu.Lock()
	in := p.source(from)
	if in.err == nil {
		in.err = fmt.Errorf("rank %d: recv from rank %d: %w", p.rank, from, err)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// source returns the queue of rank from; mu is held.
func (p *peerNet) source(from int) *peerIn {
	in := p.in[from]
	if in == nil {
		in = &peerIn{}
		p.in[from] = in
	}
	return in
}

// setHandler routes frames of chanFrames to h, first those that arrived
// before it was set. h is called from one goroutine per source.
func (p *peerNet) setHandler(h func(src int, b []byte)) {
	p.mu.Lock()
	pending := p.pending
	p.pending = nil
	p.handler = h
	p.mu.Unlock()
	for _, f := range pending {
		h(f.src, f.b)
	}
}

// channelByte holds each channel's frame prefix, so sends need not
// allocate one.
var channelByte = [...][]byte{chanBytes: {chanBytes}, chanFrames: {chanFrames}}

// send writes one frame of channel ch, head followed by the pieces of rest,
// to rank dst, dialling it on first use.
func (p *peerNet) send(dst int, ch byte, head []byte, rest [][]byte) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return fmt.Errorf("rank %d: send to %d: runtime finalized", p.rank, dst)
	}
	parts := make([][]byte, 0, 2+len(rest))
	parts = append(parts, channelByte[ch], head)
	return p.m.Send(dst, append(parts, rest...)...)
}

// recv returns the next frame from rank src, waiting for it.
func (p *peerNet) recv(src int) ([]byte, error) {
	if src < 0 || src >= p.size {
		return nil, fmt.Errorf("rank %d: recv: invalid source rank %d (size %d)", p.rank, src, p.size)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		in := p.in[src]
		switch {
		case in != nil && len(in.frames) > 0:
			b := in.frames[0]
			in.frames[0] = nil
			in.frames = in.frames[1:]
			return b, nil
		case in != nil && in.err != nil:
			return nil, in.err
		case p.closed:
			return nil, fmt.Errorf("rank %d: recv from %d: runtime finalized", p.rank, src)
		}
		p.cond.Wait()
	}
}

// close shuts the listener and every connection.
func (p *peerNet) close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.m.Close()
}
