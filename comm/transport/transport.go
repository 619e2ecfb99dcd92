// Package transport is the contract between package comm and the layer that
// moves bytes: the few operations comm needs from the queues below it. It
// holds only the interface and its small types, so that a binding (to
// rdmaio's RC and UD queue pairs, or the in-memory transport of tests)
// depends on this package and not on comm.
//
// # What a binding provides
//
//   - Send: a message (a header and a gather list) to one rank, delivered
//     exactly once and, between one pair of ranks, in the order sent. Every
//     message comm sends to a rank goes through Send, so one ordered path per
//     peer suffices: an RC queue pair, or a UD queue pair made reliable with
//     proto.Link. Send copies or sends the bytes before it returns (eager
//     bounce buffers); it never waits for the peer to poll.
//   - Optionally, one-sided access: Register exposes memory, Read fetches
//     from a peer's registered memory into a local scatter list without the
//     peer's involvement (RDMA READ), Write stores into it (RDMA WRITE).
//     Caps.OneSided tells comm whether to use them.
//   - Poll and Wait: incoming messages and one-sided completions are handed
//     to a Handler from Poll, on the caller's goroutine; Wait blocks until
//     Poll may have something.
//
// A binding over rdmaio RC queue pairs maps Send to a SEND (inline or from
// registered bounce buffers, with a software backlog when the send queue or
// the peer's receive credits are exhausted), Read to RDMA READ with the
// peer's rkey, Write to RDMA WRITE, Poll to the completion queues, and Wait
// to CQ.Wait. A binding over UD runs one proto.Link per peer for Send.
package transport

import (
	"encoding/binary"
	"errors"
	"time"
)

// Transport is one rank's end of the job's transport. Methods other than
// Poll may be called from several goroutines at once; Poll is called by one
// goroutine at a time.
type Transport interface {
	// Rank is this rank, 0 ≤ Rank < Size.
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Caps describes what the transport offers.
	Caps() Caps

	// Send sends the message hdr followed by the pieces of data to rank
	// dst (which may be Rank itself). Messages to one destination arrive
	// exactly once and in the order of the Send calls that returned. hdr
	// and data may be reused as soon as Send returns. The total length is
	// at most Caps.MaxMsg and len(data) at most Caps.MaxSGE (when they are
	// non-zero).
	Send(dst int, hdr []byte, data [][]byte) error

	// Register exposes buf for one-sided access by every rank until
	// Deregister, and returns the region peers name in Read and Write.
	// ErrNotSupported without Caps.OneSided.
	Register(buf []byte) (Region, error)
	// Deregister ends the exposure of a region from Register.
	Deregister(r Region) error
	// Read starts copying len(local[0])+len(local[1])+… bytes from rank
	// src's registered memory at remote into the local pieces. The
	// handler's Complete(id, err) reports the end; local must not be
	// touched until then.
	Read(src int, remote Region, local [][]byte, id uint64) error
	// Write starts copying the local pieces into rank dst's registered
	// memory at remote; Complete(id, err) reports the end.
	Write(dst int, remote Region, local [][]byte, id uint64) error

	// Poll hands every message and completion that has arrived to h and
	// returns how many it handed. It never blocks.
	Poll(h Handler) int
	// Wait blocks until Poll may have something to hand out or d has
	// passed. Spurious returns are allowed.
	Wait(d time.Duration)

	// Close releases the transport. Operations in progress are abandoned.
	Close() error
}

// ShortHeaderLen is the capacity of a ShortHeader.
const ShortHeaderLen = 16

// ShortHeader holds the header of a ShortSender.SendShort as two
// little-endian words: byte i of the header is byte i%8 of Lo (i < 8) or
// Hi. It is passed by value, in registers: a header passed as a slice to an
// interface method escapes to the heap, and one passed as an array travels
// through memory, where loading it whole right after it was written byte
// by byte stalls.
type ShortHeader struct{ Lo, Hi uint64 }

