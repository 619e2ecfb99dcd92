package tcp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jiarun/jia/rdmaio"
)

// The wire formats of the provider: RC frames on a TCP connection, the
// connection handshake, UD datagrams and the device address blob. All
// integers are little-endian. Every decoder checks lengths, known types,
// reserved bytes and limits, and returns an error (never panics) on any
// other input: they are fuzzed (fuzz_test.go).

// errProto is the cause of every malformed-input error.
var errProto = errors.New("protocol error")

// RC frame types. Requests travel from the requester to the responder of a
// QP pair, responses back; both directions share the connection.
const (
	fSend      = 1  // SEND: base header + payload
	fSendImm   = 2  // SEND with immediate
	fWrite     = 3  // RDMA WRITE: base + remote + payload
	fWriteImm  = 4  // RDMA WRITE with immediate
	fRead      = 5  // RDMA READ request: base + remote (len = bytes wanted)
	fCmpSwp    = 6  // compare-and-swap: base + remote + atomic
	fFetchAdd  = 7  // fetch-and-add: base + remote + atomic
	fAck       = 16 // cumulative acknowledgement of requests up to psn
	fNak       = 17 // negative acknowledgement of psn: status, RNR timer in imm (µs)
	fReadResp  = 18 // RDMA READ response: base + payload
	fAtomicRsp = 19 // atomic response: base + original value
)

// Frame flags.
const (
	flAckReq = 1 << 0 // the requester wants an acknowledgement now
	flKnown  = flAckReq
)

// Header sizes.
const (
	hdrBase   = 16
	hdrRemote = hdrBase + 16
	hdrAtomic = hdrRemote + 16
	hdrAtoRsp = hdrBase + 8
	hdrMax    = hdrAtomic
)

// frameHeaderLen returns the header length of frame type t, 0 for an unknown
// type.
func frameHeaderLen(t byte) int {
	switch t {
	case fSend, fSendImm, fAck, fNak, fReadResp:
		return hdrBase
	case fWrite, fWriteImm, fRead:
		return hdrRemote
	case fCmpSwp, fFetchAdd:
		return hdrAtomic
	case fAtomicRsp:
		return hdrAtoRsp
	}
	return 0
}

// frame is a decoded RC frame header.
type frame struct {
	typ    byte
	flags  byte
	status rdmaio.Status // fNak
	psn    uint32
	length uint32 // payload bytes (SEND, WRITE, READ response), bytes wanted (READ)
	imm    uint32 // immediate; RNR timer in µs for fNak
	rkey   uint32
	raddr  uint64
	a, b   uint64 // compare/add and swap; a is the value of fAtomicRsp
}

// payload returns the number of payload bytes that follow the header.
func (f *frame) payload() uint32 {
	switch f.typ {
	case fSend, fSendImm, fWrite, fWriteImm, fReadResp:
		return f.length
	}
	return 0
}

// encode writes the header into b (at least hdrMax bytes) and returns its
// length.
func (f *frame) encode(b []byte) int {
	n := frameHeaderLen(f.typ)
	b = b[:n]
	clear(b)
	b[0], b[1], b[2] = f.typ, f.flags, byte(f.status)
	binary.LittleEndian.PutUint32(b[4:], f.psn)
	binary.LittleEndian.PutUint32(b[8:], f.length)
	binary.LittleEndian.PutUint32(b[12:], f.imm)
	switch n {
	case hdrRemote, hdrAtomic:
		binary.LittleEndian.PutUint32(b[16:], f.rkey)
		binary.LittleEndian.PutUint64(b[24:], f.raddr)
		if n == hdrAtomic {
			binary.LittleEndian.PutUint64(b[32:], f.a)
			binary.LittleEndian.PutUint64(b[40:], f.b)
		}
	case hdrAtoRsp:
		binary.LittleEndian.PutUint64(b[16:], f.a)
	}
	return n
}

