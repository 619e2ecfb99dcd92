package shmem

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/jiarun/jia/internal/hostcpu"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/shm"
	"github.com/jiarun/jia/runtime"
	"github.com/jiarun/jia/runtime/config"
	"github.com/jiarun/jia/shmem/internal/backoff"
	"github.com/jiarun/jia/shmem/internal/bell"
	"github.com/jiarun/jia/shmem/internal/board"
	"github.com/jiarun/jia/shmem/internal/callq"
	"github.com/jiarun/jia/shmem/internal/ctl"
	"github.com/jiarun/jia/shmem/internal/procfd"
	"github.com/jiarun/jia/shmem/pager"
	"github.com/jiarun/jia/shmem/protocol"
	"github.com/jiarun/jia/shmem/uffd"
)

// A program re-executed as its rank's pager never gets to its own code.
func init() {
	if os.Getenv(ctl.Env) == "1" {
		os.Exit(pager.Main())
	}
}

// Runtime is what the DSM needs of its rank's runtime. Package runtime's
// *Runtime has it.
type Runtime interface {
	Rank() int
	Size() int
	Contract() runtime.Contract
	Config() config.Config
	Cards() []runtime.Card
	Exchange(ctx context.Context, key string, value []byte) ([][]byte, error)
	Abort(code int, msg string)
}

// Placement says where the pages of a region have their homes. The zero
// Placement deals pages to ranks one at a time from rank 0.
type Placement = protocol.Placement

// BlockCyclic deals blocks of blockPages pages to ranks start, start+1, …
// (JIAJIA's jia_alloc3 with a block of blockPages pages).
func BlockCyclic(blockPages, start int) Placement {
	return Placement{Kind: protocol.BlockCyclic, Block: blockPages, Start: start}
}

// OnRank homes every page on one rank (JIAJIA's jia_alloc2p).
func OnRank(rank int) Placement { return Placement{Kind: protocol.OnRank, Start: rank} }

// Explicit homes the i-th block of blockPages pages on homes[i]; there must
// be a home for every block.
func Explicit(blockPages int, homes ...int) Placement {
	return Placement{Kind: protocol.Explicit, Block: blockPages, Homes: homes}
}

// Stats counts what a rank's DSM did.
type Stats = protocol.Stats

// Errors of the DSM calls, for errors.Is. Lock, Unlock, Barrier and the
// other calls also return the protocol's errors (protocol.ErrLockNotHeld,
// protocol.ErrBarrierInCS, …); every error names the rank and the call.
var (
	// ErrSize: an allocation of no bytes, or of more than dsm.max_alloc
	// leaves.
	ErrSize = errors.New("bad allocation size")
	// ErrMismatch: the ranks did not make a collective call (Alloc, Free)
	// alike.
	ErrMismatch = ctl.ErrMismatch
	// ErrFreed: the region was freed already.
	ErrFreed = errors.New("region already freed")
	// ErrClosed: the DSM of this rank was closed.
	ErrClosed = errors.New("the DSM is closed")
	// ErrPagerGone: the rank's pager process ended.
	ErrPagerGone = errors.New("the DSM pager is gone")
	// ErrUnavailable: this machine cannot run the DSM (no userfaultfd, or
	// no write protection of shared memory).
	ErrUnavailable = errors.New("the DSM cannot run here")
)

// DSM is one rank's distributed shared memory: the link to its pager, the
// process that serves the rank's page faults and runs its side of the
// coherence protocol (see the package documentation). Alloc and Free are
// collective: every rank calls them, in the same order, one call at a time.
// The synchronisation calls may be made from any goroutine.
type DSM struct {
	rt         Runtime
	rank, size int
	ps         int
	stats      bool
	u          *uffd.FD
	base       uintptr
	span       int
	next       int    // first page not allocated yet
	addr       string // the pager's address for other pagers
	host       string // the host's identity

	conn  *net.UnixConn
	calls *callq.Client // the synchronisation calls' fast path
	ring  *bell.Ringer  // wakes the pager
	// bellFile is the file of the pager's bell, which the pager unlinks
	// once every ringer mapped it; removed at Close too, in case the pager
	// died before (a killed pager leaves it behind).
	bellFile string
	wmu      sync.Mutex
	exited   chan struct{} // closed when the pager process ended
	exit     error         // how it ended
	pid      int           // the pager's process id

	mu      sync.Mutex
	pending map[uint64]chan ctl.Frame
	reqSeq  uint64
	gone    chan struct{} // closed when the pager can no longer answer
	goneErr error
	started bool // losing the pager now aborts the job
	closing bool
	// held is the set of locks this rank holds, true for those taken by
	// a claim (Lock): an Unlock of one of them cannot fail, and is posted
	// without waiting while the pager is quiet.
	held        map[int]bool
	posted      atomic.Int64 // Unlocks posted without waiting
	postedLocks atomic.Int64 // Locks posted without waiting (claimed)

	coll   sync.Mutex // serializes the collective calls
	closed bool

	// The host's barrier board, when every rank runs on this host (see
	// Barrier): mine is the one this rank made, in case it is rank 0's.
	board, mine    *board.Board
	barMu, waitMu  sync.Mutex     // one Barrier, one Wait at a time
	boardPoll      backoff.Policy // how long a waiter on the board polls
	bits           []uint64       // the pager's bitmap of pages read directly (nil: none)
	bitsMem        []byte
	allocatedPages atomic.Int64 // pages of the range allocated so far

	// shareFD is the memfd of the whole range that every rank of the host
	// maps its regions from, when they share memory (dsm.host_share; see
	// Alloc), or -1.
	shareFD int
}

