// Package pager is the DSM pager: the process that serves a rank's page
// faults and runs its side of the coherence protocol, so that fault service
// never needs one of the rank's Go Ps (package shmem explains why).
//
// A rank starts its pager at the DSM's start by re-executing its own binary
// with the environment variable ctl.Env set; package shmem's init sees it
// and calls Main before any code of the program's main package runs. The
// pager gets the rank's userfaultfd, and later the memfd of every region,
// over a Unix socket pair on descriptor 3. It runs a protocol.Machine and
// an engine.Executor whose Memory acts on the program's memory from outside
// (UFFDIO_COPY, UFFDIO_WRITEPROTECT, fallocate PUNCH_HOLE) and whose
// Transport reaches the pagers of the same host through package rdmanet
// and the others through package tcpnet. The program's synchronisation
// calls arrive through a call queue in shared memory (package callq) and
// everything else as control frames (package ctl); barriers that the
// programs of a host met on its barrier board without their pagers are
// learnt of lazily (localbar.go). One poller thread
// reads faults, calls and the messages of the host and handles them
// (package shmem's documentation says how it waits).
//
// The pager lives exactly as long as its rank: it is started with
// PR_SET_PDEATHSIG, exits when the socket pair reaches end of file, and the
// rank aborts the job when the pager ends unexpectedly. A fatal error in the
// pager (a protocol violation, a lost peer it needs, an access to freed
// memory) is sent to the rank, which aborts the job with that message; if
// the rank cannot (every one of its threads is stuck in a fault the pager
// cannot serve), the pager prints the message and kills the rank.
package pager

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/shmem/engine"
	"github.com/jiarun/jia/shmem/internal/backoff"
	"github.com/jiarun/jia/shmem/internal/bell"
	"github.com/jiarun/jia/shmem/internal/board"
	"github.com/jiarun/jia/shmem/internal/callq"
	"github.com/jiarun/jia/shmem/internal/ctl"
	"github.com/jiarun/jia/shmem/protocol"
	"github.com/jiarun/jia/shmem/rdmanet"
	"github.com/jiarun/jia/shmem/tcpnet"
	"github.com/jiarun/jia/shmem/uffd"
)

// fatalGrace is how long the pager waits, after telling its rank of a
// fatal error, for the rank to abort the job before it kills the rank.
const fatalGrace = 5 * time.Second

// Frame types on the pager-to-pager transport.
const (
	frameMsg     = 0 // a protocol.Message
	frameArrival = 1 // a JSON arrival at a collective call
	frameHello   = 2 // nothing: the first frame to each pager of the host (see onConnect)
)

type eventKind uint8

const (
	evCtl eventKind = iota + 1
	evCtlEnd
	evFault
	evFrame
	evLost
	evCall  // a call through the call queue
	evLocal // a page grant read directly (see direct.go)
)

type event struct {
	kind  eventKind
	frame ctl.Frame
	fd    int // with a TAlloc or THello frame
	fd2   int // with a THello frame: the call queue
	call  callq.Call
	err   error
	fault uffd.Fault
	from  int
	data  []byte
	tcp   bool // data is a frame of package tcpnet, handed back once done
	msg   *protocol.Message
}

// queue is an unbounded event queue: producers never block.
type queue struct {
	mu    sync.Mutex
	items []event
	ready chan struct{} // signalled at every push (for fatal's wait)
}

func (q *queue) push(e event) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// takeAll moves the queued events into buf.
func (q *queue) takeAll(buf []event) []event {
	q.mu.Lock()
	buf = append(buf[:0], q.items...)
	clear(q.items)
	q.items = q.items[:0]
	q.mu.Unlock()
	return buf
}

func (q *queue) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) == 0
}

// pager is one rank's pager.
type pager struct {
	conn *net.UnixConn
	// Events are handled by whichever goroutine posts them (a reader of
	// the userfaultfd, of the control socket or of another pager), under
	// mu; events posted while another goroutine holds mu wait in q for it.
	// So an event costs no hand-over between threads, and no reader ever
	// waits for mu: a handler blocked sending to another pager cannot stop
	// this pager from receiving.
	mu     sync.Mutex
	q      queue
	evBuf  []event
	outBuf []byte // answers to the program
	hello  ctl.Hello
	rank   int
	size   int

	u       *uffd.FD
	m       *protocol.Machine
	x       *engine.Executor
	mem     *memory
	net     *tcpnet.Net
	shm     *rdmanet.Net                // to ranks on this host, if any
	shmNet  atomic.Pointer[rdmanet.Net] // shm, once connected: the poller polls it
	shmPeer []bool                      // by rank: frames go through shm
	calls   *callq.Server
	bell    *bell.Bell // wakes the poller
	// The host's barrier board (coll.go's local barriers), if every rank
	// runs here: the generation of the next barrier to step, and the ring
	// position after the last call handled.
	board     *board.Board
	boardGen  uint32
	handled   uint64
	statsWait []ctl.Frame // statistics asked for after calls not handled yet
	// Direct reads between the ranks of the host (direct.go).
	bits      *bitmap // this rank's pages read directly by others
	direct    []bool  // by rank: its pages are read directly
	sharedBuf []protocol.PageID
	base      uintptr
	span      uintptr

	pending map[callKey][]uint64 // calls waiting for their ActDone, oldest first (see ringReq)
	// Kept locks the program may claim and lock without waiting (see
	// offerKept), the calls of claimed holds stepped since their offer,
	// and the calls of claimed holds to answer without a step (withdraw).
	offered []int64
	freeBuf []int
	claimed map[int]*claimCount
	skip    map[int]*claimCount
	all     []*region // every region ever allocated, freed ones too

	collSeq  uint64                // number of this rank's next collective call
	coll     *collective           // the collective call in progress
	arrivals map[uint64][]*arrival // arrivals by call number, indexed by rank
	lost     map[int]error         // ranks whose connection to this pager ended
	closing  bool                  // the program said Bye
	sendBuf  []byte
	// How the poller waits: while the program waits for the pager
	// (awaiting: a fault or call of the program in progress; see busy),
	// and otherwise.
	awaiting, idle backoff.Policy
	busy           atomic.Bool // the program waits for the pager
}

