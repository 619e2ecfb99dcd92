package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The proxy tree (--fanout) on simulated hosts: the local launch agent runs
// every "host" on this machine with its own home (so its own staging
// cache), and every process a host runs is a staged copy under that home.
// So "nothing left running" is checked in the process table as: no live
// process whose executable lies under a simulated host's home.

// simHosts names n simulated hosts, s01 … sNN.
func simHosts(n int) []string {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("s%02d", i+1)
	}
	return hosts
}

// treeArgs places one rank on each of n simulated hosts, started as a
// tree of the given fan-out.
func treeArgs(n, fanout int) []string {
	return []string{"-np", strconv.Itoa(n), "-H", strings.Join(simHosts(n), ","), "--fanout", strconv.Itoa(fanout),
		"--launch-agent", filepath.Join(repoRoot, "e2e", "testdata", "local-agent")}
}

// simProc is a live process of a simulated host.
type simProc struct {
	pid, ppid int
	host      string
	args      []string
}

// simProcs lists the live (non-zombie) processes whose executable lies in
// the home of one of hosts.
func simProcs(hosts []string) []simProc {
	root := os.Getenv("LOCAL_AGENT_ROOT")
	ents, _ := os.ReadDir("/proc")
	var out []simProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			continue
		}
		host := ""
		for _, h := range hosts {
			if strings.HasPrefix(exe, filepath.Join(root, h)+"/") {
				host = h
			}
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if host == "" || err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		f := strings.Fields(string(stat[i+2:]))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		out = append(out, simProc{pid: pid, ppid: atoi(f[1]), host: host,
			args: strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")})
	}
	return out
}

// simProxies returns the proxy of each simulated host, by host.
func simProxies(hosts []string) map[string]simProc {
	m := map[string]simProc{}
	for _, p := range simProcs(hosts) {
		if len(p.args) == 2 && p.args[1] == "proxy" {
			m[p.host] = p
		}
	}
	return m
}

// nothingLeftOn fails the test if a process of the hosts still runs d
// after the job ended (and kills it).
func nothingLeftOn(t *testing.T, hosts []string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := simProcs(hosts)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, p := range left {
				desc = append(desc, fmt.Sprintf("%s: %d %s", p.host, p.pid, strings.Join(p.args, " ")))
				syscall.Kill(p.pid, syscall.SIGKILL)
			}
			t.Fatalf("still running %v after the job ended:\n%s", d, strings.Join(desc, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTreeHello runs hello as a tree of proxies: 9 hosts with fan-out 2
// (4 generations) and 17 hosts with fan-out 4 (3 generations), and checks
// that every rank ran on its own host.
func TestTreeHello(t *testing.T) {
	for _, c := range []struct{ n, fanout int }{{9, 2}, {17, 4}} {
		t.Run(fmt.Sprintf("%d hosts, fanout %d", c.n, c.fanout), func(t *testing.T) {
			hosts := simHosts(c.n)
			r := run(t, "", append(append(treeArgs(c.n, c.fanout), "--tag-output"), hello)...)
			if r.code != 0 || len(lines(r.stdout)) != c.n {
				t.Fatalf("want %d lines and exit 0\n%v", c.n, r)
			}
			re := regexp.MustCompile(`^\[(\d+)\] hello from rank (\d+) of (\d+): rank (\d+) says "greetings from rank (\d+) on .+"$`)
			seen := map[int]bool{}
			for _, l := range lines(r.stdout) {
				m := re.FindStringSubmatch(l)
				if m == nil || m[1] != m[2] || atoi(m[3]) != c.n || atoi(m[4]) != (atoi(m[2])+c.n-1)%c.n || m[4] != m[5] {
					t.Fatalf("unexpected line %q\n%v", l, r)
				}
				seen[atoi(m[2])] = true
			}
			if len(seen) != c.n {
				t.Fatalf("greetings from %d ranks, want %d\n%v", len(seen), c.n, r)
			}
			r = run(t, "", append(treeArgs(c.n, c.fanout), rankprog, "env", "JIA_HOST")...)
			for i, h := range hosts {
				if want := fmt.Sprintf("rank %d JIA_HOST=%s\n", i, h); !strings.Contains(r.stdout, want) {
					t.Errorf("missing %q\n%v", want, r)
				}
			}
			nothingLeftOn(t, hosts, 2*time.Second)
		})
	}
}

// TestTreeShapeAndInterrupt checks in the process table who started whom:
// jiarun starts the proxies of the first F hosts only, and host i's proxy
// starts those of hosts (i+1)F … (i+1)F+F-1. Then Ctrl-C stops it all.
func TestTreeShapeAndInterrupt(t *testing.T) {
	const n, fanout = 17, 4
	hosts := simHosts(n)
	prog := copyProg(t)
	cmd, _, stderr := startHeld(t, prog, n, treeArgs(n, fanout)[2:]...)
	proxies := simProxies(hosts)
	if len(proxies) != n {
		t.Fatalf("%d proxies running, want %d: %v", len(proxies), n, proxies)
	}
	direct := 0
	for i, h := range hosts {
		want := cmd.Process.Pid
		if i >= fanout {
			want = proxies[hosts[i/fanout-1]].pid
		}
		if got := proxies[h].ppid; got != want {
			t.Errorf("the proxy of %s was started by pid %d, want %d", h, got, want)
		}
		if proxies[h].ppid == cmd.Process.Pid {
			direct++
		}
	}
	if direct != fanout {
		t.Errorf("jiarun started %d proxies itself, want %d", direct, fanout)
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("jiarun after SIGINT: %v, want exit 130; stderr:\n%s", err, stderr)
	}
	nothingLeftOn(t, hosts, 2*time.Second-time.Since(start))
}

// TestTreeLeafRankFailure fails a rank on a host four generations down;
// every rank on every host is stopped.
func TestTreeLeafRankFailure(t *testing.T) {
	const n, fanout = 9, 2 // s09 is started by s04, started by s01
	hosts := simHosts(n)
	prog := copyProg(t)
	r := run(t, "", append(treeArgs(n, fanout), prog, "exit", "8", "7")...)
	if r.code != 7 {
		t.Fatalf("want exit 7\n%v", r)
	}
	if !regexp.MustCompile(`jiarun: rank 8 \(pid \d+ on s09\) exited with code 7`).MatchString(r.stderr) {
		t.Errorf("message does not name rank 8 on s09\n%v", r)
	}
	nothingLeftOn(t, hosts, 2*time.Second)

	r = run(t, "", append(treeArgs(n, fanout), prog, "signal", "6", "9")...)
	if r.code != 137 || !regexp.MustCompile(`rank 6 \(pid \d+ on s07\) was killed by signal 9`).MatchString(r.stderr) {
		t.Fatalf("want exit 137 naming rank 6 on s07\n%v", r)
	}
	nothingLeftOn(t, hosts, 2*time.Second)
}

// TestTreeIntermediateProxyKilled kills the proxy of a host in the middle
// of the tree: its parent reports the host lost, and the job stops
// everywhere, below that host too.
func TestTreeIntermediateProxyKilled(t *testing.T) {
	const n, fanout = 9, 2
	hosts := simHosts(n)
	prog := copyProg(t)
	cmd, _, stderr := startHeld(t, prog, n, treeArgs(n, fanout)[2:]...)
	victim := simProxies(hosts)["s04"] // started by s01; starts s09
	if victim.pid == 0 {
		t.Fatal("no proxy on s04")
	}
	syscall.Kill(victim.pid, syscall.SIGKILL)
	err := waitTimeout(cmd, 20*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("jiarun: %v, want exit 1; stderr:\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), "lost contact with host s04") {
		t.Errorf("the message does not name s04:\n%s", stderr)
	}
	nothingLeftOn(t, hosts, 3*time.Second)
}

// TestTreeFrozenProxy stops (SIGSTOP) the proxy of a host in the middle of
// the tree: silent, it is given up after --host-timeout and named; the
// hosts below it hear nothing from it and stop their ranks themselves.
func TestTreeFrozenProxy(t *testing.T) {
	const n, fanout = 9, 2
	hosts := simHosts(n)
	prog := copyProg(t)
	cmd, _, stderr := startHeld(t, prog, n, append([]string{"--host-timeout", "1s"}, treeArgs(n, fanout)[2:]...)...)
	victim := simProxies(hosts)["s02"] // started by jiarun; starts s05 and s06
	syscall.Kill(victim.pid, syscall.SIGSTOP)
	defer syscall.Kill(victim.pid, syscall.SIGCONT)
	err := waitTimeout(cmd, 20*time.Second)
	if err == nil {
		t.Fatalf("jiarun succeeded; stderr:\n%s", stderr)
	}
	if !strings.Contains(stderr.String(), "lost contact with host s02: no word from its proxy for") {
		t.Errorf("the message does not name s02:\n%s", stderr)
	}
	nothingLeftOn(t, hosts, 3*time.Second)
}

// TestTreeKill9 kills jiarun itself: the whole tree goes with it.
func TestTreeKill9(t *testing.T) {
	const n, fanout = 9, 2
	hosts := simHosts(n)
	prog := copyProg(t)
	cmd, _, _ := startHeld(t, prog, n, treeArgs(n, fanout)[2:]...)
	cmd.Process.Kill()
	cmd.Wait()
	nothingLeftOn(t, hosts, 3*time.Second)
}

// TestTreeStdinToLeaf sends jiarun's standard input to a rank three hops
// down.
func TestTreeStdinToLeaf(t *testing.T) {
	const n, fanout = 9, 2
	r := run(t, "line one\n", append(append(treeArgs(n, fanout), "--stdin", "8"), rankprog, "stdin")...)
	if r.code != 0 || !strings.Contains(r.stdout, `rank 8 read 9 bytes: "line one\n"`) ||
		!strings.Contains(r.stdout, `rank 0 read 0 bytes: ""`) {
		t.Fatalf("stdin did not reach rank 8 (only)\n%v", r)
	}
}

// TestTreeUnreachableHost makes a host deep in the tree unreachable: the
// job stops before any rank starts, with a message naming the host and the
// proxy that tried it.
func TestTreeUnreachableHost(t *testing.T) {
	const n, fanout = 9, 2
	hosts := simHosts(n)
	t.Setenv("LOCAL_AGENT_FAIL", "s09")
	dir := t.TempDir()
	r := run(t, "", append(treeArgs(n, fanout), rankprog, "touch", filepath.Join(dir, "started"))...)
	if r.code != 1 || !strings.Contains(r.stderr, "host s09 (started from s04)") {
		t.Fatalf("want exit 1 naming s09 and s04\n%v", r)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "started.*")); len(m) > 0 {
		t.Errorf("ranks ran although a host could not be started: %v", m)
	}
	nothingLeftOn(t, hosts, 2*time.Second)
}

// TestTreeStaging checks that jiarun and the program reach every host of
// the tree, each staged by its parent from its own cache, under the
// program's own name.
func TestTreeStaging(t *testing.T) {
	t.Setenv("LOCAL_AGENT_ROOT", t.TempDir())
	const n, fanout = 5, 1 // a chain: s05 gets its copies from s04
	prog := copyProg(t)
	r := run(t, "", append(treeArgs(n, fanout), prog, "pwd")...)
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	for _, h := range simHosts(n) {
		dir := filepath.Join(os.Getenv("LOCAL_AGENT_ROOT"), h, ".cache", "jiarun")
		for pat, src := range map[string]string{"jiarun-*": jiarun, "prog-*-rankprog": prog} {
			m, _ := filepath.Glob(filepath.Join(dir, pat))
			if len(m) != 1 || !sameContent(t, src, m[0]) {
				t.Errorf("%s: staged %s: %v", h, pat, m)
			}
		}
	}
}
