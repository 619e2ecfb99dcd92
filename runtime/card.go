package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// cardVersion is the version of the bootstrap card's encoding.
const cardVersion = 1

// Card is what a rank publishes at rendezvous: enough for any peer to reach
// it. Each rank has exactly one TCP listening address and one UDP endpoint
// for its whole life; transports find everything else through them or through
// the provider blobs.
type Card struct {
	Rank int
	// Host identifies the rank's host; ranks with equal Host share memory.
	Host string
	// TCP is the rank's listening address (host:port).
	TCP string
	// UDP is the rank's datagram endpoint (host:port).
	UDP string
	// Providers holds opaque per-provider address blobs, keyed by provider name.
	Providers map[string][]byte
}

// MarshalBinary encodes c for the rendezvous.
func (c *Card) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 64+len(c.Host)+len(c.TCP)+len(c.UDP))
	b = append(b, cardVersion)
	b = binary.AppendUvarint(b, uint64(c.Rank))
	b = appendString(b, c.Host)
	b = appendString(b, c.TCP)
	b = appendString(b, c.UDP)
	b = binary.AppendUvarint(b, uint64(len(c.Providers)))
	for _, name := range slices.Sorted(maps.Keys(c.Providers)) {
		b = appendString(b, name)
		b = appendString(b, string(c.Providers[name]))
	}
	return b, nil
}

// UnmarshalBinary decodes a card encoded by MarshalBinary.
func (c *Card) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	if v := d.byte(); v != cardVersion && d.err == nil {
		return fmt.Errorf("card: version %d, want %d", v, cardVersion)
	}
	c.Rank = int(d.uvarint())
	c.Host = d.string()
	c.TCP = d.string()
	c.UDP = d.string()
	n := d.uvarint()
	if n > uint64(len(b)) {
		return errors.New("card: provider count exceeds card size")
	}
	c.Providers = nil
	for i := uint64(0); i < n && d.err == nil; i++ {
		if c.Providers == nil {
			c.Providers = make(map[string][]byte, n)
		}
		name := d.string()
		c.Providers[name] = []byte(d.string())
	}
	if d.err != nil {
		return fmt.Errorf("card: %w", d.err)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("card: %d trailing bytes", len(d.b))
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errShort = errors.New("truncated")

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.err = errShort
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errShort
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
