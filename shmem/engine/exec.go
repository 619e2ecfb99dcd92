package engine

import (
	"bytes"
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
	// Send sends msg. It must not keep msg.Data after it returns: the
	// executor reuses the buffer of the page grants and diffs it fills.
	Send(msg *protocol.Message) error
}

// PageReader is a Memory that can also copy pages out without mapping
// them in the engine (pread of a memfd, for example), which is cheaper
// where mapping a page costs more than copying it.
type PageReader interface {
	// ReadPages copies len(dst)/PageSize consecutive pages from first
	// into dst. It is called only for pages that are mapped.
	ReadPages(first protocol.PageID, dst []byte) error
}

// PageWriter is a Memory that can also write bytes into a page without
// mapping it in the engine (pwrite of a memfd): cheaper for a few bytes
// where mapping a page costs more than a system call.
type PageWriter interface {
	// WritePage writes b at offset off of page p, which is mapped.
	WritePage(p protocol.PageID, off int, b []byte) error
}

// sparseDiff is the most bytes of a page's diff that the executor writes
// through a PageWriter rather than into the page.
const sparseDiff = 1024

// DirectReader is a Memory that can read the pages of other ranks (on the
// same host) directly, for protocol.ActReadDirect.
type DirectReader interface {
	// ReadDirect marks pages as read at their home (which must learn it
	// before its next release: protocol.EvShared) and then copies the
	// home's copies of them, one after the other, into dst.
	ReadDirect(home int, pages []protocol.PageID, dst []byte) error
}

