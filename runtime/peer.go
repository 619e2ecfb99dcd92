package runtime

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jiarun/jia/runtime/peerauth"
)

// The bootstrap byte path between ranks: one TCP connection per ordered pair
// of ranks, dialled lazily by the sender to the receiver's single listening
// port and authenticated with the job secret. It carries length-prefixed
// frames. The rdmaio providers replace it for real traffic; it remains the
// simplest way for a runtime to move bytes before any provider is open.

const (
	peerMagic      = "JIAP1"
	maxPeerFrame   = 1 << 30
	handshakeLimit = 10 * time.Second
)

// errPeerAuth is returned to a dialler whose handshake is refused.
var errPeerAuth = peerauth.ErrAuth

// peerNet is a rank's bootstrap byte path.
type peerNet struct {
	rank   int
	job    string
	secret []byte
	ln     *net.TCPListener
	cards  []Card
	log    *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond
	out     map[int]*peerOut // connections this rank dialled, by destination
	in      map[int]*peerIn  // frames received, by source
	inConns []net.Conn
	closed  bool
	handler func(src int, b []byte) // receives chanFrames frames
	pending []pendingFrame          // chanFrames frames before the handler
}

// peerIn holds what one source has sent and this rank has not yet received.
// A reader goroutine drains each connection as data arrives, so a sender
// never waits for its receiver to call recv (no deadlock when every rank
// sends a large message before receiving).
type peerIn struct {
	frames [][]byte
	err    error // why the connection ended
}

type peerOut struct {
	mu   sync.Mutex
	conn net.Conn
	err  error
}

func newPeerNet(rank int, job string, secret []byte, ln *net.TCPListener, log *slog.Logger) *peerNet {
	p := &peerNet{rank: rank, job: job, secret: secret, ln: ln, log: log,
		out: map[int]*peerOut{}, in: map[int]*peerIn{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// serve accepts connections until the listener is closed.
func (p *peerNet) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.admit(c)
	}
}

// admit runs the acceptor's side of the handshake.
func (p *peerNet) admit(c net.Conn) {
	from, r, err := p.handshakeAccept(c)
	if err != nil {
		p.log.Warn("refused a peer connection", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	p.mu.Lock()
	if p.closed || p.in[from] != nil {
		p.mu.Unlock()
		c.Close()
		return
	}
	in := &peerIn{}
	p.in[from] = in
	p.inConns = append(p.inConns, c)
	p.cond.Broadcast()
	p.mu.Unlock()
	for {
		ch, b, err := readPeerFrame(r)
		p.mu.Lock()
		switch {
		case err != nil:
			in.err = fmt.Errorf("rank %d: recv from rank %d: %w", p.rank, from, err)
		case ch == chanFrames:
			if p.handler != nil {
				h := p.handler
				p.mu.Unlock()
				h(from, b)
				continue
			}
			p.pending = append(p.pending, pendingFrame{from, b})
		default:
			in.frames = append(in.frames, b)
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Channels of the byte path: SendBytes/RecvBytes, and the frames of the
// message-passing transport (SendFrame and the frame handler).
const (
	chanBytes  byte = 0
	chanFrames byte = 1
)

type pendingFrame struct {
	src int
	b   []byte
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

func readPeerFrame(r *bufio.Reader) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n > maxPeerFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes exceeds %d", n, maxPeerFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, nil, err
	}
	return hdr[4], b, nil
}

func (p *peerNet) params() peerauth.Params {
	return peerauth.Params{Proto: peerMagic, Secret: p.secret, Job: p.job, Timeout: handshakeLimit}
}

func (p *peerNet) handshakeAccept(c net.Conn) (int, *bufio.Reader, error) {
	return peerauth.Accept(c, p.params(), p.rank, len(p.cards), 64<<10)
}

func (p *peerNet) dial(dst int) (net.Conn, error) {
	return peerauth.Dial(p.cards[dst].TCP, p.params(), p.rank, dst, "a jia rank")
}

// send writes one frame of channel ch, the concatenation of parts, to rank
// dst, dialling it on first use.
func (p *peerNet) send(dst int, ch byte, parts ...[]byte) error {
	if dst < 0 || dst >= len(p.cards) {
		return fmt.Errorf("rank %d: send: invalid destination rank %d (size %d)", p.rank, dst, len(p.cards))
	}
	n := 0
	for _, b := range parts {
		n += len(b)
	}
	if n > maxPeerFrame {
		return fmt.Errorf("rank %d: send to %d: message of %d bytes exceeds %d", p.rank, dst, n, maxPeerFrame)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("rank %d: send to %d: runtime finalized", p.rank, dst)
	}
	o := p.out[dst]
	if o == nil {
		o = &peerOut{}
		p.out[dst] = o
	}
	p.mu.Unlock()

	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn == nil && o.err == nil {
		o.conn, o.err = p.dial(dst)
		if o.err != nil {
			o.err = fmt.Errorf("rank %d: dial rank %d at %s: %w", p.rank, dst, p.cards[dst].TCP, o.err)
		}
	}
	if o.err != nil {
		return o.err
	}
	var hdr [5]byte
	binary.BigEndian.PutUint32(hdr[:4], uint32(n))
	hdr[4] = ch
	bufs := make(net.Buffers, 0, 1+len(parts))
	bufs = append(bufs, hdr[:])
	bufs = append(bufs, parts...)
	if _, err := bufs.WriteTo(o.conn); err != nil {
		o.err = fmt.Errorf("rank %d: send to rank %d: %w", p.rank, dst, err)
		return o.err
	}
	return nil
}

// recv returns the next frame from rank src, waiting for it.
func (p *peerNet) recv(src int) ([]byte, error) {
	if src < 0 || src >= len(p.cards) {
		return nil, fmt.Errorf("rank %d: recv: invalid source rank %d (size %d)", p.rank, src, len(p.cards))
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
	outs := p.out
	ins := p.inConns
	p.mu.Unlock()
	p.ln.Close()
	for _, o := range outs {
		o.mu.Lock()
		if o.conn != nil {
			o.conn.Close()
		}
		o.mu.Unlock()
	}
	for _, c := range ins {
		c.Close()
	}
}
