// Package ctl is the control protocol between a rank's program and its DSM
// pager, over their Unix socket pair: length-prefixed frames, some of which
// carry descriptors (SCM_RIGHTS).
//
//	length  uint32 big endian  bytes that follow
//	type    byte
//	req     uvarint            request number (answers carry it back)
//	a, b    varint             arguments
//	data    the rest
package ctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/internal/bell"
	"github.com/jiarun/jia/shmem/protocol"
)

// Env is the environment variable that starts a program in pager mode.
const Env = "JIA_DSM_PAGER"

// PagerFD is the descriptor of the pager's end of the socket pair.
const PagerFD = 3

// Type names a frame.
type Type uint8

// Frames from the program to the pager.
const (
	THello   Type = iota + 1 // Data: JSON Hello; carries the userfaultfd and the call queue's memfd
	TPeers                   // Data: JSON Peers; answered with a JSON ShmCard
	TAlloc                   // A: first page, B: pages; Data: JSON AllocArgs; carries the memfd
	TFree                    // A: first page
	TCall                    // A: protocol.EventKind, B: lock or condition variable
	TStats                   // ask for the statistics (A: the call queue's head: after the calls before it)
	TBye                     // the program is done: exit
	TConnect                 // Data: JSON Connect
)

// Frames from the pager to the program.
const (
	TReady   Type = iota + 32 // Data: JSON Ready
	TDone                     // Req completed; A: error code (0: none); Data: error text
	TStatsOK                  // Data: JSON protocol.Stats
	TFatal                    // Data: why the pager must stop the job
)

// Frame is one control message.
type Frame struct {
	Type Type
	Req  uint64
	A, B int64
	Data []byte
}

// Hello is the first frame: who the pager works for.
type Hello struct {
	Rank, Size    int
	Job           string
	Secret        []byte
	Host          string // IP address to listen on for other pagers
	PageSize      int
	Features      uint64 // of the userfaultfd
	CachePages    int
	Prefetch      int
	PrefetchMax   int
	HomeMigration bool
	// HostID identifies the rank's host: pagers with equal ones talk
	// through shared memory (package rdmanet), unless TCPOnly.
	HostID  string
	TCPOnly bool
	// LocalSize is the number of ranks on the host (0: unknown).
	LocalSize int
}

// Ready is the pager's answer to the hello.
type Ready struct {
	Addr string    // the pager's TCP address for other pagers
	Bell bell.Addr // what wakes the pager when it sleeps
}

// ShmCard is the pager's answer to TPeers: its shared-memory device, its
// bell, and the queue pair it made for each rank on its host (0 for the
// others).
type ShmCard struct {
	Addr []byte `json:",omitempty"`
	Bell bell.Addr
	QPNs []uint32 `json:",omitempty"`
	// Pid and Bits name the pager's bitmap of its pages read directly by
	// the others (/proc/Pid/fd/Bits).
	Pid, Bits int
}

// Connect gives the pager, for every rank, its shared-memory device, its
// bell, the queue pair it made for this rank (0: none) and its bitmap.
type Connect struct {
	Addrs [][]byte
	Bells []bell.Addr
	QPNs  []uint32
	Pids  []int
	Bits  []int
	// BoardPid and BoardFD name the host's barrier board (package board;
	// /proc/BoardPid/fd/BoardFD), when every rank runs on this host; the
	// pager answers with A = 1 if it mapped it.
	BoardPid, BoardFD int `json:",omitempty"`
}

// Peers is what the program learned at the DSM's start.
type Peers struct {
	Base  uint64   // program address of page 0
	Span  uint64   // bytes reserved from Base
	Addrs []string // every pager's address, by rank
	Hosts []string // every rank's host identity, by rank
}

// AllocArgs is the data of a TAlloc frame.
type AllocArgs struct {
	Size      int // bytes asked for
	Placement protocol.Placement
}

// maxFrame bounds a control frame.
const maxFrame = 1 << 20

// Append appends f, length-prefixed, to b.
func Append(b []byte, f Frame) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, byte(f.Type))
	b = binary.AppendUvarint(b, f.Req)
	b = binary.AppendVarint(b, f.A)
	b = binary.AppendVarint(b, f.B)
	b = append(b, f.Data...)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// ErrFrame is wrapped by the errors of malformed frames.
