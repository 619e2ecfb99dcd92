// Command ep is the NAS Parallel Benchmark kernel EP (NPB 3.4 rules), on
// jiarun's message passing:
//
//	jiarun -np 4 ./bin/ep -class A
package main

import "github.com/jiarun/jia/apps/internal/npbmain"

func main() { npbmain.Main("EP") }
