package rdmaiotest

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jiarun/jia/rdmaio"
)

// The benchmark harness: two connected ranks, rank 0 driving, rank 1 (the
// peer) serving in a goroutine of this process or in another process. Each
// rank has a control RC QP (8-byte ping-pongs, end-of-stream markers), a
// data RC QP (one-sided operations and streams of SENDs), a UD QP (for the
// allocation checks) and a region of MemSize bytes from PD.Alloc that is
// the target of one-sided operations and of the peer's receives.

// MemSize is the size of each rank's benchmark region: the largest transfer
// the harness measures.
const MemSize = 4 << 20

const (
	ctrlSlots = 16
	ctrlSize  = 64
	dataRecvs = 1024       // receives the peer keeps posted on the data QP
	sendDepth = 1024       // send queue depth of both RC QPs
	stopImm   = 0xffffffff // control SEND with this immediate: the peer stops
	markImm   = 0xfffffffe // data SEND with this immediate: the peer answers on the control QP
	benchQKey = 0x600d
	peerTag   = "JIA-PEER "
)

// PeerEnv is the environment variable that makes a process started by the
// harness serve as the peer (rank 1); its value is the job name.
const PeerEnv = "JIA_RDMAIOTEST_PEER"

// SessionConfig adjusts the QPs of a session.
type SessionConfig struct {
	// RetryCount and Timeout are given to rank 0's RC QPs in RTR → RTS
	// (rdmaio.QPAttr).
	RetryCount int
	Timeout    time.Duration
	// Guard bounds each measurement call, a guard against hangs (default
	// one minute).
	Guard time.Duration
}

// endpoint is one rank's objects.
type endpoint struct {
	dev        rdmaio.Device
	pd         rdmaio.PD
	cq         rdmaio.CQ
	ctrl, data rdmaio.QP
	ud         rdmaio.QP
	mem        rdmaio.MR // PD.Alloc memory, remote rights
	heap       rdmaio.MR // ordinary memory: local buffers, remote rights when heapRemote
	heapRemote bool
	ctrlMR     rdmaio.MR
	ctrlRecv   [ctrlSlots][]rdmaio.RecvWR
	wc         []rdmaio.WorkCompletion
	peer       card
	ah         rdmaio.AH
}

// card is what a rank tells its peer.
type card struct {
	addr             []byte
	ctrl, data, ud   uint32
	memKey, heapKey  uint32
	memAddr, heapAdr uint64
}

func (c card) String() string {
	return fmt.Sprintf("%s %d %d %d %d %d %d %d", hex.EncodeToString(c.addr), c.ctrl, c.data, c.ud,
		c.memKey, c.memAddr, c.heapKey, c.heapAdr)
}

func parseCard(line string) (card, error) {
	var c card
	f := strings.Fields(line)
	if len(f) != 8 {
		return c, fmt.Errorf("bad peer card %q", line)
	}
	var err error
	if c.addr, err = hex.DecodeString(f[0]); err != nil {
		return c, fmt.Errorf("bad peer card %q: %w", line, err)
	}
	var v [7]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return c, fmt.Errorf("bad peer card %q: %w", line, err)
		}
	}
	c.ctrl, c.data, c.ud = uint32(v[0]), uint32(v[1]), uint32(v[2])
	c.memKey, c.memAddr, c.heapKey, c.heapAdr = uint32(v[3]), v[4], uint32(v[5]), v[6]
	return c, nil
}

