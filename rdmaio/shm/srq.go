package shm

import (
	"github.com/jiarun/jia/internal/qlock"
	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// srq is a shared receive queue. Its posted count lives in the main segment
// so that senders can tell a receiver that is not ready.
type srq struct {
	dev  *Device
	pd   *pd
	idx  int
	word []byte

	mu     qlock.Mutex // held briefly: a post, or one message's delivery
	rq     provider.RecvQueue
	users  int
	closed bool
}

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
		return nil, d.errf("create srq: %w: all %d SRQs in use (option max_srq)", rdmaio.ErrInvalidArgument, d.lay.maxSRQ)
	}
	if err := p.use.Add(provider.ObjSRQ, 1); err != nil {
		return nil, d.errf("create srq: pd: %w", err)
	}
	o := d.lay.srq(s.idx)
	s.word = d.main.mem[o : o+srqBytes]
	storeI64(s.word, sPosted, 0)
	d.srqs[s.idx] = s
	return s, nil
}

func (s *srq) PostRecv(wrs []rdmaio.RecvWR) (int, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, s.dev.errf("srq post recv: %w", rdmaio.ErrClosed)
	}
	n, err := s.rq.Post(s.pd, wrs)
	if n > 0 {
		s.publishPosted()
	}
	s.mu.Unlock()
	if err != nil {
		return n, s.dev.errf("srq post recv: work request %d (id %d): %w", n, wrs[n].ID, err)
	}
	return n, nil
}

// publishPosted stores the count of receives left for senders (s.mu is
// held). A plain store, as for a QP's own count (cPosted): senders read it
// only to decide that the receiver is not ready (RNR), after many idle
// polls, and the CAS on the ring entry settles a race with a receive
// posted or taken meanwhile.
func (s *srq) publishPosted() { putI64(s.word, sPosted, int64(s.rq.Len())) }

func (s *srq) references(lo, hi uintptr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rq.References(lo, hi)
}

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
