package qtransport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jiarun/jia/comm/internal/qpbind"
	"github.com/jiarun/jia/internal/qlock"
	"github.com/jiarun/jia/rdmaio"
)

// device is what the transport holds on one rdmaio device: the objects
// shared by the peers it reaches.
type device struct {
	t       *Transport
	slot    int
	dev     rdmaio.Device
	npeers  int
	pd      rdmaio.PD
	cq      rdmaio.CQ
	srq     rdmaio.SRQ
	slab    []byte // receive buffers
	slabMR  rdmaio.MR
	bufSize int
	rwrs    []rdmaio.RecvWR // one per receive buffer, ID recvFlag|index
	rsges   []rdmaio.SGE
	fence   []byte // 64 bytes: [0,8) is read by peers at Close, [8,16) receives
	fenceMR rdmaio.MR
	qpPeer  map[uint32]int32 // local QPN → peer rank; read-only after New

	depth, sge, inline int
	maxWR              int // largest message or transfer of one work request
	eager              int // the eager limit of the peers on this device
	maxMsg             int // the largest message to them: eager + headerRoom
	readBounce         int // the largest Read or Write through the bounce ring (Options.ReadBounce)
	// Consumed receive buffers are given back to the SRQ when a poll finds
	// nothing to do and repostBatch of them wait, so that the repost costs
	// a message no latency; or at once when repostMax wait.
	repostBatch, repostMax int

	// Guarded by pollMu: the completion queue is polled by the holder only
	// (Poll, Wait, the progress goroutine), so that what arrives is handed
	// out in order.
	pollMu   qlock.Mutex
	lastQPN  uint32 // the last QPN looked up in qpPeer, and its peer (lastSrc ≥ 0)
	lastSrc  int32
	wc       []rdmaio.WorkCompletion
	ready    []readyItem // ring: ready[rh : rh+rn] (mod len), for Poll to hand out
	rh, rn   int
	done     []doneOp // reads and writes finished by the completions in progress
	doneRegs []*region
	repost   []rdmaio.RecvWR
	// refill lists the peers whose backlog the completions in progress
	// made room for: progress flushes them once it has taken them all
	// (peer.refill marks a peer listed).
	refill []*peer

	// backlogged counts peers with a non-empty backlog; kick wakes the
	// progress goroutine, started at the first backlog.
	backlogged atomic.Int32
	kick       chan struct{}
	helper     atomic.Bool

	delivered     uint64 // guarded by pollMu
	deliveredSnap atomic.Uint64
	taken         uint64 // guarded by pollMu
	takenSnap     atomic.Uint64

	// idleCQ is cq if it can tell cheaply that a Poll would find nothing
	// (set at setup, never cleared); owed is set while the holder of
	// pollMu left work for the next Poll: items to hand out (taken by Wait
	// or the progress goroutine) or receive buffers to repost. Idle needs
	// both.
	idleCQ rdmaio.IdleCQ
	owed   atomic.Bool
	// sleepCQ is cq if it can sleep without polling first (Wait).
	sleepCQ rdmaio.SleepCQ
	// sendCQ is cq if it can collect send completions alone (Reap, reap).
	sendCQ rdmaio.SendCQ
	// directCQ is cq if it can deliver small messages without receive
	// buffers: Poll has it copy them into dbuf, whose first dused bytes
	// hold the messages of the Poll under way (pollMu held). They are all
	// handed out by the end of the Poll; the other pollers use cq.Poll.
	directCQ rdmaio.DirectCQ
	dbuf     []byte
	dused    int
	// tk hands Take's offers to the caller's MsgTaker (pollMu held).
	tk taker
}

// directBytes is the size of a device's direct buffer: messages beyond it
// in one Poll take receive buffers.
const directBytes = 8 << 10

// ID spaces of work requests: receives carry recvFlag and the buffer index;
// sends carry the peer's rank above seqBits and the peer's sequence number.
// A message delivered into the device's direct buffer
// (rdmaio.DirectCQ) has directID.
const (
	recvFlag = 1 << 63
	directID = recvFlag | 1<<62
	seqBits  = 40
	seqMask  = 1<<seqBits - 1
)

