// Package tcpnet is the DSM pagers' transport between hosts (and between
// all ranks when the job's transport is tcp): one listening port per pager,
// one connection per ordered pair of ranks (dialled lazily by the sender,
// authenticated with the job secret by package peerauth), carrying
// length-prefixed frames. Frames between a pair of ranks arrive in the
// order they were sent. Pagers on one host use package rdmanet.
//
// The receiving ends of the connections are read without the Go runtime's
// network poller: they sit in an epoll set of their own, whose descriptor
// (FD) the owner waits on beside its other sources, and Poll reads what
// arrived and delivers it on the caller's thread. A pager's poller thread
// thus learns of a frame from another host the way it learns of a fault:
// by polling while it expects one and by waking from its own poll(2)
// otherwise, with no hand-over to another thread in between. The owner may
// add its own descriptors to the set (Watch) and poll or sleep on all of
// them with Wait, one system call that says which are readable. Sends never
// wait for the peer: what the socket cannot take at once is queued and
// written by a goroutine, so that a poller sending a large frame keeps
// reading its own connections (two pagers sending each other more than the
// sockets hold would otherwise wait for each other forever).
//
// Frames are received into buffers that the receiver may hand back with
// Release once done with them: a receiver that does so receives without
// allocating once the Net has buffers enough for the frames in use.
package tcpnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/runtime/peerauth"
)

// MaxFrame is the largest frame a connection carries.
const MaxFrame = 256 << 20

// readBuffer is the size of each receiving connection's buffer. Frames
// that do not fit are read into a buffer of their own.
const readBuffer = 256 << 10

// bigFrame is the size from which a frame that has not arrived whole is
// read into a buffer of its own rather than through the read buffer.
const bigFrame = 16 << 10

// proto names the protocol in the handshake.
const proto = "JIADSM1"

// ErrAuth is returned to a dialler whose handshake was refused.
var ErrAuth = peerauth.ErrAuth

// Config configures a Net.
type Config struct {
	Rank, Size int
	Job        string
	Secret     []byte
	// Host is the IP address to listen on ("" is 127.0.0.1).
	Host string
	// Deliver is called with every frame received, in the order each rank
	// sent them: from Poll, on the caller's goroutine, when Polled, and
	// otherwise from a goroutine of the Net's own. It must not block for
	// long: it holds up every frame behind it. The frame is the callee's;
	// it may hand it back with Net.Release once nothing refers to it.
	Deliver func(from int, frame []byte)
	// Lost is called once when the connection from a rank ends, with why,
	// from where Deliver is called.
	Lost func(from int, err error)
	// Polled says that the owner calls Poll whenever FD is readable; else
	// the Net runs a goroutine that does.
	Polled bool
}

// Net is one rank's end of the transport.
type Net struct {
	cfg    Config
	prefix string
	ln     *net.TCPListener
	ep     int // the epoll set of the receiving connections
	closed atomic.Bool
	in     []atomic.Pointer[inConn] // by sending rank

	// pollMu is held by Poll; the receiving connections are closed under it.
	pollMu sync.Mutex
	events [32]unix.EpollEvent

	pool pool // buffers of frames handed back by Release

	mu    sync.Mutex
	peers []string
	out   []*outConn // by receiving rank, made on first use
	seen  []bool     // by rank: it connected once (a second connection is refused)
	epFD  atomic.Int64
	conns []net.Conn // connections in their handshake, closed by Close
}

// inConn is the receiving end of a connection, read by Poll only.
type inConn struct {
	from   int
	fd     int
	buf    []byte
	r, w   int    // buf[r:w] is read and not delivered yet
	big    []byte // a frame larger than buf, being read
	filled int    // bytes of big read so far
}

// outConn is the sending end of a connection.
type outConn struct {
	mu   sync.Mutex
	conn net.Conn
	fd   int // conn's descriptor, written directly while nothing is queued
	err  error
	hdr  [4]byte
	iov  [][]byte
	// What the socket could not take yet, written by flush in order
	// before anything else (flushing says that flush runs).
	queue, spare []byte
	flushing     bool
}

