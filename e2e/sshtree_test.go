package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jiarun/jia/e2e/cluster"
)

// TestSSHTree starts three namespace hosts as a chain (--fanout 1): jiarun
// logs in to the first host only, whose proxy logs in to the second, whose
// proxy logs in to the third. jiarun on the login node stays the authority
// of those logins (it checks their host keys against its known_hosts and
// signs their authentication): the hosts' own keys and known_hosts are
// removed first, so nothing else could log them in.
func TestSSHTree(t *testing.T) {
	c := cluster.Up(t, 3)
	hosts := c.Names()
	for _, h := range hosts {
		for _, f := range []string{"id_ed25519", "id_ed25519.pub", "known_hosts", "config"} {
			os.Remove(filepath.Join(c.HomeDir(h), ".ssh", f))
		}
	}
	hl := fmt.Sprintf("%s:2,%s:2,%s:2", hosts[0], hosts[1], hosts[2])
	base := []string{"--ssh-config", c.SSHConfig, "-H", hl, "--fanout", "1"}
	prog := copyProg(t)

	t.Run("hello down a chain of three hosts", func(t *testing.T) {
		r := run(t, "", append(append([]string{"-np", "6"}, base...), hello)...)
		checkHello(t, r, hosts)
		for _, h := range hosts {
			for _, pat := range []string{"jiarun-*", "prog-*-hello"} {
				if m, _ := filepath.Glob(filepath.Join(c.HomeDir(h), ".cache", "jiarun", pat)); len(m) != 1 {
					t.Errorf("%s: staged %s not in the host's own cache: %v", h, pat, m)
				}
			}
		}
		nothingLeftOnHosts(t, c, 2*time.Second)
	})

	t.Run("the login node holds one SSH connection", func(t *testing.T) {
		cmd, _, _ := startHeld(t, prog, 6, base...)
		if n := sshConnections(t, cmd.Process.Pid); n != 1 {
			t.Errorf("jiarun holds %d SSH connections, want 1 (fan-out 1)", n)
		}
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		nothingLeftOnHosts(t, c, 2*time.Second)
	})

	t.Run("a rank killed at the end of the chain stops every host", func(t *testing.T) {
		r := run(t, "", append(append([]string{"-np", "6"}, base...), prog, "signal", "5", "9")...)
		if r.code != 137 {
			t.Fatalf("want exit 137\n%v", r)
		}
		if !regexp.MustCompile(`rank 5 \(pid \d+ on ` + hosts[2] + `\) was killed by signal 9`).MatchString(r.stderr) {
			t.Errorf("message does not name rank 5 on %s\n%v", hosts[2], r)
		}
		nothingLeftOnHosts(t, c, 2*time.Second)
	})

	t.Run("a frozen host in the middle stops the job, naming it", func(t *testing.T) {
		cmd, _, stderr := startHeld(t, prog, 6, append([]string{"--host-timeout", "2s"}, base...)...)
		c.Freeze(hosts[1])
		err := waitTimeout(cmd, 20*time.Second)
		if err == nil {
			c.Thaw(hosts[1])
			t.Fatalf("jiarun succeeded; stderr:\n%s", stderr)
		}
		if !strings.Contains(stderr.String(), "lost contact with host "+hosts[1]) {
			t.Errorf("the message does not name %s:\n%s", hosts[1], stderr)
		}
		// Below it, the proxy hears nothing from its parent and stops its
		// ranks; thawed, the frozen one finds its parent gone.
		c.Thaw(hosts[1])
		nothingLeftOnHosts(t, c, 6*time.Second)
	})

	t.Run("unknown host key at the end of the chain: refused with the line, nothing started", func(t *testing.T) {
		dir := t.TempDir()
		b, err := os.ReadFile(c.KnownHosts)
		if err != nil {
			t.Fatal(err)
		}
		var keep []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if !strings.Contains(l, ","+hosts[2]+" ") {
				keep = append(keep, l)
			}
		}
		kh := filepath.Join(dir, "known_hosts")
		os.WriteFile(kh, []byte(strings.Join(keep, "\n")+"\n"), 0o600)
		cfg := rewriteConfig(t, c.SSHConfig, c.KnownHosts, kh, dir)
		r := run(t, "", "-np", "6", "--fanout", "1", "--ssh-config", cfg, "-H", hl, prog, "touch", "/tmp/jiarun-tree-started")
		want := "host " + hosts[2] + " (started from " + hosts[1] + "): ssh handshake: host key of " + c.Host(hosts[2]).Addr + " is not known"
		if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, c.Host(hosts[2]).Addr+" ssh-ed25519 AAAA") {
			t.Fatalf("want a refusal naming %s with the known_hosts line\n%v", hosts[2], r)
		}
		for _, h := range hosts {
			if m, _ := filepath.Glob(filepath.Join(c.TmpDir(h), "jiarun-tree-started.*")); len(m) > 0 {
				t.Errorf("%s: ranks ran: %v", h, m)
			}
		}
		nothingLeftOnHosts(t, c, 2*time.Second)
	})
}

// sshConnections counts the established TCP connections of process pid to
// port 22.
func sshConnections(t *testing.T, pid int) int {
	t.Helper()
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) > 9 && strings.HasSuffix(f[2], ":0016") && f[3] == "01" && inodes[f[9]] {
			n++
		}
	}
	return n
}
