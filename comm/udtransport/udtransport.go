package udtransport

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jiarun/jia/comm/internal/bufpool"
	"github.com/jiarun/jia/comm/internal/qpbind"
	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/rdmaio"
)

// Exchange is an all-gather: every rank calls it with the same key and its
// own value and gets every rank's value, indexed by rank.
// runtime.(*Runtime).Exchange is one; LocalExchange makes one for ranks
// that are goroutines of one process.
type Exchange = qpbind.Exchange

// Config is what New needs from a rank.
type Config struct {
	// Rank is this rank and Size the number of ranks.
	Rank, Size int
	// Devices names the device that reaches each peer: either one device
	// for every peer, or Size entries where Devices[p] reaches rank p
	// (Devices[Rank] is ignored and may be nil). Entries may share a
	// device; each distinct device gets one UD queue pair. Both ends of a
	// pair must use devices of the same provider. With Size 1 no device is
	// needed.
	Devices []rdmaio.Device
	// Exchange is the all-gather used to connect; required when Size > 1.
	Exchange Exchange
	// Key prefixes the keys New passes to Exchange (default
	// "udtransport"), so that several transports can be built in one job.
	Key string
	// CloseDevices makes Close close the devices too (and New close them
	// when it fails).
	CloseDevices bool
	// Options tune the transport; the zero value takes every default.
	Options Options
}

// Options tune a Transport. Zero fields take the defaults.
type Options struct {
	// EagerLimit is the eager limit reported to comm (Caps.EagerLimit,
	// default 16 KiB).
	EagerLimit int
	// MaxMsg is the largest message Send takes, header included
	// (Caps.MaxMsg, default 64 KiB, at least EagerLimit plus room for
	// comm's largest header). Comm cuts rendezvous data into messages of
	// this size. It is also the largest message a peer's Link reassembles:
	// every rank must use the same value.
	MaxMsg int
	// MaxSGE is reported as Caps.MaxSGE and enforced by Send (default 0:
	// no limit; the Link copies the pieces anyway).
	MaxSGE int
	// MTU caps the datagram size below the devices' path MTU (default 0:
	// the device's).
	MTU int
	// RecvBuffers is the number of receive buffers posted on each UD
	// queue pair (default 256, capped by the device).
	RecvBuffers int
	// SendDepth is the depth of each UD queue pair's send queue and the
	// number of slots of its send ring (default 128).
	SendDepth int
	// MaxInline is the largest datagram posted inline (default 256, capped
	// by the device); negative disables inline sends.
	MaxInline int
	// Window is the most unacknowledged packets per peer (default 16:
	// bursts of many peers must fit the receiver's buffers).
	Window int
	// RTO is the initial retransmission timeout (default 5ms); MaxRTO
	// bounds its doubling (default 40·RTO).
	RTO, MaxRTO time.Duration
	// QKey is the Q_Key of this rank's queue pairs (default random, so
	// that datagrams meant for an earlier transport on a reused queue
	// pair number are dropped by the device).
	QKey uint32
	// Linger bounds how long Close waits for unacknowledged messages
	// (default 1s; negative: not at all).
	Linger time.Duration
}

// Defaults of Options.
const (
	DefaultEagerLimit  = 16 << 10
	DefaultMaxMsg      = 64 << 10
	DefaultRecvBuffers = 256
	DefaultSendDepth   = 128
	DefaultMaxInline   = 256
	DefaultWindow      = 16
	DefaultRTO         = 5 * time.Millisecond
	DefaultLinger      = time.Second
)

// headerRoom is what a message holds beyond the eager limit: comm's
// largest header.
const headerRoom = (proto.MaxHeader + 63) &^ 63

// udHeader is this package's header at the start of every datagram: the
// sender's rank and the cookie of the sender's device.
const udHeader = 8

// minMTU is the smallest usable datagram: room for both headers and some
// payload.
const minMTU = udHeader + proto.LinkHeader + 64

