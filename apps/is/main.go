// Command is is the NAS Parallel Benchmark kernel IS (NPB 3.4 rules), on
// jiarun's message passing:
//
//	jiarun -np 4 ./bin/is -class A
package main

import "github.com/jiarun/jia/apps/internal/npbmain"

func main() { npbmain.Main("IS") }
