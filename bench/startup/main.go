// Command startup times whole jobs from spawn to exit — jiarun against
// mpirun on the same machine in the same run — and prints a table with the
// ratio.
//
//	startup -runs 20 -np 4 -jiarun ./jiarun -hello ./bin/hello -mpirun mpirun.openmpi -mpihello ./bin/hello_mpi
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	runs := flag.Int("runs", 20, "timed runs of each command")
	warmup := flag.Int("warmup", 3, "untimed runs first")
	np := flag.Int("np", 4, "ranks")
	jiarun := flag.String("jiarun", "./jiarun", "jiarun binary")
	hello := flag.String("hello", "./bin/hello", "jiarun hello program")
	mpirun := flag.String("mpirun", "mpirun.openmpi", "Open MPI's mpirun (empty to skip)")
	mpihello := flag.String("mpihello", "./bin/hello_mpi", "C MPI hello program")
	target := flag.Duration("target", 20*time.Millisecond, "jiarun target (median)")
	extra := flag.String("args", "", "more jiarun flags, space separated (e.g. a host list)")
	name := flag.String("name", "", "the jiarun row's name (default: the command)")
	flag.Parse()

	n := strconv.Itoa(*np)
	argv := append(append([]string{*jiarun, "-np", n}, strings.Fields(*extra)...), *hello)
	rowName := *name
	if rowName == "" {
		rowName = "jiarun -np " + n + " hello"
	}
	rows := []row{{name: rowName, argv: argv}}
	if *mpirun != "" {
		rows = append(rows, row{name: "mpirun -np " + n + " hello_mpi (Open MPI)",
			argv: []string{*mpirun, "--allow-run-as-root", "--oversubscribe", "-np", n, *mpihello}})
	}
	for i := range rows {
		if err := rows[i].measure(*warmup, *runs); err != nil {
			fmt.Fprintf(os.Stderr, "startup: %s: %v\n", rows[i].name, err)
			os.Exit(1)
		}
	}
	fmt.Printf("Start-up, spawn to exit, %d runs after %d warm-up (ms)\n\n", *runs, *warmup)
	fmt.Printf("| %-48s | %8s | %8s |\n", "command", "min", "median")
	fmt.Printf("|%s|%s|%s|\n", dashes(50), dashes(10), dashes(10))
	for _, r := range rows {
		fmt.Printf("| %-48s | %8.2f | %8.2f |\n", r.name, ms(r.min()), ms(r.median()))
	}
	j := rows[0].median()
	verdict := "MET"
	if j > *target {
		verdict = "MISSED"
	}
	fmt.Printf("\njiarun median %.2f ms; target under %v: %s\n", ms(j), *target, verdict)
	if len(rows) > 1 {
		ratio := float64(j) / float64(rows[1].median())
		v := "MET"
		if ratio >= 0.1 {
			v = "MISSED"
		}
		fmt.Printf("ratio jiarun / Open MPI (median): %.3f; target under 0.1: %s\n", ratio, v)
	}
}

type row struct {
	name  string
	argv  []string
	times []time.Duration
}

func (r *row) measure(warmup, runs int) error {
	for i := 0; i < warmup+runs; i++ {
		cmd := exec.Command(r.argv[0], r.argv[1:]...)
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return err
		}
		if i >= warmup {
			r.times = append(r.times, time.Since(start))
		}
	}
	slices.Sort(r.times)
	return nil
}

func (r *row) min() time.Duration    { return r.times[0] }
func (r *row) median() time.Duration { return r.times[len(r.times)/2] }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func dashes(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = '-'
	}
	return string(b)
}
