package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// Name is the name the provider registers with rdmaio.
const Name = "shm"

func init() { rdmaio.Register(Name, Provider{}) }

// Provider opens shm devices. It is registered as "shm"; using it directly
// is equivalent to rdmaio.Open("shm", cfg).
type Provider struct{}

// Open opens a device. See the package documentation for cfg.Options.
func (Provider) Open(cfg rdmaio.Config) (rdmaio.Device, error) {
	return provider.AsDevice(Open(cfg))
}

// Defaults of the options and of QP capabilities.
const (
	DefaultRingBytes = 128 << 10
	DefaultMaxQP     = 128
	DefaultMaxMR     = 4096
	DefaultMaxCQ     = 64
	DefaultMaxSRQ    = 16
	DefaultMTU       = 4096
	DefaultEager     = 8 << 10

	DefaultMaxSendWR  = 256
	DefaultMaxRecvWR  = 256
	DefaultMaxSGE     = 4
	DefaultMaxInline  = 256
	maxQPWR           = 1 << 14
	maxSGE            = 64
	maxInline         = 1024
	maxMsgSize        = 1 << 31
	maxAlloc          = 1 << 40
	deregisterTimeout = 5 * time.Second
	closeTimeout      = time.Second
	deadCheckInterval = 100 * time.Millisecond
)

type options struct {
	dir                                         string
	ringBytes, maxQP, maxMR, maxCQ, maxSRQ, mtu int
	eager                                       int
	policy                                      provider.WaitPolicy
	cmaOff                                      bool
	// warm: write to the pages of rings and send queues when they are
	// created (see touchPages). Oversubscribed ranks too: a page first
	// touched by a message costs tens of microseconds on a virtual
	// machine, inside a wait the host's ranks share (Allreduce 8 B, 4 ranks
	// on 2 processors: 34 µs per call cold for the first thousands of
	// calls, 20 warm), while warming costs a few milliseconds once.
	warm bool
}

