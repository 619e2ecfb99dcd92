package tcp

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// pd is a protection domain.
type pd struct {
	dev *Device

	use provider.PDUse
}

// Close releases the PD. It fails with ErrInUse while objects created from
// it remain.
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

// allocation is memory from PD.Alloc: anonymous memory outside the Go heap,
// page aligned.
type allocation struct {
	pd    *pd
	mem   []byte
	regs  int // registrations inside, guarded by Device.mu
	stuck int // registrations whose deregistration timed out
}

func addr(b []byte) uintptr {
	if cap(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

func sameMemory(a, b []byte) bool { return len(a) == len(b) && addr(a) == addr(b) }

// Alloc returns size bytes of zeroed, page-aligned memory outside the Go
// heap. Any memory can be registered with this provider; Alloc is there for
// programs written for shm.
func (p *pd) Alloc(size int) ([]byte, error) {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("alloc: %w", err)
	}
	defer d.life.End()
	if size <= 0 || size > maxAlloc {
		return nil, d.errf("alloc %d bytes: %w (want 1..%d)", size, rdmaio.ErrInvalidArgument, int64(maxAlloc))
	}
	if err := p.use.Add(provider.ObjAlloc, 1); err != nil {
		return nil, d.errf("alloc: pd: %w", err)
	}
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		p.use.Add(provider.ObjAlloc, -1)
		return nil, d.errf("alloc %d bytes: %w", size, err)
	}
	d.mu.Lock()
	d.allocs = append(d.allocs, &allocation{pd: p, mem: mem})
	d.mu.Unlock()
	return mem, nil
}

// Free releases memory from Alloc. It fails while the memory is registered
// or referenced by outstanding work requests.
func (p *pd) Free(buf []byte) error {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return d.errf("free: %w", err)
	}
	defer d.life.End()
	d.mu.Lock()
	var a *allocation
	for _, x := range d.allocs {
		if x.pd == p && sameMemory(buf, x.mem) {
			a = x
			break
		}
	}
	if a == nil {
		d.mu.Unlock()
		return d.errf("free: %w: buffer was not allocated by this PD's Alloc (or was freed)", rdmaio.ErrInvalidArgument)
	}
	if a.regs > 0 || a.stuck > 0 {
		d.mu.Unlock()
		return d.errf("free: the allocation has %d registered regions: %w", a.regs+a.stuck, rdmaio.ErrInUse)
	}
	var qps []*qp
	for i := range d.qps {
		if q := d.qps[i].Load(); q != nil {
			qps = append(qps, q)
		}
	}
	srqs := append([]*srq(nil), d.srqs...)
	d.mu.Unlock()
	// No new work request can name the memory (it is not registered); look
	// for outstanding ones that still do.
	lo, hi := addr(a.mem), addr(a.mem)+uintptr(len(a.mem))
	for _, q := range qps {
		if q.references(lo, hi) {
			return d.errf("free: the allocation is used by outstanding work requests of qp %d: %w", q.qpn, rdmaio.ErrInUse)
		}
	}
	for _, s := range srqs {
		if s != nil && s.references(lo, hi) {
			return d.errf("free: the allocation is used by receive work requests of an SRQ: %w", rdmaio.ErrInUse)
		}
	}
	d.mu.Lock()
	found := false
	for i, x := range d.allocs {
		if x == a {
			d.allocs = append(d.allocs[:i], d.allocs[i+1:]...)
			found = true
			break
		}
	}
	d.mu.Unlock()
	if !found {
		return d.errf("free: %w: buffer freed concurrently", rdmaio.ErrInvalidArgument)
	}
	p.use.Add(provider.ObjAlloc, -1)
	if err := unix.Munmap(a.mem); err != nil {
		return d.errf("free: %w", err)
	}
	return nil
}

// mr is a memory region. Its address space is the buffer's virtual address,
// so that 8-byte aligned remote addresses are aligned in memory (atomics).
type mr struct {
	pd     *pd
	buf    []byte
	base   uint64
	key    uint32
	access rdmaio.Access
	alloc  *allocation
	dead   atomic.Bool
	inuse  atomic.Int32 // responder operations in progress on the region
}