// Start starts the DSM of this rank: every rank must call it (it is
// collective). It opens a userfaultfd, starts the rank's pager, and agrees
// with every other rank on the address range where the regions will live
// (the same on every rank).
func Start(ctx context.Context, rt Runtime) (*DSM, error) {
	rank, size := rt.Rank(), rt.Size()
	cfg := rt.Config().DSM
	d := &DSM{rt: rt, rank: rank, size: size, ps: PageSize, stats: cfg.Stats, shareFD: -1,
		pending: make(map[uint64]chan ctl.Frame), gone: make(chan struct{}), exited: make(chan struct{})}
	d.span = int((int64(cfg.MaxAlloc) + int64(PageSize) - 1) / int64(PageSize) * int64(PageSize))
	if d.span <= 0 {
		d.span = 4 << 30
	}
	local := d.startLocal(cfg)
	// Every rank takes part in every round of the exchange, even one that
	// failed, so that all learn of the failure instead of waiting forever.
	type card struct {
		OK   bool
		Addr string
		Host string
		Err  string `json:",omitempty"`
		// The barrier board this rank made, if it could (see Barrier).
		BoardPid, BoardFD int `json:",omitempty"`
		// Share says that this rank would share the host's memory
		// (dsm.host_share); rank 0 adds the memfd it made for it.
		Share             bool `json:",omitempty"`
		SharePid, ShareFD int  `json:",omitempty"`
	}
	if local == nil {
		if b, err := board.Create(size); err == nil {
			d.mine = b
		}
		if cfg.HostShare && rank == 0 {
			// If rank 0 cannot make it, its card offers none, and the
			// ranks keep a copy each, as with dsm.host_share off.
			if fd, err := createShared(d.span); err == nil {
				d.shareFD = fd
			}
		}
	}
	secret := rt.Contract().Secret
	for round := 0; round < 16; round++ {
		c := card{Err: errString(local)}
		var addr uintptr
		if local == nil {
			addr = candidate(secret, round)
			if distinctRanges {
				addr += uintptr(rank) * uintptr(d.span+1<<30) &^ (1<<30 - 1)
			}
			c.OK = reserve(addr, d.span) == nil
			c.Addr = d.addr
			c.Host = d.host
			if d.mine != nil {
				c.BoardPid, c.BoardFD = os.Getpid(), d.mine.FD()
			}
			c.Share = cfg.HostShare
			if d.shareFD >= 0 {
				c.SharePid, c.ShareFD = os.Getpid(), d.shareFD
			}
		}
		blob, _ := json.Marshal(c)
		vals, err := rt.Exchange(ctx, fmt.Sprintf("shmem/start/%d", round), blob)
		if err != nil {
			d.abandon()
			return nil, fmt.Errorf("shmem: rank %d: Start: %w", rank, err)
		}
		all := true
		addrs := make([]string, size)
		hosts := make([]string, size)
		var boardPid, boardFD int
		var share shared
		allShare := true
		for r, v := range vals {
			var rc card
			if err := json.Unmarshal(v, &rc); err != nil {
				rc.Err = fmt.Sprintf("bad start card: %v", err)
			}
			if rc.Err != "" && local == nil {
				local = fmt.Errorf("rank %d could not start its DSM: %s", r, rc.Err)
			}
			all = all && rc.OK
			allShare = allShare && rc.Share
			addrs[r], hosts[r] = rc.Addr, rc.Host
			if r == 0 {
				boardPid, boardFD = rc.BoardPid, rc.BoardFD
				share = shared{rc.SharePid, rc.ShareFD}
			}
		}
		for _, h := range hosts {
			if h == "" || h != hosts[0] {
				boardPid = 0 // a board serves the ranks of one host only
				allShare = false
			}
		}
		if !allShare {
			share = shared{}
		}
		if local != nil {
			if c.OK {
				unreserve(addr, d.span)
			}
			d.abandon()
			return nil, fmt.Errorf("shmem: rank %d: Start: %w", rank, local)
		}
		if !all {
			if c.OK {
				unreserve(addr, d.span)
			}
			continue
		}
		d.base = addr
		if err := d.connect(ctx, addrs, hosts, boardPid, boardFD, share); err != nil {
			unreserve(addr, d.span)
			d.abandon()
			return nil, fmt.Errorf("shmem: rank %d: Start: %w", rank, err)
		}
		d.mu.Lock()
		d.started = true
		d.mu.Unlock()
		return d, nil
	}
	d.abandon()
	return nil, fmt.Errorf("shmem: rank %d: Start: found no address range of %d bytes free on every rank", rank, d.span)
}

