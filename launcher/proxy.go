package launcher

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jiarun/jia/launcher/sshc"
	rt "github.com/jiarun/jia/runtime"
)

// RunProxy is `jiarun proxy`: the host-side half of a multi-host launch,
// started on each other host (over SSH, or a launch agent) with the link
// on its standard input and output, by jiarun itself or, in a tree
// fan-out, by the proxy of another host. It starts the proxies of its own
// children (if the launch names any) and says when it and its subtree are
// ready; told to go, it starts the host's ranks and relays their
// rendezvous connections and their output over the link, passes signals
// on and reports exits, its children's as well as its own. When the link
// ends (its parent died or the connection to it broke), or the parent is
// silent for the heartbeat timeout, it kills its ranks and stops its
// children at once and exits: nothing outlives the job. diag receives the
// proxy's own diagnostics. It returns the proxy's exit code.
func RunProxy(in io.Reader, out io.Writer, diag io.Writer) int {
	ctx, cancel := context.WithCancel(context.Background())
	p := &proxy{w: newLinkWriter(out), diag: diag, ctx: ctx, cancel: cancel,
		routes: map[uint64]route{}, asks: map[uint64]pendingAsk{}, finished: make(chan struct{})}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-sigs
		fmt.Fprintf(diag, "jiarun proxy: %v: killing the ranks\n", sig)
		p.stopAll()
		removeSegments(p.jobName(), diag)
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
	err := p.run(bufio.NewReaderSize(in, 64<<10))
	defer removeSegments(p.jobName(), diag)
	if errors.Is(err, errShutdown) {
		p.stopAll()
		return 1
	}
	if err != nil {
		fmt.Fprintf(diag, "jiarun proxy: %v\n", err)
		p.w.send(linkFatal, []byte(err.Error()))
		p.stopAll()
		return 1
	}
	return 0
}

// jobName returns the job's name, or "" before the launch arrived.
func (p *proxy) jobName() string {
	if j := p.job.Load(); j != nil {
		return *j
	}
	return ""
}

// errShutdown is the parent's order to stop (after a failed start-up).
var errShutdown = errors.New("the parent asked for shutdown")

type proxy struct {
	w      *linkWriter // to the parent: jiarun or another proxy
	diag   io.Writer
	spec   launchSpec
	ctx    context.Context // cancelled when the proxy stops
	cancel context.CancelFunc

	mu         sync.Mutex
	ranks      []*proxyRank
	live       int
	streams    streamTable      // the local ranks' relayed rendezvous connections
	routes     map[uint64]route // streams of the hosts below, by id on the parent's link
	next       uint64           // the next stream id on the parent's link
	asks       map[uint64]pendingAsk
	nextAsk    uint64
	stdinW     *os.File
	children   []*childLink
	stdinChild *childLink // the child whose subtree holds the stdin rank
	started    bool       // go was received
	stopping   bool
	outputs    sync.WaitGroup
	heard      atomic.Int64           // when the parent last sent a frame (Unix ns)
	job        atomic.Pointer[string] // the job's name, once the launch arrived
	ln         net.Listener
	finished   chan struct{} // closed when every rank below has ended and been reported
}

type proxyRank struct {
	rank   int
	pid    int
	reaped bool
}

// route is where a relayed stream goes: a child's link, under the child's id.
type route struct {
	c  *childLink
	id uint64
}

// pendingAsk is a question to the login node: this proxy's own (reply),
// or a child's, relayed (c and its id).
type pendingAsk struct {
	reply chan authReply
	c     *childLink
	id    uint64
}

// linkReadError is the parent's link failing.
type linkReadError struct{ err error }

func (e *linkReadError) Error() string { return e.err.Error() }
func (e *linkReadError) Unwrap() error { return e.err }

