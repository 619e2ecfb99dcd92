package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jiarun/jia/internal/hostcpu"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/launcher/sshc"
	rt "github.com/jiarun/jia/runtime"
	"github.com/jiarun/jia/runtime/config"
	"github.com/jiarun/jia/runtime/rendezvous"
)

// Exit codes of jiarun itself (a failing rank's own code is passed on).
const (
	ExitOK      = 0
	ExitFailure = 1   // jiarun could not run the job
	ExitUsage   = 2   // bad input; nothing was started
	ExitTimeout = 124 // --timeout expired (as timeout(1))
)

// NoStdin as Job.StdinRank sends standard input to no rank.
const NoStdin = -1

// Job is one launch: what to run, where, and how to treat its ranks.
type Job struct {
	// NP is the number of ranks.
	NP int
	// Hosts is the host list, or nil for "this host, any number of ranks".
	Hosts HostList
	// HostSource names where Hosts came from, for messages ("hosts.toml", "-H").
	HostSource string
	// Oversubscribe allows more ranks than a host list has slots.
	Oversubscribe bool
	// BindTo binds ranks to processors: BindAuto, BindCore or BindNone.
	BindTo string
	// Program is the PROGRAM argument: an executable, a name in PATH, or a
	// directory holding a Go main package.
	Program string
	// Args are passed to every rank.
	Args []string
	// Env holds KEY=VALUE pairs added to every rank's environment.
	Env []string
	// WorkDir is the ranks' working directory ("" for jiarun's own).
	WorkDir string
	// TagOutput prefixes every line of a rank's output with "[rank] ".
	TagOutput bool
	// Timeout stops the job after this long (0 for none).
	Timeout time.Duration
	// StdinRank receives jiarun's standard input; NoStdin for none.
	StdinRank int
	// Config is the resolved configuration given to every rank.
	Config config.Config

	// Stdin, Stdout and Stderr are jiarun's own streams.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Signals delivers the signals jiarun received (SIGINT, SIGTERM,
	// SIGHUP stop the job; SIGUSR1 and SIGUSR2 are passed to the ranks).
	Signals <-chan os.Signal
	// Logger receives jiarun's structured log; nil for none.
	Logger *slog.Logger
	// Agent is a command that starts a proxy on another host, called as
	// Agent... HOST COMMAND... (for example ["srun", ..., "--nodelist"]).
	// Without it, jiarun's own SSH client does it, configured by SSH.
	Agent []string
	// SSH configures the built-in SSH client; nil for the defaults (the
	// user's ~/.ssh/config, keys and known_hosts).
	SSH *sshc.Config
	// ProxyJiarun is the jiarun binary the other hosts run: staged to them
	// unless NoStage; "" for this jiarun itself.
	ProxyJiarun string
	// HostTimeout is how long a host may be silent before the job is
	// stopped (SSH keepalives and heartbeats, both ways); 0 for
	// DefaultHostTimeout.
	HostTimeout time.Duration
	// NoStage skips copying jiarun and the program to the other hosts: they
	// see the same paths (a shared file system).
	NoStage bool
	// Fanout is how many proxies jiarun, and each proxy, starts at most:
	// with more other hosts, proxies start the proxies of further hosts
	// (a tree; see planTree). 0 means no tree: jiarun starts every proxy.
	Fanout int
}

// rankProc is one started rank: a local process (pid), or a process on
// another host reached through that host's proxy.
type rankProc struct {
	rank   int
	host   string
	pid    int
	proxy  *proxyLink // nil for a local rank
	mu     sync.Mutex
	reaped bool
}

type rankExit struct {
	r      *rankProc
	status exitStatus
}