// connect gives the pager every pager's address and host; the pagers on
// one host then connect their shared-memory queue pairs, agreed through
// two more exchanges (the second one so that no pager sends through a
// queue pair before its peer has connected it).
//
// When every rank runs on one host and would share its memory, rank 0's
// memfd of the range (share) is opened by the others; they share it if
// every rank could.
func (d *DSM) connect(ctx context.Context, addrs, hosts []string, boardPid, boardFD int, share shared) error {
	peers, _ := json.Marshal(ctl.Peers{Base: uint64(d.base), Span: uint64(d.span), Addrs: addrs, Hosts: hosts})
	f, err := d.request(ctl.Frame{Type: ctl.TPeers, Data: peers})
	if err != nil {
		return err
	}
	vals, err := d.rt.Exchange(ctx, "shmem/shm", f.Data)
	if err != nil {
		return err
	}
	c := ctl.Connect{Addrs: make([][]byte, d.size), QPNs: make([]uint32, d.size)}
	boardOK := boardPid > 0
	for r, v := range vals {
		var sc ctl.ShmCard
		if err := json.Unmarshal(v, &sc); err != nil {
			return fmt.Errorf("bad shared-memory card of rank %d: %v", r, err)
		}
		if r == d.rank && sc.Pid > 0 && boardOK {
			// Pages of this rank read directly by others make a barrier
			// publish something (see Barrier).
			if err := d.mapBits(sc.Pid, sc.Bits); err != nil {
				boardOK = false
			}
		}
		c.Addrs[r] = sc.Addr
		c.Bells = append(c.Bells, sc.Bell)
		c.Pids = append(c.Pids, sc.Pid)
		c.Bits = append(c.Bits, sc.Bits)
		if d.rank < len(sc.QPNs) {
			c.QPNs[r] = sc.QPNs[d.rank]
		}
	}
	if boardOK {
		c.BoardPid, c.BoardFD = boardPid, boardFD
	}
	b, _ := json.Marshal(c)
	f, err = d.request(ctl.Frame{Type: ctl.TConnect, Data: b})
	if err != nil {
		return err
	}
	var bd *board.Board
	if boardOK && f.A == 1 {
		if d.rank == 0 {
			bd = d.mine
		} else if bd, err = board.Open(boardPid, boardFD, d.size); err != nil {
			bd = nil
		}
	}
	shareOK := false
	if share.pid > 0 {
		if d.rank == 0 {
			shareOK = d.shareFD >= 0
		} else if fd, err := openShared(share, d.span); err == nil {
			d.shareFD, shareOK = fd, true
		}
	}
	ok := []byte{0, 0}
	if bd != nil {
		ok[0] = 1
	}
	if shareOK {
		ok[1] = 1
	}
	vals, err = d.rt.Exchange(ctx, "shmem/connected", ok)
	if err != nil {
		return err
	}
	// Every rank meets the others on the board, or none does; and every
	// rank shares the host's memory, or none does.
	for _, v := range vals {
		if len(v) != 2 || v[0] != 1 {
			if bd != nil && bd != d.mine {
				bd.Close()
			}
			bd = nil
		}
		if len(v) != 2 || v[1] != 1 {
			shareOK = false
		}
	}
	if !shareOK {
		d.closeShared()
	}
	if d.mine != nil && d.mine != bd {
		d.mine.Close()
		d.mine = nil
	}
	d.board = bd
	if bd != nil {
		bd.SetPid(d.rank, os.Getpid())
	}
	// Waiters poll the board (yielding, never spinning) only while the
	// host's ranks fit on its processors; otherwise they sleep at once.
	if n := d.rt.Contract().LocalSize; n > 0 && n <= hostcpu.Count() {
		d.boardPoll = backoff.Policy{Yield: boardPoll}
	}
	return nil
}

// boardPoll is how long a rank waiting on the barrier board polls it
// before it sleeps, when the host's ranks fit on its processors: about the
// time the others take to arrive at a barrier of a balanced program.
const boardPoll = 50 * time.Microsecond

// mapBits maps the pager's bitmap of this rank's pages read directly by
// the others (/proc/pid/fd/fd), to be read at barriers.
func (d *DSM) mapBits(pid, fd int) error {
	f, size, err := procfd.Open(pid, fd, false)
	if err != nil {
		return fmt.Errorf("the pager's bitmap: %w", err)
	}
	defer unix.Close(f)
	if size <= 0 || size%8 != 0 {
		return fmt.Errorf("the pager's bitmap has %d bytes", size)
	}
	mem, err := unix.Mmap(f, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the pager's bitmap: %w", err)
	}
	d.bitsMem = mem
	d.bits = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	return nil
}

// bitsSet reports whether another rank read one of this rank's pages
// directly since the pager last collected the bitmap: this rank's next
// release must make the writes to it notices (see package pager).
func (d *DSM) bitsSet() bool {
	n := min((int(d.allocatedPages.Load())+63)/64, len(d.bits))
	for i := range n {
		if atomic.LoadUint64(&d.bits[i]) != 0 {
			return true
		}
	}
	return false
}

// shared names the memfd of the range that rank 0 made for the host's
// ranks to share: its descriptor in rank 0's process.
type shared struct{ pid, fd int }

// createShared makes the memfd of the range, of span bytes: the host's
// only copy of every region when the ranks share memory.
func createShared(span int) (int, error) {
	fd, err := unix.MemfdCreate("jiarun-dsm-shared", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(span)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("ftruncate the shared memfd: %w", err)
	}
	return fd, nil
}

// openShared opens rank 0's memfd of the range (/proc/pid/fd/fd).
func openShared(s shared, span int) (int, error) {
	fd, size, err := procfd.Open(s.pid, s.fd, true)
	if err != nil {
		return -1, fmt.Errorf("rank 0's shared memfd: %w", err)
	}
	if size != int64(span) {
		unix.Close(fd)
		return -1, fmt.Errorf("rank 0's shared memfd has %d bytes, not %d", size, span)
	}
	return fd, nil
}

// closeShared closes the memfd of the range, if this rank has it.
func (d *DSM) closeShared() {
	if d.shareFD >= 0 {
		unix.Close(d.shareFD)
		d.shareFD = -1
	}
}

