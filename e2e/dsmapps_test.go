package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// The DSM applications end to end: JIAJIA's sor, mm and lu through the real
// jiarun, each verified by rank 0 against a sequential computation, and
// jia.JiaError stopping a whole job.

var (
	sorProg string // apps/sor
	mmProg  string // apps/mm
	luProg  string // apps/lu
)

// wantVerified checks that the job exited 0 and rank 0 printed the
// application's VERIFIED line for np ranks.
func wantVerified(t *testing.T, r result, app string, np int) {
	t.Helper()
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("ranks=%d ", np)) ||
		!strings.Contains(r.stdout, app+": VERIFIED") || strings.Contains(r.stdout, "FAILED") {
		t.Fatalf("np %d: want exit 0 and %s: VERIFIED\n%v", np, app, r)
	}
}

// Red-black SOR: the grid after the iterations is bit-identical to a
// sequential run, with rows dealt evenly (128) and unevenly (130).
func TestDSMAppSOR(t *testing.T) {
	dsmBinaries(t)
	for _, np := range dsmSizes {
		wantVerified(t, runDSM(t, np, sorProg, "-n", "128", "-iter", "4"), "sor", np)
	}
	wantVerified(t, runDSM(t, 4, sorProg, "-n", "130", "-iter", "3"), "sor", 4)
	// JiaStartStat and JiaStopStat bracket the iterations: two barriers
	// each, and faults on home pages.
	r := runDSM(t, 2, sorProg, "-n", "128", "-iter", "4", "-stats")
	wantVerified(t, r, "sor", 2)
	for rank := 0; rank < 2; rank++ {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^sor: rank %d: DSM during the iterations: \{.*HomeFaults:[1-9][0-9]* .*Barriers:8 `, rank))
		if !re.MatchString(r.stdout) {
			t.Errorf("rank %d: no statistics of 8 barriers and some home faults\n%v", rank, r)
		}
	}
}

// Matrix multiply: every element equals a sequential product, and the
// row and column sums alone (-full 0) verify too.
func TestDSMAppMM(t *testing.T) {
	dsmBinaries(t)
	for _, np := range dsmSizes {
		wantVerified(t, runDSM(t, np, mmProg, "-n", "150"), "mm", np)
	}
	wantVerified(t, runDSM(t, 2, mmProg, "-n", "160", "-full", "0"), "mm", 2)
}

// Blocked LU: bit-identical to a sequential run of the same blocked
// factorisation, and L×U equals A; 3 ranks make a 1×3 grid of owners.
func TestDSMAppLU(t *testing.T) {
	dsmBinaries(t)
	for _, np := range []int{1, 2, 3, 4} {
		wantVerified(t, runDSM(t, np, luProg, "-n", "128", "-b", "32"), "lu", np)
	}
}

// jia.JiaError on one rank, while the others wait in a barrier, stops the
// whole job with exit code 1 and a message naming that rank; no rank or
// pager is left.
func TestDSMAppJiaErrorAbortsJob(t *testing.T) {
	dsmBinaries(t)
	r := runDSM(t, 3, sorProg, "-n", "64", "-iter", "5", "-fail", "1")
	msg := "sor: failing after iteration 1 as asked by -fail"
	if r.code != 1 || !strings.Contains(r.stderr, "jia: rank 1: abort (code 1): "+msg) ||
		!strings.Contains(r.stderr, "rank 1 called Abort with code 1: "+msg) {
		t.Fatalf("want exit 1 and rank 1's error\n%v", r)
	}
	if strings.Contains(r.stdout, "VERIFIED") {
		t.Fatalf("the job went on after JiaError\n%v", r)
	}
}