var ErrFrame = errors.New("malformed control frame")

// parse decodes the frame at the start of buf, if it is complete, and
// returns how many bytes it took.
func parse(buf []byte) (Frame, int, error) {
	if len(buf) < 4 {
		return Frame{}, 0, nil
	}
	size := binary.BigEndian.Uint32(buf)
	if size > maxFrame || size < 1 {
		return Frame{}, 0, fmt.Errorf("%w: length %d", ErrFrame, size)
	}
	if len(buf) < 4+int(size) {
		return Frame{}, 0, nil
	}
	body := buf[4 : 4+size]
	f := Frame{Type: Type(body[0])}
	body = body[1:]
	var n int
	if f.Req, n = binary.Uvarint(body); n <= 0 {
		return Frame{}, 0, fmt.Errorf("%w: request number", ErrFrame)
	}
	body = body[n:]
	if f.A, n = binary.Varint(body); n <= 0 {
		return Frame{}, 0, fmt.Errorf("%w: argument", ErrFrame)
	}
	body = body[n:]
	if f.B, n = binary.Varint(body); n <= 0 {
		return Frame{}, 0, fmt.Errorf("%w: argument", ErrFrame)
	}
	f.Data = append([]byte(nil), body[n:]...)
	return f, 4 + int(size), nil
}

// Reader reads frames from a Unix stream socket, collecting the
// descriptors sent with them in arrival order.
type Reader struct {
	c   *net.UnixConn
	buf []byte
	off int
	fds []int
	oob []byte
}

// NewReader returns a Reader of c.
func NewReader(c *net.UnixConn) *Reader {
	return &Reader{c: c, oob: make([]byte, unix.CmsgSpace(16*4))}
}

// Next returns the next frame. At the end of the stream it returns io.EOF.
func (r *Reader) Next() (Frame, error) {
	for {
		f, n, err := parse(r.buf[r.off:])
		if err != nil {
			return Frame{}, err
		}
		if n > 0 {
			r.off += n
			return f, nil
		}
		if r.off > 0 {
			r.buf = append(r.buf[:0], r.buf[r.off:]...)
			r.off = 0
		}
		if cap(r.buf)-len(r.buf) < 64<<10 {
			r.buf = append(r.buf, make([]byte, 64<<10)...)[:len(r.buf)]
		}
		space := r.buf[len(r.buf):cap(r.buf)]
		k, oobn, _, _, err := r.c.ReadMsgUnix(space, r.oob)
		if oobn > 0 {
			r.collect(r.oob[:oobn])
		}
		if k > 0 {
			r.buf = r.buf[:len(r.buf)+k]
			continue
		}
		if err == nil {
			err = io.EOF
		}
		if len(r.buf) > r.off && errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: stream ends inside a frame", ErrFrame)
		}
		return Frame{}, err
	}
}

func (r *Reader) collect(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
		}
		r.fds = append(r.fds, fds...)
	}
}

// TakeFD returns the oldest descriptor received and not yet taken.
func (r *Reader) TakeFD() (int, bool) {
	if len(r.fds) == 0 {
		return -1, false
	}
	fd := r.fds[0]
	r.fds = r.fds[1:]
	return fd, true
}

// Error codes of TDone frames: the protocol's program errors, so that the
// program can rebuild errors that errors.Is recognises.
var codes = []error{
	nil,
	protocol.ErrLockHeld,
	protocol.ErrLockNotHeld,
	protocol.ErrBarrierInCS,
	protocol.ErrBusy,
	protocol.ErrBadID,
	protocol.ErrNoRegion,
	protocol.ErrPlacement,
	protocol.ErrOverlap,
	protocol.ErrProtocol,
	ErrMismatch,
}

// ErrMismatch is the error of a collective call (Alloc, Free) that the
// ranks did not make alike.
var ErrMismatch = errors.New("mismatched collective call")

// Code returns the code of err's kind (0 for nil, -1 for other errors).
func Code(err error) int64 {
	if err == nil {
		return 0
	}
	for i, e := range codes[1:] {
		if errors.Is(err, e) {
			return int64(i + 1)
		}
	}
	return -1
}

// CodeErr returns the error of a code, or nil for 0 and unknown codes.
func CodeErr(code int64) error {
	if code > 0 && code < int64(len(codes)) {
		return codes[code]
	}
	return nil
}