// claimCount counts the calls of claimed holds of a lock (callq.Claimed).
type claimCount struct{ locks, unlocks uint32 }

type callKey struct {
	op protocol.EventKind
	id int
}

// Main runs the pager and returns its exit code. The program's binary
// calls it (from package shmem's init) when ctl.Env is set.
func Main() int {
	f := os.NewFile(ctl.PagerFD, "dsm-pager-socket")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "jia: DSM pager: socket: %v\n", err)
		return 1
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		fmt.Fprintln(os.Stderr, "jia: DSM pager: descriptor 3 is not a Unix socket")
		return 1
	}
	p := &pager{
		conn:     uc,
		pending:  make(map[callKey][]uint64),
		arrivals: make(map[uint64][]*arrival),
		lost:     make(map[int]error),
		rank:     -1,
	}
	p.q.ready = make(chan struct{}, 1)
	// The rank's GOMAXPROCS (often 1 under jiarun) is inherited. The
	// pager's threads that wait for faults, calls and messages sleep in
	// system calls, each holding a P meanwhile: give them enough that one
	// waking up finds a P at once.
	if goruntime.GOMAXPROCS(0) < 6 {
		goruntime.GOMAXPROCS(6)
	}
	// Frames are garbage soon: collect less often (a collection delays
	// the faults it overlaps).
	debug.SetGCPercent(400)
	go p.readCtl()
	select {} // the readers handle everything; finish exits
}

// readCtl turns the program's frames into events.
func (p *pager) readCtl() {
	r := ctl.NewReader(p.conn)
	for {
		f, err := r.Next()
		if err != nil {
			p.post(event{kind: evCtlEnd, err: err})
			return
		}
		ev := event{kind: evCtl, frame: f, fd: -1, fd2: -1}
		if f.Type == ctl.THello || f.Type == ctl.TAlloc {
			ev.fd, _ = r.TakeFD()
		}
		if f.Type == ctl.THello {
			ev.fd2, _ = r.TakeFD()
		}
		p.post(ev)
	}
}

// answer writes an answer to the program. It does not block in practice:
// answers are a few bytes each, and there are at most as many outstanding
// as the program has goroutines in calls, far below the socket's buffer.
// A write error means the program is gone, which the control reader
// reports.
func (p *pager) answer(f ctl.Frame) {
	p.outBuf = ctl.Append(p.outBuf[:0], f)
	p.conn.Write(p.outBuf)
}

// poll is the pager's poller: it reads the program's faults and calls
// and the messages of the pagers on this host, and handles each on this
// thread (post): a fault or a call costs no hand-over between threads.
// After an event it keeps polling for a while (the next one often follows
// at once: the program's next fault, the answer to a request), giving the
// processor away after every poll; then it sleeps in epoll_pwait(2) on
// the userfaultfd, its bell, which the program and the other pagers ring
// when they published something while it sleeps, and the connections
// from the pagers of other hosts (package tcpnet), whose frames it reads
// and handles like those of this host: a page requested from another host
// is answered there, and installed here, by the poller that polls or
// sleeps for it, with no hand-over to another thread. Every poll and every
// sleep of the descriptors is that one system call (wait), which says
// which of them to read: a poll that finds nothing costs one system call
// and a yield.
//
// The pager inherits its rank's processor set: when the launcher binds
// ranks to processors (jiarun --bind-to), a fault is served on the
// faulting thread's processor, which the fault leaves idle, and costs two
// switches there instead of a wake-up of another processor each way
// (dsmbench's floors compare the two).
func (p *pager) poll() {
	var faults [32]uffd.Fault
	var calls [64]callq.Call
	var w backoff.Waiter
	fds := []unix.PollFd{{Fd: int32(p.u.Fd()), Events: unix.POLLIN}, {Fd: int32(p.bell.FD()), Events: unix.POLLIN}}
	sleepy := false // the bell says the poller sleeps; one more round first
	var lastSched time.Time
	// What the last wait found readable (bits watchUffd, watchBell); the
	// frames that arrived it handled already. A round after a sleep uses
	// what the sleep found (woke), and the round after saying that the
	// poller sleeps looks at the shared memory only (skip: the sleep looks
	// at the descriptors): a system call each saved.
	var ready uint64
	woke, skip := false, false
	for {
		switch {
		case skip:
			ready = 0
		case !woke:
			var err error
			if ready, err = p.wait(fds, 0); err != nil {
				p.post(event{kind: evLost, from: -1, err: err})
				return
			}
		}
		woke, skip = false, false
		if ready&(1<<watchBell) != 0 {
			p.bell.Drain()
		}
		// The faults first, then the calls, handled the other way round:
		// a call the program posted without waiting (Unlock, when quiet)
		// comes before the faults of its later accesses, and every call
		// made before a fault read now is taken after it. A call taken
		// with a fault it did not precede was made concurrently with it,
		// so either order is one the program could have seen.
		n := 0
		if ready&(1<<watchUffd) != 0 {
			var err error
			if n, err = p.u.Read(faults[:]); err != nil {
				p.post(event{kind: evLost, from: -1, err: fmt.Errorf("userfaultfd: %w", err)})
				return
			}
		}
		k := p.calls.Take(calls[:])
		for _, c := range calls[:k] {
			p.post(event{kind: evCall, call: c})
		}
		for _, f := range faults[:n] {
			p.post(event{kind: evFault, fault: f})
		}
		got := n > 0 || k > 0
		shm := p.shmNet.Load()
		if shm != nil && shm.Poll() > 0 {
			got = true
		}
		// Frames from other hosts (handled in the wait) restart no wait:
		// a pager that answers a request sleeps again at once instead of
		// polling for what follows (nothing of its program's), while one
		// whose program waits keeps polling from the program's fault or
		// call on. (Polling after answering, as JIAJIA's busy-waiting
		// process does, made faults slower where the hosts' pagers share
		// processors: the poller takes them from the faulting rank.)
		//
		// Into the scheduler now and then, so that the runtime's monitor
		// does not see a goroutine that runs for ever: it would preempt
		// the poller every 10 ms, take its P away in its next system call,
		// and then wake up every 20 µs for a while, each time a switch on
		// the processor that the fault waits for. Not at every round:
		// Gosched wakes another thread to look for work.
		if now := time.Now(); now.Sub(lastSched) > schedEvery {
			lastSched = now
			goruntime.Gosched()
		}
		switch {
		case got:
			w.Reset(p.policyNow())
			if !w.Polls() {
				// No polling: say so at once. The next round looks at
				// the shared memory once more, and the sleep after it
				// at the descriptors (unless that round finds something:
				// then the one after looks at everything).
				if !sleepy {
					p.bell.SetSleeping(true)
					sleepy, skip = true, true
				}
				break
			}
			if sleepy {
				p.bell.SetSleeping(false)
				sleepy = false
			}
		case w.Pause():
		case !sleepy:
			// Say so first, then look once more: whoever publishes after
			// that look rings.
			p.bell.SetSleeping(true)
			sleepy, skip = true, true
		default:
			timeout := time.Second
			if shm != nil && shm.Busy() {
				timeout = time.Millisecond // frames wait for room, which completions free
			}
			var err error
			if ready, err = p.wait(fds, timeout); err != nil {
				p.post(event{kind: evLost, from: -1, err: err})
				return
			}
			woke = true
			p.bell.SetSleeping(false)
			sleepy = false
			if shm != nil && shm.Busy() {
				w.Reset(p.awaiting)
			} // else whatever woke it up restarts the wait in the next round
		}
	}
}