// setup creates the devices' objects and the peers' queue pairs (in INIT).
func (t *Transport) setup(cfg *Config) error {
	if t.size == 1 {
		t.oneSided = !t.opt.TwoSided
		return nil
	}
	devs, slots, err := qpbind.GroupDevices(cfg.Devices, t.rank, t.size, t.errf)
	if err != nil {
		return err
	}
	for slot, dv := range devs {
		d := &device{t: t, slot: slot, dev: dv, qpPeer: map[uint32]int32{}, lastSrc: -1}
		d.eager = t.opt.eagerLimitFor(dv.Provider())
		d.maxMsg = d.eager + headerRoom
		d.readBounce = t.opt.readBounceFor(dv.Provider())
		if t.stageDev == nil && dv.Provider() == "shm" {
			t.stageDev = d
		}
		t.devs = append(t.devs, d)
	}
	for p, slot := range slots {
		if slot >= 0 {
			d := t.devs[slot]
			d.npeers++
			t.peers[p] = &peer{t: t, rank: p, d: d}
		}
	}
	// Messages to self may be as long as those to any peer.
	m := 0
	for _, d := range t.devs {
		m = max(m, d.maxMsg)
	}
	t.setMaxMsg(m)
	for _, d := range t.devs {
		if err := d.open(); err != nil {
			return t.errf("new: device %d (%s): %w", d.slot, d.dev.Provider(), err)
		}
	}
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		if err := p.create(); err != nil {
			return t.errf("new: queue pair for rank %d: %w", p.rank, err)
		}
	}
	t.oneSided = !t.opt.TwoSided && t.probeOneSided()
	return nil
}

// open creates the PD, CQ, SRQ and receive buffers of a device.
func (d *device) open() error {
	t := d.t
	attr := d.dev.Attr()
	d.depth = min(t.opt.SendDepth, attr.MaxQPWR)
	d.sge = min(t.opt.MaxSGE, attr.MaxSGE)
	d.inline = min(t.opt.MaxInline, attr.MaxInline)
	d.maxWR = attr.MaxMsgSize
	if d.maxWR <= 0 {
		d.maxWR = 1 << 30
	}
	if d.depth < 4 || d.sge < 1 {
		return fmt.Errorf("device limits too small: %d work requests, %d SGEs", attr.MaxQPWR, attr.MaxSGE)
	}
	if d.maxMsg > d.maxWR {
		return fmt.Errorf("eager limit %d: messages of %d bytes exceed the device's %d", d.eager, d.maxMsg, d.maxWR)
	}
	nbuf := min(t.opt.RecvBuffers, attr.MaxQPWR)
	d.repostBatch = max(1, min(16, nbuf/4))
	d.repostMax = max(1, min(2*d.repostBatch, nbuf/2))
	var err error
	if d.pd, err = d.dev.AllocPD(); err != nil {
		return err
	}
	if d.cq, err = d.dev.CreateCQ(nbuf + d.npeers*d.depth); err != nil {
		return err
	}
	d.idleCQ, _ = d.cq.(rdmaio.IdleCQ)
	d.sleepCQ, _ = d.cq.(rdmaio.SleepCQ)
	d.sendCQ, _ = d.cq.(rdmaio.SendCQ)
	if d.directCQ, _ = d.cq.(rdmaio.DirectCQ); d.directCQ != nil {
		d.dbuf = warm(make([]byte, directBytes))
	}
	if d.srq, err = d.pd.CreateSRQ(rdmaio.SRQAttr{MaxWR: nbuf, MaxSGE: 1}); err != nil {
		return err
	}
	// Buffers of more than a page start on a page boundary (of the slab).
	// Every page of every buffer is readied now: the receive queue hands
	// out the buffers in turn, so a message larger than a page would
	// otherwise fault on the pages behind the first in each of the nbuf
	// buffers it meets, tens of microseconds a page on a virtual machine,
	// which at mid sizes costs more than the message itself.
	d.bufSize = (d.maxMsg + 63) &^ 63
	if d.bufSize > pageSize {
		d.bufSize = (d.bufSize + pageSize - 1) &^ (pageSize - 1)
	}
	if d.slab, err = d.pd.Alloc(nbuf * d.bufSize); err != nil {
		return fmt.Errorf("receive buffers: %w", err)
	}
	prefault(d.slab)
	if d.slabMR, err = d.pd.RegMR(d.slab, rdmaio.AccessLocalWrite); err != nil {
		return fmt.Errorf("receive buffers: %w", err)
	}
	d.rsges, d.rwrs = qpbind.RecvWRs(d.slabMR, nbuf, d.bufSize, recvFlag)
	if err := qpbind.PostRecvs(d.srq, d.rwrs); err != nil {
		return err
	}
	if d.fence, err = d.pd.Alloc(64); err != nil {
		return err
	}
	if d.fenceMR, err = d.pd.RegMR(d.fence, rdmaio.AccessLocalWrite|rdmaio.AccessRemoteRead); err != nil {
		return err
	}
	d.wc = warm(make([]rdmaio.WorkCompletion, 32))
	d.ready = warm(make([]readyItem, nbuf+d.npeers*d.depth+32))
	d.done = warm(make([]doneOp, 0, 16))
	d.refill = warm(make([]*peer, 0, t.size))
	d.doneRegs = warm(make([]*region, 0, 64))
	d.repost = warm(make([]rdmaio.RecvWR, 0, nbuf))
	d.kick = make(chan struct{}, 1)
	return nil
}

