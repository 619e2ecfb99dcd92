package tcp

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// Name is the name the provider registers with rdmaio.
const Name = "tcp"

func init() { rdmaio.Register(Name, Provider{}) }

// Provider opens tcp devices. It is registered as "tcp"; using it directly
// is equivalent to rdmaio.Open("tcp", cfg).
type Provider struct{}

// Open opens a device. See the package documentation for cfg.Options.
func (Provider) Open(cfg rdmaio.Config) (rdmaio.Device, error) {
	return provider.AsDevice(Open(cfg))
}

// Defaults of the options and of QP capabilities, and the device limits.
const (
	DefaultMaxQP          = 1024
	DefaultMaxMR          = 4096
	DefaultMaxCQ          = 64
	DefaultMaxSRQ         = 16
	DefaultMTU            = 4096
	DefaultConnectTimeout = 10 * time.Second
	// DefaultUDPRcvBuf is the receive buffer asked for the UDP socket:
	// room for the UD windows of many ranks arriving at once.
	DefaultUDPRcvBuf = 8 << 20
	// DefaultSndBuf is the send buffer asked for each RC connection (the
	// kernel doubles it): enough to keep a link of tens of microseconds'
	// round trip busy at several gigabytes per second, small enough for
	// the bytes in transit to stay in the caches (see option sndbuf).
	DefaultSndBuf = 256 << 10

	DefaultMaxSendWR = 256
	DefaultMaxRecvWR = 256
	DefaultMaxSGE    = 4
	DefaultMaxInline = 256

	maxQPWR    = 1 << 14
	maxSGE     = 64
	maxInline  = 1024
	maxMsgSize = 1 << 31
	maxAlloc   = 1 << 40
	minMTU     = 256
	maxMTU     = 65000
	maxQPSlots = 1 << 16

	maxHandshakes     = 256              // accepted connections still authenticating
	lingerTime        = 2 * time.Second  // a closed connection is drained this long
	deregisterTimeout = 5 * time.Second  // Deregister waits this long for the responder
	passiveWindow     = time.Millisecond // the service checks this often whether pollers left
	readBudget        = 4 << 20          // bytes read from one connection per pass
	udBudget          = 64               // datagrams received per pass
)

type options struct {
	host           netip.Addr
	tcpPort        int
	udpPort        int
	mtu            int
	maxQP          int
	maxMR          int
	maxCQ          int
	maxSRQ         int
	policy         provider.WaitPolicy
	serviceSpin    time.Duration
	connectTimeout time.Duration
	retryTimeout   time.Duration
	udpRcvBuf      int
	sndBuf         int
	faults         faultConfig
}

