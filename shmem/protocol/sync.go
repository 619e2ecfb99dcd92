package protocol

import (
	"slices"

	"github.com/jiarun/jia/shmem/diff"
)

// subBatch returns the entries of a diff batch for the given pages.
func subBatch(batch []byte, pages []PageID) ([]byte, error) {
	var out []byte
	r := diff.NewReader(batch)
	for r.Next() {
		if slices.Contains(pages, PageID(r.Page())) {
			out = diff.AppendEntry(out, r.Page(), r.Runs())
		}
	}
	if err := r.Err(); err != nil {
		return nil, protoErr("diff batch: %v", err)
	}
	return out, nil
}

// ---- intervals -------------------------------------------------------------

// endInterval ends the current interval (JIAJIA's endinterval and
// startinterval): the diffs of dirty cached pages go to their homes, every
// page written is write-protected again, and the pages written become write
// notices in the scope of every lock held and of the next barrier. A home
// page counts only if another rank has fetched it (JIAJIA's rdnt): nobody
// else can hold a stale copy otherwise.
//
// A written home page that nobody else fetched stays writable (unless home
// migration is on): its later writes need no notice either, as long as no
// copy exists elsewhere, and the home adds it to the interval when it
// serves a copy of it while it is writable (onPageReq). This spares a
// write fault per home page and interval.
//
// A written home page that others fetched is watched (Config.Watch)
// instead of protected at the end of an interval that is not a barrier's
// (watchable). At a barrier's (barrier), whose notice invalidates every
// other copy and which ends every watch of a written page, one watched or
// written again after a protection (hot) stays writable without a
// snapshot: nobody else holds a copy afterwards. The others are protected
// there, so that a copy fetched again right after the barrier (Refetch)
// does not count as written.
func (m *Machine) endInterval(barrier bool) {
	prot := m.ageWatched()
	if len(m.interval.l) == 0 {
		if len(prot) > 0 {
			m.emit(Action{Kind: ActProtect, Pages: prot})
		}
		return
	}
	var dirty []*pageEntry
	var written []PageID
	for _, p := range m.interval.l {
		e := m.pages[p]
		if e == nil {
			continue // freed
		}
		if e.home == m.me {
			if e.state == HomeWritable && (e.shared || m.cfg.HomeMigration) {
				switch {
				case barrier && m.cfg.Watch > 0 && !m.cfg.HomeMigration && !e.twin && (e.hot || e.watch):
					// Unshared by the barrier, which also ends its watch.
				case !barrier && m.watchable(e):
					// Its next writes are found by comparison with the
					// snapshot taken now, without a fault.
					if !e.watch {
						e.watch = true
						m.watching = append(m.watching, p)
						m.emit(Action{Kind: ActMakeTwin, Page: p})
					}
					e.quiet = 0
				default:
					prot = append(prot, p)
					e.state = HomeReadOnly
					e.guarded = e.shared
					if e.twin {
						m.emit(Action{Kind: ActDropTwin, Page: p})
						e.twin = false
					}
				}
			}
			if e.shared {
				written = append(written, p)
			}
			continue
		}
		if e.state == Writable {
			dirty = append(dirty, e)
		}
		written = append(written, p)
	}
	m.interval.reset()
	m.flush(dirty)
	for _, e := range dirty {
		if m.watchableCopy(e) {
			// Its next writes are found by comparison with the twin made
			// now, the base of its next diff, without a fault. The page
			// stays protected while the diff and the twin are made (flush).
			m.emit(Action{Kind: ActMakeTwin, Page: e.id})
			m.emit(Action{Kind: ActUnprotect, Page: e.id})
			e.state = Writable
			if !e.watch {
				e.watch = true
				m.watchingCopies = append(m.watchingCopies, e.id)
			}
			e.quiet = 0
		} else {
			e.guarded = true
		}
	}
	if len(prot) > 0 {
		m.emit(Action{Kind: ActProtect, Pages: prot})
	}
	for _, s := range m.held {
		s.addAll(written)
	}
	m.barrierSet.addAll(written)
}

// watchQuiet is how many intervals a watched page may go unwritten before
// it is write-protected again (its comparisons cost more than its rare
// write faults would).
const watchQuiet = 4

// watchable reports whether e, a written home page that others hold
// copies of, is watched rather than write-protected at the end of an
// interval that is not a barrier's: while there is room. A snapshot and a
// few comparisons cost far less than the fault of its next write; a page
// not written for watchQuiet intervals is protected again.
func (m *Machine) watchable(e *pageEntry) bool {
	return !e.twin && (e.watch || m.canWatch())
}