func parseOptions(cfg *rdmaio.Config) (options, error) {
	o := options{
		dir: DefaultDir, ringBytes: DefaultRingBytes, maxQP: DefaultMaxQP, maxMR: DefaultMaxMR,
		maxCQ: DefaultMaxCQ, maxSRQ: DefaultMaxSRQ, mtu: DefaultMTU, eager: DefaultEager,
		policy: provider.DefaultWaitPolicy(cfg.LocalSize),
		warm:   true,
	}
	for k, v := range cfg.Options {
		var err error
		num := func(p *int) {
			var n int
			n, err = strconv.Atoi(v)
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
		switch k {
		case "dir":
			o.dir = v
		case "ring_bytes":
			num(&o.ringBytes)
		case "max_qp":
			num(&o.maxQP)
		case "max_mr":
			num(&o.maxMR)
		case "max_cq":
			num(&o.maxCQ)
		case "max_srq":
			num(&o.maxSRQ)
		case "mtu":
			num(&o.mtu)
		case "eager":
			num(&o.eager)
		case "spin":
			dur(&o.policy.Spin)
		case "yield":
			dur(&o.policy.Yield)
		case "sleep":
			dur(&o.policy.Sleep)
		case "warm":
			switch v {
			case "on":
				o.warm = true
			case "off":
				o.warm = false
			default:
				err = errors.New(`want "on" or "off"`)
			}
		case "cma":
			switch v {
			case "auto":
			case "off":
				o.cmaOff = true
			default:
				err = errors.New(`want "auto" or "off"`)
			}
		default:
			return o, fmt.Errorf("%w: unknown option %q", rdmaio.ErrInvalidArgument, k)
		}
		if err != nil {
			return o, fmt.Errorf("%w: option %s=%q: %v", rdmaio.ErrInvalidArgument, k, v, err)
		}
	}
	if o.eager < 0 || o.eager > o.ringBytes/4 {
		return o, fmt.Errorf("%w: option eager=%d: want 0..ring_bytes/4 (%d)", rdmaio.ErrInvalidArgument, o.eager, o.ringBytes/4)
	}
	if o.policy.Sleep <= 0 {
		o.policy.Sleep = time.Millisecond
	}
	return o, nil
}

var devSerial atomic.Uint32

// Device is an shm device: one rank's endpoint on this host. It implements
// rdmaio.Device.
type Device struct {
	cfg    rdmaio.Config
	opt    options
	lay    layout
	attr   rdmaio.DeviceAttr
	prefix string
	main   *segment
	hdr    []byte
	devID  uint32
	pid    int
	blob   []byte
	// cmaErr is why peers cannot use process_vm_readv/writev on this
	// process's ordinary memory, nil when they can.
	cmaErr error

	mrs *provider.KeyTable[mr]

	// life is held by the setup and teardown calls of every object and
	// alone by Close, which unmaps the memory they touch. The data path
	// checks per-object closed flags under the per-object locks, which
	// Close takes before it unmaps (the lock-free checks of cq.Poll read
	// only the main segment, which Close blanks instead).
	life provider.Life

	mu      sync.Mutex
	cqs     []*cq
	srqs    []*srq
	qps     []*qp
	gens    []uint8 // QPN generation per QP slot
	used    []bool  // QP slots that have had a QP (their ring may hold data); guarded by mu or the QP's locks
	pds     map[*pd]struct{}
	allocs  []*allocation
	allocID uint32
	peers   map[string]*peer
	stalled atomic.Int32 // QPs with work waiting for ring space or ordering
}

// Open opens an shm device for cfg; rdmaio.Open("shm", cfg) does the same
// through the registry.
func Open(cfg rdmaio.Config) (*Device, error) {
	setupFence()
	if cfg.Job == "" {
		return nil, fmt.Errorf("shm: open: %w: empty job id", rdmaio.ErrInvalidArgument)
	}
	if len(cfg.Job) > maxJob {
		return nil, fmt.Errorf("shm: open: %w: job id of %d bytes (max %d)", rdmaio.ErrInvalidArgument, len(cfg.Job), maxJob)
	}
	if cfg.Rank < 0 || cfg.Rank > 1<<31-1 {
		return nil, fmt.Errorf("shm: open: %w: rank %d", rdmaio.ErrInvalidArgument, cfg.Rank)
	}
	opt, err := parseOptions(&cfg)
	if err != nil {
		return nil, fmt.Errorf("shm: open: %w", err)
	}
	lay, err := newLayout(opt.maxCQ, opt.maxSRQ, opt.maxMR, opt.maxQP, opt.ringBytes, opt.mtu)
	if err != nil {
		return nil, fmt.Errorf("shm: open: %w: %v", rdmaio.ErrInvalidArgument, err)
	}
	if st, err := os.Stat(opt.dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("shm: open: shared memory directory %s: %w", opt.dir, errors.Join(rdmaio.ErrNoDevice, err))
	}
	d := &Device{cfg: cfg, opt: opt, lay: lay, pid: os.Getpid(), pds: map[*pd]struct{}{}, peers: map[string]*peer{}}
	var idb [4]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, fmt.Errorf("shm: open: device id: %w", err)
	}
	d.devID = binary.LittleEndian.Uint32(idb[:]) | 1
	d.prefix = fmt.Sprintf("%s%s-r%d-p%d-d%d", SegmentPrefix, JobTag(cfg.Job), cfg.Rank, d.pid, devSerial.Add(1))
	d.cmaErr = setupCMA(opt.cmaOff)
	d.mrs, err = provider.NewKeyTable[mr](lay.maxMR)
	if err != nil {
		return nil, fmt.Errorf("shm: open: %w", err)
	}
	d.main, err = createSegment(opt.dir, d.prefix+"-main", lay.size)
	if err != nil {
		return nil, fmt.Errorf("shm: open: %w", err)
	}
	d.hdr = d.main.mem[:hdrBytes]
	d.writeHeader()
	for i := 0; i < lay.maxQP; i++ {
		store32(d.main.mem, lay.qp(i)+cQPN, 0)
	}
	d.cqs = make([]*cq, lay.maxCQ)
	d.srqs = make([]*srq, lay.maxSRQ)
	d.qps = make([]*qp, lay.maxQP)
	d.gens = make([]uint8, lay.maxQP)
	d.used = make([]bool, lay.maxQP)
	d.attr = rdmaio.DeviceAttr{
		Provider: Name, MaxQP: lay.maxQP, MaxCQ: lay.maxCQ, MaxSRQ: lay.maxSRQ, MaxMR: lay.maxMR,
		MaxQPWR: maxQPWR, MaxSGE: maxSGE, MaxInline: maxInline, MaxMsgSize: maxMsgSize, MTU: lay.mtu,
	}
	d.blob = d.encodeAddr()
	if cfg.LocalSize == 1 {
		// No peer will ever map the segment.
		if err := d.main.unlink(); err != nil {
			d.main.unmap()
			return nil, fmt.Errorf("shm: open: %w", err)
		}
	}
	return d, nil
}

