package pager

import (
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/internal/procfd"
	"github.com/jiarun/jia/shmem/protocol"
)

// Direct reads between the ranks of one host (protocol.Config.Direct): a
// pager serves a read fault on a page homed on another rank of its host by
// reading the home's memfd itself (opened through /proc/<pid>/fd), with no
// round trip to the home's pager. Before it reads, it sets the page's bit
// in the home's bitmap, a memfd of one bit per page that every pager of
// the host maps; the home's pager collects its bits before every Lock,
// Unlock and Barrier of its program (collectShared) and steps them as
// protocol.EvShared, so that the writes it makes from then on become write
// notices. A reader that set a bit after the collection reads after it
// too, and so sees every write made before the release; later writes are
// noticed at the next one.

// bitmap is a page bitmap in shared memory.
type bitmap struct {
	fd    int
	words []uint64
}

// newBitmap makes a bitmap of pages bits in a memfd.
func newBitmap(pages int) (*bitmap, error) {
	fd, err := unix.MemfdCreate("jiarun-dsm-shared", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	size := (pages + 63) / 64 * 8
	size = (size + 4095) / 4096 * 4096
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ftruncate: %w", err)
	}
	return mapBitmap(fd, size)
}

// openBitmap maps the bitmap of descriptor fd of process pid.
func openBitmap(pid, fd int) (*bitmap, error) {
	f, size, err := procfd.Open(pid, fd, true)
	if err != nil {
		return nil, fmt.Errorf("the bitmap: %w", err)
	}
	return mapBitmap(f, int(size))
}

func mapBitmap(fd, size int) (*bitmap, error) {
	if size <= 0 || size%8 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("bitmap of %d bytes", size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &bitmap{fd: fd, words: unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), size/8)}, nil
}

// set sets the bit of page p.
func (b *bitmap) set(p protocol.PageID) error {
	w := int(p / 64)
	if w >= len(b.words) {
		return fmt.Errorf("page %d beyond the bitmap", p)
	}
	atomic.OrUint64(&b.words[w], 1<<(p%64))
	return nil
}

// collect clears the bits of pages [first, first+n) and appends the pages
// whose bit was set to out.
func (b *bitmap) collect(first protocol.PageID, n int, out []protocol.PageID) []protocol.PageID {
	end := uint64(first) + uint64(n)
	for w := uint64(first) / 64; w*64 < end && w < uint64(len(b.words)); w++ {
		mask := ^uint64(0)
		if lo := uint64(first); w*64 < lo {
			mask &^= 1<<(lo-w*64) - 1
		}
		if (w+1)*64 > end {
			mask &= 1<<(end-w*64) - 1
		}
		if atomic.LoadUint64(&b.words[w])&mask == 0 {
			continue
		}
		v := atomic.AndUint64(&b.words[w], ^mask) & mask
		for v != 0 {
			i := bits.TrailingZeros64(v)
			out = append(out, protocol.PageID(w*64+uint64(i)))
			v &= v - 1
		}
	}
	return out
}

// ReadDirect serves protocol.ActReadDirect: it marks the pages in their
// home's bitmap, then reads them from the home's memfds.
func (m *memory) ReadDirect(home int, pages []protocol.PageID, dst []byte) error {
	if home < 0 || home >= len(m.peerBits) || m.peerBits[home] == nil {
		return fmt.Errorf("no direct access to rank %d", home)
	}
	for i := 0; i < len(pages); {
		r, err := m.find(pages[i])
		if err != nil {
			return err
		}
		if home >= len(r.peerFD) || r.peerFD[home] < 0 {
			return fmt.Errorf("no direct access to rank %d's copy of page %d", home, pages[i])
		}
		j := i + 1
		for j < len(pages) && pages[j] == pages[j-1]+1 && r.contains(pages[j]) {
			j++
		}
		for _, p := range pages[i:j] {
			if err := m.peerBits[home].set(p); err != nil {
				return err
			}
		}
		buf := dst[i*m.ps : j*m.ps]
		off := int64(int(pages[i]-r.first) * m.ps)
		for done := 0; done < len(buf); {
			k, err := unix.Pread(r.peerFD[home], buf[done:], off+int64(done))
			if err != nil {
				return fmt.Errorf("pread of page %d from rank %d: %w", pages[i], home, err)
			}
			if k == 0 {
				return fmt.Errorf("pread of page %d from rank %d: end of its memfd", pages[i], home)
			}
			done += k
		}
		i = j
	}
	return nil
}

// openPeerRegion opens the memfds of a new region's homes on this host,
// for direct reads; a rank whose memfd cannot be opened is read through
// page requests from now on.
func (p *pager) openPeerRegion(reg *region, arrivals []*arrival) {
	reg.peerFD = make([]int, p.size)
	for r := range reg.peerFD {
		reg.peerFD[r] = -1
	}
	for r, a := range arrivals {
		if r == p.rank || r >= len(p.direct) || !p.direct[r] {
			continue
		}
		fd, _, err := procfd.Open(a.Pid, a.FD, false)
		if err != nil {
			p.direct[r] = false
			p.m.SetDirect(p.direct)
			continue
		}
		reg.peerFD[r] = fd
	}
}

// bitsSet reports whether other ranks read pages homed here directly
// since the last collection (collectShared).
func (p *pager) bitsSet() bool {
	for i := range p.bits.words {
		if atomic.LoadUint64(&p.bits.words[i]) != 0 {
			return true
		}
	}
	return false
}

// collectShared steps the pages homed here that other ranks read directly
// since the last collection, before a release of the program.
func (p *pager) collectShared() error {
	if p.bits == nil {
		return nil
	}
	pages := p.sharedBuf[:0]
	for _, r := range p.mem.regions {
		pages = p.bits.collect(r.first, r.n, pages)
	}
	p.sharedBuf = pages
	if len(pages) == 0 {
		return nil
	}
	return p.step(protocol.Event{Kind: protocol.EvShared, Pages: pages})
}
