// Command mpicompare runs apps/bench under jiarun and its C twin
// (bench/c/bench_mpi.c) under Open MPI's mpirun on the same machine, in one
// run, and prints each figure side by side with the ratio.
//
//	mpicompare -jiarun ./jiarun -bench ./bin/bench -mpirun mpirun.openmpi -mpibench ./bin/bench_mpi
//
// -min and -max narrow every test to the sizes between them; -runs n runs
// each test n times, the two sides alternating (each goes first in turn),
// and keeps each size's best figure of each side (on a busy machine the
// best of several runs is the figure least disturbed by other processes).
// The ratio column divides the two best figures; the paired column is the
// median of each run's own ratio (the two figures of a run measured a
// second apart), which a machine whose speed drifts between runs moves
// less:
//
//	mpicompare -tests bw,bibw -min 16384 -max 1048576 -runs 5
//
// -jarg and -marg add one argument each to every jiarun and mpirun command
// line (repeat them), for example to place the two ranks on two hosts and
// force Open MPI onto TCP:
//
//	mpicompare -tests latency,bw -title "TCP between two hosts" \
//		-jarg -H -jarg h1:1,h2:1 \
//		-marg -H -marg h1,h2 -marg --mca -marg btl -marg tcp,self
//
// With -floor (the default) it also measures, before every run and after
// the last of each table, the machine's floor for a shared-memory message:
// two threads bound to two processors passing a cache line back and forth
// (rdmaiotest.SpinPingPong), and prints its range in the table's title. On
// a virtual machine that figure moves by several times from one minute to
// the next, and every small-message figure of both sides with it; the
// range tells in which regimes a table was measured.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

type test struct {
	name     string
	np       int
	min, max int
	unit     string
	higher   bool   // higher is better (bandwidth)
	block    int    // vector: block length in bytes
	pack     bool   // vector: jiarun packs instead of gathering
	note     string // what the table's title adds
}

var tests = []test{
	{name: "latency", np: 2, max: 4 << 20, unit: "µs"},
	{name: "bw", np: 2, min: 1, max: 4 << 20, unit: "MB/s", higher: true},
	{name: "bibw", np: 2, min: 1, max: 4 << 20, unit: "MB/s", higher: true},
	{name: "mr", np: 2, min: 1, max: 4096, unit: "million messages/s", higher: true},
	{name: "vector", np: 2, min: 64, max: 4 << 20, unit: "µs", block: 64, note: "64-byte blocks, stride 128, gathered"},
	{name: "vector", np: 2, min: 64, max: 4 << 20, unit: "µs", block: 64, pack: true, note: "64-byte blocks, stride 128, packed"},
	{name: "vector", np: 2, min: 4096, max: 4 << 20, unit: "µs", block: 4096, note: "4 KiB blocks, stride 8 KiB, gathered"},
	{name: "vector", np: 2, min: 4096, max: 4 << 20, unit: "µs", block: 4096, pack: true, note: "4 KiB blocks, stride 8 KiB, packed"},
	{name: "barrier", np: 2, unit: "µs"},
	{name: "barrier", np: 4, unit: "µs"},
	{name: "bcast", np: 4, min: 1, max: 4 << 20, unit: "µs"},
	{name: "allreduce", np: 2, min: 8, max: 4 << 20, unit: "µs"},
	{name: "allreduce", np: 4, min: 8, max: 4 << 20, unit: "µs"},
	{name: "alltoall", np: 4, min: 1, max: 1 << 20, unit: "µs"},
}

// argList is a flag that collects one argument per occurrence.
type argList []string

func (a *argList) String() string     { return strings.Join(*a, " ") }
func (a *argList) Set(v string) error { *a = append(*a, v); return nil }

