package launcher_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jiarun/jia/launcher"
)

const hostsExampleTOML = `# example
[defaults]        # applied to every host unless overridden
slots = 2
user = "alice"
port = 22
workdir = "/scratch/alice"
env = { OMP_NUM_THREADS = "1" }

[[host]]
name = "node01"
slots = 4

[[host]]
name = "node02"
env = { FOO = "bar", OMP_NUM_THREADS = 2 }

[[host]]
name = "10.0.0.3"
user = "bob"
port = 2222
workdir = ""

[groups]
rack1 = ["node01", "node02", "node01"]   # groups name sets of hosts
rack2 = ["10.0.0.3"]
`

func TestParseHostsTOML(t *testing.T) {
	f, err := launcher.ParseHostsTOML("hosts.toml", []byte(hostsExampleTOML))
	if err != nil {
		t.Fatal(err)
	}
	want := launcher.HostList{
		{Name: "node01", Slots: 4, User: "alice", Port: 22, WorkDir: "/scratch/alice",
			Env: map[string]string{"OMP_NUM_THREADS": "1"}, Source: "hosts.toml:9"},
		{Name: "node02", Slots: 2, User: "alice", Port: 22, WorkDir: "/scratch/alice",
			Env: map[string]string{"OMP_NUM_THREADS": "2", "FOO": "bar"}, Source: "hosts.toml:13"},
		{Name: "10.0.0.3", Slots: 2, User: "bob", Port: 2222, WorkDir: "",
			Env: map[string]string{"OMP_NUM_THREADS": "1"}, Source: "hosts.toml:17"},
	}
	if !reflect.DeepEqual(f.Hosts, want) {
		t.Errorf("Hosts =\n%+v\nwant\n%+v", f.Hosts, want)
	}
	if got := f.Hosts.TotalSlots(); got != 8 {
		t.Errorf("TotalSlots = %d, want 8", got)
	}
	wantGroups := map[string][]string{"rack1": {"node01", "node02"}, "rack2": {"10.0.0.3"}}
	if !reflect.DeepEqual(f.Groups, wantGroups) {
		t.Errorf("Groups = %v, want %v", f.Groups, wantGroups)
	}
	if f.Path != "hosts.toml" {
		t.Errorf("Path = %q", f.Path)
	}
	rack1, err := f.Group("rack1")
	if err != nil || len(rack1) != 2 || rack1[0].Name != "node01" || rack1[1].Name != "node02" {
		t.Errorf("Group(rack1) = %+v, %v", rack1, err)
	}
	if _, err := f.Group("rack9"); err == nil || err.Error() != `hosts.toml: no group "rack9"` {
		t.Errorf("Group(rack9) error = %v", err)
	}
}

