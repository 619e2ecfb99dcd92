package protocol

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// PageState is what a rank knows about one page.
type PageState uint8

// Page states. A page homed elsewhere is Invalid, Fetching, ReadOnly or
// Writable here; a page homed here is HomeUnmapped (never touched: zeros),
// HomeReadOnly or HomeWritable (written in the current interval).
const (
	Invalid PageState = iota
	Fetching
	ReadOnly
	Writable
	HomeUnmapped
	HomeReadOnly
	HomeWritable
)

var stateNames = [...]string{"Invalid", "Fetching", "ReadOnly", "Writable", "HomeUnmapped", "HomeReadOnly", "HomeWritable"}

func (s PageState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("PageState(%d)", s)
}

// pageEntry is the state of one page this rank has touched or heard of.
type pageEntry struct {
	id        PageID
	home      int
	state     PageState
	fetchSeq  uint64 // the request the page waits for (Fetching)
	flushing  int    // this rank's diffs of the page not yet acknowledged
	stale     bool   // Fetching: a notice arrived after the request left
	deferred  bool   // Fetching: the request waits until flushing is 0
	waiters   bool   // Fetching: a thread waits (else a prefetch)
	wantWrite bool   // Fetching: a writer waits: install writable with a twin
	slotWait  bool   // Invalid: a fault waits for a cache slot
	shared    bool   // home: another rank fetched it since its last barrier notice (JIAJIA's rdnt)
	twin      bool   // home: a twin exists (written while a barrier with migration was pending)
	pinned    bool   // announced as cached at a pending barrier: not evictable
	installed uint64 // the Step that installed it for a waiting thread: not evicted in that Step
	watch     bool   // home: writable and shared, its writes found by comparison (Config.Watch)
	guarded   bool   // home: write-protected at an interval's end because others held copies; else: written and write-protected at an interval's end
	hot       bool   // written again after that (see Config.Watch)
	quiet     uint8  // watched: intervals ended since it was last written
	refetches uint8  // barriers in a row it was refetched at without a fault (Config.Refetch)
	noticed   uint64 // the value of Machine.notices at its last write notice
	contested bool   // a copy invalidated while watched: not watched again
	// fromGrant: the copy held came with a lock's grant (Config.GrantPages).
	// writeGrant: such a copy was written since the last barrier (it holds
	// Machine.stats.Barriers+1 then, else anything else): the next grant
	// that brings the page installs it writable, with a twin, unless
	// grantsRW grants in a row did so already (see maxGrantsRW).
	fromGrant  bool
	grantsRW   uint8
	writeGrant uint64

	prev, next *pageEntry // LRU list of cached pages (ReadOnly, Writable)
	inLRU      bool
}

// region is an allocated range of pages.
type region struct {
	first PageID
	n     uint32
	place Placement
}

// pageSet is a set of pages that remembers insertion order, so that
// everything the Machine emits is deterministic.
type pageSet struct {
	m map[PageID]struct{}
	l []PageID
}

func (s *pageSet) add(p PageID) {
	if s.m == nil {
		s.m = make(map[PageID]struct{})
	}
	if _, ok := s.m[p]; ok {
		return
	}
	s.m[p] = struct{}{}
	s.l = append(s.l, p)
}

func (s *pageSet) addAll(ps []PageID) {
	for _, p := range ps {
		s.add(p)
	}
}

func (s *pageSet) reset() {
	clear(s.m)
	s.l = s.l[:0]
}

type pendingRelease struct {
	id    int
	pages []PageID
	mark  uint64 // flushes up to this sequence number must be acknowledged first
	order uint64 // the Order of the next diff to the lock's manager at the release
}

type pendingBarrier struct {
	mark    uint64
	order   uint64 // the Order of the next diff to the barrier manager at the arrival
	notices []Notice
	sent    bool
}

// pendingFlush is a diff batch not yet acknowledged.
type pendingFlush struct {
	left int // pages not yet acknowledged
	home int // the rank it went to
}

