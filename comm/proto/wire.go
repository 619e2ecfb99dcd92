package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is the type of a protocol message.
type Kind uint8

// Protocol messages. Every message starts with its kind byte; the fields
// that follow are little-endian and depend on the kind.
const (
	// KEager carries a whole message: ctx, src, tag, then the payload.
	KEager Kind = 1
	// KRTS (request to send) announces a rendezvous message: ctx, src, tag,
	// length, the sender's operation id and, in one-sided mode, the region
	// (key, address) the receiver reads the message from.
	KRTS Kind = 2
	// KRTSV is KRTS for a vector layout at the sender: the region holds
	// count blocks of block bytes, stride bytes apart.
	KRTSV Kind = 3
	// KCTS (clear to send) asks the sender to send length bytes of
	// operation sid as KData messages addressed to the receiver's operation
	// rid (two-sided rendezvous).
	KCTS Kind = 4
	// KFIN tells the sender that the receiver has read operation sid: the
	// sender's buffer is free.
	KFIN Kind = 5
	// KData carries bytes [off, off+len(payload)) of a rendezvous message
	// to the receiver's operation rid.
	KData Kind = 6
	// KRTSC announces a two-sided rendezvous message (no region: the
	// receiver answers with KCTS): ctx, src, tag, length, sender's id.
	KRTSC Kind = 7
	// KPut asks the sender of a one-sided rendezvous to copy bytes
	// [off, off+len) of its operation sid itself, with one-sided WRITE
	// into the receiver's region (key, addr), and to answer KWFIN rid:
	// the receiver READs the rest meanwhile, so that both ends copy.
	KPut Kind = 8
	// KWFIN tells the receiver that the sender has written its part of
	// the receiver's operation rid (the answer to KPut).
	KWFIN Kind = 9
	// KRTSS is KRTS for a message the sender is still packing into its
	// region: ctx, src, tag, length, sender's id, region, then the address
	// of the region's watermark (a little-endian uint64 in the sender's
	// registered memory, the count of bytes packed so far, which only
	// grows) and the count packed when the RTS left. The receiver reads
	// what is packed, then the watermark again, until it has the message.
	KRTSS Kind = 10
)

// envelope reports whether messages of kind k carry an envelope (context,
// source, tag) to match against receives.
func (k Kind) envelope() bool {
	return k == KEager || k == KRTS || k == KRTSV || k == KRTSC || k == KRTSS
}

// decodeEnvelope reads the envelope of msg, a message of a kind that
// carries one, at least eagerHdr bytes long.
func decodeEnvelope(msg []byte) (ctx uint32, src, tag int32) {
	return le.Uint32(msg[1:]), int32(le.Uint32(msg[5:])), int32(le.Uint32(msg[9:]))
}

