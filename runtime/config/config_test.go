package config_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jiarun/jia/runtime/config"
)

// writeFile writes content to name in a new temporary directory and returns
// its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefault(t *testing.T) {
	c := config.Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"transport.kind", c.Transport.Kind, config.TransportAuto},
		{"transport.tcp_send_buffer", c.Transport.TCPSendBuffer, config.ByteSize(256 << 10)},
		{"comm.eager_limit", c.Comm.EagerLimit, config.ByteSize(0)},
		{"comm.rendezvous_read", c.Comm.RendezvousRead, true},
		{"comm.pack_vectors", c.Comm.PackVectors, false},
		{"comm.split_min", c.Comm.SplitMin, 128 * config.KiB},
		{"comm.ud_retransmit_timeout", c.Comm.UDRetransmitTimeout, 200 * time.Millisecond},
		{"dsm.max_alloc", c.DSM.MaxAlloc, 4 * config.GiB},
		{"dsm.home_migration", c.DSM.HomeMigration, false},
		{"dsm.write_detection", c.DSM.WriteDetection, config.WriteDetectionWP},
		{"dsm.stats", c.DSM.Stats, false},
		{"dsm.host_share", c.DSM.HostShare, true},
		{"log.level", c.Log.Level, config.LogWarn},
		{"log.format", c.Log.Format, config.LogText},
		{"launch.grace_period", c.Launch.GracePeriod, time.Second},
		{"launch.timeout", c.Launch.Timeout, time.Duration(0)},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("default %s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

// TestDocExampleIsDefault keeps the example file in the package manual
// honest: it must parse and set every key to its default.
func TestDocExampleIsDefault(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var example []string
	in := false
	for _, line := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(line, "//\t# jia.toml"):
			in = true
		case in && !strings.HasPrefix(line, "//\t") && line != "//":
			in = false
		}
		if in {
			example = append(example, strings.TrimPrefix(strings.TrimPrefix(line, "//"), "\t"))
		}
	}
	if len(example) < 10 {
		t.Fatalf("example jia.toml not found in doc.go (got %d lines)", len(example))
	}
	text := strings.Join(example, "\n")
	c, err := config.Decode(text)
	if err != nil {
		t.Fatalf("doc example: %v\n%s", err, text)
	}
	if c != config.Default() {
		t.Errorf("doc example = %+v, want the defaults %+v", c, config.Default())
	}
	enc, _ := config.Default().Encode()
	for _, line := range strings.Split(strings.TrimSpace(enc), "\n") {
		if line != "" && !strings.Contains(text, line) {
			t.Errorf("doc example lacks %q", line)
		}
	}
}

func TestLoad(t *testing.T) {
	path := writeFile(t, "jia.toml", `# a comment
[transport]
kind = "TCP"      # not case-sensitive

[comm]
eager_limit = "64KiB"
verbs_eager_limit = 8192
rendezvous_read = false
split_min = "256KiB"
ud_retransmit_timeout = "50ms"

[dsm]
max_alloc = "1.5G"
prefetch_pages = 8
write_detection = "twin"
stats = true

[launch]
grace_period = 2.5
timeout = "10m"
`)
	got, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.Transport.Kind = config.TransportTCP
	want.Comm.EagerLimit = 64 * config.KiB
	want.Comm.VerbsEagerLimit = 8 * config.KiB
	want.Comm.RendezvousRead = false
	want.Comm.SplitMin = 256 * config.KiB
	want.Comm.UDRetransmitTimeout = 50 * time.Millisecond
	want.DSM.MaxAlloc = 1536 * config.MiB
	want.DSM.PrefetchPages = 8
	want.DSM.WriteDetection = config.WriteDetectionTwin
	want.DSM.Stats = true
	want.Launch.GracePeriod = 2500 * time.Millisecond
	want.Launch.Timeout = 10 * time.Minute
	if got != want {
		t.Errorf("Load =\n%+v\nwant\n%+v", got, want)
	}
}

