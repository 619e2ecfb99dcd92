package protocol

import (
	"math"
	"slices"
)

// ---- faults -------------------------------------------------------------

func (m *Machine) fault(p PageID, write bool) error {
	e := m.entry(p)
	if e == nil {
		return ErrNoRegion
	}
	if write {
		m.stats.WriteFaults++
	} else {
		m.stats.ReadFaults++
	}
	if e.home == m.me {
		m.stats.HomeFaults++
		m.homeFault(e, write)
		return nil
	}
	e.refetches = 0
	switch e.state {
	case Invalid:
		e.waiters = true
		e.wantWrite = e.wantWrite || write
		if e.slotWait {
			return nil
		}
		if !m.takeSlot() {
			e.slotWait = true
			m.slotWaiters = append(m.slotWaiters, p)
			return nil
		}
		e.state = Fetching
		m.cached++
		batch := []*pageEntry{e}
		if !write {
			batch = m.prefetch(batch, p, m.window(p))
		}
		m.request(batch)
	case Fetching:
		e.waiters = true
		e.wantWrite = e.wantWrite || write
	case ReadOnly:
		m.touch(e)
		if !write {
			m.emit(Action{Kind: ActWake, Page: p})
			return nil
		}
		// Write to a valid cached page: twin it, then let the writer in.
		// Written again after an interval's end protected it: a candidate
		// for watching (Config.Watch).
		e.hot = e.hot || e.guarded
		if e.fromGrant {
			e.writeGrant = m.stats.Barriers + 1
		}
		m.emit(Action{Kind: ActMakeTwin, Page: p})
		m.emit(Action{Kind: ActUnprotect, Page: p})
		e.state = Writable
		m.interval.add(p)
	case Writable:
		m.touch(e)
		m.emit(Action{Kind: ActWake, Page: p})
	}
	return nil
}

// homeFault handles a fault on a page homed here. Home pages have no twin:
// writes go straight into the home copy, and the write fault only records
// the page for the interval's write notices (JIAJIA: home[].wtnt |= 3).
func (m *Machine) homeFault(e *pageEntry, write bool) {
	// While a barrier with home migration is pending, the page may move
	// away at the barrier; a twin then lets its new writes go to the new
	// home as a diff.
	twin := write && m.bar != nil && m.cfg.HomeMigration
	switch {
	case e.state == HomeUnmapped:
		// A page nobody else holds a copy of is mapped writable even for
		// a read: its writes need no notice until another rank fetches
		// it (onPageReq, sharedDirect), so a later write costs no fault.
		// Not with home migration, where every written home page is
		// tracked.
		writable := write || (!e.shared && !m.cfg.HomeMigration)
		// A page read directly elsewhere while it was unmapped here
		// (share) is watched: mapped writable, with a snapshot (zeros).
		watch := !writable && e.shared && m.canWatch()
		self := Action{Kind: ActInstall, Page: e.id, Writable: writable || watch, Twin: twin || watch}
		if m.cfg.HomeMigration {
			m.emit(self)
		} else {
			m.homeAhead(self)
		}
		switch {
		case writable:
			e.state = HomeWritable
			e.twin = twin
		case watch:
			m.startWatch(e)
		default:
			e.state = HomeReadOnly
		}
		if write {
			m.interval.add(e.id)
		}
	case e.state == HomeReadOnly && write:
		if twin {
			m.emit(Action{Kind: ActMakeTwin, Page: e.id})
			e.twin = true
		}
		// Written again after it was protected for others' copies: a
		// candidate for watching (Config.Watch) at the end of an interval.
		e.hot = e.hot || e.guarded
		m.emit(Action{Kind: ActUnprotect, Page: e.id})
		e.state = HomeWritable
		m.interval.add(e.id)
	default:
		m.emit(Action{Kind: ActWake, Page: e.id})
	}
}

