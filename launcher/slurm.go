package launcher

import (
	"fmt"
	"strconv"
	"strings"
)

// SlurmAllocation returns the hosts of the Slurm allocation jiarun runs in
// (inside salloc or an sbatch script), with the allocation's tasks per node
// as slots, or nil when getenv shows no allocation.
func SlurmAllocation(getenv func(string) string) (HostList, string, error) {
	nodes := getenv("SLURM_JOB_NODELIST")
	if nodes == "" {
		nodes = getenv("SLURM_NODELIST")
	}
	if nodes == "" {
		return nil, "", nil
	}
	src := "the Slurm allocation"
	if id := getenv("SLURM_JOB_ID"); id != "" {
		src = "Slurm job " + id
	}
	names, err := ExpandHostlist(nodes)
	if err != nil {
		return nil, "", fmt.Errorf("%s: SLURM_JOB_NODELIST=%q: %w", src, nodes, err)
	}
	tpn := getenv("SLURM_TASKS_PER_NODE")
	if tpn == "" {
		tpn = getenv("SLURM_JOB_CPUS_PER_NODE")
	}
	counts, err := expandTaskCounts(tpn)
	if err != nil {
		return nil, "", fmt.Errorf("%s: SLURM_TASKS_PER_NODE=%q: %w", src, tpn, err)
	}
	if len(counts) != len(names) {
		return nil, "", fmt.Errorf("%s: %d nodes in SLURM_JOB_NODELIST=%q but %d counts in SLURM_TASKS_PER_NODE=%q",
			src, len(names), nodes, len(counts), tpn)
	}
	hosts := make(HostList, len(names))
	for i, n := range names {
		hosts[i] = Host{Name: n, Slots: counts[i], Source: src}
	}
	return hosts, src, nil
}

// ExpandHostlist expands a Slurm hostlist expression such as
// "node[01-03,07],login1" into host names, keeping leading zeros.
func ExpandHostlist(expr string) ([]string, error) {
	var out []string
	for _, item := range splitTopLevel(expr) {
		if item == "" {
			continue
		}
		open := strings.IndexByte(item, '[')
		if open < 0 {
			out = append(out, item)
			continue
		}
		close := strings.IndexByte(item, ']')
		if close < open {
			return nil, fmt.Errorf("unbalanced brackets in %q", item)
		}
		prefix, ranges, suffix := item[:open], item[open+1:close], item[close+1:]
		if strings.ContainsAny(suffix, "[]") {
			return nil, fmt.Errorf("more than one bracket range in %q is not supported", item)
		}
		for _, r := range strings.Split(ranges, ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || b < a {
				return nil, fmt.Errorf("bad range %q in %q", r, item)
			}
			if b-a > 1<<16 {
				return nil, fmt.Errorf("range %q in %q is too large", r, item)
			}
			for n := a; n <= b; n++ {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, len(lo), n, suffix))
			}
		}
	}
	return out, nil
}

// splitTopLevel splits at commas outside brackets.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// expandTaskCounts expands Slurm's "2(x3),1" into [2 2 2 1].
func expandTaskCounts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		count, rep := part, 1
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			count = part[:i]
			var err error
			if rep, err = strconv.Atoi(part[i+2 : len(part)-1]); err != nil || rep < 1 {
				return nil, fmt.Errorf("bad repeat in %q", part)
			}
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", part)
		}
		for i := 0; i < rep; i++ {
			out = append(out, n)
		}
	}
	return out, nil
}

// SlurmAgent is the launch agent inside an allocation: srun starts one
// proxy on the named node, within the allocation, with its standard input
// and output as the link.
//
// --unbuffered is needed because the link is binary: by default slurmstepd
// passes a task's standard output on only up to its last newline, so a
// frame that does not end in a newline byte stays on the node until another
// one does (the program's staging hung on its first frame). Unbuffered, the
// task's standard output is a pseudo-terminal with output processing off
// (no OPOST), which passes every byte through unchanged and at once;
// standard input and standard error stay pipes.
var SlurmAgent = []string{"srun", "--nodes=1", "--ntasks=1", "--overlap", "--kill-on-bad-exit=1", "--quiet", "--unbuffered", "--input=all", "--nodelist"}