func (o *Options) fill() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.EagerLimit, DefaultEagerLimit)
	def(&o.MaxMsg, max(DefaultMaxMsg, o.EagerLimit+headerRoom))
	def(&o.RecvBuffers, DefaultRecvBuffers)
	def(&o.SendDepth, DefaultSendDepth)
	def(&o.MaxInline, DefaultMaxInline)
	def(&o.Window, DefaultWindow)
	if o.RTO == 0 {
		o.RTO = DefaultRTO
	}
	if o.MaxRTO == 0 {
		o.MaxRTO = 40 * o.RTO
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	switch {
	case o.EagerLimit < 0 || o.EagerLimit > 1<<30:
		return fmt.Errorf("EagerLimit %d: want 0..1 GiB", o.EagerLimit)
	case o.MaxMsg < 1 || o.MaxMsg > 1<<30:
		return fmt.Errorf("MaxMsg %d: want 1..1 GiB", o.MaxMsg)
	case o.MaxSGE < 0:
		return fmt.Errorf("MaxSGE %d: want at least 0", o.MaxSGE)
	case o.MTU != 0 && o.MTU < minMTU:
		return fmt.Errorf("MTU %d: want at least %d", o.MTU, minMTU)
	case o.RecvBuffers < 1:
		return fmt.Errorf("RecvBuffers %d: want at least 1", o.RecvBuffers)
	case o.SendDepth < 4:
		return fmt.Errorf("SendDepth %d: want at least 4", o.SendDepth)
	case o.Window < 1 || o.Window > 1<<16:
		return fmt.Errorf("Window %d: want 1..65536", o.Window)
	case o.RTO < 0 || o.MaxRTO < o.RTO:
		return fmt.Errorf("RTO %v, MaxRTO %v: want 0 < RTO ≤ MaxRTO", o.RTO, o.MaxRTO)
	}
	if o.MaxInline < 0 {
		o.MaxInline = 0
	}
	return nil
}

// never is the retransmission deadline when nothing waits for an
// acknowledgement.
const never = math.MaxInt64

// Transport is one rank's transport.Transport over UD queue pairs. Its
// methods are safe for concurrent use, except that Poll must be called by
// one goroutine at a time (as the interface requires).
type Transport struct {
	rank, size int
	opt        Options
	caps       transport.Caps
	devs       []*device
	peers      []*peer // nil at rank
	rawDevs    []rdmaio.Device
	closeDevs  bool
	base       time.Time // origin of the monotonic nanoseconds below

	closed atomic.Bool

	// Messages to self.
	selfMu    sync.Mutex
	selfQ     []item
	selfSpare []item
	selfN     atomic.Int32
	selfPool  bufpool.Pool

	// Messages the Links completed, for Poll to hand out, and the pool of
	// their buffers.
	readyMu    sync.Mutex
	readyQ     []item
	readySpare []item
	readyN     atomic.Int32
	pool       bufpool.Pool

	// pollMu serializes the receive side: Poll, Wait, the progress
	// goroutine and Close take datagrams from the receive queues under it.
	pollMu  sync.Mutex
	touched []*peer // peers whose Links received in the current batch
	epoch   uint64  // marks touched peers
	// torn is set (under pollMu and tickMu) when teardown destroyed the
	// queues.
	torn bool

	// nextTick is the earliest retransmission deadline (nanoseconds since
	// base; never when none); it may be early, never late. waitEnd is the
	// end of the current Wait, so that a Send that makes a deadline
	// earlier can cut the wait short.
	nextTick atomic.Int64
	waitEnd  atomic.Int64
	tickMu   sync.Mutex
	lastRecv atomic.Int64 // when a datagram last arrived (for Close)

	waitMu sync.Mutex
	wctx   qpbind.WaitCtx

	// activity counts Polls and Waits: the progress goroutine acts only
	// when it stands still.
	activity atomic.Uint64
	stop     chan struct{}
	kick     chan struct{}
	parked   atomic.Bool
	helper   sync.WaitGroup

	errMu  sync.Mutex
	err    error
	hasErr atomic.Bool

	stats struct {
		delivered, self, localDrops, dropped atomic.Uint64
	}
}

var _ transport.Transport = (*Transport)(nil)

// item is a message waiting to be handed out.
type item struct {
	src int
	buf []byte
}

