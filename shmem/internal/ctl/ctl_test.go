package ctl_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/internal/ctl"
	"github.com/jiarun/jia/shmem/protocol"
	"github.com/jiarun/jia/shmem/uffd"
)

func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// Frames written back to back, some with descriptors, are read whole and in
// order, and each descriptor is taken with the frame it came with.
func TestFramesAndDescriptors(t *testing.T) {
	a, b := pair(t)
	frames := []ctl.Frame{
		{Type: ctl.THello, Req: 1, Data: []byte(`{"Rank":3}`)},
		{Type: ctl.TCall, Req: 2, A: int64(protocol.EvLock), B: -7},
		{Type: ctl.TAlloc, Req: 3, A: 1 << 40, B: 12, Data: make([]byte, 70000)},
		{Type: ctl.TBye, Req: 1<<64 - 1},
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	fd := int(r.Fd())
	sent := make(chan struct{})
	defer func() { <-sent }()
	go func() {
		defer close(sent)
		for _, f := range frames {
			buf := ctl.Append(nil, f)
			if f.Type == ctl.THello || f.Type == ctl.TAlloc {
				uffd.SendFDs(a, buf, fd)
			} else {
				a.Write(buf)
			}
		}
		a.CloseWrite()
	}()
	rd := ctl.NewReader(b)
	for i, want := range frames {
		got, err := rd.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.Type != want.Type || got.Req != want.Req || got.A != want.A || got.B != want.B || len(got.Data) != len(want.Data) {
			t.Fatalf("frame %d: %+v, want %+v", i, got.Type, want.Type)
		}
		if want.Type == ctl.THello || want.Type == ctl.TAlloc {
			fd, ok := rd.TakeFD()
			if !ok {
				t.Fatalf("frame %d came without its descriptor", i)
			}
			unix.Close(fd)
		}
	}
	if _, ok := rd.TakeFD(); ok {
		t.Fatal("a descriptor too many")
	}
	if _, err := rd.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v", err)
	}
}

func TestMalformedFrames(t *testing.T) {
	for name, b := range map[string][]byte{
		"huge length": {0xff, 0, 0, 0, 1},
		"zero length": {0, 0, 0, 0},
		"bad varint":  {0, 0, 0, 3, 1, 0x80, 0x80},
		"cut short":   {0, 0, 0, 9, 1, 2},
	} {
		a, c := pair(t)
		a.Write(b)
		a.CloseWrite()
		if _, err := ctl.NewReader(c).Next(); !errors.Is(err, ctl.ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", name, err)
		}
	}
}

func TestErrorCodesRoundTrip(t *testing.T) {
	for _, e := range []error{protocol.ErrLockNotHeld, protocol.ErrBarrierInCS, protocol.ErrPlacement, ctl.ErrMismatch} {
		wrapped := &protocol.Error{Rank: 1, Call: "x", Err: e}
		if got := ctl.CodeErr(ctl.Code(wrapped)); got != e {
			t.Errorf("%v came back as %v", e, got)
		}
	}
	if ctl.Code(nil) != 0 || ctl.Code(errors.New("other")) != -1 || ctl.CodeErr(-1) != nil || ctl.CodeErr(99) != nil {
		t.Error("codes of nil and unknown errors")
	}
}
