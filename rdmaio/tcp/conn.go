package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
)

// ErrAuth is the cause of a refused connection: the peer (or this device,
// seen from the peer) could not prove knowledge of the job secret, or
// belongs to another job.
var ErrAuth = errors.New("tcp: authentication failed")

type connKind uint8

const (
	kHandshake connKind = iota // accepted, authenticating (device-owned)
	kParked                    // authenticated, waiting for its QP to reach RTR
	kRC                        // carrying a connected QP pair
	kClosing                   // detached: drained until the peer closes
	kDead                      // closed
)

// Transmit states: which frame is partly written.
const (
	partNone = iota
	partRsp
	partReq
)

const maxIov = 64

// stageMax bounds what flush copies into one contiguous buffer so that it
// goes out with send(2): a small message is then one system call of one
// buffer, header and payload together, as a hand-written protocol would
// send it. Larger transfers go out with sendmsg(2) straight from their
// buffers.
const stageMax = 512

// conn is one TCP connection. An accepted connection belongs to the device
// (and pmu) while it authenticates; then a new conn for the same descriptor
// takes its slot, belonging to its QP: c.q never changes, and the other
// fields are guarded by the QP's lock.
type conn struct {
	d        *Device
	fd       int
	slot     int32
	q        *qp
	kind     connKind
	timed    atomic.Bool
	deadline time.Time

	peerDev  uint64
	peerQPN  uint32
	peerRank int32

	// Acceptor handshake: the greeting is read into hs first, then the
	// challenge is sent (greeted) and the hello is read into hs.
	nonce   [nonceLen]byte
	hs      [helloLen]byte
	hsN     int
	greeted bool

	// Receive side: a frame header being collected and the body of the
	// current frame.
	rh    [hdrMax]byte
	rhn   int
	rneed int
	body  body

	// Epoll interest, and whether busy pollers took the connection out of
	// the epoll set (pollHot).
	events uint32
	unreg  bool

	// Transmit side.
	part    uint8
	off     int
	wantOut bool
	iov     [maxIov]unix.Iovec
	msg     unix.Msghdr
	stage   [stageMax]byte // small frames coalesced for one send(2)
}

// newConn puts fd in the connection table. It returns nil when the table is
// full even of connections that linger after their close.
func (d *Device) newConn(fd int, kind connKind, q *qp) *conn {
	d.mu.Lock()
	if len(d.connFree) == 0 {
		d.mu.Unlock()
		d.evictClosing(q)
		d.mu.Lock()
	}
	if len(d.connFree) == 0 {
		d.mu.Unlock()
		return nil
	}
	slot := d.connFree[len(d.connFree)-1]
	d.connFree = d.connFree[:len(d.connFree)-1]
	if kind == kHandshake {
		d.nhs++
	}
	d.mu.Unlock()
	c := &conn{d: d, fd: fd, slot: slot, q: q, kind: kind, peerRank: -1}
	d.conns[slot].Store(c)
	return c
}

// closeConn closes the connection at once. The QP's lock (or, for a
// connection without QP, pmu) is held.
func (d *Device) closeConn(c *conn) {
	if c.kind == kDead {
		return
	}
	if c.kind == kHandshake {
		d.mu.Lock()
		d.nhs--
		d.mu.Unlock()
	}
	c.kind = kDead
	c.timed.Store(false)
	unix.Close(c.fd)
	d.conns[c.slot].Store(nil)
	d.mu.Lock()
	d.connFree = append(d.connFree, c.slot)
	d.mu.Unlock()
}

// evictClosing closes connections that linger after their close, to make
// room in a full table. The lock of QP self may be held: the locks of other
// QPs are only tried.
func (d *Device) evictClosing(self *qp) {
	for i := range d.conns {
		c := d.conns[i].Load()
		if c == nil || c.q == nil {
			continue
		}
		q := c.q
		if q != self {
			if !q.mu.TryLock() {
				continue
			}
		}
		if c.kind == kClosing {
			d.closeConn(c)
		}
		if q != self {
			q.mu.Unlock()
		}
	}
}

// linger half-closes the connection and keeps draining it until the peer
// closes too (or lingerTime passes), so that what was written last (a NAK)
// is not destroyed by a reset. The QP's lock is held.
func (d *Device) linger(c *conn) {
	if c.kind == kDead || c.kind == kClosing {
		return
	}
	sysShutdownWrite(c.fd)
	c.kind = kClosing
	c.deadline = time.Now().Add(lingerTime)
	c.timed.Store(true)
	d.interest(c, unix.EPOLLIN)
	d.reregister(c)
	d.arm(c.deadline)
}

