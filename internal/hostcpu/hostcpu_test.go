package hostcpu

import (
	"runtime"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		v    string
		want int
	}{
		{"8", 8},
		{"1", 1},
		{"", runtime.NumCPU()},
		{"0", runtime.NumCPU()},
		{"-2", runtime.NumCPU()},
		{"two", runtime.NumCPU()},
	} {
		if got := parse(c.v); got != c.want {
			t.Errorf("parse(%q) = %d, want %d", c.v, got, c.want)
		}
	}
}

func TestCountIsPositive(t *testing.T) {
	if Count() < 1 {
		t.Fatalf("Count() = %d", Count())
	}
}
