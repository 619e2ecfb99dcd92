package sshc

// Tests against real OpenSSH servers: the namespace hosts of e2e/cluster.
// They need root (the cluster skips otherwise).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/jiarun/jia/e2e/cluster"
)

// clusterConfig reads the cluster's ssh_config; nothing of the real ~/.ssh
// or ssh-agent is used.
func clusterConfig(t *testing.T, c *cluster.Cluster) *Config {
	return &Config{ConfigFile: c.SSHConfig, HomeDir: t.TempDir(), AgentSocket: "none"}
}

// knownKey returns the "ssh-ed25519 AAAA..." of a host from the cluster's known_hosts.
func knownKey(t *testing.T, c *cluster.Cluster, host string) string {
	t.Helper()
	b, err := os.ReadFile(c.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && slices.Contains(strings.Split(f[0], ","), host) {
			return f[1] + " " + f[2]
		}
	}
	t.Fatalf("%s not in %s", host, c.KnownHosts)
	return ""
}

// alive reports whether pid runs on the host (zombies do not count).
func alive(c *cluster.Cluster, host string, pid int) bool {
	for _, p := range c.Procs(host) {
		if p.PID == pid {
			return true
		}
	}
	return false
}

// gone waits up to d for pid to leave the host.
func gone(c *cluster.Cluster, host string, pid int, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !alive(c, host, pid) {
			return true
		}
	}
	return false
}

// readPID reads the first line of r as a pid.
func readPID(t *testing.T, r *bufio.Reader) int {
	t.Helper()
	line, err := r.ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		t.Fatalf("reading a pid: %q %v", line, err)
	}
	return pid
}

// TestCluster runs every check against one cluster of four hosts (bringing
// a cluster up and down costs about a second, more when the machine is
// busy). jh1-jh3 serve the checks that leave the hosts as they were; the
// faults (link down, freeze) go to jh4 and are undone before the next check.
func TestCluster(t *testing.T) {
	c := cluster.Up(t, 4)
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *cluster.Cluster)
	}{
		{"hostname", testClusterHostname},
		{"host keys", testClusterHostKeys},
		{"wrong key", testClusterWrongKey},
		{"proxy jump", testClusterProxyJump},
		{"copy", testClusterCopy},
		{"orphans and watchdog", testClusterOrphansAndWatchdog},
		{"unreachable", testClusterUnreachable},
		{"frozen host", testClusterFrozenHost},
		{"link down noticed", testClusterLinkDownNoticed},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, c) })
	}
}

