package qtransport

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/jiarun/jia/comm/internal/qpbind"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/rdmaio"
)

// region is a registered buffer: one memory region per device, shared by
// the Register calls and transfers that use memory inside it, and kept in a
// bounded cache for reuse when none does (see Options.RegCache).
type region struct {
	buf    []byte
	lo, hi uintptr // address range of buf
	base   uint64  // address of buf[0] in the regions' address space
	mrs    []rdmaio.MR
	key    uint64
	refs   int    // Register exposures and transfers using it
	tick   uint64 // last use, for eviction
}

func (r *region) deregister() []error {
	var errs []error
	for _, mr := range r.mrs {
		if err := mr.Deregister(); err != nil {
			errs = append(errs, err)
		}
	}
	r.mrs = nil
	return errs
}

// sge returns the SGE of b (inside r) on device slot.
func (r *region) sge(slot int, b []byte) rdmaio.SGE {
	mr := r.mrs[slot]
	return rdmaio.SGE{Addr: mr.Addr() + uint64(addrOf(b)-r.lo), Length: uint32(len(b)), LKey: mr.LKey()}
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// lookup returns a registration that covers buf, with one more
// reference, or nil.
func (t *Transport) lookup(buf []byte) *region {
	lo := addrOf(buf)
	hi := lo + uintptr(len(buf))
	t.regMu.Lock()
	defer t.regMu.Unlock()
	for _, r := range t.regList {
		if r.lo <= lo && hi <= r.hi {
			r.refs++
			t.regTick++
			r.tick = t.regTick
			return r
		}
	}
	return nil
}

// acquire returns a registration that covers buf, from the cache or new,
// with one more reference.
func (t *Transport) acquire(buf []byte) (*region, error) {
	if r := t.lookup(buf); r != nil {
		return r, nil
	}
	lo := addrOf(buf)
	hi := lo + uintptr(len(buf))
	r := &region{buf: buf, lo: lo, hi: hi}
	if len(t.devs) == 0 {
		// A single rank: the key only names the buffer for copies to self.
		t.regMu.Lock()
		t.nextKey++
		r.key = t.nextKey
		t.regMu.Unlock()
	} else {
		r.mrs = make([]rdmaio.MR, 0, len(t.devs))
		for i, d := range t.devs {
			mr, err := d.pd.RegMR(buf, accessRegion)
			if err != nil {
				r.deregister()
				return nil, t.errf("register %d bytes on device %d (%s): %w", len(buf), i, d.dev.Provider(), err)
			}
			r.mrs = append(r.mrs, mr)
			r.key |= uint64(mr.RKey()) << (32 * i)
		}
		r.base = r.mrs[0].Addr()
	}
	t.regMu.Lock()
	if _, dup := t.regs[r.key]; dup {
		t.regMu.Unlock()
		r.deregister()
		return nil, t.errf("register: the provider reused key %#x of a live region", r.key)
	}
	r.refs = 1
	t.regCount++
	t.regTick++
	r.tick = t.regTick
	t.regs[r.key] = r
	t.regList = append(t.regList, r)
	t.regBytes += len(buf)
	victims := t.evictLocked()
	t.regMu.Unlock()
	t.dropRegions(victims)
	return r, nil
}

// release drops a reference; idle registrations beyond the cache's bounds
// are deregistered.
func (t *Transport) release(r *region) error {
	t.regMu.Lock()
	r.refs--
	var victims []*region
	if r.refs == 0 {
		victims = t.evictLocked()
	}
	t.regMu.Unlock()
	return t.dropRegions(victims)
}

// evictLocked removes the least recently used idle registrations while
// more than Options.RegCache of them, or of Options.RegCacheBytes, are
// idle (regMu held). It returns them for dropRegions.
func (t *Transport) evictLocked() []*region {
	var victims []*region
	for {
		idle, idleBytes := 0, 0
		var oldest *region
		oi := -1
		for i, r := range t.regList {
			if r.refs == 0 {
				idle++
				idleBytes += len(r.buf)
				if oldest == nil || r.tick < oldest.tick {
					oldest, oi = r, i
				}
			}
		}
		if oldest == nil || idle <= t.opt.RegCache && idleBytes <= t.opt.RegCacheBytes {
			return victims
		}
		t.regList = append(t.regList[:oi], t.regList[oi+1:]...)
		delete(t.regs, oldest.key)
		t.regBytes -= len(oldest.buf)
		victims = append(victims, oldest)
	}
}

func (t *Transport) dropRegions(rs []*region) error {
	var errs []error
	for _, r := range rs {
		errs = append(errs, r.deregister()...)
	}
	if len(errs) > 0 {
		return t.errf("deregister: %w", errors.Join(errs...))
	}
	return nil
}

// Register registers buf for remote read and write on every device (or
// reuses a cached registration that covers it). The returned Region's Key
// holds each device's remote key (32 bits per device), its Addr the
// address of buf[0] in the regions' address space. An empty buf gives the
// zero Region, which reads and writes of zero bytes accept.
func (t *Transport) Register(buf []byte) (transport.Region, error) {
	if t.closed.Load() {
		return transport.Region{}, t.errf("register: %w", transport.ErrClosed)
	}
	if !t.oneSided {
		return transport.Region{}, t.errf("register: %w", transport.ErrNotSupported)
	}
	if len(buf) == 0 {
		return transport.Region{}, nil
	}
	r, err := t.acquire(buf)
	if err != nil {
		return transport.Region{}, err
	}
	return transport.Region{Key: r.key, Addr: r.base + uint64(addrOf(buf)-r.lo)}, nil
}

// Deregister ends the exposure of a region from Register. With the
// registration cache (Options.RegCache) the memory stays registered while
// the cache keeps it, for the next Register or transfer that uses it.
func (t *Transport) Deregister(reg transport.Region) error {
	if reg == (transport.Region{}) {
		return nil
	}
	t.regMu.Lock()
	r := t.regs[reg.Key]
	if r == nil || r.refs == 0 || reg.Addr < r.base || reg.Addr-r.base > uint64(len(r.buf)) {
		t.regMu.Unlock()
		return t.errf("deregister region %#x@%#x: %w", reg.Key, reg.Addr, transport.ErrRegion)
	}
	t.regMu.Unlock()
	return t.release(r)
}

// Read starts copying len(local[0])+len(local[1])+… bytes from rank src's
// region at remote into the local pieces with RDMA READ. Complete(id, err)
// reports the end from Poll.
func (t *Transport) Read(src int, remote transport.Region, local [][]byte, id uint64) error {
	return t.oneSidedOp(recRead, src, remote, local, id, false)
}

var _ transport.ReadBatcher = (*Transport)(nil)

// ReadHeld is Read, except that the READ may stay in the peer's chain of
// work requests, to be posted with the next operation to the peer, by the
// next Flush, Poll, Wait, Send or Close, or by the progress goroutine once
// the owner has not polled for progressGrace (transport.ReadBatcher).
func (t *Transport) ReadHeld(src int, remote transport.Region, local [][]byte, id uint64) error {
	return t.oneSidedOp(recRead, src, remote, local, id, true)
}

// Write starts copying the local pieces into rank dst's region at remote
// with RDMA WRITE. Complete(id, err) reports the end from Poll.
func (t *Transport) Write(dst int, remote transport.Region, local [][]byte, id uint64) error {
	return t.oneSidedOp(recWrite, dst, remote, local, id, false)
}

func (t *Transport) oneSidedOp(kind recKind, rank int, remote transport.Region, local [][]byte, id uint64, held bool) error {
	if uint(rank) >= uint(t.size) {
		return t.errf("%s rank %d of %d: %w", opName(kind), rank, t.size, transport.ErrRank)
	}
	if t.closed.Load() {
		return t.errf("%s rank %d: %w", opName(kind), rank, transport.ErrClosed)
	}
	if !t.oneSided {
		return t.errf("%s rank %d: %w", opName(kind), rank, transport.ErrNotSupported)
	}
	n := 0
	for _, b := range local {
		n += len(b)
	}
	if rank == t.rank {
		return t.selfOneSided(kind, remote, local, n, id)
	}
	if n == 0 {
		t.deferComplete(id, nil)
		return nil
	}
	p := t.peers[rank]
	rkey := uint32(remote.Key >> (32 * p.rslot))
	p.mu.Lock()
	err := p.oneSided(kind, rkey, remote.Addr, local, n, id, held)
	p.mu.Unlock()
	return err
}

// selfOneSided copies between the local pieces and a region of this rank.
func (t *Transport) selfOneSided(kind recKind, remote transport.Region, local [][]byte, n int, id uint64) error {
	if n > 0 {
		t.regMu.Lock()
		r := t.regs[remote.Key]
		t.regMu.Unlock()
		if r == nil || remote.Addr < r.base || remote.Addr-r.base > uint64(len(r.buf)) ||
			uint64(n) > uint64(len(r.buf))-(remote.Addr-r.base) {
			return t.errf("%s self: %d bytes at %#x of region %#x: %w", opName(kind), n, remote.Addr, remote.Key, transport.ErrRegion)
		}
		at := r.buf[remote.Addr-r.base:]
		if kind == recRead {
			scatterFrom(local, at[:n])
		} else {
			qpbind.Gather(at[:n], nil, local)
		}
	}
	t.deferComplete(id, nil)
	return nil
}

// String describes the transport, for logs.
func (t *Transport) String() string {
	return fmt.Sprintf("qtransport(rank %d of %d, %s)", t.rank, t.size, t.caps.Name)
}