func TestLoadEmpty(t *testing.T) {
	got, err := config.Load(writeFile(t, "jia.toml", "# nothing set\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got != config.Default() {
		t.Errorf("empty file: %+v, want the defaults", got)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "nope.toml"))
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "nope.toml") {
		t.Errorf("Load(missing) = %v, want a not-exist error naming the file", err)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, file, want string
	}{
		{"syntax", "[dsm]\nstats = tru\n",
			`jia.toml:2: expected value but found "tru" instead`},
		{"syntax unclosed table", "[transport\nkind = \"tcp\"\n",
			`jia.toml:1: expected '.' or ']' to end table name, but got '\n' instead`},
		{"duplicate key", "[dsm]\nstats = true\nstats = false\n",
			`jia.toml:3: Key 'dsm.stats' has already been defined.`},
		{"unknown key", "[dsm]\nprefetch_pages = 2\n\n# comment\n[log]\nlevel = \"info\"\n[dsm.x]\n",
			`jia.toml:7: unknown key "dsm.x"`},
		{"unknown key typo", "[transport]\nkind = \"shm\"\n\n[dsm]\nstats = true\n\nprefech_pages = 4\n",
			`jia.toml:7: unknown key "dsm.prefech_pages" (did you mean "dsm.prefetch_pages"?)`},
		{"unknown key wrong section", "[comm]\nprefetch_pages = 4\n",
			`jia.toml:2: unknown key "comm.prefetch_pages" (did you mean "dsm.prefetch_pages"?)`},
		{"unknown section", "[lg]\nlevel = \"info\"\n",
			`jia.toml:1: unknown key "lg" (did you mean "log"?)`},
		{"unknown top-level key", "kind = \"tcp\"\n",
			`jia.toml:1: unknown key "kind" (did you mean "transport.kind"?)`},
		{"unknown dotted key", "dsm.prefetch_pages = 1\ndsm.pages = 3\n",
			`jia.toml:2: unknown key "dsm.pages"`},
		{"unknown key in inline table", "dsm = { stats = true,\n  bogus = 1 }\n",
			`jia.toml:2: unknown key "dsm.bogus"`},
		{"section not a table", "\ntransport = \"tcp\"\n",
			`jia.toml:2: transport: expected a table ([transport]), found string "tcp"`},
		{"enum", "[transport]\nkind = \"ib\"\n",
			`jia.toml:2: transport.kind: invalid value "ib" (allowed: auto, shm, tcp, verbs)`},
		{"enum type", "[transport]\nkind = 3\n",
			`jia.toml:2: transport.kind: expected one of "auto", "shm", "tcp", "verbs", found integer 3`},
		{"log level", "[log]\n\nlevel = \"verbose\"\n",
			`jia.toml:3: log.level: invalid value "verbose" (allowed: debug, info, warn, error)`},
		{"log format", "[log]\nformat = \"xml\"\n",
			`jia.toml:2: log.format: invalid value "xml" (allowed: text, json)`},
		{"write detection", "[dsm]\nwrite_detection = \"mprotect\"\n",
			`jia.toml:2: dsm.write_detection: invalid value "mprotect" (allowed: wp, twin)`},
		{"bool type", "[dsm]\nstats = \"yes\"\n",
			`jia.toml:2: dsm.stats: expected true or false, found string "yes"`},
		{"int type", "[dsm]\nprefetch_pages = 1.5\n",
			`jia.toml:2: dsm.prefetch_pages: expected an integer, found float 1.5`},
		{"int negative", "[dsm]\nprefetch_pages = -1\n",
			`jia.toml:2: dsm.prefetch_pages: must not be negative, found -1`},
		{"size negative", "[comm]\neager_limit = -4096\n",
			`jia.toml:2: comm.eager_limit: must not be negative, found -4KiB`},
		{"size negative string", "[comm]\ntcp_eager_limit = \"-1M\"\n",
			`jia.toml:2: comm.tcp_eager_limit: must not be negative, found -1MiB`},
		{"size above its max", "[transport]\ntcp_send_buffer = \"2GiB\"\n",
			`jia.toml:2: transport.tcp_send_buffer: must be at most 1GiB, found 2GiB`},
		{"size syntax", "[comm]\neager_limit = \"64KB/s\"\n",
			`jia.toml:2: comm.eager_limit: invalid byte size "64KB/s" (want bytes or a number with a unit: "64KiB", "4MiB", "1G")`},
		{"size fraction", "[comm]\neager_limit = \"1.5B\"\n",
			`jia.toml:2: comm.eager_limit: byte size "1.5B" is not a whole number of bytes`},
		{"size type", "[dsm]\nmax_alloc = true\n",
			`jia.toml:2: dsm.max_alloc: expected a size in bytes: an integer or a string such as "64KiB", "4MiB", "1G", found boolean true`},
		{"size zero", "[dsm]\nmax_alloc = 0\n",
			`jia.toml:2: dsm.max_alloc: must be greater than zero`},
		{"duration syntax", "[launch]\ngrace_period = \"soon\"\n",
			`jia.toml:2: launch.grace_period: invalid duration "soon" (use a number of seconds or a unit: "200ms", "1.5s", "2m")`},
		{"duration negative", "[launch]\ntimeout = \"-1s\"\n",
			`jia.toml:2: launch.timeout: must not be negative, found -1s`},
		{"duration zero", "[comm]\nud_retransmit_timeout = 0\n",
			`jia.toml:2: comm.ud_retransmit_timeout: must be greater than zero`},
		{"duration type", "[launch]\ntimeout = [1]\n",
			`jia.toml:2: launch.timeout: expected a duration: a string such as "200ms", "1.5s", "2m", or a number of seconds, found an array`},
		{"several, sorted by line", "[dsm]\nstats = 1\nprefech = 2\n[transport]\nkind = \"ib\"\n",
			`jia.toml:2: dsm.stats: expected true or false, found integer 1` + "\n" +
				`jia.toml:3: unknown key "dsm.prefech"` + "\n" +
				`jia.toml:5: transport.kind: invalid value "ib" (allowed: auto, shm, tcp, verbs)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			if err := os.WriteFile("jia.toml", []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := config.Load("jia.toml")
			if err == nil {
				t.Fatalf("Load succeeded, want error %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Load error\n got: %s\nwant: %s", err, tt.want)
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.File != "jia.toml" {
				t.Errorf("error %v is not a *config.Error for jia.toml", err)
			}
		})
	}
}

func TestErrorFields(t *testing.T) {
	_, err := config.Decode("[dsm]\n\nprefetch_pages = -3\n")
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("Decode error %v is not a *config.Error", err)
	}
	want := config.Error{File: config.DataSource, Line: 3, Key: "dsm.prefetch_pages",
		Msg: "dsm.prefetch_pages: must not be negative, found -3"}
	if *ce != want {
		t.Errorf("error = %+v, want %+v", *ce, want)
	}
}

func nonDefault() config.Config {
	c := config.Default()
	c.Transport.Kind = config.TransportVerbs
	c.Comm.EagerLimit = 1000
	c.Comm.SHMEagerLimit = 3 * config.MiB
	c.Comm.TCPEagerLimit = 17
	c.Comm.VerbsEagerLimit = 2 * config.TiB
	c.Comm.RendezvousRead = false
	c.Comm.UDRetransmitTimeout = 1500*time.Millisecond + time.Nanosecond
	c.DSM.PageCachePages = 4096
	c.DSM.MaxAlloc = config.GiB + 1
	c.DSM.HomeMigration = true
	c.DSM.PrefetchPages = 16
	c.DSM.PrefetchLookahead = 3
	c.DSM.WriteDetection = config.WriteDetectionTwin
	c.DSM.Stats = true
	c.DSM.HostShare = false
	c.Log.Level = config.LogDebug
	c.Log.Format = config.LogJSON
	c.Launch.GracePeriod = 0
	c.Launch.Timeout = 90 * time.Minute
	return c
}

func TestRoundTrip(t *testing.T) {
	cases := []config.Config{config.Default(), nonDefault()}
	r := rand.New(rand.NewPCG(1, 2))
	kinds := []config.TransportKind{config.TransportAuto, config.TransportSHM, config.TransportTCP, config.TransportVerbs}
	levels := []config.LogLevel{config.LogDebug, config.LogInfo, config.LogWarn, config.LogError}
	size := func() config.ByteSize { return config.ByteSize(r.Int64N(1 << (r.IntN(62) + 1))) }
	dur := func() time.Duration { return time.Duration(r.Int64N(1 << (r.IntN(62) + 1))) }
	for range 500 {
		c := config.Config{}
		c.Transport.Kind = kinds[r.IntN(len(kinds))]
		c.Comm = config.CommConfig{EagerLimit: size(), SHMEagerLimit: size(), TCPEagerLimit: size(),
			VerbsEagerLimit: size(), RendezvousRead: r.IntN(2) == 0, SplitMin: size(), UDRetransmitTimeout: dur() + 1}
		c.DSM = config.DSMConfig{PageCachePages: r.IntN(1 << 30), MaxAlloc: size() + 1, HomeMigration: r.IntN(2) == 0,
			PrefetchPages: r.IntN(100), PrefetchLookahead: r.IntN(10), WriteDetection: config.WriteDetectionWP,
			Stats: r.IntN(2) == 0, HostShare: r.IntN(2) == 0}
		c.Log = config.LogConfig{Level: levels[r.IntN(len(levels))], Format: config.LogJSON}
		c.Launch = config.LaunchConfig{GracePeriod: dur(), Timeout: dur()}
		cases = append(cases, c)
	}
	for _, c := range cases {
		text, err := c.Encode()
		if err != nil {
			t.Fatalf("Encode(%+v): %v", c, err)
		}
		got, err := config.Decode(text)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)): %v\n%s", c, err, text)
		}
		if got != c {
			t.Fatalf("round trip changed the configuration\n got: %+v\nwant: %+v\ntext:\n%s", got, c, text)
		}
	}
}

func TestEncodeInvalid(t *testing.T) {
	c := config.Default()
	c.Transport.Kind = "ib"
	_, err := c.Encode()
	want := `encoding an invalid configuration: config: transport.kind: invalid value "ib" (allowed: auto, shm, tcp, verbs)`
	if err == nil || err.Error() != want {
		t.Errorf("Encode(invalid) error = %v, want %q", err, want)
	}
}

func TestDecodeOverDefaults(t *testing.T) {
	c, err := config.Decode("[log]\nlevel = \"debug\"\n")
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.Log.Level = config.LogDebug
	if c != want {
		t.Errorf("Decode = %+v, want %+v", c, want)
	}
	if _, err := config.Decode("[log\n"); err == nil || !strings.HasPrefix(err.Error(), config.DataSource+":1: ") {
		t.Errorf("Decode(bad) = %v, want an error at %s:1", err, config.DataSource)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*config.Config)
		want   string
	}{
		{"kind", func(c *config.Config) { c.Transport.Kind = "ib" },
			`config: transport.kind: invalid value "ib" (allowed: auto, shm, tcp, verbs)`},
		{"upper case is not normalized", func(c *config.Config) { c.Log.Level = "INFO" },
			`config: log.level: invalid value "INFO" (allowed: debug, info, warn, error)`},
		{"empty", func(c *config.Config) { c.Log.Format = "" },
			`config: log.format: invalid value "" (allowed: text, json)`},
		{"negative size", func(c *config.Config) { c.Comm.EagerLimit = -1 },
			`config: comm.eager_limit: must not be negative, found -1`},
		{"negative count", func(c *config.Config) { c.DSM.PageCachePages = -5 },
			`config: dsm.page_cache_pages: must not be negative, found -5`},
		{"zero", func(c *config.Config) { c.DSM.MaxAlloc = 0 },
			`config: dsm.max_alloc: must be greater than zero`},
		{"negative duration", func(c *config.Config) { c.Launch.GracePeriod = -time.Second },
			`config: launch.grace_period: must not be negative, found -1s`},
		{"two", func(c *config.Config) { c.DSM.WriteDetection = "x"; c.Comm.UDRetransmitTimeout = 0 },
			"config: comm.ud_retransmit_timeout: must be greater than zero\n" +
				`config: dsm.write_detection: invalid value "x" (allowed: wp, twin)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			tt.modify(&c)
			err := c.Validate()
			if err == nil || err.Error() != tt.want {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestSet(t *testing.T) {
	c := config.Default()
	for _, kv := range [][2]string{
		{"transport.kind", "shm"}, {"comm.eager_limit", "128KiB"}, {"dsm.stats", "on"},
		{"launch.timeout", "90"}, {"dsm.prefetch_pages", " 4 "},
	} {
		if err := c.Set(kv[0], kv[1]); err != nil {
			t.Fatalf("Set(%q, %q): %v", kv[0], kv[1], err)
		}
	}
	want := config.Default()
	want.Transport.Kind = config.TransportSHM
	want.Comm.EagerLimit = 128 * config.KiB
	want.DSM.Stats = true
	want.Launch.Timeout = 90 * time.Second
	want.DSM.PrefetchPages = 4
	if c != want {
		t.Errorf("after Set: %+v, want %+v", c, want)
	}
	for _, tt := range []struct{ key, value, want string }{
		{"transport.kind", "ib", `config: transport.kind: invalid value "ib" (allowed: auto, shm, tcp, verbs)`},
		{"dsm.prefech_pages", "1", `config: unknown key "dsm.prefech_pages" (did you mean "dsm.prefetch_pages"?)`},
		{"dsm.max_alloc", "lots", `config: dsm.max_alloc: invalid byte size "lots" (want bytes or a number with a unit: "64KiB", "4MiB", "1G")`},
		{"dsm.prefetch_pages", "-2", `config: dsm.prefetch_pages: must not be negative, found -2`},
	} {
		before := c
		err := c.Set(tt.key, tt.value)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Set(%q, %q) = %v, want %q", tt.key, tt.value, err, tt.want)
		}
		if c != before {
			t.Errorf("failed Set(%q, %q) changed the configuration", tt.key, tt.value)
		}
	}
}

func TestEagerLimitFor(t *testing.T) {
	c := config.Default().Comm
	if got := c.EagerLimitFor(config.TransportTCP); got != 0 {
		t.Errorf("default EagerLimitFor(tcp) = %v, want 0 (provider default)", got)
	}
	c.EagerLimit = 64 * config.KiB
	c.SHMEagerLimit = 1 * config.MiB
	for kind, want := range map[config.TransportKind]config.ByteSize{
		config.TransportSHM: config.MiB, config.TransportTCP: 64 * config.KiB,
		config.TransportVerbs: 64 * config.KiB, config.TransportAuto: 64 * config.KiB,
	} {
		if got := c.EagerLimitFor(kind); got != want {
			t.Errorf("EagerLimitFor(%s) = %v, want %v", kind, got, want)
		}
	}
}

func TestSlogLevel(t *testing.T) {
	for level, want := range map[config.LogLevel]string{
		config.LogDebug: "DEBUG", config.LogInfo: "INFO", config.LogWarn: "WARN", config.LogError: "ERROR", "": "WARN",
	} {
		if got := level.SlogLevel().String(); got != want {
			t.Errorf("%q.SlogLevel() = %s, want %s", level, got, want)
		}
	}
}

func TestResolve(t *testing.T) {
	noEnv := func(string) string { return "" }

	t.Run("no file", func(t *testing.T) {
		t.Chdir(t.TempDir())
		c, file, err := config.Resolve("", false, noEnv)
		if err != nil || file != "" || c != config.Default() {
			t.Errorf("Resolve = %+v, %q, %v; want defaults, no file", c, file, err)
		}
	})
	t.Run("jia.toml in working directory", func(t *testing.T) {
		t.Chdir(t.TempDir())
		if err := os.WriteFile("jia.toml", []byte("[dsm]\nstats = true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c, file, err := config.Resolve("", false, noEnv)
		if err != nil || file != "jia.toml" || !c.DSM.Stats {
			t.Errorf("Resolve = %+v, %q, %v; want stats from jia.toml", c, file, err)
		}
	})
	t.Run("default path, file errors", func(t *testing.T) {
		t.Chdir(t.TempDir())
		if err := os.WriteFile("jia.toml", []byte("[dsm]\nstats = 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, file, err := config.Resolve("jia.toml", false, noEnv)
		want := `jia.toml:2: dsm.stats: expected true or false, found integer 2`
		if err == nil || err.Error() != want || file != "jia.toml" {
			t.Errorf("Resolve = %q, %v; want %q", file, err, want)
		}
	})
	t.Run("explicit", func(t *testing.T) {
		t.Chdir(t.TempDir())
		if err := os.WriteFile("jia.toml", []byte("[dsm]\nstats = true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		path := writeFile(t, "other.toml", "[log]\nlevel = \"info\"\n")
		c, file, err := config.Resolve(path, true, noEnv)
		if err != nil || file != path || c.DSM.Stats || c.Log.Level != config.LogInfo {
			t.Errorf("Resolve = %+v, %q, %v; want only other.toml read", c, file, err)
		}
	})
	t.Run("explicit missing", func(t *testing.T) {
		t.Chdir(t.TempDir())
		_, _, err := config.Resolve("missing.toml", true, noEnv)
		if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.toml") {
			t.Errorf("Resolve(missing, explicit) = %v, want a not-exist error naming the file", err)
		}
		if _, _, err := config.Resolve("", true, noEnv); err == nil {
			t.Error("Resolve(\"\", explicit) succeeded")
		}
	})
	t.Run("environment over file", func(t *testing.T) {
		path := writeFile(t, "jia.toml", "[transport]\nkind = \"tcp\"\n[dsm]\nstats = true\n")
		env := map[string]string{"JIA_TRANSPORT": "shm"}
		c, _, err := config.Resolve(path, true, func(k string) string { return env[k] })
		if err != nil || c.Transport.Kind != config.TransportSHM || !c.DSM.Stats {
			t.Errorf("Resolve = %+v, %v; want kind shm from the environment, stats from the file", c, err)
		}
	})
	t.Run("environment error", func(t *testing.T) {
		t.Chdir(t.TempDir())
		env := map[string]string{"JIA_LOG_LEVEL": "loud"}
		_, _, err := config.Resolve("", false, func(k string) string { return env[k] })
		want := `environment variable JIA_LOG_LEVEL: invalid value "loud" (allowed: debug, info, warn, error)`
		if err == nil || err.Error() != want {
			t.Errorf("Resolve = %v, want %q", err, want)
		}
	})
}
