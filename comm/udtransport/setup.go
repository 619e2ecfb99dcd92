package udtransport

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/jiarun/jia/comm/internal/qpbind"
	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/rdmaio"
)

// device is what the transport holds on one rdmaio device: its UD queue
// pair and the buffers around it, shared by the peers it reaches.
type device struct {
	t      *Transport
	slot   int
	dev    rdmaio.Device
	pd     rdmaio.PD
	scq    rdmaio.CQ // send completions, polled under sendMu
	rcq    rdmaio.CQ // receive completions, polled under pollMu
	qp     rdmaio.QP
	qkey   uint32
	cookie uint32 // in every datagram this device sends
	mtu    int    // datagram size: the receive buffers hold this much
	inline int

	// Receive side, guarded by pollMu.
	rslab       []byte
	rmr         rdmaio.MR
	bufSize     int
	rwrs        []rdmaio.RecvWR
	rsges       []rdmaio.SGE
	repost      []rdmaio.RecvWR
	repostBatch int
	rwc         []rdmaio.WorkCompletion

	// Send side, guarded by sendMu: a ring of depth slots of bufSize
	// bytes; work request i uses slot i%depth. posted counts the work
	// requests posted, retired those known to be complete.
	sendMu    sync.Mutex
	depth     int
	sslab     []byte
	smr       rdmaio.MR
	posted    uint64
	retired   uint64
	sinceSig  int
	swrs      []rdmaio.SendWR
	ssges     []rdmaio.SGE
	swc       []rdmaio.WorkCompletion
	inl       []byte // scratch of inline datagrams (several per chain)
	inlUsed   int
	sendBatch int
}

// setup creates the devices' objects (their queue pairs in RTS, receive
// buffers posted) and the peers.
func (t *Transport) setup(cfg *Config) error {
	if t.size == 1 {
		return nil
	}
	devs, slots, err := qpbind.GroupDevices(cfg.Devices, t.rank, t.size, t.errf)
	if err != nil {
		return err
	}
	for slot, dv := range devs {
		t.devs = append(t.devs, &device{t: t, slot: slot, dev: dv})
	}
	for p, slot := range slots {
		if slot >= 0 {
			t.peers[p] = &peer{t: t, rank: p, d: t.devs[slot]}
		}
	}
	if len(t.devs) > 250 {
		return t.errf("new: %d devices (at most 250)", len(t.devs))
	}
	for _, d := range t.devs {
		if err := d.open(); err != nil {
			return t.errf("new: device %d (%s): %w", d.slot, d.dev.Provider(), err)
		}
	}
	return nil
}

// open creates the PD, CQs, UD queue pair and buffers of a device.
func (d *device) open() error {
	t := d.t
	attr := d.dev.Attr()
	d.mtu = attr.MTU
	if t.opt.MTU > 0 {
		d.mtu = min(d.mtu, t.opt.MTU)
	}
	if d.mtu < minMTU {
		return fmt.Errorf("path MTU %d: want at least %d", d.mtu, minMTU)
	}
	d.depth = min(t.opt.SendDepth, attr.MaxQPWR)
	d.inline = min(t.opt.MaxInline, attr.MaxInline, d.mtu)
	nbuf := min(t.opt.RecvBuffers, attr.MaxQPWR)
	if d.depth < 4 || nbuf < 1 || attr.MaxSGE < 1 {
		return fmt.Errorf("device limits too small: %d work requests, %d SGEs", attr.MaxQPWR, attr.MaxSGE)
	}
	d.repostBatch = max(1, min(16, nbuf/4))
	d.sendBatch = min(16, d.depth/2)
	d.qkey = t.opt.QKey
	if d.qkey == 0 {
		d.qkey = randomU32() &^ (1 << 31) // Q_Keys with the top bit set are privileged in verbs
		if d.qkey == 0 {
			d.qkey = 1
		}
	}
	d.cookie = randomU32()
	var err error
	if d.pd, err = d.dev.AllocPD(); err != nil {
		return err
	}
	if d.scq, err = d.dev.CreateCQ(d.depth); err != nil {
		return err
	}
	if d.rcq, err = d.dev.CreateCQ(nbuf); err != nil {
		return err
	}
	d.qp, err = d.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.UD, SendCQ: d.scq, RecvCQ: d.rcq,
		Cap: rdmaio.QPCap{MaxSendWR: d.depth, MaxRecvWR: nbuf, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: d.inline}})
	if err != nil {
		return err
	}
	if err := d.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateInit, QKey: d.qkey}); err != nil {
		return err
	}
	d.bufSize = (d.mtu + 63) &^ 63
	if d.rslab, err = d.pd.Alloc(nbuf * d.bufSize); err != nil {
		return fmt.Errorf("receive buffers: %w", err)
	}
	if d.rmr, err = d.pd.RegMR(d.rslab, rdmaio.AccessLocalWrite); err != nil {
		return fmt.Errorf("receive buffers: %w", err)
	}
	d.rsges, d.rwrs = qpbind.RecvWRs(d.rmr, nbuf, d.bufSize, 0)
	if err := qpbind.PostRecvs(d.qp, d.rwrs); err != nil {
		return err
	}
	if err := d.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR}); err != nil {
		return err
	}
	if err := d.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS}); err != nil {
		return err
	}
	if d.sslab, err = d.pd.Alloc(d.depth * d.bufSize); err != nil {
		return fmt.Errorf("send ring: %w", err)
	}
	if d.smr, err = d.pd.RegMR(d.sslab, 0); err != nil {
		return fmt.Errorf("send ring: %w", err)
	}
	d.swrs = make([]rdmaio.SendWR, 0, d.sendBatch)
	d.ssges = make([]rdmaio.SGE, d.sendBatch)
	d.swc = make([]rdmaio.WorkCompletion, 16)
	d.inl = make([]byte, d.sendBatch*d.inline)
	d.rwc = make([]rdmaio.WorkCompletion, 32)
	d.repost = make([]rdmaio.RecvWR, 0, nbuf)
	return nil
}

