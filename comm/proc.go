package comm

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/jiarun/jia/comm/internal/bufpool"
	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/internal/osyield"
	"github.com/jiarun/jia/internal/qlock"
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
	// SplitMin, when positive, is the size from which a one-sided
	// rendezvous between contiguous buffers is copied by both ends at
	// once, the receiver reading one half while the sender writes the
	// other (proto.Config.SplitMin); receives of that size register their
	// buffer. It can pay where one-sided operations are copies by the
	// initiating processor (shared memory) and both ranks have a
	// processor to themselves. 0 or negative: never. Every rank must use
	// the same value.
	SplitMin int
	// Spin is how many times a waiting call polls before it starts
	// yielding the processor (default 400); Yield how long it then polls
	// and yields before it blocks in the transport (default 10ms: the
	// waits of a balanced program end sooner, and a rank that waits longer
	// stops taking a processor); Sleep bounds its first block (default
	// 1ms), and each later block of the same wait may last twice as long
	// as the one before, up to 64 ms: what arrives wakes the call whatever
	// the bound, which only limits how often a long wait looks around.
	// Yielding lets the other goroutines
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

// Vector blocks smaller than minReadBlock, or more than maxReadBlocks of
// them, are packed before a one-sided rendezvous rather than read one READ
// per block; blocks smaller than
// minGatherBlock are packed rather than gathered (a gather list entry
// costs more than copying a few bytes). A one-sided rendezvous into a
// receive vector with blocks smaller than minScatterBlock reads into a
// contiguous staging buffer and scatters it (proto.Config.MinScatterBlock).
const (
	minReadBlock    = 512
	maxReadBlocks   = 128
	minGatherBlock  = 128
	minScatterBlock = 2048
)

// proc is one rank's message-passing engine: the protocol state machine,
// the transport, and the requests. Calls take mu; the waiting loop polls
// the transport with TryLock so that concurrent waiters do not queue up.
// mu is a qlock: every blocking receive takes it, and a critical section
// costs one locked instruction where sync.Mutex's costs two.
type proc struct {
	mu qlock.Mutex
	tr transport.Transport
	// short is tr's ShortSender, if it has one: eager sends then build
	// their header on the stack and take no lock of proc's.
	short transport.ShortSender
	// idler is tr's Idler, if it has one: a waiting call that finds the
	// transport idle skips the poll and mu.
	idler transport.Idler
	// take is tr's Taker, if it has one: a wait for a receive from a
	// known rank watches that rank and takes its small messages where
	// they lie (see await).
	take transport.Taker
	// reaper is tr's Reaper, if it has one: recvDirect makes progress
	// through it, which leaves its message where Take finds it.
	reaper transport.Reaper
	// batch is tr's Batcher, if it has one: non-blocking eager sends go
	// through it, and every call that waits, tests or polls flushes it.
	batch transport.Batcher
	// rbatch is tr's ReadBatcher, if it has one: the READs of a rendezvous
	// but the last are held, so that the last posts them all as one chain.
	rbatch transport.ReadBatcher
	// backlog is tr's Backlogger, if it has one: a blocking eager send
	// waits while its message's destination has a backlog.
	backlog transport.Backlogger
	// stager is tr's Stager, if it has one: large vector sends are packed
	// into its memory (stage).
	stager transport.Stager
	stage  stagePool
	// packing holds the staged sends still being packed (packStep);
	// packN counts them, read without mu by quiet.
	packing []*request
	packN   atomic.Int32
	eng     *proto.Engine
	// later paces the DATA messages of two-sided rendezvous (ModeSend):
	// per destination, the DATA actions (and the completions of their
	// sends) that wait because the transport's backlog to that rank is
	// not empty. Without it, an answer (CTS) to a large send had every
	// DATA message of the send copied into the transport's backlog at
	// once: tens of megabytes for a window of large sends. laterN counts
	// destinations with actions waiting, read without mu by quiet.
	later  [][]proto.Action
	laterN atomic.Int32
	// splitMin is the engine's Config.SplitMin (read by every receive).
	splitMin int
	caps     transport.Caps
	opt      Options
	rank     int
	size     int

	direct  directRecv // recvDirect's receive, under mu
	directs int        // receives recvDirect completed (under mu)

	hdr    [proto.MaxHeader]byte
	segs   [][]byte
	free   []*request // recycled requests for callers that hold mu
	bufs   bufpool.Pool
	fatal  error
	failed atomic.Bool

	ctxUsed [ctxWords]uint64
	host    []int // world rank → host number (from Options.Hosts); nil: unknown

	// reqs holds recycled requests for callers without mu (the requests
	// of Isend and Wait), under reqMu: a qlock costs one locked
	// instruction per get or put, where mu would cost two and a sync.Pool
	// more (its per-processor queues).
	reqMu qlock.Mutex
	reqs  []*request
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
	dirty      bool // in p.free, not cleared yet (see putReq)
	pooled     bool // taken from p.reqs without mu: goes back there
	light      bool // an eager send: only op's header was set (proto.Op.ResetHeader)
	registered bool
	staged     bool // packed is a staging buffer (getStage)
	// A staged send (proto.Op.Watch) packs vsrc into packed a chunk at a
	// time; packOff bytes are packed.
	vsrc    proto.Buf
	packOff int
	// paced: DATA actions of this send wait in p.later (its ActComplete
	// waits behind them).
	paced  int
	region transport.Region
	packed []byte
}

