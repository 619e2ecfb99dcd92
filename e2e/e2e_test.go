// Package e2e runs the real jiarun binary on real rank programs and checks
// what a user sees: output, exit codes, messages, and that nothing is left
// running afterwards (checked in the process table, not assumed).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	binDir   string // built binaries
	jiarun   string
	hello    string
	rankprog string
	repoRoot string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jiarun-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	repoRoot, _ = filepath.Abs("..")
	jiarun = filepath.Join(dir, "jiarun")
	hello = filepath.Join(dir, "hello")
	rankprog = filepath.Join(dir, "rankprog")
	dsmcheck, piProg, counter = filepath.Join(dir, "dsmcheck"), filepath.Join(dir, "pi"), filepath.Join(dir, "dsmcounter")
	sorProg, mmProg, luProg = filepath.Join(dir, "sor"), filepath.Join(dir, "mm"), filepath.Join(dir, "lu")
	tspProg, dsmepProg, dsmisProg = filepath.Join(dir, "tsp"), filepath.Join(dir, "dsmep"), filepath.Join(dir, "dsmis")
	builds := map[string]string{jiarun: "./cmd/jiarun", hello: "./apps/hello", rankprog: "./e2e/rankprog",
		dsmcheck: "./apps/dsmcheck", piProg: "./apps/pi", counter: "./apps/dsmcounter",
		sorProg: "./apps/sor", mmProg: "./apps/mm", luProg: "./apps/lu",
		tspProg: "./apps/tsp", dsmepProg: "./apps/dsmep", dsmisProg: "./apps/dsmis"}
	for _, k := range nasKernels {
		builds[filepath.Join(dir, k)] = "./apps/" + k
	}
	// Every program once, non-race (the race detector covers the tests).
	for out, pkg := range builds {
		cmd := exec.Command("go", "build", "-tags", "urfave_cli_no_docs", "-o", out, pkg)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, b)
			os.Exit(1)
		}
	}
	// Proxies started by the test launch agent get per-host homes here.
	os.Setenv("LOCAL_AGENT_ROOT", filepath.Join(dir, "hosts"))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// nasKernels are the bundled NAS kernels, built into binDir.
var nasKernels = []string{"ep", "is", "cg", "mg", "ft"}

// result is a finished jiarun run.
type result struct {
	code           int
	stdout, stderr string
}