// New builds the transport: it creates a UD queue pair on every device,
// swaps queue pair numbers, Q_Keys and addresses through cfg.Exchange and
// returns when every rank can receive. Every rank of the job calls it
// together. On failure it releases what it created (and the devices, with
// CloseDevices).
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
		return nil, fmt.Errorf("udtransport: new: rank %d of %d: %w", cfg.Rank, cfg.Size, transport.ErrRank)
	}
	opt := cfg.Options
	if err := opt.fill(); err != nil {
		return nil, fmt.Errorf("udtransport: rank %d: new: options: %w", cfg.Rank, err)
	}
	if cfg.Key == "" {
		cfg.Key = "udtransport"
	}
	t := &Transport{rank: cfg.Rank, size: cfg.Size, opt: opt, closeDevs: cfg.CloseDevices,
		rawDevs: cfg.Devices, base: time.Now(), stop: make(chan struct{}), kick: make(chan struct{}, 1)}
	t.nextTick.Store(never)
	t.waitEnd.Store(never)
	t.peers = make([]*peer, cfg.Size)
	if cfg.Size > 1 {
		if cfg.Exchange == nil {
			return nil, t.errf("new: no Exchange function for %d ranks", cfg.Size)
		}
		if len(cfg.Devices) != 1 && len(cfg.Devices) != cfg.Size {
			return nil, t.errf("new: %d devices for %d ranks (want 1 or %d)", len(cfg.Devices), cfg.Size, cfg.Size)
		}
	}
	setupErr := t.setup(cfg)
	if cfg.Size == 1 {
		if setupErr != nil {
			t.teardown()
			return nil, setupErr
		}
		t.finishCaps()
		return t, nil
	}
	hs := qpbind.Handshake{Exchange: qpbind.Exchange(cfg.Exchange), CardKey: cfg.Key + "/ud", ReadyKey: cfg.Key + "/ready",
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
	t.helper.Add(1)
	go t.progressLoop()
	return t, nil
}

func (t *Transport) finishCaps() {
	var names []string
	for _, d := range t.devs {
		if p := d.dev.Provider(); !containsString(names, p) {
			names = append(names, p)
		}
	}
	name := "ud:" + strings.Join(names, "+")
	if len(names) == 0 {
		name = "ud:self"
	}
	t.caps = transport.Caps{Name: name, MaxMsg: t.opt.MaxMsg, MaxSGE: t.opt.MaxSGE,
		EagerLimit: min(t.opt.EagerLimit, t.opt.MaxMsg)}
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
	return fmt.Errorf("udtransport: rank %d: "+format, append([]any{t.rank}, args...)...)
}

// setErr records an error that the call that met it could not return; Err
// reports it and Send returns it from then on.
func (t *Transport) setErr(err error) {
	t.errMu.Lock()
	if t.err == nil {
		t.err = err
		t.hasErr.Store(true)
	}
	t.errMu.Unlock()
}

// Err returns the first error the transport met outside a call that could
// return it (a failed repost of receive buffers, an error completion of
// the queue pair), or nil.
func (t *Transport) Err() error {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	return t.err
}

// Rank returns this rank.
func (t *Transport) Rank() int { return t.rank }

// Size returns the number of ranks.
func (t *Transport) Size() int { return t.size }

// Caps describes the transport: "ud:" and the provider names, MaxMsg,
// MaxSGE, the eager limit, and no one-sided operations.
func (t *Transport) Caps() transport.Caps { return t.caps }

// Register returns transport.ErrNotSupported: UD has no one-sided
// operations.
func (t *Transport) Register([]byte) (transport.Region, error) {
	return transport.Region{}, t.errf("register: %w", transport.ErrNotSupported)
}

// Deregister returns transport.ErrNotSupported.
func (t *Transport) Deregister(transport.Region) error {
	return t.errf("deregister: %w", transport.ErrNotSupported)
}

// Read returns transport.ErrNotSupported.
func (t *Transport) Read(src int, _ transport.Region, _ [][]byte, _ uint64) error {
	return t.errf("read from rank %d: %w", src, transport.ErrNotSupported)
}

// Write returns transport.ErrNotSupported.
func (t *Transport) Write(dst int, _ transport.Region, _ [][]byte, _ uint64) error {
	return t.errf("write to rank %d: %w", dst, transport.ErrNotSupported)
}

// Stats are counters of a transport's activity, for tests and tuning.
type Stats struct {
	// Delivered counts messages handed to Deliver, Self those to this
	// rank.
	Delivered, Self uint64
	// LocalDrops counts datagrams not posted because the send queue was
	// full (they are retransmitted); Dropped counts datagrams received
	// and dropped as malformed or from no known peer.
	LocalDrops, Dropped uint64
	// Link is the sum of the peers' Link counters: packets sent,
	// retransmitted, acknowledgements, duplicates received…
	Link proto.LinkStats
}

