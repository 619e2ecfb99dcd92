package qtransport

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// resident reports, page by page, whether the pages of b (page-aligned)
// are in memory.
func resident(t *testing.T, b []byte) []bool {
	t.Helper()
	vec := make([]byte, (len(b)+pageSize-1)/pageSize)
	if err := mincore(b, vec); err != nil {
		t.Fatalf("mincore: %v", err)
	}
	in := make([]bool, len(vec))
	for i, v := range vec {
		in[i] = v&1 != 0
	}
	return in
}

// TestPrefaultTouchesExactlyItsPages checks that prefault makes every page
// that its slice overlaps resident, whole or partial, and no other.
func TestPrefaultTouchesExactlyItsPages(t *testing.T) {
	const pages = 8
	mem, err := unix.Mmap(-1, 0, pages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	defer unix.Munmap(mem)
	for i, in := range resident(t, mem) {
		if in {
			t.Fatalf("page %d resident before prefault", i)
		}
	}
	prefault(mem[100 : 3*pageSize+5]) // pages 0..3, the first and last partly
	for i, in := range resident(t, mem) {
		if want := i <= 3; in != want {
			t.Errorf("page %d resident = %v, want %v", i, in, want)
		}
	}
}

// TestWarmKeepsSlice checks that warm returns its argument unchanged
// (length, capacity, zero contents).
func TestWarmKeepsSlice(t *testing.T) {
	s := warm(make([]uint64, 3, 5000))
	if len(s) != 3 || cap(s) != 5000 {
		t.Fatalf("warm: len %d cap %d, want 3 and 5000", len(s), cap(s))
	}
	for i, v := range s[:cap(s)] {
		if v != 0 {
			t.Fatalf("warm: element %d = %d, want 0", i, v)
		}
	}
}

// mincore is mincore(2): vec[i]&1 tells whether page i of b is resident.
func mincore(b, vec []byte) error {
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if e != 0 {
		return e
	}
	return nil
}
