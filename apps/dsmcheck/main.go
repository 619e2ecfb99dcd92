// Command dsmcheck runs one DSM scenario and checks what scope consistency
// promises; the end-to-end tests and the DSM's cost measurements run it
// under jiarun.
//
//	dsmcheck counter N      every rank adds 1 to 4 counters N times under locks
//	dsmcheck handoff N      a value written under lock 1 is seen by its next holder, N rounds
//	dsmcheck barrier N      values written before a barrier are seen by all after it, N rounds
//	dsmcheck sparse         a 1 GiB region with a few pages touched
//	dsmcheck faults         GOMAXPROCS=1, 64 goroutines fault on remote pages at once, with copy()
//	dsmcheck bad CASE       a misuse; prints the error it gets ("error: …")
//	dsmcheck bench N        measures fault, lock and barrier costs
//
// It prints "ok MODE" on rank 0 when the check passed; a failed check prints
// what was wrong and exits 1.
package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/shmem"
)

var rank, size int

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dsmcheck MODE [ARG]")
		os.Exit(2)
	}
	mode, arg := os.Args[1], ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	jia.MustInit()
	rank, size = jia.Rank(), jia.Size()
	switch mode {
	case "counter":
		counter(atoi(arg))
	case "handoff":
		handoff(atoi(arg))
	case "barrier":
		barrier(atoi(arg))
	case "sparse":
		sparse()
	case "faults":
		faults()
	case "bad":
		bad(arg)
	case "bench":
		bench(atoi(arg))
	default:
		fmt.Fprintf(os.Stderr, "dsmcheck: unknown mode %q\n", mode)
		os.Exit(2)
	}
	check(jia.CloseDSM())
	check(jia.Finalize())
	if rank == 0 {
		fmt.Println("ok", mode)
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dsmcheck:", err)
		os.Exit(2)
	}
	return n
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "dsmcheck:", err)
		jia.Abort(1, err.Error())
	}
}

func failf(format string, args ...any) {
	msg := fmt.Sprintf("rank %d: ", rank) + fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "dsmcheck:", msg)
	jia.Abort(1, msg)
}

// counter: 4 counters on pages homed on different ranks, each incremented
// n times by every rank under its own lock, nested two at a time.
func counter(n int) {
	const counters = 4
	per := shmem.PageSize / 8
	r, err := jia.Alloc(counters*shmem.PageSize, shmem.BlockCyclic(1, size-1))
	check(err)
	c := shmem.Slice[int64](r)
	for i := 0; i < n; i++ {
		for k := 0; k < counters; k += 2 {
			check(jia.Lock(k))
			check(jia.Lock(k + 1)) // locks nest
			c[k*per]++
			c[(k+1)*per] += 2
			check(jia.Unlock(k)) // and are released in any order
			c[(k+1)*per]--
			check(jia.Unlock(k + 1))
		}
	}
	check(jia.DSMBarrier())
	for k := 0; k < counters; k++ {
		if got, want := c[k*per], int64(n*size); got != want {
			failf("counter %d is %d, want %d", k, got, want)
		}
	}
}

// handoff: a token goes round the ranks n times; the holder of the token
// takes lock 1, checks the three pages of data the previous holder wrote
// under it, and writes new data. Condition variables pass the token (they
// order no memory: the lock does).
func handoff(rounds int) {
	const pages = 3
	r, err := jia.Alloc(pages*shmem.PageSize, shmem.BlockCyclic(1, 1%size))
	check(err)
	data := shmem.Slice[uint64](r)
	for round := 0; round < rounds; round++ {
		if round > 0 || rank != 0 {
			check(jia.WaitCV(rank))
			check(jia.ResetCV(rank))
		}
		check(jia.Lock(1))
		prev := (rank + size - 1) % size
		var want uint64
		if round > 0 || rank != 0 {
			want = stamp(round-boolInt(rank == 0), prev)
		}
		for p := 0; p < pages; p++ {
			for _, i := range []int{p*shmem.PageSize/8 + p, (p+1)*shmem.PageSize/8 - 1} {
				exp := uint64(0)
				if want != 0 {
					exp = want + uint64(i)
				}
				if data[i] != exp {
					failf("round %d: word %d is %#x, want %#x (written by rank %d under lock 1)", round, i, data[i], exp, prev)
				}
			}
		}
		w := stamp(round, rank)
		for p := 0; p < pages; p++ {
			for _, i := range []int{p*shmem.PageSize/8 + p, (p+1)*shmem.PageSize/8 - 1} {
				data[i] = w + uint64(i)
			}
		}
		check(jia.Unlock(1))
		check(jia.SetCV((rank + 1) % size))
	}
	check(jia.DSMWait())
}