func parseOptions(cfg *rdmaio.Config) (options, error) {
	o := options{
		host: netip.MustParseAddr("127.0.0.1"), mtu: DefaultMTU, maxQP: DefaultMaxQP, maxMR: DefaultMaxMR,
		maxCQ: DefaultMaxCQ, maxSRQ: DefaultMaxSRQ, policy: provider.DefaultWaitPolicy(cfg.LocalSize),
		connectTimeout: DefaultConnectTimeout, retryTimeout: DefaultRetryTimeout, udpRcvBuf: DefaultUDPRcvBuf,
		sndBuf: DefaultSndBuf,
	}
	o.serviceSpin = -1
	o.faults.delayTime = time.Millisecond
	for k, v := range cfg.Options {
		var err error
		num := func(p *int, lo, hi int) {
			var n int
			n, err = strconv.Atoi(v)
			if err == nil && (n < lo || n > hi) {
				err = fmt.Errorf("want %d..%d", lo, hi)
			}
			if err == nil {
				*p = n
			}
		}
		dur := func(p *time.Duration) {
			var d time.Duration
			d, err = time.ParseDuration(v)
			if err == nil && d < 0 {
				err = errors.New("negative duration")
			}
			if err == nil {
				*p = d
			}
		}
		prob := func(p *float64) {
			var f float64
			f, err = strconv.ParseFloat(v, 64)
			if err == nil && !(f >= 0 && f <= 1) {
				err = errors.New("want a probability in [0, 1]")
			}
			if err == nil {
				*p = f
			}
		}
		switch k {
		case "addr":
			o.host, o.tcpPort, err = parseListenAddr(v)
		case "udp_port":
			num(&o.udpPort, 0, 65535)
		case "mtu":
			num(&o.mtu, minMTU, maxMTU)
		case "max_qp":
			num(&o.maxQP, 1, maxQPSlots-1)
		case "max_mr":
			num(&o.maxMR, 1, provider.MaxKeySlots)
		case "max_cq":
			num(&o.maxCQ, 1, 1<<16)
		case "max_srq":
			num(&o.maxSRQ, 1, 1<<16)
		case "spin":
			dur(&o.policy.Spin)
		case "yield":
			dur(&o.policy.Yield)
		case "sleep":
			dur(&o.policy.Sleep)
		case "service_spin":
			dur(&o.serviceSpin)
		case "connect_timeout":
			dur(&o.connectTimeout)
			if err == nil && o.connectTimeout == 0 {
				err = errors.New("want a positive duration")
			}
		case "retry_timeout":
			dur(&o.retryTimeout)
			if err == nil && o.retryTimeout == 0 {
				err = errors.New("want a positive duration")
			}
		case "udp_rcvbuf":
			num(&o.udpRcvBuf, 0, 1<<30)
		case "sndbuf":
			num(&o.sndBuf, 0, 1<<30)
		case "ud_drop":
			prob(&o.faults.drop)
		case "ud_dup":
			prob(&o.faults.dup)
		case "ud_delay":
			prob(&o.faults.delay)
		case "ud_reorder":
			prob(&o.faults.reorder)
		case "ud_delay_time":
			dur(&o.faults.delayTime)
		case "ud_seed":
			o.faults.seed, err = strconv.ParseUint(v, 10, 64)
			o.faults.seeded = err == nil
		default:
			return o, fmt.Errorf("%w: unknown option %q", rdmaio.ErrInvalidArgument, k)
		}
		if err != nil {
			return o, fmt.Errorf("%w: option %s=%q: %v", rdmaio.ErrInvalidArgument, k, v, err)
		}
	}
	if o.policy.Sleep <= 0 {
		o.policy.Sleep = time.Millisecond
	}
	if o.serviceSpin < 0 {
		o.serviceSpin = o.policy.Spin
	}
	return o, nil
}

// parseListenAddr reads the addr option: an IP address or host name,
// optionally with a port ("10.0.0.5", "10.0.0.5:7000", "[::1]:0",
// "node17"). An unspecified address (0.0.0.0, ::) listens on every
// interface and publishes the first non-loopback address of the host.
func parseListenAddr(v string) (netip.Addr, int, error) {
	host, port := v, 0
	if h, p, err := net.SplitHostPort(v); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return netip.Addr{}, 0, fmt.Errorf("bad port %q", p)
		}
		host, port = h, n
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap(), port, nil
	}
	ips, err := net.LookupHost(host)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil {
			return ip.Unmap(), port, nil
		}
	}
	return netip.Addr{}, 0, fmt.Errorf("host %q has no address", host)
}

// publicAddr returns the first non-loopback unicast address of the host of
// the family of like.
func publicAddr(like netip.Addr) (netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap()
		if ip.Is4() == like.Is4() && ip.IsGlobalUnicast() {
			return ip, nil
		}
	}
	return netip.Addr{}, errors.New("no non-loopback address to publish; set option addr to one")
}

// Special epoll slots.
const (
	slotListen = -1
	slotUDP    = -2
	slotWake   = -3
)