func reqOf(op *proto.Op) *request { return (*request)(unsafe.Pointer(op)) }

func newProc(tr transport.Transport, opt Options) (*proc, error) {
	p := &proc{tr: tr, caps: tr.Caps(), opt: opt, rank: tr.Rank(), size: tr.Size()}
	p.reqs = make([]*request, 0, 256)
	p.short, _ = tr.(transport.ShortSender)
	p.idler, _ = tr.(transport.Idler)
	p.take, _ = tr.(transport.Taker)
	p.reaper, _ = tr.(transport.Reaper)
	p.batch, _ = tr.(transport.Batcher)
	p.rbatch, _ = tr.(transport.ReadBatcher)
	p.backlog, _ = tr.(transport.Backlogger)
	p.stager, _ = tr.(transport.Stager)
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
		p.opt.Spin = 400
	}
	if p.opt.Yield <= 0 {
		p.opt.Yield = 10 * time.Millisecond
	}
	if p.opt.Sleep <= 0 {
		p.opt.Sleep = time.Millisecond
	}
	cfg := proto.Config{Ranks: p.size, Contexts: 2 * maxContexts, // ctx and cctx of every id
		MaxRead: p.caps.MaxRead, MaxSGE: p.caps.MaxSGE, MinScatterBlock: minScatterBlock}
	if err := p.eagerLimits(&cfg); err != nil {
		return nil, err
	}
	if p.caps.OneSided && !opt.TwoSided {
		cfg.Mode = proto.ModeRead
		cfg.SplitMin = max(opt.SplitMin, 0)
	} else {
		cfg.Mode = proto.ModeSend
		cfg.MaxData = 256 << 10
		if m := p.minMaxMsg(); m > 0 {
			cfg.MaxData = dataPayload(m)
		}
	}
	p.eng = proto.NewEngine(cfg)
	p.splitMin = cfg.SplitMin
	p.ctxUsed[0] = 1 // context 0 is the world's
	return p, nil
}

// dataPayload is the payload of one DATA message of a two-sided
// rendezvous when the transport's largest message is m bytes: as much as
// fits with its header in the largest power of two not above m (or in m,
// when that is small). A message the transport must keep in its backlog is
// copied into a pooled buffer of a power-of-two class: m bytes would take
// a buffer of twice the size, and the pool would keep half as many.
func dataPayload(m int) int {
	if f := floorPow2(m); f >= 4*proto.DataHeader {
		return f - proto.DataHeader
	}
	return m - proto.DataHeader
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
	p.runNow()
}

// Take offers the engine a message the transport offers where it lies
// (transport.MsgTaker): an eager message for a posted receive is taken;
// mu is held.
func (p *proc) Take(msg []byte) bool {
	if !p.eng.ReceiveEager(msg) {
		return false
	}
	p.runNow()
	return true
}

func (p *proc) Complete(id uint64, err error) {
	if e := p.eng.ReadDone(id, err); e != nil {
		p.setFatal(e)
	}
	p.runNow()
}

// run executes the engine's actions, the held ones included (every Poll
// is followed by run); mu is held.
func (p *proc) run() {
	for {
		p.runNow()
		if p.laterN.Load() != 0 {
			p.pace()
			if p.eng.Pending() > 0 {
				continue // a failed DATA failed its send
			}
		}
		if !p.eng.Held() {
			break
		}
		p.eng.Release()
	}
	if p.packN.Load() != 0 {
		p.packStep() // after the actions: an RTS first, then more to read
	}
}

