package rdmaio

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func testCard() *Card {
	return &Card{Job: "job-42", Rank: 7, Host: "node3/boot",
		Addrs: []EndpointAddr{
			{Provider: "shm", Addr: []byte("SHM1 blob"), UDQPN: 0x10001, QKey: 0x11},
			{Provider: "tcp", Addr: []byte{}, UDQPN: 3, QKey: 4},
		}}
}

func TestCardRoundTrip(t *testing.T) {
	c := testCard()
	b, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseCard(b, "job-42")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v, want %+v", got, c)
	}
	if a, ok := got.Addr("tcp"); !ok || a.UDQPN != 3 {
		t.Fatalf("Addr(tcp) = %+v, %v", a, ok)
	}
	if _, ok := got.Addr("verbs"); ok {
		t.Fatalf("Addr(verbs) found")
	}
	if !got.SameHost(c) || got.SameHost(&Card{}) {
		t.Fatalf("SameHost")
	}
}

// TestCardOtherJob: a card of another job is rejected with ErrWrongJob.
func TestCardOtherJob(t *testing.T) {
	b, _ := testCard().MarshalBinary()
	if _, err := ParseCard(b, "job-43"); !errors.Is(err, ErrWrongJob) {
		t.Fatalf("card of another job: %v", err)
	}
}

// TestCardMalformed: every truncation, a wrong magic or version, trailing
// bytes and oversize fields are errors, never panics.
func TestCardMalformed(t *testing.T) {
	b, _ := testCard().MarshalBinary()
	for i := 0; i < len(b); i++ {
		var c Card
		if err := c.UnmarshalBinary(b[:i]); !errors.Is(err, ErrBadCard) {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
	}
	bad := func(what string, data []byte) {
		t.Helper()
		var c Card
		if err := c.UnmarshalBinary(data); !errors.Is(err, ErrBadCard) {
			t.Errorf("%s: %v", what, err)
		}
	}
	bad("trailing byte", append(append([]byte{}, b...), 0))
	bad("magic", append([]byte("JIAX"), b[4:]...))
	v := append([]byte{}, b...)
	v[4] = 2
	bad("version 2", v)
	huge := append(append([]byte{}, b[:6]...), 0xff, 0xff, 0xff, 0xff, 0x0f)
	bad("huge job length", huge)
	for _, c := range []*Card{
		{Job: "", Rank: 1},
		{Job: strings.Repeat("j", 256)},
		{Job: "j", Rank: -1},
		{Job: "j", Addrs: []EndpointAddr{{Provider: ""}}},
		{Job: "j", Addrs: []EndpointAddr{{Provider: "a"}, {Provider: "a"}}},
		{Job: "j", Addrs: []EndpointAddr{{Provider: "a", Addr: make([]byte, 4097)}}},
		{Job: "j", Addrs: make([]EndpointAddr, 17)},
	} {
		if _, err := c.MarshalBinary(); !errors.Is(err, ErrBadCard) {
			t.Errorf("marshal %+v: %v", c, err)
		}
	}
}

// FuzzCard: decoding arbitrary bytes never panics, and whatever decodes
// encodes back to the same bytes.
func FuzzCard(f *testing.F) {
	b, _ := testCard().MarshalBinary()
	f.Add(b)
	f.Add([]byte("JIAC"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Card
		if err := c.UnmarshalBinary(data); err != nil {
			return
		}
		out, err := c.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded card does not encode: %v", err)
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func TestHostID(t *testing.T) {
	id, err := HostID()
	if err != nil || id == "" {
		t.Fatalf("HostID() = %q, %v", id, err)
	}
}
