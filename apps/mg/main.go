// Command mg is the NAS Parallel Benchmark kernel MG (NPB 3.4 rules), on
// jiarun's message passing:
//
//	jiarun -np 4 ./bin/mg -class A
package main

import "github.com/jiarun/jia/apps/internal/npbmain"

func main() { npbmain.Main("MG") }
