package comm

import "github.com/jiarun/jia/comm/proto"

// directRecv is the receive a blocking Recv takes its message into
// straight from the transport, without a request or the engine
// (recvDirect); it is the transport.MsgTaker that Take offers the message
// to. proc holds one, used under mu.
type directRecv struct {
	ctx      uint32
	src, tag int32 // tag may be AnyTag
	buf      []byte
	// Set by Take: a message was offered (offered), taken (n bytes, with
	// tag mtag).
	offered bool
	n       int
	mtag    int32
}

// Take implements transport.MsgTaker: it takes msg when it is an eager
// message that matches the receive and fits its buffer. A longer one is
// left to the engine, which reports the truncation.
func (d *directRecv) Take(msg []byte) bool {
	d.offered = true
	payload, tag, ok := proto.MatchEager(msg, d.ctx, d.src, d.tag)
	if !ok || len(payload) > len(d.buf) {
		return false
	}
	d.n = copy(d.buf, payload)
	d.mtag = tag
	return true
}

// directPollEvery is how many rounds of recvDirect's spinning pass between
// polls of the transport, unless it is idle: what it collected without
// handing out (a progress goroutine's work) waits for a poll.
//
// directHold is how many rounds recvDirect waits in one Take, holding the
// rank's lock and the transport's, so that the message, when it comes,
// finds them taken, and nothing can change what it would match meanwhile;
// takeLoads is how many times Take looks at the ring per round (a look
// costs a load, a round of the general path's wait some more:
// Options.Spin counts those). It holds them for the first directHolding
// rounds only (a few microseconds, long enough for a ping-pong's answer):
// a goroutine of the rank that wants a lock meanwhile seldom finds it free
// between two Takes, and must not wait for long. Later rounds watch the
// ring without locks, take them when the rank sends something, and look
// at the engine's queues every directEvery rounds (another goroutine may
// have posted a receive or queued a message meanwhile).
const (
	directPollEvery = 1024
	directHold      = 128
	directHolding   = 2 * directHold
	takeLoads       = 6
	directEvery     = 16
)

// recvDirect is the blocking receive of a contiguous buffer from rank src
// of c, transport rank from, whose small messages the transport offers
// where they lie (transport.Taker): while nothing else on the context
// could match first (proto.Engine.Direct), it watches from alone and takes
// the next message straight into b when it is an eager one that matches
// and fits, without posting a receive: no request, no matching queue and
// no completion on the path from the message's arrival to the call's
// return. It first waits in Take, directHold rounds at a time with the
// rank's lock held, so that the locks are taken before the message comes
// (directHolding). It reports false, having taken nothing, when the
// receive must be posted after all: something else on the context (a
// receive another goroutine posted, a message already queued), a message
// that does not match or does not fit or that the transport does not
// offer where it lies, an error, or nothing within the spinning
// (Options.Spin), after which waiting is the general path's business:
// rounds says how many rounds of the spinning it spent, which the general
// path's wait does not spin again.
//
// Its first round makes progress (progressDirect) unless the transport is
// idle, to collect the completions of earlier sends, and so does every
// directPollEvery-th; such a round looks at the ring once, before the
// poll, without waiting.
func (c *Comm) recvDirect(b []byte, elem int, ctx uint32, src, tag, from int) (st Status, ok bool, rounds int) {
	p := c.p
	p.flush()
	nextPoll := 0
	for i := 0; i < p.opt.Spin; {
		holding := i < directHolding
		if !holding && !p.take.Arrived(from) && i%directEvery != 0 || !p.mu.TryLock() {
			i++
			continue
		}
		if p.fatal != nil || !p.eng.Direct(ctx, int32(src), int32(tag)) {
			p.mu.Unlock()
			return Status{}, false, i
		}
		poll := i >= nextPoll && !p.quiet(1)
		hold := 0
		if holding && !poll {
			hold = min(directHold, directHolding-i, p.opt.Spin-i)
		}
		d := &p.direct
		d.ctx, d.src, d.tag, d.buf = ctx, int32(src), int32(tag), b
		took := p.take.Take(from, d, hold*takeLoads)
		// News that Take did not offer either came after it looked (its
		// line was on its way: the load that tells waits for it) or is
		// not a message Take hands out: looks until two have declined it
		// tell which.
		declined := 0
		for !took && !d.offered && declined < 2 && p.take.Arrived(from) {
			took = p.take.Take(from, d, 0)
			declined++
		}
		offered, n, mtag := d.offered, d.n, d.mtag
		*d = directRecv{}
		if took {
			p.directs++
			p.mu.Unlock()
			st = Status{Source: src, Tag: int(mtag), Bytes: n}
			if elem > 0 {
				st.Count = n / elem
			}
			return st, true, i
		}
		if offered || declined == 2 {
			// Not for this receive, or not a message Take hands out
			// (its payload lies elsewhere, say): the engine's.
			p.mu.Unlock()
			return Status{}, false, i
		}
		i += max(hold, 1)
		if poll {
			nextPoll = i + directPollEvery
			p.progressDirect()
			p.run()
			if p.fatal != nil || !p.eng.Direct(ctx, int32(src), int32(tag)) {
				p.mu.Unlock()
				return Status{}, false, i
			}
		}
		p.mu.Unlock()
	}
	return Status{}, false, p.opt.Spin
}

// progressDirect is recvDirect's poll: through the transport's Reaper
// where it has one, so that a message that arrives meanwhile stays where
// Take finds it (a Poll would move it to the engine's unexpected queue,
// and the receive to the general path); mu is held.
func (p *proc) progressDirect() {
	if p.reaper != nil {
		p.reaper.Reap(p)
	} else {
		p.tr.Poll(p)
	}
}