func randomU32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return binary.LittleEndian.Uint32(b[:])
}

// destroy releases a device's objects; address handles are gone.
func (d *device) destroy() []error {
	td := qpbind.Teardown{Slot: d.slot, Provider: d.dev.Provider()}
	td.Close("close queue pair", d.qp)
	td.Free("receive buffers", d.pd, d.rmr, d.rslab)
	td.Free("send ring", d.pd, d.smr, d.sslab)
	td.Close("close send cq", d.scq)
	td.Close("close receive cq", d.rcq)
	td.Close("close pd", d.pd)
	d.qp, d.rmr, d.rslab, d.smr, d.sslab, d.scq, d.rcq, d.pd = nil, nil, nil, nil, nil, nil, nil, nil
	return td.Errs
}

// Card: what a rank publishes in the first exchange.
//
//	"UDT1" rank u32, size u32, ndev u8,
//	ndev × (provider: u8 len + bytes, addr: u16 len + bytes, QPN u32, Q_Key u32, MTU u32, cookie u32),
//	size × device slot u8 (0xff: none)
//
// An error blob is "UDTE" followed by the message.
const (
	cardMagic = "UDT1"
	errMagic  = "UDTE"
	noSlot    = 0xff
)

func (t *Transport) encodeCard() []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, 16+len(t.devs)*96+t.size)
	b = append(b, cardMagic...)
	b = le.AppendUint32(b, uint32(t.rank))
	b = le.AppendUint32(b, uint32(t.size))
	b = append(b, byte(len(t.devs)))
	for _, d := range t.devs {
		b = qpbind.AppendDevice(b, d.dev)
		b = le.AppendUint32(b, d.qp.QPN())
		b = le.AppendUint32(b, d.qkey)
		b = le.AppendUint32(b, uint32(d.mtu))
		b = le.AppendUint32(b, d.cookie)
	}
	for _, p := range t.peers {
		if p == nil {
			b = append(b, noSlot)
		} else {
			b = append(b, byte(p.d.slot))
		}
	}
	return b
}

// remoteDev and remoteCard are a decoded card.
type remoteDev struct {
	provider          string
	addr              []byte
	qpn, qkey, cookie uint32
	mtu               int
}

type remoteCard struct {
	rank, size int
	devs       []remoteDev
	slots      []byte
}

var errCard = errors.New("malformed card")

// decodeCard parses a card; it never panics on bad input.
func decodeCard(b []byte) (*remoteCard, error) {
	r := qpbind.NewReader(b)
	if string(r.Bytes(4)) != cardMagic {
		return nil, errCard
	}
	c := &remoteCard{rank: int(r.U32()), size: int(r.U32())}
	ndev := int(r.U8())
	for i := 0; i < ndev && r.OK(); i++ {
		var d remoteDev
		d.provider, d.addr = r.Device()
		d.qpn = r.U32()
		d.qkey = r.U32()
		d.mtu = int(r.U32())
		d.cookie = r.U32()
		c.devs = append(c.devs, d)
	}
	if !r.OK() || c.size < 1 || c.size > 1<<23 || r.Left() != c.size {
		return nil, errCard
	}
	c.slots = append([]byte(nil), r.Bytes(c.size)...)
	return c, nil
}

// remoteError returns the error a rank published, if its blob is one.
func remoteError(rank int, b []byte) error {
	return qpbind.Handshake{Magic: errMagic}.RemoteError(rank, b)
}

// connect reads every peer's card, creates the address handles and the
// Links.
func (t *Transport) connect(cards [][]byte) error {
	if len(cards) != t.size {
		return t.errf("new: exchange returned %d cards for %d ranks", len(cards), t.size)
	}
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
		p := t.peers[j]
		slot := int(c.slots[t.rank])
		if slot == noSlot || slot >= len(c.devs) {
			return t.errf("new: rank %d has no device for this rank", j)
		}
		rd := &c.devs[slot]
		if rd.provider != p.d.dev.Provider() {
			return t.errf("new: rank %d reaches this rank over %q, this rank reaches it over %q", j, rd.provider, p.d.dev.Provider())
		}
		if rd.mtu < minMTU {
			return t.errf("new: rank %d: path MTU %d (want at least %d)", j, rd.mtu, minMTU)
		}
		if p.ah, err = p.d.pd.CreateAH(rdmaio.AHAttr{Addr: rd.addr}); err != nil {
			return t.errf("new: address handle of rank %d: %w", j, err)
		}
		p.rqpn, p.rqkey, p.rcookie = rd.qpn, rd.qkey, rd.cookie
		p.link = proto.NewLink(proto.LinkConfig{MTU: min(p.d.mtu, rd.mtu) - udHeader, Window: t.opt.Window,
			RTO: t.opt.RTO, MaxRTO: t.opt.MaxRTO, MaxMsg: t.opt.MaxMsg, Peer: j})
		p.parts = make([][]byte, 0, 8)
		p.hdr = [udHeader]byte{}
		binary.LittleEndian.PutUint32(p.hdr[0:], uint32(t.rank))
		binary.LittleEndian.PutUint32(p.hdr[4:], p.d.cookie)
	}
	t.touched = make([]*peer, 0, t.size)
	return nil
}