// watchableCopy reports whether e, a cached copy of a page homed
// elsewhere whose diff the interval's end just sent, stays writable,
// its writes found by comparison (Config.Watch): once it was written
// again after an interval's end protected it, while there is room, unless
// a notice invalidated it while it was watched (others write it too: its
// invalidations would each cost a diff, and a refetch that waits for the
// diff's acknowledgement).
func (m *Machine) watchableCopy(e *pageEntry) bool {
	return m.cfg.Watch > 0 && !m.cfg.HomeMigration && e.state == ReadOnly && !e.contested &&
		(e.watch || e.hot && len(m.watching)+len(m.watchingCopies) < m.cfg.Watch)
}

// unwatchCopy stops watching e, a copy about to be flushed and
// invalidated (noticed) or evicted: the writes its comparison has not
// found yet count as written in the current interval, so that its next
// release notices them.
func (m *Machine) unwatchCopy(e *pageEntry, noticed bool) {
	if !e.watch {
		return
	}
	m.unwatch(e)
	m.interval.add(e.id)
	e.contested = e.contested || noticed
}

// ageWatched counts an interval for every watched page and stops
// watching those not written for watchQuiet intervals: they are
// write-protected (the returned pages) as JIAJIA's are.
func (m *Machine) ageWatched() []PageID {
	for i := 0; i < len(m.watchingCopies); {
		e := m.pages[m.watchingCopies[i]]
		if e.quiet++; e.quiet < watchQuiet || m.interval.m != nil && hasPage(&m.interval, e.id) {
			i++
			continue
		}
		// Flushed (an empty diff unless written since the comparison) and
		// protected as a written page, not watched again until it is
		// written again after that.
		m.unwatch(e)
		m.interval.add(e.id)
		e.hot = false
	}
	var prot []PageID
	for i := 0; i < len(m.watching); {
		e := m.pages[m.watching[i]]
		if e.quiet++; e.quiet < watchQuiet || m.interval.m != nil && hasPage(&m.interval, e.id) {
			i++
			continue
		}
		m.emit(Action{Kind: ActDropTwin, Page: e.id})
		m.unwatch(e)
		e.hot, e.guarded = false, true
		e.state = HomeReadOnly
		prot = append(prot, e.id)
	}
	return prot
}

func hasPage(s *pageSet, p PageID) bool {
	_, ok := s.m[p]
	return ok
}

// unwatch forgets that e is watched (its twin is dropped by the caller).
func (m *Machine) unwatch(e *pageEntry) {
	e.watch, e.quiet = false, 0
	if i := slices.Index(m.watching, e.id); i >= 0 {
		m.watching = slices.Delete(m.watching, i, i+1)
	}
	if i := slices.Index(m.watchingCopies, e.id); i >= 0 {
		m.watchingCopies = slices.Delete(m.watchingCopies, i, i+1)
	}
}

// written notes the watched pages the engine found written since the last
// comparison: they count as written in the current interval.
func (m *Machine) written(pages []PageID) {
	for _, p := range pages {
		if e := m.pages[p]; e != nil && e.watch {
			m.interval.add(p)
			e.quiet = 0
		}
	}
}

