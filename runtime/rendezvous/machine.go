package rendezvous

import (
	"bytes"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"slices"
)

// ConnID names a connection for the Machine. The driver (the Server, or a
// test) chooses the IDs; each connection must get an ID never used before.
type ConnID uint64

// Input is an event the Machine steps on: Opened, Received, Malformed,
// Closed or Shutdown.
type Input interface{ isInput() }

// Opened says a new connection arrived. Nonce must be fresh random bytes;
// the Machine sends it in the challenge.
type Opened struct {
	Conn   ConnID
	Remote string
	Nonce  [NonceLen]byte
}

// Received carries one frame read from a connection: Body is the frame
// without its length prefix (the type byte, then the payload). The Machine
// copies what it keeps, so the driver may reuse Body after Step returns.
type Received struct {
	Conn ConnID
	Body []byte
}

// Malformed says the driver could not read a frame from a connection: its
// length prefix was 0 or above the limit. The stream cannot be trusted after
// it; the Machine closes the connection with a reason.
type Malformed struct {
	Conn ConnID
	Err  error
}

// Closed says a connection ended (read error, EOF, handshake timeout). Err
// says why. Closing a connection the Machine already closed is a no-op.
type Closed struct {
	Conn ConnID
	Err  error
}

// Shutdown ends the job from the owner's side: every connection is told
// Reason and closed, and new connections are refused with it.
type Shutdown struct {
	Reason string
}

func (Opened) isInput()    {}
func (Received) isInput()  {}
func (Malformed) isInput() {}
func (Closed) isInput()    {}
func (Shutdown) isInput()  {}

// Action is something the driver must do after Step: Send, CloseConn or
// Report. Actions must be carried out in order.
type Action interface{ isAction() }

// Send writes Frame, a complete frame (length prefix included), to Conn.
// The same Frame may be sent to many connections (a fence result is encoded
// once for all); it must not be modified.
type Send struct {
	Conn  ConnID
	Frame []byte
}

// CloseConn closes Conn once the frames sent to it before have been written.
// The Machine forgets the connection: later input from it is ignored.
type CloseConn struct {
	Conn   ConnID
	Reason string
}

// Report hands an Event to the owner.
type Report struct {
	Event Event
}

func (Send) isAction()      {}
func (CloseConn) isAction() {}
func (Report) isAction()    {}

// MachineConfig configures a Machine.
type MachineConfig struct {
	Size   int    // number of ranks in the job, at least 1
	Job    string // job identifier, as in the launch contract
	Secret []byte // per-job secret, SecretLen bytes
}

// Machine is the rendezvous protocol as a pure state machine: no I/O, no
// clocks, no randomness, no goroutines. The driver feeds it inputs through
// Step and carries out the actions it returns. A Machine is not safe for
// concurrent use; the driver serializes Step.
//
// The rules it enforces, per connection and per rank:
//
//   - A connection must answer the challenge with a hello for the right job
//     and protocol version, carrying a correct HMAC of the nonce, job and
//     ranks under the job secret, and naming distinct ranks in [0, Size)
//     that are not yet connected. Anything else is refused with a reason.
//   - After the hello, a connection may only speak for its own ranks: put,
//     fence, abort and finalize frames naming another rank are protocol
//     errors, and so is a second hello or a server-to-client frame.
//   - Within an epoch, a key may be put by one rank only; that rank may put
//     it again (the last value wins). A rank may not put while it waits for
//     the fence, and joins each epoch's fence once.
//   - A fence completes when every rank that has not finalized has joined
//     it (including ranks not yet connected); the result, every pair put in
//     the epoch, is encoded once and sent to each connection, and the next
//     epoch begins empty.
//   - A rank finalizes once, not while it waits for a fence; after that it
//     may not put, fence or abort.
//   - An abort ends the job: every connection is sent the abort and closed.
//   - A protocol error closes the offending connection; a connection that
//     ends while it speaks for ranks that have not finalized loses them, and
//     a lost rank fails the job: every connection is told why and closed.
//   - Once the job has ended (abort, failure, Shutdown), new connections
//     are refused with the reason.
type Machine struct {
	size   int
	job    string
	secret []byte

	conns map[ConnID]*machineConn
	ranks []rankState

	ended bool   // the job was aborted, failed or shut down
	why   string // the reason, sent to connections that arrive later

	epoch     uint32
	joined    int               // ranks that joined this epoch's fence
	finalized int               // ranks that finalized
	kv        map[string][]byte // pairs of this epoch (copies of the values)
	owner     map[string]int    // rank that put each key in this epoch
	kvBytes   int               // encoded size of kv in a fence result

	maxEpochBytes int // limit on kvBytes; MaxFrame minus the header
	out           []Action
}