// lockMgr is the manager's state of one lock (JIAJIA's jialock_t).
type lockMgr struct {
	holder  int
	queue   []acqReq
	scope   int64
	notices map[PageID]stamp
	last    int  // the rank of the last grant, -1 before the first
	kept    bool // the holder keeps the lock after its release (Config.CacheLocks)
	recall  bool // and was asked to release it
}

// keptLock is a lock kept by this rank after its release (Config.CacheLocks).
type keptLock struct {
	pages   pageSet // written under the lock and released since its grant
	granted bool    // false while a recall overtook the grant
	recall  bool    // the manager wants it back: release it once free
	// The last release here: the flushes up to mark went to the manager
	// only, the first order of them (see yield).
	mark, order uint64
}

// grantKeep in a grant's Seq lets the grantee keep the lock (MsgGrant).
const grantKeep = 1

type acqReq struct {
	rank  int
	scope int64
	epoch uint64
}

// stamp records the release that last wrote a page under a lock.
type stamp struct {
	scope int64
	epoch uint64
}

type barrierMgr struct {
	epoch   uint64
	count   int
	notices map[PageID]int // index into order
	order   []Notice
}

type cvMgr struct {
	value   bool
	waiters []int
}

type cvKey struct {
	from int
	seq  uint64
}

// Machine is one rank's side of the home-based scope-consistency protocol
// (JIAJIA's), as a state machine: Step takes an event and returns the
// actions the engine must carry out. It does no I/O, starts no goroutines,
// reads no clock and is not safe for concurrent use.
type Machine struct {
	cfg Config
	me  int
	n   int
	ps  int

	regions []region
	pages   map[PageID]*pageEntry

	lruHead, lruTail *pageEntry // head: most recently faulted
	pfNext           PageID     // the page after the last read fault's prefetch window
	pfWin            int        // that window's size; 0: no read fault yet
	homeNext         PageID     // the same for faults on untouched home pages
	homeWin          int
	homePrev         PageID   // the page before the last window mapped backwards
	watching         []PageID // watched home pages (Config.Watch), in the order they became so
	watchingCopies   []PageID // watched copies of pages homed elsewhere (Config.Watch)
	served           []PageID // write-protected home pages that just became shared, to watch once their copies are sent (share)
	cached           int      // non-home pages Fetching, ReadOnly or Writable
	slotWaiters      []PageID

	seq       uint64
	flushes   map[uint64]pendingFlush // diff batch → what is not yet acknowledged
	diffOrder map[int]uint64          // next Order of diffs to each home
	diffNext  map[int]uint64          // next Order of diffs expected from each sender
	diffEarly map[cvKey]*Message
	// Releases and barrier arrivals whose sender's diffs with a lower
	// Order have not all arrived here yet (see checkPending).
	afterDiffs []*Message

	interval   pageSet // pages written in the current interval
	barrierSet pageSet // pages written since the last barrier (for its notices)
	held       map[int]*pageSet
	acquiring  map[int]bool
	// notices counts the invalidations (write notices heard of); an
	// acquire records its value when it is sent (see Config.GrantPages).
	notices   uint64
	acquireAt map[int]uint64
	releases  []*pendingRelease
	scopes    map[int]int64 // last scope of each lock granted here (JIAJIA's myscope)
	kept      map[int]*keptLock
	bar       *pendingBarrier
	epoch     uint64
	waitSeq   uint64
	waiting   bool
	cvSeq     map[int]uint64 // next condition-variable sequence number per manager
	cvWaits   map[int]int

	locks   map[int]*lockMgr
	barMgr  barrierMgr
	waitMgr struct {
		seq   uint64
		count int
	}
	cvs     map[int]*cvMgr
	cvNext  map[int]uint64
	cvEarly map[cvKey]*Message

	later []*Message // from a later epoch, for pages not homed here yet
	loop  []*Message // messages to this rank itself
	acts  []Action
	steps uint64
	stats Stats
}