// checkPending sends the releases and the barrier arrival whose diffs have
// all been acknowledged: a home must hold the data before anyone acts on a
// write notice (JIAJIA waits for diffwait before sending REL or BARR). A
// release or arrival whose unacknowledged diffs all went to its manager
// goes at once, with the number of diffs sent there (Message.Order): the
// manager handles it only after applying them (recv), which spares the
// wait for the acknowledgement.
func (m *Machine) checkPending() {
	if len(m.releases) == 0 && (m.bar == nil || m.bar.sent) {
		return
	}
	oldest := m.oldestFlush()
	keep := m.releases[:0]
	var recalled []int
	for _, r := range m.releases {
		k := m.kept[r.id]
		if oldest <= r.mark && !m.flushedOnlyTo(r.mark, r.id%m.n) {
			keep = append(keep, r)
			continue
		}
		if k != nil && k.granted {
			// Kept: the notices stay here until the manager recalls it,
			// and its release then names the diffs to apply first, if
			// they are not acknowledged by then (yield).
			k.pages.addAll(r.pages)
			k.mark, k.order = r.mark, r.order
			m.done(EvUnlock, r.id)
			if k.recall {
				recalled = append(recalled, r.id)
			}
			continue
		}
		msg := &Message{Kind: MsgRelease, To: r.id % m.n, ID: r.id, Scope: m.scope(r.id), Epoch: m.epoch, Pages: r.pages}
		if oldest <= r.mark {
			// Diffs to the manager only are on their way: it applies them
			// first.
			msg.Order = r.order
		}
		m.send(msg)
		m.done(EvUnlock, r.id)
	}
	clear(m.releases[len(keep):])
	m.releases = keep
	for _, id := range recalled {
		m.yield(id)
	}
	if m.bar == nil || m.bar.sent {
		return
	}
	// Fast when only diffs to the barrier manager are unacknowledged, and
	// no release waits: the releases go before the arrival, as in JIAJIA.
	fast := len(m.releases) == 0 && m.flushedOnlyTo(m.bar.mark, m.cfg.BarrierManager)
	if oldest > m.bar.mark || fast {
		m.bar.sent = true
		msg := &Message{Kind: MsgBarrier, To: m.cfg.BarrierManager, Epoch: m.epoch, Notices: m.bar.notices}
		if oldest <= m.bar.mark {
			msg.Order = m.bar.order
		}
		m.send(msg)
	}
}

func (m *Machine) scope(id int) int64 {
	if s, ok := m.scopes[id]; ok {
		return s
	}
	return -1
}

// ---- locks ----------------------------------------------------------------

// lock acquires lock id from its manager, rank id mod size (JIAJIA's
// jia_lock): the interval ends first, and the grant carries the pages
// written in the lock's scope since this rank last held it.
func (m *Machine) lock(id int) error {
	switch {
	case id < 0:
		return ErrBadID
	case m.held[id] != nil || m.acquiring[id]:
		return ErrLockHeld
	case m.bar != nil:
		return ErrBusy
	}
	m.endInterval(false)
	if k := m.kept[id]; k != nil && k.granted && !k.recall {
		// Kept since its last grant here: nobody else held it since.
		m.held[id] = &pageSet{}
		m.stats.Locks++
		m.done(EvLock, id)
		return nil
	}
	m.acquiring[id] = true
	m.acquireAt[id] = m.notices
	m.send(&Message{Kind: MsgAcquire, To: id % m.n, ID: id, Scope: m.scope(id), Epoch: m.epoch})
	return nil
}

// unlock releases lock id (JIAJIA's jia_unlock): the interval ends, and
// once the homes acknowledged the diffs (or at once when the only diffs
// not acknowledged went to the lock's manager, see checkPending), the
// pages written in the lock's scope go to its manager with the release.
func (m *Machine) unlock(id int) error {
	if id < 0 {
		return ErrBadID
	}
	set := m.held[id]
	if set == nil {
		return ErrLockNotHeld
	}
	m.endInterval(false)
	delete(m.held, id)
	m.releases = append(m.releases, &pendingRelease{id: id, pages: slices.Clone(set.l), mark: m.seq, order: m.diffOrder[id%m.n]})
	m.checkPending()
	return nil
}

func (m *Machine) mgr(id int) *lockMgr {
	lm := m.locks[id]
	if lm == nil {
		lm = &lockMgr{holder: -1, last: -1, notices: make(map[PageID]stamp)}
		m.locks[id] = lm
	}
	return lm
}

// onAcquire queues an acquire at the lock's manager (JIAJIA's acqserver).
func (m *Machine) onAcquire(msg *Message) error {
	if msg.ID < 0 || msg.ID%m.n != m.me {
		return protoErr("acquire of lock %d at rank %d", msg.ID, m.me)
	}
	lm := m.mgr(msg.ID)
	lm.queue = append(lm.queue, acqReq{rank: msg.From, scope: msg.Scope, epoch: msg.Epoch})
	switch {
	case lm.holder < 0:
		m.grantNext(msg.ID, lm)
	case lm.kept && !lm.recall:
		lm.recall = true
		m.send(&Message{Kind: MsgRecall, To: lm.holder, ID: msg.ID, Epoch: m.epoch})
	}
	return nil
}

