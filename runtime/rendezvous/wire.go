package rendezvous

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Limits and sizes of the wire protocol.
const (
	// Version is the protocol version this package speaks. The server
	// announces it in the challenge and the client repeats it in the hello;
	// either side refuses a version it does not know.
	Version = 1

	// MaxFrame is the largest frame body (type byte and payload) either side
	// accepts once a connection is authenticated. The key/value pairs of one
	// fence epoch must fit in one frame of this size.
	MaxFrame = 64 << 20

	// MaxKeyLen is the longest key Put accepts.
	MaxKeyLen = 1024

	// MaxJobLen is the longest job identifier the protocol accepts.
	MaxJobLen = 1024

	// SecretLen is the length in bytes of a per-job secret. It equals
	// runtime.SecretLen of the launch contract.
	SecretLen = 32

	// NonceLen is the length in bytes of the server's challenge nonce.
	NonceLen = 32

	// macLen is the length of the hello's HMAC-SHA256.
	macLen = sha256.Size

	// maxHandshakeFrame bounds frames read before a connection is
	// authenticated, so an unauthenticated peer cannot make the server
	// allocate MaxFrame bytes. A hello naming 200 000 ranks still fits.
	maxHandshakeFrame = 1 << 20

	// maxTextLen bounds the free text of refusals, closings and aborts.
	maxTextLen = 64 << 10

	// frameHeader is the size of the length prefix plus the type byte.
	frameHeader = 5

	// entryOverhead is the encoded size of one key/value pair of a fence
	// result minus the key and value bytes (two length prefixes).
	entryOverhead = 8

	// fenceResultHeader is the size of a fence result frame before its
	// entries: the frame header, the epoch and the entry count.
	fenceResultHeader = frameHeader + 8
)

// Frame types. Client-to-server types have the high bit clear; server-to-
// client types have it set.
const (
	typeHello    byte = 0x01
	typePut      byte = 0x02
	typeFence    byte = 0x03
	typeAbort    byte = 0x04
	typeFinalize byte = 0x05

	typeChallenge   byte = 0x81
	typeWelcome     byte = 0x82
	typeRefused     byte = 0x83
	typeFenceResult byte = 0x84
	typeAborted     byte = 0x85
	typeFinalized   byte = 0x86
	typeClosing     byte = 0x87
)

// typeName returns the name of a frame type, for error messages.
func typeName(t byte) string {
	switch t {
	case typeHello:
		return "hello"
	case typePut:
		return "put"
	case typeFence:
		return "fence"
	case typeAbort:
		return "abort"
	case typeFinalize:
		return "finalize"
	case typeChallenge:
		return "challenge"
	case typeWelcome:
		return "welcome"
	case typeRefused:
		return "refused"
	case typeFenceResult:
		return "fence-result"
	case typeAborted:
		return "aborted"
	case typeFinalized:
		return "finalized"
	case typeClosing:
		return "closing"
	}
	return fmt.Sprintf("unknown(0x%02x)", t)
}

// fromClient reports whether frames of type t travel from client to server.
func fromClient(t byte) bool { return t&0x80 == 0 }

// Errors of the codec. Every error about a frame's form wraps errMalformed.
var (
	errMalformed  = errors.New("malformed frame")
	errEmptyFrame = fmt.Errorf("%w: empty frame (length 0)", errMalformed)
)

// ---- messages ----

// message is one decoded frame. Each message type appends its payload (the
// bytes after the type byte) with appendPayload.
type message interface {
	frameType() byte
	appendPayload(b []byte) []byte
}

// challengeMsg is the server's first frame on every connection.
type challengeMsg struct {
	version uint32
	nonce   [NonceLen]byte
}

// helloMsg is the client's answer to the challenge. It names every rank the
// connection speaks for (one for a rank, several for a per-host proxy).
type helloMsg struct {
	version uint32
	job     string
	ranks   []int
	mac     [macLen]byte
}