// run runs jiarun with args and waits up to a minute.
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, jiarun, args...)
	cmd.Dir = binDir
	cmd.Stdin = strings.NewReader(stdin)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("jiarun %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("jiarun %v: did not finish within a minute\nstdout:\n%s\nstderr:\n%s", args, so.String(), se.String())
	}
	return result{code, so.String(), se.String()}
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// procsOf returns the live (non-zombie) processes running the binary exe.
func procsOf(exe string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || (link != exe && link != exe+" (deleted)") {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitGone waits up to d for every process of exe to be gone.
func waitGone(t *testing.T, exe string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		p := procsOf(exe)
		if len(p) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > d {
			for _, pid := range p {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("processes of %s still running %v later: %v", filepath.Base(exe), d, p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// copyProg gives a test its own copy of rankprog so that its process-table
// checks see only its own ranks.
func copyProg(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(rankprog)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "rankprog")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHello8(t *testing.T) {
	r := run(t, "", "-np", "8", hello)
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	got := lines(r.stdout)
	sort.Strings(got)
	if len(got) != 8 {
		t.Fatalf("want 8 lines\n%v", r)
	}
	re := regexp.MustCompile(`^hello from rank (\d) of 8: rank (\d) says "greetings from rank (\d) on .+"$`)
	seen := map[int]bool{}
	for _, l := range got {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unexpected line %q\n%v", l, r)
		}
		me, left, from := atoi(m[1]), atoi(m[2]), atoi(m[3])
		if left != (me+7)%8 || from != left {
			t.Errorf("rank %d got a greeting from %d via %d, want its left neighbour %d", me, from, left, (me+7)%8)
		}
		seen[me] = true
	}
	if len(seen) != 8 {
		t.Errorf("ranks seen: %v", seen)
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func TestTagOutputWholeLines(t *testing.T) {
	const n = 500
	r := run(t, "", "-np", "8", "--tag-output", rankprog, "lines", strconv.Itoa(n))
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	line := regexp.MustCompile(`^\[(\d)\] rank (\d) line (\d+) x{300} end (\d)/(\d+)$`)
	tail := regexp.MustCompile(`^\[(\d)\] no newline at the end from rank (\d)$`)
	count := map[int]int{}
	for _, l := range lines(r.stdout) {
		if m := line.FindStringSubmatch(l); m != nil {
			if m[1] != m[2] || m[2] != m[4] || m[3] != m[5] {
				t.Fatalf("mixed line %q", l)
			}
			count[atoi(m[1])]++
			continue
		}
		if m := tail.FindStringSubmatch(l); m != nil && m[1] == m[2] {
			continue
		}
		t.Fatalf("line broken or untagged: %q", l)
	}
	for rank := 0; rank < 8; rank++ {
		if count[rank] != n {
			t.Errorf("rank %d: %d whole lines, want %d", rank, count[rank], n)
		}
	}
	errLine := regexp.MustCompile(`^\[(\d)\] rank (\d) err \d+ x{50} end$`)
	for _, l := range lines(r.stderr) {
		if m := errLine.FindStringSubmatch(l); m == nil || m[1] != m[2] {
			t.Fatalf("stderr line broken or untagged: %q", l)
		}
	}
}

func TestUntaggedOutputWholeLines(t *testing.T) {
	r := run(t, "", "-np", "4", rankprog, "lines", "300")
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	line := regexp.MustCompile(`^rank (\d) line (\d+) x{300} end (\d)/(\d+)$|^no newline at the end from rank \d$`)
	for _, l := range lines(r.stdout) {
		m := line.FindStringSubmatch(l)
		if m == nil || m[1] != m[3] || m[2] != m[4] {
			t.Fatalf("line broken: %q", l)
		}
	}
	if got := len(lines(r.stdout)); got != 4*301 {
		t.Errorf("%d lines, want %d", got, 4*301)
	}
}

func TestRankExitCodeStopsJob(t *testing.T) {
	prog := copyProg(t)
	r := run(t, "", "-np", "6", prog, "exit", "3", "7")
	if r.code != 7 {
		t.Fatalf("want exit 7\n%v", r)
	}
	if !regexp.MustCompile(`jiarun: rank 3 \(pid \d+ on .+\) exited with code 7; stopping \d+ remaining ranks?`).MatchString(r.stderr) {
		t.Errorf("message does not name rank 3 and code 7\n%v", r)
	}
	waitGone(t, prog, 2*time.Second)
}

func TestRankKilledBySignal(t *testing.T) {
	prog := copyProg(t)
	r := run(t, "", "-np", "4", prog, "signal", "2", "9")
	if r.code != 137 {
		t.Fatalf("want exit 137\n%v", r)
	}
	if !strings.Contains(r.stderr, "rank 2") || !strings.Contains(r.stderr, "killed by signal 9") {
		t.Errorf("message does not name rank 2 and signal 9\n%v", r)
	}
	waitGone(t, prog, 2*time.Second)
}

// TestKilledRankLeavesNoSharedMemory: a rank that dies while its peers
// hold its queues mapped leaves segments in /dev/shm that only it would
// have unlinked; jiarun removes them when the job ends.
func TestKilledRankLeavesNoSharedMemory(t *testing.T) {
	r := run(t, "", "-np", "4", rankprog, "commkill", "2")
	if r.code != 137 {
		t.Fatalf("want exit 137\n%v", r)
	}
	m := regexp.MustCompile(`(?m)^job (\S+)$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("rank 0 did not print the job's name\n%v", r)
	}
	left, err := filepath.Glob("/dev/shm/jia-" + m[1] + "-*")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("shared memory of job %s left behind: %v", m[1], left)
	}
}

func TestAbort(t *testing.T) {
	prog := copyProg(t)
	r := run(t, "", "-np", "4", prog, "abort", "1", "5")
	if r.code != 5 {
		t.Fatalf("want exit 5\n%v", r)
	}
	if !strings.Contains(r.stderr, "rank 1 called Abort with code 5: rankprog asked to abort") {
		t.Errorf("message does not name the abort\n%v", r)
	}
	waitGone(t, prog, 2*time.Second)
}

// startHeld starts a job whose ranks print "ready RANK PID" and wait, and
// returns once every rank is ready.
func startHeld(t *testing.T, prog string, np int, extra ...string) (*exec.Cmd, []int, *syncBuffer) {
	t.Helper()
	args := append([]string{"-np", strconv.Itoa(np)}, extra...)
	args = append(args, prog, "sleep")
	cmd := exec.Command(jiarun, args...)
	cmd.Stdin = nil
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{} // read while jiarun still writes to it
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	var pids []int
	deadline := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	for len(pids) < np && sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "ready" {
			pids = append(pids, atoi(f[2]))
		}
	}
	if len(pids) < np {
		t.Fatalf("only %d of %d ranks became ready; stderr:\n%s", len(pids), np, stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	return cmd, pids, stderr
}

func TestInterruptStopsAllRanks(t *testing.T) {
	prog := copyProg(t)
	cmd, pids, stderr := startHeld(t, prog, 4)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("jiarun after SIGINT: %v, want exit 130; stderr:\n%s", err, stderr)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("jiarun took %v to stop after SIGINT, want under 2 s", el)
	}
	waitGone(t, prog, 2*time.Second-time.Since(start))
	if !strings.Contains(stderr.String(), "received SIGINT; stopping 4 remaining ranks") {
		t.Errorf("stderr does not say why the job stopped:\n%s", stderr)
	}
	_ = pids
}

func TestKill9LeavesNoOrphans(t *testing.T) {
	prog := copyProg(t)
	cmd, pids, _ := startHeld(t, prog, 4)
	if n := len(procsOf(prog)); n != 4 {
		t.Fatalf("%d rank processes before the kill, want 4 (%v)", n, pids)
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitGone(t, prog, 2*time.Second)
}

// TestKill9SharedMemoryRemovedByNextJob kills jiarun with SIGKILL while its
// ranks hold shared-memory queues: the ranks die by their parent-death
// signal and nobody is left to remove their segments, so the next job on
// the host removes them (segments of live processes are kept).
func TestKill9SharedMemoryRemovedByNextJob(t *testing.T) {
	prog := copyProg(t)
	cmd := exec.Command(jiarun, "-np", "3", prog, "commkill", "-1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	job := ""
	for job == "" && sc.Scan() {
		if j, ok := strings.CutPrefix(sc.Text(), "job "); ok {
			job = j
		}
	}
	if job == "" {
		t.Fatal("rank 0 did not print the job's name")
	}
	time.Sleep(100 * time.Millisecond) // every rank is past the barrier
	cmd.Process.Kill()
	cmd.Wait()
	waitGone(t, prog, 2*time.Second)
	if r := run(t, "", "-np", "2", hello); r.code != 0 {
		t.Fatalf("the next job: want exit 0\n%v", r)
	}
	if left, _ := filepath.Glob("/dev/shm/jia-" + job + "-*"); len(left) > 0 {
		t.Fatalf("shared memory of the killed job %s still there after the next job: %v", job, left)
	}
}

func TestSIGTERMStopsAllRanks(t *testing.T) {
	prog := copyProg(t)
	cmd, _, stderr := startHeld(t, prog, 3)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Errorf("jiarun after SIGTERM: %v, want exit 143; stderr:\n%s", err, stderr)
	}
	waitGone(t, prog, 2*time.Second)
}

func TestTimeout(t *testing.T) {
	prog := copyProg(t)
	r := run(t, "", "-np", "2", "--timeout", "300ms", prog, "sleep")
	if r.code != 124 {
		t.Fatalf("want exit 124\n%v", r)
	}
	if !strings.Contains(r.stderr, "exceeded --timeout 300ms") {
		t.Errorf("no timeout message\n%v", r)
	}
	waitGone(t, prog, 2*time.Second)
}

func Test64RanksOversubscribed(t *testing.T) {
	r := run(t, "", "-np", "64", hello)
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	if n := len(lines(r.stdout)); n != 64 {
		t.Fatalf("%d lines, want 64\n%v", n, r)
	}
}

func TestRingLargeMessages(t *testing.T) {
	r := run(t, "", "-np", "5", rankprog, "ring", strconv.Itoa(4<<20), "3")
	if r.code != 0 || len(lines(r.stdout)) != 5 {
		t.Fatalf("want 5 ring ok lines and exit 0\n%v", r)
	}
}

func TestStdinGoesToRank0(t *testing.T) {
	r := run(t, "some input\nmore\n", "-np", "3", "--tag-output", rankprog, "stdin")
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	want := map[string]bool{
		`[0] rank 0 read 16 bytes: "some input\nmore\n"`: true,
		`[1] rank 1 read 0 bytes: ""`:                    true,
		`[2] rank 2 read 0 bytes: ""`:                    true,
	}
	for _, l := range lines(r.stdout) {
		if !want[l] {
			t.Errorf("unexpected line %q", l)
		}
		delete(want, l)
	}
	if len(want) > 0 {
		t.Errorf("missing lines %v\n%v", want, r)
	}
}

func TestEnvironment(t *testing.T) {
	os.Setenv("E2E_EXPORTED", "from-x")
	defer os.Unsetenv("E2E_EXPORTED")
	r := run(t, "", "-np", "2", "-x", "E2E_EXPORTED", "--env", "E2E_SET=a,b=c", rankprog,
		"env", "E2E_EXPORTED", "E2E_SET", "GOMAXPROCS", "JIA_SIZE", "JIA_LOCAL_SIZE")
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	for _, want := range []string{"rank 1 E2E_EXPORTED=from-x", "rank 0 E2E_SET=a,b=c", "rank 1 JIA_SIZE=2", "rank 0 JIA_LOCAL_SIZE=2"} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("missing %q\n%v", want, r)
		}
	}
	if !regexp.MustCompile(`rank 0 GOMAXPROCS=[1-9]`).MatchString(r.stdout) {
		t.Errorf("GOMAXPROCS not set\n%v", r)
	}
}

func TestBuildsPackageDirectory(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipped: no go command in PATH")
	}
	r := run(t, "", "-np", "2", filepath.Join(repoRoot, "apps", "hello"))
	if r.code != 0 || len(lines(r.stdout)) != 2 {
		t.Fatalf("want 2 lines and exit 0\n%v", r)
	}
}

func TestSingleton(t *testing.T) {
	out, err := exec.Command(hello).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, `hello from rank 0 of 1: rank 0 says "greetings from rank 0`) {
		t.Errorf("singleton said %q", got)
	}
}

func TestInfo(t *testing.T) {
	r := run(t, "", "info")
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	for _, want := range []string{"transport shm", "transport tcp", "transport verbs  no: no RDMA device", "userfaultfd", "cores", "go version"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("info lacks %q\n%v", want, r)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	r := run(t, "", "--version")
	if r.code != 0 || !strings.Contains(r.stdout, "jiarun version") {
		t.Errorf("--version:\n%v", r)
	}
	r = run(t, "", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "EXAMPLES:") || !strings.Contains(r.stdout, "--tag-output") {
		t.Errorf("--help:\n%v", r)
	}
}

func TestExitWithoutFinalizeFailsTheJob(t *testing.T) {
	prog := copyProg(t)
	r := run(t, "", "-np", "3", prog, "nofinalize", "1")
	if r.code != 1 {
		t.Fatalf("want exit 1\n%v", r)
	}
	if !regexp.MustCompile(`jiarun: rank 1 \(pid \d+ on .+\) exited with code 0 without calling Finalize`).MatchString(r.stderr) {
		t.Errorf("message does not name rank 1 and the missing Finalize\n%v", r)
	}
	waitGone(t, prog, 2*time.Second)
}

func TestWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	r := run(t, "", "-np", "2", "--wdir", dir, rankprog, "pwd")
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	for rank := 0; rank < 2; rank++ {
		if want := fmt.Sprintf("rank %d wd %s\n", rank, dir); !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q\n%v", want, r)
		}
	}
	r = run(t, "", "-np", "2", "--wdir", filepath.Join(dir, "nope"), rankprog, "pwd")
	if r.code != 2 || !strings.Contains(r.stderr, "not a directory") {
		t.Errorf("--wdir of a missing directory: want exit 2 and a message\n%v", r)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestJiajiaMessageCalls checks jia_send, jia_recv, jia_bcast and
// jia_reduce under their Go names.
func TestJiajiaMessageCalls(t *testing.T) {
	r := run(t, "", "-np", "3", rankprog, "jiamsg")
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	for _, want := range []string{
		`rank 0 got "from 2" bcast "root" sum 6`,
		`rank 1 got "from 0" bcast "root"`,
		`rank 2 got "from 1" bcast "root"`,
	} {
		if !strings.Contains(r.stdout, want+"\n") {
			t.Errorf("missing %q\n%v", want, r)
		}
	}
}

// TestBindTo checks --bind-to as mpirun users know it: by default each rank
// of a host that fits on its processors runs on a processor of its own
// (and is told how many the host's ranks share), --bind-to none leaves
// every processor to every rank, and a bad value is a usage error.
func TestBindTo(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	n := set.Count()
	script := `echo "rank $JIA_RANK host-cpus $JIA_HOST_CPUS $(grep Cpus_allowed_list /proc/self/status)"`
	r := run(t, "", "-np", strconv.Itoa(n), "/bin/sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("want exit 0\n%v", r)
	}
	seen := map[string]bool{}
	re := regexp.MustCompile(`rank (\d+) host-cpus (\d+) Cpus_allowed_list:\s*(\S+)`)
	for _, l := range lines(r.stdout) {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unexpected line %q\n%v", l, r)
		}
		if m[2] != strconv.Itoa(n) {
			t.Errorf("rank %s told %s host processors, want %d", m[1], m[2], n)
		}
		if strings.ContainsAny(m[3], ",-") {
			t.Errorf("rank %s may run on processors %s, want one", m[1], m[3])
		}
		if seen[m[3]] {
			t.Errorf("two ranks bound to processor %s\n%v", m[3], r)
		}
		seen[m[3]] = true
	}
	if len(seen) != n {
		t.Fatalf("%d ranks reported, want %d\n%v", len(seen), n, r)
	}
	if n > 1 {
		r = run(t, "", "--bind-to", "none", "-np", "2", "/bin/sh", "-c", script)
		if r.code != 0 || strings.Count(r.stdout, "Cpus_allowed_list:") != 2 {
			t.Fatalf("--bind-to none: want 2 lines and exit 0\n%v", r)
		}
		for _, l := range lines(r.stdout) {
			if m := re.FindStringSubmatch(l); m == nil || !strings.ContainsAny(m[3], ",-") {
				t.Errorf("--bind-to none: %q is bound to one processor", l)
			}
		}
	}
	r = run(t, "", "--bind-to", "socket", "-np", "2", "/bin/true")
	if r.code == 0 || !strings.Contains(r.stderr, `--bind-to "socket"`) {
		t.Errorf("--bind-to socket: want a usage error naming the flag\n%v", r)
	}
}
