package shmem_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jiarun/jia/shmem"
)

func TestMapIsZeroedAndWritable(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			r, err := shmem.Map(3*shmem.PageSize+1, shmem.MapOptions{Shared: shared})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Unmap()
			if r.Len() != 4*shmem.PageSize || r.Pages() != 4 {
				t.Fatalf("len %d, pages %d: want the size rounded up to 4 pages", r.Len(), r.Pages())
			}
			if r.Addr()%uintptr(shmem.PageSize) != 0 {
				t.Fatalf("address %#x not page-aligned", r.Addr())
			}
			if (r.Fd() >= 0) != shared {
				t.Fatalf("fd %d for shared=%v", r.Fd(), shared)
			}
			b := r.Bytes()
			for i := range b {
				if b[i] != 0 {
					t.Fatalf("byte %d is %d", i, b[i])
				}
			}
			b[len(b)-1] = 7
			if r.Page(3)[shmem.PageSize-1] != 7 {
				t.Fatal("Page(3) does not alias the region")
			}
		})
	}
}

func TestMapAtAFixedAddress(t *testing.T) {
	a, err := shmem.Map(shmem.PageSize, shmem.MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := a.Addr()
	a.Unmap()
	b, err := shmem.Map(shmem.PageSize, shmem.MapOptions{Addr: addr})
	if err != nil {
		t.Fatalf("map at the freed address %#x: %v", addr, err)
	}
	defer b.Unmap()
	if b.Addr() != addr {
		t.Fatalf("mapped at %#x, want %#x", b.Addr(), addr)
	}
	// The address is taken now: no silent replacement.
	if c, err := shmem.Map(shmem.PageSize, shmem.MapOptions{Addr: addr}); err == nil {
		c.Unmap()
		t.Fatal("a second region replaced the first")
	}
}

func TestMapErrors(t *testing.T) {
	if _, err := shmem.Map(0, shmem.MapOptions{}); err == nil || !strings.Contains(err.Error(), "Map(0 bytes)") {
		t.Fatalf("Map(0): %v", err)
	}
	r, _ := shmem.Map(shmem.PageSize, shmem.MapOptions{})
	defer r.Unmap()
	if _, err := r.MapView(); err == nil {
		t.Fatal("a private region has a view")
	}
}

// A view maps the same pages: what one writes, the other reads.
func TestMapViewSharesPages(t *testing.T) {
	r, err := shmem.Map(2*shmem.PageSize, shmem.MapOptions{Shared: true, Name: "view-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unmap()
	v, err := r.MapView()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Unmap()
	if v.Addr() == r.Addr() {
		t.Fatal("the view is the same mapping")
	}
	shmem.Slice[float64](r)[600] = 2.5
	if got := shmem.Slice[float64](v)[600]; got != 2.5 {
		t.Fatalf("view reads %v", got)
	}
}

func TestSliceViews(t *testing.T) {
	r, err := shmem.Map(shmem.PageSize, shmem.MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unmap()
	f := shmem.Slice[float64](r)
	if len(f) != shmem.PageSize/8 {
		t.Fatalf("len %d", len(f))
	}
	f[1] = 1.0
	u := shmem.Slice[uint32](r)
	if u[3] != 0x3ff00000 {
		t.Fatalf("the float64 view and the uint32 view disagree: %#x", u[3])
	}
	s, err := shmem.SliceAt[int16](r, 8, 4)
	if err != nil || len(s) != 4 || s[3] != 0x3ff0 {
		t.Fatalf("SliceAt: %v %v", s, err)
	}
	for _, bad := range [][2]int{{1, 1}, {-8, 1}, {shmem.PageSize - 2, 2}, {0, -1}} {
		if _, err := shmem.SliceAt[int16](r, bad[0], bad[1]); err == nil {
			t.Errorf("SliceAt(%d, %d) succeeded", bad[0], bad[1])
		}
	}
	if s, err := shmem.SliceAt[complex128](r, shmem.PageSize, 0); err != nil || len(s) != 0 {
		t.Fatalf("empty SliceAt at the end: %v %v", s, err)
	}
}

func ExampleSlice() {
	r, err := shmem.Map(1<<20, shmem.MapOptions{})
	if err != nil {
		panic(err)
	}
	defer r.Unmap()
	a := shmem.Slice[float64](r)
	for i := range a {
		a[i] = float64(i)
	}
	fmt.Println(len(a), a[len(a)-1])
	// Output: 131072 131071
}
