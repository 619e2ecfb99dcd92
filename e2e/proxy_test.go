package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proxyArgs places ranks on two hosts that are not this host, started by a
// launch agent that runs jiarun's proxy on this machine: the multi-host
// path (proxies, the relayed rendezvous, output and exits over the link)
// without SSH.
func proxyArgs() []string {
	return []string{"-H", "nodeA:2,nodeB:2", "--launch-agent", filepath.Join(repoRoot, "e2e", "testdata", "local-agent")}
}

// proxyHosts are the hosts of proxyArgs. Ranks and proxies run there from
// staged copies, so the process-table checks look for what runs from
// those hosts' homes (nothingLeftOn), not for the original binaries.
var proxyHosts = []string{"nodeA", "nodeB"}

func TestProxyHello(t *testing.T) {
	r := run(t, "", append(append([]string{"-np", "4", "--tag-output"}, proxyArgs()...), hello)...)
	if r.code != 0 || len(lines(r.stdout)) != 4 {
		t.Fatalf("want 4 lines and exit 0\n%v", r)
	}
	re := regexp.MustCompile(`^\[(\d)\] hello from rank (\d) of 4: rank (\d) says "greetings from rank (\d) on .+"$`)
	for _, l := range lines(r.stdout) {
		m := re.FindStringSubmatch(l)
		if m == nil || m[1] != m[2] || atoi(m[3]) != (atoi(m[2])+3)%4 || m[3] != m[4] {
			t.Errorf("unexpected line %q", l)
		}
	}
}

func TestProxyRankFailure(t *testing.T) {
	prog := copyProg(t)
	r := run(t, "", append(append([]string{"-np", "4"}, proxyArgs()...), prog, "exit", "3", "7")...)
	if r.code != 7 {
		t.Fatalf("want exit 7\n%v", r)
	}
	if !regexp.MustCompile(`jiarun: rank 3 \(pid \d+ on nodeB\) exited with code 7`).MatchString(r.stderr) {
		t.Errorf("message does not name rank 3 on nodeB\n%v", r)
	}
	nothingLeftOn(t, proxyHosts, 2*time.Second)
}

func TestProxyStdinAndSignalledRank(t *testing.T) {
	r := run(t, "line one\n", append(append([]string{"-np", "3"}, proxyArgs()...), rankprog, "stdin")...)
	if r.code != 0 || !strings.Contains(r.stdout, `rank 0 read 9 bytes: "line one\n"`) {
		t.Fatalf("stdin did not reach rank 0 on its host\n%v", r)
	}
	prog := copyProg(t)
	r = run(t, "", append(append([]string{"-np", "4"}, proxyArgs()...), prog, "signal", "2", "9")...)
	if r.code != 137 || !strings.Contains(r.stderr, "rank 2") {
		t.Fatalf("want exit 137 naming rank 2\n%v", r)
	}
	nothingLeftOn(t, proxyHosts, 2*time.Second)
}

func TestProxyInterruptAndKill9(t *testing.T) {
	prog := copyProg(t)
	cmd, _, stderr := startHeld(t, prog, 4, proxyArgs()...)
	if n := len(simProcs(proxyHosts)); n < 6 {
		t.Fatalf("%d processes of the job seen on %v, want 4 ranks and 2 proxies: the checks below would prove nothing", n, proxyHosts)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("jiarun after SIGINT: %v, want exit 130; stderr:\n%s", err, stderr)
	}
	nothingLeftOn(t, proxyHosts, 2*time.Second)

	cmd, _, _ = startHeld(t, prog, 4, proxyArgs()...)
	cmd.Process.Kill()
	cmd.Wait()
	nothingLeftOn(t, proxyHosts, 2*time.Second) // ranks and proxies
}

// TestStaging checks that jiarun and the program are copied to each host's
// own cache, verified, and not copied again when already there.
func TestStaging(t *testing.T) {
	root := t.TempDir()
	t.Setenv("LOCAL_AGENT_ROOT", root)
	prog := copyProg(t)
	r := run(t, "", append(append([]string{"-np", "4"}, proxyArgs()...), prog, "pwd")...)
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	var mtimes []time.Time
	for _, host := range []string{"nodeA", "nodeB"} {
		dir := filepath.Join(root, host, ".cache", "jiarun")
		for _, pat := range []string{"jiarun-*", "prog-*-rankprog"} {
			m, _ := filepath.Glob(filepath.Join(dir, pat))
			if len(m) != 1 {
				t.Fatalf("%s: %d files match %s, want 1", host, len(m), pat)
			}
			st, err := os.Stat(m[0])
			if err != nil || st.Mode().Perm()&0o100 == 0 {
				t.Fatalf("%s: staged %s: %v, mode %v", host, m[0], err, st.Mode())
			}
			mtimes = append(mtimes, st.ModTime())
			src := prog
			if pat == "jiarun-*" {
				src = jiarun
			}
			if !sameContent(t, src, m[0]) {
				t.Errorf("%s: %s differs from %s", host, m[0], src)
			}
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "*.part*")); len(m) > 0 {
			t.Errorf("%s: temporary files left: %v", host, m)
		}
	}
	r = run(t, "", append(append([]string{"-np", "4"}, proxyArgs()...), prog, "pwd")...)
	if r.code != 0 {
		t.Fatalf("second run: want exit 0\n%v", r)
	}
	i := 0
	for _, host := range []string{"nodeA", "nodeB"} {
		for _, pat := range []string{"jiarun-*", "prog-*-rankprog"} {
			m, _ := filepath.Glob(filepath.Join(root, host, ".cache", "jiarun", pat))
			st, _ := os.Stat(m[0])
			if !st.ModTime().Equal(mtimes[i]) {
				t.Errorf("%s: %s was copied again", host, m[0])
			}
			i++
		}
	}
}

func sameContent(t *testing.T, a, b string) bool {
	t.Helper()
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// TestHostFileEnvAndWorkDir checks that hosts.toml's per-host environment
// and working directory reach the ranks, on this host and through proxies.
func TestHostFileEnvAndWorkDir(t *testing.T) {
	dir := t.TempDir()
	wa, wb := filepath.Join(dir, "wa"), filepath.Join(dir, "wb")
	os.Mkdir(wa, 0o755)
	os.Mkdir(wb, 0o755)
	hostsFile := filepath.Join(dir, "hosts.toml")
	os.WriteFile(hostsFile, []byte(`[defaults]
env = { SHARED = "all" }

[[host]]
name = "localhost"
slots = 1
workdir = "`+wa+`"
env = { WHO = "local" }

[[host]]
name = "nodeB"
slots = 1
workdir = "`+wb+`"
env = { WHO = "b" }
`), 0o644)
	agent := filepath.Join(repoRoot, "e2e", "testdata", "local-agent")
	r := run(t, "", "-f", hostsFile, "--launch-agent", agent, rankprog, "env", "WHO", "SHARED")
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	for _, want := range []string{"rank 0 WHO=local", "rank 1 WHO=b", "rank 0 SHARED=all", "rank 1 SHARED=all"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("missing %q\n%v", want, r)
		}
	}
	r = run(t, "", "-f", hostsFile, "--launch-agent", agent, rankprog, "pwd")
	for _, want := range []string{"rank 0 wd " + wa, "rank 1 wd " + wb} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("missing %q\n%v", want, r)
		}
	}
}
