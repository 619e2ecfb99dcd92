// Package match is MPI's message-matching engine as a pure data structure:
// the posted-receive queue and the unexpected-message queue of every
// communication context, and the rules that pair a message with a receive.
// It does no I/O, starts no goroutines and is not safe for concurrent use;
// the protocol engine (package proto) owns one and calls it under its lock.
//
// # Rules
//
// A message carries an envelope (context, source, tag); a receive names a
// context, a source or AnySource, and a tag or AnyTag. They match when the
// contexts are equal, the sources are equal or the receive's is AnySource,
// and the tags are equal or the receive's is AnyTag (MPI-4.0 §3.2.4).
//
//   - An arriving message goes to the earliest posted receive it matches;
//     if there is none it joins the unexpected queue (§3.2.4, §3.7.4).
//   - A posted receive takes the earliest unexpected message it matches; if
//     there is none it joins the posted queue.
//   - Messages are matched in the order they arrive, so two messages of one
//     sender on one context never overtake each other, wildcards included
//     (§3.5 "Order"). The caller must present the messages of each sender in
//     the order that sender sent them.
//   - Probe reports the message that a receive with the same arguments
//     would take, without taking it (§3.8.1).
//
// # Cost
//
// Both queues are binned by source, with one more posted bin for
// AnySource receives, and every entry carries a sequence number: a specific
// receive or an arriving message scans one bin (plus the AnySource bin);
// an AnySource receive or probe looks at the head match of every source
// bin. Entries come from a free list, so steady-state operation does not
// allocate.
package match

// AnySource and AnyTag are the wildcards of a receive or probe.
const (
	AnySource int32 = -1
	AnyTag    int32 = -1
)

// node is one queued receive or message.
type node[V any] struct {
	next, prev *node[V]
	seq        uint64
	src, tag   int32
	val        V
}

type list[V any] struct {
	head, tail *node[V]
	n          int
	listed     bool // unexpected bins: the source is in queues.nonEmpty
}

func (l *list[V]) push(n *node[V]) {
	n.next = nil
	n.prev = l.tail
	if l.tail != nil {
		l.tail.next = n
	} else {
		l.head = n
	}
	l.tail = n
	l.n++
}

func (l *list[V]) remove(n *node[V]) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.next, n.prev = nil, nil
	l.n--
}

// first returns the first node whose tag matches tag (AnyTag matches any).
// For the posted queue the node's own tag may be AnyTag.
func (l *list[V]) firstMsg(tag int32) *node[V] {
	for n := l.head; n != nil; n = n.next {
		if tag == AnyTag || n.tag == tag {
			return n
		}
	}
	return nil
}

func (l *list[V]) firstRecv(tag int32) *node[V] {
	for n := l.head; n != nil; n = n.next {
		if n.tag == AnyTag || n.tag == tag {
			return n
		}
	}
	return nil
}

// queues is the matching state of one context.
type queues[R, M any] struct {
	posted   []list[R] // by source
	anySrc   list[R]   // posted receives from AnySource
	unexp    []list[M] // by source
	nPosted  int
	nUnexp   int
	nonEmpty []int32 // sources whose unexpected bin may be non-empty
}

// Engine holds the queues of every context. The zero value is ready to
// use. R is the caller's handle for a posted receive and M for an
// unexpected message (typically pointers).
type Engine[R, M comparable] struct {
	ctx   []*queues[R, M]
	seq   uint64
	freeR *node[R]
	freeM *node[M]
}

func (e *Engine[R, M]) q(ctx uint32) *queues[R, M] {
	if int(ctx) >= len(e.ctx) {
		n := make([]*queues[R, M], int(ctx)+1, 2*int(ctx)+2)
		copy(n, e.ctx)
		e.ctx = n[:cap(n)]
	}
	q := e.ctx[ctx]
	if q == nil {
		q = &queues[R, M]{}
		e.ctx[ctx] = q
	}
	return q
}

func (e *Engine[R, M]) newR() *node[R] {
	if n := e.freeR; n != nil {
		e.freeR = n.next
		n.next = nil
		return n
	}
	return new(node[R])
}

