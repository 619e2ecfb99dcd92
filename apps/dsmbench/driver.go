package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// anchor is a figure measured with JIAJIA on this kind of machine: 2
// processes (4 where the row says so), median of 3 runs, other hosts
// spinning (§4.2 of the anchor note), or the app time of §3.3.
type anchor struct {
	jia21, mjia float64 // 0: not measured
	target      string
}

// jiarunArgs are the driver's arguments for jiarun before the program
// (-jarg), and acrossHosts says they put the ranks on different hosts.
var (
	jiarunArgs  []string
	acrossHosts bool
)

// row is one line of the table: a metric of Result at np ranks.
type row struct {
	name   string
	np     int
	unit   string
	get    func(Result) float64
	lower  bool // smaller is better
	anchor anchor
}

// The modes of the DSM on one host, set for each run of the driver: the
// ranks keep a copy each and fault through their pagers (userfaultfd), or
// share one copy (host-shared; see dsm.host_share).
const (
	envHostShare   = "JIA_DSM_HOST_SHARE"
	modeFaults     = "userfaultfd (host_share=false)"
	modeShared     = "host-shared (host_share=true)"
	modeHosts      = "across hosts"
	sharedMeasures = "read,write,lock,barrier,contended"
)

// sharedRows are the rows measured with the ranks of the host sharing one
// copy of the regions: no page fault goes through a pager.
func sharedRows(nps []int) []row {
	var rs []row
	for _, np := range nps {
		a := func(x anchor) anchor {
			if np != 2 {
				return anchor{}
			}
			return x
		}
		rs = append(rs,
			row{"first read of a page homed on another rank of the host (host-shared) (µs/page)", np, "µs", func(r Result) float64 { return r.ReadFault }, true, a(anchor{115, 685, "< 15"})},
			row{"first write of a page homed on another rank of the host (host-shared) (µs/page)", np, "µs", func(r Result) float64 { return r.WriteFault }, true, a(anchor{116, 676, ""})},
			row{"lock+unlock, uncontended, manager = rank 1 (µs)", np, "µs", func(r Result) float64 { return r.LockRemote }, true, a(anchor{120, 947, "< 30"})},
			row{"empty barrier, all ranks (µs)", np, "µs", func(r Result) float64 { return r.Barrier }, true, barrierAnchor(np)},
			row{"contended lock, all ranks, counter++ (µs/acquire)", np, "µs", func(r Result) float64 { return r.Contended }, true, contendedAnchor(np)},
		)
	}
	return rs
}

// barrierAnchor is JIAJIA's empty barrier at np ranks.
func barrierAnchor(np int) anchor {
	if np == 4 {
		return anchor{12592, 28852, "< 100"}
	}
	return anchor{84.6, 634, ""}
}

// contendedAnchor is JIAJIA's contended lock at np ranks.
func contendedAnchor(np int) anchor {
	if np == 4 {
		return anchor{13044, 17456, ""}
	}
	return anchor{172, 1180, ""}
}

// shareArgs are jiarun's arguments that set the mode of a run on one host
// (none across hosts, where the ranks cannot share memory).
func shareArgs(share bool) []string {
	if acrossHosts {
		return nil
	}
	return []string{"--env", fmt.Sprintf("%s=%t", envHostShare, share)}
}

