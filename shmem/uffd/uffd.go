package uffd

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctl requests and flags of <linux/userfaultfd.h>.
const (
	uffdAPI            = 0xaa
	ioctlAPI           = 0xc018aa3f // _IOWR(0xAA, 0x3F, struct uffdio_api)
	ioctlRegister      = 0xc020aa00 // _IOWR(0xAA, 0x00, struct uffdio_register)
	ioctlUnregister    = 0x8010aa01 // _IOR(0xAA, 0x01, struct uffdio_range)
	ioctlWake          = 0x8010aa02 // _IOR(0xAA, 0x02, struct uffdio_range)
	ioctlCopy          = 0xc028aa03 // _IOWR(0xAA, 0x03, struct uffdio_copy)
	ioctlZeroPage      = 0xc020aa04 // _IOWR(0xAA, 0x04, struct uffdio_zeropage)
	ioctlWriteProtect  = 0xc018aa06 // _IOWR(0xAA, 0x06, struct uffdio_writeprotect)
	ioctlContinue      = 0xc020aa07 // _IOWR(0xAA, 0x07, struct uffdio_continue)
	userModeOnly       = 1          // UFFD_USER_MODE_ONLY
	copyModeDontWake   = 1
	copyModeWP         = 2
	zeroModeDontWake   = 1
	wpModeWP           = 1
	wpModeDontWake     = 2
	contModeDontWake   = 1
	contModeWP         = 2
	eventPagefault     = 0x12
	pagefaultFlagWrite = 1
	pagefaultFlagWP    = 2
	pagefaultFlagMinor = 4
	msgSize            = 32
)

// Mode selects the faults a registered range reports.
type Mode uint64

// Register modes.
const (
	ModeMissing Mode = 1 // access to a page that is not mapped
	ModeWP      Mode = 2 // write to a write-protected page
	ModeMinor   Mode = 4 // access to a page in the page cache but not mapped (shmem)
)

// Features is the UFFD_FEATURE_* bit set.
type Features uint64

// Features the DSM cares about.
const (
	FeaturePagefaultFlagWP  Features = 1 << 0
	FeatureMissingShmem     Features = 1 << 5
	FeatureThreadID         Features = 1 << 8
	FeatureMinorShmem       Features = 1 << 10
	FeatureWPHugetlbfsShmem Features = 1 << 12 // write-protect on shared memory
	FeatureWPUnpopulated    Features = 1 << 13
)

// ErrUnavailable is wrapped by Open's error when this process may not use
// userfaultfd at all.
var ErrUnavailable = errors.New("userfaultfd unavailable")

// Sysctl is the setting that lets unprivileged processes use userfaultfd
// for kernel-mode faults too.
const Sysctl = "vm.unprivileged_userfaultfd"

// FD is an open userfaultfd.
type FD struct {
	fd       int
	features Features
	userOnly bool
}

// Open opens a userfaultfd with O_CLOEXEC|O_NONBLOCK and negotiates the
// API, asking for the features in want that the kernel has. Without the
// privilege for full mode (CAP_SYS_PTRACE, or the sysctl
// vm.unprivileged_userfaultfd=1) it falls back to UFFD_USER_MODE_ONLY, in
// which faults taken inside system calls (a read(2) into DSM memory) fail
// with EFAULT instead of being reported; UserModeOnly tells which.
func Open(want Features) (*FD, error) {
	flags := uintptr(unix.O_CLOEXEC | unix.O_NONBLOCK)
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, flags, 0, 0)
	userOnly := false
	if errno == unix.EPERM {
		fd, _, errno = unix.Syscall(unix.SYS_USERFAULTFD, flags|userModeOnly, 0, 0)
		userOnly = true
	}
	if errno != 0 {
		return nil, fmt.Errorf("uffd: open: %w: %v (%s)", ErrUnavailable, errno, availabilityHint(errno))
	}
	u := &FD{fd: int(fd), userOnly: userOnly}
	// Ask for the intersection: a first API call with no features
	// reports what the kernel offers, but an fd accepts UFFDIO_API once,
	// so probe on a throwaway descriptor.
	offered, err := probeFeatures(flags, userOnly)
	if err != nil {
		unix.Close(u.fd)
		return nil, err
	}
	u.features = want & offered
	api := struct{ api, features, ioctls uint64 }{api: uffdAPI, features: uint64(u.features)}
	if err := ioctl(u.fd, ioctlAPI, unsafe.Pointer(&api)); err != nil {
		unix.Close(u.fd)
		return nil, fmt.Errorf("uffd: UFFDIO_API: %w", err)
	}
	return u, nil
}

