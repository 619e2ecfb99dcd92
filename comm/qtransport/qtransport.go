package qtransport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jiarun/jia/comm/internal/bufpool"
	"github.com/jiarun/jia/comm/internal/qpbind"
	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/internal/qlock"
	"github.com/jiarun/jia/rdmaio"
)

// Exchange is an all-gather: every rank calls it with the same key and its
// own value and gets every rank's value, indexed by rank.
// runtime.(*Runtime).Exchange is one; LocalExchange makes one for ranks that
// are goroutines of one process.
type Exchange = qpbind.Exchange

// Config is what New needs from a rank.
type Config struct {
	// Rank is this rank and Size the number of ranks.
	Rank, Size int
	// Devices names the device that reaches each peer: either one device
	// for every peer, or Size entries where Devices[p] reaches rank p
	// (Devices[Rank] is ignored and may be nil). Entries may share a
	// device. Both ends of a pair must use devices of the same provider.
	// With Size 1 no device is needed.
	Devices []rdmaio.Device
	// Exchange is the all-gather used to connect; required when Size > 1.
	Exchange Exchange
	// Key prefixes the keys New passes to Exchange (default "qtransport"),
	// so that several transports can be built in one job.
	Key string
	// CloseDevices makes Close close the devices too (and New close them
	// when it fails).
	CloseDevices bool
	// Options tune the transport; the zero value takes every default.
	Options Options
}

// Options tune a Transport. Zero fields take the defaults.
type Options struct {
	// EagerLimit is the eager limit the transport reports to comm
	// (Caps.EagerLimit, default 16 KiB; when it is not set, peers reached
	// through tcp get 64 KiB, as Open MPI's TCP transport: between hosts a
	// rendezvous costs two more network crossings, more than the extra
	// copy of a mid-size message). The receive buffers, and so
	// Caps.MaxMsg, are this plus room for comm's largest header. Every
	// rank must use the same value.
	EagerLimit int
	// EagerLimits overrides EagerLimit for the peers reached through a
	// provider, by provider name ("shm", "tcp", "verbs"); zero entries
	// mean EagerLimit. A device's receive buffers are sized for its
	// provider's limit, and comm gets each peer's limit in
	// Caps.PeerEagerLimit. Every rank must use the same values.
	EagerLimits map[string]int
	// RecvBuffers is the number of receive buffers in each device's shared
	// receive queue (default 256).
	RecvBuffers int
	// SendDepth is the depth of each queue pair's send queue (default 128).
	SendDepth int
	// SendRing is the size of each peer's bounce ring, allocated at the
	// first send to the peer that needs it (default 256 KiB, at least
	// twice the largest message or bounced read).
	SendRing int
	// MaxInline is the largest message posted inline (default 1024, capped
	// by the device); negative disables inline sends.
	MaxInline int
	// MaxSGE is the longest scatter/gather list of one work request
	// (default 16, capped by the device); it is Caps.MaxSGE.
	MaxSGE int
	// RegCache is how many registrations no Register or transfer uses
	// any more are kept for reuse (default 128; negative: none), and
	// RegCacheBytes bounds their total size (default 64 MiB). A cached
	// registration keeps its buffer reachable and registered (exposed to
	// peers that kept its key) until it is evicted or the transport
	// closes; registering and deregistering costs more than a transfer of
	// tens of kilobytes.
	RegCache, RegCacheBytes int
	// ReadBounce is the largest Read or Write that goes through the bounce
	// ring when its local pieces are not registered already (in the
	// registration cache); larger ones register them (default: 8 KiB on
	// shm, where registering ordinary memory is only a table entry and
	// costs less than the extra copy from 16 KiB up; 64 KiB on the other
	// providers; negative: always register).
	ReadBounce int
	// TwoSided turns one-sided operations off (Caps.OneSided false), so
	// that comm uses its two-sided rendezvous.
	TwoSided bool
	// Linger bounds how long Close waits for queued and outstanding
	// messages to be received (default 1s; negative: not at all).
	Linger time.Duration
	// Lazy leaves the pages of the bounce rings to be faulted in by the
	// first messages through them, instead of writing to them when they
	// are allocated: it saves start-up time when ranks outnumber
	// processors and the first messages' latency matters less. The
	// receive buffers are readied in any case: they are one pool per
	// device, whatever the number of ranks, and messages larger than a
	// page would otherwise fault in each buffer they meet.
	Lazy bool

	eagerDefault bool // EagerLimit was not set (fill)
}