// welcomeMsg accepts a hello.
type welcomeMsg struct {
	size  int
	epoch uint32
}

// refusedMsg refuses a connection before or during the handshake.
type refusedMsg struct{ reason string }

// putMsg publishes key=value for the current epoch on behalf of rank.
type putMsg struct {
	rank  int
	key   string
	value []byte
}

// fenceMsg says rank has joined the fence of the current epoch.
type fenceMsg struct{ rank int }

// fenceResultMsg carries every pair put in epoch.
type fenceResultMsg struct {
	epoch uint32
	pairs map[string][]byte
}

// abortMsg asks the server to end the job.
type abortMsg struct {
	rank int
	code int32
	text string
}

// abortedMsg tells every connection that rank aborted the job.
type abortedMsg struct {
	rank int
	code int32
	text string
}

// finalizeMsg says rank finished cleanly.
type finalizeMsg struct{ rank int }

// finalizedMsg acknowledges a finalizeMsg.
type finalizedMsg struct{ rank int }

// closingMsg tells an authenticated connection why the server closes it.
type closingMsg struct{ reason string }

func (*challengeMsg) frameType() byte   { return typeChallenge }
func (*helloMsg) frameType() byte       { return typeHello }
func (*welcomeMsg) frameType() byte     { return typeWelcome }
func (*refusedMsg) frameType() byte     { return typeRefused }
func (*putMsg) frameType() byte         { return typePut }
func (*fenceMsg) frameType() byte       { return typeFence }
func (*fenceResultMsg) frameType() byte { return typeFenceResult }
func (*abortMsg) frameType() byte       { return typeAbort }
func (*abortedMsg) frameType() byte     { return typeAborted }
func (*finalizeMsg) frameType() byte    { return typeFinalize }
func (*finalizedMsg) frameType() byte   { return typeFinalized }
func (*closingMsg) frameType() byte     { return typeClosing }

func (m *challengeMsg) appendPayload(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, m.version)
	return append(b, m.nonce[:]...)
}

func (m *helloMsg) appendPayload(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, m.version)
	b = appendString(b, m.job)
	b = appendRanks(b, m.ranks)
	return append(b, m.mac[:]...)
}

func (m *welcomeMsg) appendPayload(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(m.size))
	return binary.BigEndian.AppendUint32(b, m.epoch)
}

func (m *refusedMsg) appendPayload(b []byte) []byte { return appendString(b, m.reason) }

func (m *putMsg) appendPayload(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(m.rank))
	b = appendString(b, m.key)
	return appendBytes(b, m.value)
}

func (m *fenceMsg) appendPayload(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(m.rank))
}

// appendPayload writes the pairs in key order, so equal contents encode to
// equal bytes.
func (m *fenceResultMsg) appendPayload(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, m.epoch)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.pairs)))
	keys := make([]string, 0, len(m.pairs))
	for k := range m.pairs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendString(b, k)
		b = appendBytes(b, m.pairs[k])
	}
	return b
}

func (m *abortMsg) appendPayload(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(m.rank))
	b = binary.BigEndian.AppendUint32(b, uint32(m.code))
	return appendString(b, m.text)
}

func (m *abortedMsg) appendPayload(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(m.rank))
	b = binary.BigEndian.AppendUint32(b, uint32(m.code))
	return appendString(b, m.text)
}

func (m *finalizeMsg) appendPayload(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(m.rank))
}

func (m *finalizedMsg) appendPayload(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(m.rank))
}

func (m *closingMsg) appendPayload(b []byte) []byte { return appendString(b, m.reason) }

// ---- frames ----

