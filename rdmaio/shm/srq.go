package shm

import (
	"github.com/jiarun/jia/internal/qlock"
	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// srq is a shared receive queue. Its posted count lives in the main segment
// so that senders can tell a receiver that is not ready.
type srq struct {
	dev    *Device
	pd     *pd
	idx    int
	word   []byte
	maxSGE int

	mu     qlock.Mutex // held briefly: a post, or one message's delivery
	rq     []rqe
	head   uint64
	tail   uint64
	users  int
	closed bool
}

func (p *pd) CreateSRQ(attr rdmaio.SRQAttr) (rdmaio.SRQ, error) {
	d := p.dev
	if err := d.life.Begin(); err != nil {
		return nil, d.errf("create srq: %w", err)
	}
	defer d.life.End()
	if attr.MaxWR == 0 {
		attr.MaxWR = DefaultMaxRecvWR
	}
	if attr.MaxSGE == 0 {
		attr.MaxSGE = DefaultMaxSGE
	}
	if attr.MaxWR < 1 || attr.MaxWR > maxQPWR || attr.MaxSGE < 1 || attr.MaxSGE > maxSGE {
		return nil, d.errf("create srq: %w: MaxWR %d (1..%d), MaxSGE %d (1..%d)", rdmaio.ErrInvalidArgument,
			attr.MaxWR, maxQPWR, attr.MaxSGE, maxSGE)
	}
	s := &srq{dev: d, pd: p, maxSGE: attr.MaxSGE, rq: make([]rqe, attr.MaxWR)}
	for i := range s.rq {
		s.rq[i].sg = make([][]byte, 0, attr.MaxSGE)
	}
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
	n, err := s.dev.postRecv(s.pd, s.rq, &s.head, &s.tail, s.maxSGE, wrs)
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
func (s *srq) publishPosted() { putI64(s.word, sPosted, int64(s.tail-s.head)) }

func (s *srq) references(lo, hi uintptr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := s.head; i < s.tail; i++ {
		for _, b := range s.rq[i%uint64(len(s.rq))].sg {
			if overlaps(b, lo, hi) {
				return true
			}
		}
	}
	return false
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
	for i := range s.rq {
		clearAllBufs(s.rq[i].sg)
	}
	s.mu.Unlock()
	d.mu.Lock()
	if d.srqs[s.idx] == s {
		d.srqs[s.idx] = nil
	}
	d.mu.Unlock()
	s.pd.use.Add(provider.ObjSRQ, -1)
	return nil
}