// decode parses a header of exactly frameHeaderLen(b[0]) bytes.
func (f *frame) decode(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty frame header", errProto)
	}
	n := frameHeaderLen(b[0])
	if n == 0 {
		return fmt.Errorf("%w: frame type %d", errProto, b[0])
	}
	if len(b) != n {
		return fmt.Errorf("%w: frame type %d: header of %d bytes, want %d", errProto, b[0], len(b), n)
	}
	*f = frame{typ: b[0], flags: b[1], status: rdmaio.Status(b[2])}
	if b[3] != 0 || f.flags&^flKnown != 0 {
		return fmt.Errorf("%w: frame type %d: reserved bits set", errProto, f.typ)
	}
	f.psn = binary.LittleEndian.Uint32(b[4:])
	f.length = binary.LittleEndian.Uint32(b[8:])
	f.imm = binary.LittleEndian.Uint32(b[12:])
	switch n {
	case hdrRemote, hdrAtomic:
		f.rkey = binary.LittleEndian.Uint32(b[16:])
		if binary.LittleEndian.Uint32(b[20:]) != 0 {
			return fmt.Errorf("%w: frame type %d: reserved bits set", errProto, f.typ)
		}
		f.raddr = binary.LittleEndian.Uint64(b[24:])
		if n == hdrAtomic {
			f.a = binary.LittleEndian.Uint64(b[32:])
			f.b = binary.LittleEndian.Uint64(b[40:])
		}
	case hdrAtoRsp:
		f.a = binary.LittleEndian.Uint64(b[16:])
	}
	if f.status != 0 && f.typ != fNak {
		return fmt.Errorf("%w: frame type %d with a status", errProto, f.typ)
	}
	switch f.typ {
	case fSend, fWrite, fRead:
		if f.imm != 0 {
			return fmt.Errorf("%w: frame type %d with an immediate", errProto, f.typ)
		}
	case fCmpSwp, fFetchAdd:
		if f.imm != 0 || f.length != 8 {
			return fmt.Errorf("%w: malformed atomic request", errProto)
		}
		if f.typ == fFetchAdd && f.b != 0 {
			return fmt.Errorf("%w: fetch-and-add with a swap value", errProto)
		}
	case fAck, fReadResp, fAtomicRsp:
		if f.imm != 0 || f.flags != 0 || f.typ == fAck && f.length != 0 || f.typ == fAtomicRsp && f.length != 8 {
			return fmt.Errorf("%w: malformed response type %d", errProto, f.typ)
		}
	case fNak:
		if f.length != 0 || f.flags != 0 {
			return fmt.Errorf("%w: malformed NAK", errProto)
		}
		switch f.status {
		case rdmaio.StatusRNRRetryExcErr, rdmaio.StatusRemAccessErr, rdmaio.StatusRemInvReqErr, rdmaio.StatusRemOpErr:
		default:
			return fmt.Errorf("%w: NAK with status %d", errProto, f.status)
		}
		if f.status != rdmaio.StatusRNRRetryExcErr && f.imm != 0 {
			return fmt.Errorf("%w: NAK with a timer", errProto)
		}
	}
	if f.length > maxMsgSize {
		return fmt.Errorf("%w: frame of %d bytes (max %d)", errProto, f.length, maxMsgSize)
	}
	return nil
}

// requestType returns the frame type of a send opcode.
func requestType(op rdmaio.Opcode) byte {
	switch op {
	case rdmaio.OpSend:
		return fSend
	case rdmaio.OpSendImm:
		return fSendImm
	case rdmaio.OpRDMAWrite:
		return fWrite
	case rdmaio.OpRDMAWriteImm:
		return fWriteImm
	case rdmaio.OpRDMARead:
		return fRead
	case rdmaio.OpAtomicCmpSwp:
		return fCmpSwp
	}
	return fFetchAdd
}

// Handshake. The dialer speaks first with a greeting (so that a lost last
// packet of TCP's own handshake is repaired by the dialer's retransmission
// of data, in a fraction of a second, rather than by the acceptor's SYN-ACK
// timer, which waits seconds); the acceptor answers with a challenge; the
// dialer answers with a hello that names both ends and carries
// HMAC-SHA256(secret, "jia-tcp-hello" ‖ job ‖ challenge nonce ‖ hello
// fields); the acceptor answers with a status and, on success,
// HMAC-SHA256(secret, "jia-tcp-welcome" ‖ job ‖ hello nonce ‖ hello fields),
// which proves to the dialer that it reached a device of the same job. The
// secret never crosses the wire and a recorded exchange is useless against
// fresh nonces.
const (
	greetingLen  = 8
	challengeLen = 32
	helloLen     = 88
	helloSigned  = helloLen - sha256.Size
	replyLen     = 4 + sha256.Size
	nonceLen     = 16
	wireVersion  = 2
)

var (
	greetingMagic  = [4]byte{'J', 'T', 'C', 'G'}
	challengeMagic = [4]byte{'J', 'T', 'C', 'P'}
	helloMagic     = [4]byte{'J', 'T', 'C', 'H'}
)