func TestParseHostsTOMLMinimal(t *testing.T) {
	f, err := launcher.ParseHostsTOML("h.toml", []byte("[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\nslots = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := launcher.HostList{{Name: "a", Slots: 1, Source: "h.toml:1"}, {Name: "b", Slots: 3, Source: "h.toml:3"}}
	if !reflect.DeepEqual(f.Hosts, want) || f.Groups != nil {
		t.Errorf("got %+v, groups %v; want %+v, no groups", f.Hosts, f.Groups, want)
	}
	// An inline array of tables works too.
	f, err = launcher.ParseHostsTOML("h.toml", []byte("host = [\n  { name = \"a\" },\n  { name = \"b\", slots = 2 },\n]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = launcher.HostList{{Name: "a", Slots: 1, Source: "h.toml:2"}, {Name: "b", Slots: 2, Source: "h.toml:3"}}
	if !reflect.DeepEqual(f.Hosts, want) {
		t.Errorf("inline: got %+v, want %+v", f.Hosts, want)
	}
}

func TestParseHostsTOMLErrors(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"syntax", "[[host]]\nname = node01\n",
			`hosts.toml:2: expected value but found "node" instead`},
		{"syntax unclosed header", "[[host]\nname = \"a\"\n",
			`hosts.toml:1: expected end of table array name delimiter ']', but got '\n' instead`},
		{"unknown host key", "[[host]]\nname = \"node01\"\n\nslot = 4\n",
			`hosts.toml:4: unknown key "host.slot" (allowed: name, slots, user, port, workdir, env)`},
		{"unknown defaults key", "[defaults]\nslot = 4\n[[host]]\nname = \"a\"\n",
			`hosts.toml:2: unknown key "defaults.slot" (allowed: name, slots, user, port, workdir, env)`},
		{"name in defaults", "[defaults]\nname = \"x\"\n[[host]]\nname = \"a\"\n",
			`hosts.toml:2: unknown key "defaults.name" (a name belongs in a [[host]] table)`},
		{"unknown top-level key", "[[host]]\nname = \"a\"\n[hosts]\nx = 1\n",
			`hosts.toml:3: unknown key "hosts" (allowed: [defaults], [[host]], [groups])`},
		{"duplicate host", "[[host]]\nname = \"node01\"\n[[host]]\nname = \"node02\"\n[[host]]\n\nname = \"node01\"\n",
			`hosts.toml:7: duplicate host "node01" (first defined at line 2)`},
		{"zero slots", "[[host]]\nname = \"node01\"\nslots = 0\n",
			`hosts.toml:3: host "node01": slots must be at least 1`},
		{"negative slots", "[[host]]\nname = \"node01\"\nslots = -2\n",
			`hosts.toml:3: host "node01": slots must be at least 1`},
		{"huge slots", "[[host]]\nname = \"node01\"\nslots = 40000000\n",
			`hosts.toml:3: host "node01": slots must be at most 1048576`},
		{"defaults zero slots", "[defaults]\nslots = 0\n[[host]]\nname = \"a\"\n",
			`hosts.toml:2: defaults: slots must be at least 1`},
		{"slots type", "[[host]]\nname = \"node01\"\nslots = \"4\"\n",
			`hosts.toml:3: host "node01": slots: expected an integer, found string "4"`},
		{"missing name", "[[host]]\nname = \"a\"\n\n[[host]]\nslots = 2\n",
			`hosts.toml:4: host #2 has no name`},
		{"name type", "[[host]]\nname = 7\n",
			`hosts.toml:2: host #1: name: expected a host name, found integer 7`},
		{"empty name", "[[host]]\nname = \"\"\n",
			`hosts.toml:2: host #1: empty host name`},
		{"option-like name", "[[host]]\nname = \"-oProxyCommand=x\"\n",
			`hosts.toml:2: host "-oProxyCommand=x": "-oProxyCommand=x" is not a valid host name`},
		{"name with space", "[[host]]\nname = \"node 01\"\n",
			`hosts.toml:2: host "node 01": "node 01" is not a valid host name`},
		{"bad user", "[[host]]\nname = \"a\"\nuser = \"-l root\"\n",
			`hosts.toml:3: host "a": "-l root" is not a valid user name`},
		{"port range", "[[host]]\nname = \"a\"\nport = 70000\n",
			`hosts.toml:3: host "a": port 70000 is not between 1 and 65535`},
		{"env type", "[[host]]\nname = \"a\"\nenv = \"A=1\"\n",
			`hosts.toml:3: host "a": env: expected a table of variables (env = { NAME = "value" }), found string "A=1"`},
		{"env value type", "[[host]]\nname = \"a\"\nenv = { A = [1] }\n",
			`hosts.toml:3: host "a": env.A: expected a string, found an array`},
		{"env name", "[[host]]\nname = \"a\"\n[host.env]\n\"A-B\" = \"1\"\n",
			`hosts.toml:4: host "a": env: "A-B" is not a valid variable name`},
		{"group unknown host", "[[host]]\nname = \"node01\"\n[groups]\nrack1 = [\"node01\", \"node03\"]\n",
			`hosts.toml:4: group "rack1": unknown host "node03"`},
		{"group type", "[[host]]\nname = \"node01\"\n[groups]\nrack1 = \"node01\"\n",
			`hosts.toml:4: group "rack1": expected an array of host names, found string "node01"`},
		{"group member type", "[[host]]\nname = \"node01\"\n[groups]\nrack1 = [1]\n",
			`hosts.toml:4: group "rack1": expected host names, found integer 1`},
		{"groups not a table", "groups = 1\n[[host]]\nname = \"node01\"\n",
			`hosts.toml:1: groups: expected a table ([groups]), found integer 1`},
		{"single brackets", "[host]\nname = \"node01\"\n",
			`hosts.toml:1: host: expected [[host]] tables, found a table (write [[host]], not [host])`},
		{"no hosts", "[defaults]\nslots = 2\n",
			`hosts.toml: no hosts defined (add a [[host]] table for each host)`},
		{"empty file", "",
			`hosts.toml: no hosts defined (add a [[host]] table for each host)`},
		{"several, sorted", "[[host]]\nname = \"a\"\nslots = 0\n[[host]]\nname = \"a\"\nslot = 1\n",
			`hosts.toml:3: host "a": slots must be at least 1` + "\n" +
				`hosts.toml:5: duplicate host "a" (first defined at line 2)` + "\n" +
				`hosts.toml:6: unknown key "host.slot" (allowed: name, slots, user, port, workdir, env)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := launcher.ParseHostsTOML("hosts.toml", []byte(tt.file))
			if err == nil {
				t.Fatalf("ParseHostsTOML succeeded with %+v, want error %q", f, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got: %s\nwant: %s", err, tt.want)
			}
		})
	}
}

func TestParseHostfile(t *testing.T) {
	data := `# Open MPI and MPICH styles
node01 slots=4
node02:2        # MPICH
node03
   
alice@node04 slots=2 max_slots=8
node05 count=3 max-slots=3
[fe80::1]:2
::1
node01 slots=1  # listed again: slots add up
`
	got, err := launcher.ParseHostfile("hostfile", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := launcher.HostList{
		{Name: "node01", Slots: 5, Source: "hostfile:2"},
		{Name: "node02", Slots: 2, Source: "hostfile:3"},
		{Name: "node03", Slots: 1, Source: "hostfile:4"},
		{Name: "node04", User: "alice", Slots: 2, Source: "hostfile:6"},
		{Name: "node05", Slots: 3, Source: "hostfile:7"},
		{Name: "fe80::1", Slots: 2, Source: "hostfile:8"},
		{Name: "::1", Slots: 1, Source: "hostfile:9"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseHostfile =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseHostfileErrors(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"bad slots", "a\nnode01 slots=x\n", `hostfile:2: host "node01": slots: "x" is not a positive integer`},
		{"zero slots", "node01 slots=0\n", `hostfile:1: host "node01": slots: "0" is not a positive integer`},
		{"bad count", "node01:0\n", `hostfile:1: slot count "0" is not a positive integer`},
		{"empty count", "node01:\n", `hostfile:1: slot count "" is not a positive integer`},
		{"unknown attribute", "\n\nnode01 cores=4\n", `hostfile:3: host "node01": unknown attribute "cores=4" (expected slots=N or max_slots=N)`},
		{"two hosts on a line", "node01 node02\n", `hostfile:1: host "node01": unknown attribute "node02" (expected slots=N or max_slots=N)`},
		{"slots twice", "node01:2 slots=3\n", `hostfile:1: host "node01": slot count given twice`},
		{"max below slots", "node01 slots=4 max_slots=2\n", `hostfile:1: host "node01": max_slots=2 is below slots=4`},
		{"bad name", "-oFoo slots=1\n", `hostfile:1: "-oFoo" is not a valid host name`},
		{"bad user", "a b@node01\n", `hostfile:1: host "a": unknown attribute "b@node01" (expected slots=N or max_slots=N)`},
		{"bracket", "[fe80::1:2\n", `hostfile:1: "[fe80::1:2": missing ]`},
		{"empty", "# nothing\n\n", `hostfile: no hosts listed`},
		{"several", "a slots=0\nb\nc:x\n", `hostfile:1: host "a": slots: "0" is not a positive integer` + "\n" +
			`hostfile:3: slot count "x" is not a positive integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := launcher.ParseHostfile("hostfile", []byte(tt.file))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}

func TestLoadHostfile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	toml := write("hosts.toml", "[[host]]\nname = \"a\"\nslots = 2\n[groups]\ng = [\"a\"]\n")
	f, err := launcher.LoadHostfile(toml)
	if err != nil || len(f.Hosts) != 1 || f.Hosts[0].Slots != 2 || f.Groups["g"] == nil || f.Path != toml {
		t.Errorf("LoadHostfile(hosts.toml) = %+v, %v", f, err)
	}
	// TOML content under another name.
	f, err = launcher.LoadHostfile(write("cluster.hosts", "[[host]]\nname = \"b\"\n"))
	if err != nil || len(f.Hosts) != 1 || f.Hosts[0].Name != "b" || f.Groups != nil {
		t.Errorf("LoadHostfile(TOML content) = %+v, %v", f, err)
	}
	// MPI style.
	mpi := write("hostfile", "c slots=3\nd:2\n")
	f, err = launcher.LoadHostfile(mpi)
	if err != nil || f.Hosts.TotalSlots() != 5 || f.Groups != nil || f.Hosts[1].Source != mpi+":2" {
		t.Errorf("LoadHostfile(hostfile) = %+v, %v", f, err)
	}
	// A .toml name is always TOML, so its errors are TOML errors.
	bad := write("bad.toml", "node01 slots=4\n")
	if _, err := launcher.LoadHostfile(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":1: ") {
		t.Errorf("LoadHostfile(bad.toml) = %v, want a TOML error at line 1", err)
	}
	if _, err := launcher.LoadHostfile(filepath.Join(dir, "missing")); err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadHostfile(missing) = %v, want a not-exist error", err)
	}
}

func TestParseHostSpec(t *testing.T) {
	tests := []struct {
		spec string
		want launcher.HostList
	}{
		{"a:2,b,c:3", launcher.HostList{{Name: "a", Slots: 2, Source: "-H"}, {Name: "b", Slots: 1, Source: "-H"}, {Name: "c", Slots: 3, Source: "-H"}}},
		{"localhost", launcher.HostList{{Name: "localhost", Slots: 1, Source: "-H"}}},
		{"a, a:3 ,b", launcher.HostList{{Name: "a", Slots: 4, Source: "-H"}, {Name: "b", Slots: 1, Source: "-H"}}},
		{"bob@n1:2,[::1]:2,::1,10.1.2.3:4", launcher.HostList{
			{Name: "n1", User: "bob", Slots: 2, Source: "-H"}, {Name: "::1", Slots: 3, Source: "-H"},
			{Name: "10.1.2.3", Slots: 4, Source: "-H"}}},
	}
	for _, tt := range tests {
		got, err := launcher.ParseHostSpec(tt.spec)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseHostSpec(%q) = %+v, %v; want %+v", tt.spec, got, err, tt.want)
		}
	}
}