// Keys of the poller's descriptors in the epoll set of the connections
// from other hosts (tcpnet.Net.Watch), and their bits in what wait
// returns.
const (
	watchUffd = 0
	watchBell = 1
)

// wait waits up to timeout (0: not at all) until the userfaultfd, the
// bell or a connection from another host is readable, handles the frames
// that arrived, and returns which of the userfaultfd and the bell are
// readable (bits watchUffd and watchBell). It is one system call, an
// epoll_pwait on the connections' set, which holds the userfaultfd and
// the bell too. Once the connections are closed it polls fds (the
// userfaultfd and the bell) instead, and a wait of 0 reports both
// readable.
func (p *pager) wait(fds []unix.PollFd, timeout time.Duration) (uint64, error) {
	_, ready, err := p.net.Wait(timeout)
	if err == nil {
		return ready, nil
	}
	if !errors.Is(err, tcpnet.ErrClosed) {
		return 0, fmt.Errorf("wait: %w", err)
	}
	if timeout == 0 {
		return 1<<watchUffd | 1<<watchBell, nil
	}
	for i := range fds {
		fds[i].Revents = 0
	}
	if err := sleepPoll(fds, timeout); err != nil {
		return 0, fmt.Errorf("poll: %w", err)
	}
	ready = 0
	if fds[0].Revents != 0 {
		ready |= 1 << watchUffd
	}
	if fds[1].Revents != 0 {
		ready |= 1 << watchBell
	}
	return ready, nil
}

// schedEvery is how often the poller enters the scheduler: well within
// the runtime's 10 ms before it preempts a goroutine.
const schedEvery = 5 * time.Millisecond

// sleepPoll waits in ppoll(2) until one of fds is readable, a signal, or
// timeout. It is a raw system call: the poller keeps its P while it sleeps
// (the pager has enough of them), so that the runtime's monitor neither
// hands the P over after 10 ms of sleep nor, having done so, polls for
// more every 20 µs for a while: on a virtual machine those wake-ups of
// the monitor cost the pager more than all its work. The monitor still
// preempts the poller every 10 ms or so (ppoll returns EINTR), which lets
// the garbage collector stop it.
func sleepPoll(fds []unix.PollFd, timeout time.Duration) error {
	ts := unix.NsecToTimespec(int64(timeout))
	_, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if errno != 0 && errno != unix.EINTR {
		return errno
	}
	return nil
}

// policyNow returns how the poller waits now: as long as the program
// waits for the pager, or frames to the host's pagers wait for room (the
// peer frees it as it reads them, and only a poll learns of that).
func (p *pager) policyNow() backoff.Policy {
	if p.busy.Load() {
		return p.awaiting
	}
	if shm := p.shmNet.Load(); shm != nil && shm.Busy() {
		return p.awaiting
	}
	return p.idle
}

// errExit ends the pager with an exit code.
type errExit int

func (e errExit) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// post handles ev, and every event queued meanwhile, unless another
// goroutine is handling events: then that one handles ev too.
func (p *pager) post(ev event) {
	p.q.push(ev)
	for {
		if !p.mu.TryLock() {
			return // the holder sees ev: it checks the queue after unlocking
		}
		for {
			p.evBuf = p.q.takeAll(p.evBuf)
			if len(p.evBuf) == 0 {
				break
			}
			for i := range p.evBuf {
				if p.calls != nil {
					// Before anything that could make a barrier publish
					// something (a full barrier's end may have said
					// clean: see onDone).
					p.calls.SetClean(false)
				}
				if err := p.handleSafe(&p.evBuf[i]); err != nil {
					p.finish(err)
				}
			}
		}
		p.busy.Store(len(p.pending) > 0 || len(p.mem.waits) > 0)
		if p.calls != nil {
			quiet := p.quiet()
			p.calls.SetQuiet(quiet)
			p.calls.SetClean(p.clean(quiet))
			if err := p.offerKept(quiet); err != nil {
				p.finish(err)
			}
		}
		p.mu.Unlock()
		if p.q.empty() {
			return
		}
	}
}

