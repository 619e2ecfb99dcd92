package tcp

import "sync/atomic"

// Acknowledgements of signaled requests held back. A signaled request asks
// for its acknowledgement at once: the requester waits for it to complete
// the request. When a busy poller receives it, the program usually answers
// the message right away (a ping-pong, a request and its reply), and the
// acknowledgement can go out in the same send(2) as the answer instead of
// costing a system call of its own at both ends. So a poller's progress
// pass holds it back, and it goes out with the next frame the QP sends or,
// if none comes first, at the next Poll or Post on another QP. A program
// that stops polling leaves the device to its service goroutine within
// passiveWindow (the watchdog), which then sends it. Only one QP holds an
// acknowledgement back at a time; others send theirs at once, as does the
// service goroutine.
//
// Acknowledgements are held back only while the process has one device
// open (one rank per process): where one program drives several devices,
// it may well wait on one for what another holds back.
//
// (Waking the service sooner for a held acknowledgement, with a shorter
// watchdog, costs more than it saves: programming a timer that close is
// expensive on virtual machines, and the wake-up takes a processor from a
// poller.)

// heldAck is the QP whose acknowledgement of a signaled request is held
// back, or nil.
var heldAck atomic.Pointer[qp]

// liveDevices counts the open devices of the process.
var liveDevices atomic.Int32

// holdWithPeers lets tests hold acknowledgements back with several devices
// open.
var holdWithPeers atomic.Bool

// deferAck tries to hold back the acknowledgement of a signaled request that
// q just queued, and reports whether it did. It does only in a poller's
// progress pass while the service goroutine sleeps (leaving progress to
// the pollers). pmu and q.mu are held.
func (q *qp) deferAck() bool {
	d := q.dev
	if !d.inPoller || (liveDevices.Load() != 1 && !holdWithPeers.Load()) {
		return false
	}
	if cur := heldAck.Load(); cur != q && (cur != nil || !heldAck.CompareAndSwap(nil, q)) {
		return false
	}
	// heldAck is set before svcPassive is read, and the service clears
	// svcPassive before it looks at heldAck (releaseHeldAck at the top of
	// its loop): either the service sees the held acknowledgement or this
	// sees that the service is awake.
	if !d.svcPassive.Load() {
		heldAck.CompareAndSwap(q, nil)
		return false
	}
	return true
}

// releaseHeldAck sends the held-back acknowledgement, if there is one (and
// no frame took it along yet): any device's pollers (poller set) send it,
// a service goroutine only its own device's. It is called with no lock
// held.
func (d *Device) releaseHeldAck(poller bool) {
	q := heldAck.Load()
	if q == nil || (!poller && q.dev != d) || !heldAck.CompareAndSwap(q, nil) {
		return
	}
	q.mu.Lock()
	q.sendLoneAck()
	q.mu.Unlock()
}
