package verbs

import (
	"bytes"
	"errors"
	"testing"

	"github.com/jiarun/jia/rdmaio"
)

func ibAddr() portAddr {
	return portAddr{rank: 3, jobHash: jobHash("job"), port: 1, link: linkInfiniBand, lid: 0x12, mtu: 5}
}

func roceAddr() portAddr {
	a := portAddr{rank: 7, jobHash: jobHash("job"), port: 2, link: linkEthernet, mtu: 3, gidIndex: 3}
	copy(a.gid[:], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7})
	return a
}

func TestAddrRoundTrip(t *testing.T) {
	for _, a := range []portAddr{ibAddr(), roceAddr()} {
		b := a.encode()
		if len(b) != addrLen {
			t.Fatalf("encoded length %d, want %d", len(b), addrLen)
		}
		got, err := decodeAddr(b)
		if err != nil || got != a {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", a, got, err)
		}
	}
}

func TestAddrRejects(t *testing.T) {
	good := ibAddr().encode()
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string][]byte{
		"empty":          nil,
		"short":          good[:addrLen-1],
		"long":           append(append([]byte(nil), good...), 0),
		"magic":          mut(func(b []byte) []byte { b[0] = 'X'; return b }),
		"rank > 2^31-1":  mut(func(b []byte) []byte { b[7] = 0x80; return b }),
		"port 0":         mut(func(b []byte) []byte { b[16] = 0; return b }),
		"link layer 0":   mut(func(b []byte) []byte { b[17] = 0; return b }),
		"link layer 3":   mut(func(b []byte) []byte { b[17] = 3; return b }),
		"LID 0":          mut(func(b []byte) []byte { b[18], b[19] = 0, 0; return b }),
		"multicast LID":  mut(func(b []byte) []byte { b[18], b[19] = 0, 0xc0; return b }),
		"MTU 0":          mut(func(b []byte) []byte { b[20] = 0; return b }),
		"MTU 6":          mut(func(b []byte) []byte { b[20] = 6; return b }),
		"reserved bytes": mut(func(b []byte) []byte { b[22] = 1; return b }),
		"RoCE zero GID": func() []byte {
			a := roceAddr()
			a.gid = [16]byte{}
			return a.encode()
		}(),
	}
	for name, b := range cases {
		if _, err := decodeAddr(b); !errors.Is(err, rdmaio.ErrBadAddress) {
			t.Errorf("%s: decode: %v, want ErrBadAddress", name, err)
		}
	}
}

func TestCheckPeerAndAH(t *testing.T) {
	ib, ib2 := ibAddr(), ibAddr()
	ib2.lid, ib2.rank = 0x34, 4
	s, err := ahFor(&ib, &ib2)
	if err != nil || s.global || s.dlid != 0x34 || s.port != 1 {
		t.Fatalf("IB address vector %+v, %v", s, err)
	}
	r, r2 := roceAddr(), roceAddr()
	r2.gid[15] = 9
	s, err = ahFor(&r, &r2)
	if err != nil || !s.global || s.dgid != r2.gid || s.sgidIndex != 3 || s.hopLimit == 0 || s.port != 2 || s.dlid != 0 {
		t.Fatalf("RoCE address vector %+v, %v", s, err)
	}
	if _, err := ahFor(&ib, &r); !errors.Is(err, rdmaio.ErrBadAddress) {
		t.Fatalf("IB to RoCE: %v", err)
	}
	other := ibAddr()
	other.jobHash = jobHash("other job")
	if _, err := ahFor(&ib, &other); !errors.Is(err, rdmaio.ErrBadAddress) {
		t.Fatalf("address of another job: %v", err)
	}
}

// FuzzDecodeAddr: the decoder never panics, and what it accepts
// re-encodes to the same bytes and is a reachable address.
func FuzzDecodeAddr(f *testing.F) {
	f.Add(ibAddr().encode())
	f.Add(roceAddr().encode())
	f.Add([]byte("JVA1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAddr(b)
		if err != nil {
			if !errors.Is(err, rdmaio.ErrBadAddress) {
				t.Fatalf("error %v does not wrap ErrBadAddress", err)
			}
			return
		}
		if !bytes.Equal(a.encode(), b) {
			t.Fatalf("accepted %x re-encodes as %x", b, a.encode())
		}
		if mtuBytes(a.mtu) == 0 || a.port == 0 {
			t.Fatalf("accepted unusable address %+v", a)
		}
	})
}

// TestAddrInCard: the address travels in an endpoint card and comes back
// intact.
func TestAddrInCard(t *testing.T) {
	a := roceAddr()
	c := rdmaio.Card{Job: "job", Rank: 7, Host: "h", Addrs: []rdmaio.EndpointAddr{{Provider: Name, Addr: a.encode(), UDQPN: 0x123, QKey: 0x11}}}
	b, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := rdmaio.ParseCard(b, "job")
	if err != nil {
		t.Fatal(err)
	}
	ep, ok := got.Addr(Name)
	if !ok || ep.UDQPN != 0x123 || ep.QKey != 0x11 {
		t.Fatalf("endpoint %+v, %v", ep, ok)
	}
	back, err := decodeAddr(ep.Addr)
	if err != nil || back != a {
		t.Fatalf("address from the card: %+v, %v", back, err)
	}
}
