package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/jiarun/jia/rdmaio"
)

// The main segment of a device (one per rank) is laid out as
//
//	header (4 KiB) | CQ doorbells | SRQ words | MR table | QP control | rings
//
// Everything a peer reads from it is validated before use: the peer's
// layout parameters are bounded and the offsets recomputed, never taken from
// the segment.

const (
	segMagic      = "JIASHM\x00\x01"
	allocMagic    = "JIAMEM\x00\x01"
	layoutVersion = 3
	pageSize      = 4096
	lineSize      = 64

	hdrBytes   = pageSize
	cqdbBytes  = lineSize
	srqBytes   = lineSize
	mrBytes    = lineSize
	qpCtlBytes = 8 * lineSize
)

// Header offsets.
const (
	hMagic     = 0   // [8]byte
	hVersion   = 8   // u32
	hRank      = 12  // u32
	hPid       = 16  // u32
	hDevID     = 20  // u32
	hClosed    = 24  // u32, atomic: set when the device closes
	hMapped    = 28  // u32, atomic: peers that mapped the segment
	hExpect    = 32  // u32: peers expected to map it (0 = unknown)
	hMaxCQ     = 36  // u32
	hMaxSRQ    = 40  // u32
	hMaxMR     = 44  // u32
	hMaxQP     = 48  // u32
	hRingBytes = 52  // u32
	hMTU       = 56  // u32
	hFlags     = 60  // u32
	hSegSize   = 64  // u64
	hBaseVA    = 72  // u64: the owner's address of the segment (CMA probe)
	hPrefixLen = 80  // u32
	hJobLen    = 84  // u32
	hPrefix    = 128 // [128]byte: name prefix of the owner's segments
	hJob       = 256 // [256]byte
	maxPrefix  = 128
	maxJob     = 256
)

// Header flags.
const (
	flagCMA = 1 << 0 // the owner allows process_vm_readv/writev
)

// QP control slot offsets (qpCtlBytes per QP). Line 0 is written by the
// owner at setup and read by peers; the others are each written by one side.
const (
	cQPN      = 0   // u32, 0 when the slot is free
	cType     = 4   // u32
	cState    = 8   // u32, atomic
	cQKey     = 12  // u32
	cAccess   = 16  // u32
	cSRQ      = 20  // i32, -1 without SRQ
	cRecvDB   = 24  // u32: doorbell of the recv CQ
	cSendDB   = 28  // u32: doorbell of the send CQ
	cMinRNR   = 32  // i64 nanoseconds
	cPosted   = 64  // i64, read atomically (written plainly by its one writer): receive WRs posted since the QP was reset (own receive queue; never decremented)
	cProducer = 128 // u64, atomic: RC: (devID<<32 | qpn) of the connected sender, claimUsed after it left
	cHead     = 192 // u64, atomic: UD: next ticket
	cAcked    = 256 // u64, atomic: RC: sequence number of the last ring entry consumed (acknowledges entries marked efNoAbort)
	cDead     = 320 // u32, atomic: RC ring abandoned after an RNR abort
)

// MR table entry offsets (mrBytes per key slot). The owner writes the fields
// and then the key; a peer increments inuse, checks the key, uses the fields
// and decrements inuse; the owner invalidates the key and waits for inuse to
// drop to zero before it lets the memory go.
const (
	mKey    = 0  // u32, atomic; 0 = invalid
	mAccess = 4  // u32
	mKind   = 8  // u32
	mSeg    = 12 // u32: allocation id (kindShared)
	mSegOff = 16 // u64: offset of the region in the allocation's data
	mAddr   = 24 // u64: region base in its address space
	mLen    = 32 // u64
	mInuse  = 40 // u32, atomic
	mVA     = 48 // u64: owner's virtual address (kindHeap, for CMA)
)

// Memory kinds of a region.
const (
	kindShared = 1 // in a shared allocation: peers map it and copy directly
	kindHeap   = 2 // ordinary memory: peers use process_vm_readv/writev
)

// CQ doorbell offsets: a futex word bumped when a waiter must wake.
const (
	dbSeq     = 0 // u32, atomic
	dbWaiters = 4 // u32, atomic
)

// SRQ word offsets.
const (
	sPosted = 0 // i64: receive WRs posted and not yet taken (see publishPosted)
)