// grantNext grants the lock to the first waiter with the write notices it
// has not seen (JIAJIA's grantlock/appendlockwtnts): pages released under
// the lock after the waiter's last grant, in its epoch or later, not homed
// at the waiter (as far as the manager knows: homes move at barriers).
// With Config.CacheLocks, a rank granted the lock twice in a row with
// nobody else waiting may keep it after its release.
func (m *Machine) grantNext(id int, lm *lockMgr) {
	if len(lm.queue) == 0 {
		return
	}
	req := lm.queue[0]
	lm.queue = lm.queue[1:]
	lm.holder = req.rank
	lm.kept = m.cfg.CacheLocks && req.rank != m.me && req.rank == lm.last && len(lm.queue) == 0
	lm.recall = false
	lm.last = req.rank
	var seq uint64
	if lm.kept {
		seq = grantKeep
	}
	var notices []Notice
	for p, st := range lm.notices {
		if st.scope <= req.scope || st.epoch < req.epoch {
			continue
		}
		if h, ok := m.home(p); ok && h == req.rank && req.epoch == m.epoch {
			// Its home: never invalidated. Only in the waiter's epoch: a
			// manager that has not passed the barrier the waiter passed
			// may not know yet that the page migrated away from it (the
			// waiter skips the notices of its home pages itself).
			continue
		}
		notices = append(notices, Notice{Page: p, Writer: Several})
	}
	slices.SortFunc(notices, func(a, b Notice) int { return int(a.Page) - int(b.Page) })
	grant := &Message{Kind: MsgGrant, To: req.rank, ID: id, Seq: seq, Scope: lm.scope, Epoch: m.epoch, Notices: notices}
	if pages := m.grantPages(req.rank, notices); len(pages) > 0 {
		// The engine fills in their data, as for a page grant.
		grant.From, grant.Pages, grant.Order = m.me, pages, m.diffNext[req.rank]
		m.stats.PagesServed += uint64(len(pages))
		m.stats.MsgsSent++
		m.emit(Action{Kind: ActSendPages, Msg: grant})
		m.watchServed()
		return
	}
	m.send(grant)
}

// grantPages returns the pages homed here among a grant's notices to rank
// r whose copies go with the grant (Config.GrantPages), and treats them as
// served (onPageReq).
func (m *Machine) grantPages(r int, notices []Notice) []PageID {
	if m.cfg.GrantPages <= 0 || m.cfg.HomeMigration || r == m.me || m.direct(r) {
		return nil
	}
	var pages []PageID
	for _, n := range notices {
		e := m.pages[n.Page]
		if e == nil || e.home != m.me || e.twin || (e.state != HomeReadOnly && e.state != HomeWritable) {
			continue
		}
		if e.state == HomeWritable {
			// Its writes from now on must become notices (see onPageReq).
			m.interval.add(n.Page)
		}
		m.share(e)
		pages = append(pages, n.Page)
		if len(pages) == m.cfg.GrantPages {
			break
		}
	}
	return pages
}

// onRelease records a release's write notices at the manager and grants
// the lock to the next waiter (JIAJIA's relserver).
func (m *Machine) onRelease(msg *Message) error {
	if msg.ID < 0 || msg.ID%m.n != m.me {
		return protoErr("release of lock %d at rank %d", msg.ID, m.me)
	}
	lm := m.mgr(msg.ID)
	if lm.holder != msg.From {
		return protoErr("release of lock %d by rank %d, holder %d", msg.ID, msg.From, lm.holder)
	}
	for _, p := range msg.Pages {
		lm.notices[p] = stamp{scope: lm.scope, epoch: msg.Epoch}
	}
	lm.scope++
	lm.holder = -1
	lm.kept, lm.recall = false, false
	m.grantNext(msg.ID, lm)
	return nil
}

// maxGrantsRW is how many grants in a row install a page writable because
// it was written after the grant before them (Config.GrantPages): a page
// installed so counts as written whether the program writes it or not, so
// every maxGrantsRW+1st grant installs it read-only, and only a write
// fault on that copy lets the next grants install it writable again. A
// page no longer written under the lock thus costs at most maxGrantsRW
// needless diffs and notices.
const maxGrantsRW = 8

