// Package memtransport is an in-memory implementation of
// transport.Transport: many ranks as goroutines of one process, for tests,
// examples and benchmarks of package comm.
//
// A Fabric connects n endpoints. By default messages go straight into the
// destination's inbox (reliable and ordered, like an RC queue pair) and
// one-sided Read and Write copy between registered buffers. With
// Options.Lossy, messages instead travel as datagrams of at most Options.MTU
// bytes through a network that drops, duplicates and reorders them with a
// seeded random generator, and each pair of endpoints runs a proto.Link to
// recover, as a binding over UD queue pairs does.
package memtransport

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/comm/transport"
)

// Options configure a Fabric. The zero value is a reliable fabric with
// one-sided operations and no message size limit.
type Options struct {
	// NoOneSided disables Register, Read and Write (comm then uses
	// two-sided rendezvous).
	NoOneSided bool
	// MaxMsg, MaxSGE, MaxRead and EagerLimit are reported in Caps; MaxMsg
	// and MaxSGE are enforced by Send.
	MaxMsg, MaxSGE, MaxRead, EagerLimit int
	// PeerEagerLimit, when set, is the eager limit endpoint from reports
	// for peer to (Caps.PeerEagerLimit), as a transport whose peers are
	// reached through different providers does. It should be symmetric.
	PeerEagerLimit func(from, to int) int

	// Lossy sends messages as datagrams through a faulty network, made
	// reliable by proto.Link.
	Lossy bool
	// Loss, Dup and Reorder are the probabilities that a datagram is
	// dropped, delivered twice, or held back behind later ones.
	Loss, Dup, Reorder float64
	// Seed seeds the fault generator.
	Seed uint64
	// MTU is the datagram size (default 1024); RTO the Link's initial
	// retransmission timeout (default 2ms).
	MTU int
	RTO time.Duration
}

// Fabric connects the endpoints of one job.
type Fabric struct {
	opt Options
	eps []*Endpoint

	regMu   sync.RWMutex
	regions []region
	regFree []int

	// lossy mode
	rngMu   sync.Mutex
	rng     *rand.Rand
	held    []dgram
	stop    chan struct{}
	stopped sync.WaitGroup
	closed  atomic.Bool
	// Stats of the faulty network.
	dropped, duplicated, reordered atomic.Uint64
}

type region struct {
	buf  []byte
	live bool
}

type dgram struct {
	from, to int
	pkt      []byte
}

// New returns a fabric of n endpoints.
func New(n int, opt Options) *Fabric {
	if opt.EagerLimit == 0 {
		opt.EagerLimit = 16 << 10
	}
	if opt.MTU == 0 {
		opt.MTU = 1024
	}
	if opt.RTO == 0 {
		opt.RTO = 2 * time.Millisecond
	}
	f := &Fabric{opt: opt, eps: make([]*Endpoint, n)}
	for i := range f.eps {
		e := &Endpoint{f: f, rank: i, notify: make(chan struct{}, 1)}
		if opt.Lossy {
			e.links = make([]*proto.Link, n)
			for j := range e.links {
				e.links[j] = proto.NewLink(proto.LinkConfig{MTU: opt.MTU, RTO: opt.RTO, MaxRTO: 8 * opt.RTO,
					MaxMsg: opt.MaxMsg, Peer: j})
			}
		}
		f.eps[i] = e
	}
	if opt.Lossy {
		f.rng = rand.New(rand.NewPCG(opt.Seed, 0x6a6961))
		f.stop = make(chan struct{})
		f.stopped.Add(1)
		go f.ticker()
	}
	return f
}

// Endpoint returns rank r's endpoint.
func (f *Fabric) Endpoint(r int) *Endpoint { return f.eps[r] }

// Size returns the number of endpoints.
func (f *Fabric) Size() int { return len(f.eps) }

// Close stops the fabric's background work (lossy mode) and closes every
// endpoint.
func (f *Fabric) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	if f.stop != nil {
		close(f.stop)
		f.stopped.Wait()
	}
	for _, e := range f.eps {
		e.Close()
	}
	return nil
}

// NetStats returns how many datagrams the faulty network dropped,
// duplicated and reordered.
func (f *Fabric) NetStats() (dropped, duplicated, reordered uint64) {
	return f.dropped.Load(), f.duplicated.Load(), f.reordered.Load()
}

