package launcher

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rt "github.com/jiarun/jia/runtime"
)

// RunProxy is `jiarun proxy`: the host-side half of a multi-host launch,
// started by the root jiarun on each other host (over SSH) with the link on
// its standard input and output. It starts the host's ranks, relays their
// rendezvous connections and their output over the link, passes signals on
// and reports exits. When the link ends (the root died or the connection to
// it broke), it kills its ranks at once and exits: nothing outlives the
// job. diag receives the proxy's own diagnostics. It returns the proxy's
// exit code.
func RunProxy(in io.Reader, out io.Writer, diag io.Writer) int {
	p := &proxy{w: newLinkWriter(out), diag: diag}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		sig := <-sigs
		fmt.Fprintf(diag, "jiarun proxy: %v: killing the ranks\n", sig)
		p.killAll()
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
	if err := p.run(bufio.NewReaderSize(in, 64<<10)); err != nil {
		fmt.Fprintf(diag, "jiarun proxy: %v\n", err)
		p.w.send(linkFatal, []byte(err.Error()))
		p.killAll()
		return 1
	}
	return 0
}

type proxy struct {
	w    *linkWriter
	diag io.Writer
	spec launchSpec

	mu      sync.Mutex
	ranks   []*proxyRank
	live    int
	streams streamTable // the ranks' relayed rendezvous connections
	next    uint64
	stdinW  *os.File
	outputs sync.WaitGroup
	heard   atomic.Int64 // when the root last sent a frame (Unix ns)
	ln      net.Listener
}

type proxyRank struct {
	rank   int
	pid    int
	reaped bool
}

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
	p.heard.Store(time.Now().UnixNano())
	if err := p.start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		p.outputs.Wait()
		close(done)
	}()
	linkErr := make(chan error, 1)
	go func() { linkErr <- p.readLink(r) }()
	silent := make(chan time.Duration, 1)
	if t := p.spec.HeartbeatTimeout; t > 0 {
		go func() {
			for range time.Tick(t / 4) {
				if d := time.Since(time.Unix(0, p.heard.Load())); d > t {
					silent <- d
					return
				}
			}
		}()
	}
	select {
	case d := <-silent:
		p.killAll()
		return fmt.Errorf("no word from jiarun for %v: killed the ranks", d.Round(time.Millisecond))
	case <-done:
		// Every rank exited and its output went out.
		p.closeStreams()
		return p.w.send(linkDone)
	case err := <-linkErr:
		p.killAll()
		if err == nil {
			err = errors.New("the root asked for shutdown")
		}
		return fmt.Errorf("link to jiarun ended: %w", err)
	}
}

// start opens the rendezvous relay and starts the ranks.
func (p *proxy) start() error {
	s := &p.spec
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("rendezvous relay: %w", err)
	}
	p.ln = ln
	go p.acceptRelay()
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
			Job: s.Job, Rendezvous: ln.Addr().String(), Secret: secret, Host: host, Config: s.Config, Addr: addr}
		env := rankEnv(base, c)
		var stdin io.Reader
		if rank == s.StdinRank {
			r, w, err := os.Pipe()
			if err != nil {
				return err
			}
			stdin, p.stdinW = r, w
			defer r.Close()
		}
		sp, err := spawn(rank, s.Program, s.Args, env, s.WorkDir, stdin)
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

// readLink handles the root's frames until the link ends.
func (p *proxy) readLink(r *bufio.Reader) error {
	for {
		typ, body, err := readLinkFrame(r)
		if err != nil {
			return err
		}
		p.heard.Store(time.Now().UnixNano())
		switch typ {
		case linkPing:
		case linkSignal:
			v, _, err := payload(body, 2)
			if err != nil {
				return err
			}
			p.signal(syscall.Signal(v[0]), int(v[1])-1)
		case linkStdin:
			p.mu.Lock()
			w := p.stdinW
			p.mu.Unlock()
			if w == nil {
				continue
			}
			if len(body) == 0 {
				w.Close()
				continue
			}
			w.Write(body) // a rank that stopped reading loses its input
		case linkShutdown:
			return nil
		case linkRVData, linkRVClose:
			if err := p.streams.deliver(typ, body); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected frame type %#x", typ)
		}
	}
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

// signal sends sig to every rank's process group but spare's.
func (p *proxy) signal(sig syscall.Signal, spare int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.ranks {
		if !r.reaped && r.rank != spare {
			syscall.Kill(-r.pid, sig)
		}
	}
}

// killAll kills every rank and waits (briefly) until they are reaped.
func (p *proxy) killAll() {
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
	p.closeStreams()
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