// HostShared reports whether the ranks of the job, all on this host,
// share the memory of every region (dsm.host_share): one copy per host,
// read and written with no page faults.
func (d *DSM) HostShared() bool { return d.shareFD >= 0 }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// startLocal opens the userfaultfd and starts the pager.
func (d *DSM) startLocal(cfg config.DSMConfig) error {
	u, err := uffd.Open(uffd.FeaturePagefaultFlagWP | uffd.FeatureMissingShmem | uffd.FeatureWPHugetlbfsShmem)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	need := uffd.FeaturePagefaultFlagWP | uffd.FeatureMissingShmem | uffd.FeatureWPHugetlbfsShmem
	if u.Features()&need != need {
		u.Close()
		return fmt.Errorf("%w: this kernel cannot write-protect shared memory with userfaultfd (features %#x; Linux 6.1 or later is needed)", ErrUnavailable, u.Features())
	}
	d.u = u
	c := d.rt.Contract()
	d.host = c.Host
	if d.host == "" {
		d.host, _ = rdmaio.HostID()
	}
	// A caller polls for its answer briefly (see package backoff).
	d.calls, err = callq.New(256, backoff.Caller(2*c.LocalSize))
	if err != nil {
		return err
	}
	host, advertise := listenHost(d.rt)
	addr, err := d.startPager(ctl.Hello{
		Rank: d.rank, Size: d.size, Job: c.Job, Secret: c.Secret, Host: host,
		PageSize: d.ps, Features: uint64(u.Features()), CachePages: cfg.PageCachePages, Prefetch: cfg.PrefetchPages,
		PrefetchMax:   prefetchMax(cfg.PrefetchPages),
		HomeMigration: cfg.HomeMigration,
		HostID:        d.host, TCPOnly: d.rt.Config().Transport.Kind == config.TransportTCP, LocalSize: c.LocalSize,
	})
	if err != nil {
		return err
	}
	if h, port, err := net.SplitHostPort(addr); err == nil && h == "0.0.0.0" {
		addr = net.JoinHostPort(advertise, port)
	}
	d.addr = addr
	return nil
}

// maxPrefetchWindow bounds the prefetch window in pages: a stream of read
// faults that each follow the previous one's window doubles it from
// dsm.prefetch_pages up to this (or 16 times dsm.prefetch_pages, if less).
const maxPrefetchWindow = 64

func prefetchMax(prefetch int) int {
	return max(prefetch, min(maxPrefetchWindow, 16*prefetch))
}

// listenHost returns the IP address the pager listens on (the one of the
// rank's own endpoint) and the host name other ranks reach it by.
func listenHost(rt Runtime) (listen, advertise string) {
	cards := rt.Cards()
	if r := rt.Rank(); r >= 0 && r < len(cards) {
		if h, _, err := net.SplitHostPort(cards[r].TCP); err == nil {
			if ip := net.ParseIP(h); ip != nil {
				return ip.String(), ip.String()
			}
			return "0.0.0.0", h
		}
	}
	return "127.0.0.1", "127.0.0.1"
}

// startPager re-executes this program as the rank's pager and hands it the
// userfaultfd. It returns the pager's address for the other pagers.
func (d *DSM) startPager(h ctl.Hello) (string, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(pair[0]), "dsm-pager-socket")
	theirs := os.NewFile(uintptr(pair[1]), "dsm-pager-socket")
	defer theirs.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{os.Args[0]}
	cmd.Env = append(os.Environ(), ctl.Env+"=1")
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3 = ctl.PagerFD
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// The parent-death signal follows the thread that started the child:
	// start it from a thread that lives exactly as long as the pager.
	startErr := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		unbind()
		if err := cmd.Start(); err != nil {
			startErr <- err
			close(d.exited)
			return
		}
		d.pid = cmd.Process.Pid
		startErr <- nil
		d.exit = cmd.Wait()
		close(d.exited)
	}()
	if err := <-startErr; err != nil {
		mine.Close()
		return "", fmt.Errorf("start the pager: %w", err)
	}
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return "", fmt.Errorf("pager socket: %w", err)
	}
	d.conn = c.(*net.UnixConn)
	go d.read()
	hb, _ := json.Marshal(h)
	f, err := d.request(ctl.Frame{Type: ctl.THello, Data: hb}, d.u.Fd(), d.calls.FD())
	if err != nil {
		return "", err
	}
	var ready ctl.Ready
	if err := json.Unmarshal(f.Data, &ready); err != nil {
		return "", fmt.Errorf("pager's answer to the hello: %w", err)
	}
	ring, err := bell.Dial(ready.Bell)
	if err != nil {
		return "", fmt.Errorf("pager's bell: %w", err)
	}
	d.ring, d.bellFile = ring, ready.Bell.File
	d.calls.SetRing(ring.Ring)
	return ready.Addr, nil
}

// abandon stops a DSM that failed to start.
func (d *DSM) abandon() {
	if d.conn != nil {
		d.mu.Lock()
		d.closing = true
		d.mu.Unlock()
		d.conn.Close()
		select {
		case <-d.exited:
		case <-time.After(5 * time.Second):
		}
	}
	if d.u != nil {
		d.u.Close()
	}
	if d.calls != nil {
		d.calls.Close()
	}
	if d.ring != nil {
		d.ring.Close()
	}
	d.removePagerFiles()
	d.closeBoard()
	d.closeShared()
}

// removePagerFiles removes the file of the pager's bell if the pager, gone
// now, left it, and the shared-memory segments of its queues to the other
// pagers of the host that no peer had mapped yet (removePagerSegments).
func (d *DSM) removePagerFiles() {
	if d.bellFile != "" {
		os.Remove(d.bellFile) // usually unlinked by the pager already
		d.bellFile = ""
	}
	d.removePagerSegments()
}