// Defaults of Options.
const (
	DefaultEagerLimit    = 16 << 10
	DefaultTCPEagerLimit = 64 << 10
	DefaultRecvBuffers   = 256
	DefaultSendDepth     = 128
	DefaultSendRing      = 256 << 10
	DefaultMaxInline     = 1024
	DefaultMaxSGE        = 16
	DefaultReadBounce    = 64 << 10
	DefaultSHMReadBounce = 8 << 10
	DefaultLinger        = time.Second
	DefaultRegCache      = 128
	DefaultRegCacheBytes = 64 << 20
)

// headerRoom is what a receive buffer holds beyond the eager limit: comm's
// largest header.
const headerRoom = (proto.MaxHeader + 63) &^ 63

// teardownTimeout bounds how long Close waits for flushed completions.
const teardownTimeout = time.Second

func (o *Options) fill() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	o.eagerDefault = o.EagerLimit == 0
	def(&o.EagerLimit, DefaultEagerLimit)
	def(&o.RecvBuffers, DefaultRecvBuffers)
	def(&o.SendDepth, DefaultSendDepth)
	def(&o.SendRing, DefaultSendRing)
	def(&o.MaxInline, DefaultMaxInline)
	def(&o.MaxSGE, DefaultMaxSGE)
	def(&o.RegCache, DefaultRegCache)
	def(&o.RegCacheBytes, DefaultRegCacheBytes)
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	switch {
	case o.EagerLimit < 0 || o.EagerLimit > 1<<30:
		return fmt.Errorf("EagerLimit %d: want 0..1 GiB", o.EagerLimit)
	case o.RecvBuffers < 1:
		return fmt.Errorf("RecvBuffers %d: want at least 1", o.RecvBuffers)
	case o.SendDepth < 4:
		return fmt.Errorf("SendDepth %d: want at least 4", o.SendDepth)
	case o.SendRing < 0:
		return fmt.Errorf("SendRing %d: want at least 0", o.SendRing)
	case o.MaxSGE < 1:
		return fmt.Errorf("MaxSGE %d: want at least 1", o.MaxSGE)
	}
	for name, l := range o.EagerLimits {
		if l < 0 || l > 1<<30 {
			return fmt.Errorf("EagerLimits[%q] %d: want 0..1 GiB", name, l)
		}
	}
	if o.MaxInline < 0 {
		o.MaxInline = 0
	}
	if o.RegCache < 0 {
		o.RegCache = 0
	}
	if o.RegCacheBytes < 0 {
		o.RegCacheBytes = 0
	}
	return nil
}

// eagerLimitFor returns the eager limit of the peers reached through
// provider.
func (o *Options) eagerLimitFor(provider string) int {
	if l := o.EagerLimits[provider]; l > 0 {
		return l
	}
	if o.eagerDefault && provider == "tcp" {
		return DefaultTCPEagerLimit
	}
	return o.EagerLimit
}

// readBounceFor returns the bounce limit of Reads and Writes through
// provider (Options.ReadBounce).
func (o *Options) readBounceFor(provider string) int {
	switch {
	case o.ReadBounce < 0:
		return 0
	case o.ReadBounce > 0:
		return o.ReadBounce
	case provider == "shm":
		return DefaultSHMReadBounce
	}
	return DefaultReadBounce
}