// Run starts the job, supervises it and returns jiarun's exit code. Every
// rank is gone when it returns. A *UsageError means nothing was started.
func Run(ctx context.Context, j Job) (int, error) {
	if j.Stdout == nil {
		j.Stdout = io.Discard
	}
	if j.Stderr == nil {
		j.Stderr = io.Discard
	}
	log := j.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if j.NP < 1 {
		return ExitUsage, usagef("-np %d: the number of ranks must be at least 1", j.NP)
	}
	place, err := placeRanks(j)
	if err != nil {
		return ExitUsage, err
	}
	if j.WorkDir != "" {
		if st, err := os.Stat(j.WorkDir); err != nil || !st.IsDir() {
			return ExitUsage, usagef("--wdir %q: not a directory", j.WorkDir)
		}
	}
	for _, kv := range j.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return ExitUsage, usagef("environment entry %q is not KEY=VALUE", kv)
		}
	}
	if j.StdinRank >= j.NP {
		return ExitUsage, usagef("--stdin %d: no such rank in a job of %d", j.StdinRank, j.NP)
	}
	// The default configuration is not passed: ranks start from it anyway.
	var cfgText string
	if j.Config != config.Default() {
		if cfgText, err = j.Config.Encode(); err != nil {
			return ExitUsage, usagef("configuration: %v", err)
		}
	}

	prog, cleanup, err := ResolveProgram(j.Program, j.Stderr)
	defer cleanup()
	if err != nil {
		return ExitUsage, err
	}

	secret := make([]byte, rt.SecretLen)
	if _, err := rand.Read(secret); err != nil {
		return ExitFailure, fmt.Errorf("job secret: %w", err)
	}
	var idb [6]byte
	rand.Read(idb[:])
	job := "j" + hex.EncodeToString(idb[:])
	srv, err := rendezvous.NewServer(rendezvous.ServerConfig{
		Size: j.NP, Job: job, Secret: secret, Logger: log,
	})
	if err != nil {
		return ExitFailure, fmt.Errorf("rendezvous server: %w", err)
	}
	defer srv.Close()
	defer removeSegments(job, j.Stderr)
	log.Debug("job", "id", job, "np", j.NP, "program", prog, "rendezvous", srv.Addr())

	s := &supervisor{j: j, log: log, srv: srv, exits: make(chan rankExit, j.NP), prog: prog}
	if err := s.startRemote(ctx, place, job, secret, cfgText); err != nil {
		s.signalAll(syscall.SIGKILL)
		s.waitAll()
		return ExitFailure, err
	}
	// The rendezvous listens on loopback (remote ranks reach it through
	// their proxies), so ranks here would listen there too: when other
	// hosts take part, they listen on this host's address instead.
	addr := ""
	if slices.ContainsFunc(place, func(p placement) bool { return p.remote }) {
		addr = hostAddress()
	}
	for _, p := range place {
		if p.remote {
			continue
		}
		base := rankBaseEnv(hostEnv(j.Env, p.host))
		c := rt.Contract{
			Rank: p.Rank, Size: j.NP, LocalRank: p.LocalRank, LocalSize: p.LocalSize,
			Job: job, Rendezvous: srv.Addr(), Secret: secret, Host: p.hostName,
			Config: cfgText, Addr: addr,
		}
		if err := s.start(prog, p, rankEnv(base, c), hostWorkDir(j.WorkDir, p.host)); err != nil {
			s.signalAll(syscall.SIGKILL)
			s.waitAll()
			return ExitFailure, err
		}
	}
	return s.supervise(ctx), nil
}

// placement is a rank's place, with its host's name resolved.
type placement struct {
	Placement
	hostName string
	remote   bool // on another host, started by that host's proxy
	host     Host // the host list's entry (zero without a host list)
}

func placeRanks(j Job) ([]placement, error) {
	out := make([]placement, j.NP)
	if len(j.Hosts) == 0 {
		host, _ := os.Hostname()
		for r := range out {
			out[r] = placement{Placement: Placement{Rank: r, LocalRank: r, LocalSize: j.NP}, hostName: host}
		}
		return out, nil
	}
	ps, err := MapRanks(j.Hosts, j.NP, j.Oversubscribe, j.HostSource)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	for i, p := range ps {
		h := j.Hosts[p.Host]
		local := IsLocalHost(h.Name)
		out[i] = placement{Placement: p, hostName: h.Name, remote: !local, host: h}
	}
	return out, nil
}

