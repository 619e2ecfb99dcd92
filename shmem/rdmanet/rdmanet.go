// Package rdmanet is the DSM pagers' transport between ranks on one host:
// frames over rdmaio RC queue pairs of the "shm" provider, one queue pair
// per pair of ranks, so that a message costs no system call while the
// receiver polls, and one wake-up when it sleeps. Frames between a pair of
// ranks arrive in the order they were sent, as over package tcpnet, which
// carries the frames to ranks on other hosts.
//
// A frame is sent as one SEND, or as several of at most FragmentSize bytes
// when it is longer; the immediate value carries the frame's length (so
// that the receiver allocates it once) and marks the last fragment. Small
// fragments go inline; larger ones are copied into a send arena in memory
// from PD.Alloc, from which the receiver copies them straight into its
// receive buffers. Send never blocks: what finds the send queue or the
// arena full waits in a backlog (in reused buffers), sent as completions
// free room.
//
// Net has no goroutine of its own: its owner's poller calls Poll, which
// delivers received frames, in order, to Config.Deliver, reposts the
// receive buffers and frees the room of completed sends. A poller that
// sleeps is woken by its bell (package bell): Send rings the peer's bell
// after posting, which costs a system call only if the peer sleeps.
//
// Setup takes two steps around an exchange between the ranks: Open and
// Prepare (which creates a queue pair for every peer on the host), then
// Connect with each peer's device address, bell and the number of the
// queue pair it created for this rank.
package rdmanet

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/jiarun/jia/rdmaio"
	_ "github.com/jiarun/jia/rdmaio/shm" // the "shm" provider
	"github.com/jiarun/jia/shmem/internal/bell"
)

// Tunables of the transport.
const (
	// FragmentSize is the largest SEND: a frame longer than this is sent
	// in fragments.
	FragmentSize = 64 << 10
	recvBufs     = 8       // receive buffers per peer, of FragmentSize each
	arenaSize    = 1 << 20 // send arena per peer
	sendDepth    = 256     // send queue depth per peer
	maxInline    = 1 << 10 // fragments up to this size go inline
	maxSpares    = 64      // fragment buffers kept for reuse
	maxHint      = 1 << 28 // largest frame allocated at once by its announced length
	imLast       = 1 << 31 // immediate value: last fragment of a frame; the rest is the frame's length
	maxFrame     = imLast - 1
)

// Config configures a Net.
type Config struct {
	Rank, Size int
	Job        string
	// LocalSize is the number of ranks on this host, this one included.
	LocalSize int
	// Deliver is called by Poll with every frame received, in the order
	// each sender sent them. The frame is the callee's.
	Deliver func(from int, frame []byte)
	// Lost is called by Poll once when the connection to a rank fails,
	// with why.
	Lost func(from int, err error)
	// Wake, if set, is called when frames start to wait for room: the
	// owner's poller must poll until Busy is false, since completions free
	// the room and nobody rings for them.
	Wake func()
}

// Net is one rank's end of the transport.
type Net struct {
	cfg    Config
	prefix string
	dev    rdmaio.Device
	pd     rdmaio.PD
	cq     rdmaio.CQ
	mem    []byte    // receive buffers and send arenas of every peer
	mr     rdmaio.MR // mem, registered

	mu     sync.Mutex
	conns  map[int]*conn    // by peer rank
	byQPN  map[uint32]*conn // by local queue pair number
	closed bool
	queued int      // connections with fragments waiting for room
	spares [][]byte // buffers of queued fragments sent, for reuse

	pollMu sync.Mutex // one Poll at a time: frames are delivered in order
	wc     []rdmaio.WorkCompletion
	frames []frame
}

// conn is the queue pair to one peer.
type conn struct {
	peer  int
	qp    rdmaio.QP
	recv  []byte // recvBufs buffers of FragmentSize
	recvO int    // offset of recv in Net.mem
	asm   []byte // the frame being reassembled

	arena  []byte   // send arena (a ring)
	arenaO int      // offset of arena in Net.mem
	head   int      // next byte to allocate (mod len(arena)), growing
	tail   int      // first byte still in use, growing
	sent   []sentWR // signaled sends not yet completed, in order
	wrID   uint64   // sends posted so far (the last one's ID)
	doneID uint64   // sends known complete: every ID up to it
	unsig  int      // unsignaled sends since the last signaled one
	queue  [][]byte // fragments waiting for room, with their immediate values in immQ
	immQ   []uint32
	err    error // the connection failed
	up     bool  // connected
	ringer *bell.Ringer
	sendWR [1]rdmaio.SendWR
	sge    [1]rdmaio.SGE
	recvWR [1]rdmaio.RecvWR
	rsge   [1]rdmaio.SGE
}