// runNow executes the engine's actions but those it holds back until
// the end of a Poll (proto.Engine.Held); mu is held.
func (p *proc) runNow() {
	for p.eng.Pending() > 0 {
		acts := p.eng.TakeActions()
		for i := range acts {
			a := &acts[i]
			// A READ followed by another to the same rank is held (the
			// READs of a vector rendezvous come in a row).
			held := a.Kind == proto.ActRead && i+1 < len(acts) &&
				(acts[i+1].Kind == proto.ActRead || acts[i+1].Kind == proto.ActWatch) && acts[i+1].Peer == a.Peer
			if !p.hold(a) {
				p.exec(a, held)
			}
		}
		p.eng.Recycle(acts)
	}
}

// hold keeps a DATA action in p.later while the transport's backlog to its
// destination is not empty or earlier DATA to it wait there, and the
// completion of a send whose DATA wait, so that the send completes once
// its last DATA went out. It reports whether it kept a; mu is held.
func (p *proc) hold(a *proto.Action) bool {
	if p.backlog == nil {
		return false
	}
	var dst int
	switch {
	case a.Kind == proto.ActSend && a.Hdr.Kind == proto.KData:
		dst = a.Peer
		if len(p.later) == 0 || len(p.later[dst]) == 0 {
			if !p.backlog.Backlogged(dst) {
				return false
			}
			if p.later == nil {
				p.later = make([][]proto.Action, p.size)
			}
			p.laterN.Add(1)
		}
		r := reqOf(a.Op)
		r.paced++
	case a.Kind == proto.ActComplete && reqOf(a.Op).paced > 0:
		dst = a.Op.Dest
	default:
		return false
	}
	p.later[dst] = append(p.later[dst], *a)
	return true
}

// pace executes the actions p.later holds for each destination whose
// backlog in the transport emptied, until it fills again; mu is held.
func (p *proc) pace() {
	for dst, q := range p.later {
		if len(q) == 0 {
			continue
		}
		i := 0
		for i < len(q) && (q[i].Kind == proto.ActComplete || !p.backlog.Backlogged(dst)) {
			a := &q[i]
			if a.Kind == proto.ActSend {
				reqOf(a.Op).paced--
			}
			p.exec(a, false)
			i++
		}
		if i == 0 {
			continue
		}
		n := copy(q, q[i:])
		clear(q[n:])
		p.later[dst] = q[:n]
		if n == 0 {
			p.laterN.Add(-1)
		}
	}
}

// exec executes one action of the engine; a READ with held may stay in
// the transport until the next READ to the same rank posts it
// (transport.ReadBatcher).
func (p *proc) exec(a *proto.Action, held bool) {
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
		// A receive vector read block by block is registered whole at
		// its first READ, so that the transport reads into every block in
		// place rather than through its bounce buffer (small reads into
		// memory it does not know); ActComplete releases it. Should the
		// registration fail, each READ still finds its own way, and
		// reports its own error.
		if r := reqOf(a.Op); !r.registered && !a.Op.Buf.IsContig() {
			if reg, err := p.tr.Register(a.Op.Buf.Extent()); err == nil {
				r.region, r.registered = reg, true
				a.Op.Quiet = false
			}
		}
		segs := a.Op.Buf.Segments(a.Off, a.N, p.segs[:0])
		var err error
		if held && p.rbatch != nil {
			err = p.rbatch.ReadHeld(a.Peer, transport.Region(a.Remote), segs, a.ID)
		} else {
			err = p.tr.Read(a.Peer, transport.Region(a.Remote), segs, a.ID)
		}
		clear(segs)
		p.segs = segs[:0]
		if err != nil {
			p.eng.ReadDone(a.ID, err)
		}
	case proto.ActWatch:
		segs := append(p.segs[:0], a.Op.WatchBuf())
		err := p.tr.Read(a.Peer, transport.Region(a.Remote), segs, a.ID)
		clear(segs)
		p.segs = segs[:0]
		if err != nil {
			p.eng.ReadDone(a.ID, err)
		}
	case proto.ActWrite:
		segs := a.Op.Buf.Segments(a.Off, a.N, p.segs[:0])
		err := p.tr.Write(a.Peer, transport.Region(a.Remote), segs, a.ID)
		clear(segs)
		p.segs = segs[:0]
		if err != nil {
			if e := p.eng.ReadDone(a.ID, err); e != nil {
				p.setFatal(e)
			}
		}
	case proto.ActComplete:
		r := reqOf(a.Op)
		if r.vsrc.Count > 0 {
			p.stopPacking(r)
		}
		if r.registered {
			p.tr.Deregister(r.region)
			r.registered = false
		}
		if r.packed != nil {
			p.putPacked(r)
		}
		a.Op.SetDone()
	}
}

