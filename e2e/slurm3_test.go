package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jiarun/jia/e2e/cluster"
)

// slurm3StateRoot holds the state directory of each multi-node Slurm, one
// per cluster prefix (e2e/slurm/up3.sh). It is not the single-machine
// Slurm's (e2e/slurm/up.sh), which can be up at the same time.
const slurm3StateRoot = "/var/tmp/jiarun-slurm3"

// slurm3 is a real Slurm over the hosts of a test cluster: slurmctld and
// munged on the login node, one slurmd per host (e2e/slurm/up3.sh).
type slurm3 struct {
	c     *cluster.Cluster
	state string   // its state directory
	conf  string   // its slurm.conf
	env   []string // the environment of Slurm's commands: ours plus SLURM_CONF
	work  string   // a directory every host sees (not under /tmp), with the programs
}

// slurm3Up brings up a Slurm on the cluster's hosts and registers its
// teardown, which also checks that nothing of it is left.
func slurm3Up(t *testing.T, c *cluster.Cluster) *slurm3 {
	t.Helper()
	s := &slurm3{c: c, state: filepath.Join(slurm3StateRoot, c.Prefix)}
	s.conf = filepath.Join(s.state, "slurm.conf")
	// Slurm's commands must not take this process's environment for a job of
	// another Slurm (a test run inside an allocation).
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "PMI_") && !strings.HasPrefix(kv, "PMIX_") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, "SLURM_CONF="+s.conf)
	// A Slurm left on this cluster slot by a killed test binary goes first.
	if out, err := s.script("down3.sh"); err != nil {
		t.Fatalf("slurm3: clearing %s: %v\n%s", s.state, err, out)
	}
	t.Cleanup(func() { s.down(t) })
	t0 := time.Now()
	out, err := s.script("up3.sh")
	if err != nil {
		t.Fatalf("slurm3: up3.sh: %v\n%s", err, out)
	}
	t.Logf("slurm3: slurmctld, munged and %d slurmd up in %v\n%s", len(c.Hosts), time.Since(t0).Round(time.Millisecond), out)

	// The programs, where every host sees them (each host has its own /tmp).
	s.work = filepath.Join(s.state, "work")
	if err := os.MkdirAll(s.work, 0o755); err != nil {
		t.Fatalf("slurm3: %v", err)
	}
	for _, p := range []string{jiarun, hello, rankprog, filepath.Join(binDir, "ep")} {
		b, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(s.work, filepath.Base(p)), b, 0o755)
		}
		if err != nil {
			t.Fatalf("slurm3: copying %s where every host sees it: %v", filepath.Base(p), err)
		}
	}
	return s
}

// script runs e2e/slurm/NAME for this Slurm. The hosts are the cluster's,
// brought up and down by cluster.Up.
func (s *slurm3) script(name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // up3.sh may apt-get install
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot, "e2e", "slurm", name))
	cmd.Env = append(os.Environ(), "JH_PREFIX="+s.c.Prefix, "JH_STATE="+s.c.State,
		"SL_STATE="+s.state, "SL_KEEP_CLUSTER=1")
	return cmd.CombinedOutput()
}

// down stops the Slurm and checks that none of it is left: no process of it
// anywhere (daemons, step daemons, jobs), and no state directory.
func (s *slurm3) down(t *testing.T) {
	t0 := time.Now()
	if out, err := s.script("down3.sh"); err != nil {
		t.Errorf("slurm3: down3.sh: %v\n%s", err, out)
	}
	if left := s.procs(nil); len(left) > 0 {
		t.Errorf("slurm3: still running after down3.sh:\n%s", strings.Join(left, "\n"))
	}
	for _, h := range s.c.Names() {
		for _, p := range s.c.Procs(h) {
			if !strings.HasPrefix(strings.Join(p.Args, " "), "sshd:") {
				t.Errorf("slurm3: still running on %s after down3.sh: %v", h, p)
			}
		}
	}
	if _, err := os.Stat(s.state); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("slurm3: %s is still there after down3.sh (%v)", s.state, err)
	}
	t.Logf("slurm3: down in %v", time.Since(t0).Round(time.Millisecond))
}