// Reply statuses.
const (
	replyOK       = 0
	replyAuth     = 1 // the proof did not verify (wrong secret or job)
	replyNoQP     = 2 // no RC QP with the target QPN
	replyBusy     = 3 // the QP is connected elsewhere or in ERR
	replyWrongDev = 4 // the hello names another device
	replyClosing  = 5 // the device is closing
)

// encodeGreeting writes the dialer's first message: a magic and the wire
// version.
func encodeGreeting(b []byte) {
	copy(b[0:4], greetingMagic[:])
	binary.LittleEndian.PutUint16(b[4:], wireVersion)
	binary.LittleEndian.PutUint16(b[6:], 0)
}

// decodeGreeting checks the dialer's first message.
func decodeGreeting(b []byte) error {
	if len(b) != greetingLen {
		return fmt.Errorf("%w: greeting of %d bytes", errProto, len(b))
	}
	if [4]byte(b[0:4]) != greetingMagic {
		return fmt.Errorf("%w: not a jiarun tcp device dialling", errProto)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != wireVersion || binary.LittleEndian.Uint16(b[6:]) != 0 {
		return fmt.Errorf("%w: greeting version %d (this build speaks %d)", errProto, v, wireVersion)
	}
	return nil
}

// challenge is the acceptor's answer to the greeting.
type challenge struct {
	devID uint64
	nonce [nonceLen]byte
}

func (c *challenge) encode(b []byte) {
	copy(b[0:4], challengeMagic[:])
	binary.LittleEndian.PutUint16(b[4:], wireVersion)
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], c.devID)
	copy(b[16:32], c.nonce[:])
}

func (c *challenge) decode(b []byte) error {
	if len(b) != challengeLen {
		return fmt.Errorf("%w: challenge of %d bytes", errProto, len(b))
	}
	if [4]byte(b[0:4]) != challengeMagic {
		return fmt.Errorf("%w: not a jiarun tcp device", errProto)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != wireVersion || binary.LittleEndian.Uint16(b[6:]) != 0 {
		return fmt.Errorf("%w: challenge version %d (this build speaks %d)", errProto, v, wireVersion)
	}
	c.devID = binary.LittleEndian.Uint64(b[8:])
	copy(c.nonce[:], b[16:32])
	return nil
}

// hello is the dialer's answer to the challenge.
type hello struct {
	fromDev  uint64
	toDev    uint64
	fromRank uint32
	fromQPN  uint32
	toQPN    uint32
	nonce    [nonceLen]byte
	mac      [sha256.Size]byte
}

func (h *hello) encode(b []byte) {
	copy(b[0:4], helloMagic[:])
	binary.LittleEndian.PutUint16(b[4:], wireVersion)
	binary.LittleEndian.PutUint16(b[6:], 0)
	binary.LittleEndian.PutUint64(b[8:], h.fromDev)
	binary.LittleEndian.PutUint64(b[16:], h.toDev)
	binary.LittleEndian.PutUint32(b[24:], h.fromRank)
	binary.LittleEndian.PutUint32(b[28:], h.fromQPN)
	binary.LittleEndian.PutUint32(b[32:], h.toQPN)
	binary.LittleEndian.PutUint32(b[36:], 0)
	copy(b[40:56], h.nonce[:])
	copy(b[56:88], h.mac[:])
}

func (h *hello) decode(b []byte) error {
	if len(b) != helloLen {
		return fmt.Errorf("%w: hello of %d bytes", errProto, len(b))
	}
	if [4]byte(b[0:4]) != helloMagic {
		return fmt.Errorf("%w: bad hello magic", errProto)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != wireVersion || binary.LittleEndian.Uint16(b[6:]) != 0 || binary.LittleEndian.Uint32(b[36:]) != 0 {
		return fmt.Errorf("%w: hello version %d (this build speaks %d)", errProto, v, wireVersion)
	}
	h.fromDev = binary.LittleEndian.Uint64(b[8:])
	h.toDev = binary.LittleEndian.Uint64(b[16:])
	h.fromRank = binary.LittleEndian.Uint32(b[24:])
	h.fromQPN = binary.LittleEndian.Uint32(b[28:])
	h.toQPN = binary.LittleEndian.Uint32(b[32:])
	if h.fromRank > 1<<31-1 || h.fromQPN == 0 || h.toQPN == 0 {
		return fmt.Errorf("%w: hello names rank %d, QPs %d → %d", errProto, h.fromRank, h.fromQPN, h.toQPN)
	}
	copy(h.nonce[:], b[40:56])
	copy(h.mac[:], b[56:88])
	return nil
}

// authKey holds what the proofs are computed from.
type authKey struct {
	secret []byte
	job    string
}

func (k *authKey) sum(label string, nonce []byte, signed []byte, extra byte) [sha256.Size]byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(label))
	var l [4]byte
	binary.LittleEndian.PutUint32(l[:], uint32(len(k.job)))
	m.Write(l[:])
	m.Write([]byte(k.job))
	m.Write(nonce)
	m.Write(signed)
	m.Write([]byte{extra})
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}