// onGrant completes an acquire: the pages named by the notices are
// invalidated (JIAJIA's acqgrantserver).
func (m *Machine) onGrant(msg *Message) error {
	if !m.acquiring[msg.ID] {
		return protoErr("grant of lock %d not requested", msg.ID)
	}
	k := m.kept[msg.ID]
	switch {
	case msg.Seq == grantKeep && k == nil:
		m.kept[msg.ID] = &keptLock{granted: true}
	case msg.Seq == grantKeep:
		k.granted = true // recalled already (onRecall)
	case k != nil:
		return protoErr("lock %d recalled but granted without keeping it", msg.ID)
	}
	if len(msg.Data) != len(msg.Pages)*m.ps {
		return protoErr("grant of lock %d with %d pages carries %d bytes", msg.ID, len(msg.Pages), len(msg.Data))
	}
	since := m.acquireAt[msg.ID]
	delete(m.acquiring, msg.ID)
	delete(m.acquireAt, msg.ID)
	m.held[msg.ID] = &pageSet{}
	m.scopes[msg.ID] = msg.Scope
	pages := make([]PageID, 0, len(msg.Notices))
	for _, n := range msg.Notices {
		pages = append(pages, n.Page)
	}
	// The copies that came with the grant replace valid copies held here.
	var fresh []bool
	if len(msg.Pages) > 0 {
		fresh = make([]bool, len(msg.Pages))
		for i, p := range msg.Pages {
			e := m.pages[p]
			fresh[i] = e != nil && e.home == msg.From && e.state == ReadOnly && e.noticed <= since
		}
	}
	m.invalidate(pages)
	if !m.cfg.HomeMigration && msg.Order >= m.diffOrder[msg.From] {
		for i, p := range msg.Pages {
			e := m.pages[p]
			if !fresh[i] || e.state != Invalid || e.flushing > 0 || e.slotWait || !m.freeSlot() {
				continue
			}
			if e.writeGrant == m.stats.Barriers+1 && e.grantsRW < maxGrantsRW {
				// Written the last time a grant brought it (since the last
				// barrier): most likely written again under this lock.
				// Installed writable with a twin, as a write fault would
				// leave it, it spares that fault.
				m.emit(Action{Kind: ActInstall, Page: p, Data: msg.Data[i*m.ps : (i+1)*m.ps], Writable: true, Twin: true})
				e.state = Writable
				e.grantsRW++
				m.interval.add(p)
			} else {
				// Written or not, its next write fault tells.
				m.emit(Action{Kind: ActInstall, Page: p, Data: msg.Data[i*m.ps : (i+1)*m.ps]})
				e.state = ReadOnly
				e.writeGrant, e.grantsRW = 0, 0
			}
			e.fromGrant = true
			m.cached++
			m.touch(e)
			m.stats.GrantInstalls++
		}
	}
	m.stats.Locks++
	m.done(EvLock, msg.ID)
	return nil
}

// AppendFreeKept appends to dst the locks kept here (Config.CacheLocks) that
// a Lock would take at once, with no message and no change to this rank's
// memory when Quiet: not held, not recalled, no release of theirs in
// progress. Their order is unspecified.
//
// With Config.CacheLocks, the locks managed here that this rank held last
// count too, while free with nobody waiting: their Lock would find no
// notices to invalidate either. (Before the engine steps an acquire of
// one, it must make sure the program's claimed Lock was stepped.)
func (m *Machine) AppendFreeKept(dst []int) []int {
	for id, k := range m.kept {
		if k.granted && !k.recall && m.held[id] == nil && !m.releasing(id) {
			dst = append(dst, id)
		}
	}
	if !m.cfg.CacheLocks {
		return dst
	}
	for id, lm := range m.locks {
		if lm.holder < 0 && len(lm.queue) == 0 && lm.last == m.me &&
			m.held[id] == nil && !m.acquiring[id] && !m.releasing(id) {
			dst = append(dst, id)
		}
	}
	return dst
}

func (m *Machine) releasing(id int) bool {
	for _, r := range m.releases {
		if r.id == id {
			return true
		}
	}
	return false
}

// onRecall gives a kept lock back to its manager: its release goes there
// with the pages written under it since its grant here, at once or at the
// end of the current hold. The recall may overtake the grant it recalls.
func (m *Machine) onRecall(msg *Message) error {
	if msg.ID < 0 || msg.ID%m.n != msg.From {
		return protoErr("recall of lock %d from rank %d", msg.ID, msg.From)
	}
	k := m.kept[msg.ID]
	switch {
	case k == nil && m.acquiring[msg.ID]:
		k = &keptLock{}
		m.kept[msg.ID] = k
	case k == nil:
		return protoErr("recall of lock %d, not kept here", msg.ID)
	case k.recall:
		return protoErr("lock %d recalled twice", msg.ID)
	}
	k.recall = true
	m.yield(msg.ID)
	return nil
}