// RunInstaller is a Memory that can install consecutive pages at once
// (one system call instead of one per page).
type RunInstaller interface {
	// InstallRun maps len(data)/PageSize consecutive pages from first with
	// data, writable or write-protected, and wakes the threads faulted on
	// them.
	InstallRun(first protocol.PageID, data []byte, writable bool) error
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
	// Loop is called with the grant of every ActReadDirect, filled in: it
	// must be stepped as an EvRecv after the current actions, and then
	// handed back with Recycle.
	Loop func(msg *protocol.Message)

	twins    map[protocol.PageID][]byte
	spare    [][]byte
	buf      []byte            // the data of the grant or diff batch being sent
	scratch  []byte            // one page read out of memory
	run      []byte            // consecutive pages read out of memory (twins, comparisons)
	runPages []protocol.PageID // their numbers (twinRun)
	zeros    []byte            // zero pages to install
	direct   [][]byte          // buffers of direct reads, for reuse
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

// applyDiffs applies a diff batch to this rank's pages: a page's sparse
// diff through a PageWriter if the memory is one, the rest in the pages.
// A corrupt batch changes no page.
func (x *Executor) applyDiffs(batch []byte) error {
	pw, ok := x.Mem.(PageWriter)
	if !ok {
		return diff.ApplyBatch(batch, x.PageSize, func(n uint32) ([]byte, error) {
			return x.Mem.Page(protocol.PageID(n))
		})
	}
	r := diff.NewReader(batch)
	for r.Next() {
		if err := diff.Walk(r.Runs(), x.PageSize, func(diff.Run) error { return nil }); err != nil {
			return fmt.Errorf("page %d: %w", r.Page(), err)
		}
		if _, err := x.Mem.Page(protocol.PageID(r.Page())); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	r = diff.NewReader(batch)
	for r.Next() {
		p := protocol.PageID(r.Page())
		if len(r.Runs()) > sparseDiff {
			pg, err := x.Mem.Page(p)
			if err != nil {
				return err
			}
			if err := diff.Apply(pg, r.Runs()); err != nil {
				return fmt.Errorf("page %d: %w", p, err)
			}
			continue
		}
		err := diff.Walk(r.Runs(), x.PageSize, func(run diff.Run) error { return pw.WritePage(p, run.Off, run.Data) })
		if err != nil {
			return fmt.Errorf("page %d: %w", p, err)
		}
	}
	return r.Err()
}

// page returns the current contents of page p: a copy in x.scratch when
// the memory reads pages without mapping them, else the page itself.
func (x *Executor) page(p protocol.PageID) ([]byte, error) {
	pr, ok := x.Mem.(PageReader)
	if !ok {
		return x.Mem.Page(p)
	}
	if len(x.scratch) != x.PageSize {
		x.scratch = make([]byte, x.PageSize)
	}
	if err := pr.ReadPages(p, x.scratch); err != nil {
		return nil, err
	}
	return x.scratch, nil
}

// maxRun bounds the consecutive pages read out of memory at once for
// twins and comparisons.
const maxRun = 64

// readRun reads the run of consecutive pages that starts pages, at most
// maxRun of them, into x.run and returns how many it read.
func (x *Executor) readRun(pr PageReader, pages []protocol.PageID) (int, error) {
	n := 1
	for n < len(pages) && n < maxRun && pages[n] == pages[0]+protocol.PageID(n) {
		n++
	}
	if len(x.run) < n*x.PageSize {
		x.run = make([]byte, maxRun*x.PageSize)
	}
	return n, pr.ReadPages(pages[0], x.run[:n*x.PageSize])
}

// Changed compares each of pages, watched home pages
// (protocol.Config.Watch), with its twin, appends those that differ to out
// and makes their current contents their twins: for the EvWritten that
// the engine steps before a release. The contents are copied before they
// are compared, so that a write made meanwhile is found the next time if
// not this one; a memory that reads pages out (PageReader) has runs of
// consecutive pages copied at once, without mapping them in the engine.
func (x *Executor) Changed(pages []protocol.PageID, out []protocol.PageID) ([]protocol.PageID, error) {
	pr, ok := x.Mem.(PageReader)
	for i := 0; i < len(pages); {
		if !ok {
			var err error
			if out, err = x.changed(pages[i], out); err != nil {
				return out, err
			}
			i++
			continue
		}
		n, err := x.readRun(pr, pages[i:])
		if err != nil {
			return out, fmt.Errorf("shmem: rank %d: watched page %d: %w", x.Rank, pages[i], err)
		}
		for k, p := range pages[i : i+n] {
			t, ok := x.twins[p]
			if !ok {
				return out, fmt.Errorf("shmem: rank %d: watched page %d has no twin", x.Rank, p)
			}
			now := x.run[k*x.PageSize : (k+1)*x.PageSize]
			if !bytes.Equal(now, t) {
				copy(t, now)
				out = append(out, p)
			}
		}
		i += n
	}
	return out, nil
}

// changed compares watched page p with its twin through the engine's view
// of it (see Changed).
func (x *Executor) changed(p protocol.PageID, out []protocol.PageID) ([]protocol.PageID, error) {
	t, pg, err := x.twinAndPage(p, "watched page")
	if err != nil {
		return out, err
	}
	now := x.newTwin()
	copy(now, pg)
	if bytes.Equal(now, t) {
		x.spare = append(x.spare, now)
		return out, nil
	}
	x.twins[p] = now
	x.spare = append(x.spare, t)
	return append(out, p), nil
}

// twinAndPage returns the twin of page p and the page as memory holds it;
// what names the page in errors.
func (x *Executor) twinAndPage(p protocol.PageID, what string) (twin, page []byte, err error) {
	twin, ok := x.twins[p]
	if !ok {
		return nil, nil, fmt.Errorf("shmem: rank %d: %s %d has no twin", x.Rank, what, p)
	}
	if page, err = x.Mem.Page(p); err != nil {
		return nil, nil, fmt.Errorf("shmem: rank %d: %s %d: %w", x.Rank, what, p, err)
	}
	return twin, page, nil
}

// Differ compares each of pages, watched copies of pages homed elsewhere
// (protocol.Machine.WatchedCopies), with its twin and appends those that
// differ to out. The twins stay: they are the base of the pages' diffs.
func (x *Executor) Differ(pages []protocol.PageID, out []protocol.PageID) ([]protocol.PageID, error) {
	for _, p := range pages {
		t, pg, err := x.twinAndPage(p, "watched copy of page")
		if err != nil {
			return out, err
		}
		if !bytes.Equal(pg, t) {
			out = append(out, p)
		}
	}
	return out, nil
}

// directBuf returns a buffer of n bytes for the data of a direct read,
// reusing those handed back: memory the process has not touched yet costs
// a page fault per page when the kernel copies into it.
func (x *Executor) directBuf(n int) []byte {
	for i := len(x.direct) - 1; i >= 0; i-- {
		if b := x.direct[i]; cap(b) >= n {
			x.direct = append(x.direct[:i], x.direct[i+1:]...)
			return b[:n]
		}
	}
	return make([]byte, n)
}

// Recycle takes back the data of a grant from Loop once it was stepped.
func (x *Executor) Recycle(msg *protocol.Message) {
	if cap(msg.Data) > 0 && len(x.direct) < maxDirectBufs {
		x.direct = append(x.direct, msg.Data[:0])
	}
	msg.Data = nil
}

// maxDirectBufs bounds the buffers of direct reads kept for reuse.
const maxDirectBufs = 8

// readPages returns the contents of pages, one after the other, in x.buf.
func (x *Executor) readPages(pages []protocol.PageID) ([]byte, error) {
	n := len(pages) * x.PageSize
	if cap(x.buf) < n {
		x.buf = make([]byte, n)
	}
	data := x.buf[:n]
	pr, ok := x.Mem.(PageReader)
	for i := 0; i < len(pages); {
		j := i + 1
		if ok {
			for j < len(pages) && pages[j] == pages[j-1]+1 {
				j++
			}
			if err := pr.ReadPages(pages[i], data[i*x.PageSize:j*x.PageSize]); err != nil {
				return nil, err
			}
		} else {
			pg, err := x.Mem.Page(pages[i])
			if err != nil {
				return nil, err
			}
			copy(data[i*x.PageSize:], pg)
		}
		i = j
	}
	return data, nil
}

// Execute carries out acts in order and stops at the first error.
func (x *Executor) Execute(acts []protocol.Action) error {
	for i := 0; i < len(acts); i++ {
		if n := x.installRun(acts[i:]); n > 1 {
			i += n - 1
			continue
		}
		if n := x.twinRun(acts[i:]); n > 1 {
			i += n - 1
			continue
		}
		if err := x.do(&acts[i]); err != nil {
			return fmt.Errorf("shmem: rank %d: executing %v: %w", x.Rank, acts[i], err)
		}
	}
	return nil
}

// installRun installs at once the pages of the ActInstall actions that
// start acts, if there are several, for consecutive pages whose data lie
// one after the other (the pages of one grant) or are all zeros, all with
// a twin or all without, and returns how many it installed; 0 if acts[0]
// must be carried out alone.
func (x *Executor) installRun(acts []protocol.Action) int {
	ri, ok := x.Mem.(RunInstaller)
	a := &acts[0]
	if !ok || a.Kind != protocol.ActInstall || a.Data != nil && len(a.Data) != x.PageSize {
		return 0
	}
	zero := a.Data == nil
	n := 1
	for n < len(acts) {
		b := &acts[n]
		if b.Kind != protocol.ActInstall || b.Twin != a.Twin || b.Writable != a.Writable || b.Page != a.Page+protocol.PageID(n) {
			break
		}
		if zero {
			if b.Data != nil {
				break
			}
		} else if len(b.Data) != x.PageSize || cap(a.Data) < (n+1)*x.PageSize || &a.Data[:cap(a.Data)][n*x.PageSize] != &b.Data[0] {
			break
		}
		n++
	}
	if n < 2 {
		return 0
	}
	var data []byte
	if zero {
		if len(x.zeros) < n*x.PageSize {
			x.zeros = make([]byte, n*x.PageSize)
		}
		data = x.zeros[:n*x.PageSize]
	} else {
		data = a.Data[: n*x.PageSize : n*x.PageSize]
	}
	if a.Twin {
		// Before the pages become writable, as for ActInstall.
		for i := range n {
			x.setTwin(a.Page+protocol.PageID(i), data[i*x.PageSize:(i+1)*x.PageSize])
		}
	}
	if err := ri.InstallRun(a.Page, data, a.Writable); err != nil {
		return 0 // install them one by one, which reports the error
	}
	return n
}

// twinRun makes at once the twins of the ActMakeTwin actions that start
// acts, if there are several, for consecutive pages, when the memory reads
// pages out (one read instead of one per page), and returns how many it
// made; 0 if acts[0] must be carried out alone.
func (x *Executor) twinRun(acts []protocol.Action) int {
	pr, ok := x.Mem.(PageReader)
	if !ok || acts[0].Kind != protocol.ActMakeTwin {
		return 0
	}
	pages := x.runPages[:0]
	for _, a := range acts {
		if a.Kind != protocol.ActMakeTwin || len(pages) == maxRun || len(pages) > 0 && a.Page != pages[0]+protocol.PageID(len(pages)) {
			break
		}
		pages = append(pages, a.Page)
	}
	x.runPages = pages
	if len(pages) < 2 {
		return 0
	}
	n, err := x.readRun(pr, pages)
	if err != nil {
		return 0 // one by one, which reports the error
	}
	for i, p := range pages[:n] {
		x.setTwin(p, x.run[i*x.PageSize:(i+1)*x.PageSize])
	}
	return n
}

func (x *Executor) do(a *protocol.Action) error {
	switch a.Kind {
	case protocol.ActSend:
		return x.Net.Send(a.Msg)
	case protocol.ActSendPages:
		data, err := x.readPages(a.Msg.Pages)
		if err != nil {
			return err
		}
		if a.Twin {
			// The pages with a twin go as their twins (see
			// protocol.ActSendPages).
			for i, p := range a.Msg.Pages {
				if t, ok := x.twins[p]; ok {
					copy(data[i*x.PageSize:(i+1)*x.PageSize], t)
				}
			}
		}
		a.Msg.Data = data
		return x.Net.Send(a.Msg)
	case protocol.ActSendDiffs:
		data := x.buf[:0]
		defer func() { x.buf = data[:0] }()
		for _, p := range a.Msg.Pages {
			pg, err := x.page(p)
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
		if err := x.applyDiffs(a.Msg.Data); err != nil {
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
		if pr, ok := x.Mem.(PageReader); ok {
			if x.twins == nil {
				x.twins = make(map[protocol.PageID][]byte)
			}
			t, had := x.twins[a.Page]
			if !had {
				t = x.newTwin()
			}
			if err := pr.ReadPages(a.Page, t); err != nil {
				if !had {
					x.spare = append(x.spare, t)
				}
				return err
			}
			x.twins[a.Page] = t
			return nil
		}
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
	case protocol.ActReadDirect:
		dr, ok := x.Mem.(DirectReader)
		if !ok || x.Loop == nil {
			return fmt.Errorf("this memory cannot read pages of rank %d directly", a.Msg.From)
		}
		data := x.directBuf(len(a.Msg.Pages) * x.PageSize)
		if err := dr.ReadDirect(a.Msg.From, a.Msg.Pages, data); err != nil {
			x.Recycle(&protocol.Message{Data: data})
			return err
		}
		a.Msg.Data = data
		x.Loop(a.Msg)
		return nil
	case protocol.ActDone:
		if x.Done != nil {
			x.Done(a.Op, a.ID)
		}
		return nil
	default:
		return fmt.Errorf("unknown action kind %d", a.Kind)
	}
}
