// Command tree measures jiarun's start-up against the number of hosts,
// with the proxies started as a tree (--fanout F) and flat (--fanout 0,
// jiarun starts every proxy), on hosts simulated on this machine by a
// launch agent that gives each host its own home and staging cache.
//
//	tree -jiarun ./jiarun -hello ./bin/hello -agent e2e/testdata/local-agent \
//	     -hosts 1,2,4,8,16,32 -fanout 2 -runs 3 -cost 50ms
//
// It runs hello (one rank per host) and prints, per host count, the median
// time until every proxy is up and ready (the start-up phase the tree is
// about; from jiarun's debug log) and from spawn to exit, twice: as measured here, where every simulated
// host shares this machine's cores, and with a modelled cost per start
// (-cost): the agent then makes each start cost the starting process that
// long, one start at a time, as an SSH login costs the machine that makes
// it (80–110 ms for one Go SSH connection on the test cluster). Flat, that
// cost is paid n times by jiarun; in a tree each proxy pays it F times,
// once per generation, so start-up grows with log n. Each table ends with
// least-squares fits of a + b·log2(n) and a + b·n to the ready times.
// (After the start-up phase every simulated host runs its rank on this
// machine's cores, so the run to exit grows with n whatever the tree.)
//
// The hosts share the file system here, so by default nothing is staged
// (--no-stage): staging's work on each host (a shell, a hash of the
// program) would run on this machine's few cores for all the simulated
// hosts at once, a cost that real hosts pay in parallel. -stage measures
// it anyway.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	jiarun := flag.String("jiarun", "./jiarun", "jiarun binary")
	hello := flag.String("hello", "./bin/hello", "hello program")
	agent := flag.String("agent", "e2e/testdata/local-agent", "launch agent that simulates hosts")
	hostList := flag.String("hosts", "1,2,4,8,16,32", "host counts")
	fanout := flag.Int("fanout", 2, "fan-out of the tree")
	runs := flag.Int("runs", 3, "timed runs per point (the median is shown)")
	warmup := flag.Int("warmup", 1, "untimed runs per point first (they stage the binaries)")
	cost := flag.Duration("cost", 100*time.Millisecond, "modelled cost of one start to the starting process (0: skip that table)")
	stage := flag.Bool("stage", false, "stage jiarun and hello to each simulated host's cache (default: --no-stage)")
	flag.Parse()

	var counts []int
	for _, f := range strings.Split(*hostList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fatalf("-hosts %q: want positive numbers", *hostList)
		}
		counts = append(counts, n)
	}
	if *fanout < 1 {
		fatalf("-fanout %d: want at least 1", *fanout)
	}
	if *runs < 1 {
		fatalf("-runs %d: want at least 1", *runs)
	}
	agentPath, err := filepath.Abs(*agent)
	if err != nil {
		fatalf("%v", err)
	}
	root, err := os.MkdirTemp("", "jiarun-treebench-")
	if err != nil {
		fatalf("%v", err)
	}
	defer os.RemoveAll(root)

	b := bench{jiarun: *jiarun, hello: *hello, agent: agentPath, root: root, runs: *runs, warmup: *warmup, stage: *stage}
	costs := []time.Duration{0}
	if *cost > 0 {
		costs = append(costs, *cost)
	}
	for _, c := range costs {
		title := "as measured on this machine (every simulated host shares its cores)"
		if c > 0 {
			title = fmt.Sprintf("with a modelled cost of %v per start, paid by the starting process one start at a time", c)
		}
		staged := "--no-stage"
		if *stage {
			staged = "staged, cached"
		}
		fmt.Printf("jiarun start-up, hello with one rank per simulated host (%s), spawn to exit, median of %d (ms)\n%s\n\n", staged, *runs, title)
		tree := fmt.Sprintf("tree fanout %d", *fanout)
		fmt.Printf("| %5s | %11s | %15s | %11s | %11s | %15s |\n", "", "ready", "ready", "", "exit", "exit")
		fmt.Printf("| %5s | %11s | %15s | %11s | %11s | %15s |\n", "hosts", "flat", tree, "generations", "flat", tree)
		fmt.Printf("|%s|%s|%s|%s|%s|%s|\n", dashes(7), dashes(13), dashes(17), dashes(13), dashes(13), dashes(17))
		var flatReady, treeReady []float64
		for _, n := range counts {
			f := b.measure(n, 0, c)
			tr := b.measure(n, *fanout, c)
			flatReady, treeReady = append(flatReady, ms(f.ready)), append(treeReady, ms(tr.ready))
			fmt.Printf("| %5d | %11.1f | %15.1f | %11d | %11.1f | %15.1f |\n", n, ms(f.ready), ms(tr.ready),
				generations(n, *fanout), ms(f.exit), ms(tr.exit))
		}
		fmt.Println()
		if len(counts) >= 3 {
			for _, row := range []struct {
				name string
				y    []float64
			}{{"flat", flatReady}, {tree, treeReady}} {
				la, lb, lr := fit(counts, row.y, func(n float64) float64 { return math.Log2(n) })
				na, nb, nr := fit(counts, row.y, func(n float64) float64 { return n })
				better := "log n"
				if nr > lr {
					better = "n"
				}
				fmt.Printf("ready, %-15s %7.1f + %6.1f·log2(n) (R² %.3f)   %7.1f + %6.2f·n (R² %.3f)   closer to %s\n",
					row.name+":", la, lb, lr, na, nb, nr, better)
			}
			fmt.Println()
		}
	}
}

