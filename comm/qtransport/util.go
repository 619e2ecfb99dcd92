package qtransport

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// scatterFrom copies src into the pieces of dst, in order.
func scatterFrom(dst [][]byte, src []byte) {
	for _, b := range dst {
		if len(src) == 0 {
			return
		}
		src = src[copy(b, src):]
	}
}

// prefault makes the pages of b resident and writable now, so that the
// first messages through fresh receive buffers or a fresh bounce ring do
// not each pay a page fault: on a virtual machine the first touch of a page
// can cost tens of microseconds (the hypervisor builds its own mappings
// then), far more than a message. It asks the kernel to populate the whole
// pages of b in one call, which is several times cheaper per page than
// faulting them one by one, then writes to every page from this process,
// which populating alone does not do for the hypervisor's mappings. b must
// hold no data yet.
func prefault(b []byte) {
	if len(b) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := int((pageSize - base%pageSize) % pageSize)
	if hi := len(b) - (len(b)-lo)%pageSize; lo < hi {
		// An error (an old kernel) only leaves the work to the loop below.
		_ = unix.Madvise(b[lo:hi], unix.MADV_POPULATE_WRITE)
	}
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
	b[len(b)-1] = 0
}

// pageSize is the granule of prefault (the common page size; a larger
// one only makes prefault touch some pages twice).
const pageSize = 4096

// warm writes zeros over the whole capacity of s, just made, and returns s:
// the first use of every page of a queue's bookkeeping then costs nothing
// (see prefault).
func warm[S ~[]E, E any](s S) S {
	clear(s[:cap(s)])
	return s
}
