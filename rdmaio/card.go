package rdmaio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
)

// CardVersion is the version of the endpoint card encoding written by
// Card.MarshalBinary.
const CardVersion = 1

// Limits of the card encoding, so that a decoder never allocates much for a
// hostile input.
const (
	maxCardString = 255  // job, host and provider names
	maxCardAddrs  = 16   // endpoint addresses per card
	maxCardBlob   = 4096 // provider address blob
)

var cardMagic = [4]byte{'J', 'I', 'A', 'C'}

// Card is the endpoint card a rank publishes at rendezvous: who it is and how
// each provider reaches it. It is provider-neutral: the provider-specific
// parts are opaque address blobs (Device.Addr).
type Card struct {
	// Job is the job the rank belongs to.
	Job string
	// Rank is the rank.
	Rank int
	// Host identifies the rank's host (HostID); ranks with equal Host can use
	// shared-memory providers.
	Host string
	// Addrs are the rank's endpoints, at most one per provider.
	Addrs []EndpointAddr
}

// EndpointAddr is one provider's address of a rank.
type EndpointAddr struct {
	// Provider is the provider name (as registered).
	Provider string
	// Addr is the provider's address blob, from Device.Addr.
	Addr []byte
	// UDQPN and QKey name the rank's well-known UD QP on this device, zero
	// when it publishes none.
	UDQPN uint32
	QKey  uint32
}

// Addr returns the rank's endpoint for provider.
func (c *Card) Addr(provider string) (EndpointAddr, bool) {
	for _, a := range c.Addrs {
		if a.Provider == provider {
			return a, true
		}
	}
	return EndpointAddr{}, false
}

// SameHost reports whether c and o describe ranks on the same host.
func (c *Card) SameHost(o *Card) bool { return c.Host != "" && c.Host == o.Host }

func (c *Card) check() error {
	if c.Job == "" || len(c.Job) > maxCardString {
		return fmt.Errorf("%w: job name of %d bytes (want 1..%d)", ErrBadCard, len(c.Job), maxCardString)
	}
	if c.Rank < 0 || int64(c.Rank) > 1<<31-1 {
		return fmt.Errorf("%w: rank %d", ErrBadCard, c.Rank)
	}
	if len(c.Host) > maxCardString {
		return fmt.Errorf("%w: host identity of %d bytes (max %d)", ErrBadCard, len(c.Host), maxCardString)
	}
	if len(c.Addrs) > maxCardAddrs {
		return fmt.Errorf("%w: %d addresses (max %d)", ErrBadCard, len(c.Addrs), maxCardAddrs)
	}
	for i, a := range c.Addrs {
		if a.Provider == "" || len(a.Provider) > maxCardString {
			return fmt.Errorf("%w: address %d: provider name of %d bytes", ErrBadCard, i, len(a.Provider))
		}
		if len(a.Addr) > maxCardBlob {
			return fmt.Errorf("%w: address %d (%s): blob of %d bytes (max %d)", ErrBadCard, i, a.Provider, len(a.Addr), maxCardBlob)
		}
		for j := range i {
			if c.Addrs[j].Provider == a.Provider {
				return fmt.Errorf("%w: provider %s listed twice", ErrBadCard, a.Provider)
			}
		}
	}
	return nil
}

