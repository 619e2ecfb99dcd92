package tcp

import (
	"sync"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// srq is a shared receive queue.
type srq struct {
	dev *Device
	pd  *pd
	idx int

	mu     sync.Mutex
	rq     provider.RecvQueue
	users  int
	closed bool
}

// CreateSRQ creates a shared receive queue.
func (p *pd) CreateSRQ(attr rdmaio.SRQAttr) (rdmaio.SRQ, error) {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("create srq: %w", err)
	}
	defer d.life.End()
	attr, err := provider.FillSRQ(attr, DefaultMaxRecvWR, DefaultMaxSGE, maxQPWR, maxSGE)
	if err != nil {
		return nil, d.errf("create srq: %w", err)
	}
	s := &srq{dev: d, pd: p, rq: provider.NewRecvQueue(attr.MaxWR, attr.MaxSGE)}
	d.mu.Lock()
	defer d.mu.Unlock()
	s.idx = -1
	for i, x := range d.srqs {
		if x == nil {
			s.idx = i
			break
		}
	}
	if s.idx < 0 {
		return nil, d.errf("create srq: %w: all %d SRQs in use (option max_srq)", rdmaio.ErrInvalidArgument, len(d.srqs))
	}
	if err := p.use.Add(provider.ObjSRQ, 1); err != nil {
		return nil, d.errf("create srq: pd: %w", err)
	}
	d.srqs[s.idx] = s
	return s, nil
}

// PostRecv posts receive work requests like QP.PostRecv.
func (s *srq) PostRecv(wrs []rdmaio.RecvWR) (int, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, s.dev.errf("srq post recv: %w", rdmaio.ErrClosed)
	}
	n, err := s.rq.Post(s.pd, wrs)
	s.mu.Unlock()
	if err != nil {
		return n, s.dev.errf("srq post recv: work request %d (id %d): %w", n, wrs[n].ID, err)
	}
	return n, nil
}

func (s *srq) references(lo, hi uintptr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rq.References(lo, hi)
}

// Close destroys the SRQ. It fails with ErrInUse while QPs use it.
func (s *srq) Close() error {
	d := s.dev
	if err := d.life.Begin(); err != nil {
		return d.errf("close srq: %w", err)
	}
	defer d.life.End()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return d.errf("close srq: %w", rdmaio.ErrClosed)
	}
	if s.users > 0 {
		s.mu.Unlock()
		return d.errf("close srq: used by %d QPs: %w", s.users, rdmaio.ErrInUse)
	}
	s.closed = true
	s.rq.Clear()
	s.mu.Unlock()
	d.mu.Lock()
	if d.srqs[s.idx] == s {
		d.srqs[s.idx] = nil
	}
	d.mu.Unlock()
	s.pd.use.Add(provider.ObjSRQ, -1)
	return nil
}