// drain reads and discards what a closing connection receives. pmu is held
// (and the QP's lock, when the connection has one).
func (d *Device) drain(c *conn) {
	for i := 0; i < 16; i++ {
		n, e := sysRead(c.fd, d.rbuf)
		switch {
		case e == unix.EAGAIN:
			return
		case e == unix.EINTR:
		case e != 0 || n == 0:
			d.closeConn(c)
			return
		}
	}
}

// writeNow writes b with one non-blocking call and reports whether all of it
// went out.
func writeNow(fd int, b []byte) bool {
	var iov [1]unix.Iovec
	var msg unix.Msghdr
	setIov(&iov[0], b)
	msg.Iov = &iov[0]
	msg.SetIovlen(1)
	n, e := sysSendmsg(fd, &msg, len(b))
	return e == 0 && n == len(b)
}

// acceptAll accepts pending connections and waits for each one's greeting
// (handshake). pmu is held.
func (d *Device) acceptAll() {
	for {
		nfd, _, err := unix.Accept4(d.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err == unix.EINTR || err == unix.ECONNABORTED {
			continue
		}
		if err != nil {
			return // EAGAIN, or out of descriptors: try again later
		}
		d.mu.Lock()
		full := d.nhs >= maxHandshakes
		d.mu.Unlock()
		if full {
			unix.Close(nfd)
			continue
		}
		tuneConn(nfd, d.opt.sndBuf)
		c := d.newConn(nfd, kHandshake, nil)
		if c == nil {
			unix.Close(nfd)
			continue
		}
		if d.epollAdd(nfd, int(c.slot), unix.EPOLLIN|unix.EPOLLRDHUP) != nil {
			d.closeConn(c)
			continue
		}
		c.deadline = time.Now().Add(min(d.opt.connectTimeout, 10*time.Second))
		c.timed.Store(true)
		d.arm(c.deadline)
	}
}

// connEvent serves an epoll event of a connection. pmu is held.
func (d *Device) connEvent(c *conn, events uint32) {
	q := c.q
	if q == nil {
		switch c.kind {
		case kHandshake:
			d.handshake(c)
		case kClosing:
			d.drain(c)
		}
		return
	}
	q.mu.Lock()
	switch c.kind {
	case kRC:
		q.connReady(c, events)
	case kParked:
		if events&(unix.EPOLLERR|unix.EPOLLHUP|unix.EPOLLRDHUP) != 0 {
			if q.pending == c {
				q.pending = nil
			}
			d.closeConn(c)
		}
	case kClosing:
		d.drain(c)
	}
	q.mu.Unlock()
}

// connTimer closes a connection whose deadline passed. pmu is held, and the
// QP's lock when the connection has one.
func (d *Device) connTimer(c *conn, now time.Time) {
	switch c.kind {
	case kHandshake, kParked, kClosing:
	default:
		c.timed.Store(false)
		return
	}
	if now.Before(c.deadline) {
		d.arm(c.deadline)
		return
	}
	if c.kind == kParked && c.q.pending == c {
		c.q.pending = nil
	}
	d.closeConn(c)
}

// handshake reads an accepted connection's greeting and answers it with a
// challenge, then reads its hello and answers it: refused, or accepted and
// attached to (or parked at) its QP. pmu is held.
func (d *Device) handshake(c *conn) {
	if !c.greeted {
		if !d.readHandshake(c, greetingLen) {
			return
		}
		if decodeGreeting(c.hs[:greetingLen]) != nil {
			d.closeConn(c)
			return
		}
		ch := challenge{devID: d.devID}
		if _, err := rand.Read(ch.nonce[:]); err != nil {
			d.closeConn(c)
			return
		}
		c.nonce = ch.nonce
		var b [challengeLen]byte
		ch.encode(b[:])
		if !writeNow(c.fd, b[:]) {
			d.closeConn(c)
			return
		}
		c.greeted, c.hsN = true, 0
	}
	if !d.readHandshake(c, helloLen) {
		return
	}
	var h hello
	if err := h.decode(c.hs[:]); err != nil {
		d.closeConn(c)
		return
	}
	status := byte(replyOK)
	want := d.auth.helloMAC(c.nonce[:], c.hs[:helloSigned])
	var q *qp
	switch {
	case h.toDev != d.devID:
		status = replyWrongDev
	case !hmac.Equal(want[:], h.mac[:]):
		status = replyAuth
	case d.life.Closed():
		status = replyClosing
	default:
		if q = d.lookupQP(h.toQPN); q == nil || q.typ != rdmaio.RC {
			status = replyNoQP
		}
	}
	var reply [replyLen]byte
	if status != replyOK {
		encodeReply(reply[:], status, nil)
		writeNow(c.fd, reply[:])
		d.closeConn(c)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	attach, ok := q.acceptable(&h)
	if !ok {
		encodeReply(reply[:], replyBusy, nil)
		writeNow(c.fd, reply[:])
		d.closeConn(c)
		return
	}
	mac := d.auth.welcomeMAC(h.nonce[:], c.hs[:helloSigned])
	encodeReply(reply[:], replyOK, &mac)
	if !writeNow(c.fd, reply[:]) {
		d.closeConn(c)
		return
	}
	// The handshake's connection object is retired; the QP's takes its
	// slot (a connection's QP never changes, so it is read without locks).
	d.mu.Lock()
	d.nhs--
	d.mu.Unlock()
	c.kind = kDead
	c.timed.Store(false)
	c = &conn{d: d, fd: c.fd, slot: c.slot, q: q, kind: kParked,
		peerDev: h.fromDev, peerQPN: h.fromQPN, peerRank: int32(h.fromRank)}
	d.conns[c.slot].Store(c)
	if attach {
		q.attach(c)
		return
	}
	// Park the connection until the QP reaches RTR; a later connection for
	// the same QP replaces it.
	if old := q.pending; old != nil {
		d.closeConn(old)
	}
	c.kind = kParked
	q.pending = c
	c.deadline = time.Now().Add(d.opt.connectTimeout)
	c.timed.Store(true)
	d.arm(c.deadline)
	d.interest(c, unix.EPOLLRDHUP)
}

// readHandshake reads the accepted connection's next handshake message
// into c.hs until it holds n bytes. It reports whether they are all there;
// it closes the connection on an error or end of stream.
func (d *Device) readHandshake(c *conn, n int) bool {
	for c.hsN < n {
		k, e := sysRead(c.fd, c.hs[c.hsN:n])
		switch {
		case e == unix.EAGAIN:
			return false
		case e == unix.EINTR:
			continue
		case e != 0 || k == 0:
			d.closeConn(c)
			return false
		}
		c.hsN += k
	}
	return true
}

// connectAttempt bounds one connect: a SYN or SYN-ACK lost on the way is
// retried by TCP only after 1, 3 and 7 s, so an attempt unanswered for this
// long is abandoned for a fresh one (until the deadline).
const connectAttempt = 3 * time.Second

// tuneConn sets the options of an RC connection's socket: no Nagle delay,
// and a send buffer of sndBuf bytes (0: the kernel's, which grows with the
// transfer). They are best effort: a connection works without them.
//
// A small send buffer keeps the bytes between the sender's copy into the
// kernel and the receiver's copy out of it few enough to stay in the
// processors' caches, where a grown buffer lets megabytes queue, each byte
// to be written to memory and read back: between two hosts over a virtual
// Ethernet the small buffer moved large messages twice as fast.
func tuneConn(fd, sndBuf int) {
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if sndBuf > 0 {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sndBuf)
	}
}

// connectFd opens a TCP connection to pa's device before the deadline, its
// socket tuned with tuneConn.
func connectFd(pa *peerAddr, deadline time.Time, sndBuf int) (int, error) {
	fam := unix.AF_INET
	if !pa.tcp.Addr().Is4() {
		fam = unix.AF_INET6
	}
	for {
		fd, err := unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("socket: %w", err)
		}
		tuneConn(fd, sndBuf)
		if err := unix.Connect(fd, sockaddr(pa.tcp)); err != nil && err != unix.EINPROGRESS && err != unix.EINTR {
			unix.Close(fd)
			return -1, fmt.Errorf("%w: connect to rank %d at %v: %v", rdmaio.ErrBadAddress, pa.rank, pa.tcp, err)
		}
		try := time.Now().Add(connectAttempt)
		if try.After(deadline) {
			try = deadline
		}
		err = pollFd(fd, unix.POLLOUT, try)
		if err == unix.ETIMEDOUT && time.Now().Before(deadline) {
			unix.Close(fd)
			continue
		}
		if err == nil {
			var soerr int
			if soerr, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && soerr != 0 {
				err = unix.Errno(soerr)
			}
		}
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("%w: connect to rank %d at %v: %v", rdmaio.ErrBadAddress, pa.rank, pa.tcp, err)
		}
		return fd, nil
	}
}

