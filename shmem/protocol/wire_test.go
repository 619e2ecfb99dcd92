package protocol_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/jiarun/jia/shmem/protocol"
)

// wireSamples has a message of every kind, as the Machine sends them.
func wireSamples() []*protocol.Message {
	return []*protocol.Message{
		{Kind: protocol.MsgPageReq, From: 1, To: 0, Seq: 7, Epoch: 2, Pages: []protocol.PageID{5, 6, 7}},
		{Kind: protocol.MsgPageGrant, From: 0, To: 1, Seq: 7, Epoch: 2, Pages: []protocol.PageID{5}, Data: bytes.Repeat([]byte{0xab}, 64)},
		{Kind: protocol.MsgDiff, From: 3, To: 2, Seq: 9, Order: 4, Epoch: 1, Pages: []protocol.PageID{1 << 31}, Data: []byte{1, 2, 3}},
		{Kind: protocol.MsgDiffAck, From: 2, To: 3, Seq: 9, Pages: []protocol.PageID{1 << 31}},
		{Kind: protocol.MsgAcquire, From: 1, To: 2, ID: 6, Scope: -1, Epoch: 3},
		{Kind: protocol.MsgGrant, From: 2, To: 1, ID: 6, Scope: 12, Notices: []protocol.Notice{{Page: 4, Writer: protocol.Several}, {Page: 9, Writer: protocol.Several}}},
		{Kind: protocol.MsgRelease, From: 1, To: 2, ID: 6, Scope: 12, Pages: []protocol.PageID{4, 9}},
		{Kind: protocol.MsgBarrier, From: 1, To: 0, Epoch: 5, Notices: []protocol.Notice{{Page: 3, Writer: 1, Cached: true}}},
		{Kind: protocol.MsgBarrierGrant, From: 0, To: 1, Epoch: 6, Notices: []protocol.Notice{{Page: 3, Writer: 1, Migrate: true}, {Page: 8, Writer: protocol.Several}}},
		{Kind: protocol.MsgWait, From: 4, To: 0, Seq: 11},
		{Kind: protocol.MsgWaitGrant, From: 0, To: 4, Seq: 11},
		{Kind: protocol.MsgSetCV, From: 1, To: 3, ID: 7, Seq: 2},
		{Kind: protocol.MsgResetCV, From: 1, To: 3, ID: 7, Seq: 3},
		{Kind: protocol.MsgWaitCV, From: 2, To: 3, ID: 7},
		{Kind: protocol.MsgCVGrant, From: 3, To: 2, ID: 7, Epoch: 1 << 40},
		{Kind: protocol.MsgRecall, From: 1, To: 0, ID: 9, Epoch: 3},
	}
}

func TestWireRoundTripOfEveryKind(t *testing.T) {
	kinds := map[protocol.MsgKind]bool{}
	for _, m := range wireSamples() {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		var got protocol.Message
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		if !reflect.DeepEqual(&got, m) {
			t.Fatalf("round trip of %v gave %v", m, &got)
		}
		kinds[m.Kind] = true
	}
	if len(kinds) != int(protocol.MsgRecall) {
		t.Fatalf("samples cover %d kinds of %d", len(kinds), protocol.MsgRecall)
	}
}

func TestWireRoundTripOfRandomMessages(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		m := &protocol.Message{
			Kind: protocol.MsgKind(1 + r.IntN(int(protocol.MsgRecall))), From: r.IntN(1 << 20), To: r.IntN(4),
			Seq: r.Uint64(), Order: r.Uint64() >> r.IntN(64), ID: int(r.Int32()) - r.IntN(2)<<31, Scope: r.Int64() - r.Int64(),
			Epoch: r.Uint64() >> r.IntN(64),
		}
		for j := r.IntN(5); j > 0; j-- {
			m.Pages = append(m.Pages, protocol.PageID(r.Uint32()))
		}
		for j := r.IntN(4); j > 0; j-- {
			m.Notices = append(m.Notices, protocol.Notice{Page: protocol.PageID(r.Uint32()), Writer: r.IntN(100) - 1, Cached: r.IntN(2) == 0, Migrate: r.IntN(2) == 0})
		}
		if n := r.IntN(3) * r.IntN(5000); n > 0 {
			m.Data = make([]byte, n)
			for k := range m.Data {
				m.Data[k] = byte(r.Uint32())
			}
		}
		b, err := m.AppendBinary([]byte("prefix"))
		if err != nil {
			t.Fatal(err)
		}
		var got protocol.Message
		if err := got.UnmarshalBinary(b[len("prefix"):]); err != nil {
			t.Fatalf("%v: %v", m, err)
		}
		if !reflect.DeepEqual(&got, m) {
			t.Fatalf("round trip of %v gave %v", m, &got)
		}
	}
}

func TestWireRejectsMalformedFrames(t *testing.T) {
	good, _ := wireSamples()[1].MarshalBinary()
	cases := map[string][]byte{
		"empty":          nil,
		"version":        append([]byte{9}, good[1:]...),
		"unknown kind":   append([]byte{1, 99}, good[2:]...),
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte{}, good...), 0),
		"huge count":     {1, byte(protocol.MsgPageReq), 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad rank":       {1, byte(protocol.MsgPageReq), 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad flags":      {1, byte(protocol.MsgGrant), 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 4, 0},
	}
	for name, b := range cases {
		var m protocol.Message
		if err := m.UnmarshalBinary(b); !errors.Is(err, protocol.ErrWire) {
			t.Errorf("%s: err %v, want ErrWire", name, err)
		}
	}
	if _, err := (&protocol.Message{Kind: protocol.MsgWait, From: -1}).MarshalBinary(); err == nil {
		t.Error("a negative rank was encoded")
	}
}

// FuzzMessageWire decodes arbitrary frames, as a hostile or broken peer
// could send them: decoding never panics, never allocates more than the
// frame holds, and what decodes encodes back to the same bytes.
func FuzzMessageWire(f *testing.F) {
	for _, m := range wireSamples() {
		b, _ := m.MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m protocol.Message
		if err := m.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, protocol.ErrWire) {
				t.Fatalf("error %v does not wrap ErrWire", err)
			}
			return
		}
		out, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded %v does not encode: %v", &m, err)
		}
		var again protocol.Message
		if err := again.UnmarshalBinary(out); err != nil || !reflect.DeepEqual(&again, &m) {
			t.Fatalf("re-encoding of %v decodes as %v, %v", &m, &again, err)
		}
		if !bytes.Equal(out, b) && len(out) > len(b) {
			t.Fatalf("re-encoding grew from %d to %d bytes", len(b), len(out))
		}
	})
}
