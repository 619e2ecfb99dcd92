package cluster_test

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jiarun/jia/e2e/cluster"
)

// banner connects to host:22 and reads the SSH banner line.
func banner(addr string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(timeout))
	return bufio.NewReader(conn).ReadString('\n')
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestCluster checks one cluster of three hosts (bring-ups are the slow part).
func TestCluster(t *testing.T) {
	c := cluster.Up(t, 3)
	t.Run("hosts are separate", func(t *testing.T) { testHostsAreSeparate(t, c) })
	t.Run("faults", func(t *testing.T) { testFaults(t, c) })
}

// Every host answers with its own sshd, has its own hostname, and its own /tmp.
func testHostsAreSeparate(t *testing.T, c *cluster.Cluster) {
	if got := c.Names(); !slices.Equal(got, []string{c.Prefix + "1", c.Prefix + "2", c.Prefix + "3"}) {
		t.Fatalf("hosts %v", got)
	}
	for i, h := range c.Hosts {
		if want := c.Net + "." + strconv.Itoa(11+i); h.Addr != want {
			t.Errorf("%s: address %s, want %s", h.Name, h.Addr, want)
		}
		b, err := banner(c.Addr(h.Name), 2*time.Second)
		if err != nil || !strings.HasPrefix(b, "SSH-2.0-OpenSSH") {
			t.Errorf("%s: banner %q, %v", h.Name, b, err)
		}
		out, err := c.Exec(h.Name, "hostname")
		if err != nil || strings.TrimSpace(string(out)) != h.Name {
			t.Errorf("%s: hostname %q, %v", h.Name, out, err)
		}
		var sshd bool
		for _, p := range c.Procs(h.Name) {
			sshd = sshd || strings.Contains(strings.Join(p.Args, " "), "sshd")
		}
		if !sshd {
			t.Errorf("%s: no sshd among %v", h.Name, c.Procs(h.Name))
		}
	}

	name := "cluster-test-" + strconv.Itoa(os.Getpid())
	if out, err := c.Exec(c.Hosts[0].Name, "sh", "-c", "echo hi > /tmp/"+name); err != nil {
		t.Fatalf("write /tmp on %s: %v %s", c.Hosts[0].Name, err, out)
	}
	if _, err := os.Stat(filepath.Join(c.TmpDir(c.Hosts[0].Name), name)); err != nil {
		t.Errorf("file written to %s:/tmp is not in its TmpDir: %v", c.Hosts[0].Name, err)
	}
	for _, p := range []string{filepath.Join(c.TmpDir(c.Hosts[1].Name), name), filepath.Join("/tmp", name)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("file written to %s:/tmp is visible at %s", c.Hosts[0].Name, p)
		}
	}
	if out, _ := c.Exec(c.Hosts[0].Name, "sh", "-c", "echo $HOME; ls -A /root/.ssh"); !strings.Contains(string(out), "authorized_keys") {
		t.Errorf("%s: /root/.ssh: %s", c.Hosts[0].Name, out)
	}

	kh, err := os.ReadFile(c.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(kh), "\n"); n != 3 {
		t.Errorf("known_hosts has %d lines, want 3:\n%s", n, kh)
	}
	if !strings.HasPrefix(string(kh), c.Hosts[0].Addr+","+c.Hosts[0].Name+" ssh-ed25519 ") {
		t.Errorf("known_hosts:\n%s", kh)
	}
	cfg, _ := os.ReadFile(c.SSHConfig)
	if !strings.Contains(string(cfg), "Host "+c.Hosts[2].Name+"\n  HostName "+c.Hosts[2].Addr) {
		t.Errorf("ssh_config lacks the alias of %s:\n%s", c.Hosts[2].Name, cfg)
	}
}

