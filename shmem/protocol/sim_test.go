package protocol_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/jiarun/jia/shmem/engine"
	"github.com/jiarun/jia/shmem/protocol"
)

// This file is a simulated cluster: every rank is a protocol.Machine driven
// by an engine.Executor over simulated page memory (which enforces what
// userfaultfd enforces: no install over a mapped page, no engine access to
// an unmapped page), threads run programs of reads, writes and
// synchronisation calls and fault like real threads, and the network
// delivers messages in random order. Reads are checked against a reference
// memory (see checker_test.go).

// ---- programs ---------------------------------------------------------------

type opKind uint8

const (
	opRead opKind = iota
	opWrite
	opLock
	opUnlock
	opBarrier
	opWait
	opSetCV
	opWaitCV
)

var opNames = [...]string{"Read", "Write", "Lock", "Unlock", "Barrier", "Wait", "SetCV", "WaitCV"}

type op struct {
	kind opKind
	v    int    // variable (Read, Write)
	val  uint64 // value (Write)
	id   int    // lock or condition variable
}

func (o op) String() string {
	switch o.kind {
	case opRead:
		return fmt.Sprintf("Read(v%d)", o.v)
	case opWrite:
		return fmt.Sprintf("Write(v%d=%#x)", o.v, o.val)
	case opBarrier, opWait:
		return opNames[o.kind]
	default:
		return fmt.Sprintf("%s(%d)", opNames[o.kind], o.id)
	}
}

// variable is a 1-, 2-, 4- or 8-byte location in a page.
type variable struct {
	page protocol.PageID
	off  int
	size int
}

// ---- simulated memory ------------------------------------------------------------

type simPage struct {
	data     []byte
	mapped   bool
	writable bool
}

type simMem struct {
	r     *simRank
	pages map[protocol.PageID]*simPage
}

func (mm *simMem) page(p protocol.PageID) *simPage {
	pg := mm.pages[p]
	if pg == nil {
		pg = &simPage{data: make([]byte, mm.r.s.pageSize)}
		mm.pages[p] = pg
	}
	return pg
}

func (mm *simMem) Page(p protocol.PageID) ([]byte, error) {
	pg := mm.page(p)
	if !pg.mapped {
		return nil, fmt.Errorf("engine touched unmapped page %d", p)
	}
	return pg.data, nil
}

// simReader is a simMem that also copies pages out (engine.PageReader),
// as the pager's memory does: the executor then reads runs of pages.
type simReader struct{ *simMem }

func (mm simReader) ReadPages(first protocol.PageID, dst []byte) error {
	for i := 0; i < len(dst)/mm.r.s.pageSize; i++ {
		b, err := mm.Page(first + protocol.PageID(i))
		if err != nil {
			return err
		}
		copy(dst[i*mm.r.s.pageSize:], b)
	}
	return nil
}

func (mm *simMem) Install(p protocol.PageID, data []byte, writable bool) error {
	pg := mm.page(p)
	if pg.mapped {
		return fmt.Errorf("install over mapped page %d (UFFDIO_COPY: EEXIST)", p)
	}
	if data == nil {
		clear(pg.data)
	} else {
		copy(pg.data, data)
	}
	pg.mapped, pg.writable = true, writable
	mm.r.wake(p)
	return nil
}

func (mm *simMem) Protect(pages []protocol.PageID) error {
	for _, p := range pages {
		pg := mm.page(p)
		if !pg.mapped {
			return fmt.Errorf("protect of unmapped page %d", p)
		}
		pg.writable = false
	}
	return nil
}

func (mm *simMem) Unprotect(p protocol.PageID) error {
	pg := mm.page(p)
	if !pg.mapped {
		return fmt.Errorf("unprotect of unmapped page %d", p)
	}
	pg.writable = true
	mm.r.wake(p)
	return nil
}

func (mm *simMem) Zap(pages []protocol.PageID) error {
	for _, p := range pages {
		pg := mm.page(p)
		pg.mapped, pg.writable = false, false
		// Poison: a later install must overwrite all of it.
		for i := range pg.data {
			pg.data[i] = 0xdd
		}
	}
	return nil
}

func (mm *simMem) Wake(p protocol.PageID) error {
	mm.r.wake(p)
	return nil
}