// Device is a tcp device: one rank's endpoint, with one TCP listening socket
// (RC connections), one UDP socket (UD) and one service goroutine. It
// implements rdmaio.Device.
type Device struct {
	cfg     rdmaio.Config
	opt     options
	attr    rdmaio.DeviceAttr
	auth    authKey
	devID   uint64
	jobHash uint64
	udToken uint64
	blob    []byte
	tcpAddr netip.AddrPort
	udpAddr netip.AddrPort

	lfd, ufd, epfd, efd int

	mrs   *provider.KeyTable[mr]
	qps   []atomic.Pointer[qp]   // by QPN slot
	conns []atomic.Pointer[conn] // by connection slot (epoll data)

	// life is held by the set-up and teardown calls of every object and
	// alone by Close.
	life provider.Life
	quit chan struct{}

	mu       sync.Mutex // leaf lock: tables below
	cqs      []*cq
	srqs     []*srq
	gens     []uint8
	pds      map[*pd]struct{}
	allocs   []*allocation
	connFree []int32
	nhs      int // handshakes in progress

	// pmu serialises progress: whoever holds it reads the sockets and
	// dispatches what arrived. Pollers take it with TryLock.
	pmu      sync.Mutex
	evs      []unix.EpollEvent
	rbuf     []byte
	ubuf     []byte
	hot      *conn // the connection that had data last
	inPoller bool  // the pass is a poller's (see deferAck)
	// The completion slice of the Poll running the pass (see pushRecv):
	// receive completions for CQ dcq go straight into dwc while its ring
	// is empty; dn counts them.
	dcq       *cq
	dwc       []rdmaio.WorkCompletion
	dn        int
	passes    uint32 // progress passes
	epollMask uint32 // epoll_wait every epollMask+1 passes while a connection is hot

	pollGen  atomic.Uint64 // Poll calls, so the service knows pollers are active
	sleeping atomic.Int32  // Waits asleep: the service must progress for them
	activate chan struct{}
	// The passive service sleeps until the watchdog timer wdFd fires, which
	// pollers keep pushing back (feedWatchdog): while they poll, it never
	// wakes. The timer is read through the runtime's poller (wd), which
	// reports expiries on wdFire.
	svcPassive atomic.Bool
	wdFd       int
	wd         *os.File
	wdConn     syscall.RawConn // wd's, so that a push never reaches a closed (or reused) descriptor
	wdSet      func(fd uintptr)
	wdSpec     unix.ItimerSpec
	wdFire     chan struct{}
	backstop   atomic.Int64 // passiveBackstop (tests lengthen it)

	svcBlock atomic.Bool // the service is blocked in epoll_wait
	svcDone  chan struct{}
	nextDue  atomic.Int64 // earliest timer, unix nanoseconds, 0 = none
	watchOn  atomic.Bool  // the retry timer is armed (see watch)
	ackWait  atomic.Bool  // an acknowledgement waits for the retry timer

	svcEv  [1]unix.EpollEvent // the service's blocking wait
	efdBuf [8]byte            // the service's wake-ups are read into it (under pmu)

	faults *injector
}

var devSeq atomic.Uint64