func rows(nps []int) []row {
	var rs []row
	add := func(r row) {
		for _, np := range nps {
			if np == r.np || (r.np == 0 && np >= 2) {
				r := r
				r.np = np
				if np != 2 {
					r.anchor = anchor{}
				}
				rs = append(rs, r)
			}
		}
	}
	lower := true
	readTarget := "< 15"
	if acrossHosts {
		readTarget = "< 40"
	}
	add(row{"read fault, page homed on rank 1 (µs/page)", 0, "µs", func(r Result) float64 { return r.ReadFault }, lower, anchor{115, 685, readTarget}})
	add(row{"read, sequential with prefetch (µs/page)", 0, "µs", func(r Result) float64 { return r.ReadSeq }, lower, anchor{}})
	add(row{"write fault, page homed on rank 1: fetch + twin (µs/page)", 0, "µs", func(r Result) float64 { return r.WriteFault }, lower, anchor{116, 676, ""}})
	add(row{"barrier right after dirtying 100 remote pages (µs)", 0, "µs", func(r Result) float64 { return r.DirtyBarrier }, lower, anchor{1910, 2216, ""}})
	add(row{"write of own home page after a read, nobody else holds it (µs/page)", 0, "µs", func(r Result) float64 { return r.HomeWrite }, lower, anchor{16.9, 12.6, ""}})
	add(row{"write of own home page another rank read (µs/page)", 0, "µs", func(r Result) float64 { return r.HomeWriteShared }, lower, anchor{16.9, 12.6, ""}})
	add(row{"first touch of own home page (µs/page)", 0, "µs", func(r Result) float64 { return r.HomeTouch }, lower, anchor{}})
	add(row{"lock+unlock, uncontended, manager = self (µs)", 0, "µs", func(r Result) float64 { return r.LockSelf }, lower, anchor{12.3, 159, ""}})
	add(row{"lock+unlock, uncontended, manager = rank 1 (µs)", 0, "µs", func(r Result) float64 { return r.LockRemote }, lower, anchor{120, 947, "< 30"}})
	for _, np := range nps {
		if np < 2 {
			continue
		}
		rs = append(rs, row{"empty barrier, all ranks (µs)", np, "µs", func(r Result) float64 { return r.Barrier }, lower, barrierAnchor(np)})
	}
	for _, np := range nps {
		if np < 2 {
			continue
		}
		rs = append(rs, row{"contended lock, all ranks, counter++ (µs/acquire)", np, "µs", func(r Result) float64 { return r.Contended }, lower, contendedAnchor(np)})
	}
	add(row{"diff throughput, whole pages at a barrier (MB/s)", 0, "MB/s", func(r Result) float64 { return r.DiffMBs }, false, anchor{}})
	return rs
}

// appRun is how the driver runs one application and what JIAJIA 2.1 took
// for it (app time, seconds, at 1 and 2 processes; 0: not comparable).
type appRun struct {
	name string
	args []string
	re   *regexp.Regexp
	jia  map[int]float64
	note string
}

var timeRe = regexp.MustCompile(`time=([0-9.]+) s`)

var appRuns = map[string]appRun{
	"sor": {"sor", []string{"-n", "2048", "-iter", "100"}, timeRe, nil, "JIAJIA 2.1: 0.52 / 0.35 s on a 2046×1023 grid"},
	"mm":  {"mm", []string{"-n", "1024"}, timeRe, map[int]float64{1: 5.71, 2: 2.99}, ""},
	"lu":  {"lu", []string{"-n", "2048", "-b", "32", "-full", "0"}, timeRe, map[int]float64{1: 5.29, 2: 4.22}, ""},
}