// sentWR is a signaled send: once it completes, so did every send before
// it, and the arena bytes up to end are free.
type sentWR struct {
	id  uint64
	end int
}

// Open opens the rank's device (provider "shm").
func Open(cfg Config) (*Net, error) {
	n := &Net{cfg: cfg, prefix: fmt.Sprintf("shmem: rank %d: rdmanet", cfg.Rank),
		conns: map[int]*conn{}, byQPN: map[uint32]*conn{}, wc: make([]rdmaio.WorkCompletion, 32)}
	// Nobody sleeps in the provider's Wait (the owner's poller sleeps on
	// its bell), so its policy does not matter.
	opts := map[string]string{"max_qp": strconv.Itoa(max(cfg.LocalSize, 2))}
	dev, err := rdmaio.Open("shm", rdmaio.Config{Job: cfg.Job, Rank: cfg.Rank, LocalSize: cfg.LocalSize, Options: opts})
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w", n.prefix, err)
	}
	n.dev = dev
	if n.pd, err = dev.AllocPD(); err == nil {
		n.cq, err = dev.CreateCQ(sendDepth + recvBufs)
	}
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("%s: open: %w", n.prefix, err)
	}
	return n, nil
}

// Addr returns the device's address, for the peers' Connect.
func (n *Net) Addr() []byte { return n.dev.Addr() }

// Prepare creates a queue pair for each of peers and returns their numbers
// by peer. It is called once.
func (n *Net) Prepare(peers []int) (map[int]uint32, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	per := recvBufs*FragmentSize + arenaSize
	if len(peers) > 0 {
		mem, err := n.pd.Alloc(len(peers) * per)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.prefix, err)
		}
		// Touch the buffers now: the first touch of memory is slow.
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = 0
		}
		n.mem = mem
		if n.mr, err = n.pd.RegMR(mem, rdmaio.AccessLocalWrite); err != nil {
			return nil, fmt.Errorf("%s: %w", n.prefix, err)
		}
	}
	qpns := map[int]uint32{}
	for i, r := range peers {
		qp, err := n.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: n.cq, RecvCQ: n.cq,
			Cap: rdmaio.QPCap{MaxSendWR: sendDepth, MaxRecvWR: recvBufs, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: maxInline}})
		if err == nil {
			err = qp.Modify(rdmaio.QPAttr{State: rdmaio.StateInit})
		}
		if err != nil {
			return nil, fmt.Errorf("%s: queue pair for rank %d: %w", n.prefix, r, err)
		}
		c := &conn{peer: r, qp: qp, recvO: i * per, arenaO: i*per + recvBufs*FragmentSize}
		c.recv = n.mem[c.recvO : c.recvO+recvBufs*FragmentSize]
		c.arena = n.mem[c.arenaO : c.arenaO+arenaSize]
		for b := 0; b < recvBufs; b++ {
			if err := n.postRecv(c, b); err != nil {
				return nil, err
			}
		}
		n.conns[r] = c
		n.byQPN[qp.QPN()] = c
		qpns[r] = qp.QPN()
	}
	return qpns, nil
}

func (n *Net) postRecv(c *conn, b int) error {
	c.rsge[0] = rdmaio.MRSGE(n.mr, c.recvO+b*FragmentSize, FragmentSize)
	c.recvWR[0] = rdmaio.RecvWR{ID: uint64(b), SGL: c.rsge[:]}
	if _, err := c.qp.PostRecv(c.recvWR[:]); err != nil {
		return fmt.Errorf("%s: receive from rank %d: %w", n.prefix, c.peer, err)
	}
	return nil
}

