package sshc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kevinburke/ssh_config"
)

// Defaults used when neither Config nor ssh_config says otherwise.
const (
	DefaultTimeout           = 10 * time.Second // TCP connect + SSH handshake, per hop
	DefaultKeepaliveInterval = time.Second
	DefaultKeepaliveCountMax = 3
)

// maxJumps bounds ProxyJump chains (and catches loops in the config).
const maxJumps = 8

// Config says how to reach hosts. The zero value behaves like OpenSSH's ssh
// with no options: ~/.ssh/config, then /etc/ssh/ssh_config, ssh-agent, the
// default keys, ~/.ssh/known_hosts with strict checking. Fields that are set
// override the ssh_config files, as ssh's command-line options do.
type Config struct {
	// ConfigFile is the only ssh_config file read when set (ssh -F FILE);
	// "none" reads no file.
	ConfigFile string

	// User and Port override the destination's User and Port (ssh -l, -p).
	// They do not apply to ProxyJump hosts.
	User string
	Port int

	// IdentityFile, when set, is the key file tried (after the agent's keys)
	// for every host, jump hosts included, instead of the IdentityFile lines
	// of ssh_config or the default keys (jiarun --ssh-key).
	IdentityFile string

	// KnownHostsFiles, when set, are the only known_hosts files consulted,
	// for every host, instead of UserKnownHostsFile/GlobalKnownHostsFile.
	// New keys (AcceptNew) are added to the first one.
	KnownHostsFiles []string

	// AcceptNew adds the key of a host that is not in known_hosts yet to the
	// first known_hosts file and connects (StrictHostKeyChecking=accept-new).
	// A changed key is refused all the same. ssh_config's
	// "StrictHostKeyChecking accept-new" (or "no") enables it per host.
	AcceptNew bool

	// AgentSocket is the ssh-agent socket; empty means $SSH_AUTH_SOCK and
	// "none" uses no agent.
	AgentSocket string

	// Timeout bounds the TCP connect and the whole SSH handshake (banner, key
	// exchange, host key check, authentication) of each hop. Zero means
	// ssh_config's ConnectTimeout, else DefaultTimeout.
	Timeout time.Duration

	// KeepaliveInterval is how often a keepalive@openssh.com request is sent
	// on an established connection; zero means DefaultKeepaliveInterval,
	// negative sends none. KeepaliveCountMax is how many consecutive
	// intervals may pass without an answer before the connection is declared
	// dead and closed; zero means DefaultKeepaliveCountMax. A cut link is
	// thus noticed within about (KeepaliveCountMax+1) × KeepaliveInterval.
	KeepaliveInterval time.Duration
	KeepaliveCountMax int

	// HomeDir is the local home directory for "~" and the default files;
	// empty means the current user's.
	HomeDir string

	// Logf, when set, receives notices a user should see, such as a host
	// key added to known_hosts.
	Logf func(format string, args ...any)

	// Authority, when set, takes the login decisions (which host keys to
	// trust, which keys to offer) in place of this machine's known_hosts
	// files, ssh-agent and key files. See [Authority].
	Authority Authority
}

// Target is a host resolved through the configuration: where to connect,
// as whom, with which keys, and through which jump hosts.
type Target struct {
	Alias    string // the name as given, e.g. "jh1"
	HostName string // the address or DNS name to connect to
	Port     int
	User     string

	// IdentityFiles are the key files to try after the agent's keys, "~"
	// and %-tokens expanded. IdentitiesExplicit says they were asked for
	// (a missing one is an error) rather than OpenSSH's defaults.
	IdentityFiles      []string
	IdentitiesExplicit bool
	IdentitiesOnly     bool // use only agent keys that match IdentityFiles

	KnownHostsFiles []string // consulted in order; new keys go to the first
	HostKeyAlias    string   // name to look up in known_hosts instead of HostName
	AcceptNew       bool
	HashKnownHosts  bool          // write learnt names hashed (ssh_config HashKnownHosts)
	ConnectTimeout  time.Duration // from ssh_config; 0 when not set

	// Jumps are the ProxyJump hosts in connection order: Jumps[0] is
	// dialled directly, each next one through the previous.
	Jumps []*Target
}

// Addr is HostName:Port.
func (t *Target) Addr() string { return net.JoinHostPort(t.HostName, strconv.Itoa(t.Port)) }

// KnownHostsName is the name under which the host's key is recorded in
// known_hosts: HostKeyAlias or HostName, as "[name]:port" for ports other
// than 22.
func (t *Target) KnownHostsName() string {
	name := t.HostName
	if t.HostKeyAlias != "" {
		name = t.HostKeyAlias
	}
	if t.Port == 22 {
		return name
	}
	return "[" + name + "]:" + strconv.Itoa(t.Port)
}

