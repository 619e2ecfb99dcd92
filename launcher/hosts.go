package launcher

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/BurntSushi/toml"

	"github.com/jiarun/jia/runtime/config"
)

// Host is one host of a host list and what jiarun needs to start ranks on
// it.
type Host struct {
	// Name is the host's name or address, as given to ssh.
	Name string
	// Slots is how many ranks the host takes before it is oversubscribed;
	// at least 1.
	Slots int
	// User is the login name on the host; "" means ssh's choice.
	User string
	// Port is the ssh port; 0 means ssh's choice (22).
	Port int
	// Env holds variables set for the ranks on this host, after the job's
	// own (hosts.toml [defaults] env merged with the host's env).
	Env map[string]string
	// WorkDir is the ranks' working directory on the host; "" means
	// jiarun's working directory (or --wdir).
	WorkDir string
	// Source tells where the host was defined, "FILE:LINE" or "-H", for
	// messages.
	Source string
}

// HostList is an ordered list of hosts; ranks fill it in order (see
// [MapRanks]).
type HostList []Host

// TotalSlots returns the sum of the hosts' slots.
func (hl HostList) TotalSlots() int {
	n := 0
	for _, h := range hl {
		n += h.Slots
	}
	return n
}

// HostFile is a parsed host file: its hosts and, for a hosts.toml, its
// groups.
type HostFile struct {
	// Path is the file's name as given.
	Path string
	// Hosts are the hosts in the order of the file.
	Hosts HostList
	// Groups maps each group of a hosts.toml's [groups] table to the names
	// of its hosts, in the group's order without repeats; every name is one
	// of Hosts. Nil for an MPI-style hostfile.
	Groups map[string][]string
}

// Group returns the hosts of the named group, in the group's order.
func (f *HostFile) Group(name string) (HostList, error) {
	names, ok := f.Groups[name]
	if !ok {
		return nil, fmt.Errorf("%s: no group %q", f.Path, name)
	}
	hl := make(HostList, 0, len(names))
	for _, n := range names {
		i := slices.IndexFunc(f.Hosts, func(h Host) bool { return h.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("%s: group %q: unknown host %q", f.Path, name, n)
		}
		hl = append(hl, f.Hosts[i])
	}
	return hl, nil
}

// LoadHostfile reads a host file: a hosts.toml when the name ends in .toml
// or the content is TOML with [[host]] tables (see [ParseHostsTOML]), an
// MPI-style hostfile otherwise (see [ParseHostfile]).
func LoadHostfile(path string) (*HostFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hostfile: %w", err)
	}
	if strings.HasSuffix(strings.ToLower(path), ".toml") || hostsLooksLikeTOML(data) {
		return ParseHostsTOML(path, data)
	}
	hosts, err := ParseHostfile(path, data)
	if err != nil {
		return nil, err
	}
	return &HostFile{Path: path, Hosts: hosts}, nil
}

func hostsLooksLikeTOML(data []byte) bool {
	var doc map[string]any
	if _, err := toml.Decode(string(data), &doc); err != nil {
		return false
	}
	switch doc["host"].(type) {
	case []map[string]any, []any:
		return true
	}
	return false
}

// hostsErrors collects the problems of a host file, each with its line.
type hostsErrors struct {
	file string
	errs []hostsLineError
}

type hostsLineError struct {
	line int
	msg  string
}

func (e *hostsErrors) add(line int, format string, args ...any) {
	e.errs = append(e.errs, hostsLineError{line, fmt.Sprintf(format, args...)})
}

