package launcher

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jiarun/jia/launcher/sshc"
)

// proxyLink is the root's side of one other host: the agent process that
// started the host's proxy (ssh, or another command) and the link to it.
// In a tree fan-out the link also carries the hosts below that proxy.
type proxyLink struct {
	host  string
	s     *supervisor
	w     *linkWriter
	rc    *remoteCmd
	ranks map[int]*rankProc // the ranks of the host and of the hosts below it
	quiet silence           // since the proxy's last frame
	ready chan error        // the proxy's readiness, once

	mu       sync.Mutex
	streams  streamTable // root ends of the relayed rendezvous connections
	gotReady bool        // ready has its value
	done     bool        // the proxy reported that all its ranks ended
	ended    bool        // the link is gone
	silent   error       // why the proxy was given up for silent
}

// setReady records the proxy's readiness (err nil) or failure, once.
func (pl *proxyLink) setReady(err error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if !pl.gotReady {
		pl.gotReady = true
		pl.ready <- err
	}
}

// remoteCmd is the proxy's process as the root sees it, however the agent
// started it.
type remoteCmd struct {
	stdin  io.WriteCloser
	stdout io.Reader
	stderr io.Reader
	wait   func() error
	// kill ends the command, or at least the root's connection to it, which
	// the proxy sees as end-of-file and answers by killing its ranks.
	kill func()
	// reason says why the connection to the host ended, if the agent knows
	// better than end-of-file (a lost SSH connection, say).
	reason func() error
}

// startAgent starts argv (a command for the host) through the job's agent:
// the external command, or a session on the host's SSH connection.
func (s *supervisor) startAgent(host string, argv []string) (*remoteCmd, error) {
	if len(s.j.Agent) == 0 {
		c := s.ssh[host]
		if c == nil {
			return nil, fmt.Errorf("host %s: not connected", host)
		}
		return startSSH(c, argv)
	}
	return startExec(s.j.Agent, host, argv)
}

// startExec starts argv on host through an external launch agent, in its
// own process group and with a parent-death signal.
func startExec(agent []string, host string, argv []string) (*remoteCmd, error) {
	full := agentCommand(agent, host, argv...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	rc := &remoteCmd{wait: cmd.Wait, reason: func() error { return nil }}
	var err error
	if rc.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if rc.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	if rc.stderr, err = cmd.StderrPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("host %s: start %s: %w", host, agent[0], err)
	}
	rc.kill = func() { cmd.Process.Kill() }
	return rc, nil
}