// homeAhead maps, with a page homed here that was never touched, the
// untouched home pages around it (zeros, like it), as many after it as the
// prefetch window says and as many before it: the program usually goes on
// to touch them, in one direction or the other, and mapping them now
// spares a fault each. They are mapped writable but not noticed as
// written: nobody else holds a copy of them yet, and a home page that is
// writable while another rank fetches it is noticed then (onPageReq). The
// window grows while the faults follow each other's windows, either way.
// Not with home migration, where every written home page is tracked.
func (m *Machine) homeAhead(self Action) {
	p := self.Page
	w := m.cfg.Prefetch
	if w > 0 && m.cfg.PrefetchMax > w && m.homeWin > 0 && (p == m.homeNext || p == m.homePrev) {
		w = min(2*m.homeWin, m.cfg.PrefetchMax)
	}
	r := m.findRegion(p)
	end := uint64(r.first) + uint64(r.n)
	// The pages before p first, so that the installs ascend (the engine
	// installs a run of them at once).
	b := 0
	for b < w && uint64(p) >= uint64(r.first)+uint64(b+1) && m.homeUntouched(p-PageID(b+1)) {
		b++
	}
	for q := p - PageID(b); q < p; q++ {
		m.homeMap(q)
	}
	m.emit(self)
	for i := 1; i <= w && uint64(p)+uint64(i) < end && m.homeUntouched(p+PageID(i)); i++ {
		m.homeMap(p + PageID(i))
	}
	m.homeWin, m.homeNext = w, p+PageID(w)+1
	if lo := p - PageID(b); lo > r.first {
		m.homePrev = lo - 1
	} else {
		m.homePrev = math.MaxUint32
	}
}

// homeUntouched says whether q is a home page never touched that no other
// rank read (a page another rank read directly must be noticed when
// written: it is mapped when the program touches it).
func (m *Machine) homeUntouched(q PageID) bool {
	e := m.entry(q)
	return e != nil && e.home == m.me && e.state == HomeUnmapped && !e.shared
}

// homeMap maps an untouched home page writable.
func (m *Machine) homeMap(q PageID) {
	m.emit(Action{Kind: ActInstall, Page: q, Writable: true})
	m.pages[q].state = HomeWritable
}

// window returns how many pages to prefetch after a read fault on p: the
// window grows (Config.PrefetchMax) while the read faults follow each
// other's windows, as readahead does.
func (m *Machine) window(p PageID) int {
	w := m.cfg.Prefetch
	if w > 0 && m.cfg.PrefetchMax > w && m.pfWin > 0 && p == m.pfNext {
		w = min(2*m.pfWin, m.cfg.PrefetchMax)
	}
	m.pfWin, m.pfNext = w, p+PageID(w)+1
	return w
}

// prefetch adds to batch the pages after p, up to w of them, that are
// invalid here, homed elsewhere and fit in free cache slots.
func (m *Machine) prefetch(batch []*pageEntry, p PageID, w int) []*pageEntry {
	r := m.findRegion(p)
	end := uint64(r.first) + uint64(r.n)
	for i := 1; i <= w && uint64(p)+uint64(i) < end; i++ {
		if !m.freeSlot() {
			break
		}
		q := m.entry(p + PageID(i))
		if q.home == m.me || q.state != Invalid || q.flushing > 0 || q.slotWait {
			continue
		}
		q.state = Fetching
		q.refetches = 0 // fetched for a fault, as if faulted on
		m.cached++
		m.stats.Prefetched++
		batch = append(batch, q)
	}
	return batch
}

