package main

import (
	"testing"

	"github.com/jiarun/jia/apps/internal/npb"
)

// The ranks' shares cover every batch once, in order, the first
// batches%ranks ranks one batch more, as NPB deals them; ranks beyond the
// number of batches get none.
func TestShare(t *testing.T) {
	for _, batches := range []int{1, 7, 256} {
		for _, ranks := range []int{1, 2, 3, 4, 7, 300} {
			next := 0
			for r := range ranks {
				first, count := share(batches, ranks, r)
				if first != next || count < 0 || count > batches/ranks+1 {
					t.Fatalf("%d batches, %d ranks: rank %d gets [%d, %d), after %d", batches, ranks, r, first, first+count, next)
				}
				next += count
			}
			if next != batches {
				t.Errorf("%d batches, %d ranks: the shares cover %d", batches, ranks, next)
			}
		}
	}
}

// Class S's sums, made from two ranks' shares as the lock adds them up,
// verify; wrong sums or counts do not.
func TestResultClassS(t *testing.T) {
	p, err := npb.EPParams('S')
	if err != nil {
		t.Fatal(err)
	}
	s := make([]float64, words)
	for r := range 2 {
		sx, sy, q := npb.EPBatches(share(p.Batches(), 2, r))
		s[wSX] += sx
		s[wSY] += sy
		for i, v := range q {
			s[wQ+i] += v
		}
	}
	if res := result('S', p, 2, 1, s); !res.Verified {
		t.Fatalf("class S does not verify: %+v", res.Checks)
	}
	s[wQ+3]++
	s[wQ+4]--
	if res := result('S', p, 2, 1, s); res.Verified {
		t.Error("a pair in the wrong annulus verifies")
	}
	s[wQ+3]--
	s[wQ+4]++
	s[wSX] *= 1 + 1e-7
	if res := result('S', p, 2, 1, s); res.Verified {
		t.Error("sx off by 1e-7 verifies")
	}
	if count(0.5) != -1 || count(-1) != -1 || count(3) != 3 {
		t.Error("count does not reject fractions and negatives")
	}
}
