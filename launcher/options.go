package launcher

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jiarun/jia/launcher/sshc"
	"github.com/jiarun/jia/runtime/config"
)

// Options are jiarun's command-line flags, unparsed beyond their types.
type Options struct {
	NP            int
	NPSet         bool // -np was given
	HostSpec      string
	Hostfile      string
	Oversubscribe bool
	BindTo        string   // --bind-to: BindAuto, BindCore or BindNone
	ExportVars    []string // -x VAR or -x VAR=VALUE
	SetVars       []string // --env K=V
	WorkDir       string
	TagOutput     bool
	Timeout       time.Duration
	TimeoutSet    bool
	Transport     string
	Stdin         string // a rank, or "none"
	ConfigFile    string
	LogLevel      string
	LaunchAgent   string // command that starts a proxy on another host
	NoStage       bool   // the hosts share the file system: copy nothing
	SSHConfig     string // ssh_config file (ssh -F)
	SSHKey        string // key file (ssh -i)
	SSHAcceptNew  bool   // learn unknown host keys (StrictHostKeyChecking=accept-new)
	SSHTimeout    time.Duration
	HostTimeout   time.Duration // a host silent this long fails the job
	Fanout        int           // proxies started by jiarun and by each proxy (tree fan-out)
	FanoutSet     bool          // --fanout (or JIARUN_FANOUT) was given
	Program       string
	Args          []string
}

// Prepare checks the options and turns them into a Job: host list, rank
// count, environment, configuration (file, then JIA_* variables, then
// flags). Every problem is a *UsageError naming the flag, file or line.
// Warnings (a -x variable that is not set, an unknown JIA_* variable) go to
// standard error.
func Prepare(o Options, getenv func(string) string) (Job, error) {
	var j Job
	slurmAgent := false // srun starts the proxies
	if o.HostSpec != "" && o.Hostfile != "" {
		return j, usagef("-H and --hostfile both given: use one host list")
	}
	switch {
	case o.HostSpec != "":
		hosts, err := ParseHostSpec(o.HostSpec)
		if err != nil {
			return j, usagef("-H: %v", err)
		}
		j.Hosts, j.HostSource = hosts, "-H "+o.HostSpec
	case o.Hostfile != "":
		hf, err := LoadHostfile(o.Hostfile)
		if err != nil {
			return j, &UsageError{Err: err}
		}
		j.Hosts, j.HostSource = hf.Hosts, o.Hostfile
	default:
		// Inside a Slurm allocation, its nodes and tasks are the host list,
		// and srun starts the proxies.
		hosts, src, err := SlurmAllocation(getenv)
		if err != nil {
			return j, &UsageError{Err: err}
		}
		if hosts != nil {
			j.Hosts, j.HostSource = hosts, src
			if o.LaunchAgent == "" {
				j.Agent, slurmAgent = SlurmAgent, true
			}
		}
	}
	switch {
	case o.NPSet && o.NP < 1:
		return j, usagef("-np %d: the number of ranks must be at least 1", o.NP)
	case o.NPSet:
		j.NP = o.NP
	case len(j.Hosts) > 0:
		j.NP = j.Hosts.TotalSlots()
	default:
		j.NP = procsPerRank(1)
	}
	j.Oversubscribe = o.Oversubscribe
	if err := checkBind(o.BindTo); err != nil {
		return j, &UsageError{Err: err}
	}
	j.BindTo = o.BindTo

	for _, x := range o.ExportVars {
		if k, _, ok := strings.Cut(x, "="); ok {
			if k == "" {
				return j, usagef("-x %q: empty variable name", x)
			}
			j.Env = append(j.Env, x)
			continue
		}
		if x == "" {
			return j, usagef("-x: empty variable name")
		}
		v, ok := os.LookupEnv(x)
		if !ok {
			fmt.Fprintf(os.Stderr, "jiarun: warning: -x %s: %s is not set in jiarun's environment; not passed\n", x, x)
			continue
		}
		j.Env = append(j.Env, x+"="+v)
	}
	for _, kv := range o.SetVars {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return j, usagef("--env %q: want KEY=VALUE", kv)
		}
		j.Env = append(j.Env, kv)
	}
	j.WorkDir = o.WorkDir
	j.TagOutput = o.TagOutput

	switch s := strings.TrimSpace(o.Stdin); s {
	case "none", "":
		j.StdinRank = NoStdin
	default:
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return j, usagef("--stdin %q: want a rank number or none", o.Stdin)
		}
		j.StdinRank = n
	}

	cfg, _, err := config.Resolve(o.ConfigFile, o.ConfigFile != "", getenv)
	if err != nil {
		return j, &UsageError{Err: err}
	}
	if o.Transport != "" {
		if err := cfg.Set("transport.kind", o.Transport); err != nil {
			return j, usagef("--transport: %v", err)
		}
	}
	if o.LogLevel != "" {
		if err := cfg.Set("log.level", o.LogLevel); err != nil {
			return j, usagef("--log-level: %v", err)
		}
	}
	if o.TimeoutSet {
		if o.Timeout <= 0 {
			return j, usagef("--timeout %v: must be positive", o.Timeout)
		}
		cfg.Launch.Timeout = o.Timeout
	}
	if err := cfg.Validate(); err != nil {
		return j, &UsageError{Err: err}
	}
	j.Config = cfg
	j.Timeout = cfg.Launch.Timeout
	for _, k := range config.UnknownEnv(os.Environ()) {
		fmt.Fprintf(os.Stderr, "jiarun: warning: unknown variable %s in the environment (not a jiarun setting)\n", k)
	}
	j.Program, j.Args = o.Program, o.Args
	if o.LaunchAgent != "" {
		j.Agent = strings.Fields(o.LaunchAgent)
	}
	j.NoStage = o.NoStage
	if o.SSHTimeout < 0 {
		return j, usagef("--ssh-timeout %v: must be positive", o.SSHTimeout)
	}
	if o.SSHConfig != "" {
		if _, err := os.Stat(o.SSHConfig); err != nil {
			return j, usagef("--ssh-config %q: %v", o.SSHConfig, err)
		}
	}
	if o.SSHKey != "" {
		if _, err := os.Stat(o.SSHKey); err != nil {
			return j, usagef("--ssh-key %q: %v", o.SSHKey, err)
		}
	}
	j.HostTimeout = 4 * time.Second
	if o.HostTimeout != 0 {
		if o.HostTimeout < 400*time.Millisecond {
			return j, usagef("--host-timeout %v: must be at least 400ms", o.HostTimeout)
		}
		j.HostTimeout = o.HostTimeout
	}
	// Inside a Slurm allocation srun starts the proxies, through slurmd's
	// own tree; jiarun makes no tree of its own unless asked to.
	j.Fanout = DefaultFanout
	if slurmAgent {
		j.Fanout = 0
	}
	if o.FanoutSet {
		if o.Fanout < 0 {
			return j, usagef("--fanout %d: want 0 (jiarun starts every proxy itself) or a number of proxies per proxy, such as %d", o.Fanout, DefaultFanout)
		}
		j.Fanout = o.Fanout
	}
	j.SSH = &sshc.Config{ConfigFile: o.SSHConfig, IdentityFile: o.SSHKey, AcceptNew: o.SSHAcceptNew,
		Timeout: o.SSHTimeout, KeepaliveInterval: j.HostTimeout / 4, KeepaliveCountMax: 3, Logf: func(format string, a ...any) {
			fmt.Fprintf(os.Stderr, "jiarun: "+format+"\n", a...)
		}}
	j.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.Log.Level.SlogLevel()})).With("who", "jiarun")
	return j, nil
}