// procs lists the live processes of this Slurm on any host or the login
// node: those naming its state directory (the daemons) and those started
// under it (with its SLURM_CONF: salloc, srun, jobs, ranks), except the
// ones keep accepts.
func (s *slurm3) procs(keep func(args []string) bool) []string {
	mark := []byte("SLURM_CONF=" + s.conf + "\x00")
	ents, _ := os.ReadDir("/proc")
	var left []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if len(cmdline) == 0 { // a zombie, or a kernel thread
			continue
		}
		if !bytes.Contains(cmdline, []byte(s.state)) && !bytes.Contains(environ, mark) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if keep != nil && keep(args) {
			continue
		}
		left = append(left, fmt.Sprintf("%d %s", pid, strings.Join(args, " ")))
	}
	return left
}

// isDaemon tells this Slurm's daemons from everything else.
func isDaemon(args []string) bool {
	switch filepath.Base(args[0]) {
	case "slurmctld", "slurmd", "munged":
		return true
	}
	return strings.HasPrefix(args[0], "slurmctld:") // its slurmscriptd
}

// nothingLeft fails the test unless, soon after a job, nothing runs on any
// host but its sshd and slurmd, and nothing started under this Slurm runs
// on the login node. (The wait is a guard against hanging, not a timing
// requirement: Slurm reaps its step daemons in its own time.)
func (s *slurm3) nothingLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		for _, h := range s.c.Names() {
			for _, p := range s.c.Procs(h) {
				if len(p.Args) > 0 && (strings.HasPrefix(p.Args[0], "sshd:") || isDaemon(p.Args)) {
					continue
				}
				left = append(left, h+": "+p.String())
			}
		}
		left = append(left, s.procs(isDaemon)...)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running after the job ended:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// run runs a Slurm command (salloc, srun, sbatch…) in the shared directory.
// A command that hangs is stopped with SIGTERM, so that salloc gives its
// allocation back.
func (s *slurm3) run(t *testing.T, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	cmd.Dir = s.work
	cmd.Env = s.env
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %s: still running after 90 s\n%v", name, strings.Join(args, " "), r)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return r
}

// jobID is the allocation salloc reports having been granted.
func jobID(t *testing.T, r result) string {
	t.Helper()
	m := regexp.MustCompile(`Granted job allocation (\d+)`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("salloc did not report its job\n%v", r)
	}
	return m[1]
}

// checkHello checks the 6 lines of hello on 3 hosts × 2 slots (jiarun over
// SSH or Slurm): each greeting from the left neighbour, rank r on hosts[r/2].
func checkHello(t *testing.T, r result, hosts []string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	re := regexp.MustCompile(`^hello from rank (\d) of 6: rank (\d) says "greetings from rank (\d) on (\S+)"$`)
	got := lines(r.stdout)
	if len(got) != 6 {
		t.Fatalf("want 6 greetings, got %d lines\n%v", len(got), r)
	}
	seen := map[int]bool{}
	for _, l := range got {
		m := re.FindStringSubmatch(l)
		if m == nil || atoi(m[2]) != (atoi(m[1])+5)%6 || m[2] != m[3] {
			t.Fatalf("unexpected line %q\n%v", l, r)
		}
		rank := atoi(m[3])
		if want := hosts[rank/2]; m[4] != want {
			t.Errorf("rank %d ran on %s, want %s", rank, m[4], want)
		}
		seen[rank] = true
	}
	if len(seen) != 6 {
		t.Fatalf("want greetings from 6 ranks, got %d\n%v", len(seen), r)
	}
}

// checkEP checks that ep class S verified with 6 processes.
func checkEP(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 || !verifiedRe.MatchString(r.stdout) || !regexp.MustCompile(`Total processes\s*=\s*6\n`).MatchString(r.stdout) {
		t.Fatalf("ep class S: want exit 0 and a verified 6-process run\n%v", r)
	}
}

