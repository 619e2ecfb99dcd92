package comm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/jiarun/jia/comm/internal/bufpool"
	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/internal/osyield"
)

// Options tune a rank's message passing. The zero value takes every
// default.
type Options struct {
	// EagerLimit is the largest message, in bytes, sent eagerly to any
	// rank; larger ones use the rendezvous protocol. 0 means the
	// transport's preference for the path to each rank
	// (Caps.PeerEagerLimit, else Caps.EagerLimit), or 16 KiB. Every rank
	// must use the same value.
	EagerLimit int
	// TwoSided makes rendezvous messages travel as DATA messages after a
	// clear-to-send even when the transport offers one-sided READ.
	TwoSided bool
	// PackVectors makes vector sends pack the blocks into a contiguous
	// buffer first, instead of gathering them straight from user memory.
	PackVectors bool
	// Spin is how many times a waiting call polls before it starts
	// yielding the processor (default 100); Yield how long it then polls
	// and yields before it blocks in the transport (default 1ms); Sleep
	// bounds one block (default 1ms). Yielding lets the other goroutines
	// run and then asks the kernel to run another thread or process
	// (sched_yield): when ranks outnumber processors, Spin 1 with a Yield
	// of a few milliseconds hands the processor to the rank being waited
	// for after one poll, as Open MPI's mpi_yield_when_idle does.
	Spin  int
	Yield time.Duration
	Sleep time.Duration
	// Hosts names the host of every rank of the world (len Size), so that
	// collectives can work within each host first, through shared memory,
	// and only then between hosts (one leader per host). Ranks with equal
	// names share a host. nil means no host information: every algorithm
	// is flat. Every rank must pass the same list.
	Hosts []string
}

// Vector blocks smaller than minReadBlock are packed before a one-sided
// rendezvous rather than read one READ per block; blocks smaller than
// minGatherBlock are packed rather than gathered (a gather list entry
// costs more than copying a few bytes).
const (
	minReadBlock   = 512
	minGatherBlock = 128
)

// proc is one rank's message-passing engine: the protocol state machine,
// the transport, and the requests. Calls take mu; the waiting loop polls
// the transport with TryLock so that concurrent waiters do not queue up.
type proc struct {
	mu sync.Mutex
	tr transport.Transport
	// short is tr's ShortSender, if it has one: eager sends then build
	// their header on the stack and take no lock of proc's.
	short transport.ShortSender
	eng   *proto.Engine
	caps  transport.Caps
	opt   Options
	rank  int
	size  int

	hdr    [proto.MaxHeader]byte
	segs   [][]byte
	free   []*request
	bufs   bufpool.Pool
	fatal  error
	failed atomic.Bool

	ctxUsed [ctxWords]uint64
	host    []int // world rank → host number (from Options.Hosts); nil: unknown

	// spare holds recycled requests without taking mu (the common case:
	// a few requests in flight).
	spare [4]atomic.Pointer[request]
}

// request is a pooled send or receive. op must stay the first field:
// actions name ops, and reqOf recovers the request from one.
type request struct {
	op  proto.Op
	gen atomic.Uint32
	// p is the rank's engine, set when the request is made and never
	// changed: a handle that raced with another goroutine's completion
	// report (and the recycling of the request) reaches it through p, as
	// c may be cleared or reassigned meanwhile.
	p          *proc
	c          *Comm
	call       string
	elem       int
	registered bool
	region     transport.Region
	packed     []byte
}

func reqOf(op *proto.Op) *request { return (*request)(unsafe.Pointer(op)) }

func newProc(tr transport.Transport, opt Options) (*proc, error) {
	p := &proc{tr: tr, caps: tr.Caps(), opt: opt, rank: tr.Rank(), size: tr.Size()}
	p.short, _ = tr.(transport.ShortSender)
	if opt.Hosts != nil {
		if len(opt.Hosts) != p.size {
			return nil, fmt.Errorf("comm: Options.Hosts names %d hosts for %d ranks", len(opt.Hosts), p.size)
		}
		ids := make(map[string]int)
		p.host = make([]int, p.size)
		for r, h := range opt.Hosts {
			id, ok := ids[h]
			if !ok {
				id = len(ids)
				ids[h] = id
			}
			p.host[r] = id
		}
	}
	if p.opt.Spin <= 0 {
		p.opt.Spin = 100
	}
	if p.opt.Yield <= 0 {
		p.opt.Yield = time.Millisecond
	}
	if p.opt.Sleep <= 0 {
		p.opt.Sleep = time.Millisecond
	}
	cfg := proto.Config{MaxRead: p.caps.MaxRead, MaxSGE: p.caps.MaxSGE}
	if err := p.eagerLimits(&cfg); err != nil {
		return nil, err
	}
	if p.caps.OneSided && !opt.TwoSided {
		cfg.Mode = proto.ModeRead
	} else {
		cfg.Mode = proto.ModeSend
		cfg.MaxData = 256 << 10
		if m := p.minMaxMsg(); m > 0 {
			cfg.MaxData = m - proto.DataHeader
		}
	}
	p.eng = proto.NewEngine(cfg)
	p.ctxUsed[0] = 1 // context 0 is the world's
	return p, nil
}