// yield sends the release of kept lock id once it was recalled, is granted
// here, not held, and its releases here are complete.
func (m *Machine) yield(id int) {
	k := m.kept[id]
	if k == nil || !k.recall || !k.granted || m.held[id] != nil || m.releasing(id) {
		return
	}
	delete(m.kept, id)
	msg := &Message{Kind: MsgRelease, To: id % m.n, ID: id, Scope: m.scope(id), Epoch: m.epoch, Pages: k.pages.l}
	if m.oldestFlush() <= k.mark {
		// The diffs of its releases here, which went to the manager only
		// (checkPending), are not all acknowledged: it applies them first.
		msg.Order = k.order
	}
	m.send(msg)
}

// ---- barriers -------------------------------------------------------------

// barrier arrives at the barrier (JIAJIA's jia_barrier): the interval ends,
// and once the diffs are acknowledged, the pages written since the last
// barrier go to the barrier manager.
func (m *Machine) barrier() error {
	switch {
	case len(m.held) > 0 || len(m.acquiring) > 0:
		return ErrBarrierInCS
	case m.bar != nil:
		return ErrBusy
	}
	m.endInterval(true)
	notices := make([]Notice, 0, len(m.barrierSet.l))
	for _, p := range m.barrierSet.l {
		n := Notice{Page: p, Writer: m.me}
		if e := m.pages[p]; e != nil {
			if e.home == m.me {
				// Every other copy is invalidated by this barrier: no
				// later write needs a notice until someone fetches it.
				e.shared = false
				if e.watch {
					m.emit(Action{Kind: ActDropTwin, Page: p})
					m.unwatch(e)
				}
			} else if e.state == ReadOnly {
				// A home-migration candidate (JIAJIA's migcheckcache):
				// keep the copy until the barrier completes.
				n.Cached = true
				e.pinned = m.cfg.HomeMigration
			}
		}
		notices = append(notices, n)
	}
	m.barrierSet.reset()
	m.bar = &pendingBarrier{mark: m.seq, order: m.diffOrder[m.cfg.BarrierManager], notices: notices}
	m.checkPending()
	return nil
}

// onBarrier combines arrivals at the barrier manager (JIAJIA's barrserver:
// a page written by two ranks gets Writer Several) and grants the barrier
// to every rank when the last one arrives.
func (m *Machine) onBarrier(msg *Message) error {
	if m.me != m.cfg.BarrierManager {
		return protoErr("barrier arrival at rank %d, manager is %d", m.me, m.cfg.BarrierManager)
	}
	b := &m.barMgr
	if msg.Epoch > b.epoch {
		// The sender passed a local barrier (EvLocalBarrier) that this
		// rank has not stepped yet.
		m.later = append(m.later, msg)
		return nil
	}
	if msg.Epoch != b.epoch {
		return protoErr("arrival for epoch %d at the barrier of epoch %d", msg.Epoch, b.epoch)
	}
	if b.notices == nil {
		b.notices = make(map[PageID]int)
	}
	for _, n := range msg.Notices {
		if n.Writer != msg.From {
			return protoErr("barrier notice of page %d names writer %d", n.Page, n.Writer)
		}
	}
	for _, n := range msg.Notices {
		if i, ok := b.notices[n.Page]; ok {
			b.order[i].Writer, b.order[i].Cached = Several, false
			continue
		}
		b.notices[n.Page] = len(b.order)
		b.order = append(b.order, Notice{Page: n.Page, Writer: n.Writer, Cached: n.Cached})
	}
	b.count++
	if b.count < m.n {
		return nil
	}
	notices := b.order
	slices.SortFunc(notices, func(a, b Notice) int { return int(a.Page) - int(b.Page) })
	for i := range notices {
		n := &notices[i]
		if m.cfg.HomeMigration && n.Writer != Several && n.Cached {
			if h, ok := m.home(n.Page); ok && h != n.Writer {
				n.Migrate = true
			}
		}
		n.Cached = false
	}
	b.epoch++
	b.count = 0
	b.order = nil
	clear(b.notices)
	for r := 0; r < m.n; r++ {
		m.send(&Message{Kind: MsgBarrierGrant, To: r, Epoch: b.epoch, Notices: notices})
	}
	return nil
}

