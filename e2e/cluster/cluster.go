// Package cluster gives tests a cluster of real SSH hosts on this machine.
//
// Up brings up N hosts, each a network namespace with its own address on a
// private test /24 (10.77.X.0/24), its own sshd on port 22 with generated host
// keys and one authorized client key, its own hostname, and its own /tmp and
// /root. The root namespace is the login node (address 10.77.X.1 on the
// bridge). The namespaces have no default route, so test traffic cannot leave
// the machine. The cluster is torn down by t.Cleanup, also when the test
// fails; a cluster left behind by a killed test binary is reclaimed by the
// next Up that picks the same slot.
//
// The work is done by the shell scripts beside this file, which are usable by
// hand as well:
//
//	sudo JH_N=3 e2e/cluster/up.sh      # hosts jh1..jh3 = 10.77.0.11..13
//	ssh -F /var/tmp/jiarun-cluster/jh/ssh_config jh2 hostname
//	sudo e2e/cluster/fault.sh jh2 freeze|thaw|down|up|loss 5|heal
//	sudo e2e/cluster/down.sh
//
// Several clusters can be up at once (tests of different packages run in
// parallel): each Up takes a free slot k, prefix "jh" (k=0), "jhb" (k=1),
// "jhc", … and subnet 10.77.k.0/24. A slot is held by listening on the
// abstract unix socket "@jiarun-cluster-PREFIX" for the cluster's lifetime,
// so it is freed when the test binary ends, however it ends, and leaves no
// file behind. A cluster left in a free slot by a killed test binary is torn
// down by the next Up; one brought up by hand (up.sh) is left alone, and
// Up takes another slot.
//
// Creating namespaces needs root: Up skips the test otherwise.
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StateRoot is the directory holding every cluster's state directory. It
// must not be under /tmp, which each host replaces with its own.
const StateRoot = "/var/tmp/jiarun-cluster"

// MaxSlots is how many clusters can be up at the same time.
const MaxSlots = 8

// testOwner marks, in a state directory, a cluster brought up by Up.
const testOwner = "go-test"

// Host is one host of a cluster.
type Host struct {
	Name string // namespace name, hostname and ssh_config alias, e.g. "jh2"
	Addr string // its IPv4 address, e.g. "10.77.0.12"; sshd listens on Addr:22
	Dir  string // its state directory; Dir/tmp is its /tmp, Dir/home its /root
}

// Cluster is a running test cluster. Its fields are read-only.
type Cluster struct {
	Prefix     string // host name prefix, e.g. "jh"
	Net        string // first three octets of the subnet, e.g. "10.77.0"
	LoginAddr  string // the login node's (root namespace's) address on the bridge
	Hosts      []Host
	State      string // state directory
	KeyFile    string // private client key, authorized on every host (user root)
	KnownHosts string // known_hosts listing every host's ed25519 key as "ADDR,NAME ssh-ed25519 ..."
	SSHConfig  string // ssh_config with a Host alias per host (HostName, User, IdentityFile, UserKnownHostsFile)

	tb       testing.TB
	lock     net.Listener // the slot
	downOnce sync.Once
}

// Proc is a process running on a host.
type Proc struct {
	PID   int
	PPID  int
	State string // "R", "S", "T" (stopped), … from /proc/PID/stat; zombies are not listed
	Args  []string
}

// String is "PID STATE ARGS…".
func (p Proc) String() string {
	return fmt.Sprintf("%d %s %s", p.PID, p.State, strings.Join(p.Args, " "))
}

// scriptDir is the directory of up.sh, down.sh and fault.sh (beside this file).
func scriptDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "."
	}
	return filepath.Dir(file)
}