type bench struct {
	jiarun, hello, agent, root string
	runs, warmup               int
	stage                      bool
}

// times are one point's medians: until every proxy was ready, and until
// jiarun exited.
type times struct{ ready, exit time.Duration }

// readyRe finds jiarun's debug line saying every proxy is ready.
var readyRe = regexp.MustCompile(`msg="proxies ready".* elapsed=(\S+)`)

// measure runs hello on n simulated hosts.
func (b *bench) measure(n, fanout int, cost time.Duration) times {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("sim%03d:1", i+1)
	}
	args := []string{"-np", strconv.Itoa(n), "-H", strings.Join(hosts, ","), "--fanout", strconv.Itoa(fanout),
		"--launch-agent", b.agent, "--log-level", "debug"}
	if !b.stage {
		args = append(args, "--no-stage")
	}
	args = append(args, b.hello)
	env := append(os.Environ(), "LOCAL_AGENT_ROOT="+b.root, "LOCAL_AGENT_COST=")
	if cost > 0 {
		env[len(env)-1] = "LOCAL_AGENT_COST=" + strconv.FormatFloat(cost.Seconds(), 'f', 3, 64)
	}
	var ready, exit []time.Duration
	for i := 0; i < b.warmup+b.runs; i++ {
		cmd := exec.Command(b.jiarun, args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		err := cmd.Run()
		d := time.Since(start)
		m := readyRe.FindStringSubmatch(errb.String())
		if err != nil || strings.Count(out.String(), "hello from rank") != n || m == nil {
			fatalf("jiarun %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
		}
		r, err := time.ParseDuration(m[1])
		if err != nil {
			fatalf("jiarun's ready time %q: %v", m[1], err)
		}
		if i >= b.warmup {
			ready, exit = append(ready, r), append(exit, d)
		}
	}
	return times{ready: median(ready), exit: median(exit)}
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// generations is the depth of the proxy tree (jiarun's planTree): the
// least d with F + F² + … + F^d ≥ n, 1 when n ≤ F.
func generations(n, fanout int) int {
	d, reach, level := 0, 0, 1
	for reach < n {
		level *= fanout
		reach += level
		d++
	}
	return d
}

// fit fits y = a + b·g(x) by least squares and returns a, b and R².
func fit(xs []int, y []float64, g func(float64) float64) (a, b, r2 float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i, x := range xs {
		gx := g(float64(x))
		sx += gx
		sy += y[i]
		sxx += gx * gx
		sxy += gx * y[i]
	}
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	a = (sy - b*sx) / n
	mean := sy / n
	var ssRes, ssTot float64
	for i, x := range xs {
		e := y[i] - (a + b*g(float64(x)))
		ssRes += e * e
		ssTot += (y[i] - mean) * (y[i] - mean)
	}
	if ssTot == 0 {
		return a, b, 1
	}
	return a, b, 1 - ssRes/ssTot
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func dashes(n int) string { return strings.Repeat("-", n) }

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "tree: "+format+"\n", a...)
	os.Exit(1)
}
