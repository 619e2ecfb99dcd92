package shm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
)

// peer is another device (possibly in this process) whose main segment this
// device has mapped.
type peer struct {
	dev    *Device // the local device
	name   string
	rank   int
	pid    int
	devID  uint32
	seg    *segment
	hdr    []byte
	lay    layout
	prefix string
	cma    bool // the peer allows process_vm_readv/writev

	mu     sync.Mutex
	allocs atomic.Pointer[[]*segment] // by allocation id, copy on write
	all    []*segment

	lastCheck atomic.Int64 // unix nanoseconds of the last liveness check
	dead      atomic.Bool
}

// attachPeer maps and validates a peer's main segment. d.mu is held.
func attachPeer(d *Device, a addrInfo) (*peer, error) {
	seg, err := openSegment(d.opt.dir, a.name, hdrBytes, maxSegBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: rank %d: %v", rdmaio.ErrBadAddress, a.rank, err)
	}
	p := &peer{dev: d, name: a.name, rank: a.rank, pid: a.pid, devID: a.devID, seg: seg, hdr: seg.mem[:hdrBytes]}
	if err := p.validate(d); err != nil {
		seg.unmap()
		return nil, fmt.Errorf("%w: rank %d (%s): %w", rdmaio.ErrBadAddress, a.rank, a.name, err)
	}
	empty := []*segment{}
	p.allocs.Store(&empty)
	// The last expected peer to map a segment unlinks it: from then on a
	// crash leaves nothing behind.
	if n := atomic.AddUint32(p32(p.hdr, hMapped), 1); n == load32(p.hdr, hExpect) {
		_ = seg.unlink()
	}
	return p, nil
}

const maxSegBytes = 1 << 40

func (p *peer) validate(d *Device) error {
	h := p.hdr
	if string(h[hMagic:hMagic+8]) != segMagic || get32(h, hVersion) != layoutVersion {
		return fmt.Errorf("not an shm segment of this version")
	}
	if get32(h, hDevID) != p.devID || int(get32(h, hPid)) != p.pid || int(get32(h, hRank)) != p.rank {
		return fmt.Errorf("segment belongs to another device")
	}
	jl := int(get32(h, hJobLen))
	if jl > maxJob || string(h[hJob:hJob+jl]) != d.cfg.Job {
		return fmt.Errorf("segment of job %q, not %q: %w", string(h[hJob:hJob+min(jl, maxJob)]), d.cfg.Job, rdmaio.ErrWrongJob)
	}
	lay, err := newLayout(int(get32(h, hMaxCQ)), int(get32(h, hMaxSRQ)), int(get32(h, hMaxMR)),
		int(get32(h, hMaxQP)), int(get32(h, hRingBytes)), int(get32(h, hMTU)))
	if err != nil {
		return err
	}
	if lay.size > len(p.seg.mem) || uint64(lay.size) != get64(h, hSegSize) {
		return fmt.Errorf("segment of %d bytes does not hold its layout (%d bytes)", len(p.seg.mem), lay.size)
	}
	p.lay = lay
	pl := int(get32(h, hPrefixLen))
	if pl == 0 || pl > maxPrefix {
		return fmt.Errorf("bad name prefix")
	}
	p.prefix = string(h[hPrefix : hPrefix+pl])
	p.cma = get32(h, hFlags)&flagCMA != 0
	return nil
}

// Values of WorkCompletion.VendorErr that tell why work completed with
// StatusRetryExcErr. Other error completions may carry an errno of a failed
// process_vm_readv/writev instead.
const (
	VendorPeerClosed  = 0x10001 // the peer device was closed
	VendorPeerExited  = 0x10002 // the peer process no longer exists
	VendorQPDestroyed = 0x10003 // the remote QP was destroyed
	VendorQPNotReady  = 0x10004 // the remote QP is in ERR or RESET
)