// probeOneSided tells whether Register can work: every device registers
// ordinary memory for remote access, and gives it the same address (a
// Region has one address for every device), and there are at most two
// devices (a Region key holds two 32-bit remote keys).
func (t *Transport) probeOneSided() bool {
	if len(t.devs) > 2 {
		return false
	}
	probe := make([]byte, 64)
	ok := true
	var addr uint64
	for i, d := range t.devs {
		mr, err := d.pd.RegMR(probe, accessRegion)
		if err != nil {
			return false
		}
		if i == 0 {
			addr = mr.Addr()
		} else if mr.Addr() != addr {
			ok = false
		}
		if err := mr.Deregister(); err != nil {
			ok = false
		}
	}
	return ok
}

// accessRegion is the access of a Register'ed buffer.
const accessRegion = rdmaio.AccessLocalWrite | rdmaio.AccessRemoteRead | rdmaio.AccessRemoteWrite

// destroy releases a device's objects (its QPs are gone).
func (d *device) destroy() []error {
	td := qpbind.Teardown{Slot: d.slot, Provider: d.dev.Provider()}
	td.Close("close srq", d.srq)
	td.Free("receive buffers", d.pd, d.slabMR, d.slab)
	td.Free("fence", d.pd, d.fenceMR, d.fence)
	td.Close("close cq", d.cq)
	td.Close("close pd", d.pd)
	d.srq, d.slabMR, d.slab, d.fenceMR, d.fence, d.cq, d.pd = nil, nil, nil, nil, nil, nil, nil
	return td.Errs
}

// Card: what a rank publishes in the first exchange.
//
//	"QTP2" rank u32, size u32, flags u8, ndev u8,
//	ndev × (provider: u8 len + bytes, addr: u16 len + bytes, fence rkey u32, fence addr u64,
//	        maxMsg u32),
//	size × (device slot u8 (0xff: none), QPN u32)
//
// An error blob is "QTPE" followed by the message.
const (
	cardMagic    = "QTP2"
	errMagic     = "QTPE"
	flagOneSided = 1
	noSlot       = 0xff
)