func main() {
	var jextra, mextra argList
	flag.Var(&jextra, "jarg", "an argument added to every jiarun command line (repeatable)")
	flag.Var(&mextra, "marg", "an argument added to every mpirun command line (repeatable)")
	what := flag.String("title", "", "what the tables' titles add (e.g. where the ranks run)")
	jiarun := flag.String("jiarun", "./jiarun", "jiarun binary")
	bench := flag.String("bench", "./bin/bench", "apps/bench binary")
	mpirun := flag.String("mpirun", "mpirun.openmpi", "Open MPI's mpirun")
	mpibench := flag.String("mpibench", "./bin/bench_mpi", "the C twin built with Open MPI")
	only := flag.String("tests", "", "comma-separated test names to run (default all)")
	minSize := flag.Int("min", 0, "smallest size of every test (0: the test's own)")
	maxSize := flag.Int("max", 0, "largest size of every test (0: the test's own)")
	runs := flag.Int("runs", 1, "runs of each test per side; each size's best figure is kept")
	floor := flag.Bool("floor", true, "measure the machine's cache-line ping-pong around every run and print its range in the table's title")
	flag.Parse()
	for _, t := range tests {
		if *only != "" && !strings.Contains(","+*only+",", ","+t.name+",") {
			continue
		}
		n := strconv.Itoa(t.np)
		if *minSize > 0 {
			t.min = max(t.min, *minSize)
		}
		if *maxSize > 0 {
			t.max = min(t.max, *maxSize)
		}
		lo, hi := strconv.Itoa(t.min), strconv.Itoa(t.max)
		blk := strconv.Itoa(max(t.block, 8))
		jargs := append([]string{"-np", n}, jextra...)
		if t.pack {
			jargs = append(jargs, "--env", "JIA_COMM_PACK_VECTORS=true")
		}
		args := append([]string{"--allow-run-as-root", "-np", n}, mextra...)
		if t.np > 2 {
			args = append(args, "--oversubscribe")
		}
		var ours, theirs [][2]float64
		paired := map[float64][]float64{} // size → ratio of each run's two figures
		fl := floorRange{}
		for i := 0; i < max(*runs, 1); i++ {
			if *floor {
				fl.add(floorHop())
			}
			// The order alternates too: on a machine whose state drifts, the
			// program that runs first after the floor probe can fare
			// systematically better or worse than the second.
			var o, m [][2]float64
			for k := range 2 {
				if (k+i)%2 == 0 {
					o = mustRun("jiarun", t.name, *jiarun, append(jargs, *bench, "-test", t.name, "-min", lo, "-max", hi, "-block", blk)...)
				} else {
					m = mustRun("mpirun", t.name, *mpirun, append(args, *mpibench, t.name, lo, hi, blk)...)
				}
			}
			ours, theirs = best(ours, o, t.higher), best(theirs, m, t.higher)
			addRatios(paired, o, m)
		}
		if *floor {
			fl.add(floorHop())
		}
		title := t.name
		if t.note != "" {
			title += ", " + t.note
		}
		if *what != "" {
			title += ", " + *what
		}
		if *runs > 1 {
			title += fmt.Sprintf(", best of %d runs alternating, each side first in turn", *runs)
		}
		if *floor {
			title += fmt.Sprintf(" (machine floor %.3f–%.3f µs per hop)", fl.lo, fl.hi)
		}
		fmt.Printf("\n%s, %d ranks (%s; ratio = jiarun / Open MPI", title, t.np, t.unit)
		if t.higher {
			fmt.Printf(", higher is better)\n")
		} else {
			fmt.Printf(", lower is better)\n")
		}
		fmt.Printf("| %9s | %12s | %12s | %8s | %8s |\n", "size", "jiarun", "Open MPI", "ratio", "paired")
		fmt.Printf("|-----------|--------------|--------------|----------|----------|\n")
		for _, row := range ours {
			o, ok := lookup(theirs, row[0])
			ratio, pair := "-", "-"
			if ok && o != 0 {
				ratio = fmt.Sprintf("%.2f", row[1]/o)
			}
			if rs := paired[row[0]]; len(rs) > 0 {
				pair = fmt.Sprintf("%.2f", median(rs))
			}
			fmt.Printf("| %9.0f | %12.3f | %12.3f | %8s | %8s |\n", row[0], row[1], o, ratio, pair)
		}
	}
}

// floorHop returns the machine's floor for a shared-memory hop, in µs: the
// best of 3 measurements of 20000 round trips of rdmaiotest.SpinPingPong
// (two threads bound to two processors passing a cache line).
func floorHop() float64 {
	const n = 20000
	best := time.Duration(-1)
	for range 3 {
		if d := rdmaiotest.SpinPingPong(n); best < 0 || d < best {
			best = d
		}
	}
	return float64(best.Nanoseconds()) / (2 * n) / 1000
}

// floorRange is the range of floorHop over a table's runs.
type floorRange struct{ lo, hi float64 }

func (f *floorRange) add(v float64) {
	if f.lo == 0 || v < f.lo {
		f.lo = v
	}
	f.hi = max(f.hi, v)
}

// mustRun is run that exits, naming the launcher (what) and the test, when
// the benchmark fails.
func mustRun(what, test, name string, args ...string) [][2]float64 {
	rows, err := run(name, args...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mpicompare: %s %s: %v\n", what, test, err)
		os.Exit(1)
	}
	return rows
}

// run runs a benchmark and parses its "size value" lines.
func run(name string, args ...string) ([][2]float64, error) {
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v\n%s", err, errb.String())
	}
	var rows [][2]float64
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		s, err1 := strconv.ParseFloat(f[0], 64)
		v, err2 := strconv.ParseFloat(f[1], 64)
		if err1 == nil && err2 == nil {
			rows = append(rows, [2]float64{s, v})
		}
	}
	return rows, nil
}

// best merges the rows of another run into acc, keeping each size's best
// value (the highest when higher is better, else the lowest).
func best(acc, rows [][2]float64, higher bool) [][2]float64 {
	if acc == nil {
		return rows
	}
	for _, r := range rows {
		for i := range acc {
			if acc[i][0] == r[0] && (higher && r[1] > acc[i][1] || !higher && r[1] < acc[i][1]) {
				acc[i][1] = r[1]
			}
		}
	}
	return acc
}

// addRatios appends to paired[size], for every size both runs measured,
// the ratio of our figure to theirs.
func addRatios(paired map[float64][]float64, ours, theirs [][2]float64) {
	for _, row := range ours {
		if v, ok := lookup(theirs, row[0]); ok && v != 0 {
			paired[row[0]] = append(paired[row[0]], row[1]/v)
		}
	}
}

// median returns the median of vs (the mean of the middle two for an
// even count); it sorts vs.
func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

func lookup(rows [][2]float64, size float64) (float64, bool) {
	for _, r := range rows {
		if r[0] == size {
			return r[1], true
		}
	}
	return 0, false
}