// err returns the problems sorted by line, one per line, as
// "FILE:LINE: message" (or "FILE: message" without a line).
func (e *hostsErrors) err() error {
	if len(e.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(e.errs, func(a, b hostsLineError) int { return cmp.Compare(a.line, b.line) })
	errs := make([]error, len(e.errs))
	for i, le := range e.errs {
		if le.line > 0 {
			errs[i] = fmt.Errorf("%s:%d: %s", e.file, le.line, le.msg)
		} else {
			errs[i] = fmt.Errorf("%s: %s", e.file, le.msg)
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// hostsMaxSlots bounds a host's slots, against typos of a few digits too
// many.
const hostsMaxSlots = 1 << 20

// hostsTOMLKeys are the keys of [defaults] and of each [[host]].
var hostsTOMLKeys = []string{"name", "slots", "user", "port", "workdir", "env"}

// ParseHostsTOML parses a hosts.toml; name is the file's name for Source
// fields and messages. The format:
//
//	[defaults]        # applied to every host unless overridden
//	slots = 2         # ranks per host before oversubscription; default 1
//	user = "alice"    # ssh login; default ssh's choice
//	port = 22         # ssh port; default ssh's choice
//	workdir = "/scratch/alice"
//	env = { OMP_NUM_THREADS = "1" }
//
//	[[host]]          # one table per host, in rank order
//	name = "node01"   # required, unique
//	slots = 4
//
//	[[host]]
//	name = "node02"
//	env = { FOO = "bar" }   # merged over [defaults] env
//
//	[groups]          # named sets of hosts
//	rack1 = ["node01", "node02"]
//
// Every problem is reported, one per line, as "FILE:LINE: message": syntax
// errors, unknown keys, values of the wrong type, a host without a name, a
// duplicate host, slots below 1, a port outside 1–65535, a group naming an
// unknown host, and a file without hosts.
func ParseHostsTOML(name string, data []byte) (*HostFile, error) {
	text := string(data)
	var doc map[string]any
	if _, err := toml.Decode(text, &doc); err != nil {
		if pe, ok := errors.AsType[toml.ParseError](err); ok {
			return nil, fmt.Errorf("%s:%d: %s", name, config.ErrorLine(text, pe), pe.Message)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	lines := config.ScanKeyLines(text)
	p := &hostsTOMLParser{lines: lines, errs: &hostsErrors{file: name}}
	f := &HostFile{Path: name}

	var defaults Host
	if v, ok := doc["defaults"]; ok {
		t, ok := v.(map[string]any)
		if !ok {
			p.errs.add(lines.Line("defaults"), "defaults: expected a table ([defaults]), found %s", hostsDescribe(v))
		} else {
			p.host(&defaults, t, "defaults", "defaults")
		}
	}
	if defaults.Slots == 0 {
		defaults.Slots = 1
	}

	var elems []map[string]any
	switch v := doc["host"].(type) {
	case nil:
	case []map[string]any:
		elems = v
	case []any:
		for i, e := range v {
			t, ok := e.(map[string]any)
			if !ok {
				p.errs.add(lines.Line(fmt.Sprintf("host[%d]", i)), "host: expected tables ([[host]]), found %s", hostsDescribe(e))
				continue
			}
			elems = append(elems, t)
		}
	case map[string]any:
		p.errs.add(lines.Line("host"), "host: expected [[host]] tables, found a table (write [[host]], not [host])")
	default:
		p.errs.add(lines.Line("host"), "host: expected [[host]] tables, found %s", hostsDescribe(v))
	}
	firstLine := map[string]int{}
	for i, t := range elems {
		at := fmt.Sprintf("host[%d]", i)
		h := defaults
		h.Env = nil
		label := fmt.Sprintf("host #%d", i+1)
		if n, ok := t["name"].(string); ok && n != "" {
			label = fmt.Sprintf("host %q", n)
		}
		p.host(&h, t, at, label)
		h.Env = hostsMergeEnv(defaults.Env, h.Env)
		h.Source = fmt.Sprintf("%s:%d", name, lines.Line(at))
		nameLine := lines.Line(at + ".name")
		switch _, has := t["name"]; {
		case !has:
			p.errs.add(lines.Line(at), "host #%d has no name", i+1)
			continue
		case h.Name == "":
			continue // reported by p.host
		}
		if first, dup := firstLine[h.Name]; dup {
			p.errs.add(nameLine, "duplicate host %q (first defined at line %d)", h.Name, first)
			continue
		}
		firstLine[h.Name] = nameLine
		f.Hosts = append(f.Hosts, h)
	}

	if v, ok := doc["groups"]; ok {
		t, ok := v.(map[string]any)
		if !ok {
			p.errs.add(lines.Line("groups"), "groups: expected a table ([groups]), found %s", hostsDescribe(v))
		} else {
			f.Groups = map[string][]string{}
			for g, members := range t {
				key := toml.Key{"groups", g}.String()
				list, ok := members.([]any)
				if !ok {
					p.errs.add(lines.Line(key), "group %q: expected an array of host names, found %s", g, hostsDescribe(members))
					continue
				}
				var names []string
				for _, m := range list {
					n, ok := m.(string)
					switch {
					case !ok:
						p.errs.add(lines.Line(key), "group %q: expected host names, found %s", g, hostsDescribe(m))
					case !hostsKnown(firstLine, n):
						p.errs.add(lines.Line(key), "group %q: unknown host %q", g, n)
					case !slices.Contains(names, n):
						names = append(names, n)
					}
				}
				f.Groups[g] = names
			}
		}
	}

	for k := range doc {
		if k != "defaults" && k != "host" && k != "groups" {
			key := toml.Key{k}.String()
			p.errs.add(lines.Line(key), "unknown key %q (allowed: [defaults], [[host]], [groups])", key)
		}
	}
	if len(elems) == 0 && len(p.errs.errs) == 0 {
		p.errs.add(0, "no hosts defined (add a [[host]] table for each host)")
	}
	if err := p.errs.err(); err != nil {
		return nil, err
	}
	return f, nil
}

func hostsKnown(names map[string]int, n string) bool {
	_, ok := names[n]
	return ok
}

type hostsTOMLParser struct {
	lines config.KeyLines
	errs  *hostsErrors
}

// host reads the keys of a [defaults] table (at = "defaults") or of a
// [[host]] element (at = "host[i]") into h; label names it in messages.
func (p *hostsTOMLParser) host(h *Host, t map[string]any, at, label string) {
	section, _, _ := strings.Cut(at, "[")
	for k, v := range t {
		key := toml.Key{k}.String()
		line := p.lines.Line(at + "." + key)
		bad := func(what string) {
			p.errs.add(line, "%s: %s: expected %s, found %s", label, k, what, hostsDescribe(v))
		}
		switch k {
		case "name":
			if at == "defaults" {
				p.errs.add(line, "unknown key %q (a name belongs in a [[host]] table)", section+"."+key)
				continue
			}
			s, ok := v.(string)
			if !ok {
				bad("a host name")
				continue
			}
			if err := hostsCheckName(s); err != nil {
				p.errs.add(line, "%s: %v", label, err)
				continue
			}
			h.Name = s
		case "slots":
			n, ok := v.(int64)
			if !ok {
				bad("an integer")
				continue
			}
			switch {
			case n < 1:
				p.errs.add(line, "%s: slots must be at least 1", label)
				continue
			case n > hostsMaxSlots:
				p.errs.add(line, "%s: slots must be at most %d", label, hostsMaxSlots)
				continue
			}
			h.Slots = int(n)
		case "user":
			s, ok := v.(string)
			if !ok {
				bad("a user name")
				continue
			}
			if err := hostsCheckUser(s); err != nil {
				p.errs.add(line, "%s: %v", label, err)
				continue
			}
			h.User = s
		case "port":
			n, ok := v.(int64)
			if !ok {
				bad("an integer")
				continue
			}
			if n < 1 || n > 65535 {
				p.errs.add(line, "%s: port %d is not between 1 and 65535", label, n)
				continue
			}
			h.Port = int(n)
		case "workdir":
			s, ok := v.(string)
			if !ok {
				bad("a directory")
				continue
			}
			h.WorkDir = s
		case "env":
			env, ok := v.(map[string]any)
			if !ok {
				bad(`a table of variables (env = { NAME = "value" })`)
				continue
			}
			h.Env = map[string]string{}
			for name, val := range env {
				eline := p.lines.Line(at + ".env." + toml.Key{name}.String())
				if !hostsValidEnvName(name) {
					p.errs.add(eline, "%s: env: %q is not a valid variable name", label, name)
					continue
				}
				switch val := val.(type) {
				case string:
					h.Env[name] = val
				case int64, float64, bool:
					h.Env[name] = fmt.Sprint(val)
				default:
					p.errs.add(eline, "%s: env.%s: expected a string, found %s", label, name, hostsDescribe(val))
				}
			}
		default:
			p.errs.add(line, "unknown key %q (allowed: %s)", section+"."+key, strings.Join(hostsTOMLKeys, ", "))
		}
	}
}

func hostsMergeEnv(base, over map[string]string) map[string]string {
	if len(base) == 0 && len(over) == 0 {
		return nil
	}
	env := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		env[k] = v
	}
	for k, v := range over {
		env[k] = v
	}
	return env
}

func hostsDescribe(v any) string { return config.DescribeTOML(v) }

// hostsCheckName accepts host names and IPv4 and IPv6 addresses (an IPv6
// zone too). It refuses anything ssh could take for an option or that
// could not be a host.
func hostsCheckName(s string) error {
	if s == "" {
		return errors.New("empty host name")
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return nil
	}
	if len(s) > 253 || s[0] == '-' || s[0] == '.' {
		return fmt.Errorf("%q is not a valid host name", s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return fmt.Errorf("%q is not a valid host name", s)
		}
	}
	return nil
}

func hostsCheckUser(s string) error {
	if s == "" || s[0] == '-' {
		return fmt.Errorf("%q is not a valid user name", s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' || r == '$') {
			return fmt.Errorf("%q is not a valid user name", s)
		}
	}
	return nil
}

func hostsValidEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// hostsToken is a host as written in an MPI-style hostfile line or a -H
// element: [user@]name[:slots], with an IPv6 address in brackets when a
// slot count follows ("[fe80::1]:4").
type hostsToken struct {
	user, name string
	slots      int // 0 when not given
}

func hostsParseToken(s string) (hostsToken, error) {
	var t hostsToken
	if u, rest, ok := strings.Cut(s, "@"); ok {
		if err := hostsCheckUser(u); err != nil {
			return t, err
		}
		t.user, s = u, rest
	}
	name, count, hasCount := s, "", false
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return t, fmt.Errorf("%q: missing ]", s)
		}
		name = s[1:end]
		if rest := s[end+1:]; rest != "" {
			c, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return t, fmt.Errorf("%q: unexpected %q after ]", s, rest)
			}
			count, hasCount = c, true
		}
		if _, err := netip.ParseAddr(name); err != nil {
			return t, fmt.Errorf("%q is not an IPv6 address", name)
		}
	case strings.Count(s, ":") == 1:
		name, count, hasCount = strings.Cut(s, ":")
	}
	if err := hostsCheckName(name); err != nil {
		return t, err
	}
	t.name = name
	if hasCount {
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return t, fmt.Errorf("slot count %q is not a positive integer", count)
		}
		t.slots = n
	}
	return t, nil
}

// hostsAdd appends h to hl, or adds its slots to the host of the same name
// and user already there (a host listed twice, as Open MPI counts it).
func hostsAdd(hl HostList, h Host) HostList {
	for i := range hl {
		if hl[i].Name == h.Name && hl[i].User == h.User {
			hl[i].Slots += h.Slots
			return hl
		}
	}
	return append(hl, h)
}

// ParseHostfile parses an MPI-style hostfile (Open MPI, MPICH); name is the
// file's name for Source fields and messages. Each line names one host:
//
//	node01 slots=4        # Open MPI
//	node02:4              # MPICH
//	node03                # 1 slot
//	alice@node04 slots=2 max_slots=8
//	[fe80::1]:2
//
// "#" starts a comment and blank lines are skipped. count= is a synonym of
// slots=; max_slots= (or max-slots=) is checked and otherwise ignored, since
// oversubscription is allowed only by --oversubscribe. A host listed twice
// adds up its slots, as in Open MPI. Errors are "FILE:LINE: message".
func ParseHostfile(name string, data []byte) (HostList, error) {
	errs := &hostsErrors{file: name}
	var hl HostList
	for i, line := range strings.Split(string(data), "\n") {
		lineNo := i + 1
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		tok, err := hostsParseToken(fields[0])
		if err != nil {
			errs.add(lineNo, "%v", err)
			continue
		}
		slots, maxSlots := tok.slots, 0
		ok := true
		for _, attr := range fields[1:] {
			k, v, found := strings.Cut(attr, "=")
			n, err := strconv.Atoi(v)
			switch k {
			case "slots", "count", "max_slots", "max-slots":
				if !found || err != nil || n < 1 {
					errs.add(lineNo, "host %q: %s: %q is not a positive integer", tok.name, k, v)
					ok = false
					continue
				}
			default:
				errs.add(lineNo, "host %q: unknown attribute %q (expected slots=N or max_slots=N)", tok.name, attr)
				ok = false
				continue
			}
			if k == "slots" || k == "count" {
				if slots != 0 {
					errs.add(lineNo, "host %q: slot count given twice", tok.name)
					ok = false
				}
				slots = n
			} else {
				maxSlots = n
			}
		}
		if !ok {
			continue
		}
		if slots == 0 {
			slots = 1
		}
		if maxSlots != 0 && maxSlots < slots {
			errs.add(lineNo, "host %q: max_slots=%d is below slots=%d", tok.name, maxSlots, slots)
			continue
		}
		hl = hostsAdd(hl, Host{Name: tok.name, User: tok.user, Slots: slots, Source: fmt.Sprintf("%s:%d", name, lineNo)})
	}
	if len(hl) == 0 && len(errs.errs) == 0 {
		errs.add(0, "no hosts listed")
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return hl, nil
}

// ParseHostSpec parses a -H list as Open MPI does: "a:2,b,c:3" is a with 2
// slots, b with 1 and c with 3. A host named twice adds up its slots
// ("a,a" is a with 2). Elements may be user@host and bracketed IPv6
// addresses ("[::1]:2"). Each host's Source is "-H". An error names the bad
// element.
func ParseHostSpec(spec string) (HostList, error) {
	var hl HostList
	for i, e := range strings.Split(spec, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, fmt.Errorf("host list %q: element %d is empty", spec, i+1)
		}
		tok, err := hostsParseToken(e)
		if err != nil {
			return nil, fmt.Errorf("bad element %q: %w", e, err)
		}
		hl = hostsAdd(hl, Host{Name: tok.name, User: tok.user, Slots: max(tok.slots, 1), Source: "-H"})
	}
	return hl, nil
}

// hostsLocalAddrs are this host's interface addresses, read once.
var hostsLocalAddrs = sync.OnceValue(func() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
})