// MarshalBinary encodes the card: magic "JIAC", a version, then the fields.
func (c *Card) MarshalBinary() ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("rdmaio: marshal card: %w", err)
	}
	b := make([]byte, 0, 64+len(c.Job)+len(c.Host)+len(c.Addrs)*64)
	b = append(b, cardMagic[:]...)
	b = binary.LittleEndian.AppendUint16(b, CardVersion)
	b = appendString(b, c.Job)
	b = binary.AppendUvarint(b, uint64(c.Rank))
	b = appendString(b, c.Host)
	b = binary.AppendUvarint(b, uint64(len(c.Addrs)))
	for _, a := range c.Addrs {
		b = appendString(b, a.Provider)
		b = binary.AppendUvarint(b, uint64(len(a.Addr)))
		b = append(b, a.Addr...)
		b = binary.LittleEndian.AppendUint32(b, a.UDQPN)
		b = binary.LittleEndian.AppendUint32(b, a.QKey)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// UnmarshalBinary decodes a card written by MarshalBinary. It rejects other
// versions, truncated or oversize fields and trailing bytes. It does not
// check the job; use ParseCard for cards received from peers.
func (c *Card) UnmarshalBinary(data []byte) error {
	d := cardDecoder{b: data}
	var magic [4]byte
	d.read(magic[:])
	if d.err == nil && magic != cardMagic {
		return fmt.Errorf("rdmaio: unmarshal card: %w: bad magic %q", ErrBadCard, magic[:])
	}
	var v [2]byte
	d.read(v[:])
	if ver := binary.LittleEndian.Uint16(v[:]); d.err == nil && ver != CardVersion {
		return fmt.Errorf("rdmaio: unmarshal card: %w: version %d (this build reads %d)", ErrBadCard, ver, CardVersion)
	}
	var out Card
	out.Job = d.string("job", maxCardString)
	out.Rank = int(d.uvarint("rank", 1<<31-1))
	out.Host = d.string("host", maxCardString)
	n := int(d.uvarint("address count", maxCardAddrs))
	for i := 0; i < n && d.err == nil; i++ {
		var a EndpointAddr
		a.Provider = d.string("provider", maxCardString)
		blen := int(d.uvarint("address length", maxCardBlob))
		if d.err == nil {
			a.Addr = make([]byte, blen)
			d.read(a.Addr)
		}
		var w [8]byte
		d.read(w[:])
		a.UDQPN = binary.LittleEndian.Uint32(w[0:])
		a.QKey = binary.LittleEndian.Uint32(w[4:])
		out.Addrs = append(out.Addrs, a)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrBadCard, len(d.b))
	}
	if d.err == nil {
		d.err = out.check()
	}
	if d.err != nil {
		return fmt.Errorf("rdmaio: unmarshal card: %w", d.err)
	}
	*c = out
	return nil
}

// ParseCard decodes a card and checks that it belongs to job: a card of
// another job is rejected with ErrWrongJob.
func ParseCard(data []byte, job string) (*Card, error) {
	var c Card
	if err := c.UnmarshalBinary(data); err != nil {
		return nil, err
	}
	if c.Job != job {
		return nil, fmt.Errorf("rdmaio: card of rank %d: job %q, want %q: %w", c.Rank, c.Job, job, ErrWrongJob)
	}
	return &c, nil
}

type cardDecoder struct {
	b   []byte
	err error
}

var errTruncated = errors.New("truncated")

func (d *cardDecoder) read(p []byte) {
	if d.err != nil {
		return
	}
	if len(d.b) < len(p) {
		d.err = fmt.Errorf("%w: %w", ErrBadCard, errTruncated)
		return
	}
	copy(p, d.b)
	d.b = d.b[len(p):]
}

func (d *cardDecoder) uvarint(what string, max uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: %s: %w", ErrBadCard, what, errTruncated)
		return 0
	}
	if n > 1 && d.b[n-1] == 0 {
		d.err = fmt.Errorf("%w: %s: non-minimal varint", ErrBadCard, what)
		return 0
	}
	if v > max {
		d.err = fmt.Errorf("%w: %s %d exceeds %d", ErrBadCard, what, v, max)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *cardDecoder) string(what string, max int) string {
	n := d.uvarint(what+" length", uint64(max))
	if d.err != nil {
		return ""
	}
	if uint64(len(d.b)) < n {
		d.err = fmt.Errorf("%w: %s: %w", ErrBadCard, what, errTruncated)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// HostID returns an identity of this host for Card.Host: the host name and,
// on Linux, the boot id, so that two containers or a rebooted machine with
// the same name are told apart.
func HostID() (string, error) {
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("rdmaio: host identity: %w", err)
	}
	if boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if id := string(bytes.TrimSpace(boot)); id != "" {
			return name + "/" + id, nil
		}
	}
	return strings.TrimSpace(name), nil
}