// driver runs the benchmark and the applications and prints the table.
func driver(jiarun, bin, npList string, runs int, apps string) int {
	var nps []int
	for _, f := range strings.Split(npList, ",") {
		np, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || np < 2 {
			fmt.Fprintf(os.Stderr, "dsmbench: bad -np %q: want rank counts ≥ 2\n", npList)
			return 2
		}
		nps = append(nps, np)
	}
	if !acrossHosts {
		printFloors(runs)
	}

	self := filepath.Join(bin, "dsmbench")
	// The rows of the ranks faulting through their pagers, then (on one
	// host) those of the ranks sharing the host's memory.
	results, shared := map[int][]Result{}, map[int][]Result{}
	modes := []bool{false}
	if !acrossHosts {
		modes = append(modes, true)
	}
	for _, share := range modes {
		measures, into := only, results
		if share {
			measures, into = sharedMeasures, shared
			if only != "" {
				measures = only
			}
		}
		for _, np := range nps {
			for i := 0; i < runs; i++ {
				var args []string
				if measures != "" {
					args = []string{"-only", measures}
				}
				out, err := runMode(jiarun, shareArgs(share), np, self, args...)
				if err != nil {
					fmt.Fprintf(os.Stderr, "dsmbench: np %d: %v\n%s", np, err, out)
					return 1
				}
				var r Result
				line := grepLine(out, "DSMBENCH ")
				if line == "" || json.Unmarshal([]byte(line), &r) != nil {
					fmt.Fprintf(os.Stderr, "dsmbench: np %d: no result in the output:\n%s", np, out)
					return 1
				}
				if r.HostShared != share {
					fmt.Fprintf(os.Stderr, "dsmbench: np %d: a run with %s=%t measured the ranks with host sharing %t\n", np, envHostShare, share, r.HostShared)
					return 1
				}
				into[np] = append(into[np], r)
			}
		}
	}

	where := "ranks on this host"
	if len(jiarunArgs) > 0 {
		where = "jiarun " + strings.Join(jiarunArgs, " ")
	}
	fmt.Printf("\nDSM basic costs (%s): median (min–max) of %d runs; JIAJIA figures from the anchor note (2 processes on network-namespace hosts, other hosts spinning)\n\n", where, runs)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "cost\tranks\tmode\tjiarun\tJIAJIA 2.1\tM-JIAJIA\ttarget\tJIAJIA 2.1 / jiarun\t")
	type tableRow struct {
		row
		shared bool // measured with the ranks sharing the host's memory
	}
	var all []tableRow
	for _, r := range rows(nps) {
		all = append(all, tableRow{r, false})
	}
	if !acrossHosts {
		for _, r := range sharedRows(nps) {
			all = append(all, tableRow{r, true})
		}
	}
	for _, r := range all {
		var v []float64
		from, mode := results, modeFaults
		switch {
		case r.shared:
			from, mode = shared, modeShared
		case acrossHosts:
			mode = modeHosts
		}
		for _, res := range from[r.np] {
			v = append(v, r.get(res))
		}
		if len(v) == 0 || only != "" && slices.Max(v) == 0 {
			continue // not measured (-only)
		}
		ratio := "–"
		if a := r.anchor.jia21; a > 0 && median(v) > 0 {
			if r.lower {
				ratio = fmt.Sprintf("%.1f×", a/median(v))
			} else {
				ratio = fmt.Sprintf("%.1f×", median(v)/a)
			}
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, r.np, mode, spread(v), num(r.anchor.jia21), num(r.anchor.mjia), dash(r.anchor.target), ratio)
	}
	w.Flush()

	if strings.TrimSpace(apps) == "" {
		return 0
	}
	fmt.Printf("\nDSM applications: app time in seconds, median (min–max) of %d runs; speed-up against 1 rank\n\n", runs)
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "app\targs\tmode\tranks\tjiarun s\tspeed-up\tJIAJIA 2.1 s\tJIAJIA 2.1 / jiarun\t")
	code := 0
	for _, name := range strings.Split(apps, ",") {
		a, ok := appRuns[strings.TrimSpace(name)]
		if !ok {
			fmt.Fprintf(os.Stderr, "dsmbench: unknown app %q\n", name)
			return 2
		}
		for _, share := range modes {
			mode := modeFaults
			switch {
			case share:
				mode = modeShared
			case acrossHosts:
				mode = modeHosts
			}
			if c := appModeRows(w, a, mode, jiarun, shareArgs(share), bin, runs); c != 0 {
				code = c
			}
		}
		if a.note != "" {
			fmt.Fprintf(w, "\t(%s)\t\t\t\t\t\t\t\n", a.note)
		}
	}
	w.Flush()
	return code
}