// IsLocalHost reports whether name designates this host: "localhost", a
// loopback address (127.0.0.0/8, ::1), an address of one of this host's
// interfaces, or this host's name from os.Hostname. Names compare without
// case and trailing dot, and a short name matches a fully qualified one
// with the same first label ("node01" and "node01.cluster.example"). No
// DNS lookup is made.
func IsLocalHost(name string) bool {
	n := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(name), "."))
	if strings.HasPrefix(n, "[") && strings.HasSuffix(n, "]") {
		n = n[1 : len(n)-1]
	}
	if n == "" {
		return false
	}
	switch n {
	case "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback":
		return true
	}
	if a, err := netip.ParseAddr(n); err == nil {
		a = a.Unmap().WithZone("")
		return a.IsLoopback() || slices.Contains(hostsLocalAddrs(), a)
	}
	h, err := os.Hostname()
	if err != nil {
		return false
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if n == h {
		return true
	}
	nShort, _, nQualified := strings.Cut(n, ".")
	hShort, _, hQualified := strings.Cut(h, ".")
	return nShort == hShort && (!nQualified || !hQualified)
}

// Placement is where one rank runs.
type Placement struct {
	Rank      int // the rank, 0 ≤ Rank < np
	Host      int // index of its host in the host list
	LocalRank int // index of the rank among its host's ranks
	LocalSize int // number of ranks on its host
}

