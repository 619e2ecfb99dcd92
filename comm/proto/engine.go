package proto

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/jiarun/jia/comm/match"
	"github.com/jiarun/jia/internal/qlock"
)

// Mode is how the payload of a rendezvous message moves.
type Mode uint8

const (
	// ModeRead: the sender exposes its buffer in the RTS and the receiver
	// reads the message with one-sided READs straight into the receive
	// buffer (zero copy), then sends FIN.
	ModeRead Mode = iota
	// ModeSend: the receiver answers the RTS with CTS and the sender sends
	// the message as DATA messages of at most Config.MaxData bytes. For
	// transports without one-sided operations.
	ModeSend
)

// String returns "read" or "send".
func (m Mode) String() string {
	if m == ModeRead {
		return "read"
	}
	return "send"
}

// Config are the protocol parameters. Every rank of a job must use the same
// Mode. The eager limit may differ between destinations (each path's
// provider has its own); the receiver accepts eager messages of any size its
// transport delivers.
type Config struct {
	// Ranks and Contexts, when positive, bound the sources (ranks of a
	// communicator, at most the job's ranks) and the contexts a message's
	// envelope may name: a message beyond them is malformed, not queued
	// (the match engine would grow its tables to fit it).
	Ranks, Contexts int
	// EagerLimit is the largest message, in bytes, sent eagerly.
	EagerLimit int
	// EagerLimits, when non-nil, holds the eager limit to each transport
	// rank, overriding EagerLimit for that destination; negative entries
	// mean EagerLimit.
	EagerLimits []int
	// Mode is the rendezvous mode.
	Mode Mode
	// MaxData is the largest DATA payload (ModeSend). It must be positive
	// in ModeSend.
	MaxData int
	// MaxRead is the largest single READ; 0 means no limit.
	MaxRead int
	// MaxSGE bounds the local scatter list of one READ; 0 means no limit.
	MaxSGE int
	// MinScatterBlock: a one-sided rendezvous into a receive vector whose
	// blocks are shorter than this many bytes READs the message into a
	// contiguous staging buffer in large pieces and scatters it into the
	// blocks when the READs are done, instead of READing into the blocks
	// (at most MaxSGE blocks per READ); 0 means never.
	MinScatterBlock int
	// SplitMin: a one-sided rendezvous of at least SplitMin bytes into a
	// contiguous receive whose memory the caller registered (Op.Region of
	// the receive) is copied by both ends: the receiver READs the first
	// half and asks the sender (KPut) to WRITE the second half meanwhile.
	// Worth it where one-sided operations are copies by the initiating
	// processor (shared memory): two processors copy instead of one. Not
	// done while the receiver has a rendezvous send of its own to the
	// sender outstanding (an exchange, as in Sendrecv): the sender is then
	// busy reading that message, and both processors copy already. 0 means
	// never.
	SplitMin int
}

// Region is memory a peer exposes for one-sided access: a key and the
// address of the first byte in the key's address space.
type Region struct {
	Key, Addr uint64
}

// Status describes a completed receive or a probed message.
type Status struct {
	// Source and Tag are the message's envelope.
	Source, Tag int32
	// Len is the number of bytes delivered into the receive buffer, MsgLen
	// the length of the message; they differ only when the message was
	// truncated.
	Len, MsgLen int
}

// Errors an operation completes with.
var (
	// ErrTruncate: the message was longer than the receive buffer. The
	// bytes that fit were delivered.
	ErrTruncate = errors.New("message truncated")
	// ErrCanceled: the receive was canceled before it matched.
	ErrCanceled = errors.New("operation canceled")
)

// OpKind tells sends from receives.
type OpKind uint8

// Operation kinds.
const (
	OpSend OpKind = iota + 1
	OpRecv
)

type opState uint8

const (
	stIdle     opState = iota
	stPosted           // receive in the posted queue
	stSendWait         // RTS sent, waiting for CTS or FIN
	stRecvRead         // READs outstanding
	stRecvData         // CTS sent, DATA outstanding
	stSendPut          // PUT received: WRITE and FIN outstanding
	stDone
)

