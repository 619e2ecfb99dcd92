package memtransport

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jiarun/jia/comm/transport"
)

type collect struct {
	msgs  []string
	froms []int
	done  []uint64
	errs  []error
}

func (c *collect) Deliver(src int, msg []byte) {
	c.msgs = append(c.msgs, string(msg))
	c.froms = append(c.froms, src)
}

func (c *collect) Complete(id uint64, err error) {
	c.done = append(c.done, id)
	c.errs = append(c.errs, err)
}

func drain(e *Endpoint, h *collect, want int) {
	for deadline := time.Now().Add(10 * time.Second); len(h.msgs)+len(h.done) < want && time.Now().Before(deadline); {
		if e.Poll(h) == 0 {
			e.Wait(time.Millisecond)
		}
	}
}

func TestSendOrderAndGather(t *testing.T) {
	for _, lossy := range []bool{false, true} {
		t.Run(fmt.Sprint("lossy=", lossy), func(t *testing.T) {
			f := New(3, Options{Lossy: lossy, Loss: 0.1, Dup: 0.1, Reorder: 0.2, Seed: 9, MTU: 64})
			defer f.Close()
			a := f.Endpoint(0)
			for i := 0; i < 200; i++ {
				payload := bytes.Repeat([]byte{byte(i)}, i)
				if err := a.Send(2, []byte(fmt.Sprintf("%03d:", i)), [][]byte{payload[:i/2], payload[i/2:]}); err != nil {
					t.Fatal(err)
				}
			}
			var h collect
			drain(f.Endpoint(2), &h, 200)
			if len(h.msgs) != 200 {
				t.Fatalf("%d of 200 messages", len(h.msgs))
			}
			for i, m := range h.msgs {
				want := fmt.Sprintf("%03d:", i) + string(bytes.Repeat([]byte{byte(i)}, i))
				if m != want || h.froms[i] != 0 {
					t.Fatalf("message %d from %d: %q", i, h.froms[i], m)
				}
			}
		})
	}
}

func TestOneSided(t *testing.T) {
	f := New(2, Options{})
	defer f.Close()
	a, b := f.Endpoint(0), f.Endpoint(1)
	mem := []byte("0123456789")
	reg, err := a.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]byte, 3), make([]byte, 2)
	if err := b.Read(0, transport.Region{Key: reg.Key, Addr: reg.Addr + 2}, [][]byte{x, y}, 7); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(0, transport.Region{Key: reg.Key, Addr: 8}, [][]byte{[]byte("AB")}, 8); err != nil {
		t.Fatal(err)
	}
	if err := b.Read(0, transport.Region{Key: reg.Key, Addr: 9}, [][]byte{x}, 9); err != nil {
		t.Fatal(err)
	}
	var h collect
	drain(b, &h, 3)
	if string(x)+string(y) != "23456" && string(x) != "B" {
		t.Fatalf("read %q %q", x, y)
	}
	if string(mem) != "01234567AB" {
		t.Fatalf("write gave %q", mem)
	}
	if fmt.Sprint(h.done) != "[7 8 9]" || h.errs[0] != nil || h.errs[1] != nil || !errors.Is(h.errs[2], transport.ErrRegion) {
		t.Fatalf("completions %v %v", h.done, h.errs)
	}
	if err := a.Deregister(reg); err != nil {
		t.Fatal(err)
	}
	b.Read(0, reg, [][]byte{x}, 10)
	h = collect{}
	drain(b, &h, 1)
	if !errors.Is(h.errs[0], transport.ErrRegion) {
		t.Fatalf("read of a deregistered region: %v", h.errs)
	}
	if err := a.Deregister(reg); !errors.Is(err, transport.ErrRegion) {
		t.Fatalf("double deregister: %v", err)
	}
}

func TestErrors(t *testing.T) {
	f := New(2, Options{NoOneSided: true, MaxMsg: 10, MaxSGE: 1})
	e := f.Endpoint(0)
	if err := e.Send(2, nil, nil); !errors.Is(err, transport.ErrRank) {
		t.Errorf("bad rank: %v", err)
	}
	if err := e.Send(1, make([]byte, 11), nil); !errors.Is(err, transport.ErrTooLong) {
		t.Errorf("too long: %v", err)
	}
	if err := e.Send(1, nil, [][]byte{{1}, {2}}); err == nil {
		t.Errorf("gather list beyond MaxSGE accepted")
	}
	if _, err := e.Register(nil); !errors.Is(err, transport.ErrNotSupported) {
		t.Errorf("register without one-sided: %v", err)
	}
	if c := e.Caps(); c.OneSided || c.MaxMsg != 10 || c.Name != "mem" {
		t.Errorf("caps %+v", c)
	}
	f.Close()
	if err := e.Send(1, nil, nil); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("send after close: %v", err)
	}
}
