package shm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// pd is a protection domain.
type pd struct {
	dev *Device

	use provider.PDUse
}

func (p *pd) Close() error {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return d.errf("close pd: %w", err)
	}
	defer d.life.End()
	if err := p.use.Close(); err != nil {
		return d.errf("close pd: %w", err)
	}
	d.mu.Lock()
	delete(d.pds, p)
	d.mu.Unlock()
	return nil
}

// Allocation header (the first page of an allocation segment; the memory
// handed out starts at the second page).
const (
	aMapped = 8  // u32, atomic
	aExpect = 12 // u32
	aID     = 16 // u32
	aSize   = 24 // u64
)

// allocation is memory from PD.Alloc: a shared segment that peers map to
// reach registered regions in it directly.
type allocation struct {
	pd   *pd
	id   uint32
	seg  *segment
	data []byte
	regs int // registrations, guarded by Device.mu
}

func (p *pd) Alloc(size int) ([]byte, error) {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("alloc: %w", err)
	}
	defer d.life.End()
	if size <= 0 || size > maxAlloc {
		return nil, d.errf("alloc %d bytes: %w (want 1..%d)", size, rdmaio.ErrInvalidArgument, maxAlloc)
	}
	if err := p.use.Add(provider.ObjAlloc, 1); err != nil {
		return nil, d.errf("alloc: pd: %w", err)
	}
	d.mu.Lock()
	d.allocID++
	id := d.allocID
	d.mu.Unlock()
	seg, err := createSegment(d.opt.dir, fmt.Sprintf("%s-a%d", d.prefix, id), pageSize+roundUp(size, pageSize))
	if err != nil {
		p.use.Add(provider.ObjAlloc, -1)
		return nil, d.errf("alloc %d bytes: %w", size, err)
	}
	copy(seg.mem, allocMagic)
	put32(seg.mem, aID, id)
	put64(seg.mem, aSize, uint64(size))
	expect := 0
	if d.cfg.LocalSize > 1 {
		expect = d.cfg.LocalSize - 1
	}
	store32(seg.mem, aExpect, uint32(expect))
	if d.cfg.LocalSize == 1 {
		_ = seg.unlink()
	}
	a := &allocation{pd: p, id: id, seg: seg, data: seg.mem[pageSize : pageSize+size : pageSize+size]}
	d.mu.Lock()
	d.allocs = append(d.allocs, a)
	d.mu.Unlock()
	return a.data, nil
}

func (p *pd) Free(buf []byte) error {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return d.errf("free: %w", err)
	}
	defer d.life.End()
	d.mu.Lock()
	var a *allocation
	ai := -1
	for i, x := range d.allocs {
		if x.pd == p && sameMemory(buf, x.data) {
			a, ai = x, i
			break
		}
	}
	if a == nil {
		d.mu.Unlock()
		return d.errf("free: %w: buffer was not allocated by this PD's Alloc (or was freed)", rdmaio.ErrInvalidArgument)
	}
	if a.regs > 0 {
		d.mu.Unlock()
		return d.errf("free: allocation %d has %d registered regions: %w", a.id, a.regs, rdmaio.ErrInUse)
	}
	qps := append([]*qp(nil), d.qps...)
	srqs := append([]*srq(nil), d.srqs...)
	d.mu.Unlock()
	// No new work request can name the memory (it is not registered); look
	// for outstanding ones that still do.
	lo, hi := addr(a.data), addr(a.data)+uintptr(len(a.data))
	for _, q := range qps {
		if q != nil && q.references(lo, hi) {
			return d.errf("free: allocation %d is used by outstanding work requests of qp %d: %w", a.id, q.qpn, rdmaio.ErrInUse)
		}
	}
	for _, s := range srqs {
		if s != nil && s.references(lo, hi) {
			return d.errf("free: allocation %d is used by receive work requests of an SRQ: %w", a.id, rdmaio.ErrInUse)
		}
	}
	d.mu.Lock()
	if ai >= len(d.allocs) || d.allocs[ai] != a {
		ai = -1
		for i, x := range d.allocs {
			if x == a {
				ai = i
			}
		}
	}
	if ai < 0 {
		d.mu.Unlock()
		return d.errf("free: %w: buffer freed concurrently", rdmaio.ErrInvalidArgument)
	}
	d.allocs = append(d.allocs[:ai], d.allocs[ai+1:]...)
	d.mu.Unlock()
	p.use.Add(provider.ObjAlloc, -1)
	err1, err2 := a.seg.unlink(), a.seg.unmap()
	if err1 != nil || err2 != nil {
		return d.errf("free: %v %v", err1, err2)
	}
	return nil
}

// mr is a memory region.
type mr struct {
	pd     *pd
	buf    []byte
	base   uint64
	key    uint32
	access rdmaio.Access
	alloc  *allocation // nil for ordinary memory
	aoff   uint64      // offset of buf in alloc.data
	entry  []byte      // shared MR table entry
	dead   atomic.Bool
}

// zombies keeps regions whose deregistration timed out reachable, so that a
// peer still writing into one can never write into reused memory.
var zombies struct {
	sync.Mutex
	list []*mr
}