func (t *Transport) encodeCard() []byte {
	b := make([]byte, 0, 64+len(t.devs)*64+t.size*5)
	b = append(b, cardMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(t.rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(t.size))
	var flags byte
	if t.oneSided {
		flags |= flagOneSided
	}
	b = append(b, flags, byte(len(t.devs)))
	for _, d := range t.devs {
		b = qpbind.AppendDevice(b, d.dev)
		b = binary.LittleEndian.AppendUint32(b, d.fenceMR.RKey())
		b = binary.LittleEndian.AppendUint64(b, d.fenceMR.Addr())
		b = binary.LittleEndian.AppendUint32(b, uint32(d.maxMsg))
	}
	for _, p := range t.peers {
		if p == nil {
			b = append(b, noSlot, 0, 0, 0, 0)
			continue
		}
		b = append(b, byte(p.d.slot))
		b = binary.LittleEndian.AppendUint32(b, p.qp.QPN())
	}
	return b
}

// remoteDev and remoteCard are a decoded card.
type remoteDev struct {
	provider  string
	addr      []byte
	fenceRKey uint32
	fenceAddr uint64
	maxMsg    int
}

type remoteCard struct {
	rank, size int
	flags      byte
	devs       []remoteDev
	slots      []byte
	qpns       []uint32
}

var errCard = errors.New("malformed card")

// decodeCard parses a card; it never panics on bad input.
func decodeCard(b []byte) (*remoteCard, error) {
	r := qpbind.NewReader(b)
	if string(r.Bytes(4)) != cardMagic {
		return nil, errCard
	}
	c := &remoteCard{rank: int(r.U32()), size: int(r.U32())}
	c.flags = r.U8()
	ndev := int(r.U8())
	for i := 0; i < ndev && r.OK(); i++ {
		var d remoteDev
		d.provider, d.addr = r.Device()
		d.fenceRKey = r.U32()
		d.fenceAddr = r.U64()
		d.maxMsg = int(r.U32())
		c.devs = append(c.devs, d)
	}
	if !r.OK() || c.size < 1 || c.size > 1<<23 || r.Left() != 5*c.size {
		return nil, errCard
	}
	c.slots = make([]byte, c.size)
	c.qpns = make([]uint32, c.size)
	for i := range c.slots {
		c.slots[i] = r.U8()
		c.qpns[i] = r.U32()
	}
	if !r.OK() {
		return nil, errCard
	}
	return c, nil
}

// remoteError returns the error a rank published, if its blob is one.
func remoteError(rank int, b []byte) error {
	return qpbind.Handshake{Magic: errMagic}.RemoteError(rank, b)
}

// connect reads every peer's card and moves the queue pairs to RTS.
func (t *Transport) connect(cards [][]byte) error {
	if len(cards) != t.size {
		return t.errf("new: exchange returned %d cards for %d ranks", len(cards), t.size)
	}
	oneSided := t.oneSided
	parsed := make([]*remoteCard, t.size)
	for j, b := range cards {
		if j == t.rank {
			continue
		}
		if err := remoteError(j, b); err != nil {
			return t.errf("new: %w", err)
		}
		c, err := decodeCard(b)
		if err != nil {
			return t.errf("new: card of rank %d: %w", j, err)
		}
		if c.rank != j || c.size != t.size {
			return t.errf("new: card of rank %d says rank %d of %d", j, c.rank, c.size)
		}
		oneSided = oneSided && c.flags&flagOneSided != 0
		parsed[j] = c
	}
	// One-sided operations are used only if every rank can serve them: the
	// rendezvous mode of comm must agree on both ends.
	t.oneSided = oneSided
	for j, c := range parsed {
		if c == nil {
			continue
		}
		p := t.peers[j]
		slot := int(c.slots[t.rank])
		if slot == noSlot || slot >= len(c.devs) {
			return t.errf("new: rank %d has no queue pair for this rank", j)
		}
		rd := &c.devs[slot]
		if rd.provider != p.d.dev.Provider() {
			return t.errf("new: rank %d reaches this rank over %q, this rank reaches it over %q", j, rd.provider, p.d.dev.Provider())
		}
		if rd.maxMsg != p.d.maxMsg {
			return t.errf("new: rank %d sends this rank messages of up to %d bytes over %q, this rank %d (every rank must use the same eager limits)", j, rd.maxMsg, rd.provider, p.d.maxMsg)
		}
		p.rslot = uint(slot)
		p.fenceRKey, p.fenceAddr = rd.fenceRKey, rd.fenceAddr
		if err := p.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: rd.addr}, DestQPN: c.qpns[t.rank]}); err != nil {
			return t.errf("new: connect to rank %d: %w", j, err)
		}
		if err := p.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite, RetryCount: 7}); err != nil {
			return t.errf("new: connect to rank %d: %w", j, err)
		}
	}
	return nil
}
