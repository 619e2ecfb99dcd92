package pager

import (
	"fmt"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/protocol"
	"github.com/jiarun/jia/shmem/uffd"
)

// region is one DSM region as the pager sees it: the program maps its memfd
// at addr and registered it with the userfaultfd; the pager maps the same
// memfd at view, which never faults and ignores the program's protection.
type region struct {
	first protocol.PageID
	n     int
	addr  uintptr // in the program
	memfd int
	view  []byte
	seq   uint64 // the collective call that allocated it
	freed bool
	// peerFD, by rank, is the memfd of the region at that rank (on this
	// host), for direct reads, or -1.
	peerFD []int
}

func (r *region) contains(p protocol.PageID) bool {
	return p >= r.first && uint64(p) < uint64(r.first)+uint64(r.n)
}

// memory is the engine.Memory of a pager: pages are installed into the
// program with UFFDIO_COPY (write-protected unless writable), unprotected
// with UFFDIO_WRITEPROTECT, read and written through the pager's view, and
// invalidated by punching a hole in the memfd, which empties the page from
// every mapping so that the program's next access faults as missing.
type memory struct {
	u       *uffd.FD
	ps      int
	regions []*region // live regions, by first page
	zero    []byte
	// waits holds the pages that threads of the program faulted on and
	// that are not mapped as they need yet: while there are any, the
	// program waits for the pager.
	waits map[protocol.PageID]struct{}
	// peerBits, by rank, is the bitmap of the pages of that rank (on this
	// host) read directly, or nil.
	peerBits []*bitmap
}

// resolved notes that the threads faulted on n pages from p run again.
func (m *memory) resolved(p protocol.PageID, n int) {
	if len(m.waits) == 0 {
		return
	}
	for i := range n {
		delete(m.waits, p+protocol.PageID(i))
	}
}

func (m *memory) find(p protocol.PageID) (*region, error) {
	i := sort.Search(len(m.regions), func(i int) bool {
		r := m.regions[i]
		return uint64(r.first)+uint64(r.n) > uint64(p)
	})
	if i < len(m.regions) && m.regions[i].contains(p) {
		return m.regions[i], nil
	}
	return nil, fmt.Errorf("page %d is in no mapped region", p)
}

func (m *memory) add(r *region) {
	m.regions = append(m.regions, r)
	sort.Slice(m.regions, func(i, j int) bool { return m.regions[i].first < m.regions[j].first })
}

func (m *memory) remove(r *region) {
	for i, x := range m.regions {
		if x == r {
			m.regions = append(m.regions[:i], m.regions[i+1:]...)
			return
		}
	}
}

// Page returns the pager's view of page p.
func (m *memory) Page(p protocol.PageID) ([]byte, error) {
	r, err := m.find(p)
	if err != nil {
		return nil, err
	}
	off := int(p-r.first) * m.ps
	return r.view[off : off+m.ps : off+m.ps], nil
}

func (m *memory) addr(p protocol.PageID) (uintptr, *region, error) {
	r, err := m.find(p)
	if err != nil {
		return 0, nil, err
	}
	return r.addr + uintptr(int(p-r.first)*m.ps), r, nil
}

// ReadPages copies consecutive pages from first into dst with pread(2)
// on the memfds: cheaper than touching them through the view, where the
// first access of each page maps it into the pager (a page fault, which
// costs tens of microseconds under some hypervisors).
func (m *memory) ReadPages(first protocol.PageID, dst []byte) error {
	for len(dst) > 0 {
		r, err := m.find(first)
		if err != nil {
			return err
		}
		off := int(first-r.first) * m.ps
		n := min(len(dst), r.n*m.ps-off)
		for done := 0; done < n; {
			k, err := unix.Pread(r.memfd, dst[done:n], int64(off+done))
			if err != nil {
				return fmt.Errorf("pread of page %d: %w", first, err)
			}
			if k == 0 {
				return fmt.Errorf("pread of page %d: end of the region's memfd", first)
			}
			done += k
		}
		dst = dst[n:]
		first += protocol.PageID(n / m.ps)
	}
	return nil
}

