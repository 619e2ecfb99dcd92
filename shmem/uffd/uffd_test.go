package uffd_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem"
	"github.com/jiarun/jia/shmem/uffd"
)

// open opens a userfaultfd or skips the test, saying why and what to change.
func open(t *testing.T, want uffd.Features) *uffd.FD {
	t.Helper()
	u, err := uffd.Open(want)
	if err != nil {
		t.Skipf("userfaultfd is not available here: %v (an unprivileged user needs sysctl %s=1 for full mode)", err, uffd.Sysctl)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

func pattern(page int) []byte {
	b := make([]byte, shmem.PageSize)
	for i := range b {
		b[i] = byte(page*7 + i%251)
	}
	return b
}

// server serves faults in this process: a missing page gets pattern(page)
// write-protected, or zeros for the pages in zero; a write-protect fault
// unprotects.
type server struct {
	u     *uffd.FD
	base  uintptr
	zero  map[int]bool
	mu    sync.Mutex
	seen  []string
	stop  chan struct{}
	done  chan error
	wpOff bool // install missing pages writable
}

func serve(t *testing.T, u *uffd.FD, base uintptr, zero map[int]bool, wpOff bool) *server {
	s := &server{u: u, base: base, zero: zero, wpOff: wpOff, stop: make(chan struct{}), done: make(chan error, 1)}
	go func() { s.done <- s.loop() }()
	t.Cleanup(func() {
		close(s.stop)
		if err := <-s.done; err != nil {
			t.Errorf("fault server: %v", err)
		}
	})
	return s
}

func (s *server) loop() error {
	// The server must not touch the region itself, and must not need the
	// P of a faulting thread: tests using it run with GOMAXPROCS >= 2 and
	// fault from one goroutine at a time.
	var faults [8]uffd.Fault
	for {
		select {
		case <-s.stop:
			return nil
		default:
		}
		ok, err := s.u.Wait(50 * time.Millisecond)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		n, err := s.u.Read(faults[:])
		if err != nil {
			return err
		}
		for _, f := range faults[:n] {
			page := int(f.Address-s.base) / shmem.PageSize
			addr := s.base + uintptr(page*shmem.PageSize)
			s.mu.Lock()
			s.seen = append(s.seen, fmt.Sprintf("page %d %s", page, kind(f)))
			s.mu.Unlock()
			switch {
			case f.WP():
				err = s.u.WriteProtect(addr, uintptr(shmem.PageSize), false, false)
			case s.zero[page]:
				err = s.u.ZeroPage(addr, uintptr(shmem.PageSize), false)
			default:
				err = s.u.Copy(addr, pattern(page), !s.wpOff, false)
			}
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return err
			}
		}
	}
}

func kind(f uffd.Fault) string {
	switch {
	case f.WP():
		return "wp-write"
	case f.Write():
		return "missing-write"
	default:
		return "missing-read"
	}
}

func (s *server) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

func needPs(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("an in-process fault server needs GOMAXPROCS >= 2: a thread blocked in a fault keeps its P (package shmem explains the pager process that removes this)")
	}
}

func TestOpenNegotiatesWriteProtectFaults(t *testing.T) {
	u := open(t, uffd.FeaturePagefaultFlagWP|uffd.FeatureThreadID)
	if u.Features()&uffd.FeaturePagefaultFlagWP == 0 {
		t.Skip("this kernel has no write-protect faults (UFFD_FEATURE_PAGEFAULT_FLAG_WP)")
	}
	if err := uffd.Available(); err != nil {
		t.Fatal(err)
	}
	t.Logf("features %#x, user mode only %v", u.Features(), u.UserModeOnly())
}

