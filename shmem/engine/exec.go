package engine

import (
	"fmt"

	"github.com/jiarun/jia/shmem/diff"
	"github.com/jiarun/jia/shmem/protocol"
)

// Memory is the page side of one rank, as the engine sees it.
type Memory interface {
	// Page returns the engine's own view of page p, through which it reads
	// and writes without faulting and regardless of the protection the
	// program sees. It is called only for pages that are mapped.
	Page(p protocol.PageID) ([]byte, error)
	// Install maps p with data (nil: zeros), writable or write-protected,
	// and wakes the threads faulted on it.
	Install(p protocol.PageID, data []byte, writable bool) error
	// Protect write-protects pages.
	Protect(pages []protocol.PageID) error
	// Unprotect makes p writable and wakes the threads faulted on it.
	Unprotect(p protocol.PageID) error
	// Zap unmaps pages: their next access faults as missing.
	Zap(pages []protocol.PageID) error
	// Wake wakes the threads faulted on p.
	Wake(p protocol.PageID) error
}

// Transport sends messages to other ranks.
type Transport interface {
	Send(msg *protocol.Message) error
}

// Executor carries out actions in order. It is not safe for concurrent use.
type Executor struct {
	Rank     int
	PageSize int
	Mem      Memory
	Net      Transport
	// Done is called for every ActDone: the call op(id) of the rank's
	// program completed.
	Done func(op protocol.EventKind, id int)

	twins map[protocol.PageID][]byte
	spare [][]byte
}

// Twins returns how many twins the executor holds.
func (x *Executor) Twins() int { return len(x.twins) }

func (x *Executor) newTwin() []byte {
	if n := len(x.spare); n > 0 {
		t := x.spare[n-1]
		x.spare = x.spare[:n-1]
		return t
	}
	return make([]byte, x.PageSize)
}

func (x *Executor) dropTwin(p protocol.PageID) {
	if t, ok := x.twins[p]; ok {
		delete(x.twins, p)
		x.spare = append(x.spare, t)
	}
}

func (x *Executor) setTwin(p protocol.PageID, src []byte) {
	if x.twins == nil {
		x.twins = make(map[protocol.PageID][]byte)
	}
	t, ok := x.twins[p]
	if !ok {
		t = x.newTwin()
		x.twins[p] = t
	}
	if src == nil {
		clear(t)
	} else {
		copy(t, src)
	}
}

// Execute carries out acts in order and stops at the first error.
func (x *Executor) Execute(acts []protocol.Action) error {
	for i := range acts {
		if err := x.do(&acts[i]); err != nil {
			return fmt.Errorf("shmem: rank %d: executing %v: %w", x.Rank, acts[i], err)
		}
	}
	return nil
}

func (x *Executor) do(a *protocol.Action) error {
	switch a.Kind {
	case protocol.ActSend:
		return x.Net.Send(a.Msg)
	case protocol.ActSendPages:
		data := make([]byte, 0, len(a.Msg.Pages)*x.PageSize)
		for _, p := range a.Msg.Pages {
			pg, err := x.Mem.Page(p)
			if err != nil {
				return err
			}
			data = append(data, pg...)
		}
		a.Msg.Data = data
		return x.Net.Send(a.Msg)
	case protocol.ActSendDiffs:
		var data []byte
		for _, p := range a.Msg.Pages {
			pg, err := x.Mem.Page(p)
			if err != nil {
				return err
			}
			t, ok := x.twins[p]
			if !ok {
				return fmt.Errorf("page %d has no twin", p)
			}
			data = diff.AppendPage(data, uint32(p), pg, t)
			x.dropTwin(p)
		}
		a.Msg.Data = data
		return x.Net.Send(a.Msg)
	case protocol.ActApplyDiffs:
		err := diff.ApplyBatch(a.Msg.Data, x.PageSize, func(n uint32) ([]byte, error) {
			return x.Mem.Page(protocol.PageID(n))
		})
		if err != nil {
			return err
		}
		// A home page with a twin (see protocol.ActMakeTwin at a home) gets
		// the diffs in its twin too, so that its own diff later carries only
		// its own writes.
		r := diff.NewReader(a.Msg.Data)
		for r.Next() {
			if t, ok := x.twins[protocol.PageID(r.Page())]; ok {
				if err := diff.Apply(t, r.Runs()); err != nil {
					return err
				}
			}
		}
		return r.Err()
	case protocol.ActInstall:
		if a.Data != nil && len(a.Data) != x.PageSize {
			return fmt.Errorf("install of %d bytes", len(a.Data))
		}
		if a.Twin {
			x.setTwin(a.Page, a.Data)
		}
		return x.Mem.Install(a.Page, a.Data, a.Writable)
	case protocol.ActMakeTwin:
		pg, err := x.Mem.Page(a.Page)
		if err != nil {
			return err
		}
		x.setTwin(a.Page, pg)
		return nil
	case protocol.ActDropTwin:
		x.dropTwin(a.Page)
		return nil
	case protocol.ActUnprotect:
		return x.Mem.Unprotect(a.Page)
	case protocol.ActProtect:
		return x.Mem.Protect(a.Pages)
	case protocol.ActZap:
		for _, p := range a.Pages {
			if _, ok := x.twins[p]; ok {
				// Its writes would be lost: the protocol must send or drop
				// the twin first.
				return fmt.Errorf("zap of page %d, which still has a twin", p)
			}
		}
		return x.Mem.Zap(a.Pages)
	case protocol.ActWake:
		return x.Mem.Wake(a.Page)
	case protocol.ActDone:
		if x.Done != nil {
			x.Done(a.Op, a.ID)
		}
		return nil
	default:
		return fmt.Errorf("unknown action kind %d", a.Kind)
	}
}
