package config

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// DefaultFile is the file [Resolve] reads, in the working directory, when no
// file is named explicitly.
const DefaultFile = "jia.toml"

// DataSource is the name [Decode] gives its text in error messages.
const DataSource = "config data"

// Error is one problem found in a configuration. Functions that find
// several return them joined with [errors.Join], one per line, sorted by
// line; use [errors.As] to inspect the first.
type Error struct {
	File string // file the problem is in ([DataSource] for Decode); "" if none
	Line int    // line in File, from 1; 0 if unknown
	Var  string // environment variable the problem is in; "" if none
	Key  string // dotted key ("dsm.prefetch_pages"); "" if not about one key
	Msg  string // what is wrong; names the key when File is set or none of File and Var is
}

// Error formats e as "FILE:LINE: MSG", "FILE: MSG",
// "environment variable VAR: MSG" or "config: MSG".
func (e *Error) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	case e.File != "":
		return e.File + ": " + e.Msg
	case e.Var != "":
		return "environment variable " + e.Var + ": " + e.Msg
	}
	return "config: " + e.Msg
}

// joinErrors returns nil, the only error, or all of them joined, sorted by
// line (errors without a line last).
func joinErrors(errs []*Error) error {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Var, b.Var))
	})
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	es := make([]error, len(errs))
	for i, e := range errs {
		es[i] = e
	}
	return errors.Join(es...)
}

// Load reads the TOML file at path over the defaults. A syntax error is
// reported as "PATH:LINE: message"; unknown keys, values of the wrong type and
// invalid values as "PATH:LINE: key: message", all of them at once.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return parse(path, string(data), Default())
}

// Decode reads a configuration written by [Config.Encode] (or any
// configuration text) over the defaults. Errors name the source
// [DataSource].
func Decode(text string) (Config, error) {
	return parse(DataSource, text, Default())
}

func parse(src, text string, base Config) (Config, error) {
	var doc map[string]any
	if _, err := toml.Decode(text, &doc); err != nil {
		if pe, ok := errors.AsType[toml.ParseError](err); ok {
			return Config{}, &Error{File: src, Line: ErrorLine(text, pe), Msg: pe.Message}
		}
		return Config{}, fmt.Errorf("%s: %w", src, err)
	}
	lines := ScanKeyLines(text)
	c := base
	var errs []*Error
	fail := func(key, format string, args ...any) {
		errs = append(errs, &Error{File: src, Line: lines.Line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	for name, v := range doc {
		key := toml.Key{name}.String()
		sec := findSection(name)
		if sec == nil {
			fail(key, "unknown key %q%s", key, suggestKey(key))
			continue
		}
		table, ok := v.(map[string]any)
		if !ok {
			fail(key, "%s: expected a table ([%s]), found %s", key, name, describe(v))
			continue
		}
		for k, v := range table {
			key := toml.Key{name, k}.String()
			i := slices.IndexFunc(sec.fields, func(l *leaf) bool { return l.key == k })
			if i < 0 {
				fail(key, "unknown key %q%s", key, suggestKey(key))
				continue
			}
			l := sec.fields[i]
			if err := l.setTOML(&c, v); err != nil {
				fail(key, "%s: %v", key, err)
			}
		}
	}
	for _, p := range c.problems() {
		fail(p.leaf.path, "%s: %s", p.leaf.path, p.msg)
	}
	if err := joinErrors(errs); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate checks every value: the named values among those allowed, sizes,
// counts and durations not negative, and those that must be positive above
// zero. All problems are reported, as *[Error] values naming the key.
func (c Config) Validate() error {
	var errs []*Error
	for _, p := range c.problems() {
		errs = append(errs, &Error{Key: p.leaf.path, Msg: p.leaf.path + ": " + p.msg})
	}
	return joinErrors(errs)
}

// Encode writes c as TOML text with every key, which [Decode] reads back
// into a Config equal to c. The launcher passes the resolved configuration to
// the ranks this way. An invalid c is an error.
func (c Config) Encode() (string, error) {
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("encoding an invalid configuration: %w", err)
	}
	var b strings.Builder
	for i, s := range schema() {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "[%s]\n", s.name)
		for _, l := range s.fields {
			fmt.Fprintf(&b, "%s = %s\n", l.key, formatValue(l, l.field(&c)))
		}
	}
	return b.String(), nil
}

// Set sets the key ("dsm.prefetch_pages") to value written as in an
// environment variable; the command line uses it for flags. On error c is
// unchanged.
func (c *Config) Set(key, value string) error {
	l := findLeaf(key)
	if l == nil {
		return &Error{Key: key, Msg: fmt.Sprintf("unknown key %q%s", key, suggestKey(key))}
	}
	nc := *c
	if err := l.setString(&nc, value); err != nil {
		return &Error{Key: key, Msg: key + ": " + err.Error()}
	}
	for _, p := range nc.problems() {
		if p.leaf == l {
			return &Error{Key: key, Msg: key + ": " + p.msg}
		}
	}
	*c = nc
	return nil
}

// Resolve finds a job's configuration: the defaults, overlaid by a file,
// overlaid by the environment (see [Config.ApplyEnv]). If explicit, the file
// is path and must exist (jiarun --config FILE); otherwise it is path, or
// [DefaultFile] if path is empty, when that file exists. getenv is
// [os.Getenv] when nil. Resolve returns the configuration and the file
// read, "" if none. Flags are applied by the caller, then [Config.Validate].
func Resolve(path string, explicit bool, getenv func(string) string) (Config, string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	c := Default()
	file := ""
	switch {
	case explicit && path == "":
		return Config{}, "", errors.New("config: no configuration file named")
	case explicit:
		file = path
	default:
		if path == "" {
			path = DefaultFile
		}
		if _, err := os.Stat(path); err == nil {
			file = path
		} else if !errors.Is(err, fs.ErrNotExist) {
			return Config{}, "", fmt.Errorf("config: %w", err)
		}
	}
	if file != "" {
		var err error
		if c, err = Load(file); err != nil {
			return Config{}, file, err
		}
	}
	if err := c.ApplyEnv(getenv); err != nil {
		return Config{}, file, err
	}
	return c, file, nil
}

// suggestKey returns ` (did you mean "x"?)` for the known key nearest to an
// unknown one, or "".
func suggestKey(key string) string {
	var names []string
	last := key[strings.LastIndexByte(key, '.')+1:]
	for _, s := range schema() {
		names = append(names, s.name)
		for _, l := range s.fields {
			names = append(names, l.path)
			if l.key == last && key != l.path {
				// The right key in the wrong section.
				return fmt.Sprintf(" (did you mean %q?)", l.path)
			}
		}
	}
	if best := nearest(key, names); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

// nearest returns the name closest to s in edit distance if it is close
// enough to be a likely typo, else "".
func nearest(s string, names []string) string {
	best, bestD := "", min(max(len(s)/3+1, 2), 4)
	for _, n := range names {
		if d := editDistance(strings.ToLower(s), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent bytes.
func editDistance(a, b string) int {
	pp := make([]int, len(b)+1) // row i-2
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], pp[j-2]+1)
			}
		}
		pp, prev, cur = prev, cur, pp
	}
	return prev[len(b)]
}