// Listen opens the rank's listening port and starts accepting.
func Listen(cfg Config) (*Net, error) {
	prefix := fmt.Sprintf("shmem: rank %d: tcpnet", cfg.Rank)
	if cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%s: rank %d of %d", prefix, cfg.Rank, cfg.Size)
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("%s: listen host %q is not an IP address", prefix, host)
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%s: epoll: %w", prefix, err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	n := &Net{cfg: cfg, prefix: prefix, ln: ln, ep: ep,
		in: make([]atomic.Pointer[inConn], cfg.Size), out: make([]*outConn, cfg.Size), seen: make([]bool, cfg.Size)}
	n.epFD.Store(int64(ep))
	go n.accept()
	if !cfg.Polled {
		go n.run()
	}
	return n, nil
}

// Addr returns the address other ranks dial.
func (n *Net) Addr() string { return n.ln.Addr().String() }

// FD returns a descriptor that polls readable while a frame (or the end
// of a connection) waits for Poll, and -1 once the Net is closed.
func (n *Net) FD() int { return int(n.epFD.Load()) }

// SetPeers sets every rank's address, indexed by rank.
func (n *Net) SetPeers(addrs []string) error {
	if len(addrs) != n.cfg.Size {
		return fmt.Errorf("%s: %d peer addresses for %d ranks", n.prefix, len(addrs), n.cfg.Size)
	}
	n.mu.Lock()
	n.peers = append([]string(nil), addrs...)
	n.mu.Unlock()
	return nil
}

func (n *Net) params() peerauth.Params {
	return peerauth.Params{Proto: proto, Secret: n.cfg.Secret, Job: n.cfg.Job, Timeout: 10 * time.Second}
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

// serve authenticates an incoming connection and adds it to the epoll set.
func (n *Net) serve(c net.Conn) {
	n.mu.Lock()
	if n.closed.Load() {
		n.mu.Unlock()
		c.Close()
		return
	}
	n.conns = append(n.conns, c)
	n.mu.Unlock()
	defer c.Close() // the epoll set has a duplicate
	from, r, err := peerauth.Accept(c, n.params(), n.cfg.Rank, n.cfg.Size, 4096)
	if err == nil && from == n.cfg.Rank {
		c.Write([]byte{1})
		err = fmt.Errorf("claimed rank %d → itself: %w", from, peerauth.ErrAuth)
	}
	if err != nil {
		return // the dialler learns of it
	}
	if r.Buffered() > 0 {
		// The dialler waits for the handshake's answer before it sends.
		return
	}
	fd, err := dupNonblock(c)
	if err != nil {
		return // so the dialler's frames fail
	}
	ic := &inConn{from: from, fd: fd, buf: make([]byte, readBuffer)}
	n.mu.Lock()
	if n.closed.Load() || n.seen[from] {
		n.mu.Unlock()
		unix.Close(fd)
		return
	}
	n.seen[from] = true
	n.in[from].Store(ic)
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(from)}
	err = unix.EpollCtl(n.ep, unix.EPOLL_CTL_ADD, fd, &ev)
	n.mu.Unlock()
	if err != nil {
		// Poll never sees the connection: report it lost here.
		n.in[from].Store(nil)
		unix.Close(fd)
		if n.cfg.Lost != nil {
			n.cfg.Lost(from, fmt.Errorf("%s: epoll: %w", n.prefix, err))
		}
	}
}