// newEndpoint creates the objects of one rank on dev and posts the control
// receives.
func newEndpoint(dev rdmaio.Device) (*endpoint, error) {
	e := &endpoint{dev: dev, wc: make([]rdmaio.WorkCompletion, 64)}
	var err error
	wrap := func(what string, err error) error {
		return fmt.Errorf("benchmark endpoint of %s: %s: %w", dev.Provider(), what, err)
	}
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, wrap("alloc pd", err)
	}
	if e.cq, err = dev.CreateCQ(4 * sendDepth); err != nil {
		return nil, wrap("create cq", err)
	}
	cp := rdmaio.QPCap{MaxSendWR: sendDepth, MaxRecvWR: dataRecvs, MaxInline: 64}
	for _, q := range []*rdmaio.QP{&e.ctrl, &e.data} {
		if *q, err = e.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: e.cq, RecvCQ: e.cq, Cap: cp}); err != nil {
			return nil, wrap("create rc qp", err)
		}
	}
	if e.ud, err = e.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.UD, SendCQ: e.cq, RecvCQ: e.cq, Cap: rdmaio.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxInline: 64}}); err != nil {
		return nil, wrap("create ud qp", err)
	}
	buf, err := e.pd.Alloc(MemSize)
	if err != nil {
		return nil, wrap("alloc", err)
	}
	if e.mem, err = e.pd.RegMR(buf, rdmaio.AccessAll); err != nil {
		return nil, wrap("register allocated memory", err)
	}
	heap := make([]byte, MemSize)
	e.heap, err = e.pd.RegMR(heap, rdmaio.AccessLocalWrite|rdmaio.AccessRemoteWrite|rdmaio.AccessRemoteRead)
	e.heapRemote = err == nil
	if err != nil {
		if e.heap, err = e.pd.RegMR(heap, rdmaio.AccessLocalWrite); err != nil {
			return nil, wrap("register ordinary memory", err)
		}
	}
	if e.ctrlMR, err = e.pd.RegMR(make([]byte, (ctrlSlots+1)*ctrlSize), rdmaio.AccessLocalWrite); err != nil {
		return nil, wrap("register control memory", err)
	}
	for i := range e.ctrlRecv {
		e.ctrlRecv[i] = []rdmaio.RecvWR{{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(e.ctrlMR, i*ctrlSize, ctrlSize)}}}
	}
	for _, m := range []struct {
		q rdmaio.QP
		a rdmaio.QPAttr
	}{
		{e.ctrl, rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote}},
		{e.data, rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote}},
		{e.ud, rdmaio.QPAttr{State: rdmaio.StateInit, QKey: benchQKey}},
	} {
		if err := m.q.Modify(m.a); err != nil {
			return nil, wrap("modify to INIT", err)
		}
	}
	for i := range e.ctrlRecv {
		if _, err := e.ctrl.PostRecv(e.ctrlRecv[i]); err != nil {
			return nil, wrap("post control receive", err)
		}
	}
	return e, nil
}

func (e *endpoint) card() card {
	return card{addr: e.dev.Addr(), ctrl: e.ctrl.QPN(), data: e.data.QPN(), ud: e.ud.QPN(),
		memKey: e.mem.RKey(), memAddr: e.mem.Addr(), heapKey: e.heap.RKey(), heapAdr: e.heap.Addr()}
}

// connect takes the QPs to RTS towards p.
func (e *endpoint) connect(p card, cfg SessionConfig) error {
	e.peer = p
	var err error
	if e.ah, err = e.pd.CreateAH(rdmaio.AHAttr{Addr: p.addr}); err != nil {
		return fmt.Errorf("create ah: %w", err)
	}
	dest := rdmaio.AHAttr{Addr: p.addr}
	rts := rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite, RetryCount: cfg.RetryCount, Timeout: cfg.Timeout}
	for _, m := range []struct {
		q rdmaio.QP
		a rdmaio.QPAttr
	}{
		{e.ctrl, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: dest, DestQPN: p.ctrl}},
		{e.data, rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: dest, DestQPN: p.data}},
		{e.ud, rdmaio.QPAttr{State: rdmaio.StateRTR}},
		{e.ctrl, rts},
		{e.data, rts},
		{e.ud, rdmaio.QPAttr{State: rdmaio.StateRTS}},
	} {
		if err := m.q.Modify(m.a); err != nil {
			return fmt.Errorf("modify to %v: %w", m.a.State, err)
		}
	}
	return nil
}