// Op is one send or receive. The caller fills the input fields, passes it
// to Engine.Send or Engine.Recv and must not touch it again until the
// engine emits ActComplete for it. Ops are reusable after Reset.
type Op struct {
	// Kind is set by Send and Recv.
	Kind OpKind
	// Ctx is the communication context.
	Ctx uint32
	// Rank is the sender's rank in the communicator (sends: put into the
	// envelope).
	Rank int32
	// Peer is the destination rank (sends) or the source rank or AnySource
	// (receives), in the communicator.
	Peer int32
	// Tag is the tag (sends) or the tag or AnyTag (receives).
	Tag int32
	// Dest is the transport rank of the destination (sends).
	Dest int
	// Buf is the message memory.
	Buf Buf
	// Region exposes Buf.Extent() to the receiver of a rendezvous send in
	// ModeRead (set by the caller when Engine.Rendezvous says so). On a
	// contiguous receive of at least Config.SplitMin bytes it may expose
	// Buf to the sender, which then writes part of a rendezvous message
	// (the caller releases it at ActComplete; such a receive must not be
	// Quiet).
	Region Region
	// Watch, when not zero, makes a contiguous rendezvous send in ModeRead
	// a staged one (RTSS): the caller is still packing the message into
	// Buf, and Watch is the address, in Region's address space, of the
	// watermark it keeps there (a little-endian uint64, the count of bytes
	// of Buf packed, which only grows); Ready is the count when Send is
	// called. The receiver reads what is packed and the watermark again
	// until it has the message.
	Watch uint64
	Ready int
	// Quiet makes a receive complete without ActComplete: the engine calls
	// SetDone itself as soon as the receive is complete. For receives the
	// caller attached nothing to release; it saves an action per message.
	// (Sends ignore it: actions emitted before a send completes may still
	// read its buffer.)
	Quiet bool

	// Status is the outcome of a receive.
	Status Status
	// Err is nil, ErrTruncate, ErrCanceled or an error the caller passed to
	// Fail or ReadDone.
	Err error

	state   opState
	id      uint64
	from    int    // receives: transport rank of the sender
	sid     uint64 // receives: the sender's operation id; split sends: the receiver's
	pending int    // READs outstanding, DATA bytes missing, or WRITE and FIN of a split send
	putWait bool   // split receives: the sender's WFIN is outstanding
	stage   []byte // receives: contiguous staging of a vector's READs
	vbuf    Buf    // receives: the vector Buf while Buf is the staging
	// Receives of a staged message (RTSS): the sender's data and
	// watermark, the bytes wanted (Status.Len), the bytes whose READs were
	// issued, and the watermark as last read.
	src, watch Region
	next       int
	scat       int // bytes of stage already scattered into vbuf
	wm         [8]byte
	staged     bool
	done       atomic.Uint32
	// posted mirrors state == stPosted for readers without the Engine's
	// lock (Waiting).
	posted atomic.Uint32
}

// WatchBuf is the memory an ActWatch reads the sender's watermark into.
func (op *Op) WatchBuf() []byte { return op.wm[:] }

// Reset clears op for reuse. Concurrent observers of Done see it turn
// false atomically (a release store: observers must learn of the reuse
// through a later synchronizing operation, as comm's request generations
// provide).
func (op *Op) Reset() {
	if op.done.Load() != 0 {
		qlock.StoreRelease(&op.done, 0)
	}
	if op.posted.Load() != 0 {
		qlock.StoreRelease(&op.posted, 0)
	}
	op.Kind, op.Ctx, op.Rank, op.Peer, op.Tag, op.Dest = 0, 0, 0, 0, 0, 0
	op.Buf, op.Region, op.Status, op.Err, op.Quiet = Buf{}, Region{}, Status{}, nil, false
	op.state, op.id, op.from, op.sid, op.pending = stIdle, 0, 0, 0, 0
	op.stage, op.vbuf, op.putWait = nil, Buf{}, false
	op.Watch, op.Ready, op.src, op.watch, op.next, op.wm, op.staged = 0, 0, Region{}, Region{}, 0, [8]byte{}, false
	op.scat = 0
}

// ResetHeader is Reset for an op of which only Kind, Ctx, Rank, Peer, Tag
// and Dest were set since the last Reset, and SetDone called (comm's
// eager sends, complete once started): it stores to those words alone,
// not to the six cache lines of a whole Op.
func (op *Op) ResetHeader() {
	if op.done.Load() != 0 {
		qlock.StoreRelease(&op.done, 0)
	}
	op.Kind, op.Ctx, op.Rank, op.Peer, op.Tag, op.Dest = 0, 0, 0, 0, 0, 0
}

// Posted reports whether op is a receive waiting in the posted queue for
// its message (the caller holds the lock that guards the Engine).
func (op *Op) Posted() bool { return op.state == stPosted }

// Waiting is Posted for a caller without the Engine's lock (safe for
// concurrent use): the answer may be stale by the time it is used.
func (op *Op) Waiting() bool { return op.posted.Load() != 0 }

