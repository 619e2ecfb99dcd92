// Command rankprog is the end-to-end tests' rank program: each mode makes a
// job behave in one way (fail, hang, print, read) so the tests can check what
// jiarun does about it.
//
//	rankprog MODE [ARGS...]
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/comm"
	rt "github.com/jiarun/jia/runtime"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rankprog MODE [ARGS...]")
		os.Exit(2)
	}
	mode, args := os.Args[1], os.Args[2:]
	switch mode {
	case "beforeinit":
		fmt.Println(jia.Rank())
		return
	case "badsecret":
		// Rank 1 presents a secret that is not the job's.
		if os.Getenv(rt.EnvRank) == "1" {
			os.Setenv(rt.EnvSecret, strings.Repeat("ab", rt.SecretLen))
		}
	}
	jia.MustInit()
	rank := jia.Rank()
	switch mode {
	case "exit": // exit RANK CODE: that rank exits with CODE, the others wait.
		if rank == atoi(args[0]) {
			os.Exit(atoi(args[1]))
		}
		ready()
		select {}
	case "signal": // signal RANK SIGNO: that rank kills itself.
		if rank == atoi(args[0]) {
			syscall.Kill(os.Getpid(), syscall.Signal(atoi(args[1])))
			time.Sleep(time.Minute)
		}
		ready()
		select {}
	case "commkill": // commkill RANK: a ring of 4 KiB messages on World, then that rank dies by SIGKILL (none for -1); the others wait.
		w := jia.World()
		n := w.Size()
		buf := make([]byte, 4096)
		if err := comm.Send(w, buf, (rank+1)%n, 1); err != nil {
			fail(err)
		}
		if _, err := comm.Recv(w, buf, (rank+n-1)%n, 1); err != nil {
			fail(err)
		}
		if rank == 0 {
			fmt.Printf("job %s\n", os.Getenv(rt.EnvJob))
		}
		if err := w.Barrier(); err != nil {
			fail(err)
		}
		if rank == atoi(args[0]) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		comm.Recv(w, buf, (rank+n-1)%n, 2) // never sent
		select {}
	case "abort": // abort RANK CODE
		if rank == atoi(args[0]) {
			jia.Abort(atoi(args[1]), "rankprog asked to abort")
		}
		ready()
		select {}
	case "touch": // touch PATH: create PATH.RANK.
		if err := os.WriteFile(args[0]+"."+strconv.Itoa(rank), nil, 0o644); err != nil {
			fail(err)
		}
	case "nofinalize": // nofinalize RANK: that rank returns without Finalize.
		if rank == atoi(args[0]) {
			return
		}
		ready()
		select {}
	case "jiamsg": // JIAJIA's message calls: a ring, a broadcast, a reduction.
		n := jia.Size()
		msg := []byte(fmt.Sprintf("from %d", rank))
		jia.JiaSend(msg, (rank+1)%n, 5)
		buf := make([]byte, 64)
		got := jia.JiaRecv(buf, -1, -1)
		b := make([]byte, 4)
		if rank == 0 {
			copy(b, "root")
		}
		jia.JiaBcast(b, 0)
		sum := make([]int64, 1)
		jia.JiaReduce([]int64{int64(rank + 1)}, sum, comm.Sum, 0)
		fmt.Printf("rank %d got %q bcast %q", rank, buf[:got], b)
		if rank == 0 {
			fmt.Printf(" sum %d", sum[0])
		}
		fmt.Println()
	case "pwd":
		wd, _ := os.Getwd()
		fmt.Printf("rank %d wd %s\n", rank, wd)
	case "sleep":
		ready()
		select {}
	case "lines": // lines N: N long lines per rank, each written in pieces.
		n := atoi(args[0])
		pad := strings.Repeat("x", 300)
		for i := 0; i < n; i++ {
			fmt.Fprintf(os.Stdout, "rank %d line %d ", rank, i)
			fmt.Fprint(os.Stdout, pad)
			fmt.Fprintf(os.Stdout, " end %d/%d\n", rank, i)
			if i%7 == 0 {
				fmt.Fprintf(os.Stderr, "rank %d err %d %s end\n", rank, i, pad[:50])
			}
		}
		fmt.Print("no newline at the end from rank ", rank)
	case "stdin":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			fmt.Println("stdin error:", err)
			os.Exit(1)
		}
		fmt.Printf("rank %d read %d bytes: %q\n", rank, len(b), b)
	case "hold": // rank 0 waits for stdin to close; then all fence.
		ready()
		if rank == 0 {
			io.Copy(io.Discard, bufio.NewReader(os.Stdin))
		}
		if err := jia.Fence(); err != nil {
			fmt.Fprintln(os.Stderr, "fence:", err)
			os.Exit(1)
		}
	case "env": // env VAR...: print variables.
		for _, k := range args {
			fmt.Printf("rank %d %s=%s\n", rank, k, os.Getenv(k))
		}
	case "ring": // ring BYTES ROUNDS: pass a buffer around the ring.
		size, rounds := atoi(args[0]), atoi(args[1])
		n := jia.Size()
		buf := make([]byte, size)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for r := 0; r < rounds; r++ {
			if err := jia.SendBytes((rank+1)%n, buf); err != nil {
				fail(err)
			}
			got, err := jia.RecvBytes((rank + n - 1) % n)
			if err != nil {
				fail(err)
			}
			if len(got) != size || (size > 0 && got[size-1] != buf[size-1]) {
				fail(fmt.Errorf("round %d: got %d bytes", r, len(got)))
			}
		}
		fmt.Printf("rank %d ring ok\n", rank)
	case "badsecret":
		fmt.Printf("rank %d initialized\n", rank)
	default:
		fmt.Fprintf(os.Stderr, "rankprog: unknown mode %q\n", mode)
		os.Exit(2)
	}
	if err := jia.Finalize(); err != nil {
		fail(err)
	}
}

func ready() { fmt.Printf("ready %d %d\n", jia.Rank(), os.Getpid()) }

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail(err)
	}
	return n
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rankprog:", err)
	os.Exit(1)
}