// onBarrierGrant completes a barrier (JIAJIA's barrgrantserver): homes
// migrate, then every page written by another rank is invalidated unless it
// is homed here, and the lock notices of past epochs are dropped.
func (m *Machine) onBarrierGrant(msg *Message) error {
	if m.bar == nil || !m.bar.sent || msg.Epoch != m.epoch+1 {
		return protoErr("barrier grant for epoch %d at epoch %d", msg.Epoch, m.epoch)
	}
	for _, n := range msg.Notices {
		if n.Writer < Several || n.Writer >= m.n || (n.Migrate && n.Writer == Several) {
			return protoErr("barrier grant names writer %d of page %d", n.Writer, n.Page)
		}
	}
	m.epoch = msg.Epoch
	for _, n := range m.bar.notices {
		if e := m.pages[n.Page]; e != nil {
			e.pinned = false
		}
	}
	m.bar = nil
	var inv []PageID
	for _, n := range msg.Notices {
		oldHome, ok := m.home(n.Page)
		if !ok {
			continue // freed here
		}
		if n.Migrate {
			if err := m.migrate(n.Page, oldHome, n.Writer); err != nil {
				return err
			}
		}
		if n.Writer == m.me || oldHome == m.me {
			continue
		}
		inv = append(inv, n.Page)
	}
	again := m.refetchable(inv)
	m.invalidate(inv)
	for _, k := range m.kept {
		// Every rank invalidated these pages at this barrier, as the
		// managers drop the notices of past epochs below.
		k.pages.reset()
	}
	for _, lm := range m.locks {
		for p, st := range lm.notices {
			if st.epoch < m.epoch {
				delete(lm.notices, p)
			}
		}
	}
	if err := m.replayLater(); err != nil {
		return err
	}
	m.stats.Barriers++
	m.done(EvBarrier, 0)
	m.retrySlotWaiters()
	m.refetch(again)
	return nil
}