// setupCMA decides whether peers may read and write this process's memory
// with process_vm_readv/writev (the single-copy path for ordinary Go
// buffers) and, under Yama's restricted mode, allows it.
func setupCMA(off bool) error {
	if off {
		return errors.New("disabled by option cma=off")
	}
	switch scope := ptraceScope(); {
	case scope == 1:
		if err := unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0); err != nil {
			return fmt.Errorf("kernel.yama.ptrace_scope=1 and prctl(PR_SET_PTRACER) failed: %w", err)
		}
	case scope >= 2:
		return fmt.Errorf("kernel.yama.ptrace_scope=%d forbids process_vm_readv/writev between ranks", scope)
	}
	return nil
}

func (d *Device) writeHeader() {
	h := d.hdr
	copy(h[hMagic:], segMagic)
	put32(h, hVersion, layoutVersion)
	put32(h, hRank, uint32(d.cfg.Rank))
	put32(h, hPid, uint32(d.pid))
	put32(h, hDevID, d.devID)
	expect := 0
	if d.cfg.LocalSize > 1 {
		expect = d.cfg.LocalSize - 1
	}
	put32(h, hExpect, uint32(expect))
	put32(h, hMaxCQ, uint32(d.lay.maxCQ))
	put32(h, hMaxSRQ, uint32(d.lay.maxSRQ))
	put32(h, hMaxMR, uint32(d.lay.maxMR))
	put32(h, hMaxQP, uint32(d.lay.maxQP))
	put32(h, hRingBytes, uint32(d.lay.ringBytes))
	put32(h, hMTU, uint32(d.lay.mtu))
	var flags uint32
	if d.cmaErr == nil {
		flags |= flagCMA
	}
	put32(h, hFlags, flags)
	put64(h, hSegSize, uint64(d.lay.size))
	put64(h, hBaseVA, uint64(addr(d.main.mem)))
	put32(h, hPrefixLen, uint32(copy(h[hPrefix:hPrefix+maxPrefix], d.prefix)))
	put32(h, hJobLen, uint32(copy(h[hJob:hJob+maxJob], d.cfg.Job)))
	store32(h, hClosed, 0)
}

// Address blob: "SHM1", rank u32, pid u32, devID u32, size u64, name.
const blobMagic = "SHM1"

func (d *Device) encodeAddr() []byte {
	b := make([]byte, 0, 32+len(d.main.name))
	b = append(b, blobMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(d.cfg.Rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(d.pid))
	b = binary.LittleEndian.AppendUint32(b, d.devID)
	b = binary.LittleEndian.AppendUint64(b, uint64(d.lay.size))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(d.main.name)))
	return append(b, d.main.name...)
}

type addrInfo struct {
	rank, pid int
	devID     uint32
	size      int
	name      string
}

func decodeAddr(b []byte) (addrInfo, error) {
	var a addrInfo
	if len(b) < 4+4+4+4+8+2 || string(b[:4]) != blobMagic {
		return a, fmt.Errorf("%w: not an shm address", rdmaio.ErrBadAddress)
	}
	a.rank = int(binary.LittleEndian.Uint32(b[4:]))
	a.pid = int(binary.LittleEndian.Uint32(b[8:]))
	a.devID = binary.LittleEndian.Uint32(b[12:])
	size := binary.LittleEndian.Uint64(b[16:])
	n := int(binary.LittleEndian.Uint16(b[24:]))
	if len(b) != 26+n || n == 0 || size > 1<<40 {
		return a, fmt.Errorf("%w: malformed shm address", rdmaio.ErrBadAddress)
	}
	a.size = int(size)
	a.name = string(b[26:])
	for _, r := range a.name {
		if r == '/' || r == 0 {
			return a, fmt.Errorf("%w: shm address names %q", rdmaio.ErrBadAddress, a.name)
		}
	}
	return a, nil
}