func TestParseHostSpecErrors(t *testing.T) {
	tests := []struct{ spec, want string }{
		{"", `host list "": element 1 is empty`},
		{"a,,b", `host list "a,,b": element 2 is empty`},
		{"a:2,", `host list "a:2,": element 2 is empty`},
		{"a:x,b", `bad element "a:x": slot count "x" is not a positive integer`},
		{"a,b:0", `bad element "b:0": slot count "0" is not a positive integer`},
		{"a,b:-1", `bad element "b:-1": slot count "-1" is not a positive integer`},
		{"a:", `bad element "a:": slot count "" is not a positive integer`},
		{"a:2:3", `bad element "a:2:3": "a:2:3" is not a valid host name`},
		{"-oProxyCommand=evil", `bad element "-oProxyCommand=evil": "-oProxyCommand=evil" is not a valid host name`},
		{"[zz]:2", `bad element "[zz]:2": "zz" is not an IPv6 address`},
		{"[::1]x", `bad element "[::1]x": "[::1]x": unexpected "x" after ]`},
		{"-x@a", `bad element "-x@a": "-x" is not a valid user name`},
	}
	for _, tt := range tests {
		_, err := launcher.ParseHostSpec(tt.spec)
		if err == nil || err.Error() != tt.want {
			t.Errorf("ParseHostSpec(%q) error\n got: %v\nwant: %s", tt.spec, err, tt.want)
		}
	}
}

