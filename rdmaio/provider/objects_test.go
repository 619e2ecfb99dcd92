package provider

import (
	"errors"
	"strings"
	"testing"

	"github.com/jiarun/jia/rdmaio"
)

func TestPDUse(t *testing.T) {
	var u PDUse
	if err := u.Add(ObjQP, 1); err != nil {
		t.Fatal(err)
	}
	err := u.Close()
	if !errors.Is(err, rdmaio.ErrInUse) || !strings.Contains(err.Error(), "1 QPs") {
		t.Fatalf("Close with a QP left: %v", err)
	}
	u.Add(ObjQP, -1)
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if err := u.Close(); !errors.Is(err, rdmaio.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if err := u.Add(ObjMR, 1); !errors.Is(err, rdmaio.ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
}

type fakeCQ struct {
	rdmaio.CQ
	mine bool
}

type fakeSRQ struct {
	rdmaio.SRQ
	mine bool
}

func TestQPParts(t *testing.T) {
	cq := func(c rdmaio.CQ) (*fakeCQ, bool) { x, ok := c.(*fakeCQ); return x, ok && x.mine }
	srq := func(s rdmaio.SRQ) (*fakeSRQ, bool) { x, ok := s.(*fakeSRQ); return x, ok && x.mine }
	own, other := &fakeCQ{mine: true}, &fakeCQ{}
	for _, tc := range []struct {
		attr rdmaio.QPInitAttr
		want error
	}{
		{rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: own, RecvCQ: own}, nil},
		{rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: own, RecvCQ: own, SRQ: &fakeSRQ{mine: true}}, nil},
		{rdmaio.QPInitAttr{Type: 99, SendCQ: own, RecvCQ: own}, rdmaio.ErrInvalidArgument},
		{rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: own, RecvCQ: other}, rdmaio.ErrInvalidArgument},
		{rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: own}, rdmaio.ErrInvalidArgument},
		{rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: own, RecvCQ: own, SRQ: &fakeSRQ{}}, rdmaio.ErrInvalidArgument},
		{rdmaio.QPInitAttr{Type: rdmaio.UD, SendCQ: own, RecvCQ: own, SRQ: &fakeSRQ{mine: true}}, rdmaio.ErrNotSupported},
	} {
		_, _, _, err := QPParts(&tc.attr, cq, srq)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%+v: %v, want %v", tc.attr, err, tc.want)
		}
	}
}