// New returns the Machine of rank cfg.Rank.
func New(cfg Config) (*Machine, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("shmem: protocol.New: rank %d of %d", cfg.Rank, cfg.Size)
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = 4096
	}
	if cfg.PageSize < 0 || cfg.CachePages < 0 || cfg.Prefetch < 0 || cfg.PrefetchMax < 0 || cfg.Refetch < 0 || cfg.Refetch > 255 || cfg.BarrierManager < 0 || cfg.BarrierManager >= cfg.Size {
		return nil, fmt.Errorf("shmem: rank %d: protocol.New: bad configuration %+v", cfg.Rank, cfg)
	}
	cfg.Direct = slices.Clone(cfg.Direct)
	return &Machine{
		cfg:       cfg,
		me:        cfg.Rank,
		n:         cfg.Size,
		ps:        cfg.PageSize,
		pages:     make(map[PageID]*pageEntry),
		flushes:   make(map[uint64]pendingFlush),
		diffOrder: make(map[int]uint64),
		diffNext:  make(map[int]uint64),
		diffEarly: make(map[cvKey]*Message),
		held:      make(map[int]*pageSet),
		acquiring: make(map[int]bool),
		acquireAt: make(map[int]uint64),
		scopes:    make(map[int]int64),
		kept:      make(map[int]*keptLock),
		cvSeq:     make(map[int]uint64),
		cvWaits:   make(map[int]int),
		locks:     make(map[int]*lockMgr),
		cvs:       make(map[int]*cvMgr),
		cvNext:    make(map[int]uint64),
		cvEarly:   make(map[cvKey]*Message),
	}, nil
}

// SetDirect sets Config.Direct: the homes whose pages this rank reads
// directly from now on.
func (m *Machine) SetDirect(direct []bool) { m.cfg.Direct = slices.Clone(direct) }

// direct reports whether this rank reads pages homed on h directly.
func (m *Machine) direct(h int) bool {
	return h >= 0 && h < len(m.cfg.Direct) && m.cfg.Direct[h] && !m.cfg.HomeMigration && h != m.me
}

// Watched returns the home pages whose writes the engine finds by
// comparison (Config.Watch). The slice is the Machine's: read it before
// the next Step.
func (m *Machine) Watched() []PageID { return m.watching }

// WatchedCopies returns the cached copies of pages homed elsewhere that
// stay writable across intervals (Config.Watch), whose writes the engine
// finds by comparison with their twins, which stay: they are the base of
// the pages' next diffs. The slice is the Machine's: read it before the
// next Step.
func (m *Machine) WatchedCopies() []PageID { return m.watchingCopies }

// Quiet reports whether the current interval is empty and no home page
// is watched: no page has been written since the last release, so ending
// the interval now would change neither the protection nor the content of
// any page of this rank's memory. An Unlock then needs nothing of the
// program's memory, and the program may go on without waiting for it,
// provided its later faults are stepped after the Unlock.
func (m *Machine) Quiet() bool {
	return len(m.interval.l) == 0 && len(m.watching) == 0 && len(m.watchingCopies) == 0
}

// BarrierQuiet reports whether a barrier now would publish nothing and
// need nothing of the others: the machine is Quiet, no page was written
// since the last barrier, no release waits for acknowledgements and no
// barrier is in progress. If it holds on every rank (and, for the home
// pages others read without asking, nobody read one since the last
// release: see Config.Direct), the ranks may meet outside the protocol
// and each step EvLocalBarrier instead; locks held are the caller's
// concern.
func (m *Machine) BarrierQuiet() bool {
	return m.Quiet() && len(m.barrierSet.l) == 0 && len(m.releases) == 0 && m.bar == nil && len(m.flushes) == 0
}

// Config returns the configuration the Machine runs with.
func (m *Machine) Config() Config { return m.cfg }

// Stats returns the counters so far.
func (m *Machine) Stats() Stats { return m.stats }

// Epoch returns the number of barriers this rank has completed.
func (m *Machine) Epoch() uint64 { return m.epoch }

// PageState returns the state of page p here and its home, or ok false
// when p is outside every region.
func (m *Machine) PageState(p PageID) (s PageState, home int, ok bool) {
	if e := m.pages[p]; e != nil {
		return e.state, e.home, true
	}
	h, ok := m.regionHome(p)
	if !ok {
		return 0, 0, false
	}
	if h == m.me {
		return HomeUnmapped, h, true
	}
	return Invalid, h, true
}

