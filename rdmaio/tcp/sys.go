package tcp

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Raw system calls of the data path. They take preallocated iovecs and
// message headers so that posting and polling never allocate, pass
// MSG_NOSIGNAL so that a peer that went away yields EPIPE instead of a
// signal, and tell the race detector what the kernel read and wrote: a
// write on any socket happens before a read of it (ioSync), as the standard
// library's wrappers do, because the ranks of a test communicate through
// these sockets.

// ioSync is the race detector's synchronisation object for socket I/O.
var ioSync uint64

// rawMax is the largest transfer done with RawSyscall: on a non-blocking
// descriptor such a call returns at once, so the scheduler need not be told
// (which saves a good part of a small message's cost). Larger transfers use
// Syscall, so that a long copy does not hold up the scheduler or the
// garbage collector.
const rawMax = 64 << 10

// syscall3 calls trap(fd, p, a3), p a pointer (kept alive and up to date by
// being passed as one).
func syscall3(raw bool, trap uintptr, fd int, p unsafe.Pointer, a3 uintptr) (uintptr, unix.Errno) {
	if raw {
		r, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(p), a3)
		return r, e
	}
	r, _, e := unix.Syscall(trap, uintptr(fd), uintptr(p), a3)
	return r, e
}

func raceAfterRead(iov []unix.Iovec, n int) {
	if !raceEnabled {
		return
	}
	for i := 0; n > 0 && i < len(iov); i++ {
		m := min(int(iov[i].Len), n)
		n -= m
		if m > 0 {
			raceWriteRange(unsafe.Pointer(iov[i].Base), m)
		}
	}
	raceAcquire(unsafe.Pointer(&ioSync))
}

// sysRead reads into b.
func sysRead(fd int, b []byte) (int, unix.Errno) {
	if len(b) == 0 {
		return 0, 0
	}
	r, e := syscall3(len(b) <= rawMax, unix.SYS_READ, fd, unsafe.Pointer(&b[0]), uintptr(len(b)))
	return readDone(b, r, e)
}

// readDone returns the result of a read of r bytes into b (or its error)
// and tells the race detector that the kernel wrote them.
func readDone(b []byte, r uintptr, e unix.Errno) (int, unix.Errno) {
	if e != 0 {
		return 0, e
	}
	if raceEnabled {
		if r > 0 {
			raceWriteRange(unsafe.Pointer(&b[0]), int(r))
		}
		raceAcquire(unsafe.Pointer(&ioSync))
	}
	return int(r), 0
}

// sysRecvStream reads into b from a connected stream socket: recvfrom(2)
// goes to the socket directly, a shorter way through the kernel than
// read(2) (no file position, no generic file read), which counts on the
// busy-polling path where most calls find nothing.
func sysRecvStream(fd int, b []byte) (int, unix.Errno) {
	if len(b) == 0 {
		return 0, 0
	}
	var r uintptr
	var e unix.Errno
	if len(b) <= rawMax {
		r, _, e = unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
	} else {
		r, _, e = unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
	}
	return readDone(b, r, e)
}

// sysReadv reads into the buffers iov describes.
func sysReadv(fd int, iov []unix.Iovec) (int, unix.Errno) {
	if len(iov) == 0 {
		return 0, 0
	}
	r, e := syscall3(iovLen(iov) <= rawMax, unix.SYS_READV, fd, unsafe.Pointer(&iov[0]), uintptr(len(iov)))
	if e != 0 {
		return 0, e
	}
	raceAfterRead(iov, int(r))
	return int(r), 0
}

// sysSendmsg sends the buffers msg describes, total bytes.
func sysSendmsg(fd int, msg *unix.Msghdr, total int) (int, unix.Errno) {
	if raceEnabled {
		raceReleaseMerge(unsafe.Pointer(&ioSync))
	}
	r, e := syscall3(total <= rawMax, unix.SYS_SENDMSG, fd, unsafe.Pointer(msg), unix.MSG_NOSIGNAL)
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// sysSend sends b on a connected socket: send(2), which unlike write(2)
// takes MSG_NOSIGNAL and unlike sendmsg(2) copies no message header or
// iovec array in.
func sysSend(fd int, b []byte) (int, unix.Errno) {
	if raceEnabled {
		raceReleaseMerge(unsafe.Pointer(&ioSync))
	}
	var r uintptr
	var e unix.Errno
	if len(b) <= rawMax {
		r, _, e = unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
			unix.MSG_NOSIGNAL, 0, 0)
	} else {
		r, _, e = unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
			unix.MSG_NOSIGNAL, 0, 0)
	}
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// sysRecv receives one datagram into b, without its source address.
func sysRecv(fd int, b []byte) (int, unix.Errno) {
	r, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		unix.MSG_TRUNC, 0, 0)
	if e != 0 {
		return 0, e
	}
	if raceEnabled {
		if n := min(int(r), len(b)); n > 0 {
			raceWriteRange(unsafe.Pointer(&b[0]), n)
		}
		raceAcquire(unsafe.Pointer(&ioSync))
	}
	return int(r), 0
}

// sysEpollWait waits for events for at most msec milliseconds (0: poll, -1:
// for ever).
func sysEpollWait(epfd int, evs []unix.EpollEvent, msec int) (int, unix.Errno) {
	var r uintptr
	var e unix.Errno
	if msec == 0 {
		r, _, e = unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(epfd), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	} else {
		r, _, e = unix.Syscall6(unix.SYS_EPOLL_WAIT, uintptr(epfd), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)),
			uintptr(msec), 0, 0)
	}
	if e != 0 {
		return 0, e
	}
	return int(r), 0
}

// sysShutdownWrite sends a FIN after the data already queued.
func sysShutdownWrite(fd int) { _ = unix.Shutdown(fd, unix.SHUT_WR) }

// setIov points iov at b.
func setIov(iov *unix.Iovec, b []byte) {
	iov.Base = &b[0]
	iov.SetLen(len(b))
}

// pollFd waits until fd is ready for events (unix.POLLIN or unix.POLLOUT)
// or the deadline passes. It is used by the blocking connection set-up of
// the dialing side only.
func pollFd(fd int, events int16, deadline time.Time) error {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return unix.ETIMEDOUT
		}
		ms := int(left / time.Millisecond)
		if ms == 0 {
			ms = 1
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
	}
}

// readFull reads exactly len(b) bytes from the non-blocking fd before the
// deadline.
func readFull(fd int, b []byte, deadline time.Time) error {
	for got := 0; got < len(b); {
		n, e := sysRead(fd, b[got:])
		switch {
		case e == unix.EAGAIN || e == unix.EINTR:
			if err := pollFd(fd, unix.POLLIN, deadline); err != nil {
				return err
			}
		case e != 0:
			return e
		case n == 0:
			return unix.ECONNRESET
		default:
			got += n
		}
	}
	return nil
}

// writeFull writes all of b to the non-blocking fd before the deadline.
func writeFull(fd int, b []byte, deadline time.Time) error {
	var iov [1]unix.Iovec
	var msg unix.Msghdr
	for len(b) > 0 {
		setIov(&iov[0], b)
		msg.Iov = &iov[0]
		msg.SetIovlen(1)
		n, e := sysSendmsg(fd, &msg, len(b))
		switch {
		case e == unix.EAGAIN || e == unix.EINTR:
			if err := pollFd(fd, unix.POLLOUT, deadline); err != nil {
				return err
			}
		case e != 0:
			return e
		default:
			b = b[n:]
		}
	}
	return nil
}