// Connect connects the queue pair for peer to the queue pair qpn of the
// device at addr, whose owner sleeps on bell b. Frames may be sent to peer
// once it connected its queue pair too.
func (n *Net) Connect(peer int, addr []byte, b bell.Addr, qpn uint32) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.conns[peer]
	if c == nil {
		return fmt.Errorf("%s: connect to rank %d: no queue pair was prepared for it", n.prefix, peer)
	}
	r, err := bell.Dial(b)
	if err != nil {
		return fmt.Errorf("%s: connect to rank %d: %w", n.prefix, peer, err)
	}
	c.ringer = r
	err = c.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: addr}, DestQPN: qpn})
	if err == nil {
		err = c.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite, RetryCount: 7})
	}
	if err != nil {
		return fmt.Errorf("%s: connect to rank %d: %w", n.prefix, peer, err)
	}
	c.up = true
	return nil
}

// Has reports whether frames to peer go through this Net.
func (n *Net) Has(peer int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.conns[peer]
	return c != nil && c.up
}

// Send sends a frame to peer. It does not block: a frame that finds no
// room waits (copied) until there is. The caller may reuse frame at once.
func (n *Net) Send(peer int, frame []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.conns[peer]
	switch {
	case n.closed:
		return fmt.Errorf("%s: send to rank %d: closed", n.prefix, peer)
	case c == nil || !c.up:
		return fmt.Errorf("%s: send to rank %d: not connected", n.prefix, peer)
	case c.err != nil:
		return c.err
	case len(frame) == 0 || len(frame) > maxFrame:
		return fmt.Errorf("%s: send to rank %d: frame of %d bytes", n.prefix, peer, len(frame))
	}
	for off := 0; off < len(frame); {
		k := min(FragmentSize, len(frame)-off)
		imm := uint32(len(frame))
		if off+k == len(frame) {
			imm |= imLast
		}
		if err := n.sendFragment(c, frame[off:off+k], imm); err != nil {
			return err
		}
		off += k
	}
	c.ringer.Ring()
	return nil
}

// Busy reports whether frames wait for room: then the owner must poll
// again soon even if nothing arrives, since completions free the room and
// nobody rings for them.
func (n *Net) Busy() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.queued > 0
}

// sendFragment sends one fragment or queues a copy of it. n.mu is held.
func (n *Net) sendFragment(c *conn, b []byte, imm uint32) error {
	if len(c.queue) == 0 {
		ok, err := n.post(c, b, imm)
		if ok || err != nil {
			return err
		}
	}
	if len(c.queue) == 0 {
		if n.queued++; n.queued == 1 && n.cfg.Wake != nil {
			n.cfg.Wake()
		}
	}
	c.queue = append(c.queue, append(n.spare(), b...))
	c.immQ = append(c.immQ, imm)
	return nil
}

// spare returns an empty buffer for a queued fragment, reusing those of
// fragments sent: touching fresh memory costs a page fault per page.
// n.mu is held.
func (n *Net) spare() []byte {
	if k := len(n.spares); k > 0 {
		b := n.spares[k-1]
		n.spares = n.spares[:k-1]
		return b[:0]
	}
	return make([]byte, 0, FragmentSize)
}

// post posts one fragment if the send queue and the arena have room, and
// reports whether it did. n.mu is held.
func (n *Net) post(c *conn, b []byte, imm uint32) (bool, error) {
	if c.wrID-c.doneID >= sendDepth-1 {
		return false, nil
	}
	wr := &c.sendWR[0]
	*wr = rdmaio.SendWR{Opcode: rdmaio.OpSendImm, Imm: imm}
	end := c.head
	signal := false
	if len(b) <= maxInline {
		// An inline send holds no arena room: it is signaled only so that
		// the send queue's slots are reclaimed now and then.
		wr.Inline = b
		signal = c.unsig >= sendDepth/4
	} else {
		// Contiguous room in the ring arena: skip its end if the fragment
		// does not fit there.
		start := c.head
		if pos := start % arenaSize; pos+len(b) > arenaSize {
			start += arenaSize - pos
		}
		if start+len(b)-c.tail > arenaSize {
			return false, nil
		}
		pos := start % arenaSize
		copy(c.arena[pos:], b)
		c.sge[0] = rdmaio.MRSGE(n.mr, c.arenaO+pos, len(b))
		wr.SGL = c.sge[:]
		end = start + len(b)
		signal = true
	}
	if signal {
		wr.Flags = rdmaio.SendSignaled
	}
	wr.ID = c.wrID + 1
	if _, err := c.qp.PostSend(c.sendWR[:]); err != nil {
		c.err = fmt.Errorf("%s: send to rank %d: %w", n.prefix, c.peer, err)
		return false, c.err
	}
	c.wrID++
	c.head = end
	if signal {
		c.sent = append(c.sent, sentWR{id: c.wrID, end: end})
		c.unsig = 0
	} else {
		c.unsig++
	}
	return true, nil
}