// request sends page requests for Fetching pages, one message per home.
func (m *Machine) request(batch []*pageEntry) {
	for len(batch) > 0 {
		h := batch[0].home
		seq := m.nextSeq()
		var pages []PageID
		rest := batch[:0]
		for _, e := range batch {
			if e.home != h {
				rest = append(rest, e)
				continue
			}
			e.fetchSeq = seq
			e.stale = false
			if e.flushing > 0 {
				// Our own diff of the page must reach home first.
				e.deferred = true
				continue
			}
			e.deferred = false
			pages = append(pages, e.id)
		}
		batch = rest
		if len(pages) > 0 {
			m.stats.PagesFetched += uint64(len(pages))
			if m.direct(h) {
				// The engine reads them and hands back the grant.
				m.emit(Action{Kind: ActReadDirect, Msg: &Message{Kind: MsgPageGrant, From: h, To: m.me, Seq: seq, Epoch: m.epoch, Pages: pages}})
				continue
			}
			m.send(&Message{Kind: MsgPageReq, To: h, Seq: seq, Epoch: m.epoch, Pages: pages})
		}
	}
}

// onPageReq serves a page request at the home.
func (m *Machine) onPageReq(msg *Message) error {
	mine, others, err := m.splitByHome(msg.Pages)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		if msg.Epoch > m.epoch {
			m.later = append(m.later, msg)
			return nil
		}
		if msg.Epoch == m.epoch {
			return protoErr("page request for pages homed elsewhere")
		}
		for _, g := range others {
			// Homes moved at a barrier the sender has not passed yet.
			fw := *msg
			fw.To, fw.Pages, fw.Epoch = g.home, g.pages, m.epoch
			m.forward(&fw)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	twins := false
	for _, p := range mine {
		e := m.pages[p]
		// Written while a barrier with home migration is pending: the
		// copy served is the twin, so that the diff of the writes since
		// the twin fits it if this copy becomes the page's next home.
		// Served as it is now, a byte written since and written back to
		// its twin's value would be in the copy but not in the diff.
		twins = twins || e.twin
		switch {
		case e.state == HomeUnmapped && !e.shared && m.canWatch():
			// Watched from now on (see share), mapped writable with a
			// snapshot (zeros): made writable later, a page mapped
			// write-protected would still cost the kernel a fault at its
			// first write.
			m.emit(Action{Kind: ActInstall, Page: p, Writable: true, Twin: true})
			m.startWatch(e)
		case e.state == HomeUnmapped:
			m.emit(Action{Kind: ActInstall, Page: p})
			e.state = HomeReadOnly
		case e.state == HomeWritable:
			// Writable across intervals while nobody else held a copy: from
			// now on its writes must become notices, so it counts as written
			// in this interval and is write-protected (or watched) at its
			// end.
			m.interval.add(p)
		}
		m.share(e)
	}
	m.stats.PagesServed += uint64(len(mine))
	m.stats.MsgsSent++
	m.emit(Action{Kind: ActSendPages, Twin: twins, Msg: &Message{Kind: MsgPageGrant, From: m.me, To: msg.From, Seq: msg.Seq, Epoch: m.epoch, Pages: mine}})
	m.watchServed()
	return nil
}

// sharedDirect notes that other ranks read pages homed here directly
// (Config.Direct): as if it had served them (onPageReq), their writes from
// now on must become notices. A page still unmapped here stays so (the
// reader read zeros) and counts as written when it is mapped writable.
func (m *Machine) sharedDirect(pages []PageID) {
	for _, p := range pages {
		e := m.entry(p)
		if e == nil || e.home != m.me {
			continue // freed since
		}
		if e.state == HomeWritable {
			m.interval.add(p)
		}
		m.share(e)
		m.stats.PagesServed++
	}
	m.watchServed()
}

// share notes that another rank holds a copy of e, a page homed here
// (JIAJIA's rdnt). A page write-protected here that becomes shared is
// watched as soon as its copy is sent (watchServed), so that the home's
// next write costs no fault: a snapshot and a few comparisons cost far
// less. One writable here counts as written in the current interval (the
// callers see to it) and is watched from its end on (endInterval). A page
// that others only read is write-protected again after watchQuiet
// intervals, and then watched again only once written (it stays shared
// until a barrier notices its writes).
func (m *Machine) share(e *pageEntry) {
	if e.shared {
		return
	}
	e.shared = true
	if e.state == HomeReadOnly && m.canWatch() {
		m.served = append(m.served, e.id)
	}
}

// watchServed watches the write-protected home pages that just became
// shared (share), once their copies went out, while there is room: their
// snapshots are taken while they are still protected (all of them first,
// so that the engine reads runs of consecutive pages at once), then they
// are made writable, their writes from then on found by comparison before
// each release. They count as written only once such writes are found.
func (m *Machine) watchServed() {
	n := 0
	for _, p := range m.served {
		e := m.pages[p]
		if e == nil || e.state != HomeReadOnly || e.watch || e.twin || !m.canWatch() {
			continue
		}
		m.emit(Action{Kind: ActMakeTwin, Page: p})
		m.startWatch(e)
		m.served[n] = p
		n++
	}
	for _, p := range m.served[:n] {
		m.emit(Action{Kind: ActUnprotect, Page: p})
	}
	m.served = m.served[:0]
}

// canWatch reports whether one more page may be watched (Config.Watch).
func (m *Machine) canWatch() bool {
	return m.cfg.Watch > 0 && !m.cfg.HomeMigration && len(m.watching)+len(m.watchingCopies) < m.cfg.Watch
}

// startWatch notes that e, a home page, is writable with a snapshot from
// now on, its writes found by comparison before each release.
func (m *Machine) startWatch(e *pageEntry) {
	e.state = HomeWritable
	e.watch = true
	e.quiet = 0
	m.watching = append(m.watching, e.id)
}

// forward passes a message on unchanged but for its destination.
func (m *Machine) forward(msg *Message) {
	m.stats.MsgsSent++
	if msg.To == m.me {
		m.loop = append(m.loop, msg)
		return
	}
	m.emit(Action{Kind: ActSend, Msg: msg})
}

type homeGroup struct {
	home  int
	pages []PageID
}

// splitByHome returns the pages homed here (their entries exist afterwards)
// and the others grouped by home, in order of first appearance.
func (m *Machine) splitByHome(pages []PageID) (mine []PageID, others []homeGroup, err error) {
	for _, p := range pages {
		e := m.entry(p)
		if e == nil {
			return nil, nil, protoErr("page %d outside every region", p)
		}
		if e.home == m.me {
			mine = append(mine, p)
			continue
		}
		i := slices.IndexFunc(others, func(g homeGroup) bool { return g.home == e.home })
		if i < 0 {
			others = append(others, homeGroup{home: e.home})
			i = len(others) - 1
		}
		others[i].pages = append(others[i].pages, p)
	}
	return mine, others, nil
}

func (m *Machine) onPageGrant(msg *Message) error {
	if len(msg.Data) != len(msg.Pages)*m.ps {
		return protoErr("grant of %d pages carries %d bytes", len(msg.Pages), len(msg.Data))
	}
	for i, p := range msg.Pages {
		e := m.pages[p]
		if e == nil || e.state != Fetching || e.fetchSeq != msg.Seq || e.deferred {
			continue // an answer nobody waits for any more
		}
		if e.stale {
			// A write notice for the page arrived after the request left:
			// the data may predate the writes we must see.
			if e.waiters {
				m.request([]*pageEntry{e})
			} else {
				e.state = Invalid
				m.cached--
			}
			continue
		}
		data := msg.Data[i*m.ps : (i+1)*m.ps]
		e.fromGrant = false
		if e.wantWrite {
			m.emit(Action{Kind: ActInstall, Page: p, Data: data, Writable: true, Twin: true})
			e.state = Writable
			m.interval.add(p)
		} else {
			m.emit(Action{Kind: ActInstall, Page: p, Data: data})
			e.state = ReadOnly
		}
		if e.waiters {
			e.installed = m.steps
		}
		e.waiters, e.wantWrite = false, false
		m.touch(e)
	}
	m.retrySlotWaiters()
	return nil
}

// refetchable returns the pages among pages, invalidated at a barrier,
// that hold valid copies here and were not refetched Config.Refetch
// barriers in a row (see refetch). It is called before the invalidation.
func (m *Machine) refetchable(pages []PageID) []PageID {
	if m.cfg.Refetch <= 0 {
		return nil
	}
	var again []PageID
	for _, p := range pages {
		e := m.pages[p]
		if e == nil || e.home == m.me || (e.state != ReadOnly && e.state != Writable) {
			continue
		}
		if int(e.refetches) < m.cfg.Refetch {
			again = append(again, p)
		}
	}
	return again
}

// refetch fetches pages (from refetchable) again after the barrier that
// invalidated them, in free cache slots only, as a prefetch: no thread
// waits for them, and a fault on one meanwhile waits for its answer.
func (m *Machine) refetch(pages []PageID) {
	var batch []*pageEntry
	for _, p := range pages {
		e := m.pages[p]
		if e == nil || e.home == m.me || e.state != Invalid || e.flushing > 0 || e.slotWait {
			continue // freed or migrated here, fetched meanwhile, or its diff is on its way
		}
		if !m.freeSlot() {
			break
		}
		e.state = Fetching
		e.refetches++
		m.cached++
		m.stats.Prefetched++
		batch = append(batch, e)
	}
	m.request(batch)
}

// ---- diffs ---------------------------------------------------------------

// flush sends the diffs of dirty cached pages to their homes, batched per
// home, after write-protecting them; the pages become ReadOnly.
func (m *Machine) flush(dirty []*pageEntry) {
	if len(dirty) == 0 {
		return
	}
	prot := make([]PageID, len(dirty))
	for i, e := range dirty {
		prot[i] = e.id
	}
	m.emit(Action{Kind: ActProtect, Pages: prot})
	for len(dirty) > 0 {
		h := dirty[0].home
		var pages []PageID
		rest := dirty[:0:0]
		for _, e := range dirty {
			if e.home != h {
				rest = append(rest, e)
				continue
			}
			pages = append(pages, e.id)
			e.flushing++
			e.state = ReadOnly
		}
		dirty = rest
		seq := m.nextSeq()
		m.flushes[seq] = pendingFlush{left: len(pages), home: h}
		order := m.diffOrder[h]
		m.diffOrder[h] = order + 1
		m.stats.DiffMsgs++
		m.stats.DiffPages += uint64(len(pages))
		m.stats.MsgsSent++
		m.emit(Action{Kind: ActSendDiffs, Msg: &Message{Kind: MsgDiff, From: m.me, To: h, Seq: seq, Order: order, Epoch: m.epoch, Pages: pages}})
	}
}

// oldestFlush returns the sequence number of the oldest unacknowledged diff
// batch, or MaxUint64.
func (m *Machine) oldestFlush() uint64 {
	oldest := uint64(math.MaxUint64)
	for s := range m.flushes {
		oldest = min(oldest, s)
	}
	return oldest
}

// flushedOnlyTo reports whether every unacknowledged diff batch up to
// sequence number mark went to rank to (and there is at least one).
func (m *Machine) flushedOnlyTo(mark uint64, to int) bool {
	found := false
	for s, f := range m.flushes {
		if s > mark {
			continue
		}
		if f.home != to {
			return false
		}
		found = true
	}
	return found
}

// onDiff applies each sender's diffs at the home in the order it sent
// them: two diffs of one page from one rank must not cross.
func (m *Machine) onDiff(msg *Message) error {
	next := m.diffNext[msg.From]
	if msg.Order != next {
		if msg.Order < next {
			return protoErr("diff %d from rank %d repeated", msg.Order, msg.From)
		}
		m.diffEarly[cvKey{msg.From, msg.Order}] = msg
		return nil
	}
	for {
		if err := m.applyDiff(msg); err != nil {
			return err
		}
		next++
		m.diffNext[msg.From] = next
		k := cvKey{msg.From, next}
		if msg = m.diffEarly[k]; msg == nil {
			return m.stepAfterDiffs()
		}
		delete(m.diffEarly, k)
	}
}

// stepAfterDiffs steps the releases and barrier arrivals that waited for
// diffs that have now arrived, in the order they came.
func (m *Machine) stepAfterDiffs() error {
	if len(m.afterDiffs) == 0 {
		return nil
	}
	var ready []*Message
	keep := m.afterDiffs[:0]
	for _, w := range m.afterDiffs {
		if w.Order > m.diffNext[w.From] {
			keep = append(keep, w)
			continue
		}
		ready = append(ready, w)
	}
	clear(m.afterDiffs[len(keep):])
	m.afterDiffs = keep
	for _, w := range ready {
		if err := m.recv(w); err != nil {
			return err
		}
	}
	return nil
}

// applyDiff applies diffs at the home and acknowledges them. Diffs for
// pages that are not homed here yet (they migrate here at a barrier the
// sender has passed and this rank has not) wait for that barrier; any
// later diff of the same pages from the same sender waits behind them.
func (m *Machine) applyDiff(msg *Message) error {
	mine, others, err := m.splitByHome(msg.Pages)
	if err != nil {
		return err
	}
	data := msg.Data
	if len(others) > 0 {
		if msg.Epoch <= m.epoch {
			return protoErr("diffs for pages homed elsewhere")
		}
		var rest []PageID
		for _, g := range others {
			rest = append(rest, g.pages...)
		}
		wait := *msg
		if wait.Data, err = subBatch(msg.Data, rest); err != nil {
			return err
		}
		wait.Pages = rest
		m.later = append(m.later, &wait)
		if len(mine) == 0 {
			return nil
		}
		if data, err = subBatch(msg.Data, mine); err != nil {
			return err
		}
	}
	for _, p := range mine {
		if e := m.pages[p]; e.state == HomeUnmapped {
			m.emit(Action{Kind: ActInstall, Page: p})
			e.state = HomeReadOnly
		}
	}
	m.emit(Action{Kind: ActApplyDiffs, Msg: &Message{Kind: MsgDiff, From: msg.From, To: m.me, Seq: msg.Seq, Order: msg.Order, Epoch: msg.Epoch, Pages: mine, Data: data}})
	m.send(&Message{Kind: MsgDiffAck, To: msg.From, Seq: msg.Seq, Epoch: m.epoch, Pages: mine})
	return nil
}

func (m *Machine) onDiffAck(msg *Message) {
	for _, p := range msg.Pages {
		e := m.pages[p]
		if e == nil || e.flushing == 0 {
			continue
		}
		e.flushing--
		if e.flushing == 0 && e.deferred && e.state == Fetching {
			m.request([]*pageEntry{e})
		}
	}
	if f, ok := m.flushes[msg.Seq]; ok {
		if f.left -= len(msg.Pages); f.left > 0 {
			m.flushes[msg.Seq] = f
		} else {
			delete(m.flushes, msg.Seq)
		}
	}
	m.checkPending()
}

// invalidate zaps the cached copies of pages named by write notices. Home
// pages are never invalidated; a dirty copy (written by another thread of
// this rank meanwhile) sends its diff home first; a fetch in flight is
// marked stale so that its answer is not installed.
func (m *Machine) invalidate(pages []PageID) {
	var dirty []*pageEntry
	var zap []PageID
	m.notices++
	for _, p := range pages {
		e := m.pages[p]
		if e == nil || e.home == m.me {
			continue
		}
		e.noticed = m.notices
		switch e.state {
		case Fetching:
			if !e.deferred {
				e.stale = true
			}
		case Writable:
			m.unwatchCopy(e, true)
			dirty = append(dirty, e)
			fallthrough
		case ReadOnly:
			m.lruRemove(e)
			m.cached--
			zap = append(zap, p)
		}
	}
	m.flush(dirty)
	for _, p := range zap {
		m.pages[p].state = Invalid
	}
	if len(zap) > 0 {
		m.stats.Invalidations += uint64(len(zap))
		m.emit(Action{Kind: ActZap, Pages: zap})
	}
	m.retrySlotWaiters()
}
