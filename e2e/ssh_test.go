package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jiarun/jia/e2e/cluster"
)

// TestSSHCluster runs jiarun from this machine (the login node) onto three
// hosts, each a network namespace with its own address, sshd, /tmp and
// home, over jiarun's own SSH client: one connection and one proxy per
// host, binaries staged to each host's cache. Every failure case ends with
// the process table of every host checked.
func TestSSHCluster(t *testing.T) {
	c := cluster.Up(t, 3)
	hosts := c.Names()
	hl := fmt.Sprintf("%s:2,%s:2,%s:2", hosts[0], hosts[1], hosts[2])
	base := []string{"--ssh-config", c.SSHConfig, "-H", hl}
	prog := copyProg(t) // one name, so each host's table can be searched for it

	t.Run("hello on 3 hosts x 2 slots, staged", func(t *testing.T) {
		r := run(t, "", append(append([]string{"-np", "6"}, base...), hello)...)
		checkHello(t, r, hosts)
		for _, h := range hosts {
			for _, pat := range []string{"jiarun-*", "prog-*-hello"} {
				if m, _ := filepath.Glob(filepath.Join(c.HomeDir(h), ".cache", "jiarun", pat)); len(m) != 1 {
					t.Errorf("%s: staged %s not in the host's own cache", h, pat)
				}
			}
		}
		nothingLeftOnHosts(t, c, 2*time.Second)
	})

	t.Run("NAS kernels class S across the hosts", func(t *testing.T) {
		for _, k := range nasKernels {
			np := "6"
			if k == "cg" || k == "mg" {
				np = "4" // powers of two only
			}
			checkNAS(t, k, append([]string{"-np", np}, base...)...)
		}
		nothingLeftOnHosts(t, c, 2*time.Second)
	})

	t.Run("a rank killed on one host stops every host", func(t *testing.T) {
		r := run(t, "", append(append([]string{"-np", "6"}, base...), prog, "signal", "3", "9")...)
		if r.code != 137 {
			t.Fatalf("want exit 137\n%v", r)
		}
		if !regexp.MustCompile(`rank 3 \(pid \d+ on ` + hosts[1] + `\) was killed by signal 9`).MatchString(r.stderr) {
			t.Errorf("message does not name rank 3 on %s\n%v", hosts[1], r)
		}
		nothingLeftOnHosts(t, c, 2*time.Second)
	})

	t.Run("Ctrl-C stops every host within 2 s", func(t *testing.T) {
		cmd, _, stderr := startHeld(t, prog, 6, base...)
		start := time.Now()
		cmd.Process.Signal(syscall.SIGINT)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 130 {
			t.Errorf("jiarun after SIGINT: %v; stderr:\n%s", err, stderr)
		}
		nothingLeftOnHosts(t, c, 2*time.Second-time.Since(start))
	})

	t.Run("kill -9 of jiarun leaves nothing on any host", func(t *testing.T) {
		cmd, _, _ := startHeld(t, prog, 6, base...)
		cmd.Process.Kill()
		cmd.Wait()
		nothingLeftOnHosts(t, c, 3*time.Second)
	})

	t.Run("a frozen host stops the job, naming it", func(t *testing.T) {
		cmd, _, stderr := startHeld(t, prog, 6, append([]string{"--host-timeout", "2s"}, base...)...)
		c.Freeze(hosts[2])
		start := time.Now()
		err := waitTimeout(cmd, 20*time.Second)
		c.Thaw(hosts[2])
		if err == nil || time.Since(start) > 10*time.Second {
			t.Fatalf("jiarun: %v after %v; stderr:\n%s", err, time.Since(start), stderr)
		}
		if !strings.Contains(stderr.String(), "lost contact with host "+hosts[2]) {
			t.Errorf("the message does not name %s:\n%s", hosts[2], stderr)
		}
		// Thawed, its proxy finds the root silent and kills its ranks.
		nothingLeftOnHosts(t, c, 6*time.Second)
	})

	t.Run("link down on one host stops the job, naming it", func(t *testing.T) {
		cmd, _, stderr := startHeld(t, prog, 6, append([]string{"--host-timeout", "2s"}, base...)...)
		c.LinkDown(hosts[1])
		start := time.Now()
		err := waitTimeout(cmd, 20*time.Second)
		if err == nil || time.Since(start) > 10*time.Second {
			c.LinkUp(hosts[1])
			t.Fatalf("jiarun: %v after %v; stderr:\n%s", err, time.Since(start), stderr)
		}
		if !strings.Contains(stderr.String(), "lost contact with host "+hosts[1]) {
			t.Errorf("the message does not name %s:\n%s", hosts[1], stderr)
		}
		// Cut off, the proxy hears no heartbeat and kills its ranks by itself.
		nothingLeftOnHosts(t, c, 6*time.Second)
		c.LinkUp(hosts[1])
	})

	t.Run("5% packet loss on one host: results still right", func(t *testing.T) {
		c.Loss(hosts[1], 5)
		defer c.Heal(hosts[1])
		r := run(t, "", append(append([]string{"-np", "6"}, base...), rankprog, "ring", "262144", "20")...)
		if r.code != 0 || len(lines(r.stdout)) != 6 {
			t.Fatalf("want 6 ring ok lines and exit 0\n%v", r)
		}
	})

	t.Run("unknown host key: refused with the line to add, nothing started", func(t *testing.T) {
		dir := t.TempDir()
		empty := filepath.Join(dir, "known_hosts")
		os.WriteFile(empty, nil, 0o600)
		cfg := rewriteConfig(t, c.SSHConfig, c.KnownHosts, empty, dir)
		r := run(t, "", "-np", "6", "--ssh-config", cfg, "-H", hl, prog, "sleep")
		if r.code == 0 || !strings.Contains(r.stderr, "ssh-ed25519 AAAA") || !strings.Contains(r.stderr, c.Host(hosts[0]).Addr) {
			t.Fatalf("want a refusal with the known_hosts line\n%v", r)
		}
		nothingLeftOnHosts(t, c, time.Second)
	})

	t.Run("wrong key: a clear authentication error", func(t *testing.T) {
		key := filepath.Join(t.TempDir(), "wrong_key")
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
		cfg := rewriteConfig(t, c.SSHConfig, c.KeyFile, key, t.TempDir())
		r := run(t, "", "-np", "2", "--ssh-config", cfg, "-H", hosts[0]+":2", prog, "sleep")
		if r.code == 0 || !strings.Contains(r.stderr, "authentication") || !strings.Contains(r.stderr, "wrong_key") {
			t.Fatalf("want an authentication error naming the key\n%v", r)
		}
		nothingLeftOnHosts(t, c, time.Second)
	})

	t.Run("unreachable host: a clear error within the timeout", func(t *testing.T) {
		start := time.Now()
		r := run(t, "", "-np", "2", "--ssh-config", c.SSHConfig, "--ssh-timeout", "1s", "-H", c.Net+".250:2", prog, "sleep")
		if r.code == 0 || !strings.Contains(r.stderr, c.Net+".250") || time.Since(start) > 5*time.Second {
			t.Fatalf("want a quick error naming the host (took %v)\n%v", time.Since(start), r)
		}
	})
}

// rewriteConfig copies an ssh_config, replacing one path by another.
func rewriteConfig(t *testing.T, path, old, new, dir string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "ssh_config")
	if err := os.WriteFile(out, bytes.ReplaceAll(b, []byte(old), []byte(new)), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

func waitTimeout(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("still running after %v", d)
	}
}