// drain drives progress while messages to transport rank dest wait in the
// transport's backlog (transport.Backlogger), or returns the fatal error
// that keeps them from leaving. Without a backlog it costs one atomic
// load. Blocking eager sends call it after their message, and waits on
// completed sends (an eager send completes as soon as the transport took
// the message), so that a rank streaming sends to a slower one waits for
// it instead of buffering without bound.
func (p *proc) drain(dest int) error {
	if p.backlog == nil || !p.backlog.Backlogged(dest) {
		return nil
	}
	var b backoff
	for {
		if p.failed.Load() {
			return p.fatalError()
		}
		p.progress(idleChecks)
		if !p.backlog.Backlogged(dest) {
			return nil
		}
		p.idle(&b)
	}
}

// idleChecks is how many times a waiting loop asks an idle transport
// whether it still is per round of its backoff. One: the sooner a round
// asks again, the sooner a message is noticed (with 4 checks a round, 8-
// byte ping-pong latency was 4 % higher); Options.Spin's default counts
// the rounds of about the time a spin lasted then.
const idleChecks = 1

// quiet reports that the transport said n times in a row that a poll
// would find nothing.
func (p *proc) quiet(n int) bool {
	if p.idler == nil || p.laterN.Load() != 0 || p.packN.Load() != 0 {
		return false
	}
	for range n {
		if !p.idler.Idle() {
			return false
		}
	}
	return true
}

// flush posts the messages the transport holds back (transport.Batcher).
func (p *proc) flush() {
	if p.batch != nil {
		p.batch.Flush()
	}
}

