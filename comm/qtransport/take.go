package qtransport

import "github.com/jiarun/jia/comm/transport"

var _ transport.Taker = (*Transport)(nil)

// Takes implements transport.Taker: messages from src may be taken when
// its queue pair offers them where they lie and the device polls directly
// (rdmaio.TakeQP, rdmaio.DirectCQ).
func (t *Transport) Takes(src int) bool {
	return uint(src) < uint(len(t.peers)) && t.peers[src] != nil && t.peers[src].tqp != nil
}

// Arrived implements transport.Taker: the queue pair's own check for news
// (none once the transport is closed, as for Idle).
func (t *Transport) Arrived(src int) bool {
	return !t.closed.Load() && t.peers[src].tqp.Arrived()
}

// Take implements transport.Taker. Messages that a Poll of the device has
// collected but not handed out yet come first: while any wait, Take takes
// nothing. With spin, the device's poll lock is held while the queue pair
// waits for the message.
func (t *Transport) Take(src int, h transport.MsgTaker, spin int) bool {
	if !t.Takes(src) || t.closed.Load() {
		return false
	}
	p := t.peers[src]
	d := p.d
	if !d.pollMu.TryLock() {
		return false
	}
	took := false
	if d.rn == 0 {
		d.tk.h = h
		took = p.tqp.Take(&d.tk, spin)
		d.tk.h = nil
		if took {
			d.taken++
		}
	}
	d.unlockPoll()
	return took
}

// taker adapts a transport.MsgTaker to rdmaio.Taker.
type taker struct{ h transport.MsgTaker }

func (k *taker) Take(msg []byte) bool { return k.h.Take(msg) }