// LinkStats returns the sum of every Link's counters (lossy mode).
func (f *Fabric) LinkStats() proto.LinkStats {
	var s proto.LinkStats
	for _, e := range f.eps {
		e.lmu.Lock()
		for _, l := range e.links {
			t := l.Stats
			s.Sent += t.Sent
			s.Retransmits += t.Retransmits
			s.FastRetransmits += t.FastRetransmits
			s.Acks += t.Acks
			s.Received += t.Received
			s.Duplicates += t.Duplicates
			s.OutOfWindow += t.OutOfWindow
			s.Delivered += t.Delivered
		}
		e.lmu.Unlock()
	}
	return s
}

const (
	itMsg = iota + 1
	itDone
	itPkt
)

type item struct {
	kind uint8
	from int
	buf  []byte
	id   uint64
	err  error
}

// Endpoint is one rank's transport.Transport.
type Endpoint struct {
	f    *Fabric
	rank int

	mu       sync.Mutex
	inbox    []item
	free     [40][][]byte
	pending  atomic.Int32
	sleepers atomic.Int32
	notify   chan struct{}
	closed   atomic.Bool

	work   []item   // owned by the goroutine in Poll
	used   [][]byte // buffers of the last Poll, returned at the next
	timers sync.Pool

	// lossy mode: lmu orders Link work before mu
	lmu       sync.Mutex
	links     []*proto.Link
	parts     [][]byte
	delivered []item
	linkErr   error // the first error of a Link, returned by Send
}

var _ transport.Transport = (*Endpoint)(nil)

// Rank returns the endpoint's rank.
func (e *Endpoint) Rank() int { return e.rank }

// Size returns the number of ranks.
func (e *Endpoint) Size() int { return len(e.f.eps) }

// Caps returns the fabric's capabilities.
func (e *Endpoint) Caps() transport.Caps {
	o := &e.f.opt
	c := transport.Caps{Name: "mem", MaxMsg: o.MaxMsg, MaxSGE: o.MaxSGE, OneSided: !o.NoOneSided,
		MaxRead: o.MaxRead, EagerLimit: o.EagerLimit}
	if o.PeerEagerLimit != nil {
		c.PeerEagerLimit = make([]int, len(e.f.eps))
		for r := range c.PeerEagerLimit {
			c.PeerEagerLimit[r] = o.PeerEagerLimit(e.rank, r)
		}
	}
	return c
}

func class(n int) int {
	if n <= 64 {
		return 6
	}
	return bits.Len(uint(n - 1))
}

// getBuf returns a buffer of n bytes from e's pool; e.mu is held.
func (e *Endpoint) getBuf(n int) []byte {
	c := class(n)
	if c < len(e.free) {
		if l := len(e.free[c]); l > 0 {
			b := e.free[c][l-1]
			e.free[c] = e.free[c][:l-1]
			return b[:n]
		}
		return make([]byte, n, 1<<c)
	}
	return make([]byte, n)
}

// putBuf returns b to the pool; e.mu is held.
func (e *Endpoint) putBuf(b []byte) {
	c := class(cap(b))
	if c < len(e.free) && cap(b) == 1<<c && len(e.free[c]) < 256 {
		e.free[c] = append(e.free[c], b)
	}
}

func (e *Endpoint) push(it item) {
	e.mu.Lock()
	e.inbox = append(e.inbox, it)
	e.mu.Unlock()
	e.pending.Add(1)
	e.wake()
}

func (e *Endpoint) wake() {
	if e.sleepers.Load() > 0 {
		select {
		case e.notify <- struct{}{}:
		default:
		}
	}
}

// Send delivers hdr and data to dst's inbox (reliable mode) or hands them
// to the pair's Link (lossy mode).
func (e *Endpoint) Send(dst int, hdr []byte, data [][]byte) error {
	if dst < 0 || dst >= len(e.f.eps) {
		return fmt.Errorf("%w: %d of %d", transport.ErrRank, dst, len(e.f.eps))
	}
	if e.closed.Load() {
		return transport.ErrClosed
	}
	n := len(hdr)
	for _, d := range data {
		n += len(d)
	}
	o := &e.f.opt
	if o.MaxMsg > 0 && n > o.MaxMsg {
		return fmt.Errorf("%w: %d bytes, limit %d", transport.ErrTooLong, n, o.MaxMsg)
	}
	if o.MaxSGE > 0 && len(data) > o.MaxSGE {
		return fmt.Errorf("memtransport: gather list of %d pieces, limit %d", len(data), o.MaxSGE)
	}
	if o.Lossy {
		e.lmu.Lock()
		if err := e.linkErr; err != nil {
			e.lmu.Unlock()
			return err
		}
		e.parts = append(e.parts[:0], hdr)
		e.parts = append(e.parts, data...)
		l := e.links[dst]
		l.Send(time.Now(), e.parts...)
		clear(e.parts)
		e.flushLocked(dst)
		e.lmu.Unlock()
		return nil
	}
	d := e.f.eps[dst]
	d.mu.Lock()
	b := d.getBuf(n)
	k := copy(b, hdr)
	for _, s := range data {
		k += copy(b[k:], s)
	}
	d.inbox = append(d.inbox, item{kind: itMsg, from: e.rank, buf: b})
	d.mu.Unlock()
	d.pending.Add(1)
	d.wake()
	return nil
}

