package proto

import (
	"encoding/binary"
	"errors"
	"testing"
)

// TestStagedRendezvous: a send still being packed (Op.Watch) announces
// itself with RTSS and the count packed; the receiver reads what is
// packed and then the watermark, and again each time the watermark says
// more is packed, until it has what fits its buffer; then FIN.
func TestStagedRendezvous(t *testing.T) {
	cfg := Config{EagerLimit: 16, Mode: ModeRead, MaxRead: 64}
	t.Run("the send's RTS carries the watermark and the count packed", func(t *testing.T) {
		e := NewEngine(cfg)
		op := &Op{Ctx: 1, Rank: 0, Peer: 1, Tag: 3, Dest: 1, Buf: Contig(make([]byte, 300)),
			Region: Region{Key: 7, Addr: 1064}, Watch: 1000, Ready: 100}
		e.Send(op)
		a := e.TakeActions()
		if len(a) != 1 || a[0].Hdr.Kind != KRTSS || a[0].Hdr.Watch != 1000 || a[0].Hdr.Ready != 100 ||
			a[0].Hdr.Addr != 1064 || a[0].Hdr.Len != 300 {
			t.Fatalf("got %s %+v", acts(a), a[0].Hdr)
		}
	})
	// recv matches an RTSS of n bytes (ready packed) into a buffer of size
	// bytes and returns the engine and the op.
	recv := func(t *testing.T, n, ready, size int) (*Engine, *Op) {
		e := NewEngine(cfg)
		op := &Op{Ctx: 1, Peer: 0, Tag: 3, Buf: Contig(make([]byte, size))}
		e.Recv(op)
		h := Header{Kind: KRTSS, Ctx: 1, Src: 0, Tag: 3, Len: uint64(n), SID: 5, Key: 7, Addr: 1064, Watch: 1000, Ready: uint64(ready)}
		if err := e.Receive(0, encode(h, nil)); err != nil {
			t.Fatal(err)
		}
		return e, op
	}
	// done completes every read emitted; a watch reads wm.
	done := func(t *testing.T, e *Engine, a []Action, wm int) {
		for _, x := range a {
			if x.Kind == ActWatch {
				binary.LittleEndian.PutUint64(x.Op.WatchBuf(), uint64(wm))
			}
			if x.Kind == ActRead || x.Kind == ActWatch {
				if err := e.ReadDone(x.ID, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Run("reads follow the watermark", func(t *testing.T) {
		e, op := recv(t, 300, 100, 300)
		a := e.TakeActions()
		if got, want := acts(a), "read 64 bytes from 0 key 7 addr 1064 into 0; read 36 bytes from 0 key 7 addr 1128 into 64; watch 0 key 7 addr 1000"; got != want {
			t.Fatalf("got %q\nwant %q", got, want)
		}
		done(t, e, a, 100) // nothing more packed yet: watch again
		a = e.TakeActions()
		if got, want := acts(a), "watch 0 key 7 addr 1000"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		done(t, e, a, 250)
		a = e.TakeActions()
		if got, want := acts(a), "read 64 bytes from 0 key 7 addr 1164 into 100; read 64 bytes from 0 key 7 addr 1228 into 164; read 22 bytes from 0 key 7 addr 1292 into 228; watch 0 key 7 addr 1000"; got != want {
			t.Fatalf("got %q\nwant %q", got, want)
		}
		done(t, e, a, 300)
		a = e.TakeActions()
		if got, want := acts(a), "read 50 bytes from 0 key 7 addr 1314 into 250"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		done(t, e, a, 0)
		if got, want := take(e), "send FIN to 0 (0 bytes at 0); complete (<nil>)"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		if op.Err != nil || op.Status.Len != 300 {
			t.Fatalf("err %v status %+v", op.Err, op.Status)
		}
	})
	t.Run("a short receive reads what fits and stops watching", func(t *testing.T) {
		e, op := recv(t, 300, 64, 120)
		a := e.TakeActions()
		done(t, e, a, 1000) // a watermark past the message is taken as its end
		a = e.TakeActions()
		if got, want := acts(a), "read 56 bytes from 0 key 7 addr 1128 into 64"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		done(t, e, a, 0)
		take(e)
		if !errors.Is(op.Err, ErrTruncate) || op.Status.Len != 120 || op.Status.MsgLen != 300 {
			t.Fatalf("err %v status %+v", op.Err, op.Status)
		}
	})
	t.Run("a receive vector of small blocks gets each round's bytes as it comes", func(t *testing.T) {
		e := NewEngine(Config{EagerLimit: 16, Mode: ModeRead, MaxRead: 64, MinScatterBlock: 64})
		user := make([]byte, 160)
		op := &Op{Ctx: 1, Peer: 0, Tag: 3, Buf: Vector(user, 10, 8, 16)}
		e.Recv(op)
		h := Header{Kind: KRTSS, Ctx: 1, Src: 0, Tag: 3, Len: 80, SID: 5, Key: 7, Addr: 1064, Watch: 1000, Ready: 30}
		if err := e.Receive(0, encode(h, nil)); err != nil {
			t.Fatal(err)
		}
		msg := make([]byte, 80)
		for i := range msg {
			msg[i] = byte(i + 1)
		}
		// fill completes the rounds' reads with the message's bytes.
		fill := func(a []Action, wm int) {
			for _, x := range a {
				if x.Kind == ActRead {
					off := int(x.Remote.Addr - 1064)
					for _, seg := range x.Op.Buf.Segments(x.Off, x.N, nil) {
						off += copy(seg, msg[off:])
					}
				}
			}
			done(t, e, a, wm)
		}
		fill(e.TakeActions(), 60)
		// Round 1's 30 bytes are in the user's blocks already.
		for i := 0; i < 30; i++ {
			if got := user[i/8*16+i%8]; got != msg[i] {
				t.Fatalf("after round 1, message byte %d is %d in the vector, want %d", i, got, msg[i])
			}
		}
		fill(e.TakeActions(), 80)
		fill(e.TakeActions(), 80)
		if got, want := take(e), "send FIN to 0 (0 bytes at 0); complete (<nil>)"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		for i := range msg {
			if got := user[i/8*16+i%8]; got != msg[i] {
				t.Fatalf("message byte %d is %d in the vector, want %d", i, got, msg[i])
			}
		}
	})
	t.Run("a failed read ends the receive with its error", func(t *testing.T) {
		e, op := recv(t, 300, 10, 300)
		a := e.TakeActions()
		bad := errors.New("remote access error")
		if err := e.ReadDone(a[0].ID, bad); err != nil {
			t.Fatal(err)
		}
		if err := e.ReadDone(a[1].ID, nil); err != nil { // the watch
			t.Fatal(err)
		}
		if got, want := take(e), "send FIN to 0 (0 bytes at 0); complete (remote access error)"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
		if !errors.Is(op.Err, bad) {
			t.Fatalf("err %v", op.Err)
		}
	})
}