// quiet reports whether the program may post an Unlock without waiting
// for it (callq.Client.Post): the machine is quiet (no page written since
// the last release, none watched) and no fault is being served, so that
// the Unlock changes nothing in the program's memory, whenever the pager
// steps it. Any later access of the program that could change that
// faults, and the poller steps that fault after the Unlock.
func (p *pager) quiet() bool {
	return p.m != nil && p.m.Quiet() && len(p.mem.waits) == 0 && !p.closing
}

// clean reports whether a barrier of the program would publish nothing
// now and need nothing of the others (callq.Server.SetClean), given
// whether the pager is quiet.
func (p *pager) clean(quiet bool) bool {
	return quiet && p.board != nil && p.m.BarrierQuiet()
}

// offerKept offers the program every lock kept here that a Lock would
// take at once (protocol.Machine.AppendFreeKept), while the pager is
// quiet: the program then claims it in the call queue and posts its Lock
// and later its Unlock, marked callq.Claimed, without waiting
// (callq.Client.Claim). Offers exist only while the pager is quiet, so
// that a claimed Lock changes nothing in the program's memory: they are
// withdrawn before the pager stops being quiet, and before any step that
// would make the lock busy otherwise (a Lock called the ordinary way, a
// recall).
func (p *pager) offerKept(quiet bool) error {
	if !quiet {
		return p.withdrawAll()
	}
	p.freeBuf = p.m.AppendFreeKept(p.freeBuf[:0])
	for _, id := range p.freeBuf {
		if !slices.Contains(p.offered, int64(id)) && p.calls.Offer(int64(id)) {
			p.offered = append(p.offered, int64(id))
			if p.claimed == nil {
				p.claimed = make(map[int]*claimCount)
			}
			if p.claimed[id] == nil {
				p.claimed[id] = new(claimCount)
			}
			*p.claimed[id] = claimCount{}
		}
	}
	return nil
}

// withdrawAll withdraws every offer.
func (p *pager) withdrawAll() error {
	for len(p.offered) > 0 {
		if err := p.withdraw(int(p.offered[len(p.offered)-1])); err != nil {
			return err
		}
	}
	return nil
}

// claimMask is the range of the claim counts of callq's free-lock words.
const claimMask = 1<<30 - 1

// withdraw ends the offer of lock id, if it is offered. The claimed holds
// whose calls were not all stepped yet are brought up to date now, in the
// claims' place (before anything that happens after them): the machine
// holds the lock if and only if the program holds it by a claim, and the
// calls still on their way are answered without a step when they arrive.
// No page was written meanwhile but those that need no fault, which
// collectShared and collectWritten find, as for any Lock and Unlock.
func (p *pager) withdraw(id int) error {
	i := slices.Index(p.offered, int64(id))
	if i < 0 {
		return nil
	}
	p.offered = slices.Delete(p.offered, i, i+1)
	claims, held := p.calls.Withdraw(int64(id))
	seen := p.claimed[id]
	if held && seen.unlocks == claims {
		// The Unlock of the last claim was stepped already: the program
		// had not given the claim back yet (callq.Client.Unclaim).
		held = false
	}
	locks := (claims - seen.locks) & claimMask
	unlocks := (claims - seen.unlocks) & claimMask
	if held {
		unlocks = (unlocks - 1) & claimMask
	}
	if locks == 0 && unlocks == 0 {
		return nil
	}
	if locks > claimMask/2 || unlocks > claimMask/2 {
		return fmt.Errorf("lock %d: %d claims, %d of their Locks and %d Unlocks stepped", id, claims, seen.locks, seen.unlocks)
	}
	if p.skip == nil {
		p.skip = make(map[int]*claimCount)
	}
	sk := p.skip[id]
	if sk == nil {
		sk = new(claimCount)
		p.skip[id] = sk
	}
	sk.locks += locks
	sk.unlocks += unlocks
	heldNow := seen.locks != seen.unlocks
	if heldNow == held && !heldNow {
		// Whole holds only. The writes made in them to home pages that
		// other ranks read directly meanwhile, unknown to the machine
		// until now, must reach the lock's scope: stepped in a hold of
		// the lock, the pages read count as written in it. Nothing read,
		// nothing changes.
		if p.bits == nil || !p.bitsSet() {
			return nil
		}
		if err := p.stepClaimed(protocol.EvLock, id); err != nil {
			return err
		}
		if err := p.collect(); err != nil {
			return err
		}
		return p.stepClaimed(protocol.EvUnlock, id)
	}
	if heldNow == held {
		return nil // the machine holds the lock: later releases collect
	}
	if !heldNow {
		// The program holds the lock: what it wrote in it so far belongs
		// to the lock's scope.
		if err := p.stepClaimed(protocol.EvLock, id); err != nil {
			return err
		}
	}
	if err := p.collect(); err != nil {
		return err
	}
	if heldNow {
		return p.stepClaimed(protocol.EvUnlock, id)
	}
	return nil
}

// stepClaimed steps a Lock or Unlock of lock id in the place of the
// program's claims; nothing waits for its ActDone (onDone drops it).
func (p *pager) stepClaimed(kind protocol.EventKind, id int) error {
	if err := p.step(protocol.Event{Kind: kind, ID: id}); err != nil {
		return fmt.Errorf("lock %d claimed by the program: %w", id, err)
	}
	return nil
}

// recvMsg steps a message from another rank; the recall of a lock the
// program claimed, or an acquire of one managed here, comes after the
// claims made until then.
func (p *pager) recvMsg(msg *protocol.Message) error {
	if p.calls != nil && (msg.Kind == protocol.MsgRecall || msg.Kind == protocol.MsgAcquire && msg.ID%p.size == p.rank) {
		if err := p.withdraw(msg.ID); err != nil {
			return err
		}
	}
	return p.step(protocol.Event{Kind: protocol.EvRecv, Msg: msg})
}

