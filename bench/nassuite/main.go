// Command nassuite runs the bundled NAS kernels through jiarun and prints
// one summary table: kernel, class, ranks, time, Mop/s, verified. It exits
// non-zero if any kernel fails to run or to verify.
//
//	nassuite -np 4 -class S -jiarun ./jiarun -bin ./bin
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

func main() {
	np := flag.String("np", "4", "ranks, or a comma-separated list of rank counts")
	class := flag.String("class", "S", "problem classes, comma-separated")
	jiarun := flag.String("jiarun", "./jiarun", "jiarun binary")
	bin := flag.String("bin", "./bin", "directory of the kernel binaries")
	kernels := flag.String("kernels", "ep,is,cg,mg,ft", "kernels to run")
	best := flag.Int("best", 1, "runs of each, keeping the best time")
	flag.Parse()

	timeRe := regexp.MustCompile(`Time in seconds\s*=\s*([0-9.eE+-]+)`)
	mopsRe := regexp.MustCompile(`Mop/s total\s*=\s*([0-9.eE+-]+)`)
	okRe := regexp.MustCompile(`Verification\s*=\s*SUCCESSFUL`)
	fmt.Printf("| %-6s | %-5s | %5s | %10s | %10s | %-8s |\n", "kernel", "class", "ranks", "time (s)", "Mop/s", "verified")
	fmt.Printf("|--------|-------|-------|------------|------------|----------|\n")
	failed := false
	for _, cl := range strings.Split(*class, ",") {
		for _, n := range strings.Split(*np, ",") {
			for _, k := range strings.Split(*kernels, ",") {
				var tBest, mBest float64
				verified := "no"
				for i := 0; i < *best; i++ {
					cmd := exec.Command(*jiarun, "-np", n, filepath.Join(*bin, k), "-class", cl)
					var out, errb bytes.Buffer
					cmd.Stdout, cmd.Stderr = &out, &errb
					err := cmd.Run()
					s := out.String()
					tm, mp := timeRe.FindStringSubmatch(s), mopsRe.FindStringSubmatch(s)
					if err != nil || tm == nil || mp == nil || !okRe.MatchString(s) {
						verified = "FAILED"
						fmt.Fprintf(os.Stderr, "nassuite: %s class %s on %s ranks: %v\n%s%s", k, cl, n, err, s, errb.String())
						break
					}
					t, _ := strconv.ParseFloat(tm[1], 64)
					m, _ := strconv.ParseFloat(mp[1], 64)
					if verified == "no" || t < tBest {
						tBest, mBest = t, m
					}
					verified = "yes"
				}
				if verified != "yes" {
					failed = true
				}
				fmt.Printf("| %-6s | %-5s | %5s | %10.4f | %10.2f | %-8s |\n", strings.ToUpper(k), cl, n, tBest, mBest, verified)
			}
		}
	}
	if failed {
		os.Exit(1)
	}
}
