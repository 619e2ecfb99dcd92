package pager

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/jiarun/jia/shmem/internal/ctl"
	"github.com/jiarun/jia/shmem/protocol"
)

// Collective calls (Alloc, Free) are agreed among the pagers: every pager
// does its local part, then sends its arrival — what its program asked for,
// and whether the local part worked — to every other pager, on the same
// ordered connections as the protocol's messages. A call completes when a
// pager holds every rank's arrival: then every rank has done its local
// part, and every message another rank sent this pager before arriving
// has been delivered (frames between two ranks keep their order), so:
//
//   - after Alloc, every machine knows the region before any rank's program
//     can touch it (a page request never reaches a home that has not
//     allocated the page);
//   - at Free, no request or diff for the region is still on its way here.
//
// Every pager sees the same arrivals, so all reach the same verdict: the
// call succeeds everywhere, or fails everywhere with an error naming the
// rank that differed (a mismatched collective call) or failed.

// arrival is one rank's part of a collective call.
type arrival struct {
	Seq       uint64
	Op        string // "Alloc" or "Free"
	First     uint32
	Pages     int
	Size      int // Alloc: the bytes asked for
	Placement protocol.Placement
	Err       string `json:",omitempty"` // the local part failed
	// Pid and FD name the region's memfd in the pager (Alloc), which the
	// pagers of the host open for direct reads.
	Pid int `json:",omitempty"`
	FD  int `json:",omitempty"`
}

// call names the call for error messages.
func (a *arrival) call(ps int) string {
	if a.Op == "Free" {
		return fmt.Sprintf("Free(region at page %d)", a.First)
	}
	return fmt.Sprintf("Alloc(%d bytes, %s)", a.Size, placementString(a.Placement))
}

func placementString(p protocol.Placement) string {
	block := max(p.Block, 1)
	switch p.Kind {
	case protocol.BlockCyclic:
		return fmt.Sprintf("block-cyclic by %d pages from rank %d", block, p.Start)
	case protocol.OnRank:
		return fmt.Sprintf("all on rank %d", p.Start)
	case protocol.Explicit:
		return fmt.Sprintf("explicit homes %v by %d pages", p.Homes, block)
	}
	return fmt.Sprintf("placement kind %d", p.Kind)
}

func sameCall(a, b *arrival) bool {
	return a.Op == b.Op && a.First == b.First && a.Pages == b.Pages && a.Size == b.Size &&
		a.Placement.Kind == b.Placement.Kind && max(a.Placement.Block, 1) == max(b.Placement.Block, 1) &&
		a.Placement.Start == b.Placement.Start && slices.Equal(a.Placement.Homes, b.Placement.Homes)
}

// collective is this rank's collective call in progress.
type collective struct {
	a   *arrival
	err error   // why the local part failed
	req uint64  // the program's request
	reg *region // Alloc: the region set up here; Free: the region to free
}

func (p *pager) onAlloc(f ctl.Frame, fd int) error {
	if p.coll != nil {
		if fd >= 0 {
			closeFD(fd)
		}
		return errors.New("Alloc while another collective call is in progress")
	}
	ps := p.hello.PageSize
	// Every ringer of the bell mapped its file during the DSM's start,
	// which is over.
	p.bell.Unlink()
	var req ctl.AllocArgs
	if err := json.Unmarshal(f.Data, &req); err != nil {
		return fmt.Errorf("Alloc arguments: %w", err)
	}
	pl := req.Placement
	first, n := f.A, f.B
	a := &arrival{Seq: p.collSeq, Op: "Alloc", First: uint32(first), Pages: int(n), Size: req.Size, Placement: pl}
	c := &collective{a: a, req: f.Req}
	fail := func(err error) {
		c.err = fmt.Errorf("%s: %s: %w", p.prefix(), a.call(ps), err)
		a.Err = c.err.Error()
	}
	switch {
	case fd < 0:
		fail(errors.New("no memfd came with the call"))
	case first < 0 || n <= 0 || uintptr(first+n)*uintptr(ps) > p.span:
		closeFD(fd)
		fail(fmt.Errorf("pages %d+%d outside the DSM range", first, n))
	default:
		view, err := mapView(fd, int(n)*ps)
		if err != nil {
			closeFD(fd)
			fail(err)
			break
		}
		reg := &region{first: protocol.PageID(first), n: int(n), addr: p.base + uintptr(first)*uintptr(ps),
			memfd: fd, view: view, seq: a.Seq}
		a.Pid, a.FD = os.Getpid(), fd
		p.mem.add(reg)
		err = p.step(protocol.Event{Kind: protocol.EvAlloc, Page: reg.first, N: reg.n, Placement: pl})
		if err != nil {
			p.mem.remove(reg)
			reg.release()
			if !isProtocolError(err) || errors.Is(err, protocol.ErrProtocol) {
				return err
			}
			var pe *protocol.Error
			errors.As(err, &pe)
			fail(pe.Err)
			break
		}
		c.reg = reg
	}
	return p.startColl(c)
}

