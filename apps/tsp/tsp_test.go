package main

import (
	"fmt"
	"slices"
	"testing"
)

// bruteForce returns the length of the shortest tour of p by trying every
// order of cities 1…n-1.
func bruteForce(p *problem) int32 {
	rest := make([]int8, 0, p.n-1)
	for c := 1; c < p.n; c++ {
		rest = append(rest, int8(c))
	}
	best := int32(inf)
	var perm func(k int)
	perm = func(k int) {
		if k == len(rest) {
			tour := append([]int8{0}, rest...)
			if l, err := tourLength(p, tour); err == nil && l < best {
				best = l
			}
			return
		}
		for i := k; i < len(rest); i++ {
			rest[k], rest[i] = rest[i], rest[k]
			perm(k + 1)
			rest[k], rest[i] = rest[i], rest[k]
		}
	}
	perm(0)
	return best
}

func mustProblem(t *testing.T, n int, seed uint64) *problem {
	t.Helper()
	p, err := newProblem(n, cityDistances(n, seed))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The exact solvers agree with trying every tour on small problems, and the
// branch and bound's tour is a tour of its length.
func TestSolversMatchBruteForce(t *testing.T) {
	for n := 3; n <= 8; n++ {
		for seed := uint64(1); seed <= 5; seed++ {
			p := mustProblem(t, n, seed)
			want := bruteForce(p)
			if got := heldKarp(p); got != want {
				t.Errorf("n=%d seed=%d: Held–Karp %d, brute force %d", n, seed, got, want)
			}
			got, tour := solveSequential(p)
			if got != want {
				t.Errorf("n=%d seed=%d: branch and bound %d, brute force %d", n, seed, got, want)
			}
			if l, err := tourLength(p, tour); err != nil || l != got {
				t.Errorf("n=%d seed=%d: tour %v: length %d, %v; want %d", n, seed, tour, l, err, got)
			}
		}
	}
}

// The branch and bound agrees with Held–Karp on bigger problems, with
// ties (all distances equal) and with asymmetric distances.
func TestBranchAndBoundMatchesHeldKarp(t *testing.T) {
	for _, n := range []int{9, 10, 11} {
		for seed := uint64(1); seed <= 3; seed++ {
			p := mustProblem(t, n, seed)
			if got, want := func() int32 { l, _ := solveSequential(p); return l }(), heldKarp(p); got != want {
				t.Errorf("n=%d seed=%d: branch and bound %d, Held–Karp %d", n, seed, got, want)
			}
		}
	}
	n := 7
	same := make([]int32, n*n)
	asym := make([]int32, n*n)
	for i := range n {
		for j := range n {
			if i != j {
				same[i*n+j] = 5
				asym[i*n+j] = int32((i*7+j*3)%11 + 1)
			}
		}
	}
	for name, d := range map[string][]int32{"equal": same, "asymmetric": asym} {
		p, err := newProblem(n, d)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := solveSequential(p)
		if want := bruteForce(p); got != want || heldKarp(p) != want {
			t.Errorf("%s: branch and bound %d, Held–Karp %d, brute force %d", name, got, heldKarp(p), want)
		}
	}
}

// Several searchers sharing one queue in plain memory, taking turns as
// ranks do under the queue's lock, find the optimum and leave the queue
// empty, whatever the split and the chunk.
func TestSharedQueueSearch(t *testing.T) {
	for _, tc := range []struct{ n, split, ranks, chunk int }{
		{6, 1, 1, 1}, {9, 2, 3, 1}, {10, 3, 4, 8}, {11, 4, 2, 3}, {8, 7, 2, 100}, {12, 3, 1, 8},
	} {
		p := mustProblem(t, tc.n, uint64(tc.n))
		capacity := queueCapacity(tc.n, tc.split, maxRecords)
		q, err := viewQueue(make([]int32, queueWords(tc.n, capacity)), tc.n, capacity)
		if err != nil {
			t.Fatal(err)
		}
		q.reset()
		r := p.root()
		if err := q.push(&r, p.bound(&r)); err != nil {
			t.Fatal(err)
		}
		best, tour := int32(inf), []int8(nil)
		found := func(l int32, t []int8) int32 {
			if l < best {
				best, tour = l, slices.Clone(t)
			}
			return best
		}
		ss := make([]*searcher, tc.ranks)
		for i := range ss {
			ss[i] = &searcher{p: p, best: inf, found: found}
		}
		done, subs := 0, 0
		ts := make([]partial, tc.chunk)
		for turn := 0; done < tc.ranks; turn++ {
			s := ss[turn%tc.ranks]
			if s == nil {
				continue
			}
			k, err := take(p, q, ts, s, tc.split, tc.ranks)
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				ss[turn%tc.ranks] = nil
				done++
				continue
			}
			for i := range ts[:k] {
				if ts[i].depth != tc.split {
					t.Fatalf("%+v: took a partial tour of %d cities", tc, ts[i].depth)
				}
				if p.bound(&ts[i]) < s.best {
					subs++
					s.solve(&ts[i])
				}
			}
		}
		if want := heldKarp(p); best != want {
			t.Errorf("%+v: best %d, Held–Karp %d", tc, best, want)
		}
		if l, err := tourLength(p, tour); err != nil || l != best {
			t.Errorf("%+v: tour %v: length %d, %v", tc, tour, l, err)
		}
		if q.len() != 0 || int(q.hdr[hFree]) != capacity || subs == 0 {
			t.Errorf("%+v: %d left queued, %d of %d free, %d subproblems", tc, q.len(), q.hdr[hFree], capacity, subs)
		}
	}
}