// handleSafe handles one event, turning a panic into a fatal error.
func (p *pager) handleSafe(ev *event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	return p.handle(ev)
}

// finish ends the pager: at once for errExit, through fatal otherwise.
func (p *pager) finish(err error) {
	if p.bell != nil {
		p.bell.Unlink()
	}
	var ex errExit
	if errors.As(err, &ex) {
		os.Exit(int(ex))
	}
	os.Exit(p.fatal(err))
}

func (p *pager) handle(ev *event) error {
	switch ev.kind {
	case evCtl:
		// Frames come on their own socket, not in the calls' order: this
		// steps at least the barriers met on the board before the calls
		// handled so far.
		if err := p.catchUp(p.handled); err != nil {
			return err
		}
		return p.onCtl(ev)
	case evCtlEnd:
		// The program is gone, or said Bye and closed.
		if p.net != nil {
			p.net.Close()
		}
		if p.shm != nil {
			p.shm.Close()
		}
		if p.bell != nil {
			p.bell.Close()
		}
		if p.closing || errors.Is(ev.err, io.EOF) {
			return errExit(0)
		}
		return errExit(1)
	case evFault:
		// Serving it may make the interval non-empty: the program must
		// not post an Unlock from the moment it goes on (see quiet).
		if p.calls != nil {
			p.calls.SetQuiet(false)
			if err := p.withdrawAll(); err != nil {
				return err
			}
		}
		if err := p.catchUp(p.handled); err != nil {
			return err
		}
		return p.onFault(ev.fault)
	case evFrame:
		if err := p.catchUp(p.handled); err != nil {
			return err
		}
		kept, err := p.onFrame(ev.from, ev.data)
		if ev.tcp && !kept && err == nil {
			p.net.Release(ev.data) // received into again: no garbage per frame
		}
		ev.data = nil
		return err
	case evLost:
		if ev.from < 0 {
			return ev.err
		}
		p.lost[ev.from] = ev.err
		return nil
	case evCall:
		err := p.boardCall(ev.call)
		p.handled = ev.call.Pos + 1
		if err == nil && len(p.statsWait) > 0 {
			err = p.answerStatsWaiting()
		}
		return err
	case evLocal:
		err := p.step(protocol.Event{Kind: protocol.EvRecv, Msg: ev.msg})
		p.x.Recycle(ev.msg) // installed (copied) or dropped: not kept
		return err
	}
	return fmt.Errorf("unknown event %d", ev.kind)
}

func (p *pager) prefix() string {
	if p.rank < 0 {
		return "shmem: pager"
	}
	return fmt.Sprintf("shmem: rank %d", p.rank)
}

// fatal tells the program why the job must stop, waits for it to abort,
// and kills it if it does not.
func (p *pager) fatal(err error) int {
	msg := err.Error()
	if p.rank >= 0 && !startsWith(msg, "shmem: rank") {
		msg = fmt.Sprintf("%s: DSM pager: %s", p.prefix(), msg)
	}
	p.conn.SetWriteDeadline(time.Now().Add(time.Second))
	p.answer(ctl.Frame{Type: ctl.TFatal, Data: []byte(msg)})
	if p.net != nil {
		p.net.Close()
	}
	// Wait for the program's end of the socket to close: it aborts the job.
	done := make(chan struct{})
	go func() {
		var evs []event
		for {
			evs = p.q.takeAll(evs)
			for _, e := range evs {
				if e.kind == evCtlEnd {
					close(done)
					return
				}
			}
			<-p.q.ready
		}
	}()
	select {
	case <-done:
	case <-time.After(fatalGrace):
		fmt.Fprintf(os.Stderr, "jia: %s (the rank did not abort the job: killing it)\n", msg)
		syscall.Kill(os.Getppid(), syscall.SIGKILL)
	}
	return 1
}

