package qtransport_test

import (
	"testing"
	"unsafe"

	"github.com/jiarun/jia/comm/qtransport"
)

// TestReceiveBuffersReady checks that New leaves every page of every
// receive buffer resident, Options.Lazy or not, so that the first pass of
// messages larger than a page through the pool does not fault, and that
// buffers of more than a page start on page boundaries.
func TestReceiveBuffersReady(t *testing.T) {
	const page = 4096
	for _, tc := range []struct {
		eager int
		lazy  bool
	}{{1024, false}, {8 << 10, false}, {8 << 10, true}} {
		eager := tc.eager
		trs := open(t, 2, qtransport.Options{EagerLimit: eager, Lazy: tc.lazy})
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
			for i, v := range vec {
				if v&1 == 0 {
					t.Fatalf("eager %d, rank %d: page %d of the buffer at %d not resident", eager, r, i*page%bs/page, i*page/bs*bs)
				}
			}
		}
	}
}