// setState moves op to state s, keeping posted in step (a plain store on
// processors that keep stores in order, and only when it changes).
func (op *Op) setState(s opState) {
	if (op.state == stPosted) != (s == stPosted) {
		v := uint32(0)
		if s == stPosted {
			v = 1
		}
		qlock.StoreRelease(&op.posted, v)
	}
	op.state = s
}

// Done reports whether SetDone was called (safe for concurrent use).
func (op *Op) Done() bool { return op.done.Load() != 0 }

// SetDone marks op complete for concurrent observers; the caller does it
// when executing ActComplete, after its own clean-up. It is a release
// store: an observer that sees Done also sees every write before it.
func (op *Op) SetDone() { qlock.StoreRelease(&op.done, 1) }

// ID returns the operation id of a rendezvous in progress (used in
// ActRead), for tests.
func (op *Op) ID() uint64 { return op.id }

// ActKind is the type of an action.
type ActKind uint8

// Actions.
const (
	// ActSend: send Hdr to transport rank Peer, followed (eager and DATA)
	// by packed bytes [Off, Off+N) of Op.Buf. Op is nil for control
	// messages without payload.
	ActSend ActKind = iota + 1
	// ActRead: read N bytes from rank Peer's Remote into packed bytes
	// [Off, Off+N) of Op.Buf, then call Engine.ReadDone(ID, err).
	ActRead
	// ActComplete: Op is complete (its Status and Err are final). Release
	// anything the caller attached (such as Op.Region) and call SetDone.
	ActComplete
	// ActWrite: write packed bytes [Off, Off+N) of Op.Buf into rank Peer's
	// Remote, then call Engine.ReadDone(ID, err).
	ActWrite
	// ActWatch: read the 8 bytes of rank Peer's Remote (a staged sender's
	// watermark) into Op.WatchBuf(), then call Engine.ReadDone(ID, err).
	// It follows the READs of the same receive to the same rank, and
	// must complete after them.
	ActWatch
)

// String names the action kind.
func (k ActKind) String() string {
	switch k {
	case ActSend:
		return "send"
	case ActRead:
		return "read"
	case ActComplete:
		return "complete"
	case ActWrite:
		return "write"
	case ActWatch:
		return "watch"
	}
	return fmt.Sprintf("ActKind(%d)", uint8(k))
}

// Action is one step the caller must take.
type Action struct {
	Kind   ActKind
	Peer   int
	Op     *Op
	Hdr    Header
	Off, N int
	Remote Region
	ID     uint64
}

// String describes the action, for tests and debugging.
func (a Action) String() string {
	switch a.Kind {
	case ActSend:
		return fmt.Sprintf("send %v to %d (%d bytes at %d)", a.Hdr.Kind, a.Peer, a.N, a.Off)
	case ActRead:
		return fmt.Sprintf("read %d bytes from %d key %d addr %d into %d", a.N, a.Peer, a.Remote.Key, a.Remote.Addr, a.Off)
	case ActComplete:
		return fmt.Sprintf("complete (%v)", a.Op.Err)
	case ActWrite:
		return fmt.Sprintf("write %d bytes at %d to %d key %d addr %d", a.N, a.Off, a.Peer, a.Remote.Key, a.Remote.Addr)
	case ActWatch:
		return fmt.Sprintf("watch %d key %d addr %d", a.Peer, a.Remote.Key, a.Remote.Addr)
	}
	return a.Kind.String()
}

// unexp is an unexpected message: an eager payload copy or an RTS.
type unexp struct {
	h     Header
	from  int
	data  []byte
	eager bool
	next  *unexp
}

// Engine is the point-to-point protocol of one rank as a state machine:
// events come in through Send, Recv, Receive, ReadDone and Fail; the
// actions to take come out through TakeActions. It does no I/O, starts no
// goroutines and is not safe for concurrent use.
type Engine struct {
	cfg   Config
	m     match.Engine[*Op, *unexp]
	slots []*Op
	gens  []uint32
	free  []uint32
	acts  []Action
	later []Action // READs of split receives, until Release
	// rdvTo[p] counts the rendezvous sends to transport rank p waiting
	// for the receiver (stSendWait), with SplitMin > 0.
	rdvTo []int32
	spare []Action
	uFree *unexp
	bufs  [48][][]byte
	h     Header
}