// Stats returns the counters summed over peers.
func (t *Transport) Stats() Stats {
	s := Stats{Delivered: t.stats.delivered.Load(), Self: t.stats.self.Load(),
		LocalDrops: t.stats.localDrops.Load(), Dropped: t.stats.dropped.Load()}
	for _, p := range t.peers {
		if p == nil || p.link == nil {
			continue
		}
		p.mu.Lock()
		l := p.link.Stats
		p.mu.Unlock()
		s.Link.Sent += l.Sent
		s.Link.Retransmits += l.Retransmits
		s.Link.FastRetransmits += l.FastRetransmits
		s.Link.Acks += l.Acks
		s.Link.Received += l.Received
		s.Link.Duplicates += l.Duplicates
		s.Link.OutOfWindow += l.OutOfWindow
		s.Link.Malformed += l.Malformed
		s.Link.Delivered += l.Delivered
	}
	return s
}

// Close stops the transport: new calls fail with transport.ErrClosed;
// unacknowledged messages get up to Options.Linger to be acknowledged (the
// peers must keep polling for that), and the rank keeps answering its
// peers a little longer while they still send; then every object New
// created is destroyed (and the devices closed, with CloseDevices).
// Messages that arrive during Close are dropped. Close must not be called
// from inside a Handler.
func (t *Transport) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return t.errf("close: %w", transport.ErrClosed)
	}
	close(t.stop)
	t.helper.Wait()
	t.wctx.Kill()
	t.waitMu.Lock()
	defer t.waitMu.Unlock()
	t.pollMu.Lock()
	defer t.pollMu.Unlock()
	if t.opt.Linger > 0 {
		t.linger(time.Now().Add(t.opt.Linger))
	}
	return t.teardown()
}

// linger polls and runs the timers until every Link is acknowledged and
// no datagram arrived for a few retransmission timeouts, or the deadline
// passes (pollMu held).
func (t *Transport) linger(deadline time.Time) {
	quiet := int64(4 * t.opt.RTO)
	for {
		now := time.Now()
		if now.After(deadline) {
			return
		}
		t.recvAll(now)
		t.tickAll(now)
		busy := false
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			p.mu.Lock()
			busy = busy || !p.link.Idle()
			p.mu.Unlock()
		}
		if !busy && t.mono(now)-t.lastRecv.Load() >= quiet {
			return
		}
		// Drop what completed: nobody will poll any more.
		t.readyMu.Lock()
		for i := range t.readyQ {
			t.pool.Put(t.readyQ[i].buf)
			t.readyQ[i] = item{}
		}
		t.readyQ = t.readyQ[:0]
		t.readyN.Store(0)
		t.readyMu.Unlock()
		time.Sleep(50 * time.Microsecond)
	}
}

// teardown destroys everything (pollMu held, or no other user yet).
func (t *Transport) teardown() error {
	t.tickMu.Lock()
	t.torn = true
	t.tickMu.Unlock()
	var errs []error
	for _, d := range t.devs {
		if d.qp != nil {
			if err := d.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateErr}); err != nil {
				errs = append(errs, fmt.Errorf("device %d: %w", d.slot, err))
			}
		}
	}
	for _, p := range t.peers {
		if p != nil && p.ah != nil {
			if err := p.ah.Close(); err != nil {
				errs = append(errs, fmt.Errorf("address handle of rank %d: %w", p.rank, err))
			}
			p.ah = nil
		}
	}
	for _, d := range t.devs {
		d.sendMu.Lock()
		errs = append(errs, d.destroy()...)
		d.sendMu.Unlock()
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

// mono returns now as nanoseconds since t.base.
func (t *Transport) mono(now time.Time) int64 { return int64(now.Sub(t.base)) }

// Devices returns the distinct devices the transport runs on, in the
// order of first use (none for a single rank).
func (t *Transport) Devices() []rdmaio.Device {
	out := make([]rdmaio.Device, len(t.devs))
	for i, d := range t.devs {
		out[i] = d.dev
	}
	return out
}