// dupNonblock returns a non-blocking duplicate of c's descriptor, which
// the Go runtime's poller does not watch.
func dupNonblock(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) {
		fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// run polls for an owner that does not (Config.Polled false).
func (n *Net) run() {
	fds := []unix.PollFd{{Fd: int32(n.ep), Events: unix.POLLIN}}
	for !n.closed.Load() {
		if _, err := unix.Poll(fds, 100); err != nil && err != unix.EINTR {
			return
		}
		n.Poll()
	}
}

// Poll reads what arrived on the connections, without waiting, and calls
// Config.Deliver with every whole frame and Config.Lost for every
// connection that ended. It returns how many frames it delivered. Calls
// made while another is in progress (Deliver may call Poll) return 0.
func (n *Net) Poll() int {
	got, _, _ := n.Wait(0)
	return got
}

// MaxWatch is the number of descriptors Watch takes.
const MaxWatch = 32

// Watch adds fd to the Net's epoll set, level-triggered for reading, as
// watched descriptor key (0 ≤ key < MaxWatch): Wait reports it readable.
// The owner then waits for its own descriptors and the connections in one
// system call, and learns which are readable from that call. The Net
// never reads, closes or removes fd.
func (n *Net) Watch(fd, key int) error {
	if key < 0 || key >= MaxWatch {
		return fmt.Errorf("%s: watch: key %d out of range", n.prefix, key)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed.Load() {
		return fmt.Errorf("%s: watch: closed", n.prefix)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(-1 - key)}
	if err := unix.EpollCtl(n.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("%s: watch: epoll: %w", n.prefix, err)
	}
	return nil
}

// Wait is Poll that also waits, up to timeout (rounded up to a
// millisecond; 0: not at all), while nothing is readable, and reports
// which watched descriptors (Watch) are readable: bit key of ready. It is
// one system call when nothing arrived, made without giving up the
// calling goroutine's P (the caller's thread sleeps holding it; the
// runtime may interrupt the sleep, which then returns early). err is
// ErrClosed once the Net is closed: the caller waits for its own
// descriptors by other means then. Calls made while another is in
// progress return at once with nothing.
func (n *Net) Wait(timeout time.Duration) (got int, ready uint64, err error) {
	if !n.pollMu.TryLock() {
		return 0, 0, nil
	}
	defer n.pollMu.Unlock()
	if n.closed.Load() {
		n.closeIn()
		return 0, 0, ErrClosed
	}
	msec := 0
	if timeout > 0 {
		msec = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	// A raw system call: a sleeping poller keeps its P, so that the
	// runtime's monitor neither hands it over nor polls for it meanwhile.
	r, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(n.ep), uintptr(unsafe.Pointer(&n.events[0])),
		uintptr(len(n.events)), uintptr(msec), 0, 0)
	if errno != 0 {
		if errno == unix.EINTR {
			return 0, 0, nil // the next wait sees them
		}
		return 0, 0, fmt.Errorf("%s: epoll_pwait: %w", n.prefix, errno)
	}
	for i := range int(r) {
		from := int(n.events[i].Fd)
		if from < 0 {
			if key := -1 - from; key < MaxWatch {
				ready |= 1 << key
			}
			continue
		}
		if from >= len(n.in) {
			continue
		}
		if c := n.in[from].Load(); c != nil {
			got += n.drain(c)
		}
	}
	if n.closed.Load() {
		n.closeIn() // Close was called meanwhile (by Deliver, say)
	}
	return got, ready, nil
}

// ErrClosed is what Wait returns once the Net is closed.
var ErrClosed = errors.New("tcpnet: closed")

// drain reads c until it is empty, or for a few reads at most (epoll
// reports it again), and delivers its whole frames.
func (n *Net) drain(c *inConn) int {
	got := 0
	for range 8 {
		var m int
		var err error
		if c.big != nil {
			m, err = unix.Read(c.fd, c.big[c.filled:])
		} else {
			if c.r == c.w {
				c.r, c.w = 0, 0
			} else if len(c.buf)-c.w < len(c.buf)/4 {
				c.w = copy(c.buf, c.buf[c.r:c.w])
				c.r = 0
			}
			m, err = unix.Read(c.fd, c.buf[c.w:])
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return got
		case err != nil:
			n.lose(c, err)
			return got
		case m == 0:
			n.lose(c, io.EOF)
			return got
		}
		if c.big != nil {
			c.filled += m
			if c.filled < len(c.big) {
				continue
			}
			f := c.big
			c.big, c.filled = nil, 0
			n.cfg.Deliver(c.from, f)
			got++
			continue
		}
		space := len(c.buf) - c.w
		c.w += m
		k, err := n.frames(c)
		got += k
		if err != nil {
			n.lose(c, err)
			return got
		}
		if m < space && c.big == nil {
			return got // the socket is empty: no need to hear so from a read
		}
	}
	return got
}

// frames delivers the whole frames in c.buf, and starts c.big when the
// next frame does not fit in c.buf.
func (n *Net) frames(c *inConn) (int, error) {
	got := 0
	for c.w-c.r >= 4 {
		size := int(binary.BigEndian.Uint32(c.buf[c.r:]))
		if size > MaxFrame {
			return got, fmt.Errorf("frame of %d bytes exceeds %d", size, MaxFrame)
		}
		if c.w-c.r-4 >= size {
			f := n.pool.get(size)
			copy(f, c.buf[c.r+4:])
			c.r += 4 + size
			n.cfg.Deliver(c.from, f)
			got++
			continue
		}
		if size >= bigFrame || 4+size > len(c.buf) {
			// Read the rest in place: one copy fewer.
			c.big = n.pool.get(size)
			c.filled = copy(c.big, c.buf[c.r+4:c.w])
			c.r, c.w = 0, 0
		}
		break
	}
	return got, nil
}

// lose ends the connection of c with err.
func (n *Net) lose(c *inConn, err error) {
	unix.EpollCtl(n.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	unix.Close(c.fd)
	n.in[c.from].Store(nil)
	if n.cfg.Lost != nil {
		n.cfg.Lost(c.from, err)
	}
}

// closeIn closes the receiving connections and the epoll set; pollMu is
// held.
func (n *Net) closeIn() {
	for i := range n.in {
		if c := n.in[i].Swap(nil); c != nil {
			unix.Close(c.fd)
		}
	}
	if ep := n.epFD.Swap(-1); ep >= 0 {
		unix.Close(int(ep))
	}
}

// Send sends one frame, the concatenation of parts, to rank to, dialling it
// on first use. It does not wait for the peer: what the connection cannot
// take at once is queued, in order. Sends to one rank are serialized; a
// failed connection stays failed.
func (n *Net) Send(to int, parts ...[]byte) error {
	if to < 0 || to >= n.cfg.Size || to == n.cfg.Rank {
		return fmt.Errorf("%s: send: invalid destination rank %d (size %d)", n.prefix, to, n.cfg.Size)
	}
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	if size > MaxFrame {
		return fmt.Errorf("%s: send to rank %d: frame of %d bytes exceeds %d", n.prefix, to, size, MaxFrame)
	}
	n.mu.Lock()
	if n.closed.Load() {
		n.mu.Unlock()
		return fmt.Errorf("%s: send to rank %d: closed", n.prefix, to)
	}
	if n.peers == nil {
		n.mu.Unlock()
		return fmt.Errorf("%s: send to rank %d before the peers are known", n.prefix, to)
	}
	o := n.out[to]
	if o == nil {
		o = &outConn{fd: -1}
		n.out[to] = o
	}
	addr := n.peers[to]
	n.mu.Unlock()

	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn == nil && o.err == nil {
		o.err = o.dial(addr, n.params(), n.cfg.Rank, to)
		if o.err != nil {
			o.err = fmt.Errorf("%s: dial rank %d at %s: %w", n.prefix, to, addr, o.err)
		}
	}
	if o.err != nil {
		return o.err
	}
	binary.BigEndian.PutUint32(o.hdr[:], uint32(size))
	if o.flushing {
		o.queue = append(o.queue, o.hdr[:]...)
		for _, p := range parts {
			o.queue = append(o.queue, p...)
		}
		return nil
	}
	o.iov = append(append(o.iov[:0], o.hdr[:]), parts...)
	iov := o.iov
	for len(iov) > 0 {
		m, err := unix.Writev(o.fd, iov)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			m = 0
		} else if err != nil {
			o.err = fmt.Errorf("%s: send to rank %d: %w", n.prefix, to, err)
			clear(o.iov)
			return o.err
		}
		iov = advance(iov, m)
		if err == unix.EAGAIN {
			for _, b := range iov {
				o.queue = append(o.queue, b...)
			}
			o.flushing = true
			go n.flush(o, to)
			break
		}
	}
	clear(o.iov) // no references to the caller's buffers
	return nil
}

// advance drops the first m bytes of iov.
func advance(iov [][]byte, m int) [][]byte {
	for len(iov) > 0 && m >= len(iov[0]) {
		m -= len(iov[0])
		iov = iov[1:]
	}
	if len(iov) > 0 {
		iov[0] = iov[0][m:]
	}
	return iov
}

// flush writes o's queue, waiting for the peer to take it.
func (n *Net) flush(o *outConn, to int) {
	for {
		o.mu.Lock()
		if len(o.queue) == 0 || o.err != nil {
			o.flushing = false
			o.queue = o.queue[:0]
			o.mu.Unlock()
			return
		}
		b := o.queue
		o.queue = o.spare[:0]
		o.mu.Unlock()
		_, err := o.conn.Write(b)
		o.mu.Lock()
		o.spare = b[:0]
		if err != nil && o.err == nil {
			o.err = fmt.Errorf("%s: send to rank %d: %w", n.prefix, to, err)
		}
		o.mu.Unlock()
	}
}

// dial connects o to rank to at addr.
func (o *outConn) dial(addr string, p peerauth.Params, self, to int) error {
	c, err := peerauth.Dial(addr, p, self, to, "a DSM pager")
	if err != nil {
		return err
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		c.Close()
		return errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		c.Close()
		return err
	}
	if err := rc.Control(func(fd uintptr) { o.fd = int(fd) }); err != nil {
		c.Close()
		return err
	}
	o.conn = c
	return nil
}

// Close closes the listener and every connection.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed.Swap(true) {
		n.mu.Unlock()
		return nil
	}
	outs, conns := n.out, n.conns
	n.mu.Unlock()
	err := n.ln.Close()
	for _, o := range outs {
		if o == nil {
			continue
		}
		o.mu.Lock()
		if o.conn != nil {
			o.conn.Close()
		}
		if o.err == nil {
			o.err = fmt.Errorf("%s: closed", n.prefix)
		}
		o.mu.Unlock()
	}
	for _, c := range conns {
		c.Close()
	}
	if n.pollMu.TryLock() {
		n.closeIn()
		n.pollMu.Unlock()
	} // else the Poll in progress closes them
	return err
}