// MapRanks places np ranks on hosts by slot, as mpirun does by default: the
// first host's slots take ranks 0, 1, …, then the next host's, and so on.
// np above the total of slots is an error unless oversubscribe is set; then
// the slots are filled again, round after round, in the same order, until
// every rank has one, and each host's ranks are numbered consecutively so
// that neighbouring ranks share a host (as Open MPI's by-slot mapper does):
// with a:2,b:1 and 5 ranks, a runs ranks 0–3 and b ranks 4.
//
// source names the host list in the message for too many ranks ("-np 9
// exceeds the 8 slots of hosts.toml (use --oversubscribe to allow it)"); if
// empty, it is taken from the hosts' Source fields.
func MapRanks(hosts HostList, np int, oversubscribe bool, source string) ([]Placement, error) {
	if np < 1 {
		return nil, fmt.Errorf("-np %d: the number of ranks must be at least 1", np)
	}
	if len(hosts) == 0 {
		return nil, errors.New("no hosts to place ranks on")
	}
	for _, h := range hosts {
		if h.Slots < 1 {
			return nil, fmt.Errorf("host %q (%s): slots must be at least 1", h.Name, h.Source)
		}
	}
	total := hosts.TotalSlots()
	if np > total && !oversubscribe {
		if source == "" {
			source = hostsSourceName(hosts)
		}
		s := "s"
		if total == 1 {
			s = ""
		}
		return nil, fmt.Errorf("-np %d exceeds the %d slot%s of %s (use --oversubscribe to allow it)", np, total, s, source)
	}
	counts := make([]int, len(hosts))
	rounds, rest := np/total, np%total
	for i, h := range hosts {
		take := min(h.Slots, rest)
		counts[i] = rounds*h.Slots + take
		rest -= take
	}
	out := make([]Placement, 0, np)
	for i, n := range counts {
		for k := range n {
			out = append(out, Placement{Rank: len(out), Host: i, LocalRank: k, LocalSize: n})
		}
	}
	return out, nil
}

// hostsSourceName names the host list from its hosts' Source fields: the
// file they all come from, else "the host list".
func hostsSourceName(hosts HostList) string {
	name := ""
	for i, h := range hosts {
		src := h.Source
		if j := strings.LastIndexByte(src, ':'); j >= 0 {
			if _, err := strconv.Atoi(src[j+1:]); err == nil {
				src = src[:j]
			}
		}
		if i > 0 && src != name || src == "" {
			return "the host list"
		}
		name = src
	}
	return name
}