// maxMsgTo returns the largest message the transport takes to rank r; 0
// means no limit.
func (p *proc) maxMsgTo(r int) int {
	if r < len(p.caps.PeerMaxMsg) && p.caps.PeerMaxMsg[r] > 0 {
		return p.caps.PeerMaxMsg[r]
	}
	return p.caps.MaxMsg
}

// minMaxMsg returns the smallest message limit to any rank; 0 means no
// limit.
func (p *proc) minMaxMsg() int {
	m := 0
	for r := 0; r < p.size; r++ {
		if l := p.maxMsgTo(r); l > 0 && (m == 0 || l < m) {
			m = l
		}
	}
	return m
}

// eagerLimits sets the eager limit to each rank in cfg: Options.EagerLimit
// for every rank if set, else the transport's preference for the path to
// the rank (Caps.PeerEagerLimit, Caps.EagerLimit, or 16 KiB), in any case
// leaving room for the header in the largest message to the rank.
func (p *proc) eagerLimits(cfg *proto.Config) error {
	def := p.caps.EagerLimit
	if def <= 0 {
		def = 16 << 10
	}
	limits := make([]int, p.size)
	same := true
	for r := range limits {
		l := p.opt.EagerLimit
		if l <= 0 {
			l = def
			if r < len(p.caps.PeerEagerLimit) && p.caps.PeerEagerLimit[r] > 0 {
				l = p.caps.PeerEagerLimit[r]
			}
		}
		if m := p.maxMsgTo(r); m > 0 {
			if room := m - proto.EagerHeader; l > room {
				l = room
			}
			if l < 0 {
				return fmt.Errorf("comm: transport %s: MaxMsg %d to rank %d leaves no room for a header", p.caps.Name, m, r)
			}
		}
		limits[r] = l
		same = same && l == limits[0]
	}
	cfg.EagerLimit = limits[p.rank]
	if !same {
		cfg.EagerLimits = limits
	}
	return nil
}

// Deliver and Complete make proc the transport's Handler; they run inside
// Poll with mu held.

func (p *proc) Deliver(src int, msg []byte) {
	if err := p.eng.Receive(src, msg); err != nil {
		p.setFatal(err)
	}
	p.run()
}

func (p *proc) Complete(id uint64, err error) {
	if e := p.eng.ReadDone(id, err); e != nil {
		p.setFatal(e)
	}
	p.run()
}

// run executes the engine's actions; mu is held.
func (p *proc) run() {
	for p.eng.Pending() > 0 {
		acts := p.eng.TakeActions()
		for i := range acts {
			p.exec(&acts[i])
		}
		p.eng.Recycle(acts)
	}
}

func (p *proc) exec(a *proto.Action) {
	switch a.Kind {
	case proto.ActSend:
		n := proto.Encode(p.hdr[:], &a.Hdr)
		segs := p.segs[:0]
		if a.N > 0 {
			segs = a.Op.Buf.Segments(a.Off, a.N, segs)
		}
		err := p.tr.Send(a.Peer, p.hdr[:n], segs)
		clear(segs)
		p.segs = segs[:0]
		if err != nil {
			if a.Op != nil {
				p.eng.Fail(a.Op, err)
			} else {
				p.setFatal(err)
			}
		}
	case proto.ActRead:
		segs := a.Op.Buf.Segments(a.Off, a.N, p.segs[:0])
		err := p.tr.Read(a.Peer, transport.Region(a.Remote), segs, a.ID)
		clear(segs)
		p.segs = segs[:0]
		if err != nil {
			p.eng.ReadDone(a.ID, err)
		}
	case proto.ActComplete:
		r := reqOf(a.Op)
		if r.registered {
			p.tr.Deregister(r.region)
			r.registered = false
		}
		if r.packed != nil {
			p.putBuf(r.packed)
			r.packed = nil
		}
		a.Op.SetDone()
	}
}

// progress polls the transport once, unless another goroutine is at it.
func (p *proc) progress() {
	if !p.mu.TryLock() {
		return
	}
	p.tr.Poll(p)
	p.run()
	p.mu.Unlock()
}

// backoff is the adaptive wait: spin, then yield the processor (to
// goroutines and to the kernel's other threads), then block in the
// transport. The clock is read once when the yielding starts and then every
// 16 yields, never while spinning.
type backoff struct {
	n     int
	t0    time.Time
	sleep bool
}

func (p *proc) idle(b *backoff) {
	b.n++
	switch {
	case b.n < p.opt.Spin:
	case b.n == p.opt.Spin:
		b.t0 = time.Now()
		osyield.Yield()
	case !b.sleep:
		if b.n&15 == 0 && time.Since(b.t0) >= p.opt.Yield {
			b.sleep = true
		}
		osyield.Yield()
	default:
		p.tr.Wait(p.opt.Sleep)
	}
}