// String is "alias (user@host:port)", or "user@host:port" when the alias is the host.
func (t *Target) String() string {
	s := t.User + "@" + t.Addr()
	if t.Alias != t.HostName {
		s = t.Alias + " (" + s + ")"
	}
	return s
}

// settings is a parsed ssh_config lookup: the files in precedence order.
type settings struct {
	files []*ssh_config.Config
	home  string
}

func (c *Config) home() (string, error) {
	if c.HomeDir != "" {
		return c.HomeDir, nil
	}
	if h, err := os.UserHomeDir(); err == nil {
		return h, nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("cannot find the home directory: %w", err)
	}
	return u.HomeDir, nil
}

// load reads the ssh_config files this Config names.
func (c *Config) load() (*settings, error) {
	home, err := c.home()
	if err != nil {
		return nil, err
	}
	s := &settings{home: home}
	var paths []string
	var required bool
	switch c.ConfigFile {
	case "none":
	case "":
		paths = []string{filepath.Join(home, ".ssh", "config"), "/etc/ssh/ssh_config"}
	default:
		paths, required = []string{expandTilde(c.ConfigFile, home)}, true
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			if !required && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("ssh config: %w", err)
		}
		cfg, err := ssh_config.Decode(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("ssh config %s: %w", p, err)
		}
		s.files = append(s.files, cfg)
	}
	return s, nil
}

// get returns the first value of key for alias, as OpenSSH does: the first
// file, and within it the first matching Host block, that sets it wins.
func (s *settings) get(alias, key string) (string, error) {
	for _, f := range s.files {
		v, err := f.Get(alias, key)
		if err != nil {
			return "", fmt.Errorf("ssh config: %s for %s: %w", key, alias, err)
		}
		if v != "" {
			return v, nil
		}
	}
	return "", nil
}

// getAll returns every value of key for alias (IdentityFile accumulates).
func (s *settings) getAll(alias, key string) ([]string, error) {
	var all []string
	for _, f := range s.files {
		v, err := f.GetAll(alias, key)
		if err != nil {
			return nil, fmt.Errorf("ssh config: %s for %s: %w", key, alias, err)
		}
		all = append(all, v...)
	}
	return all, nil
}

// Resolve works out how to reach host, which is an ssh_config alias or an
// address, optionally as [user@]host[:port] (IPv6 addresses in brackets).
func (c *Config) Resolve(host string) (*Target, error) {
	s, err := c.load()
	if err != nil {
		return nil, err
	}
	return c.resolve(s, host, true, 0)
}