// serve is the peer's loop: it answers every control message with an
// 8-byte message (sends unsignaled but every 32nd), answers an end-of-stream
// marker on the data QP likewise, and keeps dataRecvs receives posted on the
// data QP, all into the benchmark region. It returns when a control message
// carries stopImm.
func (e *endpoint) serve() error {
	recvs := make([]rdmaio.RecvWR, dataRecvs)
	for i := range recvs {
		recvs[i] = rdmaio.RecvWR{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(e.mem, 0, MemSize)}}
	}
	if _, err := e.data.PostRecv(recvs); err != nil {
		return fmt.Errorf("post data receives: %w", err)
	}
	send := []rdmaio.SendWR{{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.ctrlMR, ctrlSlots*ctrlSize, 8)}}}
	ctx := context.Background()
	ctrlQPN, dataQPN := e.ctrl.QPN(), e.data.QPN()
	ctrlRepost := make([]uint64, 0, len(e.wc))
	for sent := 0; ; {
		n, err := e.cq.Wait(ctx, e.wc)
		if err != nil {
			return fmt.Errorf("peer wait: %w", err)
		}
		repost := 0
		for i := range e.wc[:n] {
			c := &e.wc[i]
			if c.Status != rdmaio.StatusSuccess {
				return fmt.Errorf("peer: %w", c.Err())
			}
			if !c.Opcode.IsRecv() {
				continue
			}
			imm := c.Flags&rdmaio.WCWithImm != 0
			switch c.QPN {
			case ctrlQPN:
				if imm && c.Imm == stopImm {
					return nil
				}
				// Answer first, then repost (below): the ping's sender
				// waits for the answer, and its next ping finds the
				// receive posted, or waits for it (infinite RNR retries).
				ctrlRepost = append(ctrlRepost, c.ID%ctrlSlots)
			case dataQPN:
				repost++
				if !imm || c.Imm != markImm {
					continue
				}
			default:
				continue
			}
			sent++
			send[0].Flags = 0
			if sent%32 == 0 {
				send[0].Flags = rdmaio.SendSignaled
			}
			if _, err := e.ctrl.PostSend(send); err != nil {
				return fmt.Errorf("peer: answer: %w", err)
			}
		}
		for _, id := range ctrlRepost {
			if _, err := e.ctrl.PostRecv(e.ctrlRecv[id]); err != nil {
				return fmt.Errorf("peer: repost control receive: %w", err)
			}
		}
		ctrlRepost = ctrlRepost[:0]
		if repost > 0 {
			// One call (one doorbell) for the batch.
			if _, err := e.data.PostRecv(recvs[:repost]); err != nil {
				return fmt.Errorf("peer: repost data receives: %w", err)
			}
		}
	}
}

// Session is rank 0 of a benchmark pair, connected to a serving peer. Its
// methods run one measurement each and are not safe for concurrent use.
type Session struct {
	e     *endpoint
	cfg   SessionConfig
	done  chan error // the peer goroutine's result (in-process)
	cmd   *exec.Cmd  // the peer process
	stdin io.WriteCloser
	lines chan string
	sent  int

	ping   []rdmaio.SendWR
	stream []rdmaio.SendWR
	oneOp  []rdmaio.SendWR
}

func newSession(e *endpoint, cfg SessionConfig) *Session {
	if cfg.Guard <= 0 {
		cfg.Guard = time.Minute
	}
	return &Session{e: e, cfg: cfg,
		ping:  []rdmaio.SendWR{{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.ctrlMR, ctrlSlots*ctrlSize, 8)}}},
		oneOp: make([]rdmaio.SendWR, 1),
	}
}

// NewSession connects devs[0] (this session) and devs[1], two devices of one
// job in this process, and serves devs[1] in a goroutine. Close stops it;
// the caller closes the devices.
func NewSession(devs [2]rdmaio.Device, cfg SessionConfig) (*Session, error) {
	var es [2]*endpoint
	for i := range es {
		var err error
		if es[i], err = newEndpoint(devs[i]); err != nil {
			return nil, err
		}
	}
	for i := range es {
		if err := es[i].connect(es[1-i].card(), cfg); err != nil {
			return nil, fmt.Errorf("benchmark session: rank %d: %w", i, err)
		}
	}
	s := newSession(es[0], cfg)
	s.done = make(chan error, 1)
	go func() { s.done <- es[1].serve() }()
	return s, nil
}

// StartSession starts cmd, a process that calls ServePeer (see PeerEnv), and
// connects dev (rank 0) to it; the two exchange their cards over the
// process's standard input and output. Close stops the process; the caller
// closes dev.
func StartSession(dev rdmaio.Device, cmd *exec.Cmd, cfg SessionConfig) (*Session, error) {
	e, err := newEndpoint(dev)
	if err != nil {
		return nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("peer process: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("peer process: %w", err)
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start peer process: %w", err)
	}
	s := newSession(e, cfg)
	s.cmd, s.stdin, s.lines = cmd, in, make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), peerTag); ok {
				s.lines <- l
			} else if l := sc.Text(); l != "PASS" && !strings.HasPrefix(l, "ok ") {
				fmt.Fprintf(os.Stderr, "peer: %s\n", l)
			}
		}
		close(s.lines)
	}()
	fail := func(err error) (*Session, error) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	l, err := s.line()
	if err != nil {
		return fail(err)
	}
	pc, err := parseCard(l)
	if err != nil {
		return fail(err)
	}
	if _, err := fmt.Fprintf(in, "%s\n", e.card().String()); err != nil {
		return fail(fmt.Errorf("peer process: send card: %w", err))
	}
	if err := e.connect(pc, cfg); err != nil {
		return fail(fmt.Errorf("benchmark session: %w", err))
	}
	if l, err := s.line(); err != nil || l != "ready" {
		return fail(fmt.Errorf("peer process not ready: %q, %v", l, err))
	}
	return s, nil
}