// gone returns why the peer can no longer respond (VendorPeerClosed,
// VendorPeerExited), or 0. With deep set it also asks the kernel whether the
// peer process still exists, at most every deadCheckInterval; callers set it
// only every so many calls, which keeps the clock and the system call off
// the hot path.
func (p *peer) gone(deep bool) uint32 {
	if load32(p.hdr, hClosed) != 0 {
		return VendorPeerClosed
	}
	if p.dead.Load() {
		return VendorPeerExited
	}
	if !deep {
		return 0
	}
	now := time.Now().UnixNano()
	last := p.lastCheck.Load()
	if now-last >= int64(deadCheckInterval) && p.lastCheck.CompareAndSwap(last, now) {
		if err := unix.Kill(p.pid, 0); err == unix.ESRCH {
			p.dead.Store(true)
			return VendorPeerExited
		}
	}
	return 0
}

// qpCtl returns the control slot of the peer's QP qpn, or nil when qpn does
// not name an existing QP.
func (p *peer) qpCtl(qpn uint32) []byte {
	i := int(qpn & 0xffff)
	if i >= p.lay.maxQP || qpn == 0 {
		return nil
	}
	c := p.seg.mem[p.lay.qp(i) : p.lay.qp(i)+qpCtlBytes]
	if load32(c, cQPN) != qpn {
		return nil
	}
	return c
}

// ring returns the inbound ring of the peer's QP qpn.
func (p *peer) ring(qpn uint32) []byte {
	i := int(qpn & 0xffff)
	return p.seg.mem[p.lay.ring(i) : p.lay.ring(i)+p.lay.ringBytes]
}

// doorbell returns the peer's CQ doorbell i, or nil when out of range.
func (p *peer) doorbell(i uint32) []byte {
	if int(i) >= p.lay.maxCQ {
		return nil
	}
	o := p.lay.cqdb(int(i))
	return p.seg.mem[o : o+cqdbBytes]
}

// postedWord returns the word that counts the receive WRs of the peer's QP
// whose control slot is ctl (its own or its SRQ's) and whether it is an
// SRQ's.
func (p *peer) postedWord(ctl []byte) (w *int64, srq bool) {
	s := int32(get32(ctl, cSRQ))
	if s >= 0 && int(s) < p.lay.maxSRQ {
		return pi64(p.seg.mem, p.lay.srq(int(s))+sPosted), true
	}
	return pi64(ctl, cPosted), false
}

// mrEntry returns the peer's MR table entry for key, or nil when the key's
// index is out of range.
func (p *peer) mrEntry(key uint32) []byte {
	i := int(key>>8) - 1
	if i < 0 || i >= p.lay.maxMR {
		return nil
	}
	o := p.lay.mr(i)
	return p.seg.mem[o : o+mrBytes]
}

// allocSeg returns the data part of the peer's allocation id, mapping it the
// first time.
func (p *peer) allocSeg(id uint32) ([]byte, error) {
	if s := *p.allocs.Load(); int(id) < len(s) && s[id] != nil {
		return s[id].mem[pageSize:], nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := *p.allocs.Load()
	if int(id) < len(s) && s[id] != nil {
		return s[id].mem[pageSize:], nil
	}
	if id > 1<<24 {
		return nil, fmt.Errorf("allocation id %d out of range", id)
	}
	seg, err := openSegment(p.dev.opt.dir, fmt.Sprintf("%s-a%d", p.prefix, id), 2*pageSize, maxAlloc+pageSize)
	if err != nil {
		return nil, err
	}
	if string(seg.mem[:8]) != allocMagic {
		seg.unmap()
		return nil, fmt.Errorf("allocation %d of rank %d: bad magic", id, p.rank)
	}
	if n := atomic.AddUint32(p32(seg.mem, aMapped), 1); n == load32(seg.mem, aExpect) {
		_ = seg.unlink()
	}
	ns := make([]*segment, max(len(s), int(id)+1))
	copy(ns, s)
	ns[id] = seg
	p.allocs.Store(&ns)
	p.all = append(p.all, seg)
	return seg.mem[pageSize:], nil
}

func (p *peer) unmap() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.all {
		_ = s.unmap()
	}
	p.all = nil
	empty := []*segment{}
	p.allocs.Store(&empty)
	_ = p.seg.unmap()
}
