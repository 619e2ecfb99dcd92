package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Link makes one direction pair of an unreliable datagram path (a UD queue
// pair to one peer) reliable: messages given to Send come out of the peer's
// Link exactly once and in order, whatever the network loses, duplicates or
// reorders. Messages longer than a packet are fragmented and reassembled.
// It is a pure state machine like Engine: packets and time come in through
// Send, Receive and Tick; packets to transmit and messages delivered come
// out through Ready. It reads no clock: every event carries the time.
//
// # Packets
//
// Every packet starts with a LinkHeader-byte header:
//
//	0     type: 1 data, 2 acknowledgement only
//	1     flags: 1 first fragment of a message, 2 last fragment
//	2..3  reserved (0)
//	4..7  sequence number of a data packet
//	8..11 cumulative acknowledgement: the next sequence number expected
//	12..19 selective acknowledgement: bit i set = packet ack+1+i received
//
// # Protocol
//
// Data packets are numbered; at most Window are unacknowledged at a time
// (selective repeat). Each is retransmitted when it stays unacknowledged
// for its retransmission timeout, which starts at RTO and doubles up to
// MaxRTO; a packet the peer reports missing while three later ones arrived
// is retransmitted at once (fast retransmit). The receiver keeps packets
// that arrive early within the window, drops duplicates, and acknowledges
// in every outgoing packet; when it has nothing to send it answers data
// with an acknowledgement-only packet. A message whose fragments add up to
// more than MaxMsg bytes is dropped while it is reassembled, and Receive
// reports it: the reassembly buffer never grows beyond MaxMsg, whatever
// the peer sends.
type Link struct {
	cfg LinkConfig

	// send side
	next, una uint32
	win       []txSlot
	queue     [][]byte
	qhead     int

	// receive side
	expect uint32
	rwin   []rxSlot
	asm    []byte
	inMsg  bool
	ackDue bool

	out     [][]byte
	msgs    [][]byte
	ackPkt  [LinkHeader]byte
	pktFree [][]byte
	acked   [][]byte // acknowledged packets, recycled at Advance (out may hold them)
	msgFree [][]byte

	// Stats counts events, for tests and diagnostics.
	Stats LinkStats
}

// LinkStats are a Link's counters.
type LinkStats struct {
	Sent, Retransmits, FastRetransmits, Acks     uint64
	Received, Duplicates, OutOfWindow, Malformed uint64
	Delivered, TooLong                           uint64
}

// LinkConfig are a Link's parameters.
type LinkConfig struct {
	// MTU is the largest packet, header included; it must exceed
	// LinkHeader.
	MTU int
	// Window is the most unacknowledged packets (default 128).
	Window int
	// RTO is the initial retransmission timeout (default 200ms); MaxRTO
	// bounds its doubling (default 16·RTO).
	RTO, MaxRTO time.Duration
	// MaxMsg is the longest message reassembled (default
	// DefaultLinkMaxMsg); longer ones are dropped and reported by Receive.
	MaxMsg int
	// Peer is the rank at the other end, named in errors.
	Peer int
}

// DefaultLinkMaxMsg is the default LinkConfig.MaxMsg.
const DefaultLinkMaxMsg = 64 << 20

// ErrLinkTooLong is what Receive reports (wrapped, with the peer's rank)
// for a message longer than LinkConfig.MaxMsg.
var ErrLinkTooLong = errors.New("message exceeds the link's largest message")

// LinkHeader is the size of a Link packet header.
const LinkHeader = 20

const (
	pktData = 1
	pktAck  = 2

	flFirst = 1
	flLast  = 2
)

type txSlot struct {
	pkt    []byte
	sent   time.Time
	rto    time.Duration
	sacked bool
	fast   bool
}

type rxSlot struct {
	pkt []byte
	has bool
}

// Ready is what a Link wants done: transmit Packets to the peer, hand
// Messages to the layer above. Both stay valid until Advance.
type Ready struct {
	Packets  [][]byte
	Messages [][]byte
}

// NewLink returns a Link with configuration cfg (zero fields take the
// defaults).
func NewLink(cfg LinkConfig) *Link {
	if cfg.MTU <= LinkHeader {
		panic("proto: Link MTU must exceed LinkHeader")
	}
	if cfg.Window <= 0 {
		cfg.Window = 128
	}
	if cfg.RTO <= 0 {
		cfg.RTO = 200 * time.Millisecond
	}
	if cfg.MaxRTO <= 0 {
		cfg.MaxRTO = 16 * cfg.RTO
	}
	if cfg.MaxMsg <= 0 {
		cfg.MaxMsg = DefaultLinkMaxMsg
	}
	return &Link{cfg: cfg, win: make([]txSlot, cfg.Window), rwin: make([]rxSlot, cfg.Window)}
}

func seqLT(a, b uint32) bool { return int32(a-b) < 0 }

// keptPktBytes bounds the packets a Link keeps for reuse beyond twice its
// window: as many as a message of this size needs, so that a steady stream
// of large messages (queued whole before the window lets them go) does
// not allocate.
const keptPktBytes = 4 << 20

func (l *Link) getPkt() []byte {
	if n := len(l.pktFree); n > 0 {
		p := l.pktFree[n-1]
		l.pktFree = l.pktFree[:n-1]
		return p[:0]
	}
	return make([]byte, 0, l.cfg.MTU)
}

func (l *Link) putPkt(p []byte) {
	if cap(p) == l.cfg.MTU && len(l.pktFree) < max(2*l.cfg.Window, keptPktBytes/l.cfg.MTU) {
		l.pktFree = append(l.pktFree, p[:0])
	}
}

// Send queues a message, given as the concatenation of parts.
func (l *Link) Send(now time.Time, parts ...[]byte) {
	var p []byte
	first := true
	start := func() {
		p = l.getPkt()
		p = p[:LinkHeader]
		clear(p)
		p[0] = pktData
		if first {
			p[1] = flFirst
			first = false
		}
	}
	start()
	for _, b := range parts {
		for len(b) > 0 {
			if len(p) == l.cfg.MTU {
				l.queue = append(l.queue, p)
				start()
			}
			k := copy(p[len(p):l.cfg.MTU], b)
			p = p[:len(p)+k]
			b = b[k:]
		}
	}
	p[1] |= flLast
	l.queue = append(l.queue, p)
	l.fill(now)
}

// Queued is the number of packets queued behind a full window: messages
// the Link keeps in memory until acknowledgements make room.
func (l *Link) Queued() int { return len(l.queue) - l.qhead }

// fill moves queued packets into the window and transmits them.
func (l *Link) fill(now time.Time) {
	for l.qhead < len(l.queue) && int(l.next-l.una) < l.cfg.Window {
		p := l.queue[l.qhead]
		l.queue[l.qhead] = nil
		l.qhead++
		binary.LittleEndian.PutUint32(p[4:], l.next)
		s := &l.win[l.next%uint32(l.cfg.Window)]
		*s = txSlot{pkt: p, sent: now, rto: l.cfg.RTO}
		l.next++
		l.out = append(l.out, p)
		l.Stats.Sent++
	}
	if l.qhead == len(l.queue) {
		l.queue = l.queue[:0]
		l.qhead = 0
	}
}

// Receive processes packet pkt from the peer. Its only error is a message
// longer than LinkConfig.MaxMsg (wrapping ErrLinkTooLong), which is
// dropped; the Link goes on with the next message, but a peer that sends
// one breaks the protocol above.
func (l *Link) Receive(now time.Time, pkt []byte) error {
	if len(pkt) < LinkHeader || (pkt[0] != pktData && pkt[0] != pktAck) {
		l.Stats.Malformed++
		return nil
	}
	l.Stats.Received++
	le := binary.LittleEndian
	l.ack(now, le.Uint32(pkt[8:]), le.Uint64(pkt[12:]))
	if pkt[0] != pktData {
		return nil
	}
	l.ackDue = true
	seq := le.Uint32(pkt[4:])
	d := int32(seq - l.expect)
	if d < 0 {
		l.Stats.Duplicates++
		return nil
	}
	if int(d) >= l.cfg.Window {
		l.Stats.OutOfWindow++
		return nil
	}
	s := &l.rwin[seq%uint32(l.cfg.Window)]
	if s.has {
		l.Stats.Duplicates++
		return nil
	}
	c := l.getPkt()
	if cap(c) < len(pkt) {
		c = make([]byte, 0, len(pkt))
	}
	s.pkt = append(c, pkt...)
	s.has = true
	var err error
	for {
		s := &l.rwin[l.expect%uint32(l.cfg.Window)]
		if !s.has {
			break
		}
		p := s.pkt
		s.pkt, s.has = nil, false
		l.expect++
		if p[1]&flFirst != 0 {
			l.asm = l.asm[:0]
			l.inMsg = true
		}
		if l.inMsg && len(l.asm)+len(p)-LinkHeader > l.cfg.MaxMsg {
			// Drop the message: its remaining fragments are skipped up
			// to the next first fragment.
			l.inMsg = false
			l.asm = l.asm[:0]
			l.Stats.TooLong++
			if err == nil {
				err = fmt.Errorf("proto: link from rank %d: message of more than %d bytes: %w", l.cfg.Peer, l.cfg.MaxMsg, ErrLinkTooLong)
			}
		}
		if l.inMsg {
			l.asm = append(l.asm, p[LinkHeader:]...)
			if p[1]&flLast != 0 {
				var m []byte
				if n := len(l.msgFree); n > 0 {
					m = l.msgFree[n-1][:0]
					l.msgFree = l.msgFree[:n-1]
				}
				l.msgs = append(l.msgs, append(m, l.asm...))
				l.inMsg = false
				l.Stats.Delivered++
			}
		}
		l.putPkt(p)
	}
	return err
}

// ack processes a cumulative and a selective acknowledgement.
func (l *Link) ack(now time.Time, cum uint32, sack uint64) {
	if seqLT(l.next, cum) {
		return // acknowledges packets never sent: ignore
	}
	for seqLT(l.una, cum) {
		s := &l.win[l.una%uint32(l.cfg.Window)]
		l.acked = append(l.acked, s.pkt)
		*s = txSlot{}
		l.una++
	}
	if sack == 0 {
		return
	}
	later := 0
	for i := 0; i < 64; i++ {
		if sack&(1<<i) == 0 {
			continue
		}
		seq := cum + 1 + uint32(i)
		if !seqLT(seq, l.next) {
			break
		}
		if seqLT(seq, l.una) {
			// A stale acknowledgement (it was overtaken): this packet is
			// acknowledged and its slot may hold a newer one.
			continue
		}
		l.win[seq%uint32(l.cfg.Window)].sacked = true
		later++
	}
	if later >= 3 && l.una != l.next {
		s := &l.win[l.una%uint32(l.cfg.Window)]
		if !s.sacked && !s.fast && s.pkt != nil {
			s.fast = true
			s.sent = now
			l.out = append(l.out, s.pkt)
			l.Stats.FastRetransmits++
		}
	}
}

// Tick retransmits packets whose timeout expired by now and sends queued
// packets the window has room for.
func (l *Link) Tick(now time.Time) {
	for seq := l.una; seq != l.next; seq++ {
		s := &l.win[seq%uint32(l.cfg.Window)]
		if s.sacked || s.pkt == nil || now.Sub(s.sent) < s.rto {
			continue
		}
		s.sent = now
		s.rto = min(2*s.rto, l.cfg.MaxRTO)
		l.out = append(l.out, s.pkt)
		l.Stats.Retransmits++
	}
	l.fill(now)
}

// NextTimeout returns when the earliest retransmission is due, and false
// when nothing is waiting for an acknowledgement.
func (l *Link) NextTimeout() (time.Time, bool) {
	var t time.Time
	ok := false
	for seq := l.una; seq != l.next; seq++ {
		s := &l.win[seq%uint32(l.cfg.Window)]
		if s.sacked || s.pkt == nil {
			continue
		}
		if d := s.sent.Add(s.rto); !ok || d.Before(t) {
			t, ok = d, true
		}
	}
	return t, ok
}

// Idle reports whether every message sent has been acknowledged.
func (l *Link) Idle() bool { return l.una == l.next && l.qhead == len(l.queue) }

// HasReady reports whether Ready would return anything.
func (l *Link) HasReady() bool { return len(l.out) > 0 || len(l.msgs) > 0 || l.ackDue }

// Ready returns what to do now. Every packet carries the current
// acknowledgement; an acknowledgement-only packet is added when one is
// owed and no data packet carries it.
func (l *Link) Ready() Ready {
	le := binary.LittleEndian
	var sack uint64
	if l.ackDue || len(l.out) > 0 {
		for i := 0; i < 64 && i+1 < l.cfg.Window; i++ {
			if l.rwin[(l.expect+1+uint32(i))%uint32(l.cfg.Window)].has {
				sack |= 1 << i
			}
		}
	}
	for _, p := range l.out {
		le.PutUint32(p[8:], l.expect)
		le.PutUint64(p[12:], sack)
	}
	if l.ackDue && len(l.out) == 0 {
		a := l.ackPkt[:]
		clear(a)
		a[0] = pktAck
		le.PutUint32(a[8:], l.expect)
		le.PutUint64(a[12:], sack)
		l.out = append(l.out, a)
		l.Stats.Acks++
	}
	l.ackDue = false
	return Ready{Packets: l.out, Messages: l.msgs}
}

// Advance tells the Link that the last Ready was carried out.
func (l *Link) Advance() {
	clear(l.out)
	l.out = l.out[:0]
	for _, p := range l.acked {
		l.putPkt(p)
	}
	clear(l.acked)
	l.acked = l.acked[:0]
	for _, m := range l.msgs {
		if len(l.msgFree) < 16 {
			l.msgFree = append(l.msgFree, m)
		}
	}
	clear(l.msgs)
	l.msgs = l.msgs[:0]
}
