//go:build verbs

package verbs

/*
#include "jia_verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// pd is a protection domain. Its object sets are guarded by dev.mu.
type pd struct {
	dev    *Device
	p      *C.struct_ibv_pd
	use    provider.PDUse
	mrs    map[*mr]struct{}
	qps    map[*qp]struct{}
	srqs   map[*srq]struct{}
	ahs    map[*ah]struct{}
	allocs map[uintptr]*alloc
}

// alloc is memory from PD.Alloc: an anonymous mapping.
type alloc struct {
	mapped []byte
	size   int
	regs   int
}

func (a *alloc) base() uintptr { return uintptr(unsafe.Pointer(&a.mapped[0])) }

// begin takes dev.mu and checks that the PD is usable.
func (p *pd) begin(op string) error {
	if err := p.dev.begin(); err != nil {
		return p.dev.errf("%s: %w", op, err)
	}
	if _, ok := p.dev.pds[p]; !ok {
		p.dev.mu.Unlock()
		return p.dev.errf("%s: %w", op, rdmaio.ErrClosed)
	}
	return nil
}

// Alloc returns size bytes of zeroed anonymous memory, outside the Go heap.
func (p *pd) Alloc(size int) ([]byte, error) {
	if err := p.begin("alloc"); err != nil {
		return nil, err
	}
	defer p.dev.mu.Unlock()
	if size <= 0 || size > p.dev.maxMRSize {
		return nil, p.dev.errf("alloc: %w: size %d", rdmaio.ErrInvalidArgument, size)
	}
	page := unix.Getpagesize()
	m, err := unix.Mmap(-1, 0, (size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, p.dev.errf("alloc %d bytes: %w", size, err)
	}
	if err := p.use.Add(provider.ObjAlloc, 1); err != nil {
		unix.Munmap(m)
		return nil, p.dev.errf("alloc: %w", err)
	}
	a := &alloc{mapped: m, size: size}
	p.allocs[a.base()] = a
	return m[:size:size], nil
}

// Free releases memory from Alloc; it fails while the memory is registered.
func (p *pd) Free(buf []byte) error {
	if err := p.begin("free"); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	if len(buf) == 0 {
		return p.dev.errf("free: %w: empty buffer", rdmaio.ErrInvalidArgument)
	}
	a := p.allocs[uintptr(unsafe.Pointer(&buf[0]))]
	if a == nil || len(buf) != a.size {
		return p.dev.errf("free: %w: not memory from this PD's Alloc", rdmaio.ErrInvalidArgument)
	}
	if a.regs > 0 {
		return p.dev.errf("free: %d registrations remain: %w", a.regs, rdmaio.ErrInUse)
	}
	if p.referenced(uint64(a.base()), uint64(a.base())+uint64(a.size)) {
		return p.dev.errf("free: outstanding work requests use the memory: %w", rdmaio.ErrInUse)
	}
	return p.freeAlloc(a)
}

// referenced reports whether an outstanding work request of a QP or SRQ
// of the PD has an SGE in [lo, hi). dev.mu is held.
func (p *pd) referenced(lo, hi uint64) bool {
	for q := range p.qps {
		if q.sq.references(lo, hi) || q.rp != nil && q.rp.rq.references(lo, hi) {
			return true
		}
	}
	for s := range p.srqs {
		if s.rp.rq.references(lo, hi) {
			return true
		}
	}
	return false
}

func (p *pd) freeAlloc(a *alloc) error {
	delete(p.allocs, a.base())
	p.use.Add(provider.ObjAlloc, -1)
	if err := unix.Munmap(a.mapped); err != nil {
		return p.dev.errf("free: munmap: %w", err)
	}
	return nil
}

// allocOf returns the allocation that holds buf, if any. dev.mu is held.
func (p *pd) allocOf(buf []byte) *alloc {
	lo := uintptr(unsafe.Pointer(&buf[0]))
	for _, a := range p.allocs {
		if b := a.base(); lo >= b && lo-b+uintptr(len(buf)) <= uintptr(a.size) {
			return a
		}
	}
	return nil
}

// mr is a registered memory region. Go memory is pinned while registered.
type mr struct {
	pd     *pd
	m      *C.struct_ibv_mr
	buf    []byte
	access rdmaio.Access
	lkey   uint32
	rkey   uint32
	pin    runtime.Pinner
	alloc  *alloc
}

// RegMR registers buf (memory from Alloc, or Go memory, which is pinned).
func (p *pd) RegMR(buf []byte, access rdmaio.Access) (rdmaio.MR, error) {
	if err := provider.CheckRegister(buf, access, p.dev.maxMRSize); err != nil {
		return nil, p.dev.errf("register: %w", err)
	}
	if err := p.begin("register"); err != nil {
		return nil, err
	}
	defer p.dev.mu.Unlock()
	m := &mr{pd: p, buf: buf, access: access, alloc: p.allocOf(buf)}
	if m.alloc == nil {
		m.pin.Pin(&buf[0])
	}
	c, err := C.jia_reg_mr(p.p, C.uintptr_t(uintptr(unsafe.Pointer(&buf[0]))), C.size_t(len(buf)), C.int(accessFlags(access)))
	if c == nil {
		m.pin.Unpin()
		return nil, p.dev.errf("%w", regError(len(buf), errnoOf(err)))
	}
	if err := p.use.Add(provider.ObjMR, 1); err != nil {
		C.ibv_dereg_mr(c)
		m.pin.Unpin()
		return nil, p.dev.errf("register: %w", err)
	}
	m.m, m.lkey, m.rkey = c, uint32(c.lkey), uint32(c.rkey)
	if m.alloc != nil {
		m.alloc.regs++
	}
	p.mrs[m] = struct{}{}
	return m, nil
}

// LKey is the key local SGEs use.
func (m *mr) LKey() uint32 { return m.lkey }

// RKey is the key peers use.
func (m *mr) RKey() uint32 { return m.rkey }

// Addr is the virtual address of the first byte: verbs addresses regions
// by virtual address.
func (m *mr) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(&m.buf[0]))) }

// Len is the length of the region.
func (m *mr) Len() int { return len(m.buf) }

// Access is the rights the region was registered with.
func (m *mr) Access() rdmaio.Access { return m.access }

// Bytes returns the registered buffer.
func (m *mr) Bytes() []byte { return m.buf }

// Deregister invalidates the keys (the hardware stops every access before
// ibv_dereg_mr returns) and unpins Go memory.
func (m *mr) Deregister() error {
	p := m.pd
	if err := p.begin("deregister"); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	if _, ok := p.mrs[m]; !ok {
		return p.dev.errf("deregister: %w", rdmaio.ErrClosed)
	}
	return m.destroy()
}

// destroy deregisters m. dev.mu is held.
func (m *mr) destroy() error {
	p := m.pd
	delete(p.mrs, m)
	p.use.Add(provider.ObjMR, -1)
	if m.alloc != nil {
		m.alloc.regs--
	}
	rc, err := C.ibv_dereg_mr(m.m)
	m.pin.Unpin()
	if rc != 0 {
		return p.dev.errf("deregister: %w", rcErrno(rc, err))
	}
	return nil
}

// ah is an address handle.
type ah struct {
	pd *pd
	a  *C.struct_ibv_ah
}

// CreateAH creates an address handle for UD sends to the device whose
// address is attr.Addr.
func (p *pd) CreateAH(attr rdmaio.AHAttr) (rdmaio.AH, error) {
	peer, err := p.dev.peer(attr.Addr)
	if err != nil {
		return nil, p.dev.errf("create ah: %w", err)
	}
	spec, err := ahFor(&p.dev.local, &peer)
	if err != nil {
		return nil, p.dev.errf("create ah: %w", err)
	}
	if err := p.begin("create ah"); err != nil {
		return nil, err
	}
	defer p.dev.mu.Unlock()
	var cs C.struct_jia_ah
	cAH(&cs, &spec)
	c, cerr := C.jia_create_ah(p.p, &cs)
	if c == nil {
		return nil, p.dev.errf("create ah to rank %d: %w", peer.rank, errnoOf(cerr))
	}
	if err := p.use.Add(provider.ObjAH, 1); err != nil {
		C.ibv_destroy_ah(c)
		return nil, p.dev.errf("create ah: %w", err)
	}
	x := &ah{pd: p, a: c}
	p.ahs[x] = struct{}{}
	return x, nil
}

func cAH(c *C.struct_jia_ah, s *ahSpec) {
	*c = C.struct_jia_ah{}
	if s.global {
		c.global = 1
	}
	c.sgid_index = C.uint8_t(s.sgidIndex)
	c.hop_limit = C.uint8_t(s.hopLimit)
	c.port = C.uint8_t(s.port)
	c.dlid = C.uint16_t(s.dlid)
	for i, b := range s.dgid {
		c.dgid[i] = C.uint8_t(b)
	}
}

// Close destroys the address handle.
func (a *ah) Close() error {
	p := a.pd
	if err := p.begin("close ah"); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	if _, ok := p.ahs[a]; !ok {
		return p.dev.errf("close ah: %w", rdmaio.ErrClosed)
	}
	return a.destroy()
}

func (a *ah) destroy() error {
	p := a.pd
	delete(p.ahs, a)
	p.use.Add(provider.ObjAH, -1)
	if rc, err := C.ibv_destroy_ah(a.a); rc != 0 {
		return p.dev.errf("close ah: %w", rcErrno(rc, err))
	}
	return nil
}

// Close releases the PD; it fails with ErrInUse while objects remain.
func (p *pd) Close() error {
	if err := p.begin("close pd"); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	if err := p.use.Close(); err != nil {
		return p.dev.errf("close pd: %w", err)
	}
	delete(p.dev.pds, p)
	if rc, err := C.ibv_dealloc_pd(p.p); rc != 0 {
		return p.dev.errf("close pd: %w", rcErrno(rc, err))
	}
	return nil
}

// destroyAll destroys every object of the PD and the PD, for Device.Close.
// dev.mu is held.
func (p *pd) destroyAll() error {
	var errs []error
	for q := range p.qps {
		errs = append(errs, q.destroy())
	}
	for s := range p.srqs {
		errs = append(errs, s.destroy())
	}
	for a := range p.ahs {
		errs = append(errs, a.destroy())
	}
	for m := range p.mrs {
		errs = append(errs, m.destroy())
	}
	for _, a := range p.allocs {
		errs = append(errs, p.freeAlloc(a))
	}
	p.use.Close()
	delete(p.dev.pds, p)
	if rc, err := C.ibv_dealloc_pd(p.p); rc != 0 {
		errs = append(errs, fmt.Errorf("ibv_dealloc_pd: %w", rcErrno(rc, err)))
	}
	return errors.Join(errs...)
}