// ShortHeaderOf returns the ShortHeader holding b (at most ShortHeaderLen
// bytes; the bytes after it are zero).
func ShortHeaderOf(b []byte) ShortHeader {
	var a [ShortHeaderLen]byte
	copy(a[:], b)
	return ShortHeader{Lo: binary.LittleEndian.Uint64(a[:]), Hi: binary.LittleEndian.Uint64(a[8:])}
}

// Put writes the header's ShortHeaderLen bytes into b.
func (h ShortHeader) Put(b []byte) {
	_ = b[ShortHeaderLen-1]
	binary.LittleEndian.PutUint64(b, h.Lo)
	binary.LittleEndian.PutUint64(b[8:], h.Hi)
}

// ShortSender is implemented by transports with a cheaper way to send a
// message made of a short header and one piece of data, the shape of every
// small message comm sends. comm uses it when the transport has it.
type ShortSender interface {
	// SendShort is Send(dst, hdr[:hn], [][]byte{data}), 0 ≤ hn ≤
	// ShortHeaderLen.
	SendShort(dst int, hdr ShortHeader, hn int, data []byte) error
}

// Batcher is implemented by transports that can hold small messages back
// and post several to one rank with one doorbell: comm sends the messages
// of non-blocking eager sends this way.
type Batcher interface {
	// SendShortHeld is SendShort, except that the message may be held in
	// the transport (its bytes copied before it returns) and posted with
	// later ones. Held messages keep their order with every other message
	// to the same rank, and are posted at the latest by the next Flush,
	// Poll, Wait, Send, SendShort or Close, or after a short grace when
	// none of these comes.
	SendShortHeld(dst int, hdr ShortHeader, hn int, data []byte) error
	// Flush posts every held message. It costs one atomic load when
	// nothing is held.
	Flush()
}

// Idler is implemented by transports that can tell cheaply, without
// taking a lock, that a Poll would hand out nothing: a waiting caller then
// skips the Poll and the locks around it. comm uses it when the transport
// has it.
type Idler interface {
	// Idle reports that Poll would hand out nothing and has nothing of its
	// own to do now. It may report false when Poll then finds nothing.
	Idle() bool
}

// Taker is implemented by transports that can offer the next message from
// one rank to a receive that waits for it, where the message lies and
// without a Poll: comm's blocking waits for a receive from a known rank
// watch that rank alone and take a small message straight into the
// receive's buffer. Like Poll, Take is called by one goroutine at a time
// and never while Poll runs.
type Taker interface {
	// Takes reports whether Take may ever take a message from rank src
	// (the answer does not change).
	Takes(src int) bool
	// Arrived reports, without a lock, that a message from rank src may
	// have arrived: true whenever Take would find one, possibly true when
	// it finds none. It costs a few loads.
	Arrived(src int) bool
	// Take offers h the next message from rank src, when it is small
	// enough to lie in the transport and is the next one Poll would hand
	// out from src. If h.Take returns true the message is consumed as
	// though Poll had delivered it; otherwise it stays for Poll. Take
	// reports whether a message was consumed. With spin > 0, when nothing
	// from src has arrived Take waits for it, looking up to spin more
	// times while it holds what a Poll would need (other pollers wait
	// meanwhile: keep spin short); spin 0 never waits.
	Take(src int, h MsgTaker, spin int) bool
}

// Reaper is implemented by Takers that can make a Poll's progress
// without taking what arrived since: a receive that watches for its
// message (Taker) frees the room of earlier sends without moving the
// message into a queue, where Take could no longer offer it.
type Reaper interface {
	// Reap is Poll, except that messages that arrived since the last Poll
	// stay where they lie (what earlier polls collected is handed out).
	// It may poll as Poll does where the transport cannot tell messages
	// from other completions.
	Reap(h Handler) int
}

// MsgTaker examines the message Taker.Take offers.
type MsgTaker interface {
	// Take reports whether it takes msg, a message from the rank Take
	// was called for; msg is valid only during the call.
	Take(msg []byte) bool
}

