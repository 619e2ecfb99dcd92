// Package tcpnet is the DSM pagers' first transport: plain TCP between the
// pagers of a job, one listening port per pager, one connection per ordered
// pair of ranks (dialled lazily by the sender), authenticated with the job
// secret by an HMAC challenge–response as the runtime's bootstrap path does,
// carrying length-prefixed frames. Frames between a pair of ranks arrive in
// the order they were sent.
//
// It is deliberately simple: the rdmaio queues replace it behind the same
// engine.Transport interface once they exist.
package tcpnet

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/jiarun/jia/runtime/peerauth"
)

const (
	magic          = "JIADSM1"
	handshakeLimit = 10 * time.Second
	// MaxFrame is the largest frame a connection carries.
	MaxFrame = 256 << 20
)

// ErrAuth is returned to a dialler whose handshake was refused.
var ErrAuth = peerauth.ErrAuth

// Config configures a Net.
type Config struct {
	Rank, Size int
	Job        string
	Secret     []byte
	// Host is the IP address to listen on ("" is 127.0.0.1).
	Host string
	// Deliver is called with every frame received, from one goroutine per
	// sending rank, in the order that rank sent them. It must not block for
	// long: it holds up that rank's frames. The frame is the callee's.
	Deliver func(from int, frame []byte)
	// Lost is called once when the connection from a rank ends, with why.
	Lost func(from int, err error)
}

// Net is one rank's end of the transport.
type Net struct {
	cfg Config
	ln  *net.TCPListener

	mu     sync.Mutex
	peers  []string
	out    map[int]*outConn
	in     map[int]net.Conn
	closed bool
}

type outConn struct {
	mu   sync.Mutex
	conn net.Conn
	err  error
}

// Listen opens the rank's listening port and starts accepting.
func Listen(cfg Config) (*Net, error) {
	if cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("shmem: tcpnet: rank %d of %d", cfg.Rank, cfg.Size)
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("shmem: rank %d: tcpnet: listen host %q is not an IP address", cfg.Rank, host)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
	if err != nil {
		return nil, fmt.Errorf("shmem: rank %d: tcpnet: %w", cfg.Rank, err)
	}
	n := &Net{cfg: cfg, ln: ln, out: map[int]*outConn{}, in: map[int]net.Conn{}}
	go n.accept()
	return n, nil
}

// Addr returns the address other ranks dial.
func (n *Net) Addr() string { return n.ln.Addr().String() }

// SetPeers sets every rank's address, indexed by rank.
func (n *Net) SetPeers(addrs []string) error {
	if len(addrs) != n.cfg.Size {
		return fmt.Errorf("shmem: rank %d: tcpnet: %d peer addresses for %d ranks", n.cfg.Rank, len(addrs), n.cfg.Size)
	}
	n.mu.Lock()
	n.peers = append([]string(nil), addrs...)
	n.mu.Unlock()
	return nil
}

func (n *Net) accept() {
	for {
		c, err := n.ln.Accept()
		if err != nil {
			return
		}
		go n.serve(c)
	}
}

// serve authenticates an incoming connection and delivers its frames.
func (n *Net) serve(c net.Conn) {
	from, r, err := n.handshakeAccept(c)
	if err != nil {
		c.Close()
		return
	}
	n.mu.Lock()
	if n.closed || n.in[from] != nil {
		n.mu.Unlock()
		c.Close()
		return
	}
	n.in[from] = c
	n.mu.Unlock()
	for {
		f, err := readFrame(r)
		if err != nil {
			if n.cfg.Lost != nil {
				n.cfg.Lost(from, err)
			}
			c.Close()
			return
		}
		n.cfg.Deliver(from, f)
	}
}

func readFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > MaxFrame {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", size, MaxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func (n *Net) params() peerauth.Params {
	return peerauth.Params{Proto: magic, Secret: n.cfg.Secret, Job: n.cfg.Job, Timeout: handshakeLimit}
}

func (n *Net) handshakeAccept(c net.Conn) (int, *bufio.Reader, error) {
	from, r, err := peerauth.Accept(c, n.params(), n.cfg.Rank, n.cfg.Size, 256<<10)
	if err == nil && from == n.cfg.Rank {
		c.Write([]byte{1})
		return 0, nil, ErrAuth
	}
	return from, r, err
}

func (n *Net) dial(to int, addr string) (net.Conn, error) {
	return peerauth.Dial(addr, n.params(), n.cfg.Rank, to, "a DSM pager")
}

// Send sends one frame, the concatenation of parts, to rank to, dialling it
// on first use. Sends to one rank are serialized; a failed connection stays
// failed.
func (n *Net) Send(to int, parts ...[]byte) error {
	if to < 0 || to >= n.cfg.Size || to == n.cfg.Rank {
		return fmt.Errorf("shmem: rank %d: tcpnet: send to rank %d (size %d)", n.cfg.Rank, to, n.cfg.Size)
	}
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	if size > MaxFrame {
		return fmt.Errorf("shmem: rank %d: tcpnet: send to rank %d: frame of %d bytes exceeds %d", n.cfg.Rank, to, size, MaxFrame)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return fmt.Errorf("shmem: rank %d: tcpnet: send to rank %d: closed", n.cfg.Rank, to)
	}
	if n.peers == nil {
		n.mu.Unlock()
		return fmt.Errorf("shmem: rank %d: tcpnet: send to rank %d before the peers are known", n.cfg.Rank, to)
	}
	o := n.out[to]
	if o == nil {
		o = &outConn{}
		n.out[to] = o
	}
	addr := n.peers[to]
	n.mu.Unlock()

	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn == nil && o.err == nil {
		o.conn, o.err = n.dial(to, addr)
		if o.err != nil {
			o.err = fmt.Errorf("shmem: rank %d: tcpnet: dial rank %d at %s: %w", n.cfg.Rank, to, addr, o.err)
		}
	}
	if o.err != nil {
		return o.err
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(size))
	bufs := make(net.Buffers, 0, 1+len(parts))
	bufs = append(bufs, hdr[:])
	bufs = append(bufs, parts...)
	if _, err := bufs.WriteTo(o.conn); err != nil {
		o.err = fmt.Errorf("shmem: rank %d: tcpnet: send to rank %d: %w", n.cfg.Rank, to, err)
		return o.err
	}
	return nil
}

// Close closes the listener and every connection.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	outs, ins := n.out, n.in
	n.mu.Unlock()
	err := n.ln.Close()
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
	return err
}