// Up brings up a cluster of n hosts and registers its teardown with
// tb.Cleanup. It skips the test when not running as root.
func Up(tb testing.TB, n int) *Cluster {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipped: needs root to create network namespaces")
	}
	if n < 1 || n > 200 {
		tb.Fatalf("cluster.Up: %d hosts: want 1..200", n)
	}
	lock, slot, err := takeSlot()
	if err != nil {
		tb.Fatalf("cluster.Up: %v", err)
	}
	prefix := slotPrefix(slot)
	c := &Cluster{
		Prefix:    prefix,
		Net:       fmt.Sprintf("10.77.%d", slot),
		State:     filepath.Join(StateRoot, prefix),
		tb:        tb,
		lock:      lock,
		LoginAddr: fmt.Sprintf("10.77.%d.1", slot),
	}
	c.KeyFile = filepath.Join(c.State, "id_ed25519")
	c.KnownHosts = filepath.Join(c.State, "known_hosts")
	c.SSHConfig = filepath.Join(c.State, "ssh_config")
	tb.Cleanup(c.Down)

	// A cluster left in this slot by a killed test binary: remove it first.
	if out, err := c.script("down.sh"); err != nil {
		tb.Fatalf("cluster.Up: clearing slot %s: %v\n%s", prefix, err, out)
	}
	t0 := time.Now()
	out, err := c.script("up.sh", "JH_N="+strconv.Itoa(n), "JH_OWNER="+testOwner)
	if err != nil {
		tb.Fatalf("cluster.Up: up.sh: %v\n%s", err, out)
	}
	if err := c.readHosts(); err != nil {
		tb.Fatalf("cluster.Up: %v\nup.sh said:\n%s", err, out)
	}
	if len(c.Hosts) != n {
		tb.Fatalf("cluster.Up: want %d hosts, up.sh listed %d:\n%s", n, len(c.Hosts), out)
	}
	tb.Logf("cluster %s: %d hosts up in %v (%s to %s)", prefix, n, time.Since(t0).Round(time.Millisecond),
		c.Hosts[0].Addr, c.Hosts[n-1].Addr)
	return c
}

func slotPrefix(slot int) string {
	if slot == 0 {
		return "jh"
	}
	return "jh" + string(rune('a'+slot))
}

// takeSlot takes the first free slot: one whose lock is free and which is
// not a cluster brought up by hand.
func takeSlot() (net.Listener, int, error) {
	for slot := range MaxSlots {
		prefix := slotPrefix(slot)
		ln, err := net.Listen("unix", "@jiarun-cluster-"+prefix)
		if err != nil {
			continue // held by a live test binary
		}
		if _, err := net.InterfaceByName(prefix + "br0"); err == nil {
			owner, _ := os.ReadFile(filepath.Join(StateRoot, prefix, "owner"))
			if strings.TrimSpace(string(owner)) != testOwner {
				ln.Close() // someone's cluster, up by hand
				continue
			}
		}
		return ln, slot, nil
	}
	return nil, 0, fmt.Errorf("all %d cluster slots are in use", MaxSlots)
}

// script runs one of the scripts with the cluster's settings.
func (c *Cluster) script(name string, env ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // up.sh may apt-get install
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(scriptDir(), name))
	cmd.Env = append(os.Environ(), "JH_PREFIX="+c.Prefix, "JH_NET="+c.Net, "JH_STATE="+c.State)
	cmd.Env = append(cmd.Env, env...)
	return cmd.CombinedOutput()
}

func (c *Cluster) readHosts() error {
	b, err := os.ReadFile(filepath.Join(c.State, "hosts"))
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		c.Hosts = append(c.Hosts, Host{Name: f[0], Addr: f[1], Dir: filepath.Join(c.State, f[0])})
	}
	return sc.Err()
}

// Down tears the cluster down: every process on every host is killed, and
// the namespaces, bridge and state directory are removed. Up registers it
// with Cleanup; calling it earlier is fine, and later calls do nothing.
func (c *Cluster) Down() {
	c.downOnce.Do(func() {
		t0 := time.Now()
		out, err := c.script("down.sh")
		if err != nil {
			c.tb.Errorf("cluster %s: down.sh: %v\n%s", c.Prefix, err, out)
		} else {
			c.tb.Logf("cluster %s: down in %v", c.Prefix, time.Since(t0).Round(time.Millisecond))
		}
		c.lock.Close() // frees the slot
	})
}

// Host returns the host with the given name; it fails the test if there is none.
func (c *Cluster) Host(name string) Host {
	c.tb.Helper()
	for _, h := range c.Hosts {
		if h.Name == name {
			return h
		}
	}
	c.tb.Fatalf("cluster %s: no host %q", c.Prefix, name)
	return Host{}
}

// Names returns the host names in order ("jh1", "jh2", …).
func (c *Cluster) Names() []string {
	names := make([]string, len(c.Hosts))
	for i, h := range c.Hosts {
		names[i] = h.Name
	}
	return names
}

// TmpDir is where the host's /tmp is, seen from the login node.
func (c *Cluster) TmpDir(host string) string { return filepath.Join(c.Host(host).Dir, "tmp") }

