package config_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jiarun/jia/runtime/config"
)

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name   string
		env    map[string]string
		modify func(*config.Config)
	}{
		{"nothing", nil, func(*config.Config) {}},
		{"kind", map[string]string{"JIA_TRANSPORT_KIND": "tcp"},
			func(c *config.Config) { c.Transport.Kind = config.TransportTCP }},
		{"alias", map[string]string{"JIA_TRANSPORT": "Verbs"},
			func(c *config.Config) { c.Transport.Kind = config.TransportVerbs }},
		{"alias agreeing", map[string]string{"JIA_TRANSPORT": "shm", "JIA_TRANSPORT_KIND": "shm"},
			func(c *config.Config) { c.Transport.Kind = config.TransportSHM }},
		{"empty is unset", map[string]string{"JIA_LOG_LEVEL": "", "JIA_DSM_STATS": "  "},
			func(*config.Config) {}},
		{"every kind of value", map[string]string{
			"JIA_COMM_EAGER_LIMIT":           "32KiB",
			"JIA_COMM_SHM_EAGER_LIMIT":       "1M",
			"JIA_COMM_TCP_EAGER_LIMIT":       "1000",
			"JIA_COMM_VERBS_EAGER_LIMIT":     "2 MiB",
			"JIA_COMM_RENDEZVOUS_READ":       "0",
			"JIA_COMM_UD_RETRANSMIT_TIMEOUT": "20ms",
			"JIA_DSM_PAGE_CACHE_PAGES":       "512",
			"JIA_DSM_MAX_ALLOC":              "8G",
			"JIA_DSM_HOME_MIGRATION":         "yes",
			"JIA_DSM_PREFETCH_PAGES":         "4",
			"JIA_DSM_PREFETCH_LOOKAHEAD":     "2",
			"JIA_DSM_WRITE_DETECTION":        "twin",
			"JIA_DSM_STATS":                  "true",
			"JIA_DSM_HOST_SHARE":             "off",
			"JIA_LOG_LEVEL":                  "debug",
			"JIA_LOG_FORMAT":                 "json",
			"JIA_LAUNCH_GRACE_PERIOD":        "0.5",
			"JIA_LAUNCH_TIMEOUT":             "1h",
		}, func(c *config.Config) {
			c.Comm.EagerLimit = 32 * config.KiB
			c.Comm.SHMEagerLimit = config.MiB
			c.Comm.TCPEagerLimit = 1000
			c.Comm.VerbsEagerLimit = 2 * config.MiB
			c.Comm.RendezvousRead = false
			c.Comm.UDRetransmitTimeout = 20 * time.Millisecond
			c.DSM.PageCachePages = 512
			c.DSM.MaxAlloc = 8 * config.GiB
			c.DSM.HomeMigration = true
			c.DSM.PrefetchPages = 4
			c.DSM.PrefetchLookahead = 2
			c.DSM.WriteDetection = config.WriteDetectionTwin
			c.DSM.Stats = true
			c.DSM.HostShare = false
			c.Log.Level = config.LogDebug
			c.Log.Format = config.LogJSON
			c.Launch.GracePeriod = 500 * time.Millisecond
			c.Launch.Timeout = time.Hour
		}},
		{"contract variables are not configuration", map[string]string{"JIA_RANK": "3", "JIA_HOST": "x"},
			func(*config.Config) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			if err := c.ApplyEnv(func(k string) string { return tt.env[k] }); err != nil {
				t.Fatal(err)
			}
			want := config.Default()
			tt.modify(&want)
			if c != want {
				t.Errorf("ApplyEnv =\n%+v\nwant\n%+v", c, want)
			}
		})
	}
}

func TestApplyEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"enum", map[string]string{"JIA_TRANSPORT_KIND": "ib"},
			`environment variable JIA_TRANSPORT_KIND: invalid value "ib" (allowed: auto, shm, tcp, verbs)`},
		{"alias enum", map[string]string{"JIA_TRANSPORT": "ib"},
			`environment variable JIA_TRANSPORT: invalid value "ib" (allowed: auto, shm, tcp, verbs)`},
		{"alias conflict", map[string]string{"JIA_TRANSPORT": "tcp", "JIA_TRANSPORT_KIND": "shm"},
			`environment variable JIA_TRANSPORT: "tcp" conflicts with JIA_TRANSPORT_KIND="shm"`},
		{"bool", map[string]string{"JIA_DSM_STATS": "maybe"},
			`environment variable JIA_DSM_STATS: invalid boolean "maybe" (use true or false)`},
		{"int", map[string]string{"JIA_DSM_PREFETCH_PAGES": "4k"},
			`environment variable JIA_DSM_PREFETCH_PAGES: invalid integer "4k"`},
		{"negative int", map[string]string{"JIA_DSM_PREFETCH_PAGES": "-4"},
			`environment variable JIA_DSM_PREFETCH_PAGES: must not be negative, found -4`},
		{"size", map[string]string{"JIA_COMM_EAGER_LIMIT": "big"},
			`environment variable JIA_COMM_EAGER_LIMIT: invalid byte size "big" (want bytes or a number with a unit: "64KiB", "4MiB", "1G")`},
		{"negative size", map[string]string{"JIA_COMM_EAGER_LIMIT": "-64KiB"},
			`environment variable JIA_COMM_EAGER_LIMIT: must not be negative, found -64KiB`},
		{"zero size", map[string]string{"JIA_DSM_MAX_ALLOC": "0"},
			`environment variable JIA_DSM_MAX_ALLOC: must be greater than zero`},
		{"duration", map[string]string{"JIA_LAUNCH_GRACE_PERIOD": "1 second"},
			`environment variable JIA_LAUNCH_GRACE_PERIOD: invalid duration "1 second" (use a number of seconds or a unit: "200ms", "1.5s", "2m")`},
		{"level", map[string]string{"JIA_LOG_LEVEL": "trace"},
			`environment variable JIA_LOG_LEVEL: invalid value "trace" (allowed: debug, info, warn, error)`},
		{"two", map[string]string{"JIA_LOG_LEVEL": "trace", "JIA_DSM_STATS": "2"},
			`environment variable JIA_DSM_STATS: invalid boolean "2" (use true or false)` + "\n" +
				`environment variable JIA_LOG_LEVEL: invalid value "trace" (allowed: debug, info, warn, error)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			c.DSM.PrefetchPages = 9
			before := c
			err := c.ApplyEnv(func(k string) string { return tt.env[k] })
			if err == nil || err.Error() != tt.want {
				t.Errorf("ApplyEnv error\n got: %v\nwant: %s", err, tt.want)
			}
			if c != before {
				t.Error("failed ApplyEnv changed the configuration")
			}
		})
	}
}

// TestEnvNames checks the names derived from the struct tags.
func TestEnvNames(t *testing.T) {
	want := []string{
		"JIA_TRANSPORT_KIND", "JIA_TRANSPORT", "JIA_TRANSPORT_TCP_SEND_BUFFER",
		"JIA_COMM_EAGER_LIMIT", "JIA_COMM_SHM_EAGER_LIMIT", "JIA_COMM_TCP_EAGER_LIMIT",
		"JIA_COMM_VERBS_EAGER_LIMIT", "JIA_COMM_RENDEZVOUS_READ", "JIA_COMM_PACK_VECTORS", "JIA_COMM_SPLIT_MIN", "JIA_COMM_UD_RETRANSMIT_TIMEOUT",
		"JIA_DSM_PAGE_CACHE_PAGES", "JIA_DSM_MAX_ALLOC", "JIA_DSM_HOME_MIGRATION",
		"JIA_DSM_PREFETCH_PAGES", "JIA_DSM_PREFETCH_LOOKAHEAD", "JIA_DSM_WRITE_DETECTION", "JIA_DSM_STATS",
		"JIA_DSM_HOST_SHARE",
		"JIA_LOG_LEVEL", "JIA_LOG_FORMAT",
		"JIA_LAUNCH_GRACE_PERIOD", "JIA_LAUNCH_TIMEOUT",
	}
	if got := config.EnvNames(); !slices.Equal(got, want) {
		t.Errorf("EnvNames() =\n%v\nwant\n%v", got, want)
	}
	// Every key of the encoded configuration has its variable.
	enc, err := config.Default().Encode()
	if err != nil {
		t.Fatal(err)
	}
	section := ""
	for _, line := range strings.Split(enc, "\n") {
		if strings.HasPrefix(line, "[") {
			section = strings.Trim(line, "[]")
		} else if key, _, ok := strings.Cut(line, " = "); ok {
			name := "JIA_" + strings.ToUpper(section+"_"+key)
			if !slices.Contains(want, name) {
				t.Errorf("key %s.%s has no variable %s", section, key, name)
			}
		}
	}
}

func TestUnknownEnv(t *testing.T) {
	environ := []string{
		"PATH=/bin", "JIA_RANK=0", "JIA_SIZE=4", "JIA_LOCAL_RANK=0", "JIA_LOCAL_SIZE=4", "JIA_JOB=j",
		"JIA_RENDEZVOUS=h:1", "JIA_SECRET=00", "JIA_HOST=h", "JIA_CONFIG_DATA=[log]",
		"JIA_TRANSPORT=tcp", "JIA_LOG_LEVEL=info", "JIA_DSM_PREFECH_PAGES=4", "JIA_LOGLEVEL=debug",
		"JIA_DSM_PREFECH_PAGES=5", "JIA_=x", "JIAX=1", "jia_log_level=debug", "JIA_NOVALUE",
	}
	want := []string{"JIA_DSM_PREFECH_PAGES", "JIA_LOGLEVEL", "JIA_", "JIA_NOVALUE"}
	if got := config.UnknownEnv(environ); !slices.Equal(got, want) {
		t.Errorf("UnknownEnv = %v, want %v", got, want)
	}
}

func TestSuggestEnv(t *testing.T) {
	for name, want := range map[string]string{
		"JIA_DSM_PREFECH_PAGES": "JIA_DSM_PREFETCH_PAGES",
		"JIA_LOGLEVEL":          "JIA_LOG_LEVEL",
		"JIA_TRANSPROT":         "JIA_TRANSPORT",
		"JIA_DSM_STAT":          "JIA_DSM_STATS",
		"JIA_COMPLETELY_OTHER":  "",
		"JIA_":                  "",
	} {
		if got := config.SuggestEnv(name); got != want {
			t.Errorf("SuggestEnv(%q) = %q, want %q", name, got, want)
		}
	}
}