// setFatal records an error that breaks the rank's message passing (a
// malformed message, a failed control send); mu is held.
func (p *proc) setFatal(err error) {
	if p.fatal == nil {
		p.fatal = err
		p.failed.Store(true)
	}
}

func (p *proc) fatalError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fatal
}

// wait drives progress until r completes (or another caller has reported
// its completion: r.gen moved on from gen), or returns the fatal error that
// keeps it from completing.
func (p *proc) wait(r *request, gen uint32) error {
	var b backoff
	for !r.op.Done() && r.gen.Load() == gen {
		p.progress()
		if r.op.Done() {
			break
		}
		if p.failed.Load() {
			return p.fatalError()
		}
		p.idle(&b)
	}
	return nil
}

// await drives progress until r completes, recycles r and returns its
// outcome, or returns the fatal error that keeps r from completing. r must
// be the caller's own: a request no Request handle names (the blocking
// calls' and the collectives'), so that no generation needs to move on and
// the request goes straight back to the pool, under the lock the last poll
// took.
func (p *proc) await(r *request) (Status, error) {
	var b backoff
	for {
		if r.op.Done() {
			p.mu.Lock()
			break
		}
		if p.mu.TryLock() {
			p.tr.Poll(p)
			p.run()
			if r.op.Done() {
				break
			}
			p.mu.Unlock()
		}
		if p.failed.Load() {
			return Status{}, r.fail(p.fatalError())
		}
		p.idle(&b)
	}
	st, err := r.result()
	p.putReq(r)
	p.mu.Unlock()
	return st, err
}

// getReq returns a cleared request; mu is held.
func (p *proc) getReq() *request {
	for i := range p.spare {
		// A load first: an empty slot costs no locked instruction.
		if p.spare[i].Load() != nil {
			if r := p.spare[i].Swap(nil); r != nil {
				return r
			}
		}
	}
	if n := len(p.free); n > 0 {
		r := p.free[n-1]
		p.free = p.free[:n-1]
		return r
	}
	return &request{p: p}
}

// putReq recycles r; mu is held. The caller has advanced r.gen, so that
// handles to the old operation are inactive.
func (p *proc) putReq(r *request) {
	r.op.Reset()
	r.c = nil
	r.call = ""
	r.elem = 0
	if len(p.free) < 1024 {
		p.free = append(p.free, r)
	}
}

// release recycles r without mu if a spare slot is free.
func (p *proc) release(r *request) {
	r.op.Reset()
	r.c = nil
	r.call = ""
	r.elem = 0
	for i := range p.spare {
		if p.spare[i].Load() == nil && p.spare[i].CompareAndSwap(nil, r) {
			return
		}
	}
	p.mu.Lock()
	p.putReq(r)
	p.mu.Unlock()
}

// getBuf returns a scratch buffer of n bytes for packing; mu is held.
func (p *proc) getBuf(n int) []byte { return p.bufs.Get(n) }

// putBuf gives a buffer from getBuf back; mu is held.
func (p *proc) putBuf(b []byte) { p.bufs.Put(b) }

// startSend hands send request r to the engine; mu is held.
func (p *proc) startSend(r *request) error {
	if p.fatal != nil {
		return p.fatal
	}
	op := &r.op
	n := op.Buf.Len()
	cfg := p.eng.Config()
	rdv := p.eng.Rendezvous(op.Dest, n)
	if !op.Buf.IsContig() && n > 0 {
		pack := p.opt.PackVectors
		if p.caps.MaxSGE > 0 && op.Buf.Count > p.caps.MaxSGE {
			pack = true
		}
		if rdv && cfg.Mode == proto.ModeRead && op.Buf.Block < minReadBlock {
			pack = true
		}
		if op.Buf.Block < minGatherBlock {
			pack = true
		}
		if pack {
			b := p.getBuf(n)
			op.Buf.Gather(0, b)
			op.Buf = proto.Contig(b)
			r.packed = b
		}
	}
	if rdv && cfg.Mode == proto.ModeRead {
		reg, err := p.tr.Register(op.Buf.Extent())
		if err != nil {
			if r.packed != nil {
				p.putBuf(r.packed)
				r.packed = nil
			}
			return err
		}
		r.region, r.registered = reg, true
		op.Region = proto.Region(reg)
	}
	p.eng.Send(op)
	p.run()
	return nil
}

// startRecv hands receive request r to the engine; mu is held.
func (p *proc) startRecv(r *request) error {
	if p.fatal != nil {
		return p.fatal
	}
	p.eng.Recv(&r.op)
	p.run()
	return nil
}

// Context ids: a bitmap of the ids in use on this rank. A new
// communicator's id is the lowest one free on every member (an Allreduce
// with BAnd over the parent, as MPICH does), so all members agree without
// a coordinator. Communicators made by one Split share the id: their
// member sets are disjoint.
const (
	maxContexts = 2048
	ctxWords    = maxContexts / 64
)
