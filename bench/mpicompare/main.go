// Command mpicompare runs apps/bench under jiarun and its C twin
// (bench/c/bench_mpi.c) under Open MPI's mpirun on the same machine, in one
// run, and prints each figure side by side with the ratio.
//
//	mpicompare -jiarun ./jiarun -bench ./bin/bench -mpirun mpirun.openmpi -mpibench ./bin/bench_mpi
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

type test struct {
	name     string
	np       int
	min, max int
	unit     string
	higher   bool // higher is better (bandwidth)
}

var tests = []test{
	{"latency", 2, 0, 1 << 20, "µs", false},
	{"bw", 2, 4096, 4 << 20, "MB/s", true},
	{"allreduce", 2, 8, 1 << 20, "µs", false},
	{"allreduce", 4, 8, 1 << 20, "µs", false},
	{"barrier", 2, 0, 0, "µs", false},
	{"barrier", 4, 0, 0, "µs", false},
}

func main() {
	jiarun := flag.String("jiarun", "./jiarun", "jiarun binary")
	bench := flag.String("bench", "./bin/bench", "apps/bench binary")
	mpirun := flag.String("mpirun", "mpirun.openmpi", "Open MPI's mpirun")
	mpibench := flag.String("mpibench", "./bin/bench_mpi", "the C twin built with Open MPI")
	only := flag.String("tests", "", "comma-separated test names to run (default all)")
	flag.Parse()
	for _, t := range tests {
		if *only != "" && !strings.Contains(","+*only+",", ","+t.name+",") {
			continue
		}
		n := strconv.Itoa(t.np)
		lo, hi := strconv.Itoa(t.min), strconv.Itoa(t.max)
		ours, err := run(*jiarun, "-np", n, *bench, "-test", t.name, "-min", lo, "-max", hi)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mpicompare: jiarun %s: %v\n", t.name, err)
			os.Exit(1)
		}
		args := []string{"--allow-run-as-root", "-np", n}
		if t.np > 2 {
			args = append(args, "--oversubscribe")
		}
		theirs, err := run(*mpirun, append(args, *mpibench, t.name, lo, hi)...)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mpicompare: mpirun %s: %v\n", t.name, err)
			os.Exit(1)
		}
		fmt.Printf("\n%s, %d ranks (%s; ratio = jiarun / Open MPI", t.name, t.np, t.unit)
		if t.higher {
			fmt.Printf(", higher is better)\n")
		} else {
			fmt.Printf(", lower is better)\n")
		}
		fmt.Printf("| %9s | %12s | %12s | %8s |\n", "size", "jiarun", "Open MPI", "ratio")
		fmt.Printf("|-----------|--------------|--------------|----------|\n")
		for _, row := range ours {
			o, ok := lookup(theirs, row[0])
			ratio := "-"
			if ok && o != 0 {
				ratio = fmt.Sprintf("%.2f", row[1]/o)
			}
			fmt.Printf("| %9.0f | %12.3f | %12.3f | %8s |\n", row[0], row[1], o, ratio)
		}
	}
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

func lookup(rows [][2]float64, size float64) (float64, bool) {
	for _, r := range rows {
		if r[0] == size {
			return r[1], true
		}
	}
	return 0, false
}