// progress polls the transport once, unless another goroutine is at it or
// the transport stays idle through checks checks.
func (p *proc) progress(checks int) {
	if p.quiet(checks) || !p.mu.TryLock() {
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
	n      int
	t0     time.Time
	sleep  bool
	nap    time.Duration // bound of the next block in the transport
	yields int
}

// yield gives the processor away once in the yielding phase. Most yields
// give it to the kernel only (sched_yield), without the Go scheduler's
// round first (runtime.Gosched): when ranks share processors that round
// cost more than the wait it spares (Allreduce and Alltoall of 8 bytes, 4
// ranks on 2 processors: 6-9 % of the call, with no more system calls). The
// program's other goroutines get their turn at every eighth yield (and
// whenever the runtime preempts the waiting one).
func (b *backoff) yield() {
	b.yields++
	if b.yields&7 == 0 {
		osyield.Yield()
	} else {
		osyield.Thread()
	}
}

// maxNap bounds one block of a waiting call in the transport (see
// Options.Sleep).
const maxNap = 64 * time.Millisecond

func (p *proc) idle(b *backoff) {
	b.n++
	switch {
	case b.n < p.opt.Spin:
	case b.t0.IsZero():
		// The first round past the spinning (which a wait that started
		// with rounds spent elsewhere may have left behind already).
		b.t0 = time.Now()
		b.yield()
	case !b.sleep:
		if b.n&15 == 0 && time.Since(b.t0) >= p.opt.Yield {
			b.sleep = true
		}
		b.yield()
	default:
		if b.nap == 0 {
			b.nap = p.opt.Sleep
		}
		p.tr.Wait(b.nap)
		b.nap = min(2*b.nap, max(maxNap, p.opt.Sleep))
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
	p.flush()
	for !r.op.Done() && r.gen.Load() == gen {
		p.progress(idleChecks)
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
//
// A wait for a receive from a rank whose messages the transport offers
// where they lie (transport.Taker) watches that rank alone, and takes its
// next message straight into the receive when it is an eager one that
// matches; it polls the transport in its first round (right after the
// caller's send, before an answer can be there: that poll collects the
// completions of earlier sends, without which the transport would soon ask
// for a completion of every send), whenever the rank sends something else,
// and once its spinning is over, every watchEvery rounds. In between,
// other ranks' messages and the completions of sends wait: a poll that
// coincides with the message waited for delays it by its whole length.
func (p *proc) await(r *request) (Status, error) {
	return p.awaitFrom(r, p.watch(r), 0)
}

// awaitFrom is await watching rank from (-1: none), as watch found;
// rounds is how many rounds of waiting the caller has spent already (at
// least 1 when it has just polled: the first round need not), so that the
// spinning does not start over.
func (p *proc) awaitFrom(r *request, from int, rounds int) (Status, error) {
	b := backoff{n: rounds}
	p.flush()
	for {
		if r.op.Done() {
			p.mu.Lock()
			break
		}
		news := from >= 0 && p.take.Arrived(from)
		look := from < 0 || b.n == 0 || b.n >= p.opt.Spin && b.n%watchEvery == 0
		if (news || look && !p.quiet(idleChecks)) && p.mu.TryLock() {
			p.step(from, news)
			if r.op.Done() {
				break
			}
			if from >= 0 && !r.op.Posted() {
				// Matched to a rendezvous: what completes it (a READ's
				// completion, say) need not come from the rank.
				from = -1
			}
			p.mu.Unlock()
		}
		if p.failed.Load() {
			return Status{}, r.fail(p.fatalError())
		}
		p.idle(&b)
	}
	st, err := r.result()
	send, dest := r.op.Kind == proto.OpSend, int(r.op.Dest)
	c, call, peer, tag := r.c, r.call, int(r.op.Peer), int(r.op.Tag)
	p.putReq(r)
	p.mu.Unlock()
	if send && err == nil {
		if e := p.drain(dest); e != nil {
			return st, c.errorf(call, peer, tag, e, "")
		}
	}
	return st, err
}

// step makes progress with mu held: with news from the watched rank from,
// it takes the rank's next message (Take); otherwise, or when what the rank
// sent is not a message Take takes, it polls the transport, unless the
// news is gone (another call took the message meanwhile) and the transport
// is idle now.
func (p *proc) step(from int, news bool) {
	if took := news && p.take.Take(from, p, 0); !took && (!news || !p.quiet(idleChecks)) {
		p.tr.Poll(p)
	}
	p.run()
}

// watchEvery is how many rounds of a wait that watches one rank pass
// between looks at the rest of the transport (see await).
const watchEvery = 16

// watch returns the transport rank a wait for r watches (see await), or
// -1: r must be a receive, still waiting for its message, from a known rank
// other than this one, whose messages the transport may offer where they
// lie. It takes no lock: the call that waits owns r, and whether r still
// waits (proto.Op.Waiting) is read atomically. (A lock here, right after
// the caller's send, would wait until the sent message has reached the
// peer's cache: 0.1-0.2 µs of an 8-byte Allreduce between two ranks.)
func (p *proc) watch(r *request) int {
	if p.take == nil || r.op.Kind != proto.OpRecv || !r.op.Waiting() || r.op.Peer < 0 || r.c == nil {
		return -1
	}
	from := r.c.WorldRank(int(r.op.Peer))
	if from == p.rank || !p.take.Takes(from) {
		return -1
	}
	return from
}

// getReq returns a cleared request; mu is held.
func (p *proc) getReq() *request {
	if n := len(p.free); n > 0 {
		r := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		if r.dirty {
			clearReq(r)
			r.dirty = false
		}
		return r
	}
	return p.takeReq()
}

// maxFree bounds free.
const maxFree = 64

// takeReq returns a cleared request without mu.
func (p *proc) takeReq() *request {
	p.reqMu.Lock()
	if n := len(p.reqs); n > 0 {
		r := p.reqs[n-1]
		p.reqs[n-1] = nil
		p.reqs = p.reqs[:n-1]
		p.reqMu.Unlock()
		return r
	}
	p.reqMu.Unlock()
	return &request{p: p}
}

// maxReqs bounds reqs; requests beyond it are left to the collector.
const maxReqs = 4096

// putReqs puts cleared requests back into reqs, under one lock.
func (p *proc) putReqs(rs ...*request) {
	p.reqMu.Lock()
	for _, r := range rs {
		if len(p.reqs) < maxReqs {
			p.reqs = append(p.reqs, r)
		}
	}
	p.reqMu.Unlock()
}

// clearReq clears r for reuse. The caller has advanced r.gen, or no
// handle names r, so that handles to the old operation are inactive.
func clearReq(r *request) {
	if r.light {
		r.op.ResetHeader()
	} else {
		r.op.Reset()
	}
	r.c = nil
	r.call = ""
	r.elem = 0
	r.pooled, r.light = false, false
}

// putReq recycles r; mu is held. No handle may name r (or its
// generation has moved on). r is cleared when it is taken again: a
// blocking receive recycles its request between the message's arrival and
// the caller's answer, and the next receive takes it back while it waits
// anyway. Only the references to the caller's memory are dropped now.
// free holds a few requests (what the blocking calls need); the others go
// back to reqs, from which Isend takes them without mu: requests taken
// there and put here must not pile up in free.
func (p *proc) putReq(r *request) {
	if r.pooled {
		p.release(r)
		return
	}
	if len(p.free) < maxFree {
		r.op.Buf, r.op.Err, r.c = proto.Buf{}, nil, nil
		r.dirty = true
		p.free = append(p.free, r)
		return
	}
	clearReq(r)
	p.putReqs(r)
}

// release recycles r without mu.
func (p *proc) release(r *request) {
	clearReq(r)
	p.putReqs(r)
}

// releaser recycles the requests a call completes in groups, so that the
// group takes reqMu once (see release).
type releaser struct {
	p *proc
	n int
	r [16]*request
}

// add recycles r (as release does) with the group.
func (l *releaser) add(r *request) {
	if l.n > 0 && r.p != l.p || l.n == len(l.r) {
		l.flush()
	}
	clearReq(r)
	l.p = r.p
	l.r[l.n] = r
	l.n++
}

// flush puts the group back.
func (l *releaser) flush() {
	if l.n == 0 {
		return
	}
	l.p.putReqs(l.r[:l.n]...)
	clear(l.r[:l.n])
	l.n = 0
}

// getBuf returns a scratch buffer of n bytes for packing; mu is held.
func (p *proc) getBuf(n int) []byte { return p.bufs.Get(n) }

// putBuf gives a buffer from getBuf back; mu is held.
func (p *proc) putBuf(b []byte) { p.bufs.Put(b) }

// putPacked gives back the buffer r's blocks were packed into; mu is
// held.
func (p *proc) putPacked(r *request) {
	if r.staged {
		p.putStage(r.packed)
	} else {
		p.putBuf(r.packed)
	}
	r.packed, r.staged = nil, false
}

// startSend hands send request r to the engine; mu is held.
func (p *proc) startSend(r *request) error {
	if p.fatal != nil {
		return p.fatal
	}
	op := &r.op
	n := op.Buf.Len()
	cfg := p.eng.Config()
	rdv := p.eng.Rendezvous(op.Dest, n)
	if rdv && cfg.Mode == proto.ModeRead && !op.Buf.IsContig() && n >= stagedMin {
		if b := p.getStage(op.Dest, n); b != nil {
			return p.startStaged(r, b[:stageHdr+n])
		}
	}
	if !op.Buf.IsContig() && n > 0 {
		pack := p.opt.PackVectors
		if rdv && cfg.Mode == proto.ModeRead {
			// The receiver reads the blocks one READ each (in one chain
			// where the transport batches READs): small blocks cost more
			// READs than a copy, and past maxReadBlocks the READs would
			// wait for each other in the transport's send queue.
			if op.Buf.Block < minReadBlock || op.Buf.Count > maxReadBlocks {
				pack = true
			}
		} else if p.caps.MaxSGE > 0 && op.Buf.Count > p.caps.MaxSGE {
			pack = true // more blocks than a gather list takes
		}
		if op.Buf.Block < minGatherBlock {
			pack = true
		}
		if pack {
			var b []byte
			if rdv && cfg.Mode == proto.ModeRead {
				b = p.getStage(op.Dest, n)
				r.staged = b != nil
			}
			if b == nil {
				b = p.getBuf(n)
			}
			op.Buf.Gather(0, b)
			op.Buf = proto.Contig(b)
			r.packed = b
		}
	}
	if rdv && cfg.Mode == proto.ModeRead {
		reg, err := p.tr.Register(op.Buf.Extent())
		if err != nil {
			if r.packed != nil {
				p.putPacked(r)
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
	op := &r.op
	if m := p.splitMin; m > 0 && op.Buf.IsContig() && len(op.Buf.B) >= m {
		// The sender may write part of a rendezvous message into it.
		reg, err := p.tr.Register(op.Buf.B)
		if err != nil {
			return err
		}
		r.region, r.registered = reg, true
		op.Region = proto.Region(reg)
		op.Quiet = false // ActComplete releases the region
	}
	p.eng.Recv(op)
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