func (p *proxy) run(r *bufio.Reader) error {
	var body []byte
	for {
		typ, b, err := readLinkFrame(r)
		if err != nil {
			return fmt.Errorf("read launch: %w", err)
		}
		if typ == linkLaunch {
			body = b
			break
		}
		if typ != linkStage {
			return fmt.Errorf("frame of type %#x before the launch", typ)
		}
		if err := receiveStage(p.w, r, b); err != nil {
			return err
		}
	}
	if err := json.Unmarshal(body, &p.spec); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	p.job.Store(&p.spec.Job)
	p.heard.Store(time.Now().UnixNano())
	p.w.send(linkAlive)
	interval := heartbeatInterval(p.spec.HeartbeatTimeout)
	go p.alive(interval)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("rendezvous relay: %w", err)
	}
	p.ln = ln
	go p.acceptRelay()

	linkErr := make(chan error, 1)
	go func() { linkErr <- p.readLink(r) }()
	silent := make(chan time.Duration, 1)
	if t := p.spec.HeartbeatTimeout; t > 0 {
		go func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-p.ctx.Done():
					return
				case <-tick.C:
				}
				if d := time.Since(time.Unix(0, p.heard.Load())); d > t {
					silent <- d
					return
				}
			}
		}()
	}
	launched := make(chan error, 1)
	go func() { launched <- p.launchChildren() }()
	for {
		select {
		case err := <-launched:
			// Ready (or not: then the parent stops the job and shuts us down).
			var msg []byte
			if err != nil {
				msg = []byte(err.Error())
			}
			p.w.send(linkReady, msg)
		case d := <-silent:
			p.stopAll()
			return fmt.Errorf("no word from jiarun for %v: killed the ranks", d.Round(time.Millisecond))
		case <-p.finished:
			// Every rank below exited and its output went out.
			p.closeStreams()
			return p.w.send(linkDone)
		case err := <-linkErr:
			p.stopAll()
			var le *linkReadError
			switch {
			case err == nil:
				return errShutdown
			case errors.As(err, &le):
				return fmt.Errorf("link to jiarun ended: %w", err)
			}
			return err
		}
	}
}

// alive tells the parent, every interval, that this proxy is alive.
func (p *proxy) alive(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			if p.w.send(linkAlive) != nil {
				return
			}
		}
	}
}

// begin starts the children's ranks (forwarding go) and this host's, once.
func (p *proxy) begin() error {
	p.mu.Lock()
	if p.started || p.stopping {
		p.mu.Unlock()
		return nil
	}
	p.started = true
	children := slices.Clone(p.children)
	p.mu.Unlock()
	for _, c := range children {
		c.w.send(linkGo)
	}
	if err := p.start(); err != nil {
		return err
	}
	go func() {
		p.outputs.Wait()
		for _, c := range children {
			<-c.ended
		}
		close(p.finished)
	}()
	return nil
}

// start starts this host's ranks.
func (p *proxy) start() error {
	s := &p.spec
	secret, err := hex.DecodeString(s.Secret)
	if err != nil {
		return fmt.Errorf("launch: secret: %w", err)
	}
	addr := s.Advertise
	if addr == "" {
		addr = hostAddress()
	}
	host := s.HostName
	if host == "" {
		host, _ = os.Hostname()
	}
	base := rankBaseEnv(s.Env)
	for local, rank := range s.Ranks {
		c := rt.Contract{Rank: rank, Size: s.Size, LocalRank: local, LocalSize: len(s.Ranks),
			Job: s.Job, Rendezvous: p.ln.Addr().String(), Secret: secret, Host: host, Config: s.Config, Addr: addr}
		env := rankEnv(base, c)
		var stdin io.Reader
		if rank == s.StdinRank {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			stdin = r
			p.mu.Lock()
			p.stdinW = w
			p.mu.Unlock()
			defer r.Close()
		}
		sp, err := spawn(rank, s.Program, s.Args, env, s.WorkDir, stdin, bindCPU(s.BindTo, local, len(s.Ranks)))
		if err != nil {
			return err
		}
		pr := &proxyRank{rank: rank, pid: sp.cmd.Process.Pid}
		p.mu.Lock()
		p.ranks = append(p.ranks, pr)
		p.live++
		p.mu.Unlock()
		p.w.send(linkStarted, uv(uint64(rank), uint64(pr.pid)))
		p.outputs.Add(3)
		go p.forward(rank, 1, sp.stdout)
		go p.forward(rank, 2, sp.stderr)
		go func() {
			defer p.outputs.Done()
			err := sp.cmd.Wait()
			p.mu.Lock()
			pr.reaped = true
			p.live--
			p.mu.Unlock()
			st := statusOf(sp.cmd.ProcessState, err)
			p.w.send(linkExit, exitPayload(rank, st.code, int(st.sig)))
		}()
	}
	return nil
}