// probeFeatures returns the features the kernel offers.
func probeFeatures(flags uintptr, userOnly bool) (Features, error) {
	if userOnly {
		flags |= userModeOnly
	}
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, flags, 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("uffd: open: %w: %v", ErrUnavailable, errno)
	}
	defer unix.Close(int(fd))
	api := struct{ api, features, ioctls uint64 }{api: uffdAPI}
	if err := ioctl(int(fd), ioctlAPI, unsafe.Pointer(&api)); err != nil {
		return 0, fmt.Errorf("uffd: UFFDIO_API: %w", err)
	}
	return Features(api.features), nil
}

func availabilityHint(errno syscall.Errno) string {
	switch errno {
	case unix.ENOSYS:
		return "the kernel has no userfaultfd (CONFIG_USERFAULTFD)"
	case unix.EPERM:
		v := "?"
		if b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(Sysctl, ".", "/")); err == nil {
			v = strings.TrimSpace(string(b))
		}
		return fmt.Sprintf("set sysctl %s=1 (now %s) or run with CAP_SYS_PTRACE", Sysctl, v)
	default:
		return "see userfaultfd(2)"
	}
}

// Available reports whether this process can open a userfaultfd, with an
// error that says what to change when it cannot.
func Available() error {
	u, err := Open(0)
	if err != nil {
		return err
	}
	return u.Close()
}

// FromFD wraps a descriptor received from another process, whose API the
// sender negotiated (with the given features).
func FromFD(fd int, features Features) *FD { return &FD{fd: fd, features: features} }

// Fd returns the descriptor.
func (u *FD) Fd() int { return u.fd }

// Features returns the features enabled on the descriptor (those asked
// for that the kernel offers).
func (u *FD) Features() Features { return u.features }

// UserModeOnly reports whether the descriptor only sees faults taken in
// user mode.
func (u *FD) UserModeOnly() bool { return u.userOnly }

// Close closes the descriptor; registered ranges are unregistered.
func (u *FD) Close() error { return unix.Close(u.fd) }

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

type uffdRange struct{ start, len uint64 }

// Register registers [addr, addr+length) for the faults of mode and
// returns the ioctls the range supports (a bit per ioctl number).
func (u *FD) Register(addr, length uintptr, mode Mode) (uint64, error) {
	reg := struct {
		rng          uffdRange
		mode, ioctls uint64
	}{rng: uffdRange{uint64(addr), uint64(length)}, mode: uint64(mode)}
	if err := ioctl(u.fd, ioctlRegister, unsafe.Pointer(&reg)); err != nil {
		return 0, fmt.Errorf("uffd: UFFDIO_REGISTER %#x+%#x mode %d: %w", addr, length, mode, err)
	}
	return reg.ioctls, nil
}

// Unregister stops fault reporting for a range.
func (u *FD) Unregister(addr, length uintptr) error {
	rng := uffdRange{uint64(addr), uint64(length)}
	if err := ioctl(u.fd, ioctlUnregister, unsafe.Pointer(&rng)); err != nil {
		return fmt.Errorf("uffd: UFFDIO_UNREGISTER %#x+%#x: %w", addr, length, err)
	}
	return nil
}

// Copy maps pages at dst (in the registering process) with the contents of
// src, a whole number of pages, and wakes the threads faulted there unless
// dontWake. With wp the pages are mapped write-protected, so that the first
// write faults (ModeWP). EEXIST means a page was already mapped.
func (u *FD) Copy(dst uintptr, src []byte, wp, dontWake bool) error {
	if len(src) == 0 {
		return nil
	}
	var mode uint64
	if wp {
		mode |= copyModeWP
	}
	if dontWake {
		mode |= copyModeDontWake
	}
	for {
		// No call between taking src's address and the (nosplit) system
		// call, so that a stack-allocated src cannot move in between.
		c := struct {
			dst, src, len, mode uint64
			copied              int64
		}{dst: uint64(dst), src: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(src)))), len: uint64(len(src)), mode: mode}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(u.fd), ioctlCopy, uintptr(unsafe.Pointer(&c)))
		runtime.KeepAlive(src)
		switch errno {
		case 0:
			return nil
		case unix.EINTR:
			continue
		default:
			return fmt.Errorf("uffd: UFFDIO_COPY %#x+%#x: %w", dst, len(src), errno)
		}
	}
}

// ZeroPage maps zero pages over [addr, addr+length).
func (u *FD) ZeroPage(addr, length uintptr, dontWake bool) error {
	z := struct {
		rng    uffdRange
		mode   uint64
		zeroed int64
	}{rng: uffdRange{uint64(addr), uint64(length)}}
	if dontWake {
		z.mode = zeroModeDontWake
	}
	if err := ioctl(u.fd, ioctlZeroPage, unsafe.Pointer(&z)); err != nil {
		return fmt.Errorf("uffd: UFFDIO_ZEROPAGE %#x+%#x: %w", addr, length, err)
	}
	return nil
}