func stamp(round, rank int) uint64 { return uint64(round+1)<<40 | uint64(rank+1)<<32 }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// barrier: every round each rank writes its slots, spread over pages homed
// everywhere (several ranks write parts of one page), then after a barrier
// every rank checks every slot.
func barrier(rounds int) {
	const slots = 3000 // float64s: about 6 pages
	r, err := jia.Alloc(slots*8, shmem.Placement{})
	check(err)
	a := shmem.Slice[float64](r)
	for round := 0; round < rounds; round++ {
		for i := rank; i < slots; i += size {
			a[i] = float64(round*100000 + i)
		}
		check(jia.DSMBarrier())
		for i := 0; i < slots; i++ {
			if a[i] != float64(round*100000+i) {
				failf("round %d: slot %d (written by rank %d) is %v after the barrier", round, i, i%size, a[i])
			}
		}
		check(jia.DSMBarrier())
	}
}

// sparse: a region of 1 GiB of which each rank touches a few pages far
// apart; the memory used stays small.
func sparse() {
	const size1G = 1 << 30
	r, err := jia.Alloc(size1G, shmem.BlockCyclic(16, 0))
	check(err)
	b := r.Bytes()
	stride := size1G / 8
	for k := 0; k < 8; k++ {
		if k%size == rank {
			b[k*stride+rank] = byte(k + 1)
		}
	}
	check(jia.DSMBarrier())
	for k := 0; k < 8; k++ {
		if got := b[k*stride+k%size]; got != byte(k+1) {
			failf("byte at %d is %d", k*stride+k%size, got)
		}
	}
	if rss := vmRSS(); rss > 256<<20 {
		failf("resident memory %d bytes after touching 8 pages of 1 GiB", rss)
	}
	check(jia.DSMBarrier())
}

func vmRSS() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			return atoi(f[1]) * 1024
		}
	}
	return 0
}

// faults: with one P, 64 goroutines fault at once on pages homed on the
// next rank: they read them, copy() out of them across page boundaries
// (faults inside memmove), and copy() into other pages of the next rank
// (write faults inside memmove). After a barrier each rank checks what the
// previous rank's goroutines wrote into its pages.
func faults() {
	const g = 64
	const per = 2 // pages per goroutine
	ps := shmem.PageSize
	block := 2 * g * per // pages homed per rank: data, then out
	r, err := jia.Alloc(block*size*ps, shmem.BlockCyclic(block, 0))
	check(err)
	b := r.Bytes()
	data := func(q int) []byte { return b[q*block*ps : (q*block+g*per)*ps] }
	out := func(q int) []byte { return b[(q*block+g*per)*ps : (q+1)*block*ps] }
	mine := data(rank)
	for i := range mine {
		mine[i] = pattern(rank, i)
	}
	check(jia.DSMBarrier())
	prev := runtime.GOMAXPROCS(1)
	next := (rank + 1) % size
	theirs, dst := data(next), out(next)
	var wg sync.WaitGroup
	errs := make(chan string, g)
	for k := 0; k < g; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := k * per * ps
			// A read fault on a remote page.
			if got := theirs[off+5]; got != pattern(next, off+5) {
				errs <- fmt.Sprintf("goroutine %d read %d", k, got)
				return
			}
			// copy() out of two remote pages.
			buf := make([]byte, per*ps)
			copy(buf, theirs[off:off+per*ps])
			for i := range buf {
				if buf[i] != pattern(next, off+i) {
					errs <- fmt.Sprintf("goroutine %d copied byte %d = %d", k, off+i, buf[i])
					return
				}
			}
			// copy() into two remote pages.
			copy(dst[off+32:], bytes.Repeat([]byte{byte(k + 1)}, per*ps-64))
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		failf("deadlock: 64 goroutines with GOMAXPROCS=1 did not finish their faults")
	}
	runtime.GOMAXPROCS(prev)
	close(errs)
	for e := range errs {
		failf("%s", e)
	}
	check(jia.DSMBarrier())
	got := make([]byte, g*per*ps)
	copy(got, out(rank))
	for k := 0; k < g; k++ {
		off := k * per * ps
		for i := off; i < off+per*ps; i++ {
			want := byte(k + 1)
			if i < off+32 || i >= off+per*ps-32 {
				want = 0
			}
			if got[i] != want {
				failf("byte %d written by rank %d is %d, want %d", i, (rank+size-1)%size, got[i], want)
			}
		}
	}
	check(jia.DSMBarrier())
}

