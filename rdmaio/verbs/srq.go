//go:build verbs

package verbs

/*
#include "jia_verbs.h"
*/
import "C"

import (
	"fmt"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

// srq is a shared receive queue.
type srq struct {
	pd    *pd
	s     *C.struct_ibv_srq
	depth int
	users int // QPs using it, guarded by dev.mu
	rp    *recvPost
}

// CreateSRQ creates a shared receive queue.
func (p *pd) CreateSRQ(attr rdmaio.SRQAttr) (rdmaio.SRQ, error) {
	d := p.dev
	attr, err := provider.FillSRQ(attr, DefaultMaxRecvWR, DefaultMaxSGE, d.maxSRQWR, d.maxSRQSGE)
	if err != nil {
		return nil, d.errf("create srq: %w", err)
	}
	depth, sges := attr.MaxWR, attr.MaxSGE
	if err := p.begin("create srq"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	c, err := C.jia_create_srq(p.p, C.uint32_t(depth), C.uint32_t(sges))
	if c == nil {
		return nil, d.errf("create srq: %w", errnoOf(err))
	}
	rq := newRecvQueue(depth, sges)
	s := &srq{pd: p, s: c, depth: depth, rp: &recvPost{rq: rq, wq: &workQueue{recv: rq}}}
	if s.rp.key, err = d.wqs.Insert(s.rp.wq); err == nil {
		err = s.rp.init(sges)
	}
	if err == nil {
		err = p.use.Add(provider.ObjSRQ, 1)
	}
	if err != nil {
		s.release()
		return nil, d.errf("create srq: %w", err)
	}
	p.srqs[s] = struct{}{}
	return s, nil
}

// PostRecv posts receive work requests to the SRQ.
func (s *srq) PostRecv(wrs []rdmaio.RecvWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	n, err := s.rp.post(nil, s.s, wrs)
	if err != nil {
		return n, s.pd.dev.errf("srq post recv: work request %d (id %d): %w", n, wrs[n].ID, err)
	}
	return n, nil
}

// Close destroys the SRQ; it fails with ErrInUse while QPs use it.
func (s *srq) Close() error {
	p := s.pd
	if err := p.begin("close srq"); err != nil {
		return err
	}
	defer p.dev.mu.Unlock()
	if _, ok := p.srqs[s]; !ok {
		return p.dev.errf("close srq: %w", rdmaio.ErrClosed)
	}
	if s.users > 0 {
		return p.dev.errf("close srq: used by %d QPs: %w", s.users, rdmaio.ErrInUse)
	}
	return s.destroy()
}

// destroy destroys the SRQ. dev.mu is held.
func (s *srq) destroy() error {
	p := s.pd
	delete(p.srqs, s)
	p.use.Add(provider.ObjSRQ, -1)
	s.rp.rq.mu.Lock()
	s.rp.closed = true
	s.rp.rq.mu.Unlock()
	if err := s.release(); err != nil {
		return p.dev.errf("close srq: %w", err)
	}
	return nil
}

func (s *srq) release() error {
	var err error
	if s.s != nil {
		if rc, e := C.ibv_destroy_srq(s.s); rc != 0 {
			err = fmt.Errorf("ibv_destroy_srq: %w", rcErrno(rc, e))
		}
		s.s = nil
	}
	if s.rp.key != 0 {
		s.pd.dev.wqs.Remove(s.rp.key)
		s.rp.key = 0
	}
	s.rp.free()
	return err
}