// ReadDirect reads pages of the home's memory, as a pager reads the
// memfd of a rank on its host: an unmapped home page reads as zeros (a
// hole). The home learns of the reads before its next release.
func (mm *simMem) ReadDirect(home int, pages []protocol.PageID, dst []byte) error {
	h := mm.r.s.ranks[home]
	ps := mm.r.s.pageSize
	for i, p := range pages {
		if h.shared == nil {
			h.shared = map[protocol.PageID]bool{}
		}
		h.shared[p] = true
		if pg := h.mem.pages[p]; pg != nil && pg.mapped {
			copy(dst[i*ps:], pg.data)
		} else {
			clear(dst[i*ps : (i+1)*ps])
		}
	}
	return nil
}

// ---- ranks and threads ------------------------------------------------------------

type threadState uint8

const (
	running threadState = iota
	faulted             // blocked in a fault on page
	woken               // woken after a fault: retries the access
	calling             // blocked in a call until its ActDone
	finished
)

type thread struct {
	r     *simRank
	idx   int
	ops   []op
	pc    int
	state threadState
	page  protocol.PageID
	call  protocol.EventKind
	id    int
}

type simRank struct {
	s       *sim
	rank    int
	m       *protocol.Machine
	x       *engine.Executor
	mem     *simMem
	threads []*thread
	shared  map[protocol.PageID]bool // homed here, read directly by others since the last release
	// Barriers met on the board that the machine has not stepped yet: it
	// steps them before its next event, as a pager learns of them lazily.
	pendingLocal int
	onBoard      *thread // waiting on the board
}

// releaseWritten steps EvWritten with the watched pages written since the
// last comparison, as a pager does before every Lock, Unlock and Barrier.
func (r *simRank) releaseWritten() {
	w, c := r.m.Watched(), r.m.WatchedCopies()
	if len(w)+len(c) == 0 {
		return
	}
	changed, err := r.x.Changed(w, nil)
	if err == nil {
		changed, err = r.x.Differ(c, changed)
	}
	if err != nil {
		r.s.failf("%v", err)
		return
	}
	if len(changed) > 0 {
		r.step(protocol.Event{Kind: protocol.EvWritten, Pages: changed})
	}
}

// loop queues the grant of a direct read, to be delivered like a message.
func (r *simRank) loop(msg *protocol.Message) {
	c := *msg
	r.s.net = append(r.s.net, &c)
}

// releaseShared steps EvShared with the pages read directly since the
// last release, as a pager does before every Lock, Unlock and Barrier.
func (r *simRank) releaseShared() {
	if len(r.shared) == 0 {
		return
	}
	pages := make([]protocol.PageID, 0, len(r.shared))
	for p := range r.shared {
		pages = append(pages, p)
	}
	slices.Sort(pages)
	clear(r.shared)
	r.step(protocol.Event{Kind: protocol.EvShared, Pages: pages})
}

func (r *simRank) wake(p protocol.PageID) {
	for _, t := range r.threads {
		if t.state == faulted && t.page == p {
			t.state = woken
		}
	}
}

func (r *simRank) done(op protocol.EventKind, id int) {
	for _, t := range r.threads {
		if t.state == calling && t.call == op && t.id == id {
			t.state = running
			t.pc++
			return
		}
	}
	r.s.failf("rank %d: Done(%v,%d) for no waiting call", r.rank, op, id)
}

func (r *simRank) Send(msg *protocol.Message) error {
	forwarded := msg.Kind == protocol.MsgPageReq || msg.Kind == protocol.MsgDiff
	if (msg.From != r.rank && !forwarded) || msg.To < 0 || msg.To >= len(r.s.ranks) || msg.To == r.rank {
		return fmt.Errorf("bad message %v", msg)
	}
	c := *msg
	c.Data = slices.Clone(msg.Data)
	r.s.net = append(r.s.net, &c)
	r.s.msgs++
	r.s.kinds[msg.Kind]++
	return nil
}

// step feeds an event to the rank's machine and executes the actions,
// after the barriers met on the board before it.
func (r *simRank) step(ev protocol.Event) {
	for r.pendingLocal > 0 && r.s.failed == "" {
		r.pendingLocal--
		r.stepNow(protocol.Event{Kind: protocol.EvLocalBarrier})
	}
	r.stepNow(ev)
}

func (r *simRank) stepNow(ev protocol.Event) {
	acts, err := r.m.Step(ev)
	r.s.tracef("r%d %v%s", r.rank, ev.Kind, evDetail(ev))
	for _, a := range acts {
		r.s.tracef("    r%d %v", r.rank, a)
		if a.Kind == protocol.ActInstall && a.Writable && ev.Msg != nil && ev.Msg.Kind == protocol.MsgGrant {
			r.s.grantRW++
		}
	}
	if err != nil {
		r.s.failf("%v", err)
		return
	}
	if err := r.x.Execute(acts); err != nil {
		r.s.failf("%v", err)
	}
}

