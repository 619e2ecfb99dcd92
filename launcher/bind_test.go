package launcher

import (
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jiarun/jia/internal/cpubind"
	"github.com/jiarun/jia/internal/hostcpu"
	rt "github.com/jiarun/jia/runtime"
)

func allowedCPUs(t *testing.T) []int {
	t.Helper()
	cpus := cpubind.Allowed()
	if len(cpus) == 0 {
		t.Fatal("sched_getaffinity told no processors")
	}
	return cpus
}

func TestCheckBind(t *testing.T) {
	for _, v := range []string{BindAuto, BindCore, BindNone} {
		if err := checkBind(v); err != nil {
			t.Errorf("checkBind(%q): %v", v, err)
		}
	}
	if err := checkBind("socket"); err == nil || !strings.Contains(err.Error(), "--bind-to") {
		t.Errorf("checkBind(socket) = %v, want an error naming --bind-to", err)
	}
}

func TestBindCPU(t *testing.T) {
	cpus := allowedCPUs(t)
	n := len(cpus)
	for k := range n {
		if got := bindCPU(BindAuto, k, n); got != cpus[k] {
			t.Errorf("auto, local rank %d of %d: processor %d, want %d", k, n, got, cpus[k])
		}
		if got := bindCPU(BindNone, k, n); got != -1 {
			t.Errorf("none, local rank %d of %d: processor %d, want -1", k, n, got)
		}
	}
	// More ranks than processors: core deals the processors round-robin;
	// so does auto when every processor gets as many ranks, else it leaves
	// them to the scheduler.
	if got := bindCPU(BindCore, n, n+1); got != cpus[0] {
		t.Errorf("core, local rank %d of %d: processor %d, want %d", n, n+1, got, cpus[0])
	}
	for k := range 2 * n {
		if got := bindCPU(BindAuto, k, 2*n); got != cpus[k%n] {
			t.Errorf("auto, local rank %d of %d: processor %d, want %d", k, 2*n, got, cpus[k%n])
		}
	}
	if n > 1 {
		if got := bindCPU(BindAuto, 0, n+1); got != -1 {
			t.Errorf("auto, %d ranks on %d processors: processor %d, want -1", n+1, n, got)
		}
	}
}

// TestSpawnBound checks that a rank started bound runs on its processor
// only, and that one started unbound may run on all of them.
func TestSpawnBound(t *testing.T) {
	cpus := allowedCPUs(t)
	want := cpus[len(cpus)-1]
	if got := cpusOfChild(t, want); got != strconv.Itoa(want) {
		t.Errorf("rank bound to processor %d runs on %q", want, got)
	}
	if len(cpus) > 1 {
		if got := cpusOfChild(t, -1); got == strconv.Itoa(want) || got == "" {
			t.Errorf("unbound rank runs on %q only", got)
		}
	}
}

// cpusOfChild spawns a shell bound to cpu and returns its
// Cpus_allowed_list.
func cpusOfChild(t *testing.T, cpu int) string {
	t.Helper()
	sp, err := spawn(0, "/bin/sh", []string{"-c", "grep Cpus_allowed_list /proc/self/status"}, nil, "", nil, cpu)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.stderr.Close()
	out, err := io.ReadAll(sp.stdout)
	sp.stdout.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.cmd.Wait(); err != nil {
		t.Fatalf("shell: %v", err)
	}
	_, list, ok := strings.Cut(strings.TrimSpace(string(out)), ":")
	if !ok {
		t.Fatalf("no Cpus_allowed_list in %q", out)
	}
	return strings.TrimSpace(list)
}

// TestRankEnvHostCPUs checks that every rank learns how many processors
// its host's ranks share (a bound rank sees only its own), that a value
// inherited from an enclosing job is replaced, and that the user's own
// setting wins.
func TestRankEnvHostCPUs(t *testing.T) {
	t.Setenv(hostcpu.Env, "97")
	want := hostcpu.Env + "=" + strconv.Itoa(usableCores())
	env := rankEnv(rankBaseEnv(nil), rt.Contract{Rank: 0, Size: 2, LocalSize: 2})
	var got []string
	for _, kv := range env {
		if strings.HasPrefix(kv, hostcpu.Env+"=") {
			got = append(got, kv)
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Errorf("rank environment has %q, want only %q", got, want)
	}
	env = rankEnv(rankBaseEnv([]string{hostcpu.Env + "=3"}), rt.Contract{Rank: 0, Size: 2, LocalSize: 2})
	if !slices.Contains(env, hostcpu.Env+"=3") || slices.Contains(env, want) {
		t.Errorf("the user's %s=3 is not the rank's only value: %q", hostcpu.Env, env)
	}
}