// forward sends a rank's output over the link, whole lines at a time.
func (p *proxy) forward(rank int, stream byte, r *os.File) {
	defer p.outputs.Done()
	defer r.Close()
	w := &outputFrames{w: p.w, head: append(uv(uint64(rank)), stream)}
	if err := Forward(r, NewSink(w), nil); err != nil {
		io.Copy(io.Discard, r)
	}
}

// outputFrames turns each Write (whole lines, from Forward) into a frame.
type outputFrames struct {
	w    *linkWriter
	head []byte
}

func (o *outputFrames) Write(b []byte) (int, error) {
	if err := o.w.send(linkOutput, o.head, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// readLink handles the parent's frames until the link ends (a
// *linkReadError), the parent asks for shutdown (nil) or the ranks cannot
// be started.
func (p *proxy) readLink(r *bufio.Reader) error {
	for {
		typ, body, err := readLinkFrame(r)
		if err != nil {
			return &linkReadError{err}
		}
		p.heard.Store(time.Now().UnixNano())
		switch typ {
		case linkPing:
		case linkGo:
			if err := p.begin(); err != nil {
				return err
			}
		case linkSignal:
			v, _, err := payload(body, 2)
			if err != nil {
				return &linkReadError{err}
			}
			p.signal(syscall.Signal(v[0]), int(v[1])-1)
			for _, c := range p.childList() {
				c.w.send(linkSignal, body)
			}
		case linkStdin:
			p.mu.Lock()
			w, c := p.stdinW, p.stdinChild
			p.mu.Unlock()
			switch {
			case c != nil:
				c.w.send(linkStdin, body)
			case w == nil:
			case len(body) == 0:
				w.Close()
			default:
				w.Write(body) // a rank that stopped reading loses its input
			}
		case linkShutdown:
			return nil
		case linkRVData, linkRVClose:
			if err := p.deliverStream(typ, body); err != nil {
				return &linkReadError{err}
			}
		case linkAuthReply:
			if err := p.authReply(body); err != nil {
				return &linkReadError{err}
			}
		default:
			return &linkReadError{fmt.Errorf("unexpected frame type %#x", typ)}
		}
	}
}

// deliverStream passes a stream frame from the parent to a local rank's
// connection or to the child that relays the stream.
func (p *proxy) deliverStream(typ byte, body []byte) error {
	v, rest, err := payload(body, 1)
	if err != nil {
		return err
	}
	p.mu.Lock()
	rt, routed := p.routes[v[0]]
	if routed && typ == linkRVClose {
		delete(p.routes, v[0])
		delete(rt.c.up, rt.id)
	}
	p.mu.Unlock()
	if !routed {
		return p.streams.deliver(typ, body)
	}
	rt.c.w.send(typ, uv(rt.id), rest)
	return nil
}

// acceptRelay relays each local rank's rendezvous connection as a stream.
func (p *proxy) acceptRelay() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		id := p.next
		p.next++
		p.mu.Unlock()
		p.streams.add(id, c)
		p.w.send(linkRVOpen, uv(id))
		go p.streams.pump(p.w, id, c)
	}
}

func (p *proxy) closeStreams() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
	}
	p.streams.closeAll()
}