// flushLocked transmits what the Link to peer has ready; e.lmu is held.
// Messages the Link delivered are collected in e.delivered.
func (e *Endpoint) flushLocked(peer int) {
	l := e.links[peer]
	if !l.HasReady() {
		return
	}
	rd := l.Ready()
	for _, p := range rd.Packets {
		e.f.transmit(e.rank, peer, p)
	}
	for _, m := range rd.Messages {
		e.delivered = append(e.delivered, item{kind: itMsg, from: peer, buf: append([]byte(nil), m...)})
	}
	l.Advance()
}

// processPackets runs the datagrams waiting in e's inbox through the Links
// and puts the messages they complete at the end of the inbox, in order.
// Both Poll and the fabric's ticker call it, so acknowledgements flow even
// while the rank does not poll (as a binding's progress goroutine would do).
func (e *Endpoint) processPackets() {
	e.lmu.Lock()
	defer e.lmu.Unlock()
	e.mu.Lock()
	var pkts []item
	keep := e.inbox[:0]
	for _, it := range e.inbox {
		if it.kind == itPkt {
			pkts = append(pkts, it)
		} else {
			keep = append(keep, it)
		}
	}
	clear(e.inbox[len(keep):])
	e.inbox = keep
	e.mu.Unlock()
	if len(pkts) == 0 {
		return
	}
	e.pending.Add(-int32(len(pkts)))
	now := time.Now()
	for _, it := range pkts {
		if err := e.links[it.from].Receive(now, it.buf); err != nil && e.linkErr == nil {
			e.linkErr = fmt.Errorf("memtransport: rank %d: %w", e.rank, err)
		}
		e.flushLocked(it.from)
	}
	if len(e.delivered) == 0 {
		return
	}
	e.mu.Lock()
	e.inbox = append(e.inbox, e.delivered...)
	e.mu.Unlock()
	e.pending.Add(int32(len(e.delivered)))
	clear(e.delivered)
	e.delivered = e.delivered[:0]
	e.wake()
}

// transmit passes a datagram through the faulty network.
func (f *Fabric) transmit(from, to int, pkt []byte) {
	f.rngMu.Lock()
	drop := f.rng.Float64() < f.opt.Loss
	dup := f.rng.Float64() < f.opt.Dup
	hold := f.rng.Float64() < f.opt.Reorder
	var release []dgram
	if !drop && hold {
		f.held = append(f.held, dgram{from, to, append([]byte(nil), pkt...)})
		f.reordered.Add(1)
	} else if len(f.held) > 0 && f.rng.Float64() < 0.5 {
		// Let held datagrams overtake nothing more: release them after
		// this one.
		release = f.held
		f.held = nil
	}
	f.rngMu.Unlock()
	if drop {
		f.dropped.Add(1)
	} else if !hold {
		f.eps[to].push(item{kind: itPkt, from: from, buf: append([]byte(nil), pkt...)})
		if dup {
			f.duplicated.Add(1)
			f.eps[to].push(item{kind: itPkt, from: from, buf: append([]byte(nil), pkt...)})
		}
	}
	for _, d := range release {
		f.eps[d.to].push(item{kind: itPkt, from: d.from, buf: d.pkt})
	}
}

// ticker drives the Links' retransmission timers and releases held
// datagrams.
func (f *Fabric) ticker() {
	defer f.stopped.Done()
	t := time.NewTicker(f.opt.RTO / 4)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		for _, e := range f.eps {
			e.lmu.Lock()
			for p, l := range e.links {
				l.Tick(now)
				e.flushLocked(p)
			}
			e.lmu.Unlock()
			e.processPackets()
		}
		f.rngMu.Lock()
		release := f.held
		f.held = nil
		f.rngMu.Unlock()
		for _, d := range release {
			f.eps[d.to].push(item{kind: itPkt, from: d.from, buf: d.pkt})
		}
	}
}