// RC ring entry layout. Entries start on 64-byte boundaries and never wrap;
// a pad entry fills the end of the ring when the next one does not fit.
//
// The first word of an entry is its state, stamped with the entry's
// sequence number (seq<<16 | status<<8 | kind). The consumer polls the next
// header position for the sequence number it expects; a stale word can never
// match because sequence numbers only grow and the consumer zeroes the first
// word of every other line it consumes, so that payload bytes never appear
// where a header may be read. The consumer acknowledges in the same word
// (one CAS from published to done or NAK; a receive from an SRQ whose
// payload is pulled from the sender's memory is claimed first, with a CAS to
// taken), so the producer learns from it what was consumed. An entry whose
// producer never withdraws it (efNoAbort: infinite RNR retries) needs no
// claim: the consumer leaves its state alone unless it NAKs it, and
// publishes the sequence number of the last entry it consumed in a word of
// its own (cAcked), once per poll, and in the inline entries it sends back
// to the producer (efAck), which then need not read cAcked. In a ping-pong
// the entry's line then only travels from producer to consumer, and the
// consumer writes only lines that stay in its cache.
//
// A plain SEND (no immediate) has a short header (efShort): its length
// where the immediate would be, and its body from byte 16, so that a
// 16-byte message header and 32 bytes of data, or a rendezvous request,
// still fit in one line.
const (
	eState = 0  // u64, atomic: entry state
	eOp    = 8  // u8
	eFlags = 9  // u8
	eNSGE  = 10 // u16: descriptors that follow
	eImm   = 12 // u32
	eLen   = 16 // u32: message length
	eRKey  = 20 // u32 (RDMA WRITE with immediate)
	eRAddr = 24 // u64 (RDMA WRITE with immediate)
	eData  = 32 // inline payload, or descriptors

	eLenShort  = 12 // u32: message length (efShort)
	eDataShort = 16 // inline payload, or descriptors (efShort)

	// eAckShort (u16, where an inline entry has no descriptors to count)
	// carries back, with efAck, the low 16 bits of the sequence number of
	// the last entry its producer consumed from the QP it sends to. Its
	// consumer completes its own SENDs from it (ackHint) without reading
	// that QP's cAcked, a line the other side writes after every post: in
	// a ping-pong every such read waited for a cache-line transfer.
	eAckShort = eNSGE

	descBytes = 24 // kind u32, seg u32, off u64, len u64
)

// bodyOff returns where the body (inline payload or descriptors) of an
// entry with flags starts.
func bodyOff(flags uint8) int {
	if flags&efShort != 0 {
		return eDataShort
	}
	return eData
}

// Entry kinds (bits 0..7 of the state word).
const (
	stPublished = 1 // written by the producer
	stTaken     = 2 // claimed by the consumer with a receive WR
	stAborted   = 3 // withdrawn by the producer (RNR retries exceeded)
	stNak       = 4 // failed at the consumer; the status is in bits 8..15
	stPad       = 5 // filler to the end of the ring
	stDone      = 6 // consumed; the producer may reuse the space
)

func stamp(seq uint64, kind uint64, status rdmaio.Status) uint64 {
	return seq<<16 | uint64(status)<<8 | kind
}
func stampSeq(w uint64) uint64 { return w >> 16 }

// seqIs reports whether state word w carries sequence number seq. Only the
// low 48 bits of a sequence number fit in a state word; they wrap after
// 2^48 entries, long after any entry of the previous wrap left the ring.
func seqIs(w, seq uint64) bool           { return w>>16 == seq&(1<<48-1) }
func stampKind(w uint64) uint64          { return w & 0xff }
func stampStatus(w uint64) rdmaio.Status { return rdmaio.Status(w >> 8) }

// claimUsed in cProducer marks a ring whose producer left: the consumer must
// be reset before another producer may connect.
const claimUsed = 1

// Entry flags.
const (
	efInline  = 1 << 0 // payload follows the header
	efNoAbort = 1 << 1 // the producer never withdraws the entry (infinite RNR retries)
	efShort   = 1 << 2 // short header: a SEND without immediate (see eLenShort)
	efAck     = 1 << 3 // an inline entry carries an acknowledgement back (eAckShort)
)

// UD inbox slot layout (a bounded multi-producer queue: a producer claims a
// ticket with CAS on the head and publishes the slot's sequence word).
const (
	uSeq     = 0  // u64, atomic
	uLen     = 8  // u32
	uImm     = 12 // u32
	uFlags   = 16 // u32
	uQKey    = 20 // u32
	uSrcQPN  = 24 // u32
	uSrcRank = 28 // u32
	uData    = 64

	ufImm = 1 << 0
)

// layout is the geometry of a main segment.
type layout struct {
	maxCQ, maxSRQ, maxMR, maxQP int
	ringBytes, mtu              int
	offCQ, offSRQ, offMR, offQP int
	offRing, size               int
}