// signal sends sig to every local rank's process group but spare's.
func (p *proxy) signal(sig syscall.Signal, spare int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.ranks {
		if !r.reaped && r.rank != spare {
			syscall.Kill(-r.pid, sig)
		}
	}
}

func (p *proxy) childList() []*childLink {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.children)
}

// stopAll kills the local ranks and stops the children's proxies (which
// stop theirs), waiting briefly for all of it.
func (p *proxy) stopAll() {
	p.mu.Lock()
	p.stopping = true
	children := slices.Clone(p.children)
	p.mu.Unlock()
	p.cancel()
	for _, c := range children {
		c.w.send(linkShutdown)
	}
	p.signal(syscall.SIGKILL, -1)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		live := p.live
		p.mu.Unlock()
		if live == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, c := range children {
		select {
		case <-c.ended:
		case <-time.After(time.Until(deadline)):
			c.rc.kill()
			<-c.ended
		}
	}
	p.closeStreams()
}

// ask puts a question to the login node and waits for its answer.
func (p *proxy) ask(req authRequest, timeout time.Duration) (authReply, error) {
	if timeout <= 0 {
		timeout = askTimeout
	}
	b, err := json.Marshal(req)
	if err != nil {
		return authReply{}, err
	}
	reply := make(chan authReply, 1)
	p.mu.Lock()
	id := p.nextAsk
	p.nextAsk++
	p.asks[id] = pendingAsk{reply: reply}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.asks, id)
		p.mu.Unlock()
	}()
	if err := p.w.send(linkAuthAsk, uv(id), b); err != nil {
		return authReply{}, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-reply:
		return r, nil
	case <-p.ctx.Done():
		return authReply{}, errors.New("the proxy is stopping")
	case <-t.C:
		return authReply{}, fmt.Errorf("no answer from jiarun on the login node within %v", timeout)
	}
}

// authReply passes an answer of the login node to whoever asked.
func (p *proxy) authReply(body []byte) error {
	v, rest, err := payload(body, 1)
	if err != nil {
		return err
	}
	p.mu.Lock()
	a, ok := p.asks[v[0]]
	delete(p.asks, v[0])
	p.mu.Unlock()
	switch {
	case !ok:
	case a.reply != nil:
		var r authReply
		if err := json.Unmarshal(rest, &r); err != nil {
			r.Err = fmt.Sprintf("answer of the login node: %v", err)
		}
		a.reply <- r
	default:
		a.c.w.send(linkAuthReply, uv(a.id), rest)
	}
	return nil
}

// childLink is a proxy's side of one of its children: the agent (or SSH
// session) that started the child's proxy, and the link to it.
type childLink struct {
	p     *proxy
	host  string
	ranks []int // the ranks of the child's subtree
	rc    *remoteCmd
	w     *linkWriter
	quiet silence           // since the child's last frame
	up    map[uint64]uint64 // the child's stream id → id on the parent's link (guarded by p.mu)
	ready chan error        // the child's readiness, once
	ended chan struct{}     // closed when the link to the child is gone

	mu       sync.Mutex
	gotReady bool  // the child said whether it is ready
	readyOK  bool  // … and it was
	done     bool  // the child reported that all its ranks ended
	silent   error // why the child was given up for silent
}

// setReady records the child's readiness (err nil) or failure, once.
func (c *childLink) setReady(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gotReady {
		return
	}
	c.gotReady, c.readyOK = true, err == nil
	c.ready <- err
}

