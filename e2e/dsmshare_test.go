package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// The DSM end to end with the ranks of the host sharing one copy of every
// region (dsm.host_share, the default on one host): the programs of the
// page-fault path's tests give the same results, bad input the same
// errors, and the pagers fetch, diff and invalidate nothing.

func TestDSMSharedCountersHandoffBarrier(t *testing.T) {
	dsmBinaries(t)
	for _, np := range dsmSizes {
		wantOK(t, runDSMShared(t, np, dsmcheck, "counter", "25"), "counter")
		wantOK(t, runDSMShared(t, np, dsmcheck, "handoff", "6"), "handoff")
		wantOK(t, runDSMShared(t, np, dsmcheck, "barrier", "3"), "barrier")
	}
}

func TestDSMSharedSparseAndManyGoroutines(t *testing.T) {
	dsmBinaries(t)
	wantOK(t, runDSMShared(t, 2, dsmcheck, "sparse"), "sparse")
	wantOK(t, runDSMShared(t, 4, dsmcheck, "faults"), "faults")
}

func TestDSMSharedBadInput(t *testing.T) {
	dsmBinaries(t)
	cases := []struct {
		name string
		want string // in every rank's error lines; %d is the rank
	}{
		{"mismatch", "mismatched collective call: rank "},
		{"placement", "shmem: rank %d: Alloc(100 bytes, all on rank 2): bad placement"},
		{"double-free", "region already freed"},
	}
	for _, c := range cases {
		r := runDSMShared(t, 2, dsmcheck, "bad", c.name)
		wantOK(t, r, "bad")
		for rank := 0; rank < 2; rank++ {
			if w := strings.ReplaceAll(c.want, "%d", fmt.Sprint(rank)); !regexp.MustCompile(fmt.Sprintf(`(?m)^rank %d error: .*%s`, rank, regexp.QuoteMeta(w))).MatchString(r.stdout) {
				t.Errorf("%s: rank %d: no %q in its errors\n%v", c.name, rank, w, r)
			}
		}
	}
	r := runDSMShared(t, 2, dsmcheck, "bad", "after-free")
	if r.code == 0 || !regexp.MustCompile(`shmem: rank 1: write of address 0x[0-9a-f]+, in a region freed by Free \(the region of 8192 bytes at 0x[0-9a-f]+`).MatchString(r.stderr) {
		t.Fatalf("want a failed job naming the write to freed memory\n%v", r)
	}
}

// The applications verify, and SOR's ranks share what they write with no
// page fetched, no diff and no invalidation.
func TestDSMSharedApps(t *testing.T) {
	dsmBinaries(t)
	wantVerified(t, runDSMShared(t, 4, sorProg, "-n", "130", "-iter", "3"), "sor", 4)
	wantVerified(t, runDSMShared(t, 3, mmProg, "-n", "150"), "mm", 3)
	wantVerified(t, runDSMShared(t, 4, luProg, "-n", "128", "-b", "32"), "lu", 4)
	r := runDSMShared(t, 2, sorProg, "-n", "128", "-iter", "4", "-stats")
	wantVerified(t, r, "sor", 2)
	for rank := 0; rank < 2; rank++ {
		re := regexp.MustCompile(fmt.Sprintf(`(?m)^sor: rank %d: DSM during the iterations: \{ReadFaults:0 WriteFaults:0 HomeFaults:0 PagesFetched:0 Prefetched:0 PagesServed:0 DiffMsgs:0 DiffPages:0 Invalidations:0 .*Barriers:8 `, rank))
		if !re.MatchString(r.stdout) {
			t.Errorf("rank %d: want 8 barriers and no fault, fetch, diff or invalidation\n%v", rank, r)
		}
	}
}