// String returns the message kind's name, e.g. "RTS".
func (k Kind) String() string {
	switch k {
	case KEager:
		return "EAGER"
	case KRTS:
		return "RTS"
	case KRTSV:
		return "RTSV"
	case KCTS:
		return "CTS"
	case KFIN:
		return "FIN"
	case KData:
		return "DATA"
	case KRTSC:
		return "RTSC"
	case KPut:
		return "PUT"
	case KWFIN:
		return "WFIN"
	case KRTSS:
		return "RTSS"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Header is a decoded protocol message header. Only the fields of the
// message's kind are meaningful.
type Header struct {
	Kind     Kind
	Ctx      uint32
	Src, Tag int32
	// Len is the message length (RTS) or the number of bytes requested
	// (CTS, PUT).
	Len uint64
	// SID and RID are the sender's and the receiver's operation ids.
	SID, RID uint64
	// Key and Addr locate the sender's region (RTS), or the receiver's
	// (PUT).
	Key, Addr uint64
	// VCount, VBlock and VStride are the sender's vector layout (RTSV).
	VCount, VBlock, VStride uint64
	// Off is the offset of a KData payload, or of a KPut part, in the
	// message.
	Off uint64
	// Watch is the address of the watermark, and Ready the bytes packed
	// when the message left (RTSS).
	Watch, Ready uint64
}

// Header sizes by kind.
const (
	eagerHdr = 1 + 4 + 4 + 4
	rtscHdr  = eagerHdr + 8*2
	rtsHdr   = eagerHdr + 8*4
	rtsvHdr  = rtsHdr + 8*3
	rtssHdr  = rtsHdr + 8*2
	ctsHdr   = 1 + 8*3
	finHdr   = 1 + 8
	dataHdr  = 1 + 8*2
	putHdr   = 1 + 8*6
	// MaxHeader is the longest encoded header.
	MaxHeader = rtsvHdr
	// EagerHeader is the header size of an eager message, and DataHeader
	// that of a rendezvous data message: what a payload must leave room for
	// in a transport's largest message.
	EagerHeader = eagerHdr
	DataHeader  = dataHdr
)

// ErrMalformed is returned for a message that cannot be decoded.
var ErrMalformed = errors.New("malformed protocol message")

var le = binary.LittleEndian

// Encode writes h into b, which must hold MaxHeader bytes, and returns the
// encoded length.
func Encode(b []byte, h *Header) int {
	b[0] = byte(h.Kind)
	switch h.Kind {
	case KEager, KRTS, KRTSV, KRTSC, KRTSS:
		le.PutUint32(b[1:], h.Ctx)
		le.PutUint32(b[5:], uint32(h.Src))
		le.PutUint32(b[9:], uint32(h.Tag))
		if h.Kind == KEager {
			return eagerHdr
		}
		le.PutUint64(b[13:], h.Len)
		le.PutUint64(b[21:], h.SID)
		if h.Kind == KRTSC {
			return rtscHdr
		}
		le.PutUint64(b[29:], h.Key)
		le.PutUint64(b[37:], h.Addr)
		if h.Kind == KRTS {
			return rtsHdr
		}
		if h.Kind == KRTSS {
			le.PutUint64(b[45:], h.Watch)
			le.PutUint64(b[53:], h.Ready)
			return rtssHdr
		}
		le.PutUint64(b[45:], h.VCount)
		le.PutUint64(b[53:], h.VBlock)
		le.PutUint64(b[61:], h.VStride)
		return rtsvHdr
	case KCTS:
		le.PutUint64(b[1:], h.SID)
		le.PutUint64(b[9:], h.RID)
		le.PutUint64(b[17:], h.Len)
		return ctsHdr
	case KFIN:
		le.PutUint64(b[1:], h.SID)
		return finHdr
	case KData:
		le.PutUint64(b[1:], h.RID)
		le.PutUint64(b[9:], h.Off)
		return dataHdr
	case KPut:
		le.PutUint64(b[1:], h.SID)
		le.PutUint64(b[9:], h.RID)
		le.PutUint64(b[17:], h.Key)
		le.PutUint64(b[25:], h.Addr)
		le.PutUint64(b[33:], h.Off)
		le.PutUint64(b[41:], h.Len)
		return putHdr
	case KWFIN:
		le.PutUint64(b[1:], h.RID)
		return finHdr
	}
	panic("proto: Encode of unknown kind " + h.Kind.String())
}

// EagerWords returns the header of an eager message with envelope (ctx,
// src, tag), EagerHeader bytes, as two little-endian words: bytes 0-7 in
// lo, 8-15 in hi (the last three zero). Built in registers, it never goes
// through memory byte by byte (transport.ShortHeader).
func EagerWords(ctx uint32, src, tag int32) (lo, hi uint64) {
	lo = uint64(KEager) | uint64(ctx)<<8 | uint64(uint32(src))<<40
	hi = uint64(uint32(src))>>24 | uint64(uint32(tag))<<8
	return lo, hi
}

// Decode parses the header of msg into h and returns the payload (eager and
// data messages; empty otherwise).
func Decode(msg []byte, h *Header) (payload []byte, err error) {
	if len(msg) == 0 {
		return nil, ErrMalformed
	}
	h.Kind = Kind(msg[0])
	need := 0
	switch h.Kind {
	case KEager:
		need = eagerHdr
	case KRTS:
		need = rtsHdr
	case KRTSV:
		need = rtsvHdr
	case KRTSS:
		need = rtssHdr
	case KRTSC:
		need = rtscHdr
	case KCTS:
		need = ctsHdr
	case KFIN:
		need = finHdr
	case KData:
		need = dataHdr
	case KPut:
		need = putHdr
	case KWFIN:
		need = finHdr
	default:
		return nil, fmt.Errorf("%w: kind %d", ErrMalformed, msg[0])
	}
	if len(msg) < need {
		return nil, fmt.Errorf("%w: %v message of %d bytes", ErrMalformed, h.Kind, len(msg))
	}
	switch h.Kind {
	case KEager, KRTS, KRTSV, KRTSC, KRTSS:
		h.Ctx, h.Src, h.Tag = decodeEnvelope(msg)
		if h.Kind == KEager {
			return msg[eagerHdr:], nil
		}
		h.Len = le.Uint64(msg[13:])
		h.SID = le.Uint64(msg[21:])
		h.Key, h.Addr, h.VCount, h.VBlock, h.VStride, h.Watch, h.Ready = 0, 0, 0, 0, 0, 0, 0
		if h.Kind == KRTSC {
			return nil, nil
		}
		h.Key = le.Uint64(msg[29:])
		h.Addr = le.Uint64(msg[37:])
		if h.Kind == KRTSS {
			h.Watch = le.Uint64(msg[45:])
			h.Ready = le.Uint64(msg[53:])
		}
		if h.Kind == KRTSV {
			h.VCount = le.Uint64(msg[45:])
			h.VBlock = le.Uint64(msg[53:])
			h.VStride = le.Uint64(msg[61:])
		}
		return nil, nil
	case KCTS:
		h.SID = le.Uint64(msg[1:])
		h.RID = le.Uint64(msg[9:])
		h.Len = le.Uint64(msg[17:])
	case KFIN:
		h.SID = le.Uint64(msg[1:])
	case KData:
		h.RID = le.Uint64(msg[1:])
		h.Off = le.Uint64(msg[9:])
		return msg[dataHdr:], nil
	case KPut:
		h.SID = le.Uint64(msg[1:])
		h.RID = le.Uint64(msg[9:])
		h.Key = le.Uint64(msg[17:])
		h.Addr = le.Uint64(msg[25:])
		h.Off = le.Uint64(msg[33:])
		h.Len = le.Uint64(msg[41:])
	case KWFIN:
		h.RID = le.Uint64(msg[1:])
	}
	return nil, nil
}