func (p *pager) onFree(f ctl.Frame) error {
	if p.coll != nil {
		return errors.New("Free while another collective call is in progress")
	}
	first := protocol.PageID(f.A)
	a := &arrival{Seq: p.collSeq, Op: "Free", First: uint32(first)}
	c := &collective{a: a, req: f.Req}
	for _, r := range p.mem.regions {
		if r.first == first {
			c.reg, a.Pages = r, r.n
		}
	}
	if c.reg == nil {
		c.err = fmt.Errorf("%s: %s: %w: no live region starts there", p.prefix(), a.call(p.hello.PageSize), protocol.ErrNoRegion)
		a.Err = c.err.Error()
	}
	return p.startColl(c)
}

// startColl records this rank's arrival and sends it to every other rank.
func (p *pager) startColl(c *collective) error {
	p.coll = c
	p.collSeq++
	if err := p.arrive(p.rank, c.a); err != nil {
		return err
	}
	b, err := json.Marshal(c.a)
	if err != nil {
		return err
	}
	frame := append([]byte{frameArrival}, b...)
	for r := 0; r < p.size; r++ {
		if r == p.rank {
			continue
		}
		if err := p.sendFrame(r, frame); err != nil {
			return fmt.Errorf("%s: collective call #%d: %w", p.prefix(), c.a.Seq+1, err)
		}
	}
	return p.checkColl()
}

func (p *pager) arrive(from int, a *arrival) error {
	if a.Seq < p.collSeq && (p.coll == nil || a.Seq != p.coll.a.Seq) {
		return fmt.Errorf("arrival of rank %d at collective call #%d, which is over", from, a.Seq)
	}
	arr := p.arrivals[a.Seq]
	if arr == nil {
		arr = make([]*arrival, p.size)
		p.arrivals[a.Seq] = arr
	}
	if arr[from] != nil {
		return fmt.Errorf("rank %d arrived twice at collective call #%d", from, a.Seq)
	}
	arr[from] = a
	return nil
}

func (p *pager) onArrival(from int, a *arrival) error {
	if err := p.arrive(from, a); err != nil {
		return err
	}
	return p.checkColl()
}

// checkColl completes the collective call in progress once every rank
// arrived.
func (p *pager) checkColl() error {
	c := p.coll
	if c == nil {
		return nil
	}
	arr := p.arrivals[c.a.Seq]
	for _, a := range arr {
		if a == nil {
			return nil
		}
	}
	delete(p.arrivals, c.a.Seq)
	p.coll = nil
	ps := p.hello.PageSize
	err := c.err
	if err == nil {
		for r, a := range arr {
			if !sameCall(a, c.a) {
				err = fmt.Errorf("%s: %s (collective call #%d): %w: rank %d called %s", p.prefix(), c.a.call(ps), c.a.Seq+1, ctl.ErrMismatch, r, a.call(ps))
				break
			}
			if a.Err != "" {
				err = fmt.Errorf("%s: %s (collective call #%d) failed on rank %d: %s", p.prefix(), c.a.call(ps), c.a.Seq+1, r, a.Err)
				break
			}
		}
	}
	switch {
	case c.a.Op == "Alloc" && err == nil:
		p.all = append(p.all, c.reg)
		p.openPeerRegion(c.reg, arr)
	case c.a.Op == "Alloc" && c.reg != nil:
		// Undo: nobody completed the call, so nobody touched the region.
		if serr := p.step(protocol.Event{Kind: protocol.EvFree, Page: c.reg.first}); serr != nil {
			return serr
		}
		p.mem.remove(c.reg)
		c.reg.release()
	case c.a.Op == "Free" && err == nil:
		if serr := p.step(protocol.Event{Kind: protocol.EvFree, Page: c.reg.first}); serr != nil {
			return serr
		}
		if p.bits != nil {
			// Reads of the region since the last collection need no
			// notices now: the bits would say for ever that its pages
			// are shared, and keep every barrier off the board.
			p.sharedBuf = p.bits.collect(c.reg.first, c.reg.n, p.sharedBuf[:0])
		}
		c.reg.freed = true
		p.mem.remove(c.reg)
		c.reg.release()
	}
	f := ctl.Frame{Type: ctl.TDone, Req: c.req}
	if err != nil {
		f.A, f.Data = ctl.Code(err), []byte(err.Error())
	}
	p.answer(f)
	return nil
}