// removePagerSegments removes the shared-memory segments that the pager,
// once it has exited, left behind: a killed pager cannot unlink those no
// peer had mapped yet. (The launcher removes what a job's dead processes
// left after the job; a DSM started without it must not leave them.)
func (d *DSM) removePagerSegments() {
	if d.pid <= 0 {
		return
	}
	select {
	case <-d.exited:
	default:
		return // still running: its segments are its own
	}
	segs, err := shm.Leftovers(shm.DefaultDir, d.rt.Contract().Job)
	if err != nil {
		return // nothing listed, nothing to remove
	}
	for _, s := range segs {
		if s.Pid == d.pid {
			os.Remove(s.Path)
		}
	}
}

// distinctRanges gives each rank its own address range, so that the tests
// can run several ranks in one process. Page numbers, not addresses, are
// what the ranks' pagers share, so the protocol works the same.
var distinctRanges bool

// candidate returns the round-th address proposed for the DSM's range:
// one of 64 slots of 1 TiB from 16 TiB up, chosen by the job's secret,
// 128 GiB into the slot (clear of the Go heap's arena hints).
func candidate(secret []byte, round int) uintptr {
	h := sha256.Sum256(append([]byte("jiarun dsm range\x00"), secret...))
	slot := (int(h[0]) + round*17) % 64
	return uintptr(16+slot)<<40 + 128<<30
}

func reserve(addr uintptr, size int) error {
	p, err := unix.MmapPtr(-1, 0, addrPtr(addr), uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		return err
	}
	if uintptr(p) != addr {
		unix.MunmapPtr(p, uintptr(size))
		return fmt.Errorf("address %#x is taken", addr)
	}
	return nil
}

func unreserve(addr uintptr, size int) { unix.MunmapPtr(addrPtr(addr), uintptr(size)) }