// rankBaseEnv is jiarun's environment without any launch contract it may
// itself have been started with, plus the user's additions.
func rankBaseEnv(extra []string) []string {
	contract := map[string]bool{}
	for _, k := range []string{rt.EnvRank, rt.EnvSize, rt.EnvLocalRank, rt.EnvLocalSize,
		rt.EnvJob, rt.EnvRendezvous, rt.EnvSecret, rt.EnvHost, rt.EnvConfig, rt.EnvAddr, hostcpu.Env} {
		contract[k] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !contract[k] {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// rankEnv is a rank's whole environment: base, the launch contract,
// GOMAXPROCS for its share of the host's cores unless base sets it, and
// the number of processors the host's ranks share (hostcpu.Env), which a
// rank bound to one processor cannot see for itself.
func rankEnv(base []string, c rt.Contract) []string {
	env := append(append([]string(nil), base...), c.Environ()...)
	if !hasKey(base, "GOMAXPROCS") {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(procsPerRank(c.LocalSize)))
	}
	if !hasKey(base, hostcpu.Env) {
		env = append(env, hostcpu.Env+"="+strconv.Itoa(usableCores()))
	}
	return env
}

func hasKey(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// procsPerRank shares the cores this process may run on among the ranks
// of one host, at least one each.
func procsPerRank(localSize int) int {
	return max(1, usableCores()/max(1, localSize))
}

// usableCores is the number of cores this process may run on, read once.
var usableCores = sync.OnceValue(func() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil && set.Count() > 0 {
		return set.Count()
	}
	return 1
})

// supervisor owns the started ranks of one job.
type supervisor struct {
	j     Job
	log   *slog.Logger
	srv   *rendezvous.Server
	procs []*rankProc
	mu    sync.Mutex              // guards procs and links while proxies start
	links []*proxyLink            // proxies of the other hosts
	ssh   map[string]*sshc.Client // SSH connections, by host
	auth  *treeAuth               // answers the proxies' SSH logins; nil without a tree over SSH
	prog  string                  // the program's path
	exits chan rankExit
	out   sync.WaitGroup // output forwarders
}

// start starts one rank in its own process group, with a parent-death
// signal so that it cannot outlive jiarun.
func (s *supervisor) start(prog string, p placement, env []string, wdir string) error {
	j := s.j
	var stdin io.Reader
	if p.Rank == j.StdinRank {
		stdin = j.Stdin
	}
	sp, err := spawn(p.Rank, prog, j.Args, env, wdir, stdin, bindCPU(j.BindTo, p.LocalRank, p.LocalSize))
	if err != nil {
		return err
	}
	cmd := sp.cmd
	rp := &rankProc{rank: p.Rank, host: p.hostName, pid: cmd.Process.Pid}
	s.procs = append(s.procs, rp)
	var prefix []byte
	if j.TagOutput {
		prefix = RankPrefix(p.Rank)
	}
	s.out.Add(2)
	go s.forward(sp.stdout, j.Stdout, prefix)
	go s.forward(sp.stderr, j.Stderr, prefix)
	go func() {
		err := cmd.Wait()
		rp.mu.Lock()
		rp.reaped = true
		rp.mu.Unlock()
		s.exits <- rankExit{r: rp, status: statusOf(cmd.ProcessState, err)}
	}()
	return nil
}

var sinks sync.Map // io.Writer → *Sink, so every rank shares one lock per stream

func sinkFor(w io.Writer) *Sink {
	if s, ok := sinks.Load(w); ok {
		return s.(*Sink)
	}
	s, _ := sinks.LoadOrStore(w, NewSink(w))
	return s.(*Sink)
}

func (s *supervisor) forward(r *os.File, w io.Writer, prefix []byte) {
	defer s.out.Done()
	defer r.Close()
	if err := Forward(r, sinkFor(w), prefix); err != nil {
		s.log.Warn("output forwarding", "err", err)
		io.Copy(io.Discard, r)
	}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// signalAll sends sig to the process group of every rank not yet reaped.
func (s *supervisor) signalAll(sig syscall.Signal) { s.signalAllBut(sig, -1) }

// signalAllBut is signalAll sparing one rank. The ranks of other hosts
// are signalled by their proxies.
func (s *supervisor) signalAllBut(sig syscall.Signal, spare int) {
	for _, pl := range s.links {
		pl.signal(sig, spare)
	}
	for _, p := range s.procs {
		if p.proxy != nil {
			continue
		}
		p.mu.Lock()
		if !p.reaped && p.rank != spare {
			syscall.Kill(-p.pid, sig)
		}
		p.mu.Unlock()
	}
}

// startRemote starts the proxies of the other hosts, each with its ranks:
// itself for up to Fanout hosts, through those hosts' proxies for the
// others (see planTree). Every proxy first reports that it and the hosts
// below it are ready; only when all are does any rank start, so a host
// that cannot be reached or staged to stops the job with nothing started.
func (s *supervisor) startRemote(ctx context.Context, place []placement, job string, secret []byte, cfgText string) error {
	j := s.j
	t0 := time.Now()
	byHost := map[string][]int{}
	entry := map[string]Host{}
	hostOf := map[int]string{}
	var hosts []string
	for _, p := range place {
		if !p.remote {
			continue
		}
		if byHost[p.hostName] == nil {
			hosts = append(hosts, p.hostName)
			entry[p.hostName] = p.host
		}
		byHost[p.hostName] = append(byHost[p.hostName], p.Rank)
		hostOf[p.Rank] = p.hostName
	}
	if len(hosts) == 0 {
		return nil
	}
	jiarun := j.ProxyJiarun
	if jiarun == "" {
		var err error
		if jiarun, err = jiarunPath(); err != nil {
			return err
		}
	}
	var self fileHash
	if !j.NoStage {
		var err error
		if self, err = hashFile(jiarun); err != nil {
			return fmt.Errorf("stage jiarun: %w", err)
		}
	}
	tree := planTree(len(hosts), j.Fanout)
	cfg := j.SSH
	if cfg == nil {
		cfg = &sshc.Config{}
	}
	// Over SSH, the proxies log in to the hosts below them with this
	// process as their authority (see treeAuth); resolve those hosts now.
	hops := make([]*sshHop, len(hosts))
	if len(j.Agent) == 0 && tree.Depth() > 1 {
		s.auth = newTreeAuth(cfg)
		for _, r := range tree.Roots {
			for _, i := range tree.Subtree(r)[1:] {
				hop, err := s.auth.plan(cfg, hosts[i], sshSpec(entry[hosts[i]]), hosts[r])
				if err != nil {
					s.auth.finish()
					return err
				}
				hops[i] = hop
			}
		}
	}
	timeout := s.hostTimeout()
	// The proxies run the launch agent too, from their own working
	// directory: a relative path to it is made absolute.
	agent := slices.Clone(j.Agent)
	if len(agent) > 0 && strings.Contains(agent[0], "/") && !filepath.IsAbs(agent[0]) {
		if abs, err := filepath.Abs(agent[0]); err == nil {
			agent[0] = abs
		}
	}
	var build func(i int) launchSpec
	build = func(i int) launchSpec {
		h := hosts[i]
		spec := launchSpec{Job: job, Size: j.NP, Secret: hex.EncodeToString(secret), Config: cfgText,
			Program: s.prog, Args: j.Args, Env: hostEnv(j.Env, entry[h]), WorkDir: hostWorkDir(j.WorkDir, entry[h]),
			Ranks: byHost[h], StdinRank: -1, HostName: h, HeartbeatTimeout: timeout,
			Agent: agent, NoStage: j.NoStage, JiarunHash: self, BindTo: j.BindTo,
			KeepaliveInterval: cfg.KeepaliveInterval, KeepaliveCountMax: cfg.KeepaliveCountMax}
		if j.NoStage {
			spec.Jiarun = jiarun
		}
		for _, c := range tree.Children[i] {
			spec.Children = append(spec.Children, childLaunch{Host: hosts[c], SSH: hops[c], Launch: build(c)})
		}
		if slices.Contains(spec.subtreeRanks(), j.StdinRank) {
			spec.StdinRank = j.StdinRank
		}
		return spec
	}
	roots := make([]string, len(tree.Roots))
	for k, i := range tree.Roots {
		roots[k] = hosts[i]
	}
	if len(j.Agent) == 0 {
		if err := s.dialAll(ctx, roots, entry); err != nil {
			if s.auth != nil {
				s.auth.finish()
			}
			return err
		}
	}
	links := make([]*proxyLink, len(roots))
	errs := make([]error, len(roots))
	var wg sync.WaitGroup
	for k, i := range tree.Roots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			links[k], errs[k] = s.startProxy(hosts[i], jiarun, self, build(i), hostOf)
		}()
	}
	wg.Wait()
	if errors.Join(errs...) == nil {
		for k, pl := range links {
			errs[k] = <-pl.ready
		}
	}
	if s.auth != nil {
		s.auth.finish()
	}
	if err := errors.Join(errs...); err != nil {
		for _, pl := range links {
			if pl != nil {
				pl.stop()
			}
		}
		return err
	}
	s.log.Debug("proxies ready", "hosts", len(hosts), "fanout", j.Fanout, "generations", tree.Depth(),
		"direct", len(roots), "elapsed", time.Since(t0))
	for _, pl := range links {
		pl.w.send(linkGo)
		if j.Stdin != nil && pl.ranks[j.StdinRank] != nil {
			go pl.sendStdin(j.Stdin)
		}
	}
	return nil
}

// hostTimeout is how long another host may be silent.
func (s *supervisor) hostTimeout() time.Duration {
	if s.j.HostTimeout > 0 {
		return s.j.HostTimeout
	}
	return DefaultHostTimeout
}

// DefaultHostTimeout is Job.HostTimeout's default.
const DefaultHostTimeout = 4 * time.Second

// hostEnv is the job's environment additions followed by the host's own
// (from the host file), in a stable order.
func hostEnv(jobEnv []string, h Host) []string {
	env := append([]string(nil), jobEnv...)
	for _, k := range slices.Sorted(maps.Keys(h.Env)) {
		env = append(env, k+"="+h.Env[k])
	}
	return env
}

// hostWorkDir is --wdir if given, else the host file's workdir for the host.
func hostWorkDir(flag string, h Host) string {
	if flag != "" {
		return flag
	}
	return h.WorkDir
}

// waitAll reaps every started rank and waits for their output.
func (s *supervisor) waitAll() {
	for range s.procs {
		<-s.exits
	}
	s.out.Wait()
}

// supervise waits for the job to end and returns jiarun's exit code.
//
// When ranks fail, the first one to fail is blamed, not the ones that
// failed because of it. The rendezvous server sees the order in which rank
// connections dropped (a process's sockets close as it dies, before its
// parent can reap it), so the first Lost rank is the cause; for a program
// that never joined the rendezvous the first failed exit is.
func (s *supervisor) supervise(ctx context.Context) int {
	j := s.j
	running := len(s.procs)
	var timeout <-chan time.Time
	if j.Timeout > 0 {
		t := time.NewTimer(j.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	grace := j.Config.Launch.GracePeriod
	if grace <= 0 {
		grace = time.Second
	}
	var (
		code      = ExitOK
		stopping  bool
		killT     <-chan time.Time
		connected = map[int]bool{} // ranks that joined the rendezvous
		statuses  = map[int]rankExit{}
		culprit   = -1 // rank whose failure ends the job, once known
		pending   <-chan time.Time
		pendingR  = -1 // a failed rank waiting for its Lost event
	)
	stop := func(exit int, why string) {
		if stopping {
			return
		}
		stopping = true
		code = exit
		left := running
		if culprit >= 0 {
			if _, reaped := statuses[culprit]; !reaped {
				left--
			}
		}
		if left > 0 {
			fmt.Fprintf(j.Stderr, "jiarun: %s; stopping %d remaining rank%s\n", why, left, plural(left))
			s.signalAll(syscall.SIGTERM)
			killT = time.After(grace)
		} else {
			fmt.Fprintf(j.Stderr, "jiarun: %s\n", why)
		}
	}
	// blame ends the job because of rank r, once its exit status is known.
	blame := func(r int) {
		if stopping && culprit != r {
			return
		}
		culprit = r
		e, ok := statuses[r]
		if !ok {
			// Lost before reaped: stop the others now, report when reaped.
			if !stopping {
				s.signalAllBut(syscall.SIGTERM, r)
			}
			return
		}
		c, why := describeExit(e)
		stop(c, why)
	}
	events := s.srv.Events()
	for running > 0 {
		select {
		case e := <-s.exits:
			running--
			statuses[e.r.rank] = e
			switch {
			case culprit == e.r.rank:
				blame(e.r.rank)
			case culprit >= 0 || stopping:
				// A consequence of the failure being handled.
			case failed(e):
				if connected[e.r.rank] && pendingR < 0 {
					// Its Lost event names the first rank to die; wait for it briefly.
					pendingR = e.r.rank
					pending = time.After(200 * time.Millisecond)
				} else if !connected[e.r.rank] {
					blame(e.r.rank)
				}
			}
		case <-pending:
			pending = nil
			if culprit < 0 {
				blame(pendingR)
			}
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch e := ev.(type) {
			case rendezvous.Connected:
				for _, r := range e.Ranks {
					connected[r] = true
				}
			case rendezvous.Lost:
				if culprit < 0 && !stopping {
					blame(e.Rank)
				}
			case rendezvous.Abort:
				if !stopping {
					// The aborting rank ends by itself; it is not one to stop.
					culprit = e.Rank
				}
				s.onEvent(ev, stop)
			default:
				s.onEvent(ev, stop)
			}
		case sig := <-j.Signals:
			ss, _ := sig.(syscall.Signal)
			switch ss {
			case syscall.SIGUSR1, syscall.SIGUSR2:
				s.signalAll(ss)
			default:
				if stopping {
					// A second interrupt: no more grace.
					s.signalAll(syscall.SIGKILL)
					continue
				}
				stop(128+int(ss), fmt.Sprintf("received %s", sigName(ss)))
			}
		case <-timeout:
			stop(ExitTimeout, fmt.Sprintf("the job exceeded --timeout %v", j.Timeout))
		case <-ctx.Done():
			stop(ExitFailure, fmt.Sprintf("cancelled: %v", ctx.Err()))
		case <-killT:
			s.signalAll(syscall.SIGKILL)
			killT = nil
		}
	}
	if !stopping && culprit < 0 && pendingR >= 0 {
		blame(pendingR)
	}
	s.out.Wait()
	return code
}

// failed reports whether a rank's exit ends the job.
func failed(e rankExit) bool { return !e.status.success() }

// describeExit returns the exit code jiarun passes on for a rank's exit, and
// the sentence that says what happened.
func describeExit(e rankExit) (int, string) {
	who := fmt.Sprintf("rank %d (pid %d on %s)", e.r.rank, e.r.pid, e.r.host)
	st := e.status
	switch {
	case st.err != nil:
		return ExitFailure, fmt.Sprintf("%s: %v", who, st.err)
	case st.sig != 0:
		return 128 + int(st.sig), fmt.Sprintf("%s was killed by signal %d (%s)", who, int(st.sig), st.sig)
	case st.code != 0:
		return st.code, fmt.Sprintf("%s exited with code %d", who, st.code)
	}
	return ExitFailure, fmt.Sprintf("%s exited with code 0 without calling Finalize while other ranks were running", who)
}

// onEvent handles what the rendezvous server reports.
func (s *supervisor) onEvent(ev rendezvous.Event, stop func(int, string)) {
	switch e := ev.(type) {
	case rendezvous.Abort:
		stop(e.Code, fmt.Sprintf("rank %d called Abort with code %d: %s", e.Rank, e.Code, e.Message))
	case rendezvous.Refused:
		fmt.Fprintf(s.j.Stderr, "jiarun: refused a rendezvous connection from %s: %s\n", e.Remote, e.Reason)
	default:
		s.log.Debug("rendezvous", "event", ev.String())
	}
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