// The queue pops in order of bound and refuses to overflow.
func TestQueueOrder(t *testing.T) {
	const n = 5
	q, err := viewQueue(make([]int32, queueWords(n, 8)), n, 8)
	if err != nil {
		t.Fatal(err)
	}
	q.reset()
	bounds := []int32{50, 10, 40, 10, 30, 20, 60, 5}
	for i, b := range bounds {
		pt := partial{cost: int32(i), depth: 2, visited: 1 | 1<<(i%4+1), rem: b}
		pt.path[1] = int8(i%4 + 1)
		if err := q.push(&pt, b); err != nil {
			t.Fatal(err)
		}
	}
	var extra partial
	if err := q.push(&extra, 1); err == nil {
		t.Error("push into a full queue: no error")
	}
	var got []int32
	for {
		var pt partial
		b, ok, err := q.pop(&pt)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if pt.rem != b || pt.path[1] != int8(pt.cost%4+1) {
			t.Errorf("popped %+v with bound %d: not the record pushed with it", pt, b)
		}
		got = append(got, b)
	}
	want := slices.Clone(bounds)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("popped bounds %v, want %v", got, want)
	}
	if _, err := viewQueue(make([]int32, 10), n, 8); err == nil {
		t.Error("a queue over too few words: no error")
	}
}

func TestBadInput(t *testing.T) {
	if _, err := newProblem(2, make([]int32, 4)); err == nil {
		t.Error("2 cities: no error")
	}
	if _, err := newProblem(maxCities+1, make([]int32, (maxCities+1)*(maxCities+1))); err == nil {
		t.Error("too many cities: no error")
	}
	if _, err := newProblem(3, make([]int32, 8)); err == nil {
		t.Error("8 distances for 3 cities: no error")
	}
	if _, err := newProblem(3, []int32{0, 1, 1, 1, 0, -1, 1, 1, 0}); err == nil {
		t.Error("a negative distance: no error")
	}
	p := mustProblem(t, 4, 1)
	for _, tour := range [][]int8{{0, 1, 2}, {1, 0, 2, 3}, {0, 1, 1, 3}, {0, 1, 2, 9}} {
		if _, err := tourLength(p, tour); err == nil {
			t.Errorf("tour %v: no error", tour)
		}
	}
	if c := queueCapacity(20, 10, maxRecords); c != -1 {
		t.Errorf("queueCapacity(20, 10) = %d, want -1", c)
	}
	if c := queueCapacity(13, 4, maxRecords); c != 1+12+12*11+12*11*10 {
		t.Errorf("queueCapacity(13, 4) = %d", c)
	}
}

// The cities depend only on n and the seed; their distances are
// symmetric, and zero from a city to itself.
func TestCitiesDeterministic(t *testing.T) {
	a, b := cityDistances(12, 7), cityDistances(12, 7)
	if !slices.Equal(a, b) || slices.Equal(a, cityDistances(12, 8)) {
		t.Error("the distances are not a function of n and the seed")
	}
	for i := range 12 {
		for j := range 12 {
			if a[i*12+j] != a[j*12+i] || (i == j && a[i*12+j] != 0) {
				t.Fatalf("d[%d][%d] = %d, d[%d][%d] = %d", i, j, a[i*12+j], j, i, a[j*12+i])
			}
		}
	}
}

// BenchmarkSolveSequential times the branch and bound on one core, without
// the DSM, for the sizes the command runs by default and around.
func BenchmarkSolveSequential(b *testing.B) {
	for _, n := range []int{16, 17, 18} {
		p, err := newProblem(n, cityDistances(n, 1))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				solveSequential(p)
			}
		})
	}
}

// Rank 0's check accepts an optimal tour and refuses a longer length, a
// tour of another length and a city out of range.
func TestVerify(t *testing.T) {
	const n, seed = 9, 3
	p := mustProblem(t, n, seed)
	opt, tour := solveSequential(p)
	rec := make([]int32, n)
	for i, c := range tour {
		rec[i] = int32(c)
	}
	if got, msg := verify(n, seed, opt, rec); msg != "" || got != opt {
		t.Fatalf("the optimal tour: %d, %q", got, msg)
	}
	if _, msg := verify(n, seed, opt+1, rec); msg == "" {
		t.Error("a length above the optimum verifies")
	}
	swapped := slices.Clone(tour)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	if l, err := tourLength(p, swapped); err != nil || l == opt {
		t.Fatalf("swapping two cities: length %d, %v; want a length other than %d", l, err, opt)
	}
	rec[1], rec[2] = rec[2], rec[1]
	if _, msg := verify(n, seed, opt, rec); msg == "" {
		t.Error("a tour of another length verifies")
	}
	rec[1], rec[2] = rec[2], rec[1]
	rec[3] = 256 + rec[3]
	if _, msg := verify(n, seed, opt, rec); msg == "" {
		t.Error("a city out of range verifies")
	}
}