// Transport is one rank's transport.Transport over rdmaio queue pairs.
// Its methods are safe for concurrent use, except that Poll must be called
// by one goroutine at a time (as the interface requires).
type Transport struct {
	rank, size int
	opt        Options
	caps       transport.Caps
	maxMsg     int // the largest message to any rank (devices' maxMsg, or to self)
	maxBounce  int // the largest bounce allocation: max(maxMsg, devices' readBounce)
	ringSize   int
	devs       []*device
	stageDev   *device // the shm device, whose memory the ranks of this host map (AllocStage), or nil
	peers      []*peer // nil at rank
	rawDevs    []rdmaio.Device
	closeDevs  bool
	// oneSided tells whether Register, Read and Write work.
	oneSided bool

	closed atomic.Bool

	// Messages to self and completions decided outside Poll.
	selfMu    sync.Mutex
	selfQ     []selfItem
	selfSpare []selfItem
	selfPool  bufpool.Pool
	selfN     atomic.Int32
	selfCount atomic.Uint64
	waits     atomic.Uint64
	reaps     atomic.Uint64 // Stats.Reaps

	regMu    sync.Mutex
	regs     map[uint64]*region // by key
	regList  []*region
	regTick  uint64
	regBytes int
	regCount uint64
	nextKey  uint64  // software keys when there are no devices
	stages   []stage // memory from AllocStage (regMu)

	waitMu sync.Mutex
	wctx   qpbind.WaitCtx

	// polls counts calls of Poll: the progress goroutines act only when
	// it stands still.
	polls      atomic.Uint64
	backlogged atomic.Int32 // peers with a non-empty backlog
	// held lists the peers whose chain holds messages of SendShortHeld
	// not posted yet; heldN is its length, read without heldMu.
	heldMu    qlock.Mutex
	held      []*peer
	heldSpare []*peer
	heldN     atomic.Int32
	// burst is set by a SendShortHeld that posted its message at once
	// (the first of a burst) and cleared by the owner's next Flush or Poll:
	// only the messages after the first of a burst are held.
	burst    atomic.Bool
	stop     chan struct{}
	helperMu sync.Mutex
	helpers  sync.WaitGroup

	errMu sync.Mutex
	err   error
}

var _ transport.Transport = (*Transport)(nil)

// selfItem is a message to self, or a completion to report, for Poll.
type selfItem struct {
	msg  []byte
	id   uint64
	err  error
	comp bool
}

// doneOp is a finished Read or Write to report after the peer's lock is
// released: its registrations (device.doneRegs[r0:r1]) are released
// first.
type doneOp struct {
	id     uint64
	err    error
	r0, r1 int
}

// New builds the transport: it sets up queues on every device, connects one
// RC queue pair per peer through cfg.Exchange and returns when every rank
// can receive. Every rank of the job calls it together. On failure it
// releases what it created (and the devices, with CloseDevices).
func New(ctx context.Context, cfg Config) (*Transport, error) {
	t, err := build(ctx, &cfg)
	if err != nil {
		if cfg.CloseDevices {
			qpbind.CloseDevices(cfg.Devices)
		}
		return nil, err
	}
	return t, nil
}

func build(ctx context.Context, cfg *Config) (*Transport, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("qtransport: new: rank %d of %d: %w", cfg.Rank, cfg.Size, transport.ErrRank)
	}
	opt := cfg.Options
	if err := opt.fill(); err != nil {
		return nil, fmt.Errorf("qtransport: rank %d: new: options: %w", cfg.Rank, err)
	}
	if cfg.Key == "" {
		cfg.Key = "qtransport"
	}
	t := &Transport{rank: cfg.Rank, size: cfg.Size, opt: opt, closeDevs: cfg.CloseDevices,
		regs: map[uint64]*region{}, rawDevs: cfg.Devices}
	t.setMaxMsg(opt.EagerLimit + headerRoom)
	t.stop = make(chan struct{})
	t.peers = make([]*peer, cfg.Size)
	if cfg.Size > 1 {
		if cfg.Exchange == nil {
			return nil, t.errf("new: no Exchange function for %d ranks", cfg.Size)
		}
		if len(cfg.Devices) != 1 && len(cfg.Devices) != cfg.Size {
			return nil, t.errf("new: %d devices for %d ranks (want 1 or %d)", len(cfg.Devices), cfg.Size, cfg.Size)
		}
	}
	// Local setup; a failure is still published, so that every rank fails
	// New instead of waiting for this one.
	setupErr := t.setup(cfg)
	if cfg.Size == 1 {
		if setupErr != nil {
			t.teardown()
			return nil, setupErr
		}
		t.finishCaps()
		return t, nil
	}
	hs := qpbind.Handshake{Exchange: qpbind.Exchange(cfg.Exchange), CardKey: cfg.Key + "/qp", ReadyKey: cfg.Key + "/ready",
		Magic: errMagic, Size: cfg.Size, Errorf: t.errf}
	var card []byte
	if setupErr == nil {
		card = t.encodeCard()
	}
	if err := hs.Run(ctx, card, setupErr, t.connect); err != nil {
		t.teardown()
		return nil, err
	}
	t.finishCaps()
	return t, nil
}