// RegMR registers buf. The region keeps buf reachable until Deregister.
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
		alo := addr(a.mem)
		if a.pd == p && lo >= alo && hi <= alo+uintptr(len(a.mem)) {
			m.alloc = a
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
	return m, nil
}

func (m *mr) LKey() uint32          { return m.key }
func (m *mr) RKey() uint32          { return m.key }
func (m *mr) Addr() uint64          { return m.base }
func (m *mr) Len() int              { return len(m.buf) }
func (m *mr) Access() rdmaio.Access { return m.access }
func (m *mr) Bytes() []byte         { return m.buf }

// hold marks a responder operation on the region; it fails once the region
// is being deregistered.
func (m *mr) hold() bool {
	m.inuse.Add(1)
	if m.dead.Load() {
		m.inuse.Add(-1)
		return false
	}
	return true
}

func (m *mr) release() { m.inuse.Add(-1) }

// Deregister invalidates the keys and waits until no peer operation is
// still inside the region.
func (m *mr) Deregister() error {
	d := m.pd.dev
	if err := d.life.Begin(); err != nil {
		return d.errf("deregister: %w", err)
	}
	defer d.life.End()
	if !m.dead.CompareAndSwap(false, true) {
		return d.errf("deregister mr %#x: %w", m.key, rdmaio.ErrClosed)
	}
	d.mrs.Remove(m.key)
	var err error
	deadline := time.Now().Add(deregisterTimeout)
	for i := 0; m.inuse.Load() != 0; i++ {
		if time.Now().After(deadline) {
			err = fmt.Errorf("mr %#x: a peer operation is still in progress on the region", m.key)
			break
		}
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	// Grace period: a post that looked the key up before Remove finishes
	// under its queue's lock; after this no new work request can name it.
	for i := range d.qps {
		if q := d.qps[i].Load(); q != nil && q.pd == m.pd {
			q.mu.Lock()
			q.mu.Unlock() //nolint:staticcheck // empty critical section: grace period
		}
	}
	d.mu.Lock()
	srqs := append([]*srq(nil), d.srqs...)
	if m.alloc != nil {
		m.alloc.regs--
		if err != nil {
			m.alloc.stuck++
		}
	}
	d.mu.Unlock()
	for _, s := range srqs {
		if s != nil && s.pd == m.pd {
			s.mu.Lock()
			s.mu.Unlock() //nolint:staticcheck
		}
	}
	m.pd.use.Add(provider.ObjMR, -1)
	if err != nil {
		return d.errf("deregister: %w", err)
	}
	return nil
}

// ah is an address handle: a peer device's UD socket.
type ah struct {
	pd     *pd
	rank   int32
	devID  uint64
	sa     rawSockaddr
	closed atomic.Bool
}

// CreateAH creates an address handle for UD sends to the device whose
// address blob attr carries.
func (p *pd) CreateAH(attr rdmaio.AHAttr) (rdmaio.AH, error) {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("create ah: %w", err)
	}
	defer d.life.End()
	pa, err := decodeAddr(attr.Addr)
	if err != nil {
		return nil, d.errf("create ah: %w", err)
	}
	if pa.jobHash != d.jobHash {
		return nil, d.errf("create ah: %w: address of rank %d belongs to another job", rdmaio.ErrBadAddress, pa.rank)
	}
	if pa.udp.Addr().Is4() != d.udpAddr.Addr().Is4() {
		return nil, d.errf("create ah: %w: rank %d has a UD address of another family (%v)", rdmaio.ErrBadAddress, pa.rank, pa.udp)
	}
	if err := p.use.Add(provider.ObjAH, 1); err != nil {
		return nil, d.errf("create ah: pd: %w", err)
	}
	a := &ah{pd: p, rank: int32(pa.rank), devID: pa.devID}
	a.sa.set(pa.udp)
	return a, nil
}

// Close destroys the address handle.
func (a *ah) Close() error {
	if !a.closed.CompareAndSwap(false, true) {
		return a.pd.dev.errf("close ah: %w", rdmaio.ErrClosed)
	}
	a.pd.use.Add(provider.ObjAH, -1)
	return nil
}
