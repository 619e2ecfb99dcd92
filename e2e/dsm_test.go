package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The DSM end to end: the real jiarun runs DSM programs whose every rank
// has a pager process serving its page faults; each test checks what scope
// consistency promises and that no rank or pager is left afterwards.

var (
	dsmOnce  sync.Once
	dsmErr   error
	dsmcheck string // apps/dsmcheck: one scenario per mode
	piProg   string // apps/pi
	counter  string // apps/dsmcounter
)

// dsmBinaries checks once that the DSM can run on this machine (TestMain
// built the DSM programs) and skips the test, saying why, if it cannot.
func dsmBinaries(t *testing.T) {
	t.Helper()
	dsmOnce.Do(func() {
		// A DSM needs userfaultfd with write protection of shared memory.
		cmd := exec.Command(jiarun, "-np", "1", dsmcheck, "counter", "1")
		if b, err := cmd.CombinedOutput(); err != nil && strings.Contains(string(b), "cannot run here") {
			dsmErr = errSkip(string(b))
		}
	})
	if s, ok := dsmErr.(errSkip); ok {
		t.Skipf("the DSM cannot run on this machine: %s", string(s))
	}
	if dsmErr != nil {
		t.Fatal(dsmErr)
	}
}

type errSkip string

func (e errSkip) Error() string { return string(e) }

// runDSM runs prog under jiarun with np ranks (oversubscribing the cores
// when np asks for it) and checks that every rank and pager is gone after.
// The ranks keep a copy each of the regions (dsm.host_share off), so that
// the pagers' protocol serves every access to a page homed elsewhere.
func runDSM(t *testing.T, np int, prog string, args ...string) result {
	t.Helper()
	return runDSMMode(t, false, np, prog, args...)
}

// runDSMShared is runDSM with the ranks sharing one copy of the regions
// (dsm.host_share on, the default).
func runDSMShared(t *testing.T, np int, prog string, args ...string) result {
	t.Helper()
	return runDSMMode(t, true, np, prog, args...)
}

func runDSMMode(t *testing.T, share bool, np int, prog string, args ...string) result {
	t.Helper()
	a := []string{"-np", fmt.Sprint(np), "--oversubscribe", "--timeout", "50s",
		"--env", fmt.Sprintf("JIA_DSM_HOST_SHARE=%t", share), prog}
	r := run(t, "", append(a, args...)...)
	waitGone(t, prog, 10*time.Second)
	return r
}

func wantOK(t *testing.T, r result, mode string) {
	t.Helper()
	if r.code != 0 || !strings.Contains(r.stdout, "ok "+mode) {
		t.Fatalf("want exit 0 and %q\n%v", "ok "+mode, r)
	}
}

var dsmSizes = []int{1, 2, 4}

func TestDSMPi(t *testing.T) {
	dsmBinaries(t)
	for _, np := range dsmSizes {
		r := runDSM(t, np, piProg, "-n", "200000")
		if r.code != 0 || !strings.Contains(r.stdout, "pi = 3.14159265") || !strings.Contains(r.stdout, fmt.Sprintf("on %d ranks", np)) {
			t.Fatalf("np %d: want π\n%v", np, r)
		}
	}
}

func TestDSMCounterApp(t *testing.T) {
	dsmBinaries(t)
	r := runDSM(t, 4, counter, "-n", "20", "-counters", "3")
	if r.code != 0 || !strings.Contains(r.stdout, "3 counters of 4 ranks × 20 increments: all 80") {
		t.Fatalf("want exact totals\n%v", r)
	}
}

// Counters on pages homed on every rank, incremented under nested locks
// released out of order, hold exact totals.
func TestDSMCountersUnderLocksAreExact(t *testing.T) {
	dsmBinaries(t)
	for _, np := range dsmSizes {
		wantOK(t, runDSM(t, np, dsmcheck, "counter", "25"), "counter")
	}
}

