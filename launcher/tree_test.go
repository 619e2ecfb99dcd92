package launcher

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPlanTreeFlatUpToFanout(t *testing.T) {
	for _, c := range []struct{ n, fanout int }{{0, 32}, {1, 32}, {32, 32}, {5, 0}, {200, 0}} {
		tr := planTree(c.n, c.fanout)
		if len(tr.Roots) != c.n || tr.Depth() != min(c.n, 1) {
			t.Errorf("n=%d fanout=%d: roots %v, depth %d; want all %d hosts started by the root", c.n, c.fanout, tr.Roots, tr.Depth(), c.n)
		}
		for i, ch := range tr.Children {
			if len(ch) > 0 {
				t.Errorf("n=%d fanout=%d: host %d starts %v", c.n, c.fanout, i, ch)
			}
		}
	}
}

// TestPlanTreeWhoStartsWhom pins the layout: the root starts hosts
// 0..F-1, host i starts (i+1)F .. (i+1)F+F-1.
func TestPlanTreeWhoStartsWhom(t *testing.T) {
	for _, c := range []struct {
		n, fanout int
		want      string // roots, then each host's children
	}{
		{3, 1, "[0] [[1] [2] []]"},
		{3, 2, "[0 1] [[2] [] []]"},
		{9, 2, "[0 1] [[2 3] [4 5] [6 7] [8] [] [] [] [] []]"},
		{17, 4, "[0 1 2 3] [[4 5 6 7] [8 9 10 11] [12 13 14 15] [16] [] [] [] [] [] [] [] [] [] [] [] [] []]"},
		{7, 3, "[0 1 2] [[3 4 5] [6] [] [] [] [] []]"},
	} {
		tr := planTree(c.n, c.fanout)
		if got := fmt.Sprint(tr.Roots, tr.Children); got != c.want {
			t.Errorf("n=%d fanout=%d:\n got %s\nwant %s", c.n, c.fanout, got, c.want)
		}
	}
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " ")
}

// TestPlanTreeProperties checks every plan up to 300 hosts: each host is
// started exactly once, by the root or by a host before it; nobody starts
// more than F proxies; and the depth is the least d with F + F² + … + F^d
// ≥ n, so it grows with log n.
func TestPlanTreeProperties(t *testing.T) {
	for fanout := 1; fanout <= 40; fanout++ {
		for n := 1; n <= 300; n++ {
			tr := planTree(n, fanout)
			starter := make([]int, n)
			for i := range starter {
				starter[i] = -2
			}
			for _, r := range tr.Roots {
				starter[r] = -1
			}
			if len(tr.Roots) > fanout {
				t.Fatalf("n=%d F=%d: the root starts %d", n, fanout, len(tr.Roots))
			}
			for i, ch := range tr.Children {
				if len(ch) > fanout {
					t.Fatalf("n=%d F=%d: host %d starts %d", n, fanout, i, len(ch))
				}
				for _, c := range ch {
					if starter[c] != -2 || c <= i {
						t.Fatalf("n=%d F=%d: host %d started twice or by a later host (%d)", n, fanout, c, i)
					}
					starter[c] = i
				}
			}
			if i := slices.Index(starter, -2); i >= 0 {
				t.Fatalf("n=%d F=%d: nobody starts host %d", n, fanout, i)
			}
			want, reach, level := 0, 0, 1
			for reach < n {
				level *= fanout
				reach += level
				want++
			}
			if n <= fanout {
				want = 1
			}
			if d := tr.Depth(); d != want {
				t.Fatalf("n=%d F=%d: depth %d, want %d", n, fanout, d, want)
			}
			all := 0
			for _, r := range tr.Roots {
				sub := tr.Subtree(r)
				if sub[0] != r {
					t.Fatalf("subtree of %d starts with %d", r, sub[0])
				}
				all += len(sub)
			}
			if all != n {
				t.Fatalf("n=%d F=%d: the roots' subtrees hold %d hosts", n, fanout, all)
			}
		}
	}
}

func TestSubtreeRanksAndStdinRank(t *testing.T) {
	s := launchSpec{Ranks: []int{0, 1}, Children: []childLaunch{
		{Host: "b", Launch: launchSpec{Ranks: []int{2}, Children: []childLaunch{{Host: "d", Launch: launchSpec{Ranks: []int{4, 5}}}}}},
		{Host: "c", Launch: launchSpec{Ranks: []int{3}}},
	}}
	if got := ints(s.subtreeRanks()); got != "0 1 2 4 5 3" {
		t.Fatalf("subtree ranks %s", got)
	}
}

func TestHeartbeatInterval(t *testing.T) {
	for timeout, want := range map[time.Duration]time.Duration{
		0: time.Second, 4 * time.Second: time.Second, 2 * time.Second: 500 * time.Millisecond,
		400 * time.Millisecond: 100 * time.Millisecond, time.Minute: time.Second,
	} {
		if got := heartbeatInterval(timeout); got != want {
			t.Errorf("heartbeatInterval(%v) = %v, want %v", timeout, got, want)
		}
	}
}

func TestStagedName(t *testing.T) {
	for path, want := range map[string]string{
		"/x/bin/hello": "hello",
		"/h/.cache/jiarun/prog-0123456789abcdef-ep": "ep",
		"/h/.cache/jiarun/prog-0123-ep":             "prog-0123-ep",
	} {
		if got := stagedName(path); got != want {
			t.Errorf("stagedName(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestPrepareFanout(t *testing.T) {
	noEnv := func(string) string { return "" }
	j, err := Prepare(Options{Program: "x", HostSpec: "a,b"}, noEnv)
	if err != nil || j.Fanout != DefaultFanout {
		t.Fatalf("default: fanout %d, %v", j.Fanout, err)
	}
	j, err = Prepare(Options{Program: "x", HostSpec: "a,b", Fanout: 2, FanoutSet: true}, noEnv)
	if err != nil || j.Fanout != 2 {
		t.Fatalf("--fanout 2: fanout %d, %v", j.Fanout, err)
	}
	_, err = Prepare(Options{Program: "x", HostSpec: "a,b", Fanout: -1, FanoutSet: true}, noEnv)
	if err == nil || !strings.Contains(err.Error(), "--fanout -1") {
		t.Fatalf("--fanout -1: %v", err)
	}
	slurm := map[string]string{"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "1(x3)"}
	j, err = Prepare(Options{Program: "x"}, func(k string) string { return slurm[k] })
	if err != nil || j.Fanout != 0 {
		t.Fatalf("in a Slurm allocation: fanout %d, %v; want 0 (srun has its own tree)", j.Fanout, err)
	}
	j, err = Prepare(Options{Program: "x", Fanout: 4, FanoutSet: true}, func(k string) string { return slurm[k] })
	if err != nil || j.Fanout != 4 {
		t.Fatalf("in a Slurm allocation with --fanout 4: fanout %d, %v", j.Fanout, err)
	}
}