func (p *pd) RegMR(buf []byte, access rdmaio.Access) (rdmaio.MR, error) {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("register: %w", err)
	}
	defer d.life.End()
	if err := provider.CheckRegister(buf, access, maxAlloc); err != nil {
		return nil, d.errf("register: %w", err)
	}
	m := &mr{pd: p, buf: buf, base: uint64(addr(buf)), access: access}
	lo, hi := addr(buf), addr(buf)+uintptr(len(buf))
	d.mu.Lock()
	for _, a := range d.allocs {
		alo := addr(a.data)
		if a.pd == p && lo >= alo && hi <= alo+uintptr(len(a.data)) {
			m.alloc, m.aoff = a, uint64(lo-alo)
			a.regs++
			break
		}
	}
	d.mu.Unlock()
	undo := func() {
		if m.alloc != nil {
			d.mu.Lock()
			m.alloc.regs--
			d.mu.Unlock()
		}
	}
	if m.alloc == nil {
		if access&rdmaio.AccessRemoteAtomic != 0 {
			return nil, d.errf("register: %w: remote atomics need memory from PD.Alloc (ordinary Go memory is reached with process_vm_readv/writev, which is not atomic)", rdmaio.ErrNotSupported)
		}
		if access&(rdmaio.AccessRemoteRead|rdmaio.AccessRemoteWrite) != 0 && d.cmaErr != nil {
			return nil, d.errf("register: %w: remote access to ordinary Go memory needs process_vm_readv/writev, which is unavailable (%v); use memory from PD.Alloc", rdmaio.ErrNotSupported, d.cmaErr)
		}
	}
	if err := p.use.Add(provider.ObjMR, 1); err != nil {
		undo()
		return nil, d.errf("register: pd: %w", err)
	}
	key, err := d.mrs.Insert(m)
	if err != nil {
		undo()
		p.use.Add(provider.ObjMR, -1)
		return nil, d.errf("register: %w", err)
	}
	m.key = key
	// Ordinary Go memory needs no pinning: the Go heap does not move
	// objects, and m keeps buf reachable while the key is valid.
	o := d.lay.mr(provider.KeyIndex(key))
	e := d.main.mem[o : o+mrBytes]
	m.entry = e
	put32(e, mAccess, uint32(access))
	if m.alloc != nil {
		put32(e, mKind, kindShared)
		put32(e, mSeg, m.alloc.id)
		put64(e, mSegOff, m.aoff)
	} else {
		put32(e, mKind, kindHeap)
		put32(e, mSeg, 0)
		put64(e, mSegOff, 0)
	}
	put64(e, mAddr, m.base)
	put64(e, mLen, uint64(len(buf)))
	put64(e, mVA, uint64(lo))
	store32(e, mKey, key)
	return m, nil
}

func (m *mr) LKey() uint32          { return m.key }
func (m *mr) RKey() uint32          { return m.key }
func (m *mr) Addr() uint64          { return m.base }
func (m *mr) Len() int              { return len(m.buf) }
func (m *mr) Access() rdmaio.Access { return m.access }
func (m *mr) Bytes() []byte         { return m.buf }

// invalidate withdraws the key from peers and waits until none is inside the
// region.
func (m *mr) invalidate(deadline time.Time) error {
	store32(m.entry, mKey, 0)
	for i := 0; load32(m.entry, mInuse) != 0; i++ {
		if time.Now().After(deadline) {
			zombies.Lock()
			zombies.list = append(zombies.list, m)
			zombies.Unlock()
			return fmt.Errorf("mr %#x: a peer is still accessing the region; it stays allocated", m.key)
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return nil
}

func (m *mr) Deregister() error {
	d := m.pd.dev
	if err := d.life.Begin(); err != nil {
		return d.errf("deregister: %w", err)
	}
	defer d.life.End()
	if !m.dead.CompareAndSwap(false, true) {
		return d.errf("deregister mr %#x: %w", m.key, rdmaio.ErrClosed)
	}
	// Withdraw the key from peers first and wait for those inside the
	// region; only then free the key slot (a new registration may reuse it
	// at once).
	err := m.invalidate(time.Now().Add(deregisterTimeout))
	d.mrs.Remove(m.key)
	// Grace period: a post (or a delivery of an RDMA WRITE with immediate)
	// that looked the key up before Remove finishes under its queue's lock;
	// after this no new work request can name it.
	d.mu.Lock()
	qps := append([]*qp(nil), d.qps...)
	srqs := append([]*srq(nil), d.srqs...)
	d.mu.Unlock()
	for _, q := range qps {
		if q != nil && q.pd == m.pd {
			q.smu.Lock()
			q.smu.Unlock() //nolint:staticcheck // empty critical section: grace period
			q.rmu.Lock()
			q.rmu.Unlock() //nolint:staticcheck
		}
	}
	for _, s := range srqs {
		if s != nil && s.pd == m.pd {
			s.mu.Lock()
			s.mu.Unlock() //nolint:staticcheck
		}
	}
	m.pd.use.Add(provider.ObjMR, -1)
	if m.alloc != nil {
		d.mu.Lock()
		m.alloc.regs--
		d.mu.Unlock()
	}
	if err != nil {
		return d.errf("deregister: %w", err)
	}
	return nil
}

// ah is an address handle.
type ah struct {
	pd     *pd
	peer   *peer
	closed atomic.Bool
}

func (p *pd) CreateAH(attr rdmaio.AHAttr) (rdmaio.AH, error) {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("create ah: %w", err)
	}
	defer d.life.End()
	pe, err := d.peerFor(attr.Addr)
	if err != nil {
		return nil, d.errf("create ah: %w", err)
	}
	if err := p.use.Add(provider.ObjAH, 1); err != nil {
		return nil, d.errf("create ah: pd: %w", err)
	}
	return &ah{pd: p, peer: pe}, nil
}

func (a *ah) Close() error {
	if !a.closed.CompareAndSwap(false, true) {
		return a.pd.dev.errf("close ah: %w", rdmaio.ErrClosed)
	}
	a.pd.use.Add(provider.ObjAH, -1)
	return nil
}