func (s *Session) line() (string, error) {
	select {
	case l, ok := <-s.lines:
		if !ok {
			return "", errors.New("peer process: end of output")
		}
		return l, nil
	case <-time.After(s.cfg.Guard):
		return "", errors.New("peer process: no answer")
	}
}

// ServePeer serves dev as the peer (rank 1) of a session that StartSession
// started in another process: it writes its card to out, reads the card of
// rank 0 from in, and serves until the session closes.
func ServePeer(dev rdmaio.Device, in io.Reader, out io.Writer) error {
	e, err := newEndpoint(dev)
	if err != nil {
		return err
	}
	c := e.card()
	if _, err := fmt.Fprintf(out, "%s%s\n", peerTag, c.String()); err != nil {
		return fmt.Errorf("peer: write card: %w", err)
	}
	sc := bufio.NewScanner(in)
	if !sc.Scan() {
		return fmt.Errorf("peer: no card from rank 0: %v", sc.Err())
	}
	pc, err := parseCard(sc.Text())
	if err != nil {
		return err
	}
	if err := e.connect(pc, SessionConfig{}); err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	if _, err := fmt.Fprintf(out, "%sready\n", peerTag); err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	return e.serve()
}

// PeerPID returns the process id of the peer process, 0 for an in-process
// peer.
func (s *Session) PeerPID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Close stops the peer: in-process it waits for the goroutine; a peer
// process gets a stop message and is killed if it does not exit within a
// few seconds (or at once when the stop cannot be sent).
func (s *Session) Close() error {
	stop := []rdmaio.SendWR{{Opcode: rdmaio.OpSendImm, Imm: stopImm, Flags: rdmaio.SendSignaled, Inline: []byte("stop")}}
	_, perr := s.e.ctrl.PostSend(stop)
	if s.cmd == nil {
		if perr != nil {
			return fmt.Errorf("benchmark session: stop peer: %w", perr)
		}
		select {
		case err := <-s.done:
			return err
		case <-time.After(s.cfg.Guard):
			return errors.New("benchmark session: peer did not stop")
		}
	}
	_ = s.stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	wait := 10 * time.Second
	if perr != nil {
		wait = 0
	}
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("peer process: %w", err)
		}
		return nil
	case <-time.After(wait):
		_ = s.cmd.Process.Kill()
		<-exited
		if perr != nil {
			return fmt.Errorf("benchmark session: stop peer: %w", perr)
		}
		return errors.New("benchmark session: peer process did not exit; killed")
	}
}

// poll takes completions of rank 0 and returns how many sends of the data
// QP completed and how many control messages arrived (reposting their
// receives). It waits (CQ.Wait) when wait is set.
func (s *Session) poll(ctx context.Context, wait bool) (sends, answers int, err error) {
	e := s.e
	var n int
	if wait {
		if n, err = e.cq.Wait(ctx, e.wc); err != nil {
			return 0, 0, fmt.Errorf("rank 0 wait: %w", err)
		}
	} else {
		n = e.cq.Poll(e.wc)
	}
	dataQPN := e.data.QPN()
	for i := range e.wc[:n] {
		c := &e.wc[i]
		if c.Status != rdmaio.StatusSuccess {
			return 0, 0, fmt.Errorf("rank 0: %w", c.Err())
		}
		switch {
		case c.Opcode.IsRecv():
			if _, err := e.ctrl.PostRecv(e.ctrlRecv[c.ID%ctrlSlots]); err != nil {
				return 0, 0, fmt.Errorf("repost control receive: %w", err)
			}
			answers++
		case c.QPN == dataQPN:
			sends++
		}
	}
	return sends, answers, nil
}

func (s *Session) guard() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.Guard)
}

// PingPong runs n round trips of 8-byte SENDs (unsignaled but every 32nd)
// on the control QP: a half round trip is the elapsed time / 2n.
func (s *Session) PingPong(n int) error {
	ctx, cancel := s.guard()
	defer cancel()
	for range n {
		s.sent++
		s.ping[0].Flags = 0
		if s.sent%32 == 0 {
			s.ping[0].Flags = rdmaio.SendSignaled
		}
		if _, err := s.e.ctrl.PostSend(s.ping); err != nil {
			return fmt.Errorf("ping: %w", err)
		}
		for got := 0; got == 0; {
			_, a, err := s.poll(ctx, true)
			if err != nil {
				return err
			}
			got = a
		}
	}
	return nil
}