type machineConn struct {
	remote string
	nonce  [NonceLen]byte
	ranks  []int  // nil until the hello is accepted
	sent   uint64 // 1 + the last epoch whose fence result it was sent
}

type rankStatus uint8

const (
	rankAbsent    rankStatus = iota // never connected
	rankLive                        // connected, not finalized
	rankFinalized                   // finalized
	rankGone                        // its connection ended before it finalized
)

type rankState struct {
	status rankStatus
	conn   ConnID
	fenced bool // joined the fence of the current epoch
}

// NewMachine returns a Machine for a job of cfg.Size ranks, at epoch 0.
func NewMachine(cfg MachineConfig) (*Machine, error) {
	if cfg.Size < 1 || cfg.Size > 1<<31-1 {
		return nil, fmt.Errorf("rendezvous: job size %d out of range", cfg.Size)
	}
	if cfg.Job == "" || len(cfg.Job) > MaxJobLen {
		return nil, fmt.Errorf("rendezvous: job ID must be 1 to %d bytes, have %d", MaxJobLen, len(cfg.Job))
	}
	if len(cfg.Secret) != SecretLen {
		return nil, fmt.Errorf("rendezvous: job secret must be %d bytes, have %d", SecretLen, len(cfg.Secret))
	}
	return &Machine{
		size:          cfg.Size,
		job:           cfg.Job,
		secret:        slices.Clone(cfg.Secret),
		conns:         make(map[ConnID]*machineConn),
		ranks:         make([]rankState, cfg.Size),
		kv:            make(map[string][]byte),
		owner:         make(map[string]int),
		maxEpochBytes: MaxFrame - (fenceResultHeader - 4),
	}, nil
}

// Step applies one input and returns the actions to carry out, in order.
// The returned slice is valid until the next call to Step.
func (m *Machine) Step(in Input) []Action {
	clear(m.out)
	m.out = m.out[:0]
	switch in := in.(type) {
	case Opened:
		m.open(in)
	case Received:
		m.receive(in.Conn, in.Body)
	case Malformed:
		m.malformed(in.Conn, in.Err)
	case Closed:
		m.closed(in.Conn, in.Err)
	case Shutdown:
		m.end(in.Reason, nil)
	}
	return m.out
}

// Authenticated reports whether conn has passed the handshake and is open.
func (m *Machine) Authenticated(conn ConnID) bool {
	c := m.conns[conn]
	return c != nil && c.ranks != nil
}

// Epoch returns the current fence epoch, counting from 0.
func (m *Machine) Epoch() int { return int(m.epoch) }

// ---- actions ----

func (m *Machine) send(conn ConnID, frame []byte) {
	m.out = append(m.out, Send{Conn: conn, Frame: frame})
}

// sendMsg encodes a small message in its own slice and sends it.
func (m *Machine) sendMsg(conn ConnID, msg message) {
	m.send(conn, encodeFrame(msg))
}

func (m *Machine) report(ev Event) { m.out = append(m.out, Report{Event: ev}) }

// drop closes conn and forgets it. It returns the ranks of conn that had not
// finalized, now gone.
func (m *Machine) drop(conn ConnID, reason string) (lost []int) {
	if m.conns[conn] == nil {
		return nil
	}
	m.out = append(m.out, CloseConn{Conn: conn, Reason: reason})
	return m.forget(conn)
}

// forget forgets conn, which is closed. It returns the ranks of conn that
// had not finalized, now gone.
func (m *Machine) forget(conn ConnID) (lost []int) {
	c := m.conns[conn]
	if c == nil {
		return nil
	}
	delete(m.conns, conn)
	for _, r := range c.ranks {
		if m.ranks[r].status == rankLive {
			m.ranks[r].status = rankGone
			if m.ranks[r].fenced {
				m.ranks[r].fenced = false
				m.joined--
			}
			lost = append(lost, r)
		}
	}
	return lost
}

// refuse tells an unauthenticated connection why it is refused, closes it
// and reports it.
func (m *Machine) refuse(conn ConnID, reason string) {
	c := m.conns[conn]
	m.sendMsg(conn, &refusedMsg{reason: reason})
	m.drop(conn, "refused: "+reason)
	m.report(Refused{Remote: c.remote, Reason: reason})
}

// protocolError closes an authenticated connection that broke a rule. Its
// unfinalized ranks are lost, which fails the job.
func (m *Machine) protocolError(conn ConnID, err error) {
	c := m.conns[conn]
	reason := "protocol error: " + err.Error()
	m.sendMsg(conn, &closingMsg{reason: reason})
	lost := m.drop(conn, reason)
	m.report(ProtocolError{Remote: c.remote, Ranks: c.ranks, Err: err})
	m.lose(lost, err)
}

