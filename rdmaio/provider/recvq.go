package provider

import (
	"fmt"
	"unsafe"

	"github.com/jiarun/jia/rdmaio"
)

// RecvEntry is a posted receive work request: its ID and the buffers its
// SGEs name, resolved when it was posted.
type RecvEntry struct {
	ID     uint64
	Status rdmaio.Status // the error of an SGE that did not resolve, else StatusSuccess
	SG     [][]byte      // elements past the length are kept nil
}

// LocalResolver resolves local SGEs: it checks one against its memory
// region (with CheckLocal) and returns the buffer it names, or the status
// of the error completion its work request gets.
type LocalResolver interface {
	ResolveLocal(sge *rdmaio.SGE, need rdmaio.Access) ([]byte, rdmaio.Status)
}

// RecvQueue is the ring of receive work requests posted to a QP or an SRQ
// of a provider that resolves SGEs when they are posted. It does no
// locking: its owner guards it. The zero value is a queue of depth 0, for a
// QP that takes its receives from an SRQ.
type RecvQueue struct {
	ent    []RecvEntry
	head   uint64
	tail   uint64
	maxSGE int
}

// NewRecvQueue returns a queue of depth entries of up to maxSGE SGEs each.
func NewRecvQueue(depth, maxSGE int) RecvQueue {
	q := RecvQueue{ent: make([]RecvEntry, depth), maxSGE: maxSGE}
	for i := range q.ent {
		q.ent[i].SG = make([][]byte, 0, maxSGE)
	}
	return q
}

// Depth returns the number of entries.
func (q *RecvQueue) Depth() int { return len(q.ent) }

// Len returns the number of requests posted and not yet taken.
func (q *RecvQueue) Len() int { return int(q.tail - q.head) }

// Tail returns the number of requests posted since the queue was made or
// last Reset.
func (q *RecvQueue) Tail() uint64 { return q.tail }

// Front returns the oldest request not yet taken, or nil when there is
// none. It stays in the queue until Pop.
func (q *RecvQueue) Front() *RecvEntry {
	if q.head == q.tail {
		return nil
	}
	return &q.ent[q.head%uint64(len(q.ent))]
}

// Pop removes the request Front returned. The caller has dropped (or taken)
// its buffers.
func (q *RecvQueue) Pop() { q.head++ }

// Post validates receive work requests (CheckRecvWR) and appends them,
// resolving their SGEs with r for local write. An SGE that does not resolve
// does not refuse the post: the request completes with the status r
// returned, when a message takes it. Post returns the number of requests
// posted and, when that is not len(wrs), why the next one was refused.
func (q *RecvQueue) Post(r LocalResolver, wrs []rdmaio.RecvWR) (int, error) {
	depth := uint64(len(q.ent))
	for i := range wrs {
		wr := &wrs[i]
		if err := CheckRecvWR(q.maxSGE, wr); err != nil {
			return i, err
		}
		if q.tail-q.head >= depth {
			return i, fmt.Errorf("%w: receive queue depth %d", rdmaio.ErrQueueFull, depth)
		}
		e := &q.ent[q.tail%depth]
		e.ID, e.Status = wr.ID, rdmaio.StatusSuccess
		e.SG = e.SG[:0]
		for j := range wr.SGL {
			b, st := r.ResolveLocal(&wr.SGL[j], rdmaio.AccessLocalWrite)
			if st != rdmaio.StatusSuccess {
				e.Status = st
				clear(e.SG[:cap(e.SG)])
				e.SG = e.SG[:0]
				break
			}
			e.SG = append(e.SG, b)
		}
		q.tail++
	}
	return len(wrs), nil
}

// References reports whether a request not yet taken names memory in
// [lo, hi).
func (q *RecvQueue) References(lo, hi uintptr) bool {
	for i := q.head; i < q.tail; i++ {
		for _, b := range q.ent[i%uint64(len(q.ent))].SG {
			if Overlaps(b, lo, hi) {
				return true
			}
		}
	}
	return false
}

// Clear drops the buffers of every entry, so that the garbage collector
// does not keep them alive; the requests stay posted (for a queue being
// destroyed).
func (q *RecvQueue) Clear() {
	for i := range q.ent {
		clear(q.ent[i].SG[:cap(q.ent[i].SG)])
	}
}

// Discard drops the requests not yet taken, without completions. The
// positions keep growing (Tail does not change).
func (q *RecvQueue) Discard() {
	for i := q.head; i < q.tail; i++ {
		e := &q.ent[i%uint64(len(q.ent))]
		clear(e.SG[:cap(e.SG)])
	}
	q.head = q.tail
}

// Reset drops every request, without completions, and starts the positions
// again from zero.
func (q *RecvQueue) Reset() {
	q.Clear()
	q.head, q.tail = 0, 0
}

// Overlaps reports whether b lies (partly) in the address range [lo, hi).
func Overlaps(b []byte, lo, hi uintptr) bool {
	if len(b) == 0 {
		return false
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a < hi && a+uintptr(len(b)) > lo
}
