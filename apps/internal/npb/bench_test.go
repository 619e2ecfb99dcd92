package npb_test

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/jiarun/jia/apps/internal/npb"
	"github.com/jiarun/jia/apps/internal/npb/npbtest"
)

var (
	benchClass = flag.String("npb.class", "A", "class for BenchmarkKernels")
	benchRanks = flag.String("npb.ranks", "1,2", "comma-separated rank counts for BenchmarkKernels")
	benchKern  = flag.String("npb.kernels", "EP,IS,CG,MG,FT", "comma-separated kernels for BenchmarkKernels")
)

// BenchmarkKernels runs each kernel on in-process ranks and reports NPB's
// own numbers: the best timed region (timed-s) and its Mop/s. One
// benchmark iteration is one whole run, setup included; use -benchtime=3x.
//
//	go test -run - -bench Kernels -benchtime 3x ./apps/internal/npb -npb.class A -npb.ranks 1,2
func BenchmarkKernels(b *testing.B) {
	class := (*benchClass)[0]
	for _, k := range strings.Split(*benchKern, ",") {
		for _, s := range strings.Split(*benchRanks, ",") {
			np, err := strconv.Atoi(s)
			if err != nil {
				b.Fatalf("bad -npb.ranks %q", *benchRanks)
			}
			b.Run(fmt.Sprintf("%s/%c/np=%d", k, class, np), func(b *testing.B) {
				best := npb.Result{Time: math.Inf(1)}
				for b.Loop() {
					var res npb.Result
					err := npbtest.Run(np, func(c npb.Comm) error {
						r, err := npb.Run(k, c, class)
						if c.Rank() == 0 {
							res = r
						}
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
					if !res.Verified {
						var sb strings.Builder
						res.Report(&sb)
						b.Fatalf("not verified:\n%s", sb.String())
					}
					if res.Time < best.Time {
						best = res
					}
				}
				b.ReportMetric(best.Time, "timed-s")
				b.ReportMetric(best.Mops, "Mop/s")
			})
		}
	}
}