// Each fault helper has the effect it promises, and undoing it restores the host.
func testFaults(t *testing.T, c *cluster.Cluster) {
	h1, h2 := c.Hosts[1].Name, c.Hosts[2].Name

	// Freeze: connect succeeds (the kernel accepts), but no banner comes.
	c.Freeze(h1)
	for _, p := range c.Procs(h1) {
		if p.State != "T" {
			t.Errorf("frozen %s: %v not stopped", h1, p)
		}
	}
	if b, err := banner(c.Addr(h1), 500*time.Millisecond); !isTimeout(err) {
		t.Errorf("frozen %s: banner %q, err %v; want a read timeout", h1, b, err)
	}
	if _, err := banner(c.Addr(h2), 2*time.Second); err != nil {
		t.Errorf("%s must not be affected by freezing %s: %v", h2, h1, err)
	}
	c.Thaw(h1)
	if _, err := banner(c.Addr(h1), 2*time.Second); err != nil {
		t.Errorf("thawed %s: %v", h1, err)
	}

	// Link down: nothing gets through, not even a connect.
	c.LinkDown(h2)
	if _, err := banner(c.Addr(h2), 500*time.Millisecond); !isTimeout(err) {
		t.Errorf("%s link down: %v; want a timeout", h2, err)
	}
	c.LinkUp(h2)
	if _, err := banner(c.Addr(h2), 2*time.Second); err != nil {
		t.Errorf("%s link up again: %v", h2, err)
	}

	// 100% loss behaves like a dead link; heal restores it.
	c.Loss(h2, 100)
	if _, err := banner(c.Addr(h2), 500*time.Millisecond); !isTimeout(err) {
		t.Errorf("%s at 100%% loss: %v; want a timeout", h2, err)
	}
	c.Loss(h2, 5)
	out, err := exec.Command("ip", "netns", "exec", h2, "nft", "list", "table", "inet", "jhfault").CombinedOutput()
	if err != nil || strings.Count(string(out), "numgen random mod 100 < 5") != 2 ||
		strings.Count(string(out), `ifname != "lo"`) != 2 {
		t.Errorf("5%% loss rules: %v\n%s", err, out)
	}
	c.Heal(h2)
	if _, err := banner(c.Addr(h2), 2*time.Second); err != nil {
		t.Errorf("%s healed: %v", h2, err)
	}

	// Reject: refused at once.
	c.Reject(h2)
	t0 := time.Now()
	if _, err := banner(c.Addr(h2), 2*time.Second); err == nil || !strings.Contains(err.Error(), "refused") || time.Since(t0) > time.Second {
		t.Errorf("%s rejecting: %v after %v; want connection refused at once", h2, err, time.Since(t0))
	}
	c.Heal(h2)

	// DropFrom the login node: a partition between the login node and h2 only.
	c.DropFrom(h2, c.LoginAddr)
	if _, err := banner(c.Addr(h2), 500*time.Millisecond); !isTimeout(err) {
		t.Errorf("%s dropping %s: %v; want a timeout", h2, c.LoginAddr, err)
	}
	if _, err := banner(c.Addr(h1), 2*time.Second); err != nil {
		t.Errorf("%s must not be affected: %v", h1, err)
	}
	c.Heal(h2)
	if _, err := banner(c.Addr(h2), 2*time.Second); err != nil {
		t.Errorf("%s healed: %v", h2, err)
	}
}

// Down removes everything, even with frozen hosts and stray processes on
// them, and is idempotent.
func TestDownLeavesNothing(t *testing.T) {
	c := cluster.Up(t, 2)
	h1, h2 := c.Hosts[0].Name, c.Hosts[1].Name
	// a process left behind on h1 (its parent, nsenter, exits at once)
	if out, err := c.Exec(h1, "sh", "-c", "sleep 300 >/dev/null 2>&1 &"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	var stray int
	for _, p := range c.Procs(h1) {
		if len(p.Args) > 0 && p.Args[0] == "sleep" {
			stray = p.PID
		}
	}
	if stray == 0 {
		t.Fatalf("no stray sleep on %s: %v", h1, c.Procs(h1))
	}
	c.Freeze(h2)

	t0 := time.Now()
	c.Down()
	t.Logf("down with a frozen host and a stray process: %v", time.Since(t0).Round(time.Millisecond))
	c.Down() // a no-op

	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == h1 || f[0] == h2) {
			t.Errorf("namespace %s is left", f[0])
		}
	}
	if err := exec.Command("ip", "link", "show", c.Prefix+"br0").Run(); err == nil {
		t.Errorf("bridge %sbr0 is left", c.Prefix)
	}
	if _, err := os.Stat(c.State); !os.IsNotExist(err) {
		t.Errorf("state dir %s is left: %v", c.State, err)
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(stray) + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
		t.Errorf("stray process %d survived: %s", stray, st)
	}
	// running the script by hand when nothing is up is fine too
	cmd := exec.Command("./down.sh")
	cmd.Env = append(os.Environ(), "JH_PREFIX="+c.Prefix, "JH_STATE="+c.State)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("down.sh with nothing up: %v\n%s", err, out)
	}
}

// Two clusters can be up at once: distinct names, subnets and state.
func TestTwoClustersAtOnce(t *testing.T) {
	a := cluster.Up(t, 1)
	b := cluster.Up(t, 1)
	if a.Prefix == b.Prefix || a.Net == b.Net || a.State == b.State {
		t.Fatalf("clusters share names: %s/%s/%s and %s/%s/%s", a.Prefix, a.Net, a.State, b.Prefix, b.Net, b.State)
	}
	for _, c := range []*cluster.Cluster{a, b} {
		if _, err := banner(c.Addr(c.Hosts[0].Name), 2*time.Second); err != nil {
			t.Errorf("%s: %v", c.Hosts[0].Name, err)
		}
	}
}