// OneSided runs n 8-byte operations op (RDMA WRITE, RDMA READ or an atomic)
// from ordinary memory into the peer's benchmark region, each posted and
// polled to completion: the elapsed time / n is the latency.
func (s *Session) OneSided(op rdmaio.Opcode, n int) error {
	e := s.e
	s.oneOp[0] = rdmaio.SendWR{Opcode: op, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.heap, 0, 8)},
		RemoteAddr: e.peer.memAddr, RKey: e.peer.memKey, CompareAdd: 1}
	ctx, cancel := s.guard()
	defer cancel()
	for range n {
		if _, err := e.data.PostSend(s.oneOp); err != nil {
			return fmt.Errorf("%v: %w", op, err)
		}
		if err := s.drain(ctx, 1, false); err != nil {
			return err
		}
	}
	return nil
}

// drain polls until k data sends have completed, busy polling (CQ.Poll) or
// waiting.
func (s *Session) drain(ctx context.Context, k int, wait bool) error {
	for spins := 0; k > 0; spins++ {
		d, _, err := s.poll(ctx, wait)
		if err != nil {
			return err
		}
		k -= d
		if d == 0 && spins&1023 == 1023 && ctx.Err() != nil {
			return fmt.Errorf("rank 0: %w", ctx.Err())
		}
	}
	return nil
}

// Write streams n signaled RDMA WRITEs of size bytes from rank 0's region
// into the peer's, window in flight. The peer's program does not take part.
func (s *Session) Write(size, window, n int) error {
	e := s.e
	if size > MemSize {
		return fmt.Errorf("write of %d bytes: larger than the region", size)
	}
	s.oneOp[0] = rdmaio.SendWR{Opcode: rdmaio.OpRDMAWrite, Flags: rdmaio.SendSignaled, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.mem, 0, size)},
		RemoteAddr: e.peer.memAddr, RKey: e.peer.memKey}
	ctx, cancel := s.guard()
	defer cancel()
	inflight := 0
	for range n {
		for inflight >= window {
			d, _, err := s.poll(ctx, false)
			if err != nil {
				return err
			}
			inflight -= d
		}
		if _, err := e.data.PostSend(s.oneOp); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		inflight++
	}
	return s.drain(ctx, inflight, false)
}

// Send streams n SENDs of size bytes (inline up to 64 bytes) on the data
// QP, at most window in flight, posted in chains of chain work requests
// (one PostSend, one doorbell, per chain; the last of a chain signaled),
// then a marker that the peer answers once it has received them all.
func (s *Session) Send(size, window, chain, n int) error {
	e := s.e
	if size > MemSize || chain < 1 || chain > window {
		return fmt.Errorf("send stream of %d bytes in chains of %d, window %d: bad arguments", size, chain, window)
	}
	if cap(s.stream) < chain {
		s.stream = make([]rdmaio.SendWR, chain)
	}
	wrs := s.stream[:chain]
	for i := range wrs {
		wrs[i] = rdmaio.SendWR{Opcode: rdmaio.OpSend, SGL: []rdmaio.SGE{rdmaio.MRSGE(e.mem, 0, size)}}
		if size <= 64 {
			wrs[i] = rdmaio.SendWR{Opcode: rdmaio.OpSend, Inline: e.mem.Bytes()[:size]}
		}
	}
	wrs[chain-1].Flags = rdmaio.SendSignaled
	ctx, cancel := s.guard()
	defer cancel()
	inflight := 0 // chains
	for sent := 0; sent < n; {
		k := min(chain, n-sent)
		for inflight*chain+k > window {
			d, _, err := s.poll(ctx, true)
			if err != nil {
				return err
			}
			inflight -= d
		}
		if _, err := e.data.PostSend(wrs[chain-k:]); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		sent += k
		inflight++
	}
	s.oneOp[0] = rdmaio.SendWR{Opcode: rdmaio.OpSendImm, Imm: markImm, Flags: rdmaio.SendSignaled, Inline: e.mem.Bytes()[:8]}
	if _, err := e.data.PostSend(s.oneOp); err != nil {
		return fmt.Errorf("send marker: %w", err)
	}
	inflight++
	for answered := false; !answered || inflight > 0; {
		d, a, err := s.poll(ctx, true)
		if err != nil {
			return err
		}
		inflight -= d
		answered = answered || a > 0
	}
	return nil
}