// Held returns the locks this rank holds, in increasing order.
func (m *Machine) Held() []int {
	ids := make([]int, 0, len(m.held))
	for id := range m.held {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// Step applies one event and returns the actions to carry out, in order.
// The returned slice is reused by the next Step. An error of the ErrLock…,
// ErrBarrierInCS, ErrBusy, ErrBadID, ErrNoRegion, ErrPlacement or ErrOverlap
// kind leaves the Machine unchanged and returns no actions.
func (m *Machine) Step(ev Event) ([]Action, error) {
	m.acts = m.acts[:0]
	m.steps++
	if err := m.step(ev); err != nil {
		return m.acts, &Error{Rank: m.me, Call: callName(ev), Err: err}
	}
	for len(m.loop) > 0 {
		msg := m.loop[0]
		m.loop = m.loop[1:]
		if err := m.recv(msg); err != nil {
			return m.acts, &Error{Rank: m.me, Call: "Recv(" + msg.String() + ")", Err: err}
		}
	}
	m.loop = m.loop[:0]
	if len(m.slotWaiters) > 0 {
		m.retrySlotWaiters()
	}
	return m.acts, nil
}

func callName(ev Event) string {
	switch ev.Kind {
	case EvReadFault, EvWriteFault:
		return fmt.Sprintf("%v(page %d)", ev.Kind, ev.Page)
	case EvRecv:
		return "Recv(" + ev.Msg.String() + ")"
	case EvLock, EvUnlock, EvSetCV, EvResetCV, EvWaitCV:
		return fmt.Sprintf("%v(%d)", ev.Kind, ev.ID)
	case EvEvict:
		return fmt.Sprintf("Evict(%d)", ev.N)
	case EvAlloc:
		return fmt.Sprintf("Alloc(page %d, %d pages)", ev.Page, ev.N)
	case EvFree:
		return fmt.Sprintf("Free(page %d)", ev.Page)
	case EvShared, EvWritten:
		return fmt.Sprintf("%v(%d pages)", ev.Kind, len(ev.Pages))
	default:
		return ev.Kind.String() + "()"
	}
}

func (m *Machine) step(ev Event) error {
	switch ev.Kind {
	case EvReadFault:
		return m.fault(ev.Page, false)
	case EvWriteFault:
		return m.fault(ev.Page, true)
	case EvRecv:
		if ev.Msg == nil || ev.Msg.To != m.me || ev.Msg.From == m.me {
			return protoErr("message not addressed to this rank, or from it")
		}
		return m.recv(ev.Msg)
	case EvLock:
		return m.lock(ev.ID)
	case EvUnlock:
		return m.unlock(ev.ID)
	case EvBarrier:
		return m.barrier()
	case EvWait:
		return m.wait()
	case EvSetCV, EvResetCV, EvWaitCV:
		return m.cvCall(ev.Kind, ev.ID)
	case EvEvict:
		for i := 0; i < ev.N; i++ {
			v := m.victim()
			if v == nil {
				break
			}
			m.evict(v)
		}
		m.retrySlotWaiters()
		return nil
	case EvAlloc:
		return m.alloc(ev.Page, ev.N, ev.Placement)
	case EvFree:
		return m.free(ev.Page)
	case EvShared:
		m.sharedDirect(ev.Pages)
		return nil
	case EvWritten:
		m.written(ev.Pages)
		return nil
	case EvLocalBarrier:
		return m.localBarrier()
	default:
		return fmt.Errorf("unknown event kind %d", ev.Kind)
	}
}

func (m *Machine) recv(msg *Message) error {
	if msg.From < 0 || msg.From >= m.n {
		return protoErr("sender %d outside 0..%d", msg.From, m.n-1)
	}
	switch msg.Kind {
	case MsgPageReq:
		return m.onPageReq(msg)
	case MsgPageGrant:
		return m.onPageGrant(msg)
	case MsgDiff:
		return m.onDiff(msg)
	case MsgDiffAck:
		m.onDiffAck(msg)
		return nil
	case MsgAcquire:
		return m.onAcquire(msg)
	case MsgGrant:
		return m.onGrant(msg)
	case MsgRelease, MsgBarrier:
		if msg.Order > m.diffNext[msg.From] {
			// Sent before the acknowledgement of diffs to this rank that
			// have not arrived yet: they must be applied first.
			m.afterDiffs = append(m.afterDiffs, msg)
			return nil
		}
		if msg.Kind == MsgRelease {
			return m.onRelease(msg)
		}
		return m.onBarrier(msg)
	case MsgBarrierGrant:
		return m.onBarrierGrant(msg)
	case MsgWait:
		return m.onWait(msg)
	case MsgWaitGrant:
		return m.onWaitGrant(msg)
	case MsgSetCV, MsgResetCV, MsgWaitCV:
		return m.onCV(msg)
	case MsgCVGrant:
		return m.onCVGrant(msg)
	case MsgRecall:
		return m.onRecall(msg)
	default:
		return protoErr("unknown message kind %d", msg.Kind)
	}
}

// emit appends an action.
func (m *Machine) emit(a Action) { m.acts = append(m.acts, a) }

// send sends msg (to itself through the loopback queue).
func (m *Machine) send(msg *Message) {
	msg.From = m.me
	if msg.To == m.me {
		m.loop = append(m.loop, msg)
		return
	}
	m.stats.MsgsSent++
	m.emit(Action{Kind: ActSend, Msg: msg})
}

func (m *Machine) done(op EventKind, id int) { m.emit(Action{Kind: ActDone, Op: op, ID: id}) }

func (m *Machine) nextSeq() uint64 {
	m.seq++
	return m.seq
}

// ---- regions -------------------------------------------------------------

func (m *Machine) findRegion(p PageID) *region {
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].first+PageID(m.regions[i].n) > p })
	if i < len(m.regions) && m.regions[i].first <= p {
		return &m.regions[i]
	}
	return nil
}

