package shmem

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PageSize is the system page size, the DSM's unit of coherence.
var PageSize = os.Getpagesize()

// MapOptions says how to map a Region.
type MapOptions struct {
	// Addr, when not 0, is the address the region must start at (every
	// rank maps a DSM region at the same address). The mapping fails rather
	// than replace anything mapped there (MAP_FIXED_NOREPLACE).
	Addr uintptr
	// Shared backs the region with a memfd (MAP_SHARED), which other
	// processes may map too (MapView, or the memfd passed over a Unix
	// socket): the pager process and ranks on the same host. Otherwise the
	// region is private anonymous memory.
	Shared bool
	// Name names the memfd (for /proc/<pid>/fd and debugging).
	Name string
}

// Region is memory mapped outside the Go heap: the garbage collector
// neither scans nor moves it, so it must hold plain data only (numbers,
// fixed-size structs of numbers), never Go pointers.
type Region struct {
	b     []byte
	memfd int // -1 for private anonymous memory
	view  bool

	dsm   *DSM // the DSM that allocated it, or nil
	first int  // its first page in the DSM's page space
	freed bool
}

// Map maps a region of size bytes (rounded up to whole pages).
func Map(size int, opts MapOptions) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shmem: Map(%d bytes): size must be positive", size)
	}
	size = (size + PageSize - 1) / PageSize * PageSize
	r := &Region{memfd: -1}
	flags := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_NORESERVE
	fd := -1
	if opts.Shared {
		name := opts.Name
		if name == "" {
			name = "jiarun-dsm"
		}
		var err error
		fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("shmem: Map(%d bytes): memfd_create: %w", size, err)
		}
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("shmem: Map(%d bytes): ftruncate: %w", size, err)
		}
		flags = unix.MAP_SHARED | unix.MAP_NORESERVE
		r.memfd = fd
	}
	b, err := mmapAt(opts.Addr, size, flags, fd, 0)
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("shmem: Map(%d bytes at %#x): %w", size, opts.Addr, err)
	}
	r.b = b
	return r, nil
}

// mmapAt maps length bytes at addr (anywhere when 0) without replacing an
// existing mapping.
func mmapAt(addr uintptr, length, flags, fd int, off int64) ([]byte, error) {
	if addr != 0 {
		flags |= unix.MAP_FIXED_NOREPLACE
	}
	p, err := unix.MmapPtr(fd, off, addrPtr(addr), uintptr(length), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, err
	}
	if addr != 0 && uintptr(p) != addr {
		// Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat addr as a hint.
		unix.MunmapPtr(p, uintptr(length))
		return nil, fmt.Errorf("address %#x is taken", addr)
	}
	return unsafe.Slice((*byte)(p), length), nil
}

// addrPtr turns an address outside the Go heap into a pointer (the mmap
// hint), in the form go vet accepts.
func addrPtr(addr uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&addr)) }

// MapView maps the same memory a second time, at another address: the
// engine's view, through which it reads and writes pages without faulting
// and whatever protection the program's view has. Only shared regions have
// views.
func (r *Region) MapView() (*Region, error) {
	if r.memfd < 0 {
		return nil, errors.New("shmem: MapView: the region is not shared (MapOptions.Shared)")
	}
	b, err := mmapAt(0, len(r.b), unix.MAP_SHARED|unix.MAP_NORESERVE, r.memfd, 0)
	if err != nil {
		return nil, fmt.Errorf("shmem: MapView: %w", err)
	}
	return &Region{b: b, memfd: r.memfd, view: true}, nil
}

// MapFD maps the memfd of a shared region received from another process
// (size bytes, at addr or anywhere when 0). The region owns fd.
func MapFD(fd, size int, addr uintptr) (*Region, error) {
	b, err := mmapAt(addr, size, unix.MAP_SHARED|unix.MAP_NORESERVE, fd, 0)
	if err != nil {
		return nil, fmt.Errorf("shmem: MapFD(%d, %d bytes): %w", fd, size, err)
	}
	return &Region{b: b, memfd: fd}, nil
}

// Bytes returns the region's memory. The slice is valid until Unmap.
func (r *Region) Bytes() []byte { return r.b }

// Addr returns the region's start address.
func (r *Region) Addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(r.b))) }

// Len returns the region's size in bytes.
func (r *Region) Len() int { return len(r.b) }

// Pages returns the number of pages of the region.
func (r *Region) Pages() int { return len(r.b) / PageSize }

// Page returns page i of the region.
func (r *Region) Page(i int) []byte { return r.b[i*PageSize : (i+1)*PageSize : (i+1)*PageSize] }

// Freed reports whether the region was freed (DSM.Free).
func (r *Region) Freed() bool { return r.freed }

// Fd returns the memfd of a shared region, or -1 (also for DSM regions,
// whose memfd only their pager keeps).
func (r *Region) Fd() int { return r.memfd }

// Unmap unmaps the region (and closes its memfd unless it is a view).
// Slices of it must not be used afterwards.
func (r *Region) Unmap() error {
	if r.dsm != nil {
		return fmt.Errorf("shmem: rank %d: Unmap of a DSM region: use Free", r.dsm.rank)
	}
	if r.b == nil {
		return nil
	}
	err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(r.b)), uintptr(len(r.b)))
	r.b = nil
	if r.memfd >= 0 && !r.view {
		if cerr := unix.Close(r.memfd); err == nil {
			err = cerr
		}
	}
	r.memfd = -1
	if err != nil {
		return fmt.Errorf("shmem: Unmap: %w", err)
	}
	return nil
}

// Number is a fixed-size numeric type: the element types a region may be
// viewed as.
type Number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// Slice views the whole region as a slice of T, as many elements as fit.
// The slice is valid until the region is unmapped.
func Slice[T Number](r *Region) []T {
	var zero T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(r.b))), len(r.b)/int(unsafe.Sizeof(zero)))
}

// SliceAt views n elements of type T from byte offset off of the region.
// It fails if they do not fit or off is not aligned for T.
func SliceAt[T Number](r *Region, off, n int) ([]T, error) {
	var zero T
	size, align := int(unsafe.Sizeof(zero)), int(unsafe.Alignof(zero))
	if r.freed {
		return nil, fmt.Errorf("shmem: rank %d: SliceAt[%T](offset %d, %d elements): %w", r.dsm.rank, zero, off, n, ErrFreed)
	}
	if off < 0 || n < 0 || off%align != 0 || n > (len(r.b)-off)/size {
		return nil, fmt.Errorf("shmem: SliceAt[%T](offset %d, %d elements): outside a %d-byte region or misaligned", zero, off, n, len(r.b))
	}
	if n == 0 {
		return []T{}, nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&r.b[off])), n), nil
}