// Every host answers `hostname` with its own name, by alias and by address;
// the hosts offer ECDSA and Ed25519 keys and known_hosts has only Ed25519.
func testClusterHostname(t *testing.T, c *cluster.Cluster) {
	cfg := clusterConfig(t, c)
	for _, h := range c.Hosts {
		t0 := time.Now()
		cl, err := Dial(context.Background(), h.Name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		connect := time.Since(t0)
		out, err := cl.Output(context.Background(), "hostname")
		if err != nil || strings.TrimSpace(string(out)) != h.Name {
			t.Errorf("%s: hostname %q, %v", h.Name, out, err)
		}
		if cl.Target().HostName != h.Addr || cl.Target().User != "root" {
			t.Errorf("%s resolved to %s", h.Name, cl.Target())
		}
		t.Logf("%s: connected in %v, hostname in %v more", h.Name, connect.Round(time.Millisecond), (time.Since(t0) - connect).Round(time.Millisecond))
		cl.Close()
	}

	// all at once, by address, without any ssh_config
	bare := &Config{ConfigFile: "none", HomeDir: t.TempDir(), AgentSocket: "none", User: "root",
		IdentityFile: c.KeyFile, KnownHostsFiles: []string{c.KnownHosts}}
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, h := range c.Hosts {
		wg.Go(func() {
			cl, err := Dial(context.Background(), h.Addr, bare)
			if err != nil {
				t.Errorf("%s: %v", h.Addr, err)
				return
			}
			defer cl.Close()
			if out, err := cl.Output(context.Background(), "hostname"); err != nil || strings.TrimSpace(string(out)) != h.Name {
				t.Errorf("%s: hostname %q, %v", h.Addr, out, err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d hosts in parallel, connect + hostname: %v", len(c.Hosts), time.Since(t0).Round(time.Millisecond))
}

// Unknown key: refused with the exact line; AcceptNew learns it; a changed
// key names the file and line of the old one.
func testClusterHostKeys(t *testing.T, c *cluster.Cluster) {
	h1, h2 := c.Hosts[0], c.Hosts[1]
	kh := filepath.Join(t.TempDir(), "known_hosts")
	writeFile(t, kh, "")
	cfg := clusterConfig(t, c)
	cfg.KnownHostsFiles = []string{kh}

	_, err := Dial(context.Background(), h1.Name, cfg)
	var he *HostKeyError
	want := h1.Addr + " " + knownKey(t, c, h1.Name)
	if !errors.As(err, &he) || he.Line() != want || !strings.Contains(err.Error(), "add this line to "+kh+":\n"+want) {
		t.Fatalf("unknown host: %v\nwant the line %q", err, want)
	}
	if !strings.HasPrefix(err.Error(), "host "+h1.Name+": ssh handshake: host key of "+h1.Addr+" is not known") {
		t.Errorf("message: %v", err)
	}
	t.Logf("unknown host: %v", err)

	cfg.AcceptNew = true
	cl, err := Dial(context.Background(), h1.Name, cfg)
	if err != nil {
		t.Fatalf("AcceptNew: %v", err)
	}
	cl.Close()
	if b, _ := os.ReadFile(kh); string(b) != want+"\n" {
		t.Errorf("known_hosts after AcceptNew: %q, want %q", b, want)
	}
	cfg.AcceptNew = false
	cl, err = Dial(context.Background(), h1.Name, cfg)
	if err != nil {
		t.Fatalf("learnt key: %v", err)
	}
	cl.Close()

	// h1's address recorded with h2's key: a changed key
	writeFile(t, kh, "# a comment\n"+h1.Addr+" "+knownKey(t, c, h2.Name)+"\n")
	cfg.AcceptNew = true
	_, err = Dial(context.Background(), h1.Name, cfg)
	if !errors.As(err, &he) || !he.Changed() || !strings.Contains(err.Error(), "HOST KEY CHANGED for "+h1.Addr) ||
		!strings.Contains(err.Error(), kh+":2") {
		t.Errorf("changed key: %v", err)
	}
	t.Logf("changed key: %v", err)
}

// A key the hosts do not know: a clear authentication error.
func testClusterWrongKey(t *testing.T, c *cluster.Cluster) {
	h := c.Hosts[0]
	cfg := clusterConfig(t, c)
	cfg.IdentityFile = newKey(t, "ed25519").write(t, filepath.Join(cfg.HomeDir, "wrong_key"), "")
	_, err := Dial(context.Background(), h.Name, cfg)
	var ae *AuthError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "host "+h.Name+": ssh handshake: authentication as root@"+h.Addr+":22 failed") ||
		!strings.Contains(err.Error(), cfg.IdentityFile) {
		t.Fatalf("wrong key: %v", err)
	}
	t.Logf("wrong key: %v", err)
}

// Nothing at the address, or the link is down: a clear error at the timeout.
func testClusterUnreachable(t *testing.T, c *cluster.Cluster) {
	cfg := clusterConfig(t, c)
	cfg.Timeout = time.Second
	check := func(host, addr string) {
		t0 := time.Now()
		_, err := Dial(context.Background(), host, cfg)
		el := time.Since(t0)
		if err == nil || !strings.Contains(err.Error(), "host "+host+": ssh connect to "+addr+":22: no connection within 1s") {
			t.Errorf("%s: %v", host, err)
		}
		if el < time.Second || el > 2*time.Second {
			t.Errorf("%s: failed after %v, want 1s", host, el)
		}
		t.Logf("%s: %v after %v", host, err, el.Round(time.Millisecond))
	}
	check(c.Net+".50", c.Net+".50") // an unused address of the test /24
	h := c.Hosts[3]
	c.LinkDown(h.Name)
	t.Cleanup(func() { c.LinkUp(h.Name) })
	check(h.Name, h.Addr)
}

// A frozen host accepts the TCP connection but never answers: the handshake
// fails at the timeout; the other hosts are unaffected; thawed, it works.
func testClusterFrozenHost(t *testing.T, c *cluster.Cluster) {
	h1, h2 := c.Hosts[0], c.Hosts[3]
	cfg := clusterConfig(t, c)
	cfg.Timeout = 1500 * time.Millisecond
	c.Freeze(h2.Name)
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			c.Thaw(h2.Name)
		}
	})
	t0 := time.Now()
	_, err := Dial(context.Background(), h2.Name, cfg)
	el := time.Since(t0)
	if err == nil || !strings.Contains(err.Error(), "host "+h2.Name+": ssh handshake with "+h2.Addr+":22: no answer within 1.5s") {
		t.Errorf("frozen: %v", err)
	}
	if el < 1500*time.Millisecond || el > 2500*time.Millisecond {
		t.Errorf("frozen: failed after %v, want 1.5s", el)
	}
	t.Logf("frozen %s: %v after %v", h2.Name, err, el.Round(time.Millisecond))
	if cl, err := Dial(context.Background(), h1.Name, cfg); err != nil {
		t.Errorf("%s while %s is frozen: %v", h1.Name, h2.Name, err)
	} else {
		cl.Close()
	}
	c.Thaw(h2.Name)
	thawed = true
	cl, err := Dial(context.Background(), h2.Name, cfg)
	if err != nil {
		t.Fatalf("thawed: %v", err)
	}
	cl.Close()
}

// Link down under an established connection: keepalives (1 s × 3, the
// defaults) notice it in about 4 s, Done fires and the session ends with an
// error naming the host.
func testClusterLinkDownNoticed(t *testing.T, c *cluster.Cluster) {
	h := c.Hosts[3]
	cl, err := Dial(context.Background(), h.Name, clusterConfig(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s, err := cl.Start("echo $$; exec sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, bufio.NewReader(s.Stdout))
	time.Sleep(1500 * time.Millisecond) // a keepalive or two answered
	c.LinkDown(h.Name)
	t.Cleanup(func() {
		c.LinkUp(h.Name)
		// The command is orphaned on the host (sshd notices the dead
		// connection only after ClientAliveInterval × ClientAliveCountMax).
		if alive(c, h.Name, pid) {
			t.Logf("after the link went down, the remote command (pid %d) still runs: killed", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	t0 := time.Now()
	select {
	case <-cl.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("link down not noticed in 10s")
	}
	el := time.Since(t0)
	if el < 2*time.Second || el > 5500*time.Millisecond {
		t.Errorf("noticed after %v, want about 4s", el)
	}
	werr := s.Wait()
	if !errors.Is(werr, cl.Err()) || !strings.HasPrefix(werr.Error(), "host "+h.Name+": connection lost: no answer to keepalives") {
		t.Errorf("session: %v", werr)
	}
	t.Logf("link down noticed after %v: %v", el.Round(time.Millisecond), werr)
}

// ProxyJump through one and two real jump hosts, while the login node cannot
// reach the destination directly.
func testClusterProxyJump(t *testing.T, c *cluster.Cluster) {
	h1, h2, h3 := c.Hosts[0], c.Hosts[1], c.Hosts[2]
	base, err := os.ReadFile(c.SSHConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(t.TempDir(), "config")
	// aliases PREFIXvia1 and PREFIXvia13 match the cluster's "Host PREFIX*" block
	via1, via13 := c.Prefix+"via1", c.Prefix+"via13"
	writeFile(t, cfgFile, fmt.Sprintf("Host %s\n  HostName %s\n  ProxyJump %s\nHost %s\n  HostName %s\n  ProxyJump %s,root@%s\n%s",
		via1, h2.Addr, h1.Name, via13, h2.Addr, h1.Name, h3.Addr, base))
	cfg := &Config{ConfigFile: cfgFile, HomeDir: t.TempDir(), AgentSocket: "none", Timeout: time.Second}

	c.DropFrom(h2.Name, c.LoginAddr)
	t.Cleanup(func() { c.Heal(h2.Name) })
	if _, err := Dial(context.Background(), h2.Name, cfg); err == nil {
		t.Fatalf("%s reachable directly despite the partition", h2.Name)
	}
	for alias, from := range map[string]cluster.Host{via1: h1, via13: h3} {
		t0 := time.Now()
		cl, err := Dial(context.Background(), alias, cfg)
		if err != nil {
			t.Fatalf("%s: %v", alias, err)
		}
		out, err := cl.Output(context.Background(), `echo "$(hostname) ${SSH_CLIENT%% *}"`)
		if want := h2.Name + " " + from.Addr + "\n"; err != nil || string(out) != want {
			t.Errorf("%s: %q %v, want %q", alias, out, err, want)
		}
		t.Logf("%s: %d jump host(s), connected and ran in %v", alias, len(cl.hops), time.Since(t0).Round(time.Millisecond))
		cl.Close()
	}
}

// What happens to remote commands when jiarun lets go of them, and the
// stdin-EOF watchdog that makes them stop.
func testClusterOrphansAndWatchdog(t *testing.T, c *cluster.Cluster) {
	h := c.Hosts[0]
	cfg := clusterConfig(t, c)
	dialH := func() *Client {
		cl, err := Dial(context.Background(), h.Name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}

	// 1. No watchdog: SSH signals are ignored (root login), and closing the
	// session and then the connection leaves the command running.
	cl := dialH()
	s, err := cl.Start("echo $$; exec sleep 300")
	if err != nil {
		t.Fatal(err)
	}
	pid := readPID(t, bufio.NewReader(s.Stdout))
	if err := s.s.Signal(ssh.SIGTERM); err != nil {
		t.Errorf("Signal: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if !alive(c, h.Name, pid) {
		t.Fatalf("SIGTERM over SSH stopped the command: sshd now honours signals for root; revisit the package docs")
	}
	log, _ := os.ReadFile(filepath.Join(h.Dir, "sshd.log"))
	t.Logf("SSH signal ignored; sshd.log: %q", firstLine(log, "signal"))
	s.Close()
	cl.Close()
	if gone(c, h.Name, pid, time.Second) {
		t.Fatalf("the command died with its session: sshd behaviour changed; revisit the package docs")
	}
	t.Logf("orphan: pid %d (sleep 300) still runs 1s after its session and connection closed", pid)
	syscall.Kill(pid, syscall.SIGKILL)

	// 2. Watchdog: the remote side exits, killing its child, at EOF on stdin.
	const watchdog = `sleep 300 & p=$!; echo $p; while read -r _; do :; done; kill $p; echo "watchdog: EOF, killed $p" >&2`
	cl = dialH()
	defer cl.Close()
	s, err = cl.Start(watchdog)
	if err != nil {
		t.Fatal(err)
	}
	pid = readPID(t, bufio.NewReader(s.Stdout))
	var stderr bytes.Buffer
	errDone := make(chan struct{})
	go func() { io.Copy(&stderr, s.Stderr); close(errDone) }()
	if !alive(c, h.Name, pid) {
		t.Fatalf("child %d not running", pid)
	}
	t0 := time.Now()
	s.Stdin.Close()
	if err := s.Wait(); err != nil {
		t.Errorf("watchdog exit: %v", err)
	}
	<-errDone
	if !gone(c, h.Name, pid, 2*time.Second) || !strings.Contains(stderr.String(), "watchdog: EOF") {
		t.Errorf("stdin closed: child %d alive=%v, stderr %q", pid, alive(c, h.Name, pid), stderr.String())
	}
	t.Logf("stdin closed: child gone after %v", time.Since(t0).Round(time.Millisecond))

	// 3. The connection closes (jiarun exits or drops it): sshd closes the
	// command's stdin, and the watchdog fires.
	cl2 := dialH()
	s, err = cl2.Start(watchdog)
	if err != nil {
		t.Fatal(err)
	}
	pid = readPID(t, bufio.NewReader(s.Stdout))
	t0 = time.Now()
	cl2.Close()
	if !gone(c, h.Name, pid, 2*time.Second) {
		t.Errorf("connection closed: child %d still alive", pid)
	}
	t.Logf("connection closed: child gone after %v", time.Since(t0).Round(time.Millisecond))
}

func firstLine(b []byte, substr string) string {
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}

// Copy puts files on every host: they land in each host's own /tmp and
// home, not the login node's, verified and runnable.
func testClusterCopy(t *testing.T, c *cluster.Cluster) {
	cfg := clusterConfig(t, c)
	data := make([]byte, 8<<20)
	rand.Read(data)
	blob := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	name := "sshc-test-" + strconv.Itoa(os.Getpid())
	for _, p := range []string{"/tmp/" + name, "/root/.cache/" + name} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s exists on the login node before the test", p)
		}
	}
	var wg sync.WaitGroup
	for _, h := range c.Hosts {
		wg.Go(func() {
			cl, err := Dial(context.Background(), h.Name, cfg)
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			t0 := time.Now()
			if err := cl.CopyFile(context.Background(), blob, "/tmp/"+name+"/blob"); err != nil {
				t.Error(err)
				return
			}
			el := time.Since(t0)
			if err := cl.CopyFile(context.Background(), "/bin/true", "~/.cache/"+name+"/true"); err != nil {
				t.Error(err)
				return
			}
			out, err := cl.Output(context.Background(), "~/.cache/"+name+"/true && echo ran on $(hostname)")
			if err != nil || string(out) != "ran on "+h.Name+"\n" {
				t.Errorf("%s: %q %v", h.Name, out, err)
			}
			t.Logf("%s: 8 MiB copied and verified in %v (%d hosts at once)", h.Name, el.Round(time.Millisecond), len(c.Hosts))
		})
	}
	wg.Wait()
	for _, h := range c.Hosts {
		got, err := os.ReadFile(filepath.Join(c.TmpDir(h.Name), name, "blob"))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: copied blob: %d bytes, %v", h.Name, len(got), err)
		}
		if _, err := os.Stat(filepath.Join(c.HomeDir(h.Name), ".cache", name, "true")); err != nil {
			t.Errorf("%s: %v", h.Name, err)
		}
	}
	for _, p := range []string{"/tmp/" + name, "/root/.cache/" + name} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s appeared on the login node: the copy did not go to the hosts", p)
		}
	}
}
