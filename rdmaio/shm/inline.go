package shm

import (
	"encoding/binary"
	"fmt"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

var _ rdmaio.InlineQP = (*qp)(nil)

// PostSendInline posts an inline SEND of hdr followed by payload
// (rdmaio.InlineQP). On a connected RC QP with nothing queued ahead and
// room in the peer's ring, the two pieces are copied straight into the
// ring entry; otherwise they are copied into the send queue entry and the
// request waits its turn as PostSend's do.
func (q *qp) PostSendInline(id uint64, flags rdmaio.SendFlags, hdr, payload []byte) error {
	n := len(hdr) + len(payload)
	if n > q.cap.MaxInline || q.typ != rdmaio.RC {
		// Refused (or, for UD, lacking an address handle): PostSend says
		// why. Not a hot path.
		b := append(append(make([]byte, 0, n), hdr...), payload...)
		_, err := q.PostSend([]rdmaio.SendWR{{ID: id, Opcode: rdmaio.OpSend, Flags: flags, Inline: b}})
		return err
	}
	q.smu.Lock()
	if q.closed {
		q.smu.Unlock()
		return q.errf("post send: %w", rdmaio.ErrClosed)
	}
	if err := provider.CanPostSend(q.State()); err != nil {
		q.smu.Unlock()
		return q.errf("post send: %w", err)
	}
	depth := q.sqDepth
	if q.sqTail-q.sqFree >= depth {
		q.smu.Unlock()
		return q.errf("post send: work request 0 (id %d): %w", id,
			fmt.Errorf("%w: send queue depth %d", rdmaio.ErrQueueFull, depth))
	}
	// Executed as execute would have when it is the only work not yet
	// executed: into the ring at once, before the work request's own
	// bookkeeping (which the consumer does not wait for).
	e := &q.sq[q.sqTail&q.sqMask]
	e.length = uint32(n)
	pushed, acked := false, false
	if q.sqExec == q.sqTail && q.connectedRTS() {
		pushed, acked = q.pushInline(e, hdr, payload)
	}
	e.reset(id, rdmaio.OpSend, q.sigAll || flags&rdmaio.SendSignaled != 0)
	e.inline, e.shared = true, false
	if e.signaled {
		q.sigOut++
	}
	q.sqTail++
	if pushed {
		e.inRing = true
		q.unacked++
		q.sqExec++
		ringDoorbell(q.peerRecvDB)
	} else {
		k := copy(e.inl, hdr)
		k += copy(e.inl[k:], payload)
		e.sg = append(e.sg, e.inl[:k])
		e.src = append(e.src, srcDesc{})
		q.run()
	}
	// An entry that carried the acknowledgement back (efAck) spares the
	// flush of cAcked: a locked instruction right after the entry's stores,
	// which waits for the entry's line to reach the consumer. Not when the
	// consumer's send CQ has sleepers, which only flushAck wakes.
	flush := !acked || q.producerSleeps()
	q.updateSend()
	q.smu.Unlock()
	if flush {
		q.flushAck()
	}
	return nil
}

// connectedRTS reports whether the QP is in RTS and still connected to
// the remote QP it was connected to, the condition under which execute
// writes SENDs into the peer's ring. smu is held.
func (q *qp) connectedRTS() bool {
	return q.pctl != nil && q.State() == rdmaio.StateRTS &&
		load32(q.pctl, cQPN) == q.destQPN && load64(q.pctl, cProducer) == q.myID
}

// pushInline is push for the inline SEND e of hdr+payload (of e.length
// bytes, the only field of e it reads), whose bytes are copied from the two
// pieces. It returns false when the ring is full, and whether the entry
// carries an acknowledgement back (efAck). smu is held.
func (q *qp) pushInline(e *sqe, hdr, payload []byte) (pushed, acked bool) {
	ent, ok := q.reserve(uint64(roundUp(eDataShort+int(e.length), lineSize)))
	if !ok {
		return false, false
	}
	var flags uint8 = efInline | efShort
	if q.rnrRetry == rdmaio.RNRRetryInfinite {
		flags |= efNoAbort // see stuck
	}
	flags = q.ackBack(ent, flags)
	ent[eOp] = byte(rdmaio.OpSend)
	ent[eFlags] = flags
	binary.LittleEndian.PutUint32(ent[eLenShort:], e.length)
	k := copy(ent[eDataShort:], hdr)
	copy(ent[eDataShort+k:], payload)
	q.publish(e, ent)
	return true, flags&efAck != 0
}

// ackBack writes into the inline entry ent the acknowledgement it carries
// back to the QP it goes to (eAckShort: the low 16 bits of the sequence
// number of the last entry we consumed from our inbound ring) and returns
// flags with efAck, when that QP is our ring's producer; otherwise it
// zeroes the field and returns flags unchanged. smu is held.
func (q *qp) ackBack(ent []byte, flags uint8) uint8 {
	var ack uint16
	if load64(q.ctl, cProducer) == q.destID {
		flags |= efAck
		ack = uint16(q.consA.Load()>>32 - 1)
	}
	binary.LittleEndian.PutUint16(ent[eAckShort:], ack)
	return flags
}

// noteAck takes the acknowledgement an entry carried back (ackBack) into
// ackHint: the smallest sequence number at or after the last one whose
// low 16 bits are v. Acknowledgements come in order and never run ahead of
// what was consumed, so the value is never above the true one (it may lag
// it when more than 65535 entries were consumed between two). rmu is
// held.
func (q *qp) noteAck(v uint16) {
	h := q.ackHint.Load()
	if n := h + uint64(v-uint16(h)); n != h {
		storeHint(&q.ackHint, n)
	}
}

// producerSleeps reports whether a Wait of the remote QP's send CQ sleeps
// on its doorbell, which only consumed rings: an entry that carried the
// acknowledgement back (efAck) then still needs flushAck. smu is held.
func (q *qp) producerSleeps() bool {
	return hasWaiters(q.consumerDB())
}