// dialAll opens the SSH connection of every host, concurrently, before
// anything is started anywhere: a host that cannot be reached, whose key
// is unknown or that refuses the login stops the job with nothing started.
func (s *supervisor) dialAll(ctx context.Context, hosts []string, entry map[string]Host) error {
	cfg := s.j.SSH
	if cfg == nil {
		cfg = &sshc.Config{}
	}
	clients := make([]*sshc.Client, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clients[i], errs[i] = sshc.Dial(ctx, sshSpec(entry[h]), cfg)
			var hk *sshc.HostKeyError
			if errors.As(errs[i], &hk) && !hk.Changed() {
				errs[i] = fmt.Errorf("%w\n(or let jiarun add it: --ssh-accept-new)", errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
		return err
	}
	s.ssh = map[string]*sshc.Client{}
	for i, h := range hosts {
		s.ssh[h] = clients[i]
	}
	return nil
}

// sshSpec is the destination of a host for the SSH client: its name, with
// the host file's user and port if it gives them.
func sshSpec(h Host) string {
	spec := h.Name
	if h.User != "" {
		spec = h.User + "@" + spec
	}
	if h.Port != 0 {
		name := h.Name
		if strings.Contains(name, ":") {
			name = "[" + name + "]"
		}
		spec = name + ":" + strconv.Itoa(h.Port)
		if h.User != "" {
			spec = h.User + "@" + spec
		}
	}
	return spec
}

// startSSH runs argv in a session of the host's SSH connection.
func startSSH(c *sshc.Client, argv []string) (*remoteCmd, error) {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	ses, err := c.Start(strings.Join(q, " "))
	if err != nil {
		c.Close()
		return nil, err
	}
	return &remoteCmd{
		stdin: ses.Stdin, stdout: ses.Stdout, stderr: ses.Stderr,
		wait: func() error {
			err := ses.Wait()
			c.Close()
			return err
		},
		kill:   func() { ses.Close(); c.Close() },
		reason: c.Err,
	}, nil
}

// proxyCommand is the command that starts jiarun's proxy on a host: the
// bootstrap script that stages jiarun (whose hash is h) there, or jiarun
// at the same path when nothing is staged.
func proxyCommand(jiarun string, h fileHash, noStage bool) []string {
	if noStage {
		return []string{jiarun, "proxy"}
	}
	return []string{"sh", "-c", bootstrapScript(h)}
}

// bootProxy brings up the proxy started as rc on host: unless noStage, it
// stages jiarun (the binary at jiarun) and the program (at prog here), and
// it returns the link and the program's path on the host.
func bootProxy(rc *remoteCmd, host, jiarun string, noStage bool, prog string, diag io.Writer) (*bufio.Reader, *linkWriter, string, error) {
	r := bufio.NewReaderSize(rc.stdout, 64<<10)
	w := newLinkWriter(rc.stdin)
	if noStage {
		return r, w, prog, nil
	}
	if err := bootstrap(r, rc.stdin, jiarun, host, diag); err != nil {
		return nil, nil, "", err
	}
	path, err := stageProgram(w, r, prog, host)
	if err != nil {
		return nil, nil, "", err
	}
	return r, w, path, nil
}

// startProxy starts jiarun's proxy on host through the agent, stages jiarun
// (whose hash is self) and the program there unless the job says not to,
// and sends the launch: the host's ranks and, in a tree, the hosts its
// proxy starts in turn. The ranks of all of them are the link's.
func (s *supervisor) startProxy(host string, jiarun string, self fileHash, spec launchSpec, hostOf map[int]string) (*proxyLink, error) {
	rc, err := s.startAgent(host, proxyCommand(jiarun, self, s.j.NoStage))
	if err != nil {
		return nil, err
	}
	s.out.Add(1)
	go func() {
		defer s.out.Done()
		prefix := []byte("jiarun: " + host + ": ")
		Forward(rc.stderr, sinkFor(s.j.Stderr), prefix)
	}()
	r, w, prog, err := bootProxy(rc, host, jiarun, s.j.NoStage, spec.Program, s.j.Stderr)
	if err == nil {
		spec.Program = prog
		if err = w.sendJSON(linkLaunch, spec); err != nil {
			err = fmt.Errorf("host %s: send launch: %w", host, err)
		}
	}
	if err != nil {
		err = withReason(err, rc)
		rc.kill()
		rc.wait()
		return nil, err
	}
	pl := &proxyLink{host: host, s: s, w: w, rc: rc,
		ranks: map[int]*rankProc{}, ready: make(chan error, 1)}
	pl.quiet.start()
	s.mu.Lock()
	for _, rk := range spec.subtreeRanks() {
		rp := &rankProc{rank: rk, host: hostOf[rk], proxy: pl}
		pl.ranks[rk] = rp
		s.procs = append(s.procs, rp)
	}
	s.links = append(s.links, pl)
	s.mu.Unlock()
	s.out.Add(1)
	go pl.readLoop(r)
	go pl.heartbeat()
	return pl, nil
}

// withReason adds to err why the connection to the host ended, when the
// agent knows (a lost SSH connection, say): "…: EOF" alone hides it.
func withReason(err error, rc *remoteCmd) error {
	if why := rc.reason(); why != nil && !strings.Contains(err.Error(), why.Error()) {
		return fmt.Errorf("%w (%v)", err, why)
	}
	return err
}

// heartbeat tells the proxy, every heartbeat interval, that the root is
// alive; a proxy that hears nothing for its heartbeat timeout kills its
// ranks (a cut link or a frozen root, which neither end may notice
// otherwise). The proxy does the same the other way: a proxy silent for
// the timeout (frozen, or its host gone) is given up, and its ranks, and
// those of the hosts below it, are failed.
func (pl *proxyLink) heartbeat() {
	timeout := pl.s.hostTimeout()
	t := time.NewTicker(heartbeatInterval(timeout))
	defer t.Stop()
	for range t.C {
		pl.mu.Lock()
		ended := pl.ended
		pl.mu.Unlock()
		if ended {
			return
		}
		if d, over := pl.quiet.over(timeout); over {
			pl.mu.Lock()
			pl.silent = fmt.Errorf("no word from its proxy for %v", d.Round(time.Millisecond))
			pl.mu.Unlock()
			pl.rc.kill()
			return
		}
		if pl.w.send(linkPing) != nil {
			return
		}
	}
}

// stop asks the proxy to kill everything below it and exit.
func (pl *proxyLink) stop() {
	pl.w.send(linkShutdown)
}

// readLoop handles the proxy's frames until the link ends; then every rank
// of the host that has not been reported ended is failed.
func (pl *proxyLink) readLoop(r *bufio.Reader) {
	s := pl.s
	defer s.out.Done()
	var cause error
	for cause == nil {
		typ, body, err := readLinkFrame(r)
		if err != nil {
			cause = err
			break
		}
		pl.quiet.hear()
		cause = pl.handle(typ, body)
	}
	pl.mu.Lock()
	done, silent := pl.done, pl.silent
	pl.ended = true
	pl.mu.Unlock()
	pl.streams.closeAll()
	if why := pl.rc.reason(); why != nil {
		cause = why
	}
	if silent != nil {
		cause = silent
	}
	pl.rc.kill()
	pl.rc.wait()
	pl.setReady(fmt.Errorf("host %s: %v", pl.host, cause))
	for _, rp := range pl.ranks {
		rp.mu.Lock()
		reaped := rp.reaped
		rp.reaped = true
		rp.mu.Unlock()
		if !reaped {
			why := fmt.Errorf("lost contact with host %s: %s", pl.host, strings.TrimPrefix(cause.Error(), "host "+pl.host+": "))
			if done {
				why = fmt.Errorf("host %s reported no exit status", rp.host)
			}
			s.exits <- rankExit{r: rp, status: exitStatus{code: -1, err: why}}
		}
	}
}

// lost fails the ranks that a proxy below reported lost with their host.
func (pl *proxyLink) lost(body []byte) error {
	var l lostReport
	if err := json.Unmarshal(body, &l); err != nil {
		return fmt.Errorf("host %s: lost report: %w", pl.host, err)
	}
	for _, rank := range l.Ranks {
		rp := pl.ranks[rank]
		if rp == nil {
			continue
		}
		rp.mu.Lock()
		reaped := rp.reaped
		rp.reaped = true
		rp.mu.Unlock()
		if !reaped {
			why := fmt.Errorf("lost contact with host %s: %s", l.Host, l.Reason)
			pl.s.exits <- rankExit{r: rp, status: exitStatus{code: -1, err: why}}
		}
	}
	return nil
}

// answer answers a question about a login below this proxy.
func (pl *proxyLink) answer(body []byte) error {
	v, rest, err := payload(body, 1)
	if err != nil {
		return err
	}
	var req authRequest
	reply := authReply{Err: "jiarun on the login node: no SSH logins are delegated in this job"}
	if err := json.Unmarshal(rest, &req); err != nil {
		reply.Err = fmt.Sprintf("jiarun on the login node: bad request: %v", err)
	} else if a := pl.s.auth; a != nil {
		reply = a.answer(pl.host, req)
	}
	b, err := json.Marshal(reply)
	if err != nil {
		return err
	}
	return pl.w.send(linkAuthReply, uv(v[0]), b)
}

func (pl *proxyLink) handle(typ byte, body []byte) error {
	s := pl.s
	switch typ {
	case linkStarted:
		v, _, err := payload(body, 2)
		if err != nil {
			return err
		}
		if rp := pl.ranks[int(v[0])]; rp != nil {
			rp.mu.Lock()
			rp.pid = int(v[1])
			rp.mu.Unlock()
		}
	case linkOutput:
		v, rest, err := payload(body, 1)
		if err != nil || len(rest) < 1 {
			return errLinkPayload
		}
		w := s.j.Stdout
		if rest[0] == 2 {
			w = s.j.Stderr
		}
		var prefix, scratch []byte
		if s.j.TagOutput {
			prefix = RankPrefix(int(v[0]))
		}
		sinkFor(w).write(tag(&scratch, rest[1:], prefix))
	case linkExit:
		rank, code, sig, err := decodeExit(body)
		if err != nil {
			return err
		}
		rp := pl.ranks[rank]
		if rp == nil {
			return fmt.Errorf("host %s reported the exit of rank %d, not one of its ranks", pl.host, rank)
		}
		rp.mu.Lock()
		rp.reaped = true
		rp.mu.Unlock()
		s.exits <- rankExit{r: rp, status: exitStatus{code: code, sig: syscall.Signal(sig)}}
	case linkRVOpen:
		v, _, err := payload(body, 1)
		if err != nil {
			return err
		}
		a, b := net.Pipe()
		pl.streams.add(v[0], b)
		s.srv.Attach(relayedConn{Conn: a, remote: relayAddr(pl.host)})
		go pl.streams.pump(pl.w, v[0], b)
	case linkRVData, linkRVClose:
		return pl.streams.deliver(typ, body)
	case linkFatal:
		fmt.Fprintf(s.j.Stderr, "jiarun: proxy on %s failed: %s\n", pl.host, strings.TrimSpace(string(body)))
	case linkNotice:
		fmt.Fprintf(s.j.Stderr, "jiarun: %s\n", body)
	case linkAlive:
	case linkReady:
		var err error
		if len(body) > 0 {
			err = errors.New(string(body))
		}
		pl.setReady(err)
	case linkLost:
		return pl.lost(body)
	case linkAuthAsk:
		go pl.answer(body)
	case linkDone:
		pl.mu.Lock()
		pl.done = true
		pl.mu.Unlock()
		pl.w.send(linkShutdown)
	default:
		return fmt.Errorf("host %s: unexpected frame type %#x", pl.host, typ)
	}
	return nil
}

// signal asks the proxy to signal its ranks (all but spare; -1 for none).
func (pl *proxyLink) signal(sig syscall.Signal, spare int) {
	pl.w.send(linkSignal, uv(uint64(sig), uint64(spare+1)))
}

// sendStdin copies r to the proxy's stdin rank, then sends end of file.
func (pl *proxyLink) sendStdin(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if pl.w.send(linkStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	pl.w.send(linkStdin)
}

// relayedConn is a rendezvous connection relayed by a proxy, named after
// its host in the server's messages.
type relayedConn struct {
	net.Conn
	remote net.Addr
}

func (c relayedConn) RemoteAddr() net.Addr { return c.remote }

type relayAddr string

func (a relayAddr) Network() string { return "relay" }
func (a relayAddr) String() string  { return "host " + string(a) + " (via its proxy)" }

// jiarunPath is the jiarun binary that proxies run: this one, at the same
// path on every host (a shared file system) until binaries are staged.
func jiarunPath() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate jiarun: %w", err)
	}
	return p, nil
}