func (e *Engine[R, M]) newM() *node[M] {
	if n := e.freeM; n != nil {
		e.freeM = n.next
		n.next = nil
		return n
	}
	return new(node[M])
}

func (e *Engine[R, M]) putR(n *node[R]) {
	var zero R
	n.val = zero
	n.next = e.freeR
	e.freeR = n
}

func (e *Engine[R, M]) putM(n *node[M]) {
	var zero M
	n.val = zero
	n.next = e.freeM
	e.freeM = n
}

func growR[V any](b []list[V], src int32) []list[V] {
	if int(src) < len(b) {
		return b
	}
	n := make([]list[V], int(src)+1, max(2*len(b), int(src)+1))
	copy(n, b)
	return n[:cap(n)]
}

// findMsg returns the earliest unexpected message matching (src, tag).
func (q *queues[R, M]) findMsg(src, tag int32) *node[M] {
	if q.nUnexp == 0 {
		return nil
	}
	if src != AnySource {
		if int(src) >= len(q.unexp) {
			return nil
		}
		return q.unexp[src].firstMsg(tag)
	}
	var best *node[M]
	// Scan only sources that have had unexpected messages; drop the empty
	// ones from the list while we are at it.
	ne := q.nonEmpty[:0]
	for _, s := range q.nonEmpty {
		l := &q.unexp[s]
		if l.n == 0 {
			l.listed = false
			continue
		}
		ne = append(ne, s)
		if n := l.firstMsg(tag); n != nil && (best == nil || n.seq < best.seq) {
			best = n
		}
	}
	q.nonEmpty = ne
	return best
}

// Post presents a receive for (src, tag) on ctx. If an unexpected message
// matches, Post removes it from the unexpected queue and returns it with
// its source and tag and ok = true, and r is not queued. Otherwise r joins
// the posted queue and ok is false.
func (e *Engine[R, M]) Post(ctx uint32, src, tag int32, r R) (m M, msrc, mtag int32, ok bool) {
	q := e.q(ctx)
	if n := q.findMsg(src, tag); n != nil {
		m, msrc, mtag = n.val, n.src, n.tag
		q.unexp[n.src].remove(n)
		q.nUnexp--
		e.putM(n)
		return m, msrc, mtag, true
	}
	n := e.newR()
	e.seq++
	n.seq, n.src, n.tag, n.val = e.seq, src, tag, r
	if src == AnySource {
		q.anySrc.push(n)
	} else {
		q.posted = growR(q.posted, src)
		q.posted[src].push(n)
	}
	q.nPosted++
	return m, 0, 0, false
}

// Arrive presents a message from src with tag on ctx (src ≥ 0, tag ≥ 0).
// If a posted receive matches, Arrive removes it from the posted queue and
// returns it with ok = true. Otherwise ok is false and the caller must queue
// the message with Unexpected before presenting the next one on ctx, so
// that arrival order is kept.
func (e *Engine[R, M]) Arrive(ctx uint32, src, tag int32) (r R, ok bool) {
	q := e.q(ctx)
	if q.nPosted == 0 {
		return r, false
	}
	var a *node[R]
	if int(src) < len(q.posted) {
		a = q.posted[src].firstRecv(tag)
	}
	b := q.anySrc.firstRecv(tag)
	if b != nil && (a == nil || b.seq < a.seq) {
		r = b.val
		q.anySrc.remove(b)
		q.nPosted--
		e.putR(b)
		return r, true
	}
	if a != nil {
		r = a.val
		q.posted[src].remove(a)
		q.nPosted--
		e.putR(a)
		return r, true
	}
	return r, false
}

// Unexpected queues message m from src with tag on ctx after the messages
// already queued: it is what the caller does when Arrive found no receive.
func (e *Engine[R, M]) Unexpected(ctx uint32, src, tag int32, m M) {
	q := e.q(ctx)
	n := e.newM()
	e.seq++
	n.seq, n.src, n.tag, n.val = e.seq, src, tag, m
	q.unexp = growR(q.unexp, src)
	l := &q.unexp[src]
	if !l.listed {
		l.listed = true
		q.nonEmpty = append(q.nonEmpty, src)
	}
	l.push(n)
	q.nUnexp++
}

