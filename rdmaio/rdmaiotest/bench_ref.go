package rdmaiotest

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/internal/cpubind"
)

// The references the providers are measured against: the floors of the
// machine at the time of the measurement.

// SpinPingPong runs n round trips between two threads that spin on atomic
// words in separate cache lines (no queues at all) and returns the elapsed
// time; a half round trip is that / 2n. It is the floor of any
// shared-memory ping-pong: the threads run on two different processors
// when the process may use two (as two bound ranks do), and publish with
// the cheapest store that keeps the order a queue needs (a plain store on
// amd64, which never reorders stores; an atomic store elsewhere).
func SpinPingPong(n int) time.Duration {
	type line struct {
		v atomic.Uint64
		_ [56]byte
	}
	var x, y line
	m := uint64(n)
	cpus := cpubind.Allowed()
	ready := make(chan struct{})
	go func() {
		defer pinned(cpus, 1)()
		close(ready)
		for i := uint64(1); i <= m; i++ {
			for x.v.Load() != i {
			}
			releaseStore(&y.v, i)
		}
	}()
	defer pinned(cpus, 0)()
	<-ready
	start := time.Now()
	for i := uint64(1); i <= m; i++ {
		releaseStore(&x.v, i)
		for y.v.Load() != i {
		}
	}
	return time.Since(start)
}

// pinned locks the calling goroutine to its thread and binds the thread to
// cpus[i] when the process may run on two processors or more; the function
// it returns undoes both.
func pinned(cpus []int, i int) func() {
	if len(cpus) >= 2 {
		if unpin, err := cpubind.Pin(cpus[i]); err == nil {
			return unpin
		}
	}
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// TCPPingPong runs n round trips of 8 bytes over a loopback TCP connection
// (TCP_NODELAY) between two threads that busy-poll non-blocking sockets
// with raw read(2) and write(2), and returns the elapsed time. It is the
// floor of a TCP provider's ping-pong.
func TCPPingPong(n int) (time.Duration, error) {
	fa, fb, err := TCPPair()
	if err != nil {
		return 0, err
	}
	defer unix.Close(fa)
	defer unix.Close(fb)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- rawEcho(fb, n)
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var buf [8]byte
	start := time.Now()
	for range n {
		if err := RawWrite(fa, buf[:]); err != nil {
			return 0, err
		}
		if err := RawRead(fa, buf[:]); err != nil {
			return 0, err
		}
	}
	el := time.Since(start)
	if err := <-done; err != nil {
		return 0, err
	}
	return el, nil
}

// TCPPair returns the two ends of a loopback TCP connection, non-blocking,
// with TCP_NODELAY. The caller closes both.
func TCPPair() (int, int, error) {
	l, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("raw tcp: socket: %w", err)
	}
	defer unix.Close(l)
	if err := unix.Bind(l, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return -1, -1, fmt.Errorf("raw tcp: bind: %w", err)
	}
	if err := unix.Listen(l, 1); err != nil {
		return -1, -1, fmt.Errorf("raw tcp: listen: %w", err)
	}
	sa, err := unix.Getsockname(l)
	if err != nil {
		return -1, -1, fmt.Errorf("raw tcp: getsockname: %w", err)
	}
	a, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("raw tcp: socket: %w", err)
	}
	if err := unix.Connect(a, sa); err != nil {
		unix.Close(a)
		return -1, -1, fmt.Errorf("raw tcp: connect: %w", err)
	}
	c, _, err := unix.Accept4(l, unix.SOCK_CLOEXEC)
	if err != nil {
		unix.Close(a)
		return -1, -1, fmt.Errorf("raw tcp: accept: %w", err)
	}
	for _, fd := range []int{a, c} {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
			unix.Close(a)
			unix.Close(c)
			return -1, -1, fmt.Errorf("raw tcp: TCP_NODELAY: %w", err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(a)
			unix.Close(c)
			return -1, -1, fmt.Errorf("raw tcp: non-blocking: %w", err)
		}
	}
	return a, c, nil
}

// RawRead busy-polls the non-blocking descriptor fd until b is full. Like
// the tcp provider it uses RawSyscall: the floor is what the kernel costs,
// not the scheduler.
func RawRead(fd int, b []byte) error {
	for got := 0; got < len(b); {
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[got])), uintptr(len(b)-got))
		if e == unix.EAGAIN {
			continue
		}
		if e != 0 {
			return fmt.Errorf("raw read: %w", e)
		}
		if n == 0 {
			return errors.New("raw read: end of stream")
		}
		got += int(n)
	}
	return nil
}

// RawWrite writes b to the non-blocking descriptor fd, busy-polling while
// the socket is full.
func RawWrite(fd int, b []byte) error {
	for len(b) > 0 {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		if e == unix.EAGAIN {
			continue
		}
		if e != 0 {
			return fmt.Errorf("raw write: %w", e)
		}
		b = b[n:]
	}
	return nil
}

func rawEcho(fd, n int) error {
	var buf [8]byte
	for range n {
		if err := RawRead(fd, buf[:]); err != nil {
			return err
		}
		if err := RawWrite(fd, buf[:]); err != nil {
			return err
		}
	}
	return nil
}