// ReadBatcher is implemented by transports that can hold a Read back, its
// work requests ready, and post it with the next one to the same rank:
// comm issues the READs of one rendezvous this way, all but the last, so
// that the provider gets them as one chain (one doorbell; the shm provider
// moves a run of READs with one system call).
type ReadBatcher interface {
	// ReadHeld is Read, except that the operation may stay in the
	// transport, to be posted with the next Read or Write to rank src, or
	// at the latest by the next Flush, Poll, Wait, Send or Close, or after a
	// short grace when none of these comes.
	ReadHeld(src int, remote Region, local [][]byte, id uint64) error
}

// Backlogger is implemented by transports whose Send, finding no room
// toward a rank (its ring or queue full), keeps the message in memory of
// its own until the rank makes room. comm's blocking sends, which return
// once the message is copied, wait while such a backlog remains, so that a
// rank streaming blocking sends to a slower one waits for it (as MPI_Send
// may) instead of queueing without bound and keeping the processor the
// slower rank needs.
type Backlogger interface {
	// Backlogged reports that messages to rank dst wait in the transport
	// for room. It costs one atomic load.
	Backlogged(dst int) bool
}

// Stager is implemented by transports with memory that other ranks read
// faster than ordinary memory once it is registered (shm: shared memory
// they copy from directly, where ordinary memory costs them a system call
// that pins its pages one by one). comm packs the blocks of large vector
// sends there.
type Stager interface {
	// AllocStage returns n bytes of such memory, which lives as long as
	// the transport, or an error (such as ErrNotSupported) when the
	// transport has none.
	AllocStage(n int) ([]byte, error)
	// StagedTo reports whether rank dst reads that memory directly, so
	// that reading a few bytes of it again and again while the sender
	// fills it (a staged rendezvous) costs little.
	StagedTo(dst int) bool
}

// Handler receives what Poll hands out.
type Handler interface {
	// Deliver is a message from rank src. msg is valid only during the
	// call.
	Deliver(src int, msg []byte)
	// Complete reports the end of a Read or Write started with id.
	Complete(id uint64, err error)
}

// Region names registered memory: a key and the address of its first byte
// in the key's address space (rdmaio: rkey and MR.Addr()+offset).
type Region struct {
	Key, Addr uint64
}

// Caps are what a transport offers.
type Caps struct {
	// Name names the transport in messages ("mem", "shm", "tcp", …).
	Name string
	// MaxMsg is the largest message Send takes, header included; 0 means
	// no limit.
	MaxMsg int
	// MaxSGE is the longest gather list (data, not counting hdr) Send
	// takes and the longest scatter list Read takes; 0 means no limit.
	MaxSGE int
	// OneSided tells whether Register, Read and Write work.
	OneSided bool
	// MaxRead is the largest single Read or Write; 0 means no limit.
	MaxRead int
	// EagerLimit is the transport's preferred eager limit in bytes: the
	// largest payload comm should send with Send rather than by rendezvous.
	EagerLimit int
	// PeerEagerLimit, when non-nil (one entry per rank), is the preferred
	// eager limit to each rank where it depends on the path, for instance
	// on the provider that reaches the rank; zero entries mean EagerLimit.
	// Both ends of a pair report the same limit for each other.
	PeerEagerLimit []int
	// PeerMaxMsg, when non-nil (one entry per rank), is the largest
	// message Send takes to each rank; zero entries mean MaxMsg. MaxMsg is
	// then the largest of them.
	PeerMaxMsg []int
}

// Errors a transport returns.
var (
	// ErrNotSupported: the operation needs a capability the transport
	// does not have.
	ErrNotSupported = errors.New("transport: operation not supported")
	// ErrClosed: the transport was closed.
	ErrClosed = errors.New("transport: closed")
	// ErrRank: the rank is out of range.
	ErrRank = errors.New("transport: rank out of range")
	// ErrRegion: the region is unknown or the access falls outside it.
	ErrRegion = errors.New("transport: invalid region access")
	// ErrTooLong: the message exceeds Caps.MaxMsg.
	ErrTooLong = errors.New("transport: message too long")
)
