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
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

const (
	magic          = "JIADSM1"
	nonceLen       = 16
	handshakeLimit = 10 * time.Second
	// MaxFrame is the largest frame a connection carries.
	MaxFrame = 256 << 20
)

// ErrAuth is returned to a dialler whose handshake was refused.
var ErrAuth = errors.New("refused: authentication failed")

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

func mac(secret, nonce []byte, job string, from, to int) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(magic))
	m.Write(nonce)
	m.Write([]byte(job))
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], uint32(from))
	binary.BigEndian.PutUint32(b[4:], uint32(to))
	m.Write(b[:])
	return m.Sum(nil)
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

func (n *Net) handshakeAccept(c net.Conn) (int, *bufio.Reader, error) {
	c.SetDeadline(time.Now().Add(handshakeLimit))
	defer c.SetDeadline(time.Time{})
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	nonce := make([]byte, nonceLen)
	if _, err := rand.Read(nonce); err != nil {
		return 0, nil, err
	}
	if _, err := c.Write(append([]byte(magic), nonce...)); err != nil {
		return 0, nil, err
	}
	r := bufio.NewReaderSize(c, 256<<10)
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	from := int(binary.BigEndian.Uint32(hdr[:4]))
	to := int(binary.BigEndian.Uint32(hdr[4:]))
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(r, got); err != nil {
		return 0, nil, err
	}
	if to != n.cfg.Rank || from < 0 || from >= n.cfg.Size || from == n.cfg.Rank ||
		!hmac.Equal(got, mac(n.cfg.Secret, nonce, n.cfg.Job, from, to)) {
		c.Write([]byte{1})
		return 0, nil, ErrAuth
	}
	if _, err := c.Write([]byte{0}); err != nil {
		return 0, nil, err
	}
	return from, r, nil
}

func (n *Net) dial(to int, addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, handshakeLimit)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c.SetDeadline(time.Now().Add(handshakeLimit))
	buf := make([]byte, len(magic)+nonceLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		c.Close()
		return nil, fmt.Errorf("read challenge: %w", err)
	}
	if string(buf[:len(magic)]) != magic {
		c.Close()
		return nil, fmt.Errorf("%s is not a DSM pager", addr)
	}
	hello := make([]byte, 8, 8+sha256.Size)
	binary.BigEndian.PutUint32(hello[:4], uint32(n.cfg.Rank))
	binary.BigEndian.PutUint32(hello[4:], uint32(to))
	hello = append(hello, mac(n.cfg.Secret, buf[len(magic):], n.cfg.Job, n.cfg.Rank, to)...)
	if _, err := c.Write(hello); err != nil {
		c.Close()
		return nil, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil || ack[0] != 0 {
		c.Close()
		if err == nil {
			err = ErrAuth
		}
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
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