func evDetail(ev protocol.Event) string {
	switch ev.Kind {
	case protocol.EvRecv:
		return " " + ev.Msg.String()
	case protocol.EvReadFault, protocol.EvWriteFault:
		return fmt.Sprintf(" page %d", ev.Page)
	case protocol.EvEvict:
		return fmt.Sprintf(" %d", ev.N)
	case protocol.EvAlloc:
		return fmt.Sprintf(" %d pages from %d", ev.N, ev.Page)
	case protocol.EvShared, protocol.EvWritten:
		return fmt.Sprintf(" %v", ev.Pages)
	default:
		return fmt.Sprintf(" %d", ev.ID)
	}
}

// ---- the simulation -------------------------------------------------------------------

type sim struct {
	rng      *rand.Rand
	pageSize int
	vars     []variable
	ref      []uint64 // the value of every variable under scope consistency
	ranks    []*simRank
	net      []*protocol.Message
	evict    float64 // probability of an eviction event per scheduling step
	lifo     bool    // deliver the newest messages first (most reordering)
	// The barrier board: ranks arrived at its current generation, and
	// whether one of them arrived dirty.
	board      bool
	boardCount int
	boardDirty bool
	boardMet   int // barriers met on the board with a clean outcome
	grantRW    int // pages installed writable from lock grants

	failed string
	trace  []string
	ntrace int
	msgs   int
	kinds  map[protocol.MsgKind]int // messages sent, by kind
	reads  int
	writes int
	steps  int
}

func (s *sim) failf(format string, args ...any) {
	if s.failed == "" {
		s.failed = fmt.Sprintf(format, args...)
	}
}

func (s *sim) tracef(format string, args ...any) {
	const keep = 300
	line := fmt.Sprintf(format, args...)
	if len(s.trace) < keep {
		s.trace = append(s.trace, line)
	} else {
		s.trace[s.ntrace%keep] = line
	}
	s.ntrace++
}

// lastTrace returns the last lines of the trace, oldest first.
func (s *sim) lastTrace() string {
	const keep = 300
	var b strings.Builder
	start := 0
	if s.ntrace > keep {
		start = s.ntrace % keep
	}
	for i := range s.trace {
		b.WriteString(s.trace[(start+i)%len(s.trace)])
		b.WriteByte('\n')
	}
	return b.String()
}

func (s *sim) read(v variable, data []byte) uint64 {
	var b [8]byte
	copy(b[:], data[v.off:v.off+v.size])
	return binary.LittleEndian.Uint64(b[:])
}

func (s *sim) write(v variable, data []byte, val uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], val)
	copy(data[v.off:v.off+v.size], b[:v.size])
}

func mask(size int) uint64 {
	if size == 8 {
		return ^uint64(0)
	}
	return 1<<(8*size) - 1
}

// run lets thread t make one step.
func (s *sim) run(t *thread) {
	r := t.r
	if t.pc >= len(t.ops) {
		t.state = finished
		return
	}
	o := t.ops[t.pc]
	switch o.kind {
	case opRead, opWrite:
		v := s.vars[o.v]
		pg := r.mem.page(v.page)
		write := o.kind == opWrite
		if !pg.mapped || (write && !pg.writable) {
			t.state, t.page = faulted, v.page
			kind := protocol.EvReadFault
			if write {
				kind = protocol.EvWriteFault
			}
			r.step(protocol.Event{Kind: kind, Page: v.page})
			return
		}
		t.state = running
		if write {
			s.write(v, pg.data, o.val)
			s.ref[o.v] = o.val & mask(v.size)
			s.writes++
			s.tracef("r%d.t%d write v%d(page %d+%d) = %#x", r.rank, t.idx, o.v, v.page, v.off, o.val&mask(v.size))
		} else {
			got := s.read(v, pg.data)
			s.reads++
			s.tracef("r%d.t%d read v%d(page %d+%d) = %#x", r.rank, t.idx, o.v, v.page, v.off, got)
			if want := s.ref[o.v]; got != want {
				s.failf("rank %d thread %d op %d %v: read %#x, scope consistency requires %#x", r.rank, t.idx, t.pc, o, got, want)
			}
		}
		t.pc++
	default:
		ev := protocol.Event{ID: o.id}
		switch o.kind {
		case opLock:
			ev.Kind = protocol.EvLock
		case opUnlock:
			ev.Kind = protocol.EvUnlock
		case opBarrier:
			ev.Kind = protocol.EvBarrier
		case opWait:
			ev.Kind = protocol.EvWait
		case opSetCV:
			ev.Kind = protocol.EvSetCV
		case opWaitCV:
			ev.Kind = protocol.EvWaitCV
		}
		if ev.Kind == protocol.EvBarrier || ev.Kind == protocol.EvWait {
			ev.ID = 0
		}
		if ev.Kind == protocol.EvBarrier && s.board {
			s.boardArrive(t)
			return
		}
		s.call(t, ev)
	}
}

