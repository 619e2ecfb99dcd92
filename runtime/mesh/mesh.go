// Package mesh is the TCP mesh between the ranks of a job: one listening
// port per rank, one connection per ordered pair of ranks (dialled lazily
// by the sender, authenticated with the job secret by peerauth), carrying
// length-prefixed frames. Frames from one rank arrive in the order it sent
// them. The runtime's byte path and the DSM pagers' transport are meshes.
package mesh

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

// DefaultHandshakeTimeout bounds a connection's handshake.
const DefaultHandshakeTimeout = 10 * time.Second

// Config configures a Mesh.
type Config struct {
	Rank, Size int
	Job        string
	Secret     []byte
	// Proto names the protocol in the handshake; meshes with different
	// names refuse each other.
	Proto string
	// What names the peers in errors ("a DSM pager").
	What string
	// Prefix starts every error message ("shmem: rank 3: tcpnet").
	Prefix string
	// MaxFrame bounds a frame, both ways.
	MaxFrame int
	// ReadBuffer is the size of each connection's read buffer.
	ReadBuffer int
	// Self allows a rank to send to itself (through its own port).
	Self bool
	// Deliver is called with every frame received, from one goroutine per
	// sending rank, in the order that rank sent them. The frame is the
	// callee's. It holds up that rank's frames while it runs.
	Deliver func(from int, frame []byte)
	// Lost, if set, is called once when the connection from a rank ends.
	Lost func(from int, err error)
	// Refused, if set, is called for each connection refused at the handshake.
	Refused func(remote string, err error)
}

// Mesh is one rank's end of the mesh.
type Mesh struct {
	cfg Config
	ln  *net.TCPListener

	mu     sync.Mutex
	peers  []string
	out    map[int]*outConn
	in     []net.Conn
	from   map[int]bool
	closed bool
}

type outConn struct {
	mu   sync.Mutex
	conn net.Conn
	err  error
}

// Listen opens a listening port on host (an IP address, "" for 127.0.0.1)
// and starts the mesh on it.
func Listen(cfg Config, host string) (*Mesh, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("%s: listen host %q is not an IP address", cfg.Prefix, host)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Prefix, err)
	}
	return New(cfg, ln)
}

// New starts the mesh on a listener the caller opened; the mesh closes it.
func New(cfg Config, ln *net.TCPListener) (*Mesh, error) {
	if cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%s: rank %d of %d", cfg.Prefix, cfg.Rank, cfg.Size)
	}
	if cfg.ReadBuffer <= 0 {
		cfg.ReadBuffer = 64 << 10
	}
	m := &Mesh{cfg: cfg, ln: ln, out: map[int]*outConn{}, from: map[int]bool{}}
	go m.accept()
	return m, nil
}

// Addr returns the address other ranks dial.
func (m *Mesh) Addr() string { return m.ln.Addr().String() }

// SetPeers sets every rank's address, indexed by rank.
func (m *Mesh) SetPeers(addrs []string) error {
	if len(addrs) != m.cfg.Size {
		return fmt.Errorf("%s: %d peer addresses for %d ranks", m.cfg.Prefix, len(addrs), m.cfg.Size)
	}
	m.mu.Lock()
	m.peers = append([]string(nil), addrs...)
	m.mu.Unlock()
	return nil
}

func (m *Mesh) params() peerauth.Params {
	return peerauth.Params{Proto: m.cfg.Proto, Secret: m.cfg.Secret, Job: m.cfg.Job, Timeout: DefaultHandshakeTimeout}
}

func (m *Mesh) accept() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		go m.serve(c)
	}
}

// serve authenticates an incoming connection and delivers its frames.
func (m *Mesh) serve(c net.Conn) {
	from, r, err := peerauth.Accept(c, m.params(), m.cfg.Rank, m.cfg.Size, m.cfg.ReadBuffer)
	if err == nil && from == m.cfg.Rank && !m.cfg.Self {
		c.Write([]byte{1})
		err = fmt.Errorf("claimed rank %d → itself: %w", from, peerauth.ErrAuth)
	}
	if err != nil {
		if m.cfg.Refused != nil {
			m.cfg.Refused(c.RemoteAddr().String(), err)
		}
		c.Close()
		return
	}
	m.mu.Lock()
	if m.closed || m.from[from] {
		m.mu.Unlock()
		c.Close()
		return
	}
	m.from[from] = true
	m.in = append(m.in, c)
	m.mu.Unlock()
	for {
		f, err := m.readFrame(r)
		if err != nil {
			if m.cfg.Lost != nil {
				m.cfg.Lost(from, err)
			}
			c.Close()
			return
		}
		m.cfg.Deliver(from, f)
	}
}

func (m *Mesh) readFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if uint64(size) > uint64(m.cfg.MaxFrame) {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", size, m.cfg.MaxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Send sends one frame, the concatenation of parts, to rank to, dialling it
// on first use. Sends to one rank are serialized; a failed connection stays
// failed.
func (m *Mesh) Send(to int, parts ...[]byte) error {
	if to < 0 || to >= m.cfg.Size || (to == m.cfg.Rank && !m.cfg.Self) {
		return fmt.Errorf("%s: send: invalid destination rank %d (size %d)", m.cfg.Prefix, to, m.cfg.Size)
	}
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	if size > m.cfg.MaxFrame {
		return fmt.Errorf("%s: send to rank %d: frame of %d bytes exceeds %d", m.cfg.Prefix, to, size, m.cfg.MaxFrame)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fmt.Errorf("%s: send to rank %d: closed", m.cfg.Prefix, to)
	}
	if m.peers == nil {
		m.mu.Unlock()
		return fmt.Errorf("%s: send to rank %d before the peers are known", m.cfg.Prefix, to)
	}
	o := m.out[to]
	if o == nil {
		o = &outConn{}
		m.out[to] = o
	}
	addr := m.peers[to]
	m.mu.Unlock()

	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn == nil && o.err == nil {
		o.conn, o.err = peerauth.Dial(addr, m.params(), m.cfg.Rank, to, m.cfg.What)
		if o.err != nil {
			o.err = fmt.Errorf("%s: dial rank %d at %s: %w", m.cfg.Prefix, to, addr, o.err)
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
		o.err = fmt.Errorf("%s: send to rank %d: %w", m.cfg.Prefix, to, err)
		return o.err
	}
	return nil
}

// Close closes the listener and every connection.
func (m *Mesh) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	outs, ins := m.out, m.in
	m.mu.Unlock()
	err := m.ln.Close()
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