// WritePage writes b at offset off of page p with pwrite(2) on the memfd,
// without mapping the page into the pager.
func (m *memory) WritePage(p protocol.PageID, off int, b []byte) error {
	r, err := m.find(p)
	if err != nil {
		return err
	}
	if off < 0 || off+len(b) > m.ps {
		return fmt.Errorf("write of %d bytes at %d of page %d", len(b), off, p)
	}
	at := int64(int(p-r.first)*m.ps + off)
	for len(b) > 0 {
		k, err := unix.Pwrite(r.memfd, b, at)
		if err != nil {
			return fmt.Errorf("pwrite to page %d: %w", p, err)
		}
		b, at = b[k:], at+int64(k)
	}
	return nil
}

// InstallRun maps consecutive pages from first into the program with
// data, in one UFFDIO_COPY per region.
func (m *memory) InstallRun(first protocol.PageID, data []byte, writable bool) error {
	for len(data) > 0 {
		a, r, err := m.addr(first)
		if err != nil {
			return err
		}
		n := min(len(data), (r.n-int(first-r.first))*m.ps)
		if err := m.u.Copy(a, data[:n], !writable, false); err != nil {
			return err
		}
		m.resolved(first, n/m.ps)
		data = data[n:]
		first += protocol.PageID(n / m.ps)
	}
	return nil
}

// Install maps page p into the program with data (zeros when nil).
func (m *memory) Install(p protocol.PageID, data []byte, writable bool) error {
	a, _, err := m.addr(p)
	if err != nil {
		return err
	}
	if data == nil {
		data = m.zero
	}
	m.resolved(p, 1)
	return m.u.Copy(a, data, !writable, false)
}

// runs calls fn for each run of consecutive pages of one region.
func (m *memory) runs(pages []protocol.PageID, fn func(r *region, first protocol.PageID, n int) error) error {
	for i := 0; i < len(pages); {
		r, err := m.find(pages[i])
		if err != nil {
			return err
		}
		j := i + 1
		for j < len(pages) && pages[j] == pages[j-1]+1 && r.contains(pages[j]) {
			j++
		}
		if err := fn(r, pages[i], j-i); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// Protect write-protects pages in the program.
func (m *memory) Protect(pages []protocol.PageID) error {
	return m.runs(pages, func(r *region, first protocol.PageID, n int) error {
		return m.u.WriteProtect(r.addr+uintptr(int(first-r.first)*m.ps), uintptr(n*m.ps), true, false)
	})
}

// Unprotect makes page p writable and wakes its faulted threads.
func (m *memory) Unprotect(p protocol.PageID) error {
	a, _, err := m.addr(p)
	if err != nil {
		return err
	}
	m.resolved(p, 1)
	return m.u.WriteProtect(a, uintptr(m.ps), false, false)
}

// Zap drops pages from the memfd, so from every mapping.
func (m *memory) Zap(pages []protocol.PageID) error {
	return m.runs(pages, func(r *region, first protocol.PageID, n int) error {
		return uffd.PunchHole(r.memfd, int64(int(first-r.first)*m.ps), int64(n*m.ps))
	})
}

// Wake wakes the threads faulted on page p.
func (m *memory) Wake(p protocol.PageID) error {
	a, _, err := m.addr(p)
	if err != nil {
		return err
	}
	m.resolved(p, 1)
	return m.u.Wake(a, uintptr(m.ps))
}

// mapView maps the pager's view of a region's memfd.
func mapView(memfd, size int) ([]byte, error) {
	b, err := unix.Mmap(memfd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap of the region's memfd (%d bytes): %w", size, err)
	}
	return b, nil
}

// release unmaps the view, empties the memfd and closes it and the
// other ranks' memfds of the region.
func (r *region) release() {
	for i, fd := range r.peerFD {
		if fd >= 0 {
			unix.Close(fd)
			r.peerFD[i] = -1
		}
	}
	if r.view != nil {
		unix.Munmap(r.view)
		r.view = nil
	}
	if r.memfd >= 0 {
		uffd.PunchHole(r.memfd, 0, int64(len64(r)))
		unix.Close(r.memfd)
		r.memfd = -1
	}
}

func len64(r *region) int64 { return int64(r.n) * int64(unixPageSize) }

var unixPageSize = unix.Getpagesize()

func closeFD(fd int) { unix.Close(fd) }
