package main

import "testing"

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{0.9, 1.3, 0.7, 1.1, 1.0}, 1.0},
	} {
		if got := median(append([]float64(nil), c.in...)); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestPairedRatios checks that each run's ratio pairs the two figures of
// that run, size by size, and skips sizes one side lacks or measured as 0.
func TestPairedRatios(t *testing.T) {
	paired := map[float64][]float64{}
	addRatios(paired, [][2]float64{{8, 10}, {16, 20}, {32, 5}}, [][2]float64{{8, 5}, {16, 0}})
	addRatios(paired, [][2]float64{{8, 3}}, [][2]float64{{8, 4}})
	if got := paired[8]; len(got) != 2 || got[0] != 2 || got[1] != 0.75 {
		t.Errorf("size 8: %v, want [2 0.75]", got)
	}
	if got, ok := paired[16]; ok {
		t.Errorf("size 16 (their figure 0): %v, want none", got)
	}
	if got, ok := paired[32]; ok {
		t.Errorf("size 32 (not measured by them): %v, want none", got)
	}
}
