package launcher

import (
	"bufio"
	"context"
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
type proxyLink struct {
	host  string
	s     *supervisor
	w     *linkWriter
	rc    *remoteCmd
	ranks map[int]*rankProc

	mu      sync.Mutex
	streams streamTable // root ends of the relayed rendezvous connections
	done    bool        // the proxy reported that all its ranks ended
	ended   bool        // the link is gone
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
	j := s.j
	if len(j.Agent) == 0 {
		c := s.ssh[host]
		if c == nil {
			return nil, fmt.Errorf("host %s: not connected", host)
		}
		return startSSH(c, argv)
	}
	full := agentCommand(j.Agent, host, argv...)
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
		return nil, fmt.Errorf("host %s: start %s: %w", host, j.Agent[0], err)
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

// startProxy starts jiarun's proxy on host through the agent, stages jiarun
// and the program there unless the job says not to, and sends the launch.
func (s *supervisor) startProxy(host string, jiarun string, spec launchSpec) (*proxyLink, error) {
	var argv []string
	if s.j.NoStage {
		argv = []string{jiarun, "proxy"}
	} else {
		self, err := hashFile(jiarun)
		if err != nil {
			return nil, fmt.Errorf("stage jiarun: %w", err)
		}
		argv = []string{"sh", "-c", bootstrapScript(self)}
	}
	rc, err := s.startAgent(host, argv)
	if err != nil {
		return nil, err
	}
	s.out.Add(1)
	go func() {
		defer s.out.Done()
		prefix := []byte("jiarun: " + host + ": ")
		Forward(rc.stderr, sinkFor(s.j.Stderr), prefix)
	}()
	fail := func(err error) (*proxyLink, error) {
		rc.kill()
		rc.wait()
		return nil, err
	}
	r := bufio.NewReaderSize(rc.stdout, 64<<10)
	w := newLinkWriter(rc.stdin)
	if !s.j.NoStage {
		if err := bootstrap(r, rc.stdin, jiarun, host, s.j.Stderr); err != nil {
			return fail(err)
		}
		if spec.Program, err = stageProgram(w, r, spec.Program, host); err != nil {
			return fail(err)
		}
	}
	pl := &proxyLink{host: host, s: s, w: w, rc: rc,
		ranks: map[int]*rankProc{}}
	if err := pl.w.sendJSON(linkLaunch, spec); err != nil {
		return fail(fmt.Errorf("host %s: send launch: %w", host, err))
	}
	s.mu.Lock()
	for _, rk := range spec.Ranks {
		rp := &rankProc{rank: rk, host: host, proxy: pl}
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

// heartbeat tells the proxy, every second, that the root is alive; a proxy
// that hears nothing for its heartbeat timeout kills its ranks (a cut link
// or a frozen root, which neither end may notice otherwise).
func (pl *proxyLink) heartbeat() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for range t.C {
		pl.mu.Lock()
		ended := pl.ended
		pl.mu.Unlock()
		if ended || pl.w.send(linkPing) != nil {
			return
		}
	}
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
		cause = pl.handle(typ, body)
	}
	pl.mu.Lock()
	done := pl.done
	pl.ended = true
	pl.mu.Unlock()
	pl.streams.closeAll()
	if why := pl.rc.reason(); why != nil {
		cause = why
	}
	pl.rc.kill()
	pl.rc.wait()
	for _, rp := range pl.ranks {
		rp.mu.Lock()
		reaped := rp.reaped
		rp.reaped = true
		rp.mu.Unlock()
		if !reaped {
			why := fmt.Errorf("lost contact with host %s: %v", pl.host, cause)
			if done {
				why = fmt.Errorf("host %s reported no exit status", pl.host)
			}
			s.exits <- rankExit{r: rp, status: exitStatus{code: -1, err: why}}
		}
	}
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
