package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// slurmLock serialises the tests, in any number of test processes, that
// bring up the single-machine Slurm: it has fixed global names (/etc/slurm,
// /run/munge, ports 6817 and 6818).
const slurmLock = "/var/tmp/jiarun-slurm.lock"

// lockSlurm takes slurmLock, waiting while another test process holds it,
// and releases it when the test ends.
func lockSlurm(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(slurmLock, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("slurm lock: %v", err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		t.Logf("waiting for %s: another test process is using the single-machine Slurm", slurmLock)
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		f.Close()
		t.Fatalf("slurm lock %s: %v", slurmLock, err)
	}
	t.Cleanup(func() { f.Close() }) // closing the last descriptor releases the lock
}

// slurmUp starts a single-machine Slurm for the test and stops it after.
// It needs root (the daemons, /etc/slurm) and installs Slurm if missing.
// Concurrent test processes take turns (lockSlurm).
func slurmUp(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: starting a local Slurm (munged, slurmctld, slurmd) needs root")
	}
	lockSlurm(t)
	script := func(name string) *exec.Cmd {
		cmd := exec.Command("bash", filepath.Join(repoRoot, "e2e", "slurm", name))
		cmd.Env = append(os.Environ(), "CPUS=4")
		return cmd
	}
	script("down.sh").Run()
	if out, err := script("up.sh").CombinedOutput(); err != nil {
		script("down.sh").Run()
		t.Fatalf("slurm up: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := script("down.sh").CombinedOutput(); err != nil {
			t.Errorf("slurm down: %v\n%s", err, out)
		}
	})
}

func srun(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command("timeout", append([]string{"60", "srun"}, args...)...)
	cmd.Dir = binDir
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("srun %v: %v", args, err)
	}
	return result{code, so.String(), se.String()}
}

// TestSlurm runs jiarun programs under a real Slurm without jiarun: srun
// --mpi=pmi2 gives them PMI-2, which they use for the same rendezvous.
func TestSlurm(t *testing.T) {
	slurmUp(t)
	t.Run("srun --mpi=pmi2 hello", func(t *testing.T) {
		checkHelloN(t, srun(t, "--mpi=pmi2", "-n", "4", hello), 4)
	})
	t.Run("srun --mpi=pmi2 ring of 1 MiB messages", func(t *testing.T) {
		r := srun(t, "--mpi=pmi2", "-n", "3", rankprog, "ring", "1048576", "4")
		if r.code != 0 || len(lines(r.stdout)) != 3 {
			t.Fatalf("want 3 ring ok lines and exit 0\n%v", r)
		}
	})
	t.Run("jiarun inside salloc uses the allocation", func(t *testing.T) {
		cmd := exec.Command("timeout", "60", "salloc", "-n", "4", jiarun, "--tag-output", hello)
		cmd.Dir = binDir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("salloc jiarun: %v\n%s", err, out)
		}
		if n := len(lines(string(out))); n != 4 {
			t.Fatalf("jiarun without -np in a 4-task allocation started %d ranks\n%s", n, out)
		}
		cmd = exec.Command("timeout", "60", "salloc", "-n", "2", jiarun, "-np", "3", hello)
		cmd.Dir = binDir
		b, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !regexp.MustCompile(`-np 3 exceeds the 2 slots of Slurm job \d+`).Match(b) {
			t.Fatalf("want exit 2 naming the allocation's slots: %v\n%s", err, b)
		}
	})
	t.Run("ep class S: srun --mpi=pmi2 and jiarun inside salloc", func(t *testing.T) {
		ep := filepath.Join(binDir, "ep")
		r := srun(t, "--mpi=pmi2", "-n", "4", ep, "-class", "S")
		if r.code != 0 || !verifiedRe.MatchString(r.stdout) || !strings.Contains(r.stdout, "Total processes =                        4") {
			t.Fatalf("srun --mpi=pmi2 -n 4 ep: want a verified 4-process run\n%v", r)
		}
		cmd := exec.Command("timeout", "60", "salloc", "-n", "4", jiarun, ep, "-class", "S")
		cmd.Dir = binDir
		out, err := cmd.CombinedOutput()
		if err != nil || !verifiedRe.Match(out) {
			t.Fatalf("salloc -n 4 jiarun ep: %v\n%s", err, out)
		}
	})
	t.Run("srun without --mpi is refused clearly", func(t *testing.T) {
		r := srun(t, "-n", "2", hello)
		if r.code != 2 || !strings.Contains(r.stderr, "without a process-management interface") || !strings.Contains(r.stderr, "srun --mpi=pmi2") {
			t.Fatalf("want exit 2 and advice to use --mpi=pmi2\n%v", r)
		}
	})
	t.Run("srun --mpi=pmix of a default build is refused clearly", func(t *testing.T) {
		r := srun(t, "--mpi=pmix", "-n", "2", hello)
		if r.code != 2 || !strings.Contains(r.stderr, "built without PMIx support") ||
			!strings.Contains(r.stderr, "CGO_ENABLED=1 go build -tags pmix") || !strings.Contains(r.stderr, "srun --mpi=pmi2") {
			t.Fatalf("want exit 2 naming both fixes (rebuild with -tags pmix, or srun --mpi=pmi2)\n%v", r)
		}
	})
	t.Run("srun --mpi=pmix of a build with -tags pmix", func(t *testing.T) {
		dir := buildPMIx(t)
		t.Run("hello", func(t *testing.T) {
			checkHelloN(t, srun(t, "--mpi=pmix", "-n", "4", filepath.Join(dir, "hello")), 4)
		})
		t.Run("ep class S", func(t *testing.T) {
			r := srun(t, "--mpi=pmix", "-n", "4", filepath.Join(dir, "ep"), "-class", "S")
			if r.code != 0 || !verifiedRe.MatchString(r.stdout) || !strings.Contains(r.stdout, "Total processes =                        4") {
				t.Fatalf("srun --mpi=pmix -n 4 ep: want a verified 4-process run\n%v", r)
			}
		})
		t.Run("a rank's abort ends the step with its code", func(t *testing.T) {
			// Rank 1 aborts with code 3 once every rank is up; the others
			// would wait forever. PMIx_Abort ends them, and srun exits with
			// the abort's status. (Slurm would also end the step when rank 1
			// just vanished, but then srun exits 137.)
			r := srun(t, "--mpi=pmix", "-n", "4", filepath.Join(dir, "rankprog"), "abort", "1", "3")
			if r.code != 3 || !strings.Contains(r.stderr, "task 1: Exited with exit code 3") ||
				!strings.Contains(r.stderr, "rank 1: abort (code 3)") {
				t.Fatalf("want the step to fail with exit 3, naming task 1\n%v", r)
			}
			noneRunning(t, dir)
		})
	})
}