// Open opens a tcp device for cfg; rdmaio.Open("tcp", cfg) does the same
// through the registry.
func Open(cfg rdmaio.Config) (*Device, error) {
	if cfg.Job == "" {
		return nil, fmt.Errorf("tcp: open: %w: empty job id", rdmaio.ErrInvalidArgument)
	}
	if cfg.Rank < 0 || cfg.Rank > 1<<31-1 {
		return nil, fmt.Errorf("tcp: open: %w: rank %d", rdmaio.ErrInvalidArgument, cfg.Rank)
	}
	opt, err := parseOptions(&cfg)
	if err != nil {
		return nil, fmt.Errorf("tcp: open: %w", err)
	}
	d := &Device{
		cfg: cfg, opt: opt, lfd: -1, ufd: -1, epfd: -1, efd: -1,
		auth:     authKey{secret: append([]byte(nil), cfg.Secret...), job: cfg.Job},
		jobHash:  jobHash(cfg.Job),
		pds:      map[*pd]struct{}{},
		quit:     make(chan struct{}),
		activate: make(chan struct{}, 1),
		wdFire:   make(chan struct{}, 1),
		svcDone:  make(chan struct{}),
	}
	d.cfg.Options = nil
	d.cfg.Secret = nil
	d.udToken = d.auth.udToken()
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, fmt.Errorf("tcp: open: device id: %w", err)
	}
	d.devID = binary.LittleEndian.Uint64(idb[:]) ^ devSeq.Add(1)
	if d.devID == 0 {
		d.devID = 1
	}
	if d.mrs, err = provider.NewKeyTable[mr](opt.maxMR); err != nil {
		return nil, fmt.Errorf("tcp: open: %w", err)
	}
	if err := d.openSockets(); err != nil {
		d.closeFds()
		return nil, fmt.Errorf("tcp: open: %w: %w", rdmaio.ErrNoDevice, err)
	}
	if d.wdFd, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		d.closeFds()
		return nil, fmt.Errorf("tcp: open: %w: timerfd: %w", rdmaio.ErrNoDevice, err)
	}
	d.wd = os.NewFile(uintptr(d.wdFd), "tcp-watchdog")
	if d.wdConn, err = d.wd.SyscallConn(); err != nil {
		_ = d.wd.Close()
		d.closeFds()
		return nil, fmt.Errorf("tcp: open: %w: timerfd: %w", rdmaio.ErrNoDevice, err)
	}
	d.wdSet = func(fd uintptr) { _ = unix.TimerfdSettime(int(fd), 0, &d.wdSpec, nil) }
	d.wdSpec.Value = unix.NsecToTimespec(int64(passiveWindow))
	d.backstop.Store(int64(passiveBackstop))
	if opt.faults.active() {
		d.faults = newInjector(opt.faults, opt.mtu+udHdrLen)
	}
	d.qps = make([]atomic.Pointer[qp], opt.maxQP)
	d.gens = make([]uint8, opt.maxQP)
	nconn := 2*opt.maxQP + maxHandshakes + 64
	d.conns = make([]atomic.Pointer[conn], nconn)
	d.connFree = make([]int32, nconn)
	for i := range d.connFree {
		d.connFree[i] = int32(nconn - 1 - i)
	}
	d.cqs = make([]*cq, opt.maxCQ)
	d.srqs = make([]*srq, opt.maxSRQ)
	d.evs = make([]unix.EpollEvent, 64)
	d.epollMask = 7
	d.rbuf = make([]byte, 64<<10)
	d.ubuf = make([]byte, opt.mtu+udHdrLen+1)
	d.attr = rdmaio.DeviceAttr{
		Provider: Name, MaxQP: opt.maxQP, MaxCQ: opt.maxCQ, MaxSRQ: opt.maxSRQ, MaxMR: opt.maxMR,
		MaxQPWR: maxQPWR, MaxSGE: maxSGE, MaxInline: maxInline, MaxMsgSize: maxMsgSize, MTU: opt.mtu,
	}
	pa := peerAddr{rank: uint32(cfg.Rank), devID: d.devID, jobHash: d.jobHash, mtu: uint32(opt.mtu), tcp: d.tcpAddr, udp: d.udpAddr}
	d.blob = pa.encode()
	liveDevices.Add(1)
	go d.service()
	go d.watchdog()
	return d, nil
}

// setRcvBuf asks for a receive buffer of n bytes (0: the kernel's default):
// with SO_RCVBUFFORCE, which may exceed net.core.rmem_max but needs
// CAP_NET_ADMIN, else with SO_RCVBUF, which the kernel caps at rmem_max.
func setRcvBuf(fd, n int) error {
	if n == 0 {
		return nil
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n) == nil {
		return nil
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, n); err != nil {
		return fmt.Errorf("SO_RCVBUF %d: %w", n, err)
	}
	return nil
}

// openSockets creates the listening socket, the UDP socket, the epoll
// instance and the wake-up eventfd.
func (d *Device) openSockets() error {
	host := d.opt.host
	fam := unix.AF_INET
	if !host.Is4() {
		fam = unix.AF_INET6
	}
	pub := host
	if host.IsUnspecified() {
		var err error
		if pub, err = publicAddr(host); err != nil {
			return err
		}
	}
	var err error
	if d.lfd, err = unix.Socket(fam, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
		return fmt.Errorf("tcp socket: %w", err)
	}
	_ = unix.SetsockoptInt(d.lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(d.lfd, sockaddr(netip.AddrPortFrom(host, uint16(d.opt.tcpPort)))); err != nil {
		return fmt.Errorf("bind tcp %v: %w", netip.AddrPortFrom(host, uint16(d.opt.tcpPort)), err)
	}
	if err := unix.Listen(d.lfd, 1024); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	sa, err := unix.Getsockname(d.lfd)
	if err != nil {
		return fmt.Errorf("tcp getsockname: %w", err)
	}
	ap, err := addrPortOf(sa)
	if err != nil {
		return err
	}
	d.tcpAddr = netip.AddrPortFrom(pub, ap.Port())
	if d.ufd, err = unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
		return fmt.Errorf("udp socket: %w", err)
	}
	if err := setRcvBuf(d.ufd, d.opt.udpRcvBuf); err != nil {
		return fmt.Errorf("udp socket: %w", err)
	}
	if err := unix.Bind(d.ufd, sockaddr(netip.AddrPortFrom(host, uint16(d.opt.udpPort)))); err != nil {
		return fmt.Errorf("bind udp %v: %w", netip.AddrPortFrom(host, uint16(d.opt.udpPort)), err)
	}
	if sa, err = unix.Getsockname(d.ufd); err != nil {
		return fmt.Errorf("udp getsockname: %w", err)
	}
	if ap, err = addrPortOf(sa); err != nil {
		return err
	}
	d.udpAddr = netip.AddrPortFrom(pub, ap.Port())
	if d.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("epoll: %w", err)
	}
	if d.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	for _, r := range []struct {
		fd, slot int
	}{{d.lfd, slotListen}, {d.ufd, slotUDP}, {d.efd, slotWake}} {
		if err := d.epollAdd(r.fd, r.slot, unix.EPOLLIN); err != nil {
			return err
		}
	}
	return nil
}