func (m *Machine) regionHome(p PageID) (int, bool) {
	r := m.findRegion(p)
	if r == nil {
		return 0, false
	}
	return r.place.home(uint32(p-r.first), m.n), true
}

// home returns the current home of p.
func (m *Machine) home(p PageID) (int, bool) {
	if e := m.pages[p]; e != nil {
		return e.home, true
	}
	return m.regionHome(p)
}

// entry returns the entry of p, creating it for a page of a region.
func (m *Machine) entry(p PageID) *pageEntry {
	if e := m.pages[p]; e != nil {
		return e
	}
	h, ok := m.regionHome(p)
	if !ok {
		return nil
	}
	e := &pageEntry{id: p, home: h}
	if h == m.me {
		e.state = HomeUnmapped
	}
	m.pages[p] = e
	return e
}

func (m *Machine) alloc(first PageID, n int, pl Placement) error {
	if n <= 0 || uint64(first)+uint64(n) > math.MaxUint32+1 {
		return fmt.Errorf("%w: %d pages from page %d", ErrPlacement, n, first)
	}
	if err := pl.check(n, m.n); err != nil {
		return fmt.Errorf("%w: %v", ErrPlacement, err)
	}
	last := uint64(first) + uint64(n)
	for _, r := range m.regions {
		if uint64(r.first) < last && uint64(first) < uint64(r.first)+uint64(r.n) {
			return fmt.Errorf("%w: pages %d..%d against %d..%d", ErrOverlap, first, last-1, r.first, uint64(r.first)+uint64(r.n)-1)
		}
	}
	pl.Homes = slices.Clone(pl.Homes)
	m.regions = append(m.regions, region{first: first, n: uint32(n), place: pl})
	sort.Slice(m.regions, func(i, j int) bool { return m.regions[i].first < m.regions[j].first })
	return nil
}