// Probe returns the unexpected message that Post(ctx, src, tag, …) would
// take, without removing it.
func (e *Engine[R, M]) Probe(ctx uint32, src, tag int32) (m M, msrc, mtag int32, ok bool) {
	if int(ctx) >= len(e.ctx) || e.ctx[ctx] == nil {
		return m, 0, 0, false
	}
	if n := e.ctx[ctx].findMsg(src, tag); n != nil {
		return n.val, n.src, n.tag, true
	}
	return m, 0, 0, false
}

// Cancel removes the posted receive r from ctx's posted queue. It reports
// whether r was there (a receive that was already matched is not).
func (e *Engine[R, M]) Cancel(ctx uint32, r R) bool {
	if int(ctx) >= len(e.ctx) || e.ctx[ctx] == nil {
		return false
	}
	q := e.ctx[ctx]
	if q.nPosted == 0 {
		return false
	}
	try := func(l *list[R]) bool {
		for n := l.head; n != nil; n = n.next {
			if n.val == r {
				l.remove(n)
				q.nPosted--
				e.putR(n)
				return true
			}
		}
		return false
	}
	if try(&q.anySrc) {
		return true
	}
	for i := range q.posted {
		if try(&q.posted[i]) {
			return true
		}
	}
	return false
}

// Take removes the unexpected message m from ctx's unexpected queue. It
// reports whether m was there.
func (e *Engine[R, M]) Take(ctx uint32, m M) bool {
	if int(ctx) >= len(e.ctx) || e.ctx[ctx] == nil {
		return false
	}
	q := e.ctx[ctx]
	for i := range q.unexp {
		l := &q.unexp[i]
		for n := l.head; n != nil; n = n.next {
			if n.val == m {
				l.remove(n)
				q.nUnexp--
				e.putM(n)
				return true
			}
		}
	}
	return false
}

// Direct reports whether the next message on ctx from src that matches tag
// (AnyTag: any) would go to a receive for (src, tag) posted now, so that
// the caller may take that message itself without posting: ctx has no
// posted receive (an earlier one could match the message first) and no
// unexpected message such a receive would match (it would take that one
// instead). src is a rank, not AnySource.
func (e *Engine[R, M]) Direct(ctx uint32, src, tag int32) bool {
	if int(ctx) >= len(e.ctx) || e.ctx[ctx] == nil {
		return true
	}
	q := e.ctx[ctx]
	return q.nPosted == 0 && q.findMsg(src, tag) == nil
}

// Len returns the number of posted receives and unexpected messages queued
// on ctx.
func (e *Engine[R, M]) Len(ctx uint32) (posted, unexpected int) {
	if int(ctx) >= len(e.ctx) || e.ctx[ctx] == nil {
		return 0, 0
	}
	q := e.ctx[ctx]
	return q.nPosted, q.nUnexp
}

// Drain removes every posted receive and unexpected message of ctx and
// calls the functions (either may be nil) for them in queue order per bin.
// It is used when a context is released.
func (e *Engine[R, M]) Drain(ctx uint32, recv func(R), msg func(M)) {
	if int(ctx) >= len(e.ctx) || e.ctx[ctx] == nil {
		return
	}
	q := e.ctx[ctx]
	drainR := func(l *list[R]) {
		for n := l.head; n != nil; {
			next := n.next
			if recv != nil {
				recv(n.val)
			}
			e.putR(n)
			n = next
		}
		*l = list[R]{}
	}
	drainR(&q.anySrc)
	for i := range q.posted {
		drainR(&q.posted[i])
	}
	for i := range q.unexp {
		l := &q.unexp[i]
		for n := l.head; n != nil; {
			next := n.next
			if msg != nil {
				msg(n.val)
			}
			e.putM(n)
			n = next
		}
		*l = list[M]{}
	}
	q.nPosted, q.nUnexp = 0, 0
	q.nonEmpty = q.nonEmpty[:0]
}
