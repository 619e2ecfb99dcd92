package shm

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

var _ rdmaio.TakeQP = (*qp)(nil)

// Arrived implements rdmaio.TakeQP: the check Poll makes of this QP
// before it takes the QP's lock (recvIdle).
func (q *qp) Arrived() bool { return !q.recvIdle() }

// Take implements rdmaio.TakeQP for an RC QP attached to an SRQ: the next
// entry of the inbound ring, when it is an inline SEND that its producer
// never withdraws (efNoAbort), is handed to t where it lies; taken, it is
// consumed as recvDirect consumes one. Anything else (an entry whose
// payload lies in the sender's memory, one that may be withdrawn, a
// malformed one, the error state) is left to pollRecv, which knows what to
// do with it.
//
// The acknowledgement of what Take consumed (cAcked, which the producer
// reads to reuse its ring and to complete signaled SENDs) waits for the
// QP's next post (after the message posted, usually the answer), Take or
// poll: the store would delay an answer posted right after it by a whole
// cache-line transfer whenever the producer has read the line since the
// last one (x86 makes stores visible in order, and the answer's first
// locked instruction waits for the line). An inline answer carries the
// acknowledgement itself (efAck), and cAcked then waits for the next Take
// or poll. Meanwhile recvIdle reports news (consOwed).
//
// With spin, Take holds rmu while it watches the ring for the next entry
// (the one word that publishes it), spin loads at most.
func (q *qp) Take(t rdmaio.Taker, spin int) bool {
	if q.typ != rdmaio.RC || q.srq == nil || spin <= 0 && !q.mayTake() {
		return false
	}
	q.rmu.Lock()
	if q.closed || q.dead || !provider.Receives(q.State()) {
		q.rmu.Unlock()
		return false
	}
	if q.ackOwed {
		q.consumed()
	}
	ring := q.ring
	R := uint64(len(ring))
	moved, took := false, false
	for {
		pos := q.cons & (R - 1)
		stw := p64(ring, int(pos)+eState)
		w := atomic.LoadUint64(stw)
		if !seqIs(w, q.cseq) {
			if spin--; spin >= 0 {
				continue // nothing new yet
			}
			break // nothing new
		}
		if stampKind(w) == stPad {
			q.cons += R - pos
			q.cseq++
			moved = true
			continue
		}
		ent := ring[pos:]
		if !takeable(w, ent) {
			break
		}
		length := binary.LittleEndian.Uint32(ent[eLenShort:])
		size, ok := entrySize(ent[eFlags], 0, length, R-pos)
		if !ok {
			break
		}
		if !t.Take(ent[eDataShort : eDataShort+int(length)]) {
			break
		}
		if ent[eFlags]&efAck != 0 {
			q.noteAck(binary.LittleEndian.Uint16(ent[eAckShort:]))
		}
		clearLines(ent[:size])
		q.cons += size
		q.cseq++
		moved, took = true, true
		break
	}
	if moved {
		q.ackOwed = true
		q.syncConsA()
	}
	q.rmu.Unlock()
	return took
}

// mayTake reports, without a lock, whether Take has anything to do: an
// acknowledgement owed, or a new ring entry that is a pad or an inline
// SEND it could take. What pollRecv alone handles (an entry whose payload
// lies in the sender's memory, for one) is declined before the lock. A
// published entry does not change until it is consumed, and only the
// holder of rmu consumes: the peek may be stale, never wrong in a way that
// matters, as Take checks again under the lock.
func (q *qp) mayTake() bool {
	c := q.consA.Load()
	if c&consOwed != 0 {
		return true
	}
	pos := int(c & (consOwed - 1))
	w := load64(q.ring, pos+eState)
	if uint32(stampSeq(w)) != uint32(c>>32) {
		return false // nothing new
	}
	return stampKind(w) == stPad || takeable(w, q.ring[pos:])
}

// takeable reports whether the ring entry ent, whose state word is w, is
// one Take hands out: a published SEND without immediate data, carried
// inline, that its producer never withdraws.
func takeable(w uint64, ent []byte) bool {
	const want = efInline | efShort | efNoAbort
	return stampKind(w) == stPublished && rdmaio.Opcode(ent[eOp]) == rdmaio.OpSend && ent[eFlags]&want == want
}