// TestSlurm3 runs jiarun programs under a real Slurm of three hosts (network
// namespaces with their own address, hostname, /tmp and home; a slurmd on
// each): jiarun inside salloc, which starts one proxy per node with srun and
// stages the programs to each node, and srun --mpi=pmi2 without jiarun, where
// the ranks bootstrap over PMI-2 across the nodes. A failed rank must stop the
// job on every node, and every node's process table is checked after each
// job. Root only: without root the test is skipped.
func TestSlurm3(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: a Slurm of network-namespace hosts needs root")
	}
	c := cluster.Up(t, 3)
	s := slurm3Up(t, c)
	hosts := c.Names()
	salloc := []string{"-N", "3", "--ntasks-per-node=2"}

	t.Run("jiarun hello inside salloc -N 3: one proxy per node, started by srun", func(t *testing.T) {
		r := s.run(t, "salloc", append(salloc, "./jiarun", "./hello")...)
		checkHello(t, r, hosts)
		job := jobID(t, r)
		for _, h := range hosts {
			// jiarun and the program were staged to the node's own home.
			for _, pat := range []string{"jiarun-*", "prog-*-hello"} {
				if m, _ := filepath.Glob(filepath.Join(c.HomeDir(h), ".cache", "jiarun", pat)); len(m) != 1 {
					t.Errorf("%s: staged %s not in the node's own cache", h, pat)
				}
			}
			// Exactly one step (the proxy) of the job was launched on the node.
			log, err := os.ReadFile(filepath.Join(s.state, "slurmd-"+h+".log"))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(log), "launch task StepId="+job+"."); n != 1 {
				t.Errorf("%s: %d steps of job %s launched, want 1 (its proxy)", h, n, job)
			}
		}
		s.nothingLeft(t)
	})

	t.Run("jiarun --fanout 1 inside salloc -N 3: proxies start proxies with srun", func(t *testing.T) {
		// A chain: the proxy srun started on the first node runs srun
		// itself (a step from inside a step) to start the second, and so on.
		r := s.run(t, "salloc", append(salloc, "./jiarun", "--fanout", "1", "./hello")...)
		checkHello(t, r, hosts)
		s.nothingLeft(t)
	})

	t.Run("jiarun ep class S inside salloc -N 3", func(t *testing.T) {
		checkEP(t, s.run(t, "salloc", append(salloc, "./jiarun", "./ep", "-class", "S")...))
		s.nothingLeft(t)
	})

	t.Run("srun --mpi=pmi2 -N 3 -n 6 without jiarun: hello and ep class S", func(t *testing.T) {
		checkHello(t, s.run(t, "srun", "--mpi=pmi2", "-N", "3", "-n", "6", "./hello"), hosts)
		checkEP(t, s.run(t, "srun", "--mpi=pmi2", "-N", "3", "-n", "6", "./ep", "-class", "S"))
		s.nothingLeft(t)
	})

	t.Run("a rank killed on one node stops jiarun's job on every node", func(t *testing.T) {
		r := s.run(t, "salloc", append(salloc, "./jiarun", "./rankprog", "signal", "3", "9")...)
		if r.code != 137 {
			t.Fatalf("want exit 137\n%v", r)
		}
		if !regexp.MustCompile(`rank 3 \(pid \d+ on ` + hosts[1] + `\) was killed by signal 9`).MatchString(r.stderr) {
			t.Errorf("message does not name rank 3 on %s\n%v", hosts[1], r)
		}
		s.nothingLeft(t)
	})

	t.Run("a rank killed on one node stops srun's job on every node", func(t *testing.T) {
		// Without jiarun, stopping the others is Slurm's job: --kill-on-bad-exit.
		r := s.run(t, "srun", "--mpi=pmi2", "--kill-on-bad-exit=1", "-N", "3", "-n", "6", "./rankprog", "signal", "3", "9")
		if r.code == 0 || !strings.Contains(r.stderr, hosts[1]+": task 3: Killed") {
			t.Fatalf("want a failed step naming task 3 on %s\n%v", hosts[1], r)
		}
		s.nothingLeft(t)
	})

	t.Run("jiarun in a batch job, on the first node of its allocation", func(t *testing.T) {
		out := filepath.Join(s.work, "batch.out")
		r := s.run(t, "sbatch", "--parsable", "-N", "3", "--ntasks-per-node=2", "-o", out, "--wrap", "./jiarun ./hello")
		if r.code != 0 {
			t.Fatalf("sbatch: %v", r)
		}
		job := strings.TrimSpace(r.stdout)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			if q := s.run(t, "squeue", "-h", "-j", job, "-o", "%i"); q.code != 0 || strings.TrimSpace(q.stdout) == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("batch job %s still queued or running after a minute", job)
			}
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		checkHello(t, result{stdout: string(b)}, hosts)
		s.nothingLeft(t)
	})

	if t.Failed() {
		logs := []string{"slurmctld.log"}
		for _, h := range hosts {
			logs = append(logs, "slurmd-"+h+".log")
		}
		for _, f := range logs {
			if b, err := os.ReadFile(filepath.Join(s.state, f)); err == nil {
				t.Logf("%s:\n%s", f, b)
			}
		}
	}
}