// lose reports ranks lost for err and fails the job if there were any.
func (m *Machine) lose(ranks []int, err error) {
	for _, r := range ranks {
		m.report(Lost{Rank: r, Err: err})
	}
	if len(ranks) > 0 {
		m.end(fmt.Sprintf("job failed: rank %d lost: %v", ranks[0], err), nil)
	}
}

// end ends the job for reason: every connection is closed, authenticated
// ones after frame (or a closing frame with the reason when frame is nil),
// others after a refusal. Later connections are refused with reason.
func (m *Machine) end(reason string, frame []byte) {
	if m.ended {
		return
	}
	m.ended, m.why = true, reason
	if frame == nil {
		frame = encodeFrame(&closingMsg{reason: reason})
	}
	var refusal []byte
	ids := make([]ConnID, 0, len(m.conns))
	for id := range m.conns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if m.conns[id].ranks != nil {
			m.send(id, frame)
		} else {
			if refusal == nil {
				refusal = encodeFrame(&refusedMsg{reason: reason})
			}
			m.send(id, refusal)
		}
		m.drop(id, reason)
	}
}

// ---- inputs ----

func (m *Machine) open(in Opened) {
	if _, dup := m.conns[in.Conn]; dup {
		return // a driver bug; keep the connection that has the ID
	}
	m.conns[in.Conn] = &machineConn{remote: in.Remote, nonce: in.Nonce}
	if m.ended {
		m.refuse(in.Conn, m.why)
		return
	}
	m.sendMsg(in.Conn, &challengeMsg{version: Version, nonce: in.Nonce})
}

func (m *Machine) closed(conn ConnID, err error) {
	c := m.conns[conn]
	if c == nil {
		return
	}
	if err == nil {
		err = io.EOF
	}
	if c.ranks == nil {
		m.forget(conn)
		m.report(Refused{Remote: c.remote, Reason: "connection ended during the handshake: " + err.Error()})
		return
	}
	m.lose(m.forget(conn), err)
}

func (m *Machine) malformed(conn ConnID, err error) {
	c := m.conns[conn]
	switch {
	case c == nil:
	case c.ranks == nil:
		m.refuse(conn, fmt.Sprintf("bad hello: %v", err))
	default:
		m.protocolError(conn, err)
	}
}

func (m *Machine) receive(conn ConnID, body []byte) {
	c := m.conns[conn]
	if c == nil {
		return // closed by the Machine; the driver is still draining it
	}
	msg, err := decodeMessage(body)
	if c.ranks == nil {
		if err != nil {
			m.refuse(conn, fmt.Sprintf("bad hello: %v", err))
			return
		}
		h, ok := msg.(*helloMsg)
		if !ok {
			m.refuse(conn, fmt.Sprintf("protocol error: expected hello, got %s frame", typeName(body[0])))
			return
		}
		m.hello(conn, c, h)
		return
	}
	if err != nil {
		m.protocolError(conn, err)
		return
	}
	if !fromClient(msg.frameType()) {
		m.protocolError(conn, fmt.Errorf("unexpected %s frame from a client", typeName(msg.frameType())))
		return
	}
	switch msg := msg.(type) {
	case *helloMsg:
		m.protocolError(conn, errors.New("second hello on an authenticated connection"))
	case *putMsg:
		if m.checkRank(conn, msg.rank, "put") {
			m.put(conn, msg)
		}
	case *fenceMsg:
		if m.checkRank(conn, msg.rank, "fence") {
			m.fence(conn, msg.rank)
		}
	case *abortMsg:
		if m.checkRank(conn, msg.rank, "abort") {
			m.abort(msg)
		}
	case *finalizeMsg:
		if m.checkRank(conn, msg.rank, "finalize") {
			m.finalize(conn, msg.rank)
		}
	}
}

// hello checks a hello and accepts or refuses the connection.
func (m *Machine) hello(conn ConnID, c *machineConn, h *helloMsg) {
	if h.version != Version {
		m.refuse(conn, fmt.Sprintf("unsupported protocol version %d (server speaks %d)", h.version, Version))
		return
	}
	if h.job != m.job {
		m.refuse(conn, fmt.Sprintf("authentication failed (wrong job ID %q)", h.job))
		return
	}
	want := helloMAC(m.secret, c.nonce, h.job, h.ranks)
	if !hmac.Equal(want[:], h.mac[:]) {
		m.refuse(conn, "authentication failed (wrong job secret)")
		return
	}
	if len(h.ranks) == 0 {
		m.refuse(conn, "hello names no rank")
		return
	}
	for i, r := range h.ranks {
		if r < 0 || r >= m.size {
			m.refuse(conn, fmt.Sprintf("rank %d out of range [0, %d)", r, m.size))
			return
		}
		if slices.Contains(h.ranks[:i], r) {
			m.refuse(conn, fmt.Sprintf("rank %d named twice in the hello", r))
			return
		}
		switch m.ranks[r].status {
		case rankLive:
			m.refuse(conn, fmt.Sprintf("rank %d already connected", r))
			return
		case rankFinalized:
			m.refuse(conn, fmt.Sprintf("rank %d already finalized", r))
			return
		case rankGone:
			m.refuse(conn, fmt.Sprintf("rank %d was lost", r))
			return
		}
	}
	c.ranks = h.ranks
	for _, r := range h.ranks {
		m.ranks[r] = rankState{status: rankLive, conn: conn}
	}
	m.sendMsg(conn, &welcomeMsg{size: m.size, epoch: m.epoch})
	m.report(Connected{Ranks: h.ranks, Remote: c.remote})
}