func startsWith(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// ---- control frames ----------------------------------------------------------

func (p *pager) onCtl(ev *event) error {
	f := ev.frame
	if p.m == nil && f.Type != ctl.THello {
		return fmt.Errorf("control frame %d before the hello", f.Type)
	}
	switch f.Type {
	case ctl.THello:
		return p.onHello(f, ev.fd, ev.fd2)
	case ctl.TPeers:
		return p.onPeers(f)
	case ctl.TConnect:
		return p.onConnect(f)
	case ctl.TAlloc:
		return p.onAlloc(f, ev.fd)
	case ctl.TFree:
		return p.onFree(f)
	case ctl.TCall:
		return p.onCall(protocol.EventKind(f.A), f.B, f.Req)
	case ctl.TStats:
		if p.handled < uint64(f.A) {
			// Counts the calls made before it too (see answerStats).
			p.statsWait = append(p.statsWait, f)
			return nil
		}
		p.answerStats(f)
		return nil
	case ctl.TBye:
		p.closing = true
		p.answer(ctl.Frame{Type: ctl.TDone, Req: f.Req})
		return nil
	}
	return fmt.Errorf("unknown control frame %d", f.Type)
}

func (p *pager) onHello(f ctl.Frame, fd, fd2 int) error {
	if p.m != nil {
		return errors.New("second hello")
	}
	if fd < 0 || fd2 < 0 {
		return errors.New("hello without the userfaultfd and the call queue")
	}
	if err := json.Unmarshal(f.Data, &p.hello); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	calls, err := callq.Attach(fd2)
	if err != nil {
		return err
	}
	p.calls = calls
	h := &p.hello
	m, err := protocol.New(protocol.Config{Rank: h.Rank, Size: h.Size, PageSize: h.PageSize,
		CachePages: h.CachePages, Prefetch: h.Prefetch, PrefetchMax: h.PrefetchMax, HomeMigration: h.HomeMigration,
		Watch: watchPages, CacheLocks: true, Refetch: refetchBarriers, GrantPages: grantPages})
	if err != nil {
		return err
	}
	p.rank, p.size, p.m = h.Rank, h.Size, m
	p.u = uffd.FromFD(fd, uffd.Features(h.Features))
	p.mem = &memory{u: p.u, ps: h.PageSize, zero: make([]byte, h.PageSize), waits: map[protocol.PageID]struct{}{}}
	p.x = &engine.Executor{Rank: h.Rank, PageSize: h.PageSize, Mem: p.mem, Net: transport{p}, Done: p.onDone,
		// Handled after the event being handled, by whoever handles it.
		Loop: func(msg *protocol.Message) { p.q.push(event{kind: evLocal, msg: msg}) }}
	p.net, err = tcpnet.Listen(tcpnet.Config{Rank: h.Rank, Size: h.Size, Job: h.Job, Secret: h.Secret, Host: h.Host,
		Deliver: func(from int, frame []byte) { p.post(event{kind: evFrame, from: from, data: frame, tcp: true}) },
		Lost:    func(from int, err error) { p.post(event{kind: evLost, from: from, err: err}) },
		Polled:  true, // by the poller
	})
	if err != nil {
		return err
	}
	// The pager's threads poll as long as the rank and pager processes of
	// the host fit on its processors.
	p.awaiting, p.idle = backoff.Awaiting(2*h.LocalSize), backoff.Idle(2*h.LocalSize)
	if p.bell, err = bell.New(h.Job, h.Rank); err != nil {
		return err
	}
	// The poller waits for the userfaultfd, the bell and the connections
	// from other hosts in one system call (see wait).
	if err := p.net.Watch(p.u.Fd(), watchUffd); err != nil {
		return err
	}
	if err := p.net.Watch(p.bell.FD(), watchBell); err != nil {
		return err
	}
	go p.poll()
	ready, _ := json.Marshal(ctl.Ready{Addr: p.net.Addr(), Bell: p.bell.Addr()})
	p.answer(ctl.Frame{Type: ctl.TReady, Req: f.Req, Data: ready})
	return nil
}

// onPeers learns every pager's address and the ranks' hosts. For the ranks
// on this host it opens the shared-memory transport and makes a queue pair
// each, and answers with their numbers, which the program exchanges.
func (p *pager) onPeers(f ctl.Frame) error {
	var peers ctl.Peers
	if err := json.Unmarshal(f.Data, &peers); err != nil {
		return fmt.Errorf("peers: %w", err)
	}
	p.base, p.span = uintptr(peers.Base), uintptr(peers.Span)
	if err := p.net.SetPeers(peers.Addrs); err != nil {
		return err
	}
	var card ctl.ShmCard
	var local []int
	if h := p.hello.HostID; h != "" && !p.hello.TCPOnly && len(peers.Hosts) == p.size {
		for r, host := range peers.Hosts {
			if r != p.rank && host == h {
				local = append(local, r)
			}
		}
	}
	if len(local) > 0 {
		shm, err := rdmanet.Open(rdmanet.Config{Rank: p.rank, Size: p.size, Job: p.hello.Job,
			LocalSize: len(local) + 1,
			Deliver:   func(from int, frame []byte) { p.post(event{kind: evFrame, from: from, data: frame}) },
			Lost:      func(from int, err error) { p.post(event{kind: evLost, from: from, err: err}) },
			Wake:      p.bell.Ring,
		})
		if err != nil {
			// Without shared memory, TCP serves every peer: a peer only
			// uses shared memory with a pager that made it a queue pair.
			fmt.Fprintf(os.Stderr, "jia: %s: DSM pager: %v; using TCP on this host\n", p.prefix(), err)
		} else {
			qpns, err := shm.Prepare(local)
			if err != nil {
				shm.Close()
				return err
			}
			p.shm = shm
			card.Addr = shm.Addr()
			card.Bell = p.bell.Addr()
			if !p.hello.HomeMigration {
				if b, err := newBitmap(int(p.span / uintptr(p.hello.PageSize))); err == nil {
					p.bits = b
					card.Pid, card.Bits = os.Getpid(), b.fd
				}
			}
			card.QPNs = make([]uint32, p.size)
			for r, q := range qpns {
				card.QPNs[r] = q
			}
		}
	}
	b, _ := json.Marshal(card)
	p.answer(ctl.Frame{Type: ctl.TDone, Req: f.Req, Data: b})
	return nil
}

// onConnect connects the queue pairs of the ranks on this host that made
// one for this rank too; the others are reached through TCP.
func (p *pager) onConnect(f ctl.Frame) error {
	var c ctl.Connect
	if err := json.Unmarshal(f.Data, &c); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	p.shmPeer = make([]bool, p.size)
	p.direct = make([]bool, p.size)
	p.mem.peerBits = make([]*bitmap, p.size)
	if p.shm != nil && len(c.Addrs) == p.size && len(c.QPNs) == p.size && len(c.Bells) == p.size &&
		len(c.Pids) == p.size && len(c.Bits) == p.size {
		any := false
		for r := 0; r < p.size; r++ {
			if r == p.rank || c.QPNs[r] == 0 || len(c.Addrs[r]) == 0 {
				continue
			}
			if err := p.shm.Connect(r, c.Addrs[r], c.Bells[r], c.QPNs[r]); err != nil {
				return err
			}
			p.shmPeer[r], any = true, true
			// Its pages are read directly if its bitmap can be mapped
			// here (and without home migration: see protocol.Config).
			if c.Pids[r] > 0 && !p.hello.HomeMigration {
				if b, err := openBitmap(c.Pids[r], c.Bits[r]); err == nil {
					p.mem.peerBits[r], p.direct[r] = b, true
				}
			}
		}
		p.m.SetDirect(p.direct)

		if any {
			p.shmNet.Store(p.shm)
			// A frame this long goes through the transport's shared send
			// arena, which each peer maps when it reads it: once all have,
			// the arena's file is removed, and a crash leaves nothing
			// behind.
			hello := make([]byte, 2<<10)
			hello[0] = frameHello
			for r, ok := range p.shmPeer {
				if ok {
					if err := p.shm.Send(r, hello); err != nil {
						return err
					}
				}
			}
		}
	}
	if c.BoardPid > 0 {
		b, err := board.Open(c.BoardPid, c.BoardFD, p.size)
		if err != nil {
			fmt.Fprintf(os.Stderr, "jia: %s: DSM pager: %v; barriers go through the pagers\n", p.prefix(), err)
		} else {
			p.board = b
		}
	}
	var ok int64
	if p.board != nil {
		ok = 1
	}
	p.answer(ctl.Frame{Type: ctl.TDone, Req: f.Req, A: ok})
	return nil
}

// watchPages is how many written home pages that other ranks hold copies
// of may stay writable, their writes found by comparison before each
// release instead of by a write fault each (protocol.Config.Watch): a fault
// costs tens of microseconds, a comparison of a page a fraction of one.
const watchPages = 4096

// grantPages is how many pages homed at a lock's manager and written
// under the lock go with its grant (protocol.Config.GrantPages): the data
// a lock protects is often a few pages, and one the acquirer held a copy
// of costs it a fetch, a round trip, at its next access otherwise.
const grantPages = 8

// refetchBarriers is how many barriers in a row a page that a barrier
// invalidated here is fetched again right after it without a fault on it
// (protocol.Config.Refetch): a program that reads the same pages of
// others in every barrier interval, as a stencil reads its neighbours'
// boundary rows, faults on them once in three intervals instead of in
// every one. It stays small because every refetch of a page that its home
// keeps writable makes the home count the page as written at its next
// release, which makes that barrier publish something (no meeting on the
// barrier board) and invalidates the page again.
const refetchBarriers = 2

// collect gathers what this rank's pages went through unseen: the home
// pages other ranks read directly (collectShared), then the watched pages
// written (collectWritten).
func (p *pager) collect() error {
	if err := p.collectShared(); err != nil {
		return err
	}
	return p.collectWritten()
}

// collectWritten steps the watched pages written since the last
// comparison (home pages and copies), before a release of the program.
func (p *pager) collectWritten() error {
	w, c := p.m.Watched(), p.m.WatchedCopies()
	if len(w)+len(c) == 0 {
		return nil
	}
	changed, err := p.x.Changed(w, p.sharedBuf[:0])
	if err == nil {
		changed, err = p.x.Differ(c, changed)
	}
	p.sharedBuf = changed
	if err != nil {
		return err
	}
	if len(changed) == 0 {
		return nil
	}
	return p.step(protocol.Event{Kind: protocol.EvWritten, Pages: changed})
}

// ringReq marks the request numbers of calls from the call queue: the
// rest is the slot to answer in.
const ringReq = 1 << 63

// onCall starts a synchronisation call of the program (request req); it
// completes at the machine's ActDone for it (see onDone), possibly within
// this Step.
func (p *pager) onCall(kind protocol.EventKind, arg int64, req uint64) error {
	claimed := arg >= 0 && uint64(kind)&callq.Claimed != 0 && req&ringReq != 0
	kind &^= callq.Claimed
	switch kind {
	case protocol.EvLock, protocol.EvUnlock, protocol.EvSetCV, protocol.EvResetCV, protocol.EvWaitCV,
		protocol.EvBarrier, protocol.EvWait:
	default:
		return fmt.Errorf("call of unknown kind %d", kind)
	}
	id := int(arg)
	if int64(id) != arg {
		id = -1
	}
	key := callKey{kind, id}
	if kind == protocol.EvBarrier || kind == protocol.EvWait {
		key.id, id = 0, 0
	}
	if claimed && (kind == protocol.EvLock || kind == protocol.EvUnlock) {
		if p.claimCall(kind, id) {
			// Stepped in its claim's place (withdraw).
			p.done(req, 0, "")
			return nil
		}
	} else if kind == protocol.EvLock {
		// Held the ordinary way: no claim until it is free again.
		if err := p.withdraw(id); err != nil {
			return err
		}
	}
	// The program went on after a claimed Lock without waiting for it:
	// what it wrote since, found only now, belongs to the lock's scope,
	// so it is collected after the Lock is stepped.
	lockFirst := claimed && kind == protocol.EvLock
	if (kind == protocol.EvLock || kind == protocol.EvUnlock || kind == protocol.EvBarrier) && !lockFirst {
		if err := p.collect(); err != nil {
			return err
		}
	}
	p.pending[key] = append(p.pending[key], req)
	err := p.step(protocol.Event{Kind: kind, ID: id})
	if err == nil && lockFirst {
		if err := p.collect(); err != nil {
			return err
		}
	}
	if err == nil {
		if req&ringReq != 0 && slices.Contains(p.pending[key], req) {
			// Not done within the step: it waits for another rank.
			p.calls.Far(uint32(req &^ ringReq))
		}
		return nil
	}
	if errors.Is(err, protocol.ErrProtocol) || !isProtocolError(err) {
		return err
	}
	// A mistake of the program: the machine changed nothing.
	q := p.pending[key]
	for i, r := range q {
		if r == req {
			p.pending[key] = append(q[:i], q[i+1:]...)
			break
		}
	}
	p.done(req, ctl.Code(err), err.Error())
	return nil
}

// claimCall counts a call of a claimed hold of lock id, and reports
// whether it was stepped already (withdraw).
func (p *pager) claimCall(kind protocol.EventKind, id int) (skip bool) {
	if sk := p.skip[id]; sk != nil {
		n := &sk.locks
		if kind == protocol.EvUnlock {
			n = &sk.unlocks
		}
		if *n > 0 {
			*n--
			return true
		}
	}
	if c := p.claimed[id]; c != nil {
		if kind == protocol.EvLock {
			c.locks = (c.locks + 1) & claimMask
		} else {
			c.unlocks = (c.unlocks + 1) & claimMask
		}
	}
	return false
}

// done answers the call of request req.
func (p *pager) done(req uint64, code int64, msg string) {
	if req&ringReq != 0 {
		p.calls.Answer(uint32(req&^ringReq), code, msg)
		return
	}
	p.answer(ctl.Frame{Type: ctl.TDone, Req: req, A: code, Data: []byte(msg)})
}

func isProtocolError(err error) bool {
	var pe *protocol.Error
	return errors.As(err, &pe)
}

// onDone completes the oldest call waiting for op(id).
func (p *pager) onDone(op protocol.EventKind, id int) {
	key := callKey{op, id}
	q := p.pending[key]
	if len(q) == 0 {
		return
	}
	req := q[0]
	if len(q) == 1 {
		delete(p.pending, key)
	} else {
		p.pending[key] = q[1:]
	}
	if op == protocol.EvBarrier && p.calls != nil && len(p.pending) == 0 {
		// The program goes on as soon as it has the answer, often to
		// the next barrier, before this event's handling ends (post):
		// it must find the flag as it is after the barrier, or it would
		// arrive dirty, and so would every barrier after it. The
		// machine's state is final for this step, and post clears the
		// flag again before the next event.
		p.calls.SetClean(p.clean(p.quiet()))
	}
	p.done(req, 0, "")
}

// step runs one event through the machine and carries out its actions.
// Program mistakes come back as errors; anything else is fatal.
func (p *pager) step(ev protocol.Event) error {
	acts, err := p.m.Step(ev)
	if xerr := p.x.Execute(acts); xerr != nil {
		return xerr
	}
	return err
}

// ---- faults --------------------------------------------------------------------

func (p *pager) onFault(f uffd.Fault) error {
	ps := uintptr(p.hello.PageSize)
	if f.Address < p.base || f.Address >= p.base+p.span {
		return fmt.Errorf("fault at %#x, outside the DSM range %#x+%#x", f.Address, p.base, p.span)
	}
	page := protocol.PageID((f.Address - p.base) / ps)
	p.mem.waits[page] = struct{}{}
	kind := protocol.EvReadFault
	if f.Write() || f.WP() {
		kind = protocol.EvWriteFault
	}
	err := p.step(protocol.Event{Kind: kind, Page: page})
	if errors.Is(err, protocol.ErrNoRegion) {
		for _, r := range p.all {
			if r.contains(page) && r.freed {
				return fmt.Errorf("%s: %s of address %#x, in a region freed by Free (the region of %d bytes at %#x, allocated by collective call #%d)",
					p.prefix(), accessName(f), f.Address, r.n*p.hello.PageSize, r.addr, r.seq+1)
			}
		}
		return fmt.Errorf("%s: %s of address %#x, outside every DSM region", p.prefix(), accessName(f), f.Address)
	}
	return err
}

func accessName(f uffd.Fault) string {
	if f.Write() {
		return "write"
	}
	return "read"
}

// ---- messages from other pagers --------------------------------------------------

// transport is the engine.Transport of the pager.
type transport struct{ p *pager }

func (t transport) Send(msg *protocol.Message) error {
	p := t.p
	b, err := msg.AppendBinary(append(p.sendBuf[:0], frameMsg))
	if err != nil {
		return err
	}
	p.sendBuf = b[:0]
	if err := p.sendFrame(msg.To, b); err != nil {
		if lerr, ok := p.lost[msg.To]; ok {
			return fmt.Errorf("%w (rank %d's pager is gone: %v; did rank %d end without closing the DSM?)", err, msg.To, lerr, msg.To)
		}
		return err
	}
	return nil
}

// sendFrame sends a frame to rank to's pager: through shared memory on
// this host, through TCP otherwise.
func (p *pager) sendFrame(to int, frame []byte) error {
	if to >= 0 && to < len(p.shmPeer) && p.shmPeer[to] {
		return p.shm.Send(to, frame)
	}
	return p.net.Send(to, frame)
}

// keepsFrame reports whether msg, decoded from a frame, may still refer
// to the frame once stepped. Its Data aliases the frame (the rest is its
// own). The machine may keep a message for later (diffs that arrive
// early, say), but the data of a page grant or a lock grant it installs
// (copies) or drops while stepping it.
func keepsFrame(msg *protocol.Message) bool {
	return len(msg.Data) > 0 && msg.Kind != protocol.MsgPageGrant && msg.Kind != protocol.MsgGrant
}

// onFrame handles a frame from another pager, and reports whether
// anything may still refer to the frame's bytes once it returned.
func (p *pager) onFrame(from int, b []byte) (kept bool, err error) {
	if len(b) == 0 {
		return false, fmt.Errorf("empty frame from rank %d", from)
	}
	switch b[0] {
	case frameMsg:
		msg := new(protocol.Message)
		if err := msg.UnmarshalBinary(b[1:]); err != nil {
			return false, fmt.Errorf("frame from rank %d: %w", from, err)
		}
		if msg.From != from || msg.To != p.rank {
			return false, fmt.Errorf("frame from rank %d carries %v", from, msg)
		}
		return keepsFrame(msg), p.recvMsg(msg)
	case frameHello:
		return false, nil
	case frameArrival:
		a := new(arrival)
		if err := json.Unmarshal(b[1:], a); err != nil {
			return false, fmt.Errorf("arrival from rank %d: %w", from, err)
		}
		return false, p.onArrival(from, a)
	}
	return false, fmt.Errorf("frame of unknown type %d from rank %d", b[0], from)
}