// checkHelloN checks hello's output: every one of n ranks reports the
// greeting of its left neighbour, and the step succeeded.
func checkHelloN(t *testing.T, r result, n int) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	got := lines(r.stdout)
	sort.Strings(got)
	re := regexp.MustCompile(`^hello from rank (\d+) of ` + strconv.Itoa(n) + `: rank (\d+) says "greetings from rank (\d+) on .+"$`)
	if len(got) != n {
		t.Fatalf("want %d lines\n%v", n, r)
	}
	seen := map[string]bool{}
	for _, l := range got {
		m := re.FindStringSubmatch(l)
		if m == nil || atoi(m[2]) != (atoi(m[1])+n-1)%n || m[2] != m[3] || seen[m[1]] {
			t.Errorf("unexpected line %q", l)
			continue
		}
		seen[m[1]] = true
	}
}

// buildPMIx builds hello, ep and rankprog with the PMIx client (cgo, build
// tag pmix) into a directory of their own, and returns it.
func buildPMIx(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(binDir, "pmix")
	for out, pkg := range map[string]string{"hello": "./apps/hello", "ep": "./apps/ep", "rankprog": "./e2e/rankprog"} {
		cmd := exec.Command("go", "build", "-tags", "urfave_cli_no_docs pmix", "-o", filepath.Join(dir, out), pkg)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("CGO_ENABLED=1 go build -tags pmix %s (needs the PMIx development files, Debian's libpmix-dev): %v\n%s", pkg, err, b)
		}
	}
	return dir
}

// noneRunning fails the test unless, soon after a step ended, no process
// runs one of the programs in dir. (The wait is a guard against hanging, not
// a timing requirement: Slurm reaps its steps in its own time.)
func noneRunning(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []string
		for _, e := range ents {
			for _, pid := range procsOf(filepath.Join(dir, e.Name())) {
				left = append(left, fmt.Sprintf("pid %d: %s", pid, e.Name()))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running after the step ended:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