func pattern(rank, i int) byte { return byte(rank*31 + i*7 + i/4096) }

// bad runs one misuse and prints the error it gets.
func bad(what string) {
	report := func(err error) {
		if err == nil {
			failf("bad %s: no error", what)
		}
		fmt.Printf("rank %d error: %v\n", rank, err)
	}
	switch what {
	case "before-alloc":
		report(jia.Lock(0))
		return
	}
	r, err := jia.Alloc(2*shmem.PageSize, shmem.Placement{})
	check(err)
	switch what {
	case "unlock":
		report(jia.Unlock(5))
	case "relock":
		check(jia.Lock(2))
		report(jia.Lock(2))
		check(jia.Unlock(2))
	case "barrier-in-lock":
		check(jia.Lock(3))
		report(jia.DSMBarrier())
		check(jia.Unlock(3))
	case "size":
		report(errOf(jia.Alloc(0, shmem.Placement{})))
		report(errOf(jia.Alloc(1<<62, shmem.Placement{})))
	case "placement":
		report(errOf(jia.Alloc(100, shmem.OnRank(size))))
	case "mismatch":
		// Rank 1 asks for another size.
		n := 3 * shmem.PageSize
		if rank == 1 {
			n = 5 * shmem.PageSize
		}
		report(errOf(jia.Alloc(n, shmem.Placement{})))
		// The DSM goes on working after the failed call.
		r2, err := jia.Alloc(shmem.PageSize, shmem.OnRank(0))
		check(err)
		check(jia.Lock(0))
		shmem.Slice[int64](r2)[0]++
		check(jia.Unlock(0))
		check(jia.DSMBarrier())
		if got := shmem.Slice[int64](r2)[0]; got != int64(size) {
			failf("counter after the mismatch is %d", got)
		}
	case "double-free":
		check(jia.Free(r))
		report(jia.Free(r))
	case "after-free":
		check(jia.Free(r))
		if rank == size-1 {
			b := r.Bytes()
			fmt.Fprintln(os.Stderr, "touching freed memory")
			b[shmem.PageSize+3] = 1 // stops the job
			time.Sleep(time.Minute)
		}
		select {} // the others wait to be stopped
	default:
		fmt.Fprintf(os.Stderr, "dsmcheck: unknown bad case %q\n", what)
		os.Exit(2)
	}
	check(jia.DSMWait())
}

func errOf(_ *shmem.Region, err error) error { return err }

// bench measures, on rank 1 against pages and locks of rank 0 (and on
// every rank for barriers), the median cost of a remote read fault, a
// write fault on a fetched page, a lock+unlock through a remote manager,
// and an empty barrier.
func bench(n int) {
	ps := shmem.PageSize
	r, err := jia.Alloc(n*ps, shmem.OnRank(0))
	check(err)
	b := r.Bytes()
	if rank == 0 {
		for p := 0; p < n; p++ {
			b[p*ps] = byte(p)
		}
	}
	check(jia.DSMBarrier())
	var read, write, lock []time.Duration
	var sink byte
	if rank == 1 {
		for p := 0; p < n; p++ {
			t := time.Now()
			sink += b[p*ps]
			read = append(read, time.Since(t))
			t = time.Now()
			b[p*ps+16] = 1
			write = append(write, time.Since(t))
		}
		for i := 0; i < n; i++ {
			t := time.Now()
			check(jia.Lock(0)) // managed by rank 0
			check(jia.Unlock(0))
			lock = append(lock, time.Since(t))
		}
	}
	check(jia.DSMBarrier())
	var bar []time.Duration
	for i := 0; i < n; i++ {
		t := time.Now()
		check(jia.DSMBarrier())
		bar = append(bar, time.Since(t))
	}
	if rank == 1 && sink != byte(n*(n-1)/2) {
		failf("read %d, want %d", sink, byte(n*(n-1)/2))
	}
	if rank == 1 {
		fmt.Printf("bench: remote read fault %v, write fault %v, lock+unlock %v (medians of %d)\n",
			median(read), median(write), median(lock), n)
	}
	if rank == 0 {
		fmt.Printf("bench: empty barrier of %d ranks %v (median of %d)\n", size, median(bar), n)
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}