// NewEngine returns an engine with configuration cfg.
func NewEngine(cfg Config) *Engine {
	if cfg.Mode == ModeSend && cfg.MaxData <= 0 {
		panic("proto: ModeSend needs MaxData > 0")
	}
	return &Engine{cfg: cfg}
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// EagerLimit returns the eager limit to transport rank dst.
func (e *Engine) EagerLimit(dst int) int {
	if uint(dst) < uint(len(e.cfg.EagerLimits)) {
		if l := e.cfg.EagerLimits[dst]; l >= 0 {
			return l
		}
	}
	return e.cfg.EagerLimit
}

// Rendezvous reports whether a message of n bytes to transport rank dst
// goes by rendezvous. In ModeRead the caller must then set Op.Region
// before Send.
func (e *Engine) Rendezvous(dst, n int) bool { return n > e.EagerLimit(dst) }

// TakeActions returns the actions emitted since the last call. The caller
// executes them in order and hands the slice back with Recycle. Executing
// an action may call back into the engine, which then emits new actions
// for the next TakeActions.
func (e *Engine) TakeActions() []Action {
	a := e.acts
	e.acts = e.spare
	e.spare = nil
	return a
}

// Recycle returns a slice from TakeActions for reuse.
func (e *Engine) Recycle(a []Action) {
	clear(a)
	if e.spare == nil || cap(a) > cap(e.spare) {
		e.spare = a[:0]
	}
}

// Pending returns the number of queued actions.
func (e *Engine) Pending() int { return len(e.acts) }

// Held reports whether actions are held back for Release: the READs of
// split receives (see Config.SplitMin). They wait so that the receiver's
// requests (KPut) for every message that arrived in one batch go out
// before its first READ: where one-sided operations wait for the SENDs
// posted before them, the sender then starts writing all its parts while
// the receiver reads.
func (e *Engine) Held() bool { return len(e.later) > 0 }

// Release queues the held actions (for the next TakeActions). The caller
// releases them once it has handed the engine every message it had.
func (e *Engine) Release() {
	e.acts = append(e.acts, e.later...)
	clear(e.later)
	e.later = e.later[:0]
}

func (e *Engine) emit(a Action) { e.acts = append(e.acts, a) }

func (e *Engine) hold(a Action) { e.later = append(e.later, a) }

func (e *Engine) complete(op *Op, err error) {
	if err == nil && op.Kind == OpRecv && op.Status.MsgLen > op.Status.Len {
		err = ErrTruncate
	}
	if op.Err == nil {
		op.Err = err
	}
	op.setState(stDone)
	if op.Quiet && op.Kind == OpRecv {
		op.SetDone()
		return
	}
	e.acts = append(e.acts, Action{Kind: ActComplete, Op: op})
}

// slot table of operations in a rendezvous: id = generation<<32 | index.

func (e *Engine) alloc(op *Op) uint64 {
	var i uint32
	if n := len(e.free); n > 0 {
		i = e.free[n-1]
		e.free = e.free[:n-1]
	} else {
		i = uint32(len(e.slots))
		e.slots = append(e.slots, nil)
		e.gens = append(e.gens, 1)
	}
	e.slots[i] = op
	op.id = uint64(e.gens[i])<<32 | uint64(i)
	return op.id
}

func (e *Engine) lookup(id uint64) *Op {
	i := uint32(id)
	if int(i) >= len(e.slots) || e.gens[i] != uint32(id>>32) {
		return nil
	}
	return e.slots[i]
}

func (e *Engine) release(op *Op) {
	if op.id == 0 {
		return
	}
	i := uint32(op.id)
	e.slots[i] = nil
	e.gens[i]++
	e.free = append(e.free, i)
	op.id = 0
}

// InFlight returns the number of operations in a rendezvous.
func (e *Engine) InFlight() int { return len(e.slots) - len(e.free) }

// eager payload buffers by power-of-two size class.

func (e *Engine) getBuf(n int) []byte {
	if n == 0 {
		return nil
	}
	c := bits.Len(uint(n - 1))
	if c < len(e.bufs) {
		if l := len(e.bufs[c]); l > 0 {
			b := e.bufs[c][l-1]
			e.bufs[c] = e.bufs[c][:l-1]
			return b[:n]
		}
		return make([]byte, n, 1<<c)
	}
	return make([]byte, n)
}

func (e *Engine) putBuf(b []byte) {
	if cap(b) == 0 {
		return
	}
	c := bits.Len(uint(cap(b) - 1))
	if c < len(e.bufs) && 1<<c == cap(b) && len(e.bufs[c]) < min(64, max(2, (8<<20)>>c)) {
		e.bufs[c] = append(e.bufs[c], b[:0])
	}
}

func (e *Engine) newUnexp() *unexp {
	if u := e.uFree; u != nil {
		e.uFree = u.next
		u.next = nil
		return u
	}
	return new(unexp)
}

func (e *Engine) putUnexp(u *unexp) {
	e.putBuf(u.data)
	*u = unexp{next: e.uFree}
	e.uFree = u
}

// Send starts op as a send: the caller has set Ctx, Rank, Peer, Tag, Dest,
// Buf and, for a ModeRead rendezvous, Region.
func (e *Engine) Send(op *Op) {
	op.Kind = OpSend
	n := op.Buf.Len()
	if n <= e.EagerLimit(op.Dest) {
		e.emit(Action{Kind: ActSend, Peer: op.Dest, Op: op, N: n,
			Hdr: Header{Kind: KEager, Ctx: op.Ctx, Src: op.Rank, Tag: op.Tag}})
		e.complete(op, nil)
		return
	}
	id := e.alloc(op)
	op.setState(stSendWait)
	if e.cfg.SplitMin > 0 {
		if op.Dest >= len(e.rdvTo) {
			e.rdvTo = append(e.rdvTo, make([]int32, op.Dest+1-len(e.rdvTo))...)
		}
		e.rdvTo[op.Dest]++
	}
	h := Header{Kind: KRTSC, Ctx: op.Ctx, Src: op.Rank, Tag: op.Tag, Len: uint64(n), SID: id}
	if e.cfg.Mode == ModeRead {
		h.Kind = KRTS
		h.Key, h.Addr = op.Region.Key, op.Region.Addr
		if op.Watch != 0 && op.Buf.IsContig() {
			h.Kind = KRTSS
			h.Watch, h.Ready = op.Watch, uint64(min(max(op.Ready, 0), n))
		}
		if !op.Buf.IsContig() {
			h.Kind = KRTSV
			h.VCount, h.VBlock, h.VStride = uint64(op.Buf.Count), uint64(op.Buf.Block), uint64(op.Buf.Stride)
		}
	}
	e.emit(Action{Kind: ActSend, Peer: op.Dest, Hdr: h})
}

// Recv posts op as a receive: the caller has set Ctx, Peer (or AnySource),
// Tag (or AnyTag) and Buf.
func (e *Engine) Recv(op *Op) {
	op.Kind = OpRecv
	u, src, tag, ok := e.m.Post(op.Ctx, op.Peer, op.Tag, op)
	if !ok {
		op.setState(stPosted)
		return
	}
	op.Status.Source, op.Status.Tag = src, tag
	if u.eager {
		e.deliver(op, u.data)
	} else {
		e.startRecv(op, &u.h, u.from)
	}
	e.putUnexp(u)
}

// Probe returns the status of the message a receive (ctx, src, tag) would
// match now, if any.
func (e *Engine) Probe(ctx uint32, src, tag int32) (Status, bool) {
	u, s, t, ok := e.m.Probe(ctx, src, tag)
	if !ok {
		return Status{}, false
	}
	n := len(u.data)
	if !u.eager {
		n = int(u.h.Len)
	}
	return Status{Source: s, Tag: t, Len: n, MsgLen: n}, true
}

// Cancel cancels a posted receive that has not matched yet: it completes
// with ErrCanceled. It reports whether op was canceled.
func (e *Engine) Cancel(op *Op) bool {
	if op.state != stPosted || !e.m.Cancel(op.Ctx, op) {
		return false
	}
	e.complete(op, ErrCanceled)
	return true
}

// Queued returns the number of posted receives and unexpected messages on
// ctx.
func (e *Engine) Queued(ctx uint32) (posted, unexpected int) { return e.m.Len(ctx) }

// deliver completes receive op with an eager payload.
func (e *Engine) deliver(op *Op, payload []byte) {
	k := min(len(payload), op.Buf.Len())
	op.Buf.Scatter(0, payload[:k])
	op.Status.Len, op.Status.MsgLen = k, len(payload)
	e.complete(op, nil)
}

// startRecv starts the receiving side of a rendezvous for matched op.
func (e *Engine) startRecv(op *Op, h *Header, from int) {
	n := int(h.Len)
	k := min(n, op.Buf.Len())
	op.Status.Len, op.Status.MsgLen = k, n
	op.from, op.sid = from, h.SID
	if h.Kind == KRTSC {
		if k == 0 {
			// Nothing fits: let the sender go without data.
			e.emit(Action{Kind: ActSend, Peer: from, Hdr: Header{Kind: KFIN, SID: h.SID}})
			e.complete(op, nil)
			return
		}
		id := e.alloc(op)
		op.setState(stRecvData)
		op.pending = k
		e.emit(Action{Kind: ActSend, Peer: from, Hdr: Header{Kind: KCTS, SID: h.SID, RID: id, Len: uint64(k)}})
		return
	}
	if k == 0 {
		e.emit(Action{Kind: ActSend, Peer: from, Hdr: Header{Kind: KFIN, SID: h.SID}})
		e.complete(op, nil)
		return
	}
	id := e.alloc(op)
	op.setState(stRecvRead)
	op.pending = 0
	if e.cfg.MinScatterBlock > 0 && !op.Buf.IsContig() && op.Buf.Block < e.cfg.MinScatterBlock {
		// Small blocks: a few large READs into a staging buffer and
		// one local scatter cost less than a READ per few blocks.
		op.vbuf, op.stage = op.Buf, e.getBuf(k)
		op.Buf = Contig(op.stage)
	}
	if h.Kind == KRTSS {
		op.staged = true
		op.src, op.watch = Region{Key: h.Key, Addr: h.Addr}, Region{Key: h.Key, Addr: h.Watch}
		e.readStaged(op, int(min(h.Ready, uint64(k))))
		return
	}
	if half := k / 2 &^ 4095; half > 0 && k >= e.cfg.SplitMin && e.cfg.SplitMin > 0 && h.Kind == KRTS &&
		op.Buf.IsContig() && op.Region != (Region{}) && (from >= len(e.rdvTo) || e.rdvTo[from] == 0) {
		// Both ends copy: the sender WRITEs the second half (asked
		// first, so that it starts while the READs run).
		e.emit(Action{Kind: ActSend, Peer: from, Hdr: Header{Kind: KPut, SID: h.SID, RID: id,
			Key: op.Region.Key, Addr: op.Region.Addr + uint64(half), Off: uint64(half), Len: uint64(k - half)}})
		op.putWait = true
		k = half
	}
	vblock := int(h.VBlock)
	for off := 0; off < k; {
		lim := k - off
		raddr := h.Addr + uint64(off)
		if h.Kind == KRTSV {
			in := off % vblock
			lim = min(lim, vblock-in)
			raddr = h.Addr + uint64(off/vblock)*h.VStride + uint64(in)
		}
		lim = e.readLimit(op, off, lim)
		a := Action{Kind: ActRead, Peer: from, Op: op, Off: off, N: lim,
			Remote: Region{Key: h.Key, Addr: raddr}, ID: id}
		if op.putWait {
			e.hold(a)
		} else {
			e.emit(a)
		}
		op.pending++
		off += lim
	}
}

// readLimit bounds lim, the bytes of receive op that a READ at off may
// take, by the largest READ (Config.MaxRead) and, for a vector, by the
// blocks one READ may scatter into (Config.MaxSGE).
func (e *Engine) readLimit(op *Op, off, lim int) int {
	if e.cfg.MaxRead > 0 {
		lim = min(lim, e.cfg.MaxRead)
	}
	if e.cfg.MaxSGE > 0 && !op.Buf.IsContig() && op.Buf.Block > 0 {
		end := (off/op.Buf.Block + e.cfg.MaxSGE) * op.Buf.Block
		lim = min(lim, end-off)
	}
	return lim
}

// readStaged issues the READs of staged receive op from op.next up to
// avail bytes, then, while the message is not all read, one of the
// sender's watermark.
func (e *Engine) readStaged(op *Op, avail int) {
	for op.next < avail {
		lim := e.readLimit(op, op.next, avail-op.next)
		e.emit(Action{Kind: ActRead, Peer: op.from, Op: op, Off: op.next, N: lim,
			Remote: Region{Key: op.src.Key, Addr: op.src.Addr + uint64(op.next)}, ID: op.id})
		op.pending++
		op.next += lim
	}
	if op.next < op.Status.Len {
		e.emit(Action{Kind: ActWatch, Peer: op.from, Op: op, N: len(op.wm), Remote: op.watch, ID: op.id})
		op.pending++
	}
}

// ReadDone reports the completion of an ActRead, ActWrite or ActWatch
// with the given ID.
func (e *Engine) ReadDone(id uint64, err error) error {
	op := e.lookup(id)
	if op == nil || op.state != stRecvRead && op.state != stSendPut {
		return fmt.Errorf("proto: completion for unknown read or write %#x", id)
	}
	if err != nil && op.Err == nil {
		op.Err = err
	}
	op.pending--
	if op.state == stSendPut {
		// The WRITE of a split send: the receiver may finish.
		e.emit(Action{Kind: ActSend, Peer: op.Dest, Hdr: Header{Kind: KWFIN, RID: op.sid}})
		if op.pending == 0 {
			e.release(op)
			e.complete(op, nil)
		}
		return nil
	}
	if op.pending > 0 {
		return nil
	}
	if op.staged && op.Err == nil && op.next < op.Status.Len {
		if op.stage != nil {
			// Scatter what has arrived while the sender packs more.
			op.vbuf.Scatter(op.scat, op.stage[op.scat:op.next])
			op.scat = op.next
		}
		// The watermark came last: read what it says is packed now.
		e.readStaged(op, int(min(le.Uint64(op.wm[:]), uint64(op.Status.Len))))
		return nil
	}
	// The sender's buffer is free once the READs are done, even while a
	// split receive waits for the sender's WRITE.
	e.emit(Action{Kind: ActSend, Peer: op.from, Hdr: Header{Kind: KFIN, SID: op.sid}})
	if op.putWait {
		return nil
	}
	e.release(op)
	e.unstage(op)
	e.complete(op, nil)
	return nil
}

// Fail completes op with err (for instance when the transport could not
// execute one of its actions). It cancels a posted receive and abandons a
// rendezvous; an op that is already complete only gets err recorded if it
// has none.
func (e *Engine) Fail(op *Op, err error) {
	switch op.state {
	case stDone:
		if op.Err == nil {
			op.Err = err
		}
		return
	case stPosted:
		e.m.Cancel(op.Ctx, op)
	case stSendWait:
		e.answered(op)
	}
	e.release(op)
	if op.Err == nil {
		op.Err = err
	}
	e.unstage(op)
	e.complete(op, err)
}

// unstage ends the staging of a receive's READs: the staged bytes go
// into the vector (unless the receive failed), which becomes op.Buf again.
func (e *Engine) unstage(op *Op) {
	if op.stage == nil {
		return
	}
	if op.Err == nil {
		op.vbuf.Scatter(op.scat, op.stage[op.scat:])
	}
	op.Buf = op.vbuf
	e.putBuf(op.stage)
	op.stage, op.vbuf = nil, Buf{}
}

// answered ends the wait of rendezvous send op (stSendWait) for its
// receiver.
func (e *Engine) answered(op *Op) {
	if e.cfg.SplitMin > 0 {
		e.rdvTo[op.Dest]--
	}
}

// ReceiveEager is the part of Receive that a message offered where it lies
// (transport.Taker) may take: when msg is an eager message that matches a
// posted receive, its payload is delivered into that receive and
// ReceiveEager reports true; otherwise nothing changes and it reports
// false, leaving msg to Receive.
func (e *Engine) ReceiveEager(msg []byte) bool {
	if len(msg) < eagerHdr || Kind(msg[0]) != KEager {
		return false
	}
	ctx, src, tag := decodeEnvelope(msg)
	if !e.validEnvelope(ctx, src, tag) {
		return false // Receive says what is wrong with it
	}
	op, ok := e.m.Arrive(ctx, src, tag)
	if !ok {
		return false
	}
	op.Status.Source, op.Status.Tag = src, tag
	e.deliver(op, msg[eagerHdr:])
	return true
}

// Direct reports whether a receive for (src, tag) on ctx, src a rank,
// may take the next matching message from src itself (MatchEager) instead
// of posting: nothing posted on ctx could match the message first and no
// message that already arrived would match the receive (match.Engine's
// Direct).
func (e *Engine) Direct(ctx uint32, src, tag int32) bool { return e.m.Direct(ctx, src, tag) }

// MatchEager reports whether msg is an eager message on ctx from src whose
// tag matches tag (AnyTag: any), and returns its payload and tag: what a
// receive that Direct allowed takes without the engine.
func MatchEager(msg []byte, ctx uint32, src, tag int32) (payload []byte, mtag int32, ok bool) {
	if len(msg) < eagerHdr || Kind(msg[0]) != KEager {
		return nil, 0, false
	}
	c, s, t := decodeEnvelope(msg)
	if c != ctx || s != src || t < 0 || tag != match.AnyTag && t != tag {
		return nil, 0, false
	}
	return msg[eagerHdr:], t, true
}

// validEnvelope reports whether a message's envelope may be matched: no
// negative source or tag, and source and context within Config's bounds.
func (e *Engine) validEnvelope(ctx uint32, src, tag int32) bool {
	return src >= 0 && tag >= 0 && (e.cfg.Ranks <= 0 || int(src) < e.cfg.Ranks) &&
		(e.cfg.Contexts <= 0 || uint64(ctx) < uint64(e.cfg.Contexts))
}

// Receive processes message msg from transport rank from.
func (e *Engine) Receive(from int, msg []byte) error {
	h := &e.h
	payload, err := Decode(msg, h)
	if err != nil {
		return fmt.Errorf("proto: from rank %d: %w", from, err)
	}
	if h.Kind.envelope() && !e.validEnvelope(h.Ctx, h.Src, h.Tag) {
		return fmt.Errorf("proto: from rank %d: %w: %v with context %d, source %d, tag %d", from, ErrMalformed, h.Kind, h.Ctx, h.Src, h.Tag)
	}
	switch h.Kind {
	case KEager:
		if op, ok := e.m.Arrive(h.Ctx, h.Src, h.Tag); ok {
			op.Status.Source, op.Status.Tag = h.Src, h.Tag
			e.deliver(op, payload)
			return nil
		}
		u := e.newUnexp()
		u.eager, u.from = true, from
		u.data = e.getBuf(len(payload))
		copy(u.data, payload)
		e.m.Unexpected(h.Ctx, h.Src, h.Tag, u)
	case KRTS, KRTSV, KRTSC, KRTSS:
		if h.Kind == KRTSV && h.VBlock == 0 && h.Len > 0 {
			return fmt.Errorf("proto: from rank %d: %w: RTSV with zero block", from, ErrMalformed)
		}
		if op, ok := e.m.Arrive(h.Ctx, h.Src, h.Tag); ok {
			op.Status.Source, op.Status.Tag = h.Src, h.Tag
			e.startRecv(op, h, from)
			return nil
		}
		u := e.newUnexp()
		u.h, u.from = *h, from
		e.m.Unexpected(h.Ctx, h.Src, h.Tag, u)
	case KCTS:
		op := e.lookup(h.SID)
		if op == nil || op.state != stSendWait {
			return fmt.Errorf("proto: from rank %d: CTS for unknown send %#x", from, h.SID)
		}
		e.answered(op)
		n := min(int(h.Len), op.Buf.Len())
		for off := 0; off < n; off += e.cfg.MaxData {
			k := min(e.cfg.MaxData, n-off)
			e.emit(Action{Kind: ActSend, Peer: from, Op: op, Off: off, N: k,
				Hdr: Header{Kind: KData, RID: h.RID, Off: uint64(off)}})
		}
		e.release(op)
		e.complete(op, nil)
	case KFIN:
		op := e.lookup(h.SID)
		if op == nil || op.state != stSendWait && op.state != stSendPut {
			return fmt.Errorf("proto: from rank %d: FIN for unknown send %#x", from, h.SID)
		}
		if op.state == stSendPut {
			if op.pending--; op.pending > 0 {
				return nil // the WRITE is still running
			}
		} else {
			e.answered(op)
		}
		e.release(op)
		e.complete(op, nil)
	case KPut:
		op := e.lookup(h.SID)
		if op == nil || op.state != stSendWait || !op.Buf.IsContig() || h.Off+h.Len > uint64(op.Buf.Len()) {
			return fmt.Errorf("proto: from rank %d: PUT for unknown send %#x or beyond it", from, h.SID)
		}
		e.answered(op)
		op.setState(stSendPut)
		op.sid = h.RID
		op.pending = 2 // the WRITE and the receiver's FIN
		e.emit(Action{Kind: ActWrite, Peer: from, Op: op, Off: int(h.Off), N: int(h.Len),
			Remote: Region{Key: h.Key, Addr: h.Addr}, ID: op.id})
	case KWFIN:
		op := e.lookup(h.RID)
		if op == nil || op.state != stRecvRead || !op.putWait {
			return fmt.Errorf("proto: from rank %d: WFIN for unknown receive %#x", from, h.RID)
		}
		op.putWait = false
		if op.pending == 0 {
			e.release(op)
			e.unstage(op)
			e.complete(op, nil)
		}
	case KData:
		op := e.lookup(h.RID)
		if op == nil || op.state != stRecvData {
			return fmt.Errorf("proto: from rank %d: DATA for unknown receive %#x", from, h.RID)
		}
		if int(h.Off)+len(payload) > op.Status.Len {
			return fmt.Errorf("proto: from rank %d: %w: DATA beyond the receive", from, ErrMalformed)
		}
		op.Buf.Scatter(int(h.Off), payload)
		op.pending -= len(payload)
		if op.pending <= 0 {
			e.release(op)
			e.complete(op, nil)
		}
	}
	return nil
}

// Discard empties ctx's queues when its communicator is freed: unexpected
// messages are dropped and posted receives complete with ErrCanceled.
// Rendezvous messages dropped this way leave their senders waiting.
func (e *Engine) Discard(ctx uint32) {
	var canceled []*Op
	e.m.Drain(ctx, func(op *Op) { canceled = append(canceled, op) }, e.putUnexp)
	for _, op := range canceled {
		e.complete(op, ErrCanceled)
	}
}