func (t *Transport) finishCaps() {
	names := make([]string, 0, len(t.devs))
	for _, d := range t.devs {
		if p := d.dev.Provider(); !containsString(names, p) {
			names = append(names, p)
		}
	}
	name := strings.Join(names, "+")
	if name == "" {
		name = "self"
	}
	sge := t.opt.MaxSGE
	for _, d := range t.devs {
		sge = min(sge, d.sge)
	}
	t.caps = transport.Caps{Name: name, MaxMsg: t.maxMsg, MaxSGE: sge, OneSided: t.oneSided,
		EagerLimit: t.maxMsg - headerRoom}
	uniform := true
	for _, d := range t.devs {
		uniform = uniform && d.maxMsg == t.maxMsg
	}
	if !uniform {
		// Peers reached through different providers: each gets its
		// provider's limit.
		t.caps.PeerEagerLimit = make([]int, t.size)
		t.caps.PeerMaxMsg = make([]int, t.size)
		for r, p := range t.peers {
			m := t.maxMsg
			if p != nil {
				m = p.d.maxMsg
			}
			t.caps.PeerEagerLimit[r], t.caps.PeerMaxMsg[r] = m-headerRoom, m
		}
	}
}

// setMaxMsg sets the largest message to any rank, and the bounce sizes
// that follow from it.
func (t *Transport) setMaxMsg(n int) {
	t.maxMsg = n
	t.maxBounce = t.maxMsg
	if len(t.devs) == 0 {
		t.maxBounce = max(t.maxBounce, t.opt.readBounceFor(""))
	}
	for _, d := range t.devs {
		t.maxBounce = max(t.maxBounce, d.readBounce)
	}
	t.ringSize = (max(t.opt.SendRing, 2*t.maxBounce) + 4095) &^ 4095
}