func (c *Config) resolve(s *settings, spec string, dest bool, depth int) (*Target, error) {
	if depth > maxJumps {
		return nil, fmt.Errorf("ssh config: more than %d ProxyJump hops (a loop?)", maxJumps)
	}
	specUser, alias, specPort, err := splitSpec(spec)
	if err != nil {
		return nil, err
	}
	t := &Target{Alias: alias}
	get := func(key string) string {
		if err != nil {
			return ""
		}
		var v string
		v, err = s.get(alias, key)
		return v
	}

	// HostName may use %h (the alias).
	t.HostName = alias
	if hn := get("HostName"); hn != "" {
		t.HostName = strings.ReplaceAll(strings.ReplaceAll(hn, "%h", alias), "%%", "%")
	}

	t.Port = 22
	if p := get("Port"); p != "" {
		if t.Port, err = parsePort(p); err != nil {
			return nil, fmt.Errorf("ssh config: host %s: Port %q: %w", alias, p, err)
		}
	}
	if specPort != 0 {
		t.Port = specPort
	}

	localUser := currentUser()
	t.User = get("User")
	if specUser != "" {
		t.User = specUser
	}
	if dest && c.User != "" {
		t.User = c.User
	}
	if dest && c.Port != 0 {
		t.Port = c.Port
	}
	if t.User == "" {
		t.User = localUser
	}

	t.HostKeyAlias = get("HostKeyAlias")
	t.IdentitiesOnly = strings.EqualFold(get("IdentitiesOnly"), "yes")
	t.HashKnownHosts = strings.EqualFold(get("HashKnownHosts"), "yes")
	switch strings.ToLower(get("StrictHostKeyChecking")) {
	case "accept-new", "no", "off":
		t.AcceptNew = true
	}
	t.AcceptNew = t.AcceptNew || c.AcceptNew
	if ct := get("ConnectTimeout"); ct != "" {
		secs, perr := strconv.Atoi(ct)
		if perr != nil || secs < 0 {
			return nil, fmt.Errorf("ssh config: host %s: ConnectTimeout %q: want seconds", alias, ct)
		}
		t.ConnectTimeout = time.Duration(secs) * time.Second
	}
	if pc := get("ProxyCommand"); pc != "" && !strings.EqualFold(pc, "none") {
		return nil, fmt.Errorf("ssh config: host %s: ProxyCommand is not supported (use ProxyJump)", alias)
	}
	jump := get("ProxyJump")
	userKH := get("UserKnownHostsFile")
	globalKH := get("GlobalKnownHostsFile")
	if err != nil {
		return nil, err
	}

	tokens := strings.NewReplacer("%%", "%", "%d", s.home, "%u", localUser, "%h", t.HostName,
		"%r", t.User, "%p", strconv.Itoa(t.Port), "%n", alias)
	expand := func(p string) string { return expandTilde(tokens.Replace(p), s.home) }

	// Keys: --ssh-key, else IdentityFile lines, else OpenSSH's defaults.
	switch ids, gerr := s.getAll(alias, "IdentityFile"); {
	case gerr != nil:
		return nil, gerr
	case c.IdentityFile != "":
		t.IdentityFiles, t.IdentitiesExplicit = []string{expand(c.IdentityFile)}, true
	case len(ids) > 0:
		for _, id := range ids {
			if !strings.EqualFold(id, "none") {
				t.IdentityFiles = append(t.IdentityFiles, expand(id))
			}
		}
		t.IdentitiesExplicit = true
	default:
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			t.IdentityFiles = append(t.IdentityFiles, filepath.Join(s.home, ".ssh", n))
		}
	}

	// known_hosts: Config.KnownHostsFiles, else the user's files, then the
	// global ones. Both settings take several space-separated names.
	if len(c.KnownHostsFiles) > 0 {
		for _, f := range c.KnownHostsFiles {
			t.KnownHostsFiles = append(t.KnownHostsFiles, expand(f))
		}
	} else {
		if userKH == "" {
			userKH = "~/.ssh/known_hosts ~/.ssh/known_hosts2"
		}
		if globalKH == "" {
			globalKH = "/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2"
		}
		for _, f := range strings.Fields(userKH + " " + globalKH) {
			if !strings.EqualFold(f, "none") && f != "/dev/null" {
				t.KnownHostsFiles = append(t.KnownHostsFiles, expand(f))
			}
		}
	}

	// ProxyJump host1,host2: the first hop's own ProxyJump applies (it is
	// dialled as a destination would be); later hops are reached through it.
	if jump != "" && !strings.EqualFold(jump, "none") {
		for i, hop := range strings.Split(jump, ",") {
			hop = strings.TrimSpace(hop)
			if strings.Contains(hop, "://") {
				hop = strings.TrimPrefix(hop, "ssh://")
			}
			ht, err := c.resolve(s, hop, false, depth+1)
			if err != nil {
				return nil, fmt.Errorf("ProxyJump %s: %w", hop, err)
			}
			if i == 0 {
				t.Jumps = append(t.Jumps, ht.Jumps...)
			}
			ht.Jumps = nil
			t.Jumps = append(t.Jumps, ht)
		}
		if len(t.Jumps) > maxJumps {
			return nil, fmt.Errorf("ssh config: host %s: more than %d ProxyJump hops", alias, maxJumps)
		}
	}
	return t, nil
}

// splitSpec splits [user@]host[:port]; IPv6 literals need brackets when a
// port is given ("[::1]:2222"), and a bare "::1" is taken as a host.
func splitSpec(spec string) (user, host string, port int, err error) {
	if i := strings.LastIndexByte(spec, '@'); i >= 0 {
		user, spec = spec[:i], spec[i+1:]
	}
	host = spec
	if h, p, serr := net.SplitHostPort(spec); serr == nil {
		host = h
		if port, err = parsePort(p); err != nil {
			return "", "", 0, fmt.Errorf("host %q: port %q: %w", spec, p, err)
		}
	} else if strings.HasPrefix(spec, "[") && strings.HasSuffix(spec, "]") {
		host = spec[1 : len(spec)-1]
	}
	if host == "" {
		return "", "", 0, fmt.Errorf("empty host name in %q", spec)
	}
	return user, host, port, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, errors.New("want 1..65535")
	}
	return p, nil
}

func expandTilde(p, home string) string {
	if p == "~" {
		return home
	}
	if strings.HasPrefix(p, "~/") {
		return filepath.Join(home, p[2:])
	}
	return p
}

func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}