// helloMAC is the dialer's proof over the challenge nonce and the signed
// part of the encoded hello.
func (k *authKey) helloMAC(chNonce []byte, signed []byte) [sha256.Size]byte {
	return k.sum("jia-tcp-hello\x00", chNonce, signed, 0)
}

// welcomeMAC is the acceptor's proof over the hello nonce and fields.
func (k *authKey) welcomeMAC(helloNonce []byte, signed []byte) [sha256.Size]byte {
	return k.sum("jia-tcp-welcome\x00", helloNonce, signed, replyOK)
}

// udToken is the per-job token every UD datagram carries.
func (k *authKey) udToken() uint64 {
	s := k.sum("jia-tcp-ud\x00", nil, nil, 0)
	return binary.LittleEndian.Uint64(s[:8])
}

func encodeReply(b []byte, status byte, mac *[sha256.Size]byte) {
	b[0], b[1], b[2], b[3] = status, 0, 0, 0
	if mac != nil {
		copy(b[4:], mac[:])
	} else {
		clear(b[4:replyLen])
	}
}

func decodeReply(b []byte) (status byte, mac [sha256.Size]byte, err error) {
	if len(b) != replyLen {
		return 0, mac, fmt.Errorf("%w: reply of %d bytes", errProto, len(b))
	}
	if b[1] != 0 || b[2] != 0 || b[3] != 0 || b[0] > replyClosing {
		return 0, mac, fmt.Errorf("%w: malformed reply", errProto)
	}
	copy(mac[:], b[4:])
	return b[0], mac, nil
}

// UD datagram header.
const (
	udHdrLen = 40
	udMagic0 = 'J'
	udMagic1 = 'U'
	udImm    = 1 << 0
)

// udHeader is a decoded UD datagram header.
type udHeader struct {
	flags   byte
	srcRank uint32
	token   uint64
	dstDev  uint64
	srcQPN  uint32
	dstQPN  uint32
	qkey    uint32
	imm     uint32
}

func (h *udHeader) encode(b []byte) {
	b[0], b[1], b[2], b[3] = udMagic0, udMagic1, wireVersion, h.flags
	binary.LittleEndian.PutUint32(b[4:], h.srcRank)
	binary.LittleEndian.PutUint64(b[8:], h.token)
	binary.LittleEndian.PutUint64(b[16:], h.dstDev)
	binary.LittleEndian.PutUint32(b[24:], h.srcQPN)
	binary.LittleEndian.PutUint32(b[28:], h.dstQPN)
	binary.LittleEndian.PutUint32(b[32:], h.qkey)
	binary.LittleEndian.PutUint32(b[36:], h.imm)
}

// decode parses a datagram and returns its payload.
func (h *udHeader) decode(b []byte) ([]byte, error) {
	if len(b) < udHdrLen {
		return nil, errProto
	}
	if b[0] != udMagic0 || b[1] != udMagic1 || b[2] != wireVersion || b[3]&^udImm != 0 {
		return nil, errProto
	}
	h.flags = b[3]
	h.srcRank = binary.LittleEndian.Uint32(b[4:])
	h.token = binary.LittleEndian.Uint64(b[8:])
	h.dstDev = binary.LittleEndian.Uint64(b[16:])
	h.srcQPN = binary.LittleEndian.Uint32(b[24:])
	h.dstQPN = binary.LittleEndian.Uint32(b[28:])
	h.qkey = binary.LittleEndian.Uint32(b[32:])
	h.imm = binary.LittleEndian.Uint32(b[36:])
	if h.flags&udImm == 0 && h.imm != 0 || h.srcRank > 1<<31-1 {
		return nil, errProto
	}
	return b[udHdrLen:], nil
}