// Poll handles the completions that arrived, calling Deliver and Lost, and
// returns how many there were. It does not block; one Poll runs at a time.
func (n *Net) Poll() int {
	n.pollMu.Lock()
	defer n.pollMu.Unlock()
	k := n.cq.Poll(n.wc)
	if k == 0 {
		return 0
	}
	n.frames = n.complete(n.wc[:k], n.frames[:0])
	for _, f := range n.frames {
		if f.err != nil {
			if n.cfg.Lost != nil {
				n.cfg.Lost(f.from, f.err)
			}
			continue
		}
		n.cfg.Deliver(f.from, f.data)
	}
	clear(n.frames)
	return k
}

// frame is a received frame, or the failure of a connection.
type frame struct {
	from int
	data []byte
	err  error
}

// complete handles completions, returning the frames received.
func (n *Net) complete(wcs []rdmaio.WorkCompletion, out []frame) []frame {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range wcs {
		wc := &wcs[i]
		c := n.byQPN[wc.QPN]
		if c == nil || n.closed {
			continue
		}
		if err := wc.Err(); err != nil {
			if c.err == nil {
				c.err = fmt.Errorf("%s: connection with rank %d: %w", n.prefix, c.peer, err)
				out = append(out, frame{from: c.peer, err: c.err})
			}
			continue
		}
		if !wc.Opcode.IsRecv() {
			// Sends complete in order: every one up to this one is done,
			// and so is its arena room.
			for len(c.sent) > 0 && c.sent[0].id <= wc.ID {
				c.tail = c.sent[0].end
				c.sent = c.sent[1:]
			}
			c.doneID = max(c.doneID, wc.ID)
			if len(c.sent) == 0 {
				c.sent = c.sent[:0:0]
				c.tail = c.head
			}
			n.flush(c)
			continue
		}
		b := int(wc.ID)
		data := c.recv[b*FragmentSize : b*FragmentSize+int(wc.ByteLen)]
		last := wc.Imm&imLast != 0
		if c.asm == nil {
			// The first fragment: the immediate value gives the frame's
			// length, so the frame is allocated once.
			c.asm = make([]byte, 0, max(min(int(wc.Imm&^imLast), maxHint), len(data)))
		}
		c.asm = append(c.asm, data...)
		if last {
			out = append(out, frame{from: c.peer, data: c.asm})
			c.asm = nil
		}
		if err := n.postRecv(c, b); err != nil && c.err == nil {
			c.err = err
			out = append(out, frame{from: c.peer, err: err})
		}
	}
	return out
}

// flush posts queued fragments while there is room, and rings the peer
// if it posted any. n.mu is held.
func (n *Net) flush(c *conn) {
	posted := false
	for len(c.queue) > 0 && c.err == nil {
		ok, err := n.post(c, c.queue[0], c.immQ[0])
		if err != nil || !ok {
			break
		}
		posted = true
		if len(n.spares) < maxSpares {
			n.spares = append(n.spares, c.queue[0])
		}
		c.queue[0] = nil
		c.queue, c.immQ = c.queue[1:], c.immQ[1:]
	}
	if len(c.queue) == 0 && c.queue != nil {
		c.queue, c.immQ = nil, nil
		n.queued--
	}
	if posted && c.ringer != nil {
		c.ringer.Ring()
	}
}

// Close closes the device; frames not yet received by their peer are
// lost.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	for _, c := range n.conns {
		if c.ringer != nil {
			c.ringer.Close()
		}
	}
	n.mu.Unlock()
	return n.dev.Close()
}