// checkRank checks that rank is served by conn and has not finalized; it
// reports a protocol error otherwise.
func (m *Machine) checkRank(conn ConnID, rank int, what string) bool {
	if rank < 0 || rank >= m.size || m.ranks[rank].conn != conn || m.ranks[rank].status == rankAbsent {
		m.protocolError(conn, fmt.Errorf("%s for rank %d, which this connection does not speak for", what, rank))
		return false
	}
	if m.ranks[rank].status == rankFinalized {
		m.protocolError(conn, fmt.Errorf("rank %d: %s after finalize", rank, what))
		return false
	}
	return true
}

func (m *Machine) put(conn ConnID, p *putMsg) {
	r := p.rank
	if m.ranks[r].fenced {
		m.protocolError(conn, fmt.Errorf("rank %d: put while waiting for the fence of epoch %d", r, m.epoch))
		return
	}
	if p.key == "" {
		m.protocolError(conn, fmt.Errorf("rank %d: put with an empty key", r))
		return
	}
	size := entryOverhead + len(p.key) + len(p.value)
	old, exists := m.kv[p.key]
	if exists {
		if o := m.owner[p.key]; o != r {
			m.protocolError(conn, fmt.Errorf("rank %d: key %q already put by rank %d in epoch %d", r, p.key, o, m.epoch))
			return
		}
		size -= entryOverhead + len(p.key) + len(old)
	}
	if m.kvBytes+size > m.maxEpochBytes {
		m.protocolError(conn, fmt.Errorf("rank %d: put of %q: the pairs of epoch %d would exceed %d bytes", r, p.key, m.epoch, m.maxEpochBytes))
		return
	}
	m.kvBytes += size
	m.kv[p.key] = bytes.Clone(p.value)
	if !exists {
		m.owner[p.key] = r
	}
}

func (m *Machine) fence(conn ConnID, r int) {
	if m.ranks[r].fenced {
		m.protocolError(conn, fmt.Errorf("rank %d: fence twice in epoch %d", r, m.epoch))
		return
	}
	m.ranks[r].fenced = true
	m.joined++
	m.maybeCompleteFence()
}

// maybeCompleteFence completes the fence once every rank that has not
// finalized has joined it.
func (m *Machine) maybeCompleteFence() {
	if m.joined == 0 || m.joined < m.size-m.finalized {
		return
	}
	frame := make([]byte, 0, fenceResultHeader+m.kvBytes)
	frame = appendFrame(frame, &fenceResultMsg{epoch: m.epoch, pairs: m.kv})
	for r := range m.ranks {
		rs := &m.ranks[r]
		if rs.status != rankLive {
			continue
		}
		rs.fenced = false
		if c := m.conns[rs.conn]; c != nil && c.sent != uint64(m.epoch)+1 {
			c.sent = uint64(m.epoch) + 1
			m.send(rs.conn, frame)
		}
	}
	m.report(FenceDone{Epoch: int(m.epoch), Keys: len(m.kv), Bytes: m.kvBytes})
	m.epoch++
	m.joined = 0
	clear(m.kv)
	clear(m.owner)
	m.kvBytes = 0
}

func (m *Machine) abort(a *abortMsg) {
	ab := Abort{Rank: a.rank, Code: int(a.code), Message: a.text}
	frame := encodeFrame(&abortedMsg{rank: a.rank, code: a.code, text: a.text})
	m.report(ab)
	m.end((&AbortError{Rank: ab.Rank, Code: ab.Code, Message: ab.Message}).Error(), frame)
}

func (m *Machine) finalize(conn ConnID, r int) {
	if m.ranks[r].fenced {
		m.protocolError(conn, fmt.Errorf("rank %d: finalize while waiting for the fence of epoch %d", r, m.epoch))
		return
	}
	m.ranks[r].status = rankFinalized
	m.finalized++
	m.sendMsg(conn, &finalizedMsg{rank: r})
	m.report(Finalized{Rank: r})
	if m.finalized == m.size {
		m.report(AllFinalized{})
		return
	}
	m.maybeCompleteFence()
}