// appendFrame appends m as a complete frame (length prefix, type byte,
// payload) to dst.
func appendFrame(dst []byte, m message) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, m.frameType())
	dst = m.appendPayload(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// encodeFrame returns m as a complete frame in a new slice.
func encodeFrame(m message) []byte { return appendFrame(nil, m) }

// readFrame reads one frame from r and returns its body: the type byte
// followed by the payload. It reads into buf when buf is large enough and
// allocates otherwise. A frame whose declared length is 0 or above max is an
// error wrapping errMalformed, and nothing more is read. io.EOF is returned only when r ends
// cleanly between frames; a frame cut short is io.ErrUnexpectedEOF.
func readFrame(r io.Reader, buf []byte, max int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, errEmptyFrame
	}
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: frame of %d bytes exceeds the limit of %d bytes", errMalformed, n, max)
	}
	var body []byte
	if uint64(cap(buf)) >= uint64(n) {
		body = buf[:n]
	} else {
		body = make([]byte, n)
	}
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// decodeMessage decodes a frame body (type byte and payload). Byte slices in
// the result alias body; strings are copies. Every length is checked against
// the bytes present, trailing bytes are an error, and no input panics.
func decodeMessage(body []byte) (message, error) {
	if len(body) == 0 {
		return nil, errEmptyFrame
	}
	t := body[0]
	d := decoder{b: body[1:]}
	var m message
	switch t {
	case typeChallenge:
		c := &challengeMsg{version: d.u32()}
		copy(c.nonce[:], d.fixed(NonceLen))
		m = c
	case typeHello:
		h := &helloMsg{version: d.u32(), job: d.text(MaxJobLen)}
		h.ranks = d.ranks()
		copy(h.mac[:], d.fixed(macLen))
		m = h
	case typeWelcome:
		m = &welcomeMsg{size: d.int(), epoch: d.u32()}
	case typeRefused:
		m = &refusedMsg{reason: d.text(maxTextLen)}
	case typePut:
		m = &putMsg{rank: d.int(), key: d.text(MaxKeyLen), value: d.bytes()}
	case typeFence:
		m = &fenceMsg{rank: d.int()}
	case typeFenceResult:
		m = d.fenceResult()
	case typeAbort:
		m = &abortMsg{rank: d.int(), code: int32(d.u32()), text: d.text(maxTextLen)}
	case typeAborted:
		m = &abortedMsg{rank: d.int(), code: int32(d.u32()), text: d.text(maxTextLen)}
	case typeFinalize:
		m = &finalizeMsg{rank: d.int()}
	case typeFinalized:
		m = &finalizedMsg{rank: d.int()}
	case typeClosing:
		m = &closingMsg{reason: d.text(maxTextLen)}
	default:
		return nil, fmt.Errorf("%w: unknown frame type 0x%02x", errMalformed, t)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.b)))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %s frame: %s", errMalformed, typeName(t), d.err.msg)
	}
	return m, nil
}

// ---- primitives ----

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

func appendRanks(b []byte, ranks []int) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(ranks)))
	for _, r := range ranks {
		b = binary.BigEndian.AppendUint32(b, uint32(r))
	}
	return b
}

// decodeError describes the first problem a decoder met.
type decodeError struct{ msg string }

// decoder reads a payload front to back. After the first error every read
// returns a zero value, so decoding code checks d.err once at the end.
type decoder struct {
	b   []byte
	err *decodeError
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = &decodeError{msg}
	}
	d.b = nil
}

func (d *decoder) fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail(fmt.Sprintf("truncated: need %d bytes, have %d", n, len(d.b)))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32() uint32 {
	v := d.fixed(4)
	if v == nil {
		return 0
	}
	return binary.BigEndian.Uint32(v)
}

// int reads a rank or a size: a uint32 that must fit in an int32.
func (d *decoder) int() int {
	v := d.u32()
	if v > 1<<31-1 {
		d.fail(fmt.Sprintf("integer %d out of range", v))
		return 0
	}
	return int(v)
}

// bytes reads a length-prefixed byte string, aliasing the payload.
func (d *decoder) bytes() []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("length %d exceeds the %d bytes left", n, len(d.b)))
		return nil
	}
	return d.fixed(int(n))
}

