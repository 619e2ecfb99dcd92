package main

import (
	"slices"
	"testing"

	"github.com/jiarun/jia/apps/internal/npb"
)

// simulate runs IS's rankings 1 to iterations for ranks on shared arrays in
// ordinary memory, every rank's phase done before any rank's next phase
// (what the barriers guarantee on the DSM), then the full sort and checks.
// It returns the ranks and the shared arrays.
func simulate(t *testing.T, class byte, ranks, unit, iterations int) ([]*ranker, shared) {
	t.Helper()
	p, err := npb.ISParams(class)
	if err != nil {
		t.Fatal(err)
	}
	n := 1 << p.TotalKeysLog2
	l := newLayout(n, ranks, unit)
	nb := 1 << p.NumBucketsLog2
	s := shared{keys: make([]int32, n), buff1: make([]int32, n), sorted: make([]int32, n),
		counts: make([]int32, ranks*(nb+3)), stride: nb + 3}
	rs := make([]*ranker, ranks)
	for me := range rs {
		if rs[me], err = newRanker(class, me, l); err != nil {
			t.Fatal(err)
		}
		if err := rs[me].generate(s); err != nil {
			t.Fatal(err)
		}
	}
	for it := 1; it <= iterations; it++ {
		for _, r := range rs {
			r.bucket(s, it)
		}
		for _, r := range rs {
			if err := r.rank(s, it); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range rs {
		r.sortKeys(s)
	}
	return rs, s
}

// The rankings pass NPB's partial verification every time, and the full
// sort is the sequential sort, whatever the number of ranks: one, a few,
// blocks not page-aligned, ranks without keys (more ranks than blocks of
// unit keys) and ranks without buckets (the middle buckets hold more than
// n/ranks keys each).
func TestSortMatchesSequential(t *testing.T) {
	for _, tc := range []struct {
		class                   byte
		ranks, unit, iterations int
		idle                    bool // some ranks get no buckets
	}{
		{'S', 1, 1024, 10, false}, {'S', 2, 1024, 10, false}, {'S', 3, 1024, 10, false},
		{'S', 4, 1, 10, false}, {'S', 5, 1000, 10, false}, {'S', 70, 1024, 3, false},
		{'S', 400, 1, 1, true}, {'W', 4, 1024, 2, false},
	} {
		rs, s := simulate(t, tc.class, tc.ranks, tc.unit, tc.iterations)
		p, _ := npb.ISParams(tc.class)
		var passed int64
		var sum, sSum int64
		idle := false
		for _, r := range rs {
			idle = idle || r.ptr1[r.me] > r.ptr2[r.me]
			passed += r.passed
			c := r.check(s)
			if c.descents != 0 {
				t.Errorf("%+v: rank %d: %d descents in its block", tc, r.me, c.descents)
			}
			sum, sSum = sum+c.sum, sSum+c.sSum
		}
		if idle != tc.idle {
			t.Errorf("%+v: some ranks without buckets: %v", tc, idle)
		}
		if want := int64(npb.ISTestKeys * tc.iterations); passed != want {
			t.Errorf("%+v: %d partial verifications passed, want %d", tc, passed, want)
		}
		if sum != sSum {
			t.Errorf("%+v: the sorted keys sum to %d, the keys to %d", tc, sSum, sum)
		}
		seq, err := sequentialSort(p, tc.iterations)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.sorted, seq) {
			t.Errorf("%+v: the sorted keys differ from a sequential sort", tc)
		}
	}
}

// A broken sort shows in the report: a swapped pair, a lost key.
func TestResultCatchesBadSort(t *testing.T) {
	const ranks = 2
	rs, s := simulate(t, 'S', ranks, 1024, npb.ISIterations)
	p, _ := npb.ISParams('S')
	seq, err := sequentialSort(p, npb.ISIterations)
	if err != nil {
		t.Fatal(err)
	}
	report := func() npb.Result {
		slots := make([]int64, ranks*slotWords)
		for _, r := range rs {
			c := r.check(s)
			slot := slots[r.me*slotWords : (r.me+1)*slotWords]
			slot[sPassed], slot[sDescents] = r.passed, c.descents
			slot[sSum], slot[sSumSq], slot[sSortedSum], slot[sSortedSumSq] = c.sum, c.sumSq, c.sSum, c.sSumQ
		}
		return result('S', p, ranks, 1, slots, s.sorted, seq)
	}
	if res := report(); !res.Verified {
		t.Fatalf("a good sort does not verify: %+v", res.Checks)
	}
	i := len(s.sorted) / 2
	for s.sorted[i] == s.sorted[i+1] {
		i++
	}
	s.sorted[i], s.sorted[i+1] = s.sorted[i+1], s.sorted[i]
	if res := report(); res.Verified || res.Checks[1].OK {
		t.Errorf("a swapped pair verifies: %+v", res.Checks)
	}
	s.sorted[i], s.sorted[i+1] = s.sorted[i+1], s.sorted[i]
	s.sorted[i] = s.sorted[i+1] // still in order, but a key lost
	if res := report(); res.Verified || res.Checks[2].OK {
		t.Errorf("a lost key verifies: %+v", res.Checks)
	}
}

func TestDistribute(t *testing.T) {
	ptr1, ptr2 := make([]int, 3), make([]int, 3)
	distribute([]int64{4, 0, 4, 4}, 12, ptr1, ptr2)
	if !slices.Equal(ptr1, []int{0, 1, 3}) || !slices.Equal(ptr2, []int{0, 2, 3}) {
		t.Errorf("ranges %v %v, want [0 1 3] [0 2 3]", ptr1, ptr2)
	}
	distribute([]int64{12, 0}, 12, ptr1, ptr2)
	if !slices.Equal(ptr1, []int{0, 1, 1}) || !slices.Equal(ptr2, []int{0, 1, 0}) {
		t.Errorf("ranges %v %v, want [0 1 1] [0 1 0] (rank 2 without buckets)", ptr1, ptr2)
	}
	if off, n := segment([]int32{3, 1, 4, 1, 5}, 2, 3); off != 4 || n != 5 {
		t.Errorf("segment = %d, %d, want 4, 5", off, n)
	}
	l := newLayout(65536, 3, 1024)
	if lo, hi := l.block(2); l.per != 22528 || lo != 45056 || hi != 65536 {
		t.Errorf("layout %+v: block 2 = [%d, %d)", l, lo, hi)
	}
	if _, err := newRanker('S', 0, newLayout(100, 1, 1)); err == nil {
		t.Error("a layout of the wrong size: no error")
	}
}