// Missing faults are served by UFFDIO_COPY in write-protect mode, the first
// write then faults as write-protect and is let through by
// UFFDIO_WRITEPROTECT; re-protecting makes the next write fault again;
// MADV_DONTNEED makes the next access fault as missing; UFFDIO_ZEROPAGE
// maps zeros.
func TestPrivateRegionFaults(t *testing.T) {
	needPs(t)
	u := open(t, uffd.FeaturePagefaultFlagWP)
	r, err := shmem.Map(4*shmem.PageSize, shmem.MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unmap()
	if _, err := u.Register(r.Addr(), uintptr(r.Len()), uffd.ModeMissing|uffd.ModeWP); err != nil {
		t.Fatal(err)
	}
	s := serve(t, u, r.Addr(), map[int]bool{2: true}, false)
	b := r.Bytes()
	ps := shmem.PageSize

	if !bytes.Equal(r.Page(0), pattern(0)) {
		t.Fatal("page 0 does not hold what the server installed")
	}
	b[5] = 42
	if got := s.take(); fmt.Sprint(got) != "[page 0 missing-read page 0 wp-write]" {
		t.Fatalf("faults %v", got)
	}
	b[6] = 43 // writable now: no fault
	if err := u.WriteProtect(r.Addr(), uintptr(ps), true, false); err != nil {
		t.Fatal(err)
	}
	b[7] = 44
	if got := s.take(); fmt.Sprint(got) != "[page 0 wp-write]" {
		t.Fatalf("faults after re-protect %v", got)
	}
	b[ps+1] = 1 // a write to a missing page
	if got := s.take(); fmt.Sprint(got) != "[page 1 missing-write page 1 wp-write]" {
		t.Fatalf("faults %v", got)
	}
	if b[2*ps+9] != 0 {
		t.Fatal("zero page is not zero")
	}
	if err := uffd.Zap(r.Page(0)); err != nil {
		t.Fatal(err)
	}
	if b[5] != pattern(0)[5] {
		t.Fatal("zapped page was not fetched again")
	}
	if got := s.take(); fmt.Sprint(got) != "[page 2 missing-read page 0 missing-read]" {
		t.Fatalf("faults %v", got)
	}
	if err := u.Copy(r.Addr(), pattern(0), false, false); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("copy over a mapped page: %v, want EEXIST", err)
	}
}