// rereserve turns [addr, addr+size) of the range back into reserved,
// inaccessible address space.
func rereserve(addr uintptr, size int) {
	unix.MmapPtr(-1, 0, addrPtr(addr), uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
}

// read dispatches the pager's answers.
func (d *DSM) read() {
	r := ctl.NewReader(d.conn)
	for {
		f, err := r.Next()
		if err != nil {
			d.lose(fmt.Errorf("%w: %v", ErrPagerGone, err))
			return
		}
		if f.Type == ctl.TFatal {
			d.lose(&fatalError{string(f.Data)})
			return
		}
		d.mu.Lock()
		ch := d.pending[f.Req]
		delete(d.pending, f.Req)
		d.mu.Unlock()
		if ch != nil {
			ch <- f
		}
	}
}

// lose records that the pager can no longer answer. Once the DSM has
// started (and unless it is being closed), that ends the job: pages homed
// here are lost to every other rank, and threads of this rank may be stuck
// in faults nobody will serve.
func (d *DSM) lose(err error) {
	d.mu.Lock()
	if d.goneErr != nil {
		d.mu.Unlock()
		return
	}
	d.goneErr = err
	close(d.gone)
	abort := d.started && !d.closing
	if abort && d.board != nil {
		// Nobody waits for this rank on the board. Under mu: Close
		// unmaps the board (closeBoard) under it.
		d.board.Break()
	}
	d.mu.Unlock()
	if d.calls != nil {
		d.calls.Fail(err) // a closed call queue stays mapped
	}
	if !abort {
		return
	}
	var fe *fatalError
	if errors.As(err, &fe) {
		d.rt.Abort(1, fe.msg) // names the rank already
	}
	msg := err.Error()
	select {
	case <-d.exited:
		if d.exit != nil {
			msg += fmt.Sprintf(" (pager: %v)", d.exit)
		}
	case <-time.After(100 * time.Millisecond):
	}
	d.rt.Abort(1, fmt.Sprintf("shmem: rank %d: %s", d.rank, msg))
}

// fatalError is the pager's report of an error that stops the job.
type fatalError struct{ msg string }

func (e *fatalError) Error() string { return e.msg }
func (e *fatalError) Unwrap() error { return ErrPagerGone }

// request sends a frame (with descriptors) to the pager and waits for its
// answer. The waiting goroutine is parked, not spinning: its P is free for
// other goroutines.
func (d *DSM) request(f ctl.Frame, fds ...int) (ctl.Frame, error) {
	ch := make(chan ctl.Frame, 1)
	d.mu.Lock()
	if d.goneErr != nil {
		err := d.goneErr
		d.mu.Unlock()
		return ctl.Frame{}, err
	}
	d.reqSeq++
	f.Req = d.reqSeq
	d.pending[f.Req] = ch
	d.mu.Unlock()
	b := ctl.Append(nil, f)
	d.wmu.Lock()
	var err error
	if len(fds) > 0 {
		err = uffd.SendFDs(d.conn, b, fds...)
	} else {
		_, err = d.conn.Write(b)
	}
	d.wmu.Unlock()
	if err != nil {
		d.mu.Lock()
		delete(d.pending, f.Req)
		d.mu.Unlock()
		return ctl.Frame{}, fmt.Errorf("%w: %v", ErrPagerGone, err)
	}
	select {
	case a := <-ch:
		return a, nil
	case <-d.gone:
		select {
		case a := <-ch:
			return a, nil
		default:
		}
		d.mu.Lock()
		err := d.goneErr
		d.mu.Unlock()
		return ctl.Frame{}, err
	}
}

// callError is an error the pager reported for a call.
type callError struct {
	msg  string
	kind error
}

func (e *callError) Error() string { return e.msg }
func (e *callError) Unwrap() error { return e.kind }

func answerErr(f ctl.Frame) error {
	if f.A == 0 {
		return nil
	}
	return &callError{msg: string(f.Data), kind: ctl.CodeErr(f.A)}
}

func (d *DSM) errorf(call string, err error) error {
	return fmt.Errorf("shmem: rank %d: %s: %w", d.rank, call, err)
}

// call makes a synchronisation call through the pager. The call is named
// op in errors, with id unless op is a barrier's or Close.
func (d *DSM) call(kind protocol.EventKind, id int, op string) error {
	return d.callKind(int64(kind), id, op)
}

// callKind is call with the call queue's kind (callq.Claimed).
func (d *DSM) callKind(kind int64, id int, op string) error {
	name := func() string {
		switch protocol.EventKind(kind) {
		case protocol.EvBarrier, protocol.EvWait:
			return op + "()"
		}
		return fmt.Sprintf("%s(%d)", op, id)
	}
	d.mu.Lock()
	closed := d.closing
	d.mu.Unlock()
	if closed {
		return d.errorf(name(), ErrClosed)
	}
	code, msg, err := d.calls.Call(kind, int64(id))
	if err != nil {
		return d.errorf(name(), d.pagerErr(err))
	}
	if code == 0 {
		return nil
	}
	return &callError{msg: msg, kind: ctl.CodeErr(code)}
}

// pagerErr returns why the pager is gone, if it is, or else err.
func (d *DSM) pagerErr(err error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if errors.Is(err, callq.ErrGone) && d.goneErr != nil {
		return d.goneErr
	}
	return err
}

// Rank returns the rank this DSM belongs to.
func (d *DSM) Rank() int { return d.rank }

// Lock acquires lock id (any id ≥ 0; its manager is rank id mod size).
// Under scope consistency the holder sees every write made under the lock
// by its earlier holders. Locking a lock this rank holds is an error.
//
// A lock that this rank holds on to after its release (nobody else asked
// for it since; see protocol.Config.CacheLocks) is offered by the pager in
// the call queue while nothing was written since the last release: Lock
// then claims it and posts the call without waiting, and the pager steps
// it before any later fault or call of this rank.
func (d *DSM) Lock(id int) error {
	d.mu.Lock()
	_, held := d.held[id]
	if !held && !d.closing && d.calls.Quiet() && d.calls.Claim(int64(id)) {
		if d.held == nil {
			d.held = make(map[int]bool)
		}
		d.held[id] = true
		d.mu.Unlock()
		if err := d.calls.Post(int64(protocol.EvLock)|callq.Claimed, int64(id)); err != nil {
			return d.errorf(fmt.Sprintf("Lock(%d)", id), d.pagerErr(err))
		}
		d.postedLocks.Add(1)
		return nil
	}
	d.mu.Unlock()
	if err := d.call(protocol.EvLock, id, "Lock"); err != nil {
		return err
	}
	d.mu.Lock()
	if d.held == nil {
		d.held = make(map[int]bool)
	}
	d.held[id] = false
	d.mu.Unlock()
	return nil
}

// Unlock releases lock id: this rank's writes since it acquired the lock
// reach their homes before the next holder is granted it. Unlocking a lock
// this rank does not hold is an error.
//
// When no page has been written since the last release (the pager says so
// through the call queue), the release changes nothing in this rank's
// memory, and Unlock returns as soon as the pager has it: the pager steps
// it before any later fault or call of this rank.
func (d *DSM) Unlock(id int) error {
	kind := int64(protocol.EvUnlock)
	d.mu.Lock()
	claimed, held := d.held[id]
	if claimed {
		kind |= callq.Claimed
	}
	closed := d.closing
	if held && !closed && d.calls.Quiet() {
		delete(d.held, id)
		d.mu.Unlock()
		err := d.calls.Post(kind, int64(id))
		if claimed {
			d.calls.Unclaim(int64(id))
		}
		if err != nil {
			return d.errorf(fmt.Sprintf("Unlock(%d)", id), d.pagerErr(err))
		}
		d.posted.Add(1)
		return nil
	}
	d.mu.Unlock()
	if err := d.callKind(kind, id, "Unlock"); err != nil {
		return err
	}
	if claimed {
		d.calls.Unclaim(int64(id))
	}
	d.mu.Lock()
	delete(d.held, id)
	d.mu.Unlock()
	return nil
}

// Barrier is the coherence barrier: it waits for every rank, and every
// write made by any rank before it is seen by every rank after it. Calling
// it while holding a lock is an error.
//
// When every rank runs on one host, the ranks meet on the host's barrier
// board (package internal/board) first: a rank whose pager says that a
// barrier would publish nothing (callq.Client.Clean), that holds no lock
// and none of whose pages another rank read directly since the last
// release arrives clean, any other dirty. If all arrive clean, the
// barrier is over: the last to arrive wakes the others with one futex
// wake, and no pager takes part (each learns of the barrier later, in its
// place among its program's calls; see package pager). Otherwise every
// rank calls its pager for the full barrier, a dirty one at once.
func (d *DSM) Barrier() error {
	if d.board == nil {
		return d.call(protocol.EvBarrier, 0, "Barrier")
	}
	if !d.barMu.TryLock() {
		return d.errorf("Barrier()", protocol.ErrBusy)
	}
	defer d.barMu.Unlock()
	d.mu.Lock()
	inCS, closing := len(d.held) > 0, d.closing
	d.mu.Unlock()
	if closing {
		return d.errorf("Barrier()", ErrClosed)
	}
	c := d.board.Barrier()
	// The generation cannot complete without this arrival: it is the one
	// Arrive joins.
	gen, _ := c.Gen()
	d.board.SetSlot(d.rank, gen, uint32(d.calls.Head()))
	// The program's writes so far before the loads of the pager's flag and
	// bitmap (the pager stores to them before it reads this memory).
	board.Fence()
	clean := !inCS && d.calls.Clean() && !d.bitsSet()
	a, err := c.Arrive(!clean)
	if err != nil {
		return d.errorf("Barrier()", err)
	}
	if a.Gen != gen {
		return d.errorf("Barrier()", fmt.Errorf("arrived at generation %d of the barrier board, expected %d", a.Gen, gen))
	}
	dirty := !clean || a.Dirty
	if !dirty && !a.Last {
		if dirty, err = c.Await(gen, d.boardPoll, d.stopWait); err != nil {
			return d.errorf("Barrier()", err)
		}
	}
	if dirty {
		return d.call(protocol.EvBarrier, int(gen)+1, "Barrier")
	}
	d.calls.Announce(int64(protocol.EvLocalBarrier), int64(gen))
	return nil
}

// Wait is a plain barrier: it waits for every rank and orders no memory.
// When every rank runs on one host, the ranks meet on the host's barrier
// board only.
func (d *DSM) Wait() error { return d.wait("Wait") }

func (d *DSM) wait(op string) error {
	if d.board == nil {
		return d.call(protocol.EvWait, 0, op)
	}
	if !d.waitMu.TryLock() {
		return d.errorf(op+"()", protocol.ErrBusy)
	}
	defer d.waitMu.Unlock()
	if err := d.stopWait(); err != nil {
		return d.errorf(op+"()", err)
	}
	c := d.board.Wait()
	a, err := c.Arrive(false)
	if err == nil && !a.Last {
		_, err = c.Await(a.Gen, d.boardPoll, d.stopWait)
	}
	if err != nil {
		return d.errorf(op+"()", err)
	}
	return nil
}

// stopWait returns why a wait on the barrier board must end early: the
// pager is gone (the job is being aborted), or another rank's program
// ended without leaving the board (killed, say): the board is broken
// then, for every rank.
func (d *DSM) stopWait() error {
	d.mu.Lock()
	err := d.goneErr
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if r := d.board.Gone(); r >= 0 {
		d.board.Break()
		return fmt.Errorf("%w: rank %d's program ended", board.ErrBroken, r)
	}
	return nil
}

// SetCV sets condition variable id, releasing every WaitCV on it. Condition
// variables order no memory: pair them with locks.
func (d *DSM) SetCV(id int) error { return d.call(protocol.EvSetCV, id, "SetCV") }

// ResetCV clears condition variable id.
func (d *DSM) ResetCV(id int) error {
	return d.call(protocol.EvResetCV, id, "ResetCV")
}

// WaitCV waits until condition variable id is set.
func (d *DSM) WaitCV(id int) error {
	return d.call(protocol.EvWaitCV, id, "WaitCV")
}

// Stats returns what this rank's DSM did so far.
func (d *DSM) Stats() (Stats, error) {
	// After the calls made before (some posted without waiting).
	f, err := d.request(ctl.Frame{Type: ctl.TStats, A: int64(d.calls.Head())})
	if err != nil {
		return Stats{}, d.errorf("Stats()", err)
	}
	var s Stats
	if err := json.Unmarshal(f.Data, &s); err != nil {
		return Stats{}, d.errorf("Stats()", err)
	}
	return s, nil
}

// Alloc allocates a region of size bytes (rounded up to whole pages) with
// the pages' homes given by p. It is collective: every rank calls it with
// the same size and placement, in the same order, and gets the region at
// the same address. The region reads as zeros at first.
//
// When the ranks share the host's memory (HostShared), every rank maps the
// region's part of one memfd at its address, registered with nothing: the
// program's loads and stores reach the host's only copy of the region,
// without page faults. The pager gets a memfd of its own for the region
// (which nothing touches), so that it checks and agrees on the call as it
// does otherwise.
func (d *DSM) Alloc(size int, p Placement) (*Region, error) {
	d.coll.Lock()
	defer d.coll.Unlock()
	call := fmt.Sprintf("Alloc(%d bytes)", size)
	if d.closed {
		return nil, d.errorf(call, ErrClosed)
	}
	if size <= 0 {
		return nil, d.errorf(call, fmt.Errorf("%w: the size must be positive", ErrSize))
	}
	left := d.span - d.next*d.ps
	if size > left {
		return nil, d.errorf(call, fmt.Errorf("%w: %d bytes of the DSM's range are left (dsm.max_alloc = %d bytes)", ErrSize, left, d.span))
	}
	n := (size + d.ps - 1) / d.ps
	addr := d.base + uintptr(d.next*d.ps)
	length := n * d.ps
	fd, err := unix.MemfdCreate(fmt.Sprintf("jiarun-dsm-%d", d.next), unix.MFD_CLOEXEC)
	if err != nil {
		return nil, d.errorf(call, fmt.Errorf("memfd_create: %w", err))
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(length)); err != nil {
		return nil, d.errorf(call, fmt.Errorf("ftruncate: %w", err))
	}
	mapFD, off := fd, int64(0)
	if d.shareFD >= 0 {
		mapFD, off = d.shareFD, int64(d.next)*int64(d.ps)
	}
	ptr, err := unix.MmapPtr(mapFD, off, addrPtr(addr), uintptr(length), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED)
	if err != nil {
		return nil, d.errorf(call, fmt.Errorf("mmap at %#x: %w", addr, err))
	}
	undo := func() { rereserve(addr, length) }
	if d.shareFD < 0 {
		if _, err := d.u.Register(addr, uintptr(length), uffd.ModeMissing|uffd.ModeWP); err != nil {
			undo()
			return nil, d.errorf(call, err)
		}
	}
	args, _ := json.Marshal(ctl.AllocArgs{Size: size, Placement: p})
	f, err := d.request(ctl.Frame{Type: ctl.TAlloc, A: int64(d.next), B: int64(n), Data: args}, fd)
	if err == nil {
		err = answerErr(f)
	} else {
		err = d.errorf(call, err)
	}
	if err != nil {
		if d.shareFD < 0 {
			d.u.Unregister(addr, uintptr(length))
		}
		undo()
		return nil, err
	}
	r := &Region{b: unsafe.Slice((*byte)(ptr), length), memfd: -1, dsm: d, first: d.next}
	d.next += n
	d.allocatedPages.Store(int64(d.next))
	return r, nil
}

// Free frees a region from Alloc. It is collective, like Alloc: every rank
// frees the same region, in the same order. The region's memory is
// released; any later access to it stops the job with an error naming the
// access, and a second Free is an error.
func (d *DSM) Free(r *Region) error {
	d.coll.Lock()
	defer d.coll.Unlock()
	if r == nil || r.dsm != d {
		return d.errorf("Free()", errors.New("the region was not allocated by this DSM's Alloc"))
	}
	call := fmt.Sprintf("Free(region at %#x)", r.Addr())
	switch {
	case d.closed:
		return d.errorf(call, ErrClosed)
	case r.freed:
		return d.errorf(call, ErrFreed)
	}
	f, err := d.request(ctl.Frame{Type: ctl.TFree, A: int64(r.first)})
	if err != nil {
		return d.errorf(call, err)
	}
	if err := answerErr(f); err != nil {
		return err
	}
	r.freed = true
	if d.shareFD >= 0 {
		if err := d.unshare(r); err != nil {
			return d.errorf(call, err)
		}
	}
	return nil
}

// unshare releases the host's copy of a region freed by every rank and
// puts memory registered for missing-page faults in its place, so that a
// later access reaches the pager, which stops the job with an error
// naming it (as it does for a region that was never shared).
func (d *DSM) unshare(r *Region) error {
	addr, length := r.Addr(), r.Len()
	_, err := unix.MmapPtr(-1, 0, addrPtr(addr), uintptr(length), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
	if err != nil {
		rereserve(addr, length)
		return fmt.Errorf("the region was freed, but mapping its trap for later accesses failed: %w", err)
	}
	if _, err := d.u.Register(addr, uintptr(length), uffd.ModeMissing); err != nil {
		rereserve(addr, length)
		return fmt.Errorf("the region was freed, but registering its trap for later accesses failed: %w", err)
	}
	// Every rank has freed it (the pagers agreed on the call): rank 0
	// empties the host's copy.
	if d.rank == 0 {
		if err := uffd.PunchHole(d.shareFD, int64(r.first)*int64(d.ps), int64(length)); err != nil {
			return fmt.Errorf("the region was freed, but releasing its memory failed: %w", err)
		}
	}
	return nil
}

// Close ends this rank's use of the DSM. It is collective: it waits until
// every rank has closed (so that no rank's pages, homed here, are needed
// any more), then stops the pager and unmaps every region. With dsm.stats
// set it prints the rank's statistics on standard error. Closing twice is
// not an error.
func (d *DSM) Close() error {
	d.coll.Lock()
	defer d.coll.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	err := d.wait("Close")
	if err == nil && d.stats {
		if s, serr := d.Stats(); serr == nil {
			mode := ""
			if d.HostShared() {
				mode = " (host-shared memory)"
			}
			fmt.Fprintf(os.Stderr, "jia: rank %d: dsm stats%s: %+v\n", d.rank, mode, s)
		}
	}
	d.mu.Lock()
	d.closing = true
	d.mu.Unlock()
	if err == nil {
		_, err = d.request(ctl.Frame{Type: ctl.TBye})
		if err != nil {
			err = d.errorf("Close()", err)
		}
	}
	d.conn.Close()
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		if err == nil {
			err = d.errorf("Close()", errors.New("the pager did not exit"))
		}
	}
	unreserve(d.base, d.span)
	d.u.Close()
	d.calls.Close()
	d.ring.Close()
	d.removePagerFiles()
	d.closeBoard()
	d.closeShared()
	return err
}

// closeBoard unmaps the barrier board and the pager's bitmap.
func (d *DSM) closeBoard() {
	// lose, on the goroutine that reads the pager's frames, may break the
	// board until Close is done: it reads d.board under mu.
	d.mu.Lock()
	bd, mine := d.board, d.mine
	d.board, d.mine = nil, nil
	d.mu.Unlock()
	if bd != nil && bd != mine {
		bd.Close()
	}
	if mine != nil {
		mine.Close()
	}
	if d.bitsMem != nil {
		unix.Munmap(d.bitsMem)
		d.bits, d.bitsMem = nil, nil
	}
}

// unbind lets the calling thread, and so a process it starts, run on every
// processor this process may use. A rank bound to one processor (jiarun
// --bind-to core) would otherwise start its pager on that processor too,
// and a fault served on the faulting thread's own processor costs more
// than one served from another (dsmbench -floors). The kernel keeps only
// the processors the process's cpuset allows. If the call fails the pager
// shares its rank's processor, which works, only slower.
func unbind() {
	var all unix.CPUSet
	for c := range len(all) * 64 {
		all.Set(c)
	}
	_ = unix.SchedSetaffinity(0, &all)
}