func (d *Device) closeFds() {
	for _, fd := range []*int{&d.lfd, &d.ufd, &d.epfd, &d.efd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

func (d *Device) epollAdd(fd, slot int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: int32(slot)}
	if err := unix.EpollCtl(d.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll add: %w", err)
	}
	return nil
}

func (d *Device) epollMod(fd, slot int, events uint32) {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: int32(slot)}
	_ = unix.EpollCtl(d.epfd, unix.EPOLL_CTL_MOD, fd, &ev)
}

// interest sets the epoll events a connection wants. While the connection
// is the hot one of busy pollers it is out of the epoll set (see pollHot)
// and the events are applied when it goes back. The connection's lock is
// held.
func (d *Device) interest(c *conn, events uint32) {
	c.events = events
	if !c.unreg {
		d.epollMod(c.fd, int(c.slot), events)
	}
}

// Provider returns "tcp".
func (d *Device) Provider() string { return Name }

// Attr returns the device's limits.
func (d *Device) Attr() rdmaio.DeviceAttr { return d.attr }

// Addr returns the address blob peers need: the TCP and UDP addresses, the
// rank, the device id and a hash of the job.
func (d *Device) Addr() []byte { return append([]byte(nil), d.blob...) }

// ListenAddr returns the TCP address RC connections are accepted on.
func (d *Device) ListenAddr() netip.AddrPort { return d.tcpAddr }

// UDPAddr returns the address of the device's UD socket.
func (d *Device) UDPAddr() netip.AddrPort { return d.udpAddr }

func (d *Device) errf(format string, args ...any) error {
	return fmt.Errorf("tcp: rank %d: "+format, append([]any{d.cfg.Rank}, args...)...)
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (rdmaio.PD, error) {
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("alloc pd: %w", err)
	}
	defer d.life.End()
	p := &pd{dev: d}
	d.mu.Lock()
	d.pds[p] = struct{}{}
	d.mu.Unlock()
	return p, nil
}

// Close releases the device: it stops the service goroutine, closes every
// connection (peers' outstanding work then fails with StatusRetryExcErr),
// destroys every object, releases the memory of PD.Alloc and closes the
// sockets. A second Close returns ErrClosed.
func (d *Device) Close() error {
	if !d.life.Close() {
		return d.errf("close: %w", rdmaio.ErrClosed)
	}
	defer d.life.Unlock()
	liveDevices.Add(-1)
	close(d.quit)
	d.wakeService()
	<-d.svcDone
	_ = d.wd.Close() // ends the watchdog goroutine

	d.pmu.Lock()
	defer d.pmu.Unlock()
	d.mu.Lock()
	cqs := append([]*cq(nil), d.cqs...)
	srqs := append([]*srq(nil), d.srqs...)
	allocs := d.allocs
	d.allocs = nil
	d.mu.Unlock()
	for i := range d.qps {
		if q := d.qps[i].Load(); q != nil {
			q.mu.Lock()
			q.shutdownLocked()
			q.mu.Unlock()
		}
	}
	for i := range d.conns {
		if c := d.conns[i].Load(); c != nil {
			if q := c.q; q != nil {
				q.mu.Lock()
				d.closeConn(c)
				q.mu.Unlock()
			} else {
				d.closeConn(c)
			}
		}
	}
	for _, c := range cqs {
		if c != nil {
			c.shutdown()
		}
	}
	for _, s := range srqs {
		if s != nil {
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
		}
	}
	d.mrs.Range(func(key uint32, m *mr) bool {
		m.dead.Store(true)
		d.mrs.Remove(key)
		return true
	})
	var errs []error
	for _, a := range allocs {
		if err := unix.Munmap(a.mem); err != nil {
			errs = append(errs, fmt.Errorf("unmap allocation: %w", err))
		}
	}
	d.closeFds()
	if err := errors.Join(errs...); err != nil {
		return d.errf("close: %w", err)
	}
	return nil
}