// Provider returns "shm".
func (d *Device) Provider() string { return Name }

// Attr returns the device's limits.
func (d *Device) Attr() rdmaio.DeviceAttr { return d.attr }

// Addr returns the address blob peers need: the name of the main segment,
// the rank, the process id.
func (d *Device) Addr() []byte { return append([]byte(nil), d.blob...) }

// CMAError returns nil when peers can reach this process's ordinary memory
// with process_vm_readv/writev, and otherwise why not. Without it, remote
// access to memory regions and SENDs larger than the eager limit need memory
// from PD.Alloc.
func (d *Device) CMAError() error { return d.cmaErr }

func (d *Device) errf(format string, args ...any) error {
	return fmt.Errorf("shm: rank %d: "+format, append([]any{d.cfg.Rank}, args...)...)
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

// Close releases the device: it marks it closed for peers (whose outstanding
// work then fails with StatusRetryExcErr), wakes waiters, destroys every
// object, waits briefly for peers still accessing registered memory, and
// unmaps and unlinks every segment (the main segment's addresses stay
// reserved, read-only and zero: see segment.blank). A second Close returns
// ErrClosed.
func (d *Device) Close() error {
	if !d.life.Close() {
		return d.errf("close: %w", rdmaio.ErrClosed)
	}
	defer d.life.Unlock()
	store32(d.hdr, hClosed, 1)

	d.mu.Lock()
	cqs := append([]*cq(nil), d.cqs...)
	qps := append([]*qp(nil), d.qps...)
	srqs := append([]*srq(nil), d.srqs...)
	allocs := d.allocs
	peers := d.peers
	d.allocs, d.peers = nil, nil
	d.mu.Unlock()

	var errs []error
	clean := true
	for _, c := range cqs {
		if c != nil && !c.shutdown() {
			clean = false
		}
	}
	for _, q := range qps {
		if q != nil {
			q.shutdown()
		}
	}
	for _, s := range srqs {
		if s != nil {
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
		}
	}
	// Invalidate every key and wait (briefly) for peers inside a region.
	deadline := time.Now().Add(closeTimeout)
	d.mrs.Range(func(key uint32, m *mr) bool {
		if err := m.invalidate(deadline); err != nil {
			errs = append(errs, err)
		}
		return true
	})
	for _, p := range peers {
		p.unmap()
	}
	for _, a := range allocs {
		errs = append(errs, a.seg.unlink(), a.seg.unmap())
	}
	errs = append(errs, d.main.unlink())
	if clean {
		// Not unmapped: a Poll that began before Close may still check
		// inbound rings without locks (see cq.Poll); it reads zeros.
		errs = append(errs, d.main.blank())
	} else {
		// A sleeper is still on a doorbell of the segment (it did not
		// return within closeTimeout): leave the mapping to it.
		errs = append(errs, fmt.Errorf("a CQ still had a sleeping waiter; its segment stays mapped"))
	}
	if err := errors.Join(errs...); err != nil {
		return d.errf("close: %w", err)
	}
	return nil
}

// kick runs the send progress of QPs whose queued work waits for ring space
// or ordering, so that it moves even when only other CQs are polled.
func (d *Device) kick() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range d.qps {
		if q != nil && q.stalled.Load() && q.smu.TryLock() {
			if !q.closed {
				q.progressSend()
				q.updateSend()
			}
			q.smu.Unlock()
		}
	}
}

// peerFor maps (once) the main segment of the device an address names.
func (d *Device) peerFor(blob []byte) (*peer, error) {
	a, err := decodeAddr(blob)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.peers[a.name]; p != nil {
		return p, nil
	}
	p, err := attachPeer(d, a)
	if err != nil {
		return nil, err
	}
	d.peers[a.name] = p
	return p, nil
}