// launchChildren starts the children's proxies, concurrently, and waits
// until each is ready with its own subtree.
func (p *proxy) launchChildren() error {
	kids := p.spec.Children
	errs := make([]error, len(kids))
	var wg sync.WaitGroup
	for i := range kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.launchChild(&kids[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Contains(p.spec.Ranks, p.spec.StdinRank) {
		for _, c := range p.children {
			if slices.Contains(c.ranks, p.spec.StdinRank) {
				p.stdinChild = c
			}
		}
	}
	return nil
}

// launchChild starts one child's proxy, stages jiarun and the program to
// it, sends its launch and waits until it is ready.
func (p *proxy) launchChild(ch *childLaunch) error {
	s := &p.spec
	self := s.Jiarun
	if !s.NoStage {
		var err error
		if self, err = os.Executable(); err != nil {
			return fmt.Errorf("host %s: locate jiarun: %w", ch.Host, err)
		}
	}
	argv := proxyCommand(self, s.JiarunHash, s.NoStage)
	var rc *remoteCmd
	var err error
	if len(s.Agent) > 0 {
		rc, err = startExec(s.Agent, ch.Host, argv)
	} else {
		rc, err = p.startSSHChild(ch, argv)
	}
	if err != nil {
		return p.viaErr(ch.Host, err)
	}
	c := &childLink{p: p, host: ch.Host, ranks: ch.Launch.subtreeRanks(), rc: rc,
		up: map[uint64]uint64{}, ready: make(chan error, 1), ended: make(chan struct{})}
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		Forward(rc.stderr, NewSink(&noticeWriter{w: p.w}), []byte(ch.Host+": "))
	}()
	notices := &noticeWriter{w: p.w}
	r, w, prog, err := bootProxy(rc, ch.Host, self, s.NoStage, s.Program, notices)
	if err == nil {
		ch.Launch.Program = prog
		err = w.sendJSON(linkLaunch, ch.Launch)
	}
	p.mu.Lock()
	stopping := p.stopping
	if err == nil && !stopping {
		c.w = w
		p.children = append(p.children, c)
	}
	p.mu.Unlock()
	if err != nil || stopping {
		if err != nil {
			err = withReason(err, rc)
		}
		rc.kill()
		rc.wait()
		<-stderrDone
		if err == nil {
			err = errors.New("the proxy is stopping")
		}
		return p.viaErr(ch.Host, err)
	}
	c.quiet.start()
	go c.readLoop(r, stderrDone)
	go c.heartbeat()
	if err := <-c.ready; err != nil {
		return err
	}
	return nil
}

// viaErr is err about host, which this proxy was starting: "host H
// (started from P): …".
func (p *proxy) viaErr(host string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "host "+host+": ")
	return fmt.Errorf("host %s (started from %s): %s", host, p.spec.HostName, msg)
}

// startSSHChild logs in to the child with the login node as the authority
// (see treeAuth) and starts argv there.
func (p *proxy) startSSHChild(ch *childLaunch, argv []string) (*remoteCmd, error) {
	hop := ch.SSH
	if hop == nil {
		return nil, errors.New("no launch agent and no SSH login for the host")
	}
	t := &sshc.Target{Alias: ch.Host, HostName: hop.HostName, Port: hop.Port, User: hop.User}
	cfg := &sshc.Config{ConfigFile: "none", Timeout: hop.Timeout,
		KeepaliveInterval: p.spec.KeepaliveInterval, KeepaliveCountMax: p.spec.KeepaliveCountMax,
		Authority: &linkAuthority{p: p, host: ch.Host, hop: hop}}
	c, err := sshc.DialTarget(p.ctx, t, cfg)
	if err != nil {
		return nil, err
	}
	return startSSH(c, argv)
}

// heartbeat tells the child, every interval, that its parent is alive, and
// gives it up when it has been silent for the heartbeat timeout.
func (c *childLink) heartbeat() {
	timeout := c.p.spec.HeartbeatTimeout
	t := time.NewTicker(heartbeatInterval(timeout))
	defer t.Stop()
	for {
		select {
		case <-c.ended:
			return
		case <-t.C:
		}
		if d, over := c.quiet.over(timeout); timeout > 0 && over {
			c.mu.Lock()
			c.silent = fmt.Errorf("no word from its proxy for %v", d.Round(time.Millisecond))
			c.mu.Unlock()
			c.rc.kill()
			return
		}
		c.w.send(linkPing)
	}
}