// Bounds of the layout parameters (also applied to peers' headers).
const (
	minRing = 16 << 10
	maxRing = 64 << 20
	maxQPs  = 1 << 16
	maxMRs  = 1 << 20
	maxCQs  = 1 << 12
	maxSRQs = 1 << 12
	minMTU  = 256
	maxMTU  = 1 << 20
)

func newLayout(maxCQ, maxSRQ, maxMR, maxQP, ringBytes, mtu int) (layout, error) {
	l := layout{maxCQ: maxCQ, maxSRQ: maxSRQ, maxMR: maxMR, maxQP: maxQP, ringBytes: ringBytes, mtu: mtu}
	switch {
	case maxCQ < 1 || maxCQ > maxCQs:
		return l, fmt.Errorf("max_cq %d out of range 1..%d", maxCQ, maxCQs)
	case maxSRQ < 1 || maxSRQ > maxSRQs:
		return l, fmt.Errorf("max_srq %d out of range 1..%d", maxSRQ, maxSRQs)
	case maxMR < 1 || maxMR > maxMRs:
		return l, fmt.Errorf("max_mr %d out of range 1..%d", maxMR, maxMRs)
	case maxQP < 1 || maxQP > maxQPs:
		return l, fmt.Errorf("max_qp %d out of range 1..%d", maxQP, maxQPs)
	case ringBytes < minRing || ringBytes > maxRing || ringBytes&(ringBytes-1) != 0:
		// A power of two: positions in the ring are offsets modulo its
		// size, masked (a division took 10-15 ns of each message).
		return l, fmt.Errorf("ring_bytes %d: want a power of two in %d..%d", ringBytes, minRing, maxRing)
	case mtu < minMTU || mtu > maxMTU || mtu%lineSize != 0:
		return l, fmt.Errorf("mtu %d: want a multiple of %d in %d..%d", mtu, lineSize, minMTU, maxMTU)
	case udSlots(ringBytes, mtu) < 2:
		return l, fmt.Errorf("ring_bytes %d holds fewer than 2 datagrams of mtu %d", ringBytes, mtu)
	}
	off := hdrBytes
	l.offCQ = off
	off += maxCQ * cqdbBytes
	l.offSRQ = off
	off += maxSRQ * srqBytes
	l.offMR = off
	off += maxMR * mrBytes
	l.offQP = off
	off += maxQP * qpCtlBytes
	off = roundUp(off, pageSize)
	l.offRing = off
	off += maxQP * ringBytes
	l.size = off
	return l, nil
}

func udSlotBytes(mtu int) int    { return uData + roundUp(mtu, lineSize) }
func udSlots(ring, mtu int) int  { return ring / udSlotBytes(mtu) }
func roundUp(n, to int) int      { return (n + to - 1) / to * to }
func (l *layout) cqdb(i int) int { return l.offCQ + i*cqdbBytes }
func (l *layout) srq(i int) int  { return l.offSRQ + i*srqBytes }
func (l *layout) mr(i int) int   { return l.offMR + i*mrBytes }
func (l *layout) qp(i int) int   { return l.offQP + i*qpCtlBytes }
func (l *layout) ring(i int) int { return l.offRing + i*l.ringBytes }

// Typed views of shared memory. Offsets are always computed by this package
// and bounds-checked by the slice indexing.

func p32(b []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off : off+4][0])) }
func p64(b []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&b[off : off+8][0])) }
func pi64(b []byte, off int) *int64 { return (*int64)(unsafe.Pointer(&b[off : off+8][0])) }

func load32(b []byte, off int) uint32     { return atomic.LoadUint32(p32(b, off)) }
func store32(b []byte, off int, v uint32) { atomic.StoreUint32(p32(b, off), v) }
func load64(b []byte, off int) uint64     { return atomic.LoadUint64(p64(b, off)) }
func store64(b []byte, off int, v uint64) { atomic.StoreUint64(p64(b, off), v) }
func loadI64(b []byte, off int) int64     { return atomic.LoadInt64(pi64(b, off)) }
func storeI64(b []byte, off int, v int64) { atomic.StoreInt64(pi64(b, off), v) }
func get32(b []byte, off int) uint32      { return *p32(b, off) }
func put32(b []byte, off int, v uint32)   { *p32(b, off) = v }
func get64(b []byte, off int) uint64      { return *p64(b, off) }
func put64(b []byte, off int, v uint64)   { *p64(b, off) = v }
func putI64(b []byte, off int, v int64)   { *pi64(b, off) = v }
func addr(b []byte) uintptr               { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
func sameMemory(a, b []byte) bool         { return len(a) > 0 && len(b) > 0 && &a[0] == &b[0] }