// Register exposes buf to one-sided access.
func (e *Endpoint) Register(buf []byte) (transport.Region, error) {
	if e.f.opt.NoOneSided {
		return transport.Region{}, transport.ErrNotSupported
	}
	f := e.f
	f.regMu.Lock()
	defer f.regMu.Unlock()
	var i int
	if n := len(f.regFree); n > 0 {
		i = f.regFree[n-1]
		f.regFree = f.regFree[:n-1]
	} else {
		i = len(f.regions)
		f.regions = append(f.regions, region{})
	}
	f.regions[i] = region{buf: buf, live: true}
	return transport.Region{Key: uint64(i) + 1}, nil
}

// Deregister ends the exposure of r.
func (e *Endpoint) Deregister(r transport.Region) error {
	f := e.f
	f.regMu.Lock()
	defer f.regMu.Unlock()
	i := int(r.Key) - 1
	if i < 0 || i >= len(f.regions) || !f.regions[i].live {
		return transport.ErrRegion
	}
	f.regions[i] = region{}
	f.regFree = append(f.regFree, i)
	return nil
}

// access runs fn on the bytes of remote region r covering n bytes.
func (f *Fabric) access(r transport.Region, n int, fn func(mem []byte)) error {
	f.regMu.RLock()
	defer f.regMu.RUnlock()
	i := int(r.Key) - 1
	if i < 0 || i >= len(f.regions) || !f.regions[i].live {
		return transport.ErrRegion
	}
	b := f.regions[i].buf
	if r.Addr > uint64(len(b)) || uint64(n) > uint64(len(b))-r.Addr {
		return transport.ErrRegion
	}
	fn(b[r.Addr : r.Addr+uint64(n)])
	return nil
}

// Read copies from src's registered memory into local and queues the
// completion.
func (e *Endpoint) Read(src int, remote transport.Region, local [][]byte, id uint64) error {
	if e.f.opt.NoOneSided {
		return transport.ErrNotSupported
	}
	if src < 0 || src >= len(e.f.eps) {
		return transport.ErrRank
	}
	n := 0
	for _, l := range local {
		n += len(l)
	}
	err := e.f.access(remote, n, func(mem []byte) {
		for _, l := range local {
			mem = mem[copy(l, mem):]
		}
	})
	e.push(item{kind: itDone, id: id, err: err})
	return nil
}

// Write copies local into dst's registered memory and queues the
// completion.
func (e *Endpoint) Write(dst int, remote transport.Region, local [][]byte, id uint64) error {
	if e.f.opt.NoOneSided {
		return transport.ErrNotSupported
	}
	if dst < 0 || dst >= len(e.f.eps) {
		return transport.ErrRank
	}
	n := 0
	for _, l := range local {
		n += len(l)
	}
	err := e.f.access(remote, n, func(mem []byte) {
		for _, l := range local {
			mem = mem[copy(mem, l):]
		}
	})
	e.push(item{kind: itDone, id: id, err: err})
	return nil
}

// Poll hands arrived messages and completions to h.
func (e *Endpoint) Poll(h transport.Handler) int {
	if e.pending.Load() == 0 {
		return 0
	}
	if e.f.opt.Lossy {
		e.processPackets()
	}
	e.mu.Lock()
	for _, b := range e.used {
		e.putBuf(b)
	}
	e.work, e.inbox = e.inbox, e.work[:0]
	e.mu.Unlock()
	clear(e.used)
	e.used = e.used[:0]
	e.pending.Add(-int32(len(e.work)))
	n := 0
	for i := range e.work {
		it := &e.work[i]
		switch it.kind {
		case itMsg:
			h.Deliver(it.from, it.buf)
		case itDone:
			h.Complete(it.id, it.err)
		}
		n++
	}
	for i := range e.work {
		if b := e.work[i].buf; b != nil && e.work[i].kind == itMsg && !e.f.opt.Lossy {
			e.used = append(e.used, b)
		}
	}
	clear(e.work)
	e.work = e.work[:0]
	return n
}

// Wait blocks until something arrives or d passes.
func (e *Endpoint) Wait(d time.Duration) {
	if e.pending.Load() > 0 || e.closed.Load() {
		return
	}
	e.sleepers.Add(1)
	defer e.sleepers.Add(-1)
	if e.pending.Load() > 0 {
		return
	}
	t, _ := e.timers.Get().(*time.Timer)
	if t == nil {
		t = time.NewTimer(d)
	} else {
		t.Reset(d)
	}
	select {
	case <-e.notify:
	case <-t.C:
	}
	t.Stop()
	e.timers.Put(t)
}

// Close closes the endpoint: later Sends fail with transport.ErrClosed.
func (e *Endpoint) Close() error {
	e.closed.Store(true)
	select {
	case e.notify <- struct{}{}:
	default:
	}
	return nil
}
