package qtransport_test

import (
	"testing"
	"unsafe"

	"github.com/jiarun/jia/comm/qtransport"
)

// TestReceiveBuffersReady checks that New leaves the page where small
// messages land resident in every receive buffer, so that the first pass
// through the pool does not fault, and that buffers of more than a page
// start on page boundaries.
func TestReceiveBuffersReady(t *testing.T) {
	const page = 4096
	for _, eager := range []int{1024, 8 << 10} {
		trs := open(t, 2, qtransport.Options{EagerLimit: eager})
		for r, tr := range trs {
			slab, bs := tr.RecvSlab()
			if uintptr(unsafe.Pointer(&slab[0]))%page != 0 {
				t.Fatalf("eager %d, rank %d: receive slab not page-aligned", eager, r)
			}
			if bs > page && bs%page != 0 {
				t.Errorf("eager %d, rank %d: buffer size %d is not a multiple of the page", eager, r, bs)
			}
			vec := make([]byte, (len(slab)+page-1)/page)
			if err := qtransport.Mincore(slab, vec); err != nil {
				t.Fatalf("mincore: %v", err)
			}
			for off := 0; off < len(slab); off += bs {
				if vec[off/page]&1 == 0 {
					t.Fatalf("eager %d, rank %d: first page of the buffer at %d not resident", eager, r, off)
				}
			}
		}
	}
}

// TestLazyLeavesReceiveBuffers checks that Options.Lazy leaves the pages of
// the receive buffers to the first messages.
func TestLazyLeavesReceiveBuffers(t *testing.T) {
	const page = 4096
	trs := open(t, 2, qtransport.Options{EagerLimit: 8 << 10, Lazy: true})
	for r, tr := range trs {
		slab, _ := tr.RecvSlab()
		vec := make([]byte, (len(slab)+page-1)/page)
		if err := qtransport.Mincore(slab, vec); err != nil {
			t.Fatalf("mincore: %v", err)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		if n != 0 {
			t.Errorf("rank %d: %d of %d pages of the receive buffers resident before any message", r, n, len(vec))
		}
	}
}