func containsString(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func (t *Transport) errf(format string, args ...any) error {
	return fmt.Errorf("qtransport: rank %d: "+format, append([]any{t.rank}, args...)...)
}

// setErr records an error that Poll could not return; Err reports it.
func (t *Transport) setErr(err error) {
	t.errMu.Lock()
	if t.err == nil {
		t.err = err
	}
	t.errMu.Unlock()
}

// Err returns the first error the transport met outside a call that could
// return it (a failed repost of receive buffers, a completion for an
// unknown work request), or nil. Errors of a connection are returned by
// the next Send to that peer instead.
func (t *Transport) Err() error {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	return t.err
}

// Rank returns this rank.
func (t *Transport) Rank() int { return t.rank }

// Size returns the number of ranks.
func (t *Transport) Size() int { return t.size }

// Caps describes the transport: the provider names, MaxMsg (the receive
// buffer size), MaxSGE, whether one-sided operations work, and the eager
// limit.
func (t *Transport) Caps() transport.Caps { return t.caps }

// Stats are counters of a transport's activity, for tests and tuning.
type Stats struct {
	// Inline, Bounced: messages posted inline and from the bounce ring;
	// Backlogged: messages (and one-sided operations) that waited in a
	// peer's backlog; Self: messages to self; Delivered: messages handed to
	// Deliver; Taken: messages taken where they lay (Take), not counted in
	// Delivered.
	Inline, Bounced, Backlogged, Self, Delivered, Taken uint64
	// BacklogPeak is the most operations one peer's backlog held at once.
	BacklogPeak int
	// Signaled: signaled send work requests; Chains: posts of more than
	// one work request at once.
	Signaled, Chains uint64
	// ReadsBounced and ReadsRegistered count Reads and Writes by the way
	// the local pieces were reached.
	ReadsBounced, ReadsRegistered uint64
	// Waits counts calls of Wait that waited in the provider.
	Waits uint64
	// Reaps counts the polls that sends made themselves, finding messages
	// in a backlog, and that took completions.
	Reaps uint64
	// Registrations counts buffers registered (not found in the
	// registration cache); Cached is how many the cache holds.
	Registrations uint64
	Cached        int
}

// Stats returns the counters summed over peers. Delivered and Taken may
// lag while another goroutine polls or waits.
func (t *Transport) Stats() Stats {
	var s Stats
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		p.mu.Lock()
		s.Inline += p.st.Inline
		s.Bounced += p.st.Bounced
		s.Backlogged += p.st.Backlogged
		s.BacklogPeak = max(s.BacklogPeak, p.st.BacklogPeak)
		s.Signaled += p.st.Signaled
		s.Chains += p.st.Chains
		s.ReadsBounced += p.st.ReadsBounced
		s.ReadsRegistered += p.st.ReadsRegistered
		p.mu.Unlock()
	}
	for _, d := range t.devs {
		// Never wait for the poll lock (Stats may be called from a
		// Handler): use the last count read under it.
		if d.pollMu.TryLock() {
			d.deliveredSnap.Store(d.delivered)
			d.takenSnap.Store(d.taken)
			d.pollMu.Unlock()
		}
		s.Delivered += d.deliveredSnap.Load()
		s.Taken += d.takenSnap.Load()
	}
	s.Self = t.selfCount.Load()
	s.Waits = t.waits.Load()
	s.Reaps = t.reaps.Load()
	t.regMu.Lock()
	s.Registrations = t.regCount
	s.Cached = len(t.regList)
	t.regMu.Unlock()
	return s
}

// Close stops the transport: new calls fail with transport.ErrClosed;
// queued and outstanding messages get up to Options.Linger to drain (the
// peers must keep polling for that); then every queue pair is moved to the
// error state, the flushed completions are collected and every object New
// created is destroyed (and the devices closed, with CloseDevices). Reads
// and writes still in progress are abandoned without a completion. Close
// must not be called from inside a Handler.
func (t *Transport) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return t.errf("close: %w", transport.ErrClosed)
	}
	t.Flush()
	t.wctx.Kill()
	t.helperMu.Lock() // no progress goroutine starts after this
	close(t.stop)
	t.helperMu.Unlock()
	t.helpers.Wait()
	t.waitMu.Lock()
	defer t.waitMu.Unlock()
	for _, d := range t.devs {
		d.pollMu.Lock()
	}
	if t.opt.Linger > 0 {
		t.linger(time.Now().Add(t.opt.Linger))
	}
	err := t.teardown()
	for _, d := range t.devs {
		d.pollMu.Unlock()
	}
	return err
}

// teardown destroys everything (poll locks held, or no other user yet).
func (t *Transport) teardown() error {
	var errs []error
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		if p.qp != nil {
			if err := p.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateErr}); err != nil {
				errs = append(errs, fmt.Errorf("peer %d: %w", p.rank, err))
			}
		}
	}
	t.drainFlushed(time.Now().Add(teardownTimeout))
	for _, p := range t.peers {
		if p != nil {
			errs = append(errs, p.destroy()...)
		}
	}
	t.regMu.Lock()
	for _, r := range t.regList {
		errs = append(errs, r.deregister()...)
	}
	t.regList, t.regs = nil, map[uint64]*region{}
	errs = append(errs, t.freeStages()...)
	t.regMu.Unlock()
	for _, d := range t.devs {
		errs = append(errs, d.destroy()...)
	}
	if t.closeDevs {
		seen := map[rdmaio.Device]bool{}
		for _, d := range t.rawDevs {
			if d != nil && !seen[d] {
				seen[d] = true
				if err := d.Close(); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	t.selfMu.Lock()
	t.selfQ = nil
	t.selfN.Store(0)
	t.selfMu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return t.errf("close: %w", err)
	}
	return nil
}
