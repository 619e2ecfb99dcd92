package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The wire form of a Message, what transports between ranks carry:
//
//	version  byte      wireVersion
//	kind     byte      MsgKind
//	from     uvarint   sender rank
//	to       uvarint   destination rank
//	seq      uvarint
//	order    uvarint
//	id       varint    lock or condition variable
//	scope    varint
//	epoch    uvarint
//	pages    uvarint count, then each page as a uvarint
//	notices  uvarint count, then each: page uvarint, writer varint, flags byte (1 Cached, 2 Migrate)
//	data     uvarint length, then the bytes
//
// Empty Pages, Notices and Data decode as nil. Decoding checks every count
// against the bytes left before allocating, so a hostile frame cannot make
// the receiver allocate more than the frame's own size.

const wireVersion = 1

// ErrWire is wrapped by the errors of UnmarshalBinary.
var ErrWire = errors.New("malformed message")

// AppendBinary appends the wire form of m to b.
func (m *Message) AppendBinary(b []byte) ([]byte, error) {
	if m.From < 0 || m.To < 0 || int64(m.From) > math.MaxInt32 || int64(m.To) > math.MaxInt32 {
		return b, fmt.Errorf("shmem: encode %v: rank outside 0..%d", m, math.MaxInt32)
	}
	b = append(b, wireVersion, byte(m.Kind))
	b = binary.AppendUvarint(b, uint64(m.From))
	b = binary.AppendUvarint(b, uint64(m.To))
	b = binary.AppendUvarint(b, m.Seq)
	b = binary.AppendUvarint(b, m.Order)
	b = binary.AppendVarint(b, int64(m.ID))
	b = binary.AppendVarint(b, m.Scope)
	b = binary.AppendUvarint(b, m.Epoch)
	b = binary.AppendUvarint(b, uint64(len(m.Pages)))
	for _, p := range m.Pages {
		b = binary.AppendUvarint(b, uint64(p))
	}
	b = binary.AppendUvarint(b, uint64(len(m.Notices)))
	for _, n := range m.Notices {
		b = binary.AppendUvarint(b, uint64(n.Page))
		b = binary.AppendVarint(b, int64(n.Writer))
		var f byte
		if n.Cached {
			f |= 1
		}
		if n.Migrate {
			f |= 2
		}
		b = append(b, f)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Data)))
	return append(b, m.Data...), nil
}

// MarshalBinary returns the wire form of m.
func (m *Message) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil) }

// wireReader decodes the fields of a message, remembering the first error.
type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrWire, fmt.Sprintf(format, args...))
	}
}

func (r *wireReader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("%s: truncated", what)
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *wireReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("%s: truncated or overlong varint", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wireReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("%s: truncated or overlong varint", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// rank reads a rank number.
func (r *wireReader) rank(what string) int {
	v := r.uvarint(what)
	if v > math.MaxInt32 {
		r.fail("%s: rank %d out of range", what, v)
		return 0
	}
	return int(v)
}

// int reads a signed number that must fit an int32 (lock ids, writers).
func (r *wireReader) int(what string) int {
	v := r.varint(what)
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail("%s: %d out of range", what, v)
		return 0
	}
	return int(v)
}

// count reads a count of items that take at least min bytes each.
func (r *wireReader) count(what string, min int) int {
	v := r.uvarint(what)
	if r.err == nil && v > uint64(len(r.b)/min) {
		r.fail("%s: %d items in %d bytes", what, v, len(r.b))
		return 0
	}
	return int(v)
}

func (r *wireReader) page(what string) PageID {
	v := r.uvarint(what)
	if v > math.MaxUint32 {
		r.fail("%s: page %d out of range", what, v)
		return 0
	}
	return PageID(v)
}

// UnmarshalBinary decodes the wire form of a message into m. The decoded
// Data aliases b.
func (m *Message) UnmarshalBinary(b []byte) error {
	r := &wireReader{b: b}
	if v := r.byte("version"); r.err == nil && v != wireVersion {
		return fmt.Errorf("shmem: decode message: %w: version %d, want %d", ErrWire, v, wireVersion)
	}
	var out Message
	out.Kind = MsgKind(r.byte("kind"))
	if r.err == nil && (out.Kind < MsgPageReq || out.Kind > MsgRecall) {
		r.fail("unknown kind %d", out.Kind)
	}
	out.From = r.rank("from")
	out.To = r.rank("to")
	out.Seq = r.uvarint("seq")
	out.Order = r.uvarint("order")
	out.ID = r.int("id")
	out.Scope = r.varint("scope")
	out.Epoch = r.uvarint("epoch")
	if n := r.count("pages", 1); n > 0 {
		out.Pages = make([]PageID, n)
		for i := range out.Pages {
			out.Pages[i] = r.page("page")
		}
	}
	if n := r.count("notices", 3); n > 0 {
		out.Notices = make([]Notice, n)
		for i := range out.Notices {
			nt := &out.Notices[i]
			nt.Page = r.page("notice page")
			nt.Writer = r.int("notice writer")
			f := r.byte("notice flags")
			if f&^3 != 0 {
				r.fail("notice flags %#x", f)
			}
			nt.Cached, nt.Migrate = f&1 != 0, f&2 != 0
		}
	}
	if n := r.count("data", 1); n > 0 {
		out.Data = r.b[:n:n]
		r.b = r.b[n:]
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d bytes after the message", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("shmem: decode message: %w", r.err)
	}
	*m = out
	return nil
}