// wakeService interrupts the service goroutine's epoll_wait.
func (d *Device) wakeService() {
	_, _ = unix.Write(d.efd, wakeOne[:])
}

// wakeOne is the eventfd increment of wakeService, read only: a buffer
// that lives outside the call, so that waking the service does not
// allocate even where the race detector makes a buffer handed to the
// kernel escape to the heap (as Device.efdBuf on the reading side).
var wakeOne = func() (b [8]byte) { binary.NativeEndian.PutUint64(b[:], 1); return b }()

// kickService makes a passive service goroutine take over progress now
// (a waiter goes to sleep).
func (d *Device) kickService() {
	select {
	case d.activate <- struct{}{}:
	default:
	}
}

// feedWatchdogEvery is how many Polls that find nothing pass between two
// pushes of the watchdog timer: such a Poll costs a microsecond or so (a
// system call), so pollers that keep waiting push it back well within
// passiveWindow. (Pollers that always find something do not push it: the
// service then wakes every passiveWindow, finds that they still poll and
// sleeps again.)
const feedWatchdogEvery = 128

// passiveBackstop bounds the passive service's sleep should the watchdog
// fail to report.
const passiveBackstop = 50 * time.Millisecond

// feedWatchdog pushes the watchdog timer back to passiveWindow from now.
// It goes through wd's descriptor reference: a poller that read
// svcPassive just before Close must not program a descriptor that Close
// has closed (or its number reused); after Close it does nothing.
func (d *Device) feedWatchdog() {
	_ = d.wdConn.Control(d.wdSet)
}

// watchdog reports the expiries of the watchdog timer on wdFire until the
// device closes it.
func (d *Device) watchdog() {
	var buf [8]byte
	for {
		if _, err := d.wd.Read(buf[:]); err != nil {
			return // closed (or broken: the backstop timer takes over)
		}
		select {
		case d.wdFire <- struct{}{}:
		default:
		}
	}
}