// HomeDir is where the host's /root ($HOME) is, seen from the login node.
func (c *Cluster) HomeDir(host string) string { return filepath.Join(c.Host(host).Dir, "home") }

func (c *Cluster) fault(host string, args ...string) {
	c.tb.Helper()
	c.Host(host) // fails the test for an unknown host
	cmd := exec.Command(filepath.Join(scriptDir(), "fault.sh"), append([]string{host}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		c.tb.Fatalf("cluster %s: fault.sh %s %s: %v\n%s", c.Prefix, host, strings.Join(args, " "), err, out)
	}
}

// Freeze stops every process of the host with SIGSTOP, sshd included: the
// kernel still accepts TCP connections, but nothing answers. It returns
// once every process is seen stopped: a signal takes effect only when its
// process next runs, which on a busy machine may be a while.
func (c *Cluster) Freeze(host string) {
	c.tb.Helper()
	c.fault(host, "freeze")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		running := ""
		for _, p := range c.Procs(host) {
			if p.State != "T" {
				running = fmt.Sprint(p)
			}
		}
		if running == "" {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("cluster %s: froze %s, but %s is still not stopped after 10s", c.Prefix, host, running)
		}
	}
}

// Thaw resumes the processes Freeze stopped.
func (c *Cluster) Thaw(host string) { c.tb.Helper(); c.fault(host, "thaw") }

// LinkDown takes the host's link down: its packets vanish without an error.
func (c *Cluster) LinkDown(host string) { c.tb.Helper(); c.fault(host, "down") }

// LinkUp brings the host's link back.
func (c *Cluster) LinkUp(host string) { c.tb.Helper(); c.fault(host, "up") }

// Loss drops pct percent of the host's packets at random, in each direction
// (nftables numgen; there is no netem here). Loss(host, 0) removes it.
func (c *Cluster) Loss(host string, pct int) {
	c.tb.Helper()
	c.fault(host, "loss", strconv.Itoa(pct))
}

// Reject makes the host answer new connections to port 22 with a TCP reset.
func (c *Cluster) Reject(host string) { c.tb.Helper(); c.fault(host, "reject") }

// DropFrom makes the host drop every packet from addr (a one-way partition).
func (c *Cluster) DropFrom(host, addr string) { c.tb.Helper(); c.fault(host, "drop-from", addr) }

// Heal removes the host's packet faults (Loss, Reject, DropFrom).
func (c *Cluster) Heal(host string) { c.tb.Helper(); c.fault(host, "heal") }

// Procs lists the processes running on the host (in its network namespace),
// zombies excepted, found through /proc as `ip netns pids` does.
func (c *Cluster) Procs(host string) []Proc {
	c.tb.Helper()
	procs, err := Procs(host)
	if err != nil {
		c.tb.Fatalf("cluster %s: %v", c.Prefix, err)
	}
	return procs
}

// Procs lists the processes in the named network namespace (/run/netns/NAME),
// zombies excepted.
func Procs(netns string) ([]Proc, error) {
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", netns), &want); err != nil {
		return nil, fmt.Errorf("host %s: %w", netns, err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var procs []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		// A zombie's namespace links cannot be followed, so it drops out here.
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			continue
		}
		p, ok := readProc(pid)
		if ok && p.State != "Z" {
			procs = append(procs, p)
		}
	}
	return procs, nil
}

func readProc(pid int) (Proc, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Proc{}, false
	}
	// "pid (comm) S ppid ...": comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return Proc{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return Proc{}, false
	}
	p := Proc{PID: pid, State: f[0]}
	p.PPID, _ = strconv.Atoi(f[1])
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if s := strings.TrimRight(string(cmdline), "\x00"); s != "" {
		p.Args = strings.Split(s, "\x00")
	}
	return p, true
}

// Exec runs a command on the host directly (not over SSH), in the namespaces
// of its sshd (network, mount, hostname), and returns its combined output.
func (c *Cluster) Exec(host string, args ...string) ([]byte, error) {
	c.tb.Helper()
	h := c.Host(host)
	pidb, err := os.ReadFile(filepath.Join(h.Dir, "sshd.pid"))
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nsargs := []string{"-t", strings.TrimSpace(string(pidb)), "-n", "-m", "-u", "--"}
	return exec.CommandContext(ctx, "nsenter", append(nsargs, args...)...).CombinedOutput()
}

// Addr returns host:22 for the named host.
func (c *Cluster) Addr(host string) string {
	c.tb.Helper()
	return net.JoinHostPort(c.Host(host).Addr, "22")
}