// A value written under lock A is seen by the next holder of A.
func TestDSMNextLockHolderSeesWrites(t *testing.T) {
	dsmBinaries(t)
	for _, np := range dsmSizes {
		wantOK(t, runDSM(t, np, dsmcheck, "handoff", "6"), "handoff")
	}
}

// Values written before a barrier are seen by every rank after it.
func TestDSMBarrierMakesWritesVisible(t *testing.T) {
	dsmBinaries(t)
	for _, np := range dsmSizes {
		wantOK(t, runDSM(t, np, dsmcheck, "barrier", "3"), "barrier")
	}
}

// A region of 1 GiB of which a few pages are touched: correct, and the
// ranks' memory stays small.
func TestDSMRegionLargerThanPagesTouched(t *testing.T) {
	dsmBinaries(t)
	wantOK(t, runDSM(t, 2, dsmcheck, "sparse"), "sparse")
}

// GOMAXPROCS=1 and 64 goroutines faulting on remote pages at once, with
// copy() into and out of DSM memory: the pagers serve every fault.
func TestDSMManyFaultsWithOneP(t *testing.T) {
	dsmBinaries(t)
	for _, np := range []int{2, 4} {
		wantOK(t, runDSM(t, np, dsmcheck, "faults"), "faults")
	}
}

// Misuse gets an error naming the rank and the call, and the job goes on.
func TestDSMBadInput(t *testing.T) {
	dsmBinaries(t)
	cases := []struct {
		name string
		want []string // in every rank's error line; %d is the rank
	}{
		{"before-alloc", []string{"shmem: rank %d: Lock(0): the DSM is not started"}},
		{"unlock", []string{"shmem: rank %d: Unlock(5): lock not held by this rank"}},
		{"relock", []string{"shmem: rank %d: Lock(2): lock already held"}},
		{"barrier-in-lock", []string{"shmem: rank %d: Barrier(): barrier while holding"}},
		{"size", []string{"shmem: rank %d: Alloc(0 bytes): bad allocation size", "shmem: rank %d: Alloc(4611686018427387904 bytes): bad allocation size"}},
		{"placement", []string{"shmem: rank %d: Alloc(100 bytes, all on rank 2): bad placement"}},
		{"mismatch", []string{"shmem: rank %d: Alloc(", "mismatched collective call: rank "}},
		{"double-free", []string{"shmem: rank %d: Free(region at 0x", "region already freed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runDSM(t, 2, dsmcheck, "bad", c.name)
			wantOK(t, r, "bad")
			for rank := 0; rank < 2; rank++ {
				line := regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d error: .*$`, rank)).FindAllString(r.stdout, -1)
				all := strings.Join(line, "\n")
				for _, w := range c.want {
					if w = strings.ReplaceAll(w, "%d", fmt.Sprint(rank)); !strings.Contains(all, w) {
						t.Errorf("rank %d: no %q in its errors\n%v", rank, w, r)
					}
				}
			}
		})
	}
	t.Run("mismatch names the other rank's call", func(t *testing.T) {
		r := runDSM(t, 2, dsmcheck, "bad", "mismatch")
		if !strings.Contains(r.stdout, "rank 0 error: shmem: rank 0: Alloc(12288 bytes, block-cyclic by 1 pages from rank 0) (collective call #2): mismatched collective call: rank 1 called Alloc(20480 bytes") {
			t.Fatalf("mismatch message\n%v", r)
		}
	})
	// An access to freed memory stops the job with an error naming the
	// rank, the access and the region.
	t.Run("after-free", func(t *testing.T) {
		r := runDSM(t, 2, dsmcheck, "bad", "after-free")
		if r.code == 0 || !regexp.MustCompile(`shmem: rank 1: write of address 0x[0-9a-f]+, in a region freed by Free \(the region of 8192 bytes at 0x[0-9a-f]+`).MatchString(r.stderr) {
			t.Fatalf("want a failed job naming the write to freed memory\n%v", r)
		}
	})
}