// readLoop relays the child's frames to the parent until the link ends;
// then, unless the child reported the end of all its ranks, it reports
// the child's host lost.
func (c *childLink) readLoop(r *bufio.Reader, stderrDone <-chan struct{}) {
	p := c.p
	var cause error
	for cause == nil {
		typ, body, err := readLinkFrame(r)
		if err != nil {
			cause = err
			break
		}
		c.quiet.hear()
		cause = c.handle(typ, body)
	}
	c.mu.Lock()
	done, silent, gotReady, readyOK := c.done, c.silent, c.gotReady, c.readyOK
	c.mu.Unlock()
	switch {
	case silent != nil:
		cause = silent
	case c.rc.reason() != nil:
		cause = c.rc.reason()
	case errors.Is(cause, io.EOF):
		cause = errors.New("its proxy ended the link")
	}
	c.rc.kill()
	c.rc.wait()
	<-stderrDone
	p.mu.Lock()
	var closed []uint64
	for cid, id := range c.up {
		delete(p.routes, id)
		delete(c.up, cid)
		closed = append(closed, id)
	}
	p.mu.Unlock()
	for _, id := range closed {
		p.w.send(linkRVClose, uv(id))
	}
	switch {
	case !gotReady:
		// It never became ready: launchChild reports it.
		c.setReady(p.viaErr(c.host, cause))
	case readyOK && !done:
		reason := strings.TrimPrefix(cause.Error(), "host "+c.host+": ")
		b, _ := json.Marshal(lostReport{Host: c.host, Reason: reason, Ranks: c.ranks})
		p.w.send(linkLost, b)
	}
	close(c.ended)
}

// handle relays one frame of the child.
func (c *childLink) handle(typ byte, body []byte) error {
	p := c.p
	switch typ {
	case linkAlive:
	case linkStarted, linkOutput, linkExit, linkLost, linkNotice:
		p.w.send(typ, body)
	case linkReady:
		var err error
		if len(body) > 0 {
			err = errors.New(string(body))
		}
		c.setReady(err)
	case linkDone:
		c.mu.Lock()
		c.done = true
		c.mu.Unlock()
		c.w.send(linkShutdown)
	case linkFatal:
		p.w.send(linkNotice, []byte("proxy on "+c.host+" failed: "+strings.TrimSpace(string(body))))
	case linkRVOpen, linkRVData, linkRVClose:
		v, rest, err := payload(body, 1)
		if err != nil {
			return err
		}
		p.mu.Lock()
		id, known := c.up[v[0]]
		switch {
		case typ == linkRVOpen:
			id, known = p.next, true
			p.next++
			c.up[v[0]] = id
			p.routes[id] = route{c: c, id: v[0]}
		case known && typ == linkRVClose:
			delete(c.up, v[0])
			delete(p.routes, id)
		}
		p.mu.Unlock()
		if known {
			p.w.send(typ, uv(id), rest)
		}
	case linkAuthAsk:
		v, rest, err := payload(body, 1)
		if err != nil {
			return err
		}
		p.mu.Lock()
		id := p.nextAsk
		p.nextAsk++
		p.asks[id] = pendingAsk{c: c, id: v[0]}
		p.mu.Unlock()
		p.w.send(linkAuthAsk, uv(id), rest)
	default:
		return fmt.Errorf("host %s: unexpected frame type %#x", c.host, typ)
	}
	return nil
}

// noticeWriter sends each line written to it (whole lines, from Forward or
// bootstrap) to the parent as a notice for jiarun's standard error.
type noticeWriter struct{ w *linkWriter }

func (n *noticeWriter) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		line = strings.TrimSuffix(strings.TrimPrefix(line, "jiarun: "), "\n")
		if line == "" {
			continue
		}
		if err := n.w.send(linkNotice, []byte(line)); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// hostAddress returns this host's first non-loopback IPv4 address on an
// interface that is up, or 127.0.0.1.
func hostAddress() string {
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