// WriteProtect write-protects [addr, addr+length) (protect) or removes the
// protection, which wakes the threads faulted there unless dontWake.
func (u *FD) WriteProtect(addr, length uintptr, protect, dontWake bool) error {
	w := struct {
		rng  uffdRange
		mode uint64
	}{rng: uffdRange{uint64(addr), uint64(length)}}
	if protect {
		w.mode |= wpModeWP
	}
	if dontWake {
		w.mode |= wpModeDontWake
	}
	if err := ioctl(u.fd, ioctlWriteProtect, unsafe.Pointer(&w)); err != nil {
		return fmt.Errorf("uffd: UFFDIO_WRITEPROTECT %#x+%#x protect=%v: %w", addr, length, protect, err)
	}
	return nil
}

// Continue maps the pages of [addr, addr+length) that are in the page
// cache (after a minor fault), write-protected if wp.
func (u *FD) Continue(addr, length uintptr, wp, dontWake bool) error {
	c := struct {
		rng    uffdRange
		mode   uint64
		mapped int64
	}{rng: uffdRange{uint64(addr), uint64(length)}}
	if wp {
		c.mode |= contModeWP
	}
	if dontWake {
		c.mode |= contModeDontWake
	}
	if err := ioctl(u.fd, ioctlContinue, unsafe.Pointer(&c)); err != nil {
		return fmt.Errorf("uffd: UFFDIO_CONTINUE %#x+%#x: %w", addr, length, err)
	}
	return nil
}

// Wake wakes the threads faulted in [addr, addr+length).
func (u *FD) Wake(addr, length uintptr) error {
	rng := uffdRange{uint64(addr), uint64(length)}
	if err := ioctl(u.fd, ioctlWake, unsafe.Pointer(&rng)); err != nil {
		return fmt.Errorf("uffd: UFFDIO_WAKE %#x+%#x: %w", addr, length, err)
	}
	return nil
}

// Fault is a page-fault message.
type Fault struct {
	Flags   uint64  // UFFD_PAGEFAULT_FLAG_*
	Address uintptr // the faulting address (page-aligned unless exact addresses were asked for)
	TID     uint32  // faulting thread, with FeatureThreadID
}

// Write reports a write access.
func (f Fault) Write() bool { return f.Flags&pagefaultFlagWrite != 0 }

// WP reports a write to a write-protected page.
func (f Fault) WP() bool { return f.Flags&pagefaultFlagWP != 0 }

// Minor reports a minor fault (page in the page cache, not mapped).
func (f Fault) Minor() bool { return f.Flags&pagefaultFlagMinor != 0 }

func (f Fault) String() string {
	kind := "missing"
	switch {
	case f.WP():
		kind = "wp"
	case f.Minor():
		kind = "minor"
	}
	rw := "read"
	if f.Write() {
		rw = "write"
	}
	return fmt.Sprintf("%s %s fault at %#x", kind, rw, f.Address)
}

// Read fills faults with the pending page-fault messages and returns how
// many; it returns 0 and no error when none is pending (the descriptor is
// non-blocking: Wait for one). Messages of other events are skipped.
func (u *FD) Read(faults []Fault) (int, error) {
	if len(faults) == 0 {
		return 0, nil
	}
	var buf [16 * msgSize]byte
	max := min(len(faults), 16) * msgSize
	n, err := unix.Read(u.fd, buf[:max])
	if err == unix.EAGAIN {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("uffd: read: %w", err)
	}
	k := 0
	for off := 0; off+msgSize <= n; off += msgSize {
		m := buf[off : off+msgSize]
		if m[0] != eventPagefault {
			continue
		}
		faults[k] = Fault{
			Flags:   le64(m[8:]),
			Address: uintptr(le64(m[16:])),
			TID:     uint32(le64(m[24:])),
		}
		k++
	}
	return k, nil
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// Wait blocks until a message is pending or timeout passes (negative: no
// timeout), and reports whether one is pending.
func (u *FD) Wait(timeout time.Duration) (bool, error) {
	ms := -1
	if timeout >= 0 {
		ms = int(timeout / time.Millisecond)
	}
	fds := []unix.PollFd{{Fd: int32(u.fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("uffd: poll: %w", err)
		}
		return n > 0, nil
	}
}

// Zap drops the pages of b (madvise MADV_DONTNEED) in this process, so
// that the next access faults as missing. For private anonymous memory; for
// shared memory use PunchHole.
func Zap(b []byte) error {
	if err := unix.Madvise(b, unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("uffd: madvise(MADV_DONTNEED): %w", err)
	}
	return nil
}

// PunchHole drops [off, off+length) of a memfd (fallocate
// FALLOC_FL_PUNCH_HOLE): the pages leave the page cache and every mapping,
// so that the next access faults as missing. Any process holding the memfd
// may call it.
func PunchHole(memfd int, off, length int64) error {
	if err := unix.Fallocate(memfd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length); err != nil {
		return fmt.Errorf("uffd: fallocate(PUNCH_HOLE %#x+%#x): %w", off, length, err)
	}
	return nil
}