// text reads a length-prefixed string of at most max bytes.
func (d *decoder) text(max int) string {
	v := d.bytes()
	if len(v) > max {
		d.fail(fmt.Sprintf("string of %d bytes exceeds the limit of %d", len(v), max))
		return ""
	}
	return string(v)
}

func (d *decoder) ranks() []int {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)/4) {
		d.fail(fmt.Sprintf("rank count %d exceeds the %d bytes left", n, len(d.b)))
		return nil
	}
	ranks := make([]int, n)
	for i := range ranks {
		ranks[i] = d.int()
	}
	return ranks
}

func (d *decoder) fenceResult() *fenceResultMsg {
	m := &fenceResultMsg{epoch: d.u32()}
	n := d.u32()
	if d.err != nil {
		return m
	}
	if uint64(n) > uint64(len(d.b)/entryOverhead) {
		d.fail(fmt.Sprintf("entry count %d exceeds the %d bytes left", n, len(d.b)))
		return m
	}
	m.pairs = make(map[string][]byte, n)
	for range n {
		k := d.text(MaxKeyLen)
		v := d.bytes()
		if d.err != nil {
			return m
		}
		if _, dup := m.pairs[k]; dup {
			d.fail(fmt.Sprintf("key %q appears twice", k))
			return m
		}
		m.pairs[k] = v
	}
	return m
}

// ---- authentication ----

// macLabel separates this protocol's MACs from any other use of the secret.
const macLabel = "jiarun rendezvous v1\x00"

// helloMAC returns HMAC-SHA256(secret, label || nonce || job || ranks), where
// job is length-prefixed and ranks is a count followed by the ranks, all
// integers big-endian uint32: the exact bytes the hello carries.
func helloMAC(secret []byte, nonce [NonceLen]byte, job string, ranks []int) [macLen]byte {
	h := hmac.New(sha256.New, secret)
	var buf [64]byte
	b := append(buf[:0], macLabel...)
	b = append(b, nonce[:]...)
	h.Write(b)
	h.Write(appendString(buf[:0], job))
	h.Write(appendRanks(buf[:0], ranks))
	var mac [macLen]byte
	h.Sum(mac[:0])
	return mac
}

// describe renders m in one line, for tests and logs.
func describe(m message) string {
	switch m := m.(type) {
	case *challengeMsg:
		return fmt.Sprintf("challenge v%d", m.version)
	case *helloMsg:
		return fmt.Sprintf("hello v%d job=%q ranks=%v", m.version, m.job, m.ranks)
	case *welcomeMsg:
		return fmt.Sprintf("welcome size=%d epoch=%d", m.size, m.epoch)
	case *refusedMsg:
		return fmt.Sprintf("refused %q", m.reason)
	case *putMsg:
		return fmt.Sprintf("put rank=%d %s=%q", m.rank, m.key, m.value)
	case *fenceMsg:
		return fmt.Sprintf("fence rank=%d", m.rank)
	case *fenceResultMsg:
		keys := make([]string, 0, len(m.pairs))
		for k, v := range m.pairs {
			keys = append(keys, fmt.Sprintf("%s=%q", k, v))
		}
		slices.Sort(keys)
		return fmt.Sprintf("fence-result epoch=%d {%s}", m.epoch, strings.Join(keys, " "))
	case *abortMsg:
		return fmt.Sprintf("abort rank=%d code=%d %q", m.rank, m.code, m.text)
	case *abortedMsg:
		return fmt.Sprintf("aborted rank=%d code=%d %q", m.rank, m.code, m.text)
	case *finalizeMsg:
		return fmt.Sprintf("finalize rank=%d", m.rank)
	case *finalizedMsg:
		return fmt.Sprintf("finalized rank=%d", m.rank)
	case *closingMsg:
		return fmt.Sprintf("closing %q", m.reason)
	}
	return fmt.Sprintf("%T", m)
}
