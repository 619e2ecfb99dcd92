package tcp

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// sendUD transmits the posted datagrams: one sendmsg each from the
// device's UDP socket, header and payload gathered by the kernel. Like a UD
// transport they complete successfully whether or not they arrive. q.mu is
// held.
func (q *qp) sendUD() {
	depth := uint64(len(q.sq))
	for ; q.sqXmit < q.sqTail; q.sqXmit++ {
		e := &q.sq[q.sqXmit%depth]
		if e.done {
			continue // flushed, or a local protection error
		}
		e.done, e.status = true, rdmaio.StatusSuccess
		n := 0
		setIov(&q.udIov[n], e.hdr[:udHdrLen])
		n++
		if e.inline {
			if len(e.inl) > 0 {
				setIov(&q.udIov[n], e.inl)
				n++
			}
		} else {
			for _, b := range e.sg {
				if len(b) > 0 {
					setIov(&q.udIov[n], b)
					n++
				}
			}
		}
		q.udMsg.Name, q.udMsg.Namelen = e.ah.sa.ptr()
		q.udMsg.Iov = &q.udIov[0]
		q.udMsg.SetIovlen(n)
		if f := q.dev.faults; f != nil {
			f.send(q.dev, &q.udMsg, q.udIov[:n], &e.ah.sa)
			continue
		}
		_, _ = sysSendmsg(q.dev.ufd, &q.udMsg, 0) // a full socket buffer drops the datagram, as UD may
	}
}

// recvUD receives datagrams from the device's UDP socket and delivers them.
// pmu is held.
func (d *Device) recvUD() {
	for i := 0; i < udBudget; i++ {
		n, e := sysRecv(d.ufd, d.ubuf)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return
		}
		if n <= len(d.ubuf) {
			d.onDatagram(d.ubuf[:n])
		}
	}
}

// onDatagram delivers one datagram: it is dropped unless it carries this
// job's token, names this device and a UD QP that receives, has that QP's
// Q_Key, fits the MTU, and finds a receive posted.
func (d *Device) onDatagram(b []byte) {
	var h udHeader
	payload, err := h.decode(b)
	if err != nil || h.token != d.udToken || h.dstDev != d.devID || len(payload) > d.opt.mtu {
		return
	}
	q := d.lookupQP(h.dstQPN)
	if q == nil || q.typ != rdmaio.UD {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || !provider.Receives(q.State()) || h.qkey != q.qkey {
		return
	}
	id, st, ok := q.takeRecv()
	if !ok {
		return
	}
	if st == rdmaio.StatusSuccess && len(payload) > provider.Total(q.rsg) {
		st = rdmaio.StatusLocLenErr
	}
	if st == rdmaio.StatusSuccess {
		provider.Scatter(q.rsg, payload)
	}
	clear(q.rsg)
	wc := rdmaio.WorkCompletion{ID: id, Status: st, Opcode: rdmaio.WCRecv, ByteLen: uint32(len(payload)), Imm: h.imm,
		QPN: q.qpn, SrcQPN: h.srcQPN, SrcRank: int32(h.srcRank)}
	if h.flags&udImm != 0 {
		wc.Flags = rdmaio.WCWithImm
	}
	if st == rdmaio.StatusSuccess {
		q.recvCQ.push(&wc, nil, 0)
		return
	}
	prev := q.enterErr()
	q.recvCQ.push(&wc, nil, 0)
	q.afterErr(prev)
	q.completeSend()
}

// faultConfig is the UD fault injection of the options ud_drop, ud_dup,
// ud_delay, ud_reorder, ud_delay_time and ud_seed.
type faultConfig struct {
	drop, dup, delay, reorder float64
	delayTime                 time.Duration
	seed                      uint64
	seeded                    bool
}

func (f *faultConfig) active() bool {
	return f.drop > 0 || f.dup > 0 || f.delay > 0 || f.reorder > 0
}

// heldSlots bounds the datagrams the injector holds back at once; beyond it,
// datagrams picked for delay or reordering go out at once.
const heldSlots = 64

// held is a datagram held back by the injector.
type held struct {
	used      bool
	afterNext bool // reordered: goes out after the next datagram (or at due)
	due       time.Time
	sa        rawSockaddr
	buf       []byte
}

// injector applies UD faults at the sender, like a lossy network would:
// each datagram is dropped, duplicated, delayed or overtaken by the next
// one with the configured probabilities, decided by a seeded generator.
type injector struct {
	cfg faultConfig

	mu     sync.Mutex
	rng    *mrand.Rand
	held   []held
	iov    [1]unix.Iovec
	msg    unix.Msghdr
	counts FaultStats
}

func newInjector(cfg faultConfig, maxDgram int) *injector {
	seed := cfg.seed
	if !cfg.seeded {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	f := &injector{cfg: cfg, rng: mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), held: make([]held, heldSlots)}
	for i := range f.held {
		f.held[i].buf = make([]byte, 0, maxDgram)
	}
	f.msg.Iov = &f.iov[0]
	return f
}

func (f *injector) stats() FaultStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts
}

// send transmits (or not) one datagram described by msg.
func (f *injector) send(d *Device, msg *unix.Msghdr, iov []unix.Iovec, sa *rawSockaddr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng.Float64() < f.cfg.drop {
		f.counts.Dropped++
		return
	}
	dup := f.rng.Float64() < f.cfg.dup
	delay := f.rng.Float64() < f.cfg.delay
	reorder := !delay && f.rng.Float64() < f.cfg.reorder
	if dup {
		f.counts.Duplicated++
		_, _ = sysSendmsg(d.ufd, msg, 0)
	}
	if delay || reorder {
		if h := f.hold(iov, sa); h != nil {
			h.due = time.Now().Add(f.cfg.delayTime)
			h.afterNext = reorder
			if reorder {
				f.counts.Reordered++
			} else {
				f.counts.Delayed++
			}
			d.arm(h.due)
			return
		}
	}
	_, _ = sysSendmsg(d.ufd, msg, 0)
	// Datagrams held for reordering go out after this one.
	for i := range f.held {
		if h := &f.held[i]; h.used && h.afterNext {
			f.emit(d, h)
		}
	}
}

// hold copies a datagram into a free slot.
func (f *injector) hold(iov []unix.Iovec, sa *rawSockaddr) *held {
	for i := range f.held {
		h := &f.held[i]
		if h.used {
			continue
		}
		h.used, h.sa, h.buf = true, *sa, h.buf[:0]
		for _, v := range iov {
			h.buf = append(h.buf, unsafeBytes(v)...)
		}
		return h
	}
	return nil
}

// unsafeBytes returns the memory an iovec describes.
func unsafeBytes(v unix.Iovec) []byte { return unsafe.Slice(v.Base, int(v.Len)) }

// emit sends a held datagram and frees its slot. f.mu is held.
func (f *injector) emit(d *Device, h *held) {
	setIov(&f.iov[0], h.buf)
	f.msg.Name, f.msg.Namelen = h.sa.ptr()
	f.msg.SetIovlen(1)
	_, _ = sysSendmsg(d.ufd, &f.msg, 0)
	h.used = false
}

// release sends the held datagrams that are due and re-arms the timer for
// the others. pmu is held.
func (f *injector) release(d *Device, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var next time.Time
	for i := range f.held {
		h := &f.held[i]
		if !h.used {
			continue
		}
		if !now.Before(h.due) {
			f.emit(d, h)
		} else if next.IsZero() || h.due.Before(next) {
			next = h.due
		}
	}
	if !next.IsZero() {
		d.arm(next)
	}
}