func TestIsLocalHost(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	short, _, qualified := strings.Cut(host, ".")
	local := []string{"localhost", "LocalHost", "localhost.", "127.0.0.1", "127.0.1.1", "127.1.2.3", "::1", "[::1]",
		"::ffff:127.0.0.1", host, strings.ToUpper(host), host + ".", short}
	if !qualified {
		local = append(local, host+".cluster.example")
	}
	for _, name := range local {
		if !launcher.IsLocalHost(name) {
			t.Errorf("IsLocalHost(%q) = false, want true (hostname %q)", name, host)
		}
	}
	remote := []string{"", "192.0.2.1", "2001:db8::1", "node-that-does-not-exist-42", "localhostx",
		short + "x", "x" + short, "8.8.8.8"}
	if qualified {
		remote = append(remote, short+".other-domain.example")
	}
	for _, name := range remote {
		if launcher.IsLocalHost(name) {
			t.Errorf("IsLocalHost(%q) = true, want false (hostname %q)", name, host)
		}
	}
}

func TestMapRanks(t *testing.T) {
	hosts := func(slots ...int) launcher.HostList {
		var hl launcher.HostList
		for i, s := range slots {
			hl = append(hl, launcher.Host{Name: string(rune('a' + i)), Slots: s, Source: "hosts.toml:" + string(rune('1'+i))})
		}
		return hl
	}
	type p = launcher.Placement
	tests := []struct {
		name  string
		hosts launcher.HostList
		np    int
		over  bool
		want  []p
	}{
		{"one host", hosts(4), 3, false, []p{{0, 0, 0, 3}, {1, 0, 1, 3}, {2, 0, 2, 3}}},
		{"fill in order", hosts(2, 3), 4, false, []p{{0, 0, 0, 2}, {1, 0, 1, 2}, {2, 1, 0, 2}, {3, 1, 1, 2}}},
		{"exactly full", hosts(1, 1, 2), 4, false, []p{{0, 0, 0, 1}, {1, 1, 0, 1}, {2, 2, 0, 2}, {3, 2, 1, 2}}},
		{"first host only", hosts(4, 4), 2, false, []p{{0, 0, 0, 2}, {1, 0, 1, 2}}},
		{"oversubscribe without need", hosts(2, 2), 3, true, []p{{0, 0, 0, 2}, {1, 0, 1, 2}, {2, 1, 0, 1}}},
		{"oversubscribe one round and a bit", hosts(2, 1), 5, true,
			[]p{{0, 0, 0, 4}, {1, 0, 1, 4}, {2, 0, 2, 4}, {3, 0, 3, 4}, {4, 1, 0, 1}}},
		{"oversubscribe two rounds", hosts(1, 2), 6, true,
			[]p{{0, 0, 0, 2}, {1, 0, 1, 2}, {2, 1, 0, 4}, {3, 1, 1, 4}, {4, 1, 2, 4}, {5, 1, 3, 4}}},
		{"oversubscribe single slot", hosts(1), 3, true, []p{{0, 0, 0, 3}, {1, 0, 1, 3}, {2, 0, 2, 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := launcher.MapRanks(tt.hosts, tt.np, tt.over, "")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("MapRanks =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}
}

// TestMapRanksInvariants checks, for many shapes, that every rank is placed
// once, in order, that no host exceeds its slots unless oversubscribed, and
// that local ranks and sizes agree.
func TestMapRanksInvariants(t *testing.T) {
	for _, slots := range [][]int{{1}, {3}, {1, 2, 3}, {4, 4}, {2, 1, 1, 5}} {
		hl := launcher.HostList{}
		for i, s := range slots {
			hl = append(hl, launcher.Host{Name: string(rune('a' + i)), Slots: s})
		}
		total := hl.TotalSlots()
		for np := 1; np <= 3*total+1; np++ {
			ps, err := launcher.MapRanks(hl, np, true, "x")
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != np {
				t.Fatalf("%v np %d: %d placements", slots, np, len(ps))
			}
			count := make([]int, len(hl))
			lastHost := 0
			for r, p := range ps {
				if p.Rank != r || p.Host < lastHost || p.LocalRank != count[p.Host] {
					t.Fatalf("%v np %d: bad placement %+v at %d", slots, np, p, r)
				}
				lastHost = p.Host
				count[p.Host]++
			}
			for r, p := range ps {
				if p.LocalSize != count[p.Host] {
					t.Fatalf("%v np %d: rank %d LocalSize %d, host has %d", slots, np, r, p.LocalSize, count[p.Host])
				}
			}
			for h, n := range count {
				// Each host gets its share of full rounds, plus at most one
				// more round's worth.
				if lo, hi := (np/total)*hl[h].Slots, (np/total+1)*hl[h].Slots; n < lo || n > hi {
					t.Fatalf("%v np %d: host %d has %d ranks, want %d..%d", slots, np, h, n, lo, hi)
				}
			}
			if _, err := launcher.MapRanks(hl, np, false, "x"); (err == nil) != (np <= total) {
				t.Fatalf("%v np %d without oversubscribe: err = %v", slots, np, err)
			}
		}
	}
}

func TestMapRanksErrors(t *testing.T) {
	eight := launcher.HostList{{Name: "a", Slots: 4, Source: "hosts.toml:9"}, {Name: "b", Slots: 4, Source: "hosts.toml:12"}}
	mixed := launcher.HostList{{Name: "a", Slots: 1, Source: "hosts.toml:9"}, {Name: "b", Slots: 1, Source: "-H"}}
	tests := []struct {
		name   string
		hosts  launcher.HostList
		np     int
		source string
		want   string
	}{
		{"too many", eight, 9, "hosts.toml",
			"-np 9 exceeds the 8 slots of hosts.toml (use --oversubscribe to allow it)"},
		{"source from hosts", eight, 9, "",
			"-np 9 exceeds the 8 slots of hosts.toml (use --oversubscribe to allow it)"},
		{"source from -H", launcher.HostList{{Name: "a", Slots: 1, Source: "-H"}}, 2, "",
			"-np 2 exceeds the 1 slot of -H (use --oversubscribe to allow it)"},
		{"mixed sources", mixed, 3, "",
			"-np 3 exceeds the 2 slots of the host list (use --oversubscribe to allow it)"},
		{"given source", eight, 100, "-H a:4,b:4",
			"-np 100 exceeds the 8 slots of -H a:4,b:4 (use --oversubscribe to allow it)"},
		{"zero", eight, 0, "", "-np 0: the number of ranks must be at least 1"},
		{"negative", eight, -3, "", "-np -3: the number of ranks must be at least 1"},
		{"no hosts", nil, 1, "", "no hosts to place ranks on"},
		{"bad slots", launcher.HostList{{Name: "a", Slots: 0, Source: "x:1"}}, 1, "",
			`host "a" (x:1): slots must be at least 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := launcher.MapRanks(tt.hosts, tt.np, false, tt.source)
			if err == nil || err.Error() != tt.want {
				t.Errorf("MapRanks error\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}
