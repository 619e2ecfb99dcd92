package launcher

import (
	"fmt"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	for expr, want := range map[string]string{
		"vm":                       "vm",
		"jh[1-3]":                  "jh1 jh2 jh3",
		"node[01-03,07],login1":    "node01 node02 node03 node07 login1",
		"a[8-10]":                  "a8 a9 a10",
		"rack1-n[009-011]x,single": "rack1-n009x rack1-n010x rack1-n011x single",
	} {
		got, err := ExpandHostlist(expr)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("%q: got %v, %v; want %s", expr, got, err, want)
		}
	}
	for _, bad := range []string{"n[1-", "n[3-1]", "n[a-b]", "n[1-2][3-4]"} {
		if _, err := ExpandHostlist(bad); err == nil {
			t.Errorf("%q expanded", bad)
		}
	}
}

func TestSlurmAllocation(t *testing.T) {
	env := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "jh[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"}
	hosts, src, err := SlurmAllocation(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%d %d %s %d %s", hosts.TotalSlots(), len(hosts), hosts[0].Name, hosts[2].Slots, src); got != "5 3 jh1 1 Slurm job 42" {
		t.Fatalf("got %s", got)
	}
	env["SLURM_TASKS_PER_NODE"] = "2"
	if _, _, err := SlurmAllocation(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "3 nodes") {
		t.Fatalf("mismatched counts: %v", err)
	}
	if h, _, err := SlurmAllocation(func(string) string { return "" }); h != nil || err != nil {
		t.Fatalf("no allocation: %v %v", h, err)
	}
}