func (m *Machine) free(first PageID) error {
	i := slices.IndexFunc(m.regions, func(r region) bool { return r.first == first })
	if i < 0 {
		return fmt.Errorf("%w: no region starts at page %d", ErrNoRegion, first)
	}
	r := m.regions[i]
	m.regions = slices.Delete(m.regions, i, i+1)
	var zap []PageID
	ids := make([]PageID, 0)
	for p := range m.pages {
		if p >= r.first && uint64(p) < uint64(r.first)+uint64(r.n) {
			ids = append(ids, p)
		}
	}
	slices.Sort(ids)
	for _, p := range ids {
		e := m.pages[p]
		switch e.state {
		case Fetching:
			m.cached--
		case ReadOnly, Writable:
			m.lruRemove(e)
			m.cached--
			zap = append(zap, p)
			if e.state == Writable {
				m.emit(Action{Kind: ActDropTwin, Page: p})
			}
			if e.watch {
				m.unwatch(e)
			}
		case HomeReadOnly, HomeWritable:
			zap = append(zap, p)
			if e.twin || e.watch {
				m.emit(Action{Kind: ActDropTwin, Page: p})
			}
			if e.watch {
				m.unwatch(e)
			}
		}
		delete(m.pages, p)
	}
	if len(zap) > 0 {
		m.emit(Action{Kind: ActZap, Pages: zap})
	}
	m.retrySlotWaiters()
	return nil
}

// ---- LRU of cached pages ------------------------------------------------

func (m *Machine) touch(e *pageEntry) {
	if e.inLRU {
		if m.lruHead == e {
			return
		}
		m.lruRemove(e)
	}
	e.inLRU = true
	e.prev, e.next = nil, m.lruHead
	if m.lruHead != nil {
		m.lruHead.prev = e
	}
	m.lruHead = e
	if m.lruTail == nil {
		m.lruTail = e
	}
}

func (m *Machine) lruRemove(e *pageEntry) {
	if !e.inLRU {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		m.lruHead = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		m.lruTail = e.prev
	}
	e.prev, e.next, e.inLRU = nil, nil, false
}

// victim returns the least recently faulted page that may be dropped now.
// While a barrier is pending a dirty page stays (its diff could reach a
// home that is about to migrate), and so does a page announced as cached.
// A page installed by the current Step for a waiting thread stays too, so
// that the thread gets to use it; faults still waiting for a slot are
// retried at the next Step.
func (m *Machine) victim() *pageEntry {
	for e := m.lruTail; e != nil; e = e.prev {
		if e.pinned || (e.state == Writable && m.bar != nil) || e.installed == m.steps {
			continue
		}
		return e
	}
	return nil
}

// freeSlot reports whether a page can be cached without eviction.
func (m *Machine) freeSlot() bool { return m.cfg.CachePages == 0 || m.cached < m.cfg.CachePages }

// takeSlot makes room for one more cached page, evicting if it must.
func (m *Machine) takeSlot() bool {
	if m.freeSlot() {
		return true
	}
	v := m.victim()
	if v == nil {
		return false
	}
	m.evict(v)
	return true
}

// evict drops a cached page, sending its diff home first if it is dirty
// (JIAJIA's findposition/flushpage). The page stays in the interval's write
// notices.
func (m *Machine) evict(e *pageEntry) {
	m.lruRemove(e)
	m.cached--
	if e.state == Writable {
		m.unwatchCopy(e, false)
		m.flush([]*pageEntry{e})
	}
	e.state = Invalid
	m.emit(Action{Kind: ActZap, Pages: []PageID{e.id}})
	m.stats.Evictions++
}

func (m *Machine) retrySlotWaiters() {
	for len(m.slotWaiters) > 0 {
		e := m.pages[m.slotWaiters[0]]
		if e == nil || !e.slotWait || e.state != Invalid {
			if e != nil {
				e.slotWait = false
			}
			m.slotWaiters = m.slotWaiters[1:]
			continue
		}
		if !m.takeSlot() {
			return
		}
		m.slotWaiters = m.slotWaiters[1:]
		e.slotWait = false
		e.state = Fetching
		m.cached++
		m.request([]*pageEntry{e})
	}
}
