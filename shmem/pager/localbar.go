package pager

import (
	"encoding/json"
	"fmt"

	"github.com/jiarun/jia/shmem/internal/callq"
	"github.com/jiarun/jia/shmem/internal/ctl"
	"github.com/jiarun/jia/shmem/protocol"
)

// Local barriers (package board): when every rank of the job runs on this
// host, the programs meet at a barrier on the host's barrier board, and
// only when one of them has something to publish do they all call their
// pagers for the full barrier. A pager learns of the barriers met on the
// board lazily, and steps each as protocol.EvLocalBarrier in its place in
// its program's order:
//
//   - the program records, at each arrival, the board's generation and
//     its call queue's head (board.SetSlot): once every call before that
//     head is handled and the board's generation is complete with a clean
//     outcome, the barrier is stepped before anything else (a fault, a
//     message, a later call);
//   - a full Barrier call carries its generation + 1, and a call made
//     after a barrier met on the board is preceded in the queue by an
//     announcement (callq.Client.Announce: EvLocalBarrier with the
//     generation), so that every barrier is stepped before the calls that
//     follow it even if the slot was overwritten by a later arrival;
//   - every generation before the one of the slot was stepped or met on
//     the board: a full barrier among them was a call before the slot's
//     head, handled already.
//
// The other pagers' messages sent after their own step may arrive before
// this one's: the machine keeps those that depend on it for later (a
// barrier arrival at the manager, requests for pages whose home moves)
// and steps them after it.

// catchUp steps the barriers met on the board that this pager has not
// stepped, once every call before them is handled (the calls before ring
// position handled are).
func (p *pager) catchUp(handled uint64) error {
	if p.board == nil {
		return nil
	}
	gen, head, ok := p.board.Slot(p.rank)
	if !ok || int32(uint32(handled)-head) < 0 {
		return nil
	}
	upto := gen
	if g, dirty := p.board.Barrier().Gen(); g != gen && !dirty {
		upto = gen + 1
	}
	return p.stepLocal(upto)
}

// stepLocal steps the barriers met on the board up to generation upto
// (exclusive).
func (p *pager) stepLocal(upto uint32) error {
	for int32(upto-p.boardGen) > 0 {
		if err := p.step(protocol.Event{Kind: protocol.EvLocalBarrier}); err != nil {
			return fmt.Errorf("barrier %d, met on the barrier board: %w", p.boardGen, err)
		}
		p.boardGen++
	}
	return nil
}

// answerStats answers a request for the statistics, made after the
// program's calls before ring position f.A, which are handled, and after
// the barriers it met on the board before it.
func (p *pager) answerStats(f ctl.Frame) {
	b, _ := json.Marshal(p.m.Stats())
	p.answer(ctl.Frame{Type: ctl.TStatsOK, Req: f.Req, Data: b})
}

// answerStatsWaiting answers the requests for the statistics whose calls
// before them are handled now.
func (p *pager) answerStatsWaiting() error {
	keep := p.statsWait[:0]
	for _, f := range p.statsWait {
		if p.handled < uint64(f.A) {
			keep = append(keep, f)
			continue
		}
		if err := p.catchUp(p.handled); err != nil {
			return err
		}
		p.answerStats(f)
	}
	clear(p.statsWait[len(keep):])
	p.statsWait = keep
	return nil
}

// boardCall handles a call from the call queue: the barriers met on the
// board before it first.
func (p *pager) boardCall(c callq.Call) error {
	if err := p.catchUp(c.Pos); err != nil {
		return err
	}
	kind := protocol.EventKind(c.Kind &^ callq.Claimed)
	switch {
	case kind == protocol.EvLocalBarrier && c.Slot == callq.NoSlot:
		if p.board == nil {
			return fmt.Errorf("barrier %d met on a barrier board this pager has not mapped", c.ID)
		}
		return p.stepLocal(uint32(c.ID) + 1)
	case kind == protocol.EvBarrier && c.ID > 0 && p.board != nil:
		gen := uint32(c.ID - 1)
		if err := p.stepLocal(gen); err != nil {
			return err
		}
		if gen != p.boardGen {
			return fmt.Errorf("barrier of generation %d after generation %d", gen, p.boardGen-1)
		}
		p.boardGen = gen + 1
	}
	return p.onCall(protocol.EventKind(c.Kind), c.ID, ringReq|uint64(c.Slot))
}
