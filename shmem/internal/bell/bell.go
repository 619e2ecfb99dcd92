// Package bell is how the processes of a host wake a DSM pager that sleeps:
// a word in shared memory that says whether the pager sleeps, and a Unix
// datagram socket (in the abstract namespace) that the pager polls with
// the rest of its descriptors. A ringer rings — sends a datagram, one
// system call — only when the word says the pager sleeps, so a pager that
// polls costs its peers nothing.
//
// The word lives in a small file in the shared memory directory, named
// like the rdmaio shm provider's segments (jia-<job>-r<rank>-p<pid>-…), so
// that the provider's Cleanup finds it after a crash. The pager removes it
// (Unlink) once every ringer has mapped it.
package bell

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio/shm"
)

// Dir is where the word's file lives.
var Dir = "/dev/shm"

// Bell is the pager's side.
type Bell struct {
	fd   int
	addr Addr
	mem  []byte
	path string // "" once unlinked
}

// Addr is what a ringer needs to know of a bell.
type Addr struct {
	Socket string // abstract socket name, without the leading NUL
	File   string // path of the word's file
}

// New makes a bell for rank of job.
func New(job string, rank int) (*Bell, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("bell: %w", err)
	}
	tag := fmt.Sprintf("%s%s-r%d-p%d-dsmbell-%s", shm.SegmentPrefix, shm.JobTag(job), rank, os.Getpid(), hex.EncodeToString(rnd[:]))
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("bell: socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@" + tag}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bell: bind: %w", err)
	}
	path := filepath.Join(Dir, tag)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bell: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(4096); err != nil {
		os.Remove(path)
		unix.Close(fd)
		return nil, fmt.Errorf("bell: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		os.Remove(path)
		unix.Close(fd)
		return nil, fmt.Errorf("bell: mmap: %w", err)
	}
	return &Bell{fd: fd, addr: Addr{Socket: tag, File: path}, mem: mem, path: path}, nil
}

// Addr returns the bell's address, for ringers.
func (b *Bell) Addr() Addr { return b.addr }

// FD returns the socket to poll for readability: a ring arrived.
func (b *Bell) FD() int { return b.fd }

func (b *Bell) word() *uint32 { return (*uint32)(unsafe.Pointer(&b.mem[0])) }

// SetSleeping says whether the pager sleeps (and wants to be rung). The
// pager sets it, checks its queues once more and only then sleeps: a ringer
// that published before the check is seen by it, one that published after
// sees the word.
func (b *Bell) SetSleeping(on bool) {
	v := uint32(0)
	if on {
		v = 1
	}
	atomic.StoreUint32(b.word(), v)
}

// Ring wakes the bell's own owner if it sleeps (from another thread of
// its process).
func (b *Bell) Ring() {
	if atomic.LoadUint32(b.word()) == 0 {
		return
	}
	unix.Sendto(b.fd, ding, 0, &unix.SockaddrUnix{Name: "@" + b.addr.Socket})
}

// drainMax is how many rings Drain reads at most.
const drainMax = 16

// mmsghdr is struct mmsghdr of recvmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// Drain reads the rings that arrived, up to drainMax of them, in one
// system call (recvmmsg, with no buffers: a ring carries nothing), not
// another that finds the socket empty; the socket stays readable while
// more rings wait.
func (b *Bell) Drain() {
	var msgs [drainMax]mmsghdr
	unix.Syscall6(unix.SYS_RECVMMSG, uintptr(b.fd), uintptr(unsafe.Pointer(&msgs[0])), drainMax, unix.MSG_DONTWAIT, 0, 0)
}

// Unlink removes the word's file: every ringer has mapped it.
func (b *Bell) Unlink() {
	if b.path != "" {
		os.Remove(b.path)
		b.path = ""
	}
}

// Close unlinks the file and closes the socket.
func (b *Bell) Close() error {
	b.Unlink()
	return unix.Close(b.fd)
}

// ding is what a ring sends.
var ding = []byte{1}

// Ringer rings one bell.
type Ringer struct {
	fd  int
	sa  unix.SockaddrUnix
	mem []byte
}

// Dial maps the bell's word and makes a socket to ring it; it checks that
// the bell can be reached.
func Dial(a Addr) (*Ringer, error) {
	if a.Socket == "" || a.File == "" || !strings.HasPrefix(a.File, Dir+"/") || strings.Contains(a.File[len(Dir)+1:], "/") {
		return nil, fmt.Errorf("bell: bad address %+v", a)
	}
	f, err := os.OpenFile(a.File, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("bell: %w", err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("bell: mmap: %w", err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("bell: socket: %w", err)
	}
	r := &Ringer{fd: fd, sa: unix.SockaddrUnix{Name: "@" + a.Socket}, mem: mem}
	// One ring now: it fails unless the bell is reachable from here (the
	// same network namespace), and costs the pager one spurious wake-up.
	if err := unix.Sendto(fd, ding, 0, &r.sa); err != nil && !errors.Is(err, unix.EAGAIN) {
		r.Close()
		return nil, fmt.Errorf("bell: %s unreachable: %w", a.Socket, err)
	}
	return r, nil
}

// Ring wakes the pager if it sleeps.
func (r *Ringer) Ring() {
	if atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.mem[0]))) == 0 {
		return
	}
	// EAGAIN: the socket's queue is full of rings already.
	unix.Sendto(r.fd, ding, 0, &r.sa)
}

// Close releases the ringer.
func (r *Ringer) Close() error {
	unix.Munmap(r.mem)
	return unix.Close(r.fd)
}