// call makes thread t's call ev.
func (s *sim) call(t *thread, ev protocol.Event) {
	r := t.r
	if ev.Kind == protocol.EvLock || ev.Kind == protocol.EvUnlock || ev.Kind == protocol.EvBarrier {
		r.releaseShared()
		r.releaseWritten()
	}
	t.state, t.call, t.id = calling, ev.Kind, ev.ID
	r.step(ev)
}

// boardArrive is thread t's arrival at a barrier on the board, as package
// shmem's Barrier makes it: clean if the machine is BarrierQuiet and none
// of the rank's pages was read directly since the last release. A dirty
// rank takes the full barrier at once; the others wait for the last
// arrival, and take the full barrier too if anyone was dirty, or else go
// on, their machines stepping EvLocalBarrier before their next event.
func (s *sim) boardArrive(t *thread) {
	r := t.r
	clean := r.m.BarrierQuiet() && len(r.shared) == 0
	s.tracef("r%d board arrival (clean %v)", r.rank, clean)
	s.boardCount++
	s.boardDirty = s.boardDirty || !clean
	if clean {
		t.state, t.call = calling, protocol.EvLocalBarrier
		r.onBoard = t
	} else {
		s.call(t, protocol.Event{Kind: protocol.EvBarrier})
	}
	if s.boardCount < len(s.ranks) {
		return
	}
	dirty := s.boardDirty
	s.boardCount, s.boardDirty = 0, false
	if !dirty {
		s.boardMet++
	}
	for _, o := range s.ranks {
		w := o.onBoard
		if w == nil {
			continue
		}
		o.onBoard = nil
		if dirty {
			s.call(w, protocol.Event{Kind: protocol.EvBarrier})
			continue
		}
		o.pendingLocal++
		w.state = running
		w.pc++
	}
}

// loop runs the simulation to its end and reports whether every thread
// finished.
func (s *sim) loop(maxSteps int) bool {
	var runnable []*thread
	for s.steps = 0; s.steps < maxSteps && s.failed == ""; s.steps++ {
		runnable = runnable[:0]
		for _, r := range s.ranks {
			for _, t := range r.threads {
				if t.state == running || t.state == woken {
					runnable = append(runnable, t)
				}
			}
		}
		if len(runnable) == 0 && len(s.net) == 0 {
			var stuck []string
			for _, r := range s.ranks {
				for _, t := range r.threads {
					if t.state != finished {
						stuck = append(stuck, fmt.Sprintf("rank %d thread %d (state %d, page %d, op %d of %d: %v)",
							r.rank, t.idx, t.state, t.page, t.pc, len(t.ops), t.ops[min(t.pc, len(t.ops)-1)]))
					}
				}
			}
			if len(stuck) > 0 {
				s.failf("deadlock: %s", strings.Join(stuck, "; "))
				return false
			}
			return true
		}
		if s.evict > 0 && s.rng.Float64() < s.evict {
			r := s.ranks[s.rng.IntN(len(s.ranks))]
			r.step(protocol.Event{Kind: protocol.EvEvict, N: 1 + s.rng.IntN(2)})
			continue
		}
		if len(s.net) > 0 && (len(runnable) == 0 || s.rng.IntN(2) == 0) {
			i := s.rng.IntN(len(s.net))
			if s.lifo && s.rng.IntN(4) != 0 {
				i = len(s.net) - 1
			}
			msg := s.net[i]
			s.net = slices.Delete(s.net, i, i+1)
			s.ranks[msg.To].step(protocol.Event{Kind: protocol.EvRecv, Msg: msg})
			continue
		}
		s.run(runnable[s.rng.IntN(len(runnable))])
	}
	if s.failed == "" {
		s.failf("no end after %d steps", maxSteps)
	}
	return false
}
