package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// More DSM applications end to end: JIAJIA's tsp (branch and bound under
// locks), checked by rank 0 against Held–Karp, and the NAS kernels EP and
// IS on the DSM, checked against NPB's official values.

var (
	tspProg   string // apps/tsp
	dsmepProg string // apps/dsmep
	dsmisProg string // apps/dsmis
)

// Travelling salesman: the optimum found through the shared queue and
// bound is Held–Karp's, and the recorded tour is a tour of that length;
// also with another seed, a shallower split and 3 ranks.
func TestDSMAppTSP(t *testing.T) {
	dsmBinaries(t)
	for _, np := range dsmSizes {
		wantVerified(t, runDSM(t, np, tspProg, "-n", "14"), "tsp", np)
	}
	wantVerified(t, runDSM(t, 3, tspProg, "-n", "13", "-seed", "7", "-split", "2"), "tsp", 3)
}

// wantNPB checks that the job exited 0 and rank 0 printed NPB's report of
// kernel for np ranks with Verification = SUCCESSFUL, and every line in
// more.
func wantNPB(t *testing.T, r result, kernel string, np int, more ...string) {
	t.Helper()
	ok := r.code == 0 && strings.Contains(r.stdout, " "+kernel+" Benchmark Completed.") &&
		regexp.MustCompile(fmt.Sprintf(`(?m)^ Total processes =\s+%d$`, np)).MatchString(r.stdout) &&
		regexp.MustCompile(`(?m)^ Verification    =\s+SUCCESSFUL$`).MatchString(r.stdout) &&
		!strings.Contains(r.stdout, "FAILED")
	for _, m := range more {
		ok = ok && strings.Contains(r.stdout, m)
	}
	if !ok {
		t.Fatalf("np %d: want exit 0 and %s verified\n%v", np, kernel, r)
	}
}

// EP on the DSM: NPB's sums within 1e-8 and the exact Gaussian pair
// counts, the ranks' parts added up under a lock.
func TestDSMAppEP(t *testing.T) {
	dsmBinaries(t)
	for _, np := range []int{1, 2, 3, 4} {
		wantNPB(t, runDSM(t, np, dsmepProg, "-class", "S"), "DSM EP", np,
			"Gaussian pairs         computed 13176389, reference 13176389  ok")
	}
}

// IS on the DSM: NPB's partial and full verification, the sorted keys'
// sums, and the whole sorted array equal to a sequential sort; class S at
// 1 to 4 ranks (3: blocks of unequal size), class W at 2.
func TestDSMAppIS(t *testing.T) {
	dsmBinaries(t)
	seq := "differ from sequential computed 0, reference 0  ok"
	for _, np := range []int{1, 2, 3, 4} {
		wantNPB(t, runDSM(t, np, dsmisProg, "-class", "S"), "DSM IS", np,
			"partial verification   computed 50, reference 50  ok", seq)
	}
	wantNPB(t, runDSM(t, 2, dsmisProg, "-class", "W"), "DSM IS", 2, seq)
}

// Bad flags stop the job with exit code 1 and a message naming the flag.
func TestDSMAppsBadFlags(t *testing.T) {
	dsmBinaries(t)
	for _, tc := range []struct {
		prog string
		args []string
		msg  string
	}{
		{tspProg, []string{"-n", "2"}, "tsp: bad -n 2: want 3 to 20 cities"},
		{tspProg, []string{"-n", "10", "-split", "10"}, "tsp: bad -split 10: want 1 to n-1 = 9"},
		{dsmepProg, []string{"-class", "X"}, `dsmep: bad -class "X"`},
		{dsmisProg, []string{"-class", "AB"}, `dsmis: bad -class "AB"`},
	} {
		r := runDSM(t, 2, tc.prog, tc.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tc.msg) || strings.Contains(r.stdout, "VERIFIED") {
			t.Errorf("%v: want exit 1 and %q\n%v", tc.args, tc.msg, r)
		}
	}
}
