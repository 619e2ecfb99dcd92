package provider

import (
	"fmt"
	"sync"

	"github.com/jiarun/jia/rdmaio"
)

// Object names a kind of object created from a protection domain.
type Object int

// The objects a PD counts.
const (
	ObjMR    Object = iota // memory regions
	ObjQP                  // queue pairs
	ObjSRQ                 // shared receive queues
	ObjAH                  // address handles
	ObjAlloc               // PD.Alloc allocations
	numObjects
)

// PDUse counts the objects created from a protection domain, so that the
// PD's Close is refused while any remain (verbs' ibv_dealloc_pd fails with
// EBUSY the same way). The zero value is ready to use.
type PDUse struct {
	mu     sync.Mutex
	n      [numObjects]int
	closed bool
}

// Add adds d objects of kind o (d is negative when they are destroyed). It
// fails with rdmaio.ErrClosed once the PD is closed.
func (u *PDUse) Add(o Object, d int) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return rdmaio.ErrClosed
	}
	u.n[o] += d
	return nil
}

// Close marks the PD closed. It fails with rdmaio.ErrClosed the second
// time, and with rdmaio.ErrInUse, naming what remains, while objects do.
func (u *PDUse) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return rdmaio.ErrClosed
	}
	n := u.n
	if n[ObjMR]+n[ObjQP]+n[ObjSRQ]+n[ObjAH]+n[ObjAlloc] > 0 {
		return fmt.Errorf("%d MRs, %d QPs, %d SRQs, %d AHs, %d allocations remain: %w",
			n[ObjMR], n[ObjQP], n[ObjSRQ], n[ObjAH], n[ObjAlloc], rdmaio.ErrInUse)
	}
	u.closed = true
	return nil
}

// QPParts checks the parts of a QP to create, common to every provider:
// its type is RC or UD, its send and receive CQs are the provider's own
// (cq converts and checks one: its type, its device), and an SRQ, if any,
// is the provider's own (srq checks its device and PD) and serves an RC
// QP. It returns the converted CQs and SRQ (the zero S without one).
func QPParts[C, S any](attr *rdmaio.QPInitAttr, cq func(rdmaio.CQ) (C, bool), srq func(rdmaio.SRQ) (S, bool)) (scq, rcq C, s S, err error) {
	if attr.Type != rdmaio.RC && attr.Type != rdmaio.UD {
		return scq, rcq, s, fmt.Errorf("%w: type %v", rdmaio.ErrInvalidArgument, attr.Type)
	}
	var ok1, ok2 bool
	if attr.SendCQ != nil {
		scq, ok1 = cq(attr.SendCQ)
	}
	if attr.RecvCQ != nil {
		rcq, ok2 = cq(attr.RecvCQ)
	}
	if !ok1 || !ok2 {
		return scq, rcq, s, fmt.Errorf("%w: send and receive CQs must be CQs of this device", rdmaio.ErrInvalidArgument)
	}
	if attr.SRQ != nil {
		var ok bool
		if s, ok = srq(attr.SRQ); !ok {
			return scq, rcq, s, fmt.Errorf("%w: SRQ of another device or PD", rdmaio.ErrInvalidArgument)
		}
		if attr.Type != rdmaio.RC {
			return scq, rcq, s, fmt.Errorf("%w: SRQ on a UD QP", rdmaio.ErrNotSupported)
		}
	}
	return scq, rcq, s, nil
}