// Shared memory (a memfd, as for the pager and for ranks on one host):
// the engine's second view reads the pages without faulting, and a punched
// hole makes the next access fault as missing again.
func TestSharedRegionFaultsAndPunchHole(t *testing.T) {
	needPs(t)
	u := open(t, uffd.FeaturePagefaultFlagWP|uffd.FeatureWPHugetlbfsShmem|uffd.FeatureMissingShmem)
	r, err := shmem.Map(4*shmem.PageSize, shmem.MapOptions{Shared: true, Name: "uffd-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unmap()
	view, err := r.MapView()
	if err != nil {
		t.Fatal(err)
	}
	defer view.Unmap()
	mode := uffd.ModeMissing
	if u.Features()&uffd.FeatureWPHugetlbfsShmem != 0 {
		mode |= uffd.ModeWP
	}
	if _, err := u.Register(r.Addr(), uintptr(r.Len()), mode); err != nil {
		t.Fatal(err)
	}
	s := serve(t, u, r.Addr(), nil, mode&uffd.ModeWP == 0)
	b := r.Bytes()
	if b[3*shmem.PageSize+5] != pattern(3)[5] {
		t.Fatal("the program does not see the installed page")
	}
	if !bytes.Equal(view.Page(3), pattern(3)) {
		t.Fatal("the view does not see the installed page")
	}
	b[3*shmem.PageSize] = 99
	if view.Page(3)[0] != 99 {
		t.Fatal("the view does not see the write")
	}
	view.Page(3)[1] = 98 // the engine writes a protected page without faulting
	if b[3*shmem.PageSize+1] != 98 {
		t.Fatal("the program does not see the engine's write")
	}
	if err := uffd.PunchHole(r.Fd(), int64(3*shmem.PageSize), int64(shmem.PageSize)); err != nil {
		t.Fatal(err)
	}
	s.take()
	if b[3*shmem.PageSize] != pattern(3)[0] {
		t.Fatal("the punched page was not fetched again")
	}
	if got := s.take(); fmt.Sprint(got) != "[page 3 missing-read]" {
		t.Fatalf("faults %v", got)
	}
}

// ---- a pager in another process --------------------------------------------------

const pagerEnv = "JIARUN_UFFD_TEST_PAGER"

func TestMain(m *testing.M) {
	if os.Getenv(pagerEnv) == "1" {
		if err := runPager(); err != nil {
			fmt.Fprintln(os.Stderr, "pager:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pagerHello is what the program sends the pager with the descriptors.
type pagerHello struct {
	Addr     uint64
	Size     uint64
	Features uint64
}

// runPager is the pager process: it receives the userfaultfd and the
// region's memfd over fd 3 and serves every fault of the other process:
// a missing page is filled (through the pager's own mapping of the memfd,
// which never faults) and mapped write-protected, a write-protect fault is
// let through. It ends when the program closes the socket.
func runPager() error {
	f := os.NewFile(3, "pager-socket")
	c, err := net.FileConn(f)
	if err != nil {
		return err
	}
	uc := c.(*net.UnixConn)
	var hello pagerHello
	buf := make([]byte, unsafe.Sizeof(hello))
	n, fds, err := uffd.RecvFDs(uc, buf)
	if err != nil || n != len(buf) || len(fds) != 2 {
		return fmt.Errorf("hello: %d bytes, fds %v, %v", n, fds, err)
	}
	hello = *(*pagerHello)(unsafe.Pointer(&buf[0]))
	u := uffd.FromFD(fds[0], uffd.Features(hello.Features))
	view, err := shmem.MapFD(fds[1], int(hello.Size), 0)
	if err != nil {
		return err
	}
	_ = view // a real pager reads home pages and twins through it
	sock, _ := uc.File()
	pfds := []unix.PollFd{{Fd: int32(u.Fd()), Events: unix.POLLIN}, {Fd: int32(sock.Fd()), Events: unix.POLLIN}}
	var faults [16]uffd.Fault
	ps := uintptr(shmem.PageSize)
	for {
		if _, err := unix.Poll(pfds, -1); err != nil && err != unix.EINTR {
			return err
		}
		if pfds[1].Revents != 0 {
			return nil // the program hung up
		}
		n, err := u.Read(faults[:])
		if err != nil {
			return err
		}
		for _, f := range faults[:n] {
			addr := f.Address &^ (ps - 1)
			page := int(addr-uintptr(hello.Addr)) / int(ps)
			if f.WP() {
				err = u.WriteProtect(addr, ps, false, false)
			} else {
				err = u.Copy(addr, pattern(page), true, false)
			}
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return err
			}
		}
	}
}

// The deadlock-free construction (package shmem): with GOMAXPROCS=1, 64
// goroutines fault on pages at once, read, write, and copy() into and out
// of the region, while the faults are served by a pager in another process
// that got the userfaultfd over a Unix socket (SCM_RIGHTS). An in-process
// handler goroutine would need the P the faulting thread keeps.
func TestPagerProcessServesFaultsWithOneP(t *testing.T) {
	u := open(t, uffd.FeaturePagefaultFlagWP|uffd.FeatureWPHugetlbfsShmem|uffd.FeatureMissingShmem)
	if u.Features()&uffd.FeatureWPHugetlbfsShmem == 0 {
		t.Skip("this kernel cannot write-protect shared memory (UFFD_FEATURE_WP_HUGETLBFS_SHMEM, Linux 6.1)")
	}
	const pages = 130
	r, err := shmem.Map(pages*shmem.PageSize, shmem.MapOptions{Shared: true, Name: "pager-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unmap()
	if _, err := u.Register(r.Addr(), uintptr(r.Len()), uffd.ModeMissing|uffd.ModeWP); err != nil {
		t.Fatal(err)
	}

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine := os.NewFile(uintptr(pair[0]), "program-socket")
	theirs := os.NewFile(uintptr(pair[1]), "pager-socket")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pagerEnv+"=1")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		t.Fatal(err)
	}
	hello := pagerHello{Addr: uint64(r.Addr()), Size: uint64(r.Len()), Features: uint64(u.Features())}
	hb := unsafe.Slice((*byte)(unsafe.Pointer(&hello)), unsafe.Sizeof(hello))
	if err := uffd.SendFDs(c.(*net.UnixConn), hb, u.Fd(), r.Fd()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		c.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("pager: %v", err)
		}
	}()

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	data := shmem.Slice[uint64](r)
	per := shmem.PageSize / 8
	done := make(chan string, 64)
	for g := 0; g < 64; g++ {
		go func() {
			p := 2 * g // pages 2g and 2g+1 are this goroutine's
			if got := r.Page(p)[17]; got != pattern(p)[17] {
				done <- fmt.Sprintf("goroutine %d read %d", g, got)
				return
			}
			data[p*per+3] = uint64(g) // write fault
			// copy() across a page boundary into and out of the region:
			// the faults happen inside memmove.
			src := bytes.Repeat([]byte{byte(g)}, 64)
			copy(r.Bytes()[(p+1)*shmem.PageSize-32:], src)
			out := make([]byte, 64)
			copy(out, r.Bytes()[(p+1)*shmem.PageSize-32:])
			if !bytes.Equal(out, src) {
				done <- fmt.Sprintf("goroutine %d copied back %v", g, out[:4])
				return
			}
			done <- ""
		}()
	}
	timeout := time.After(60 * time.Second)
	for g := 0; g < 64; g++ {
		select {
		case msg := <-done:
			if msg != "" {
				t.Fatal(msg)
			}
		case <-timeout:
			t.Fatalf("only %d of 64 goroutines finished: deadlock", g)
		}
	}
	// One big copy out of the region, through the last pages never touched.
	all := make([]byte, r.Len())
	copy(all, r.Bytes())
	last := pages - 1
	if !bytes.Equal(all[last*shmem.PageSize:], pattern(last)) {
		t.Fatal("the last page does not hold the pager's data")
	}
	for g := 0; g < 64; g++ {
		if data[2*g*per+3] != uint64(g) {
			t.Fatalf("goroutine %d's write is lost", g)
		}
	}
}