// replayLater steps the messages kept for a later epoch, after a barrier.
func (m *Machine) replayLater() error {
	later := m.later
	m.later = nil
	for _, l := range later {
		var err error
		if l.Kind == MsgDiff {
			err = m.applyDiff(l) // already in order
		} else {
			err = m.recv(l)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// localBarrier completes a barrier that the ranks met outside the
// protocol, with nothing to publish (EvLocalBarrier). Its epoch begins
// here whenever the rank learns of it, possibly after the program went
// on: the messages of ranks that stepped it earlier wait for it (later),
// as they do for a barrier grant on its way, and whatever this rank's
// pager did for others meanwhile (a page served from a writable home
// page) ends the interval into the next barrier's notices. Nothing is
// invalidated and no notice is dropped: nobody published any.
func (m *Machine) localBarrier() error {
	if m.bar != nil {
		return protoErr("local barrier during the barrier of epoch %d", m.epoch)
	}
	if m.me == m.cfg.BarrierManager {
		if m.barMgr.count != 0 || m.barMgr.epoch != m.epoch {
			return protoErr("local barrier at the manager of the barrier of epoch %d (%d arrivals) at epoch %d", m.barMgr.epoch, m.barMgr.count, m.epoch)
		}
		m.barMgr.epoch++
	}
	m.endInterval(false)
	m.epoch++
	if err := m.replayLater(); err != nil {
		return err
	}
	m.stats.Barriers++
	m.stats.LocalBarriers++
	m.retrySlotWaiters()
	return nil
}

// migrate moves the home of p from rank from to rank to (JIAJIA's migpage).
// The new home's cached copy, valid and pinned since its arrival, becomes
// the home copy; the old home keeps its copy as a cached page if a slot is
// free.
func (m *Machine) migrate(p PageID, from, to int) error {
	e := m.entry(p)
	e.home = to
	switch m.me {
	case to:
		m.stats.Migrations++
		m.lruRemove(e)
		switch e.state {
		case ReadOnly:
			e.state = HomeReadOnly
		case Writable:
			e.state = HomeWritable
			m.emit(Action{Kind: ActDropTwin, Page: p})
		default:
			return protoErr("page %d migrates here but its copy is %v", p, e.state)
		}
		m.cached--
		e.shared = true
		e.twin = false
	case from:
		m.stats.Migrations++
		switch e.state {
		case HomeUnmapped:
			e.state = Invalid
		case HomeReadOnly:
			e.state = ReadOnly
		case HomeWritable:
			if !e.twin {
				return protoErr("page %d migrates away written without a twin", p)
			}
			e.state = Writable
		}
		e.twin, e.shared = false, false
		if e.state != Invalid {
			if m.freeSlot() {
				m.cached++
				m.touch(e)
			} else {
				if e.state == Writable {
					m.flush([]*pageEntry{e})
				}
				e.state = Invalid
				m.emit(Action{Kind: ActZap, Pages: []PageID{p}})
			}
		}
	}
	return nil
}

// ---- plain barrier ----------------------------------------------------------

func (m *Machine) wait() error {
	if m.waiting {
		return ErrBusy
	}
	m.waiting = true
	m.send(&Message{Kind: MsgWait, To: m.cfg.BarrierManager, Seq: m.waitSeq, Epoch: m.epoch})
	return nil
}

func (m *Machine) onWait(msg *Message) error {
	if m.me != m.cfg.BarrierManager || msg.Seq != m.waitMgr.seq {
		return protoErr("wait arrival %d at rank %d (expecting %d)", msg.Seq, m.me, m.waitMgr.seq)
	}
	m.waitMgr.count++
	if m.waitMgr.count < m.n {
		return nil
	}
	for r := 0; r < m.n; r++ {
		m.send(&Message{Kind: MsgWaitGrant, To: r, Seq: m.waitMgr.seq, Epoch: m.epoch})
	}
	m.waitMgr.seq++
	m.waitMgr.count = 0
	return nil
}

func (m *Machine) onWaitGrant(msg *Message) error {
	if !m.waiting || msg.Seq != m.waitSeq {
		return protoErr("wait grant %d not expected", msg.Seq)
	}
	m.waiting = false
	m.waitSeq++
	m.done(EvWait, 0)
	return nil
}

// ---- condition variables -----------------------------------------------------

// cvCall sends a condition-variable call to the variable's manager (rank
// id mod size), as JIAJIA does. They order nothing in memory: use locks for
// that. SetCV and ResetCV complete at once, WaitCV when the variable is set.
func (m *Machine) cvCall(kind EventKind, id int) error {
	if id < 0 {
		return ErrBadID
	}
	to := id % m.n
	seq := m.cvSeq[to]
	m.cvSeq[to] = seq + 1
	msg := &Message{To: to, ID: id, Seq: seq, Epoch: m.epoch}
	switch kind {
	case EvSetCV:
		msg.Kind = MsgSetCV
	case EvResetCV:
		msg.Kind = MsgResetCV
	default:
		msg.Kind = MsgWaitCV
		m.cvWaits[id]++
	}
	m.send(msg)
	if kind != EvWaitCV {
		m.done(kind, id)
	}
	return nil
}

// onCV applies the calls of each sender in the order it made them.
func (m *Machine) onCV(msg *Message) error {
	if msg.ID < 0 || msg.ID%m.n != m.me {
		return protoErr("condition variable %d at rank %d", msg.ID, m.me)
	}
	next := m.cvNext[msg.From]
	if msg.Seq != next {
		if msg.Seq < next {
			return protoErr("condition-variable call %d from rank %d repeated", msg.Seq, msg.From)
		}
		m.cvEarly[cvKey{msg.From, msg.Seq}] = msg
		return nil
	}
	for {
		m.applyCV(msg)
		next++
		m.cvNext[msg.From] = next
		k := cvKey{msg.From, next}
		if msg = m.cvEarly[k]; msg == nil {
			return nil
		}
		delete(m.cvEarly, k)
	}
}

func (m *Machine) applyCV(msg *Message) {
	cv := m.cvs[msg.ID]
	if cv == nil {
		cv = &cvMgr{}
		m.cvs[msg.ID] = cv
	}
	switch msg.Kind {
	case MsgSetCV:
		cv.value = true
	case MsgResetCV:
		cv.value = false
		return
	case MsgWaitCV:
		cv.waiters = append(cv.waiters, msg.From)
	}
	if cv.value {
		for _, w := range cv.waiters {
			m.send(&Message{Kind: MsgCVGrant, To: w, ID: msg.ID, Epoch: m.epoch})
		}
		cv.waiters = cv.waiters[:0]
	}
}

func (m *Machine) onCVGrant(msg *Message) error {
	if m.cvWaits[msg.ID] == 0 {
		return protoErr("condition variable %d granted without a wait", msg.ID)
	}
	m.cvWaits[msg.ID]--
	m.done(EvWaitCV, msg.ID)
	return nil
}