// appModeRows runs application a at 1 and 2 ranks in one mode and prints
// its rows.
func appModeRows(w io.Writer, a appRun, mode, jiarun string, modeArgs []string, bin string, runs int) int {
	code := 0
	var one float64
	for _, np := range []int{1, 2} {
		var v []float64
		for i := 0; i < runs; i++ {
			out, err := runMode(jiarun, modeArgs, np, filepath.Join(bin, a.name), a.args...)
			m := a.re.FindStringSubmatch(out)
			if err != nil || m == nil || !strings.Contains(out, "VERIFIED") {
				fmt.Fprintf(os.Stderr, "dsmbench: %s at %d ranks failed (%v):\n%s", a.name, np, err, out)
				code = 1
				break
			}
			t, _ := strconv.ParseFloat(m[1], 64)
			v = append(v, t)
		}
		if len(v) == 0 {
			continue
		}
		if np == 1 {
			one = median(v)
		}
		speed := "–"
		if one > 0 {
			speed = fmt.Sprintf("%.2f×", one/median(v))
		}
		ratio := "–"
		if j := a.jia[np]; j > 0 {
			ratio = fmt.Sprintf("%.1f×", j/median(v))
		}
		note := strings.Join(a.args, " ")
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", a.name, note, mode, np, spread(v), speed, num(a.jia[np]), ratio)
	}
	return code
}

// runMode runs prog under jiarun with np ranks, with jiarun's arguments
// modeArgs too, and returns its output.
func runMode(jiarun string, modeArgs []string, np int, prog string, args ...string) (string, error) {
	argv := append(append(append([]string{"-np", strconv.Itoa(np), "--timeout", "5m"}, jiarunArgs...), modeArgs...), prog)
	cmd := exec.Command(jiarun, append(argv, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s -np %d %s: %w after %v", jiarun, np, prog, err, time.Since(start).Round(time.Millisecond))
	}
	return out.String(), err
}

func grepLine(out, prefix string) string {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return rest
		}
	}
	return ""
}

// spread formats the median and range of v.
func spread(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	if len(v) == 1 {
		return num(v[0])
	}
	return fmt.Sprintf("%s (%s–%s)", num(median(v)), num(lo), num(hi))
}

func num(x float64) string {
	switch {
	case x == 0:
		return "–"
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}

func dash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// printFloors measures the machine's floors runs times and prints their
// table.
func printFloors(runs int) {
	var floors []Floors
	for i := 0; i < runs; i++ {
		floors = append(floors, measureFloors())
	}
	get := func(fn func(Floors) float64) []float64 {
		var v []float64
		for _, f := range floors {
			if x := fn(f); x > 0 {
				v = append(v, x)
			}
		}
		return v
	}
	fmt.Printf("Machine floors (no DSM): median (min–max) of %d runs\n\n", runs)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "cost\tµs\t")
	fmt.Fprintf(w, "system call (getppid)\t%s\t\n", spread(get(func(f Floors) float64 { return f.Syscall })))
	fmt.Fprintf(w, "wake-up round trip between two processes (futex)\t%s\t\n", spread(get(func(f Floors) float64 { return f.WakeRTT })))
	fmt.Fprintf(w, "page fault served by the kernel (memfd page dropped, then written)\t%s\t\n", spread(get(func(f Floors) float64 { return f.PageFault })))
	if len(floors) > 0 && floors[0].FaultNote != "" {
		fmt.Fprintf(w, "page fault served by another process (userfaultfd, UFFDIO_COPY)\t– (%s)\t\n", floors[0].FaultNote)
		w.Flush()
		return
	}
	fmt.Fprintf(w, "page fault served by another process (userfaultfd, UFFDIO_COPY)\t%s\t\n", spread(get(func(f Floors) float64 { return f.FaultRTT })))
	fmt.Fprintf(w, "  the same, both processes bound to one processor\t%s\t\n", spread(get(func(f Floors) float64 { return f.FaultSameCPU })))
	fmt.Fprintf(w, "  the same, bound to two processors\t%s\t\n", spread(get(func(f Floors) float64 { return f.FaultOtherCPU })))
	fmt.Fprintf(w, "  server polls %v after a fault, unbound\t%s\t\n", pollWindow, spread(get(func(f Floors) float64 { return f.FaultPoll })))
	fmt.Fprintf(w, "  server polls %v after a fault, one processor\t%s\t\n", pollWindow, spread(get(func(f Floors) float64 { return f.FaultPollSameCPU })))
	fmt.Fprintf(w, "  server polls %v after a fault, two processors\t%s\t\n", pollWindow, spread(get(func(f Floors) float64 { return f.FaultPollOtherCPU })))
	w.Flush()
}
