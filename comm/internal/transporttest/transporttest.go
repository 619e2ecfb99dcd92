// Package transporttest holds test helpers shared by the tests of comm's
// transports over rdmaio (comm/qtransport, comm/udtransport).
package transporttest

import (
	"bytes"
	"encoding/binary"
)

// Payload is message seq from src to dst of n bytes (n ≥ 12 carries the
// envelope: src, dst and seq as little-endian uint32s), split into a
// header and up to three data pieces.
func Payload(src, dst, seq, n int) (hdr []byte, data [][]byte) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(src*31 + dst*17 + seq*7 + i)
	}
	if n >= 12 {
		binary.LittleEndian.PutUint32(b[0:], uint32(src))
		binary.LittleEndian.PutUint32(b[4:], uint32(dst))
		binary.LittleEndian.PutUint32(b[8:], uint32(seq))
	}
	cut := min(n, 13)
	hdr = b[:cut]
	rest := b[cut:]
	for len(rest) > 0 && len(data) < 2 {
		k := len(rest)/2 + 1
		data = append(data, rest[:k])
		rest = rest[k:]
	}
	if len(rest) > 0 {
		data = append(data, rest)
	}
	return hdr, data
}

// Joined returns a new slice holding hdr followed by the pieces of data:
// the message a Send of hdr and data delivers.
func Joined(hdr []byte, data [][]byte) []byte {
	return append(append([]byte(nil), hdr...), bytes.Join(data, nil)...)
}
