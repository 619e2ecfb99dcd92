package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// slurmUp starts a single-machine Slurm for the test and stops it after.
// It needs root (the daemons, /etc/slurm) and installs Slurm if missing.
func slurmUp(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: starting a local Slurm (munged, slurmctld, slurmd) needs root")
	}
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
		r := srun(t, "--mpi=pmi2", "-n", "4", hello)
		if r.code != 0 {
			t.Fatalf("want exit 0\n%v", r)
		}
		got := lines(r.stdout)
		sort.Strings(got)
		re := regexp.MustCompile(`^hello from rank (\d) of 4: rank (\d) says "greetings from rank (\d) on .+"$`)
		if len(got) != 4 {
			t.Fatalf("want 4 lines\n%v", r)
		}
		for _, l := range got {
			m := re.FindStringSubmatch(l)
			if m == nil || atoi(m[2]) != (atoi(m[1])+3)%4 || m[2] != m[3] {
				t.Errorf("unexpected line %q", l)
			}
		}
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
	t.Run("srun --mpi=pmix is refused clearly", func(t *testing.T) {
		r := srun(t, "--mpi=pmix", "-n", "2", hello)
		if r.code != 2 || !strings.Contains(r.stderr, "started by srun --mpi=pmix: jiarun programs use PMI-2") {
			t.Fatalf("want exit 2 and advice to use --mpi=pmi2\n%v", r)
		}
	})
}
