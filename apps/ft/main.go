// Command ft is the NAS Parallel Benchmark kernel FT (NPB 3.4 rules), on
// jiarun's message passing:
//
//	jiarun -np 4 ./bin/ft -class A
package main

import "github.com/jiarun/jia/apps/internal/npbmain"

func main() { npbmain.Main("FT") }
