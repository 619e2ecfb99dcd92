package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var verifiedRe = regexp.MustCompile(`Verification\s*=\s*SUCCESSFUL`)

// checkNAS runs one NAS kernel through jiarun and checks that it verified.
func checkNAS(t *testing.T, kernel string, args ...string) {
	t.Helper()
	r := run(t, "", append(args, filepath.Join(binDir, kernel), "-class", "S")...)
	if r.code != 0 || !verifiedRe.MatchString(r.stdout) {
		t.Fatalf("%s class S: want exit 0 and Verification = SUCCESSFUL\n%v", kernel, r)
	}
	if n := strings.Count(r.stdout, "Benchmark Completed"); n != 1 {
		t.Errorf("%s: %d reports, want 1 (rank 0's)\n%v", kernel, n, r)
	}
}

// TestNASClassS runs every kernel, class S, at 1, 2 and 4 ranks through
// jiarun and the message-passing layer.
func TestNASClassS(t *testing.T) {
	for _, np := range []int{1, 2, 4} {
		for _, k := range nasKernels {
			t.Run(fmt.Sprintf("%s np=%d", k, np), func(t *testing.T) {
				checkNAS(t, k, "-np", fmt.Sprint(np))
			})
		}
	}
}

// TestNASBadRankCount checks that a rank count a kernel cannot use is an
// error before any work, naming the kernel, class and allowed counts.
func TestNASBadRankCount(t *testing.T) {
	r := run(t, "", "-np", "3", filepath.Join(binDir, "cg"), "-class", "S")
	if r.code != 2 || !strings.Contains(r.stderr, "CG class S cannot run on 3 ranks") {
		t.Fatalf("want exit 2 naming CG, S and 3 ranks\n%v", r)
	}
	r = run(t, "", "-np", "1", filepath.Join(binDir, "ep"), "-class", "Q")
	if r.code == 0 || !strings.Contains(r.stderr, "Q") {
		t.Fatalf("want an error naming class Q\n%v", r)
	}
}
