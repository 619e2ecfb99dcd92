// Command hello is the first jiarun program: every rank sends a greeting to
// its right neighbour and prints the one it received from its left.
//
//	jiarun -np 4 ./bin/hello
package main

import (
	"fmt"
	"os"

	"github.com/jiarun/jia"
)

func main() {
	jia.MustInit()
	rank, size := jia.Rank(), jia.Size()
	host, _ := os.Hostname()
	right, left := (rank+1)%size, (rank+size-1)%size
	msg := fmt.Sprintf("greetings from rank %d on %s", rank, host)
	if err := jia.SendBytes(right, []byte(msg)); err != nil {
		fail(err)
	}
	got, err := jia.RecvBytes(left)
	if err != nil {
		fail(err)
	}
	fmt.Printf("hello from rank %d of %d: rank %d says %q\n", rank, size, left, got)
	if err := jia.Finalize(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "hello:", err)
	os.Exit(1)
}