// dial connects to the RC QP toQPN of the device at pa on behalf of QP
// fromQPN and runs the dialer's side of the handshake. It blocks for at most
// the connect timeout.
func (d *Device) dial(pa *peerAddr, fromQPN, toQPN uint32) (int, error) {
	deadline := time.Now().Add(d.opt.connectTimeout)
	fd, err := connectFd(pa, deadline, d.opt.sndBuf)
	if err != nil {
		return -1, err
	}
	fail := func(err error) (int, error) {
		unix.Close(fd)
		return -1, err
	}
	var gb [greetingLen]byte
	encodeGreeting(gb[:])
	if err := writeFull(fd, gb[:], deadline); err != nil {
		return fail(fmt.Errorf("%w: rank %d at %v: send greeting: %v", rdmaio.ErrBadAddress, pa.rank, pa.tcp, err))
	}
	var chb [challengeLen]byte
	if err := readFull(fd, chb[:], deadline); err != nil {
		return fail(fmt.Errorf("%w: rank %d at %v: no challenge: %v", rdmaio.ErrBadAddress, pa.rank, pa.tcp, err))
	}
	var ch challenge
	if err := ch.decode(chb[:]); err != nil {
		return fail(fmt.Errorf("%w: rank %d at %v: %v", rdmaio.ErrBadAddress, pa.rank, pa.tcp, err))
	}
	if ch.devID != pa.devID {
		return fail(fmt.Errorf("%w: rank %d at %v: another device listens there now", rdmaio.ErrBadAddress, pa.rank, pa.tcp))
	}
	h := hello{fromDev: d.devID, toDev: pa.devID, fromRank: uint32(d.cfg.Rank), fromQPN: fromQPN, toQPN: toQPN}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return fail(fmt.Errorf("nonce: %w", err))
	}
	var hb [helloLen]byte
	h.encode(hb[:])
	mac := d.auth.helloMAC(ch.nonce[:], hb[:helloSigned])
	copy(hb[helloSigned:], mac[:])
	if err := writeFull(fd, hb[:], deadline); err != nil {
		return fail(fmt.Errorf("%w: rank %d at %v: send hello: %v", rdmaio.ErrBadAddress, pa.rank, pa.tcp, err))
	}
	var rb [replyLen]byte
	if err := readFull(fd, rb[:], deadline); err != nil {
		return fail(fmt.Errorf("%w: rank %d at %v: no answer to the hello: %v", rdmaio.ErrBadAddress, pa.rank, pa.tcp, err))
	}
	status, rmac, err := decodeReply(rb[:])
	if err != nil {
		return fail(fmt.Errorf("%w: rank %d at %v: %v", rdmaio.ErrBadAddress, pa.rank, pa.tcp, err))
	}
	switch status {
	case replyOK:
	case replyAuth:
		return fail(fmt.Errorf("rank %d at %v refused the connection: %w (another job, or not the job secret)", pa.rank, pa.tcp, ErrAuth))
	case replyNoQP:
		return fail(fmt.Errorf("%w: rank %d has no RC QP %d", rdmaio.ErrBadAddress, pa.rank, toQPN))
	case replyBusy:
		return fail(fmt.Errorf("QP %d of rank %d is connected to another QP, not in a state to connect, or must be reset first: %w", toQPN, pa.rank, rdmaio.ErrInUse))
	default:
		return fail(fmt.Errorf("%w: rank %d at %v refused the connection (status %d)", rdmaio.ErrBadAddress, pa.rank, pa.tcp, status))
	}
	want := d.auth.welcomeMAC(h.nonce[:], hb[:helloSigned])
	if !hmac.Equal(want[:], rmac[:]) {
		return fail(fmt.Errorf("rank %d at %v accepted without proving the job secret: %w", pa.rank, pa.tcp, ErrAuth))
	}
	return fd, nil
}