// service is the device's goroutine. While the program polls (Poll calls
// keep coming and nobody sleeps in Wait) the pollers make progress and the
// service sleeps until they stop: passiveWindow after the last time a poller
// pushed the watchdog timer back, so that a thread is not woken (taking a
// processor from a poller) as long as they poll. Otherwise it
// serves the device itself: it spins on epoll_wait(0) for the service spin
// time after the last activity and then blocks in epoll_wait, so that
// one-sided operations, acknowledgements and connection set-up proceed
// without the program.
func (d *Device) service() {
	defer close(d.svcDone)
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	var b provider.Backoff
	policy := provider.WaitPolicy{Spin: d.opt.serviceSpin, Yield: 0, Sleep: time.Hour}
	last := d.pollGen.Load()
	b.Reset(policy)
	passive := false
	spins := 0
	for !d.life.Closed() {
		if heldAck.Load() != nil {
			d.releaseHeldAck(false)
		}
		if g := d.pollGen.Load(); g != last && d.sleeping.Load() == 0 {
			last = g
			passive = true
			d.feedWatchdog()
			d.svcPassive.Store(true)
			tm.Reset(time.Duration(d.backstop.Load()))
			select {
			case <-d.wdFire:
			case <-tm.C:
			case <-d.activate:
				last = d.pollGen.Load()
			case <-d.quit:
				// No poller may push the watchdog once Close closes it.
				d.svcPassive.Store(false)
				tm.Stop()
				return
			}
			tm.Stop()
			d.svcPassive.Store(false)
			continue
		}
		if passive {
			passive = false
			b.Reset(policy)
			d.pmu.Lock()
			d.restoreHot()
			d.pmu.Unlock()
		}
		if b.Next() == provider.PhaseSpin {
			if d.progress() {
				b.Reset(policy)
			}
			if spins++; spins&15 == 0 {
				runtime.Gosched() // let the program run where processors are few
			}
			continue
		}
		// Block until something arrives or the next timer is due. (A timer
		// armed from now on wakes the service: see arm.)
		d.pmu.Lock()
		d.restoreHot()
		d.svcBlock.Store(true)
		d.pmu.Unlock()
		wait := -1
		if due := d.nextDue.Load(); due != 0 {
			ms := (due - time.Now().UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
			wait = int(max(ms, 0))
		}
		did := d.progressBlocking(wait)
		d.svcBlock.Store(false)
		if did {
			b.Reset(policy)
		}
		last = d.pollGen.Load()
	}
}

// progress runs one progress pass of the service if no one else is
// running one. It reports whether anything happened.
func (d *Device) progress() bool {
	if !d.pmu.TryLock() {
		return false
	}
	did := d.progressLocked(0, false, false)
	d.pmu.Unlock()
	return did
}

// pollProgress is the progress pass of c.Poll(wc), if no one else is
// running one: receive completions of c produced by the pass while c's
// ring is empty are written straight into wc (one copy, no queue lock).
// It returns how many.
func (d *Device) pollProgress(c *cq, wc []rdmaio.WorkCompletion) int {
	if !d.pmu.TryLock() {
		return 0
	}
	d.inPoller = true
	d.dcq, d.dwc, d.dn = c, wc, 0
	d.progressLocked(0, false, true)
	n := d.dn
	d.dcq, d.dwc, d.dn = nil, nil, 0
	d.inPoller = false
	d.pmu.Unlock()
	return n
}

// progressBlocking waits in epoll_wait (outside the progress lock, so that
// pollers are not held up) and then runs a pass.
func (d *Device) progressBlocking(wait int) bool {
	n, e := sysEpollWait(d.epfd, d.svcEv[:], wait)
	if e != 0 && e != unix.EINTR {
		// The epoll instance is gone (closing): nothing to do.
		runtime.Gosched()
		return false
	}
	d.pmu.Lock()
	did := d.progressLocked(0, true, false)
	d.pmu.Unlock()
	return did || n > 0
}

// progressLocked is a progress pass: it polls the epoll instance, serves
// what arrived (connections, datagrams, handshakes) and runs due timers
// (on every 32nd pass only, unless timers is set). pmu is held.
func (d *Device) progressLocked(wait int, timers, poller bool) bool {
	if d.life.Closed() {
		return false
	}
	// Busy polling: read the connection that had data last straight away;
	// ask epoll about the others only every few passes (8, up to 64 while
	// epoll keeps having nothing to say), so that a pass usually costs one
	// system call.
	d.passes++
	if h := d.hot; h != nil && wait == 0 && d.passes&d.epollMask != 0 {
		did := d.pollHot(h, poller)
		if d.hot == h {
			return did
		}
	}
	n, e := sysEpollWait(d.epfd, d.evs, wait)
	if e != 0 {
		n = 0
	}
	if n > 0 {
		d.epollMask = 7
	} else if d.epollMask < 63 {
		d.epollMask = d.epollMask<<1 | 1
	}
	for i := 0; i < n; i++ {
		ev := d.evs[i]
		switch ev.Pad {
		case slotListen:
			d.acceptAll()
		case slotUDP:
			d.recvUD()
		case slotWake:
			// Only the service consumes its wake-ups: a poller that drained
			// the eventfd could leave it asleep in epoll_wait.
			if !poller {
				_, _ = sysRead(d.efd, d.efdBuf[:])
			}
		default:
			if ev.Pad < 0 || int(ev.Pad) >= len(d.conns) {
				continue
			}
			c := d.conns[ev.Pad].Load()
			if c == nil || int32(c.fd) != ev.Fd {
				continue
			}
			if c.q != nil && ev.Events&unix.EPOLLIN != 0 && d.hot != c {
				d.restoreHot()
				d.hot = c
			}
			d.connEvent(c, ev.Events)
		}
	}
	// Timers have millisecond granularity: a busy poller need not read the
	// clock on every pass.
	if due := d.nextDue.Load(); due != 0 && (timers || d.passes&63 == 0) && time.Now().UnixNano() >= due {
		d.runTimers()
	}
	return n > 0
}

// pollHot reads the connection h (d.hot) and reports whether anything came.
// A busy poller takes the connection out of the epoll set: the kernel then
// does not touch epoll for every segment that arrives (which costs several
// per cent of a small message), and the poller reads it on every pass
// anyway. restoreHot puts it back before anyone waits in epoll. pmu is
// held.
func (d *Device) pollHot(h *conn, poller bool) bool {
	q := h.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if h.kind != kRC || q.conn != h {
		d.hot = nil
		return false
	}
	if poller && !h.unreg {
		if unix.EpollCtl(d.epfd, unix.EPOLL_CTL_DEL, h.fd, nil) == nil {
			h.unreg = true
			if d.svcBlock.Load() {
				d.wakeService() // it must not sleep on a set without h
			}
		}
	}
	got := q.readConn(h) > 0
	if q.conn == h && (got || h.wantOut) {
		q.flush()
	}
	return got
}

// restoreHot puts the hot connection back into the epoll set. pmu is held.
func (d *Device) restoreHot() {
	h := d.hot
	if h == nil {
		return
	}
	q := h.q
	q.mu.Lock()
	d.reregister(h)
	q.mu.Unlock()
}

// reregister puts a connection taken out by pollHot back into the epoll
// set. The connection's lock is held.
func (d *Device) reregister(c *conn) {
	if c.unreg && c.kind != kDead {
		ev := unix.EpollEvent{Events: c.events, Fd: int32(c.fd), Pad: c.slot}
		_ = unix.EpollCtl(d.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev)
	}
	c.unreg = false
}

// arm makes sure a timer pass runs at or soon after t.
func (d *Device) arm(t time.Time) {
	at := t.UnixNano()
	for {
		cur := d.nextDue.Load()
		if cur != 0 && cur <= at {
			return
		}
		if d.nextDue.CompareAndSwap(cur, at) {
			break
		}
	}
	if d.svcBlock.Load() {
		d.wakeService()
	}
}

// runTimers runs the timers of QPs, connections and the fault injector.
// pmu is held.
func (d *Device) runTimers() {
	d.nextDue.Store(0)
	now := time.Now()
	for i := range d.qps {
		q := d.qps[i].Load()
		if q == nil || !q.timed.Load() {
			continue
		}
		q.mu.Lock()
		q.onTimer(now)
		q.mu.Unlock()
	}
	for i := range d.conns {
		c := d.conns[i].Load()
		if c == nil || !c.timed.Load() {
			continue
		}
		if q := c.q; q != nil {
			q.mu.Lock()
			d.connTimer(c, now)
			q.mu.Unlock()
		} else {
			d.connTimer(c, now)
		}
	}
	if d.faults != nil {
		d.faults.release(d, now)
	}
	if d.watchOn.Load() || d.ackWait.Load() {
		d.watch(now)
	}
}

// lookupQP returns the QP with number qpn, or nil.
func (d *Device) lookupQP(qpn uint32) *qp {
	slot := int(qpn & 0xffff)
	if slot >= len(d.qps) {
		return nil
	}
	q := d.qps[slot].Load()
	if q == nil || q.qpn != qpn {
		return nil
	}
	return q
}

// FaultStats counts what the UD fault injector did to the datagrams this
// device sent.
type FaultStats struct {
	// Dropped datagrams were not sent; Duplicated ones were sent twice;
	// Delayed ones were held for ud_delay_time; Reordered ones were held
	// until the next datagram went out (or ud_delay_time passed).
	Dropped, Duplicated, Delayed, Reordered uint64
}

// FaultStats returns the counts of the UD fault injector (all zero when no
// fault option is set).
func (d *Device) FaultStats() FaultStats {
	if d.faults == nil {
		return FaultStats{}
	}
	return d.faults.stats()
}