// Release hands back a frame given to Config.Deliver, to receive later
// frames into. The caller must not use the frame, nor anything that
// aliases it, afterwards. Releasing a frame is optional; releasing one
// the Net did not deliver is harmless.
func (n *Net) Release(frame []byte) { n.pool.put(frame) }

// Buffers are pooled by size class: class c holds buffers of capacity
// 1<<c, for frames of more than 1<<(c-1) bytes (minClass: of any size
// up to it). Larger frames than 1<<maxClass are not pooled.
const (
	minClass = 6
	maxClass = 22
	// poolBytes bounds the bytes a class keeps, poolMin and poolMax the
	// buffers.
	poolBytes, poolMin, poolMax = 8 << 20, 4, 256
)

// pool is a free list of frame buffers per size class.
type pool struct {
	mu   sync.Mutex
	free [maxClass + 1][][]byte
}

// class returns the size class of a frame of size bytes, and false if
// frames that large are not pooled.
func class(size int) (int, bool) {
	c := max(minClass, bits.Len(uint(max(size, 1)-1)))
	return c, c <= maxClass
}

// get returns a buffer of size bytes, from the pool if it has one.
func (p *pool) get(size int) []byte {
	c, ok := class(size)
	if !ok {
		return make([]byte, size)
	}
	p.mu.Lock()
	if k := len(p.free[c]); k > 0 {
		b := p.free[c][k-1]
		p.free[c][k-1] = nil
		p.free[c] = p.free[c][:k-1]
		p.mu.Unlock()
		return b[:size]
	}
	p.mu.Unlock()
	return make([]byte, size, 1<<c)
}

// put adds b to the pool if it is a buffer of a class not full yet.
func (p *pool) put(b []byte) {
	c := bits.Len(uint(cap(b))) - 1
	if c < minClass || c > maxClass || cap(b) != 1<<c {
		return
	}
	keep := min(poolMax, max(poolMin, poolBytes>>c))
	p.mu.Lock()
	if len(p.free[c]) < keep {
		if p.free[c] == nil {
			p.free[c] = make([][]byte, 0, keep)
		}
		p.free[c] = append(p.free[c], b[:0])
	}
	p.mu.Unlock()
}
