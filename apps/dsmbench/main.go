// Command dsmbench measures the basic costs of the DSM, the way the JIAJIA
// anchor measurements did (../shared notes: "JIAJIA measured on this VM"):
// rank 0 times each operation while the other ranks wait, parked, in a
// barrier; rank 1 is the home of the remote pages and the manager of the
// remote lock.
//
// Run under jiarun it measures and rank 0 prints one line, "DSMBENCH "
// followed by JSON:
//
//	jiarun -np 2 ./bin/dsmbench
//
// Run with -drive it is the driver of `make bench-dsm`: it runs itself
// under jiarun at each -np, -runs times, runs the DSM applications (-apps)
// at 1 and 2 ranks, and prints one table of medians (min–max) beside the
// JIAJIA 2.1 and M-JIAJIA figures measured on this kind of machine, with
// the ratio to JIAJIA 2.1. On one host it measures both modes of the DSM
// there, and each row names its mode: the ranks keeping a copy each and
// faulting through their pagers (JIA_DSM_HOST_SHARE=false), and the ranks
// sharing one copy of every region (JIA_DSM_HOST_SHARE=true):
//
//	dsmbench -drive -jiarun ./jiarun -bin ./bin -np 2,4 -runs 3
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/shmem"
)

func main() {
	if k := os.Getenv(floorEnv); k != "" {
		floorChild(k)
	}
	drive := flag.Bool("drive", false, "run the benchmark under jiarun and print the table")
	jiarun := flag.String("jiarun", "./jiarun", "driver: the jiarun binary")
	bin := flag.String("bin", "./bin", "driver: directory of dsmbench and the applications")
	nps := flag.String("np", "2,4", "driver: rank counts to measure")
	runs := flag.Int("runs", 3, "driver: runs of each measurement (the table shows medians)")
	apps := flag.String("apps", "sor,mm,lu", "driver: DSM applications to time at 1 and 2 ranks (empty: none)")
	pages := flag.Int("pages", 100, "pages per fault round")
	rounds := flag.Int("rounds", 4, "rounds of each fault measurement (fresh regions)")
	iters := flag.Int("iters", 1000, "lock+unlock pairs timed; barriers time a half as many")
	diffPages := flag.Int("diffpages", 256, "pages fully rewritten for the diff throughput")
	floors := flag.Int("floors", 0, "measure only the machine's floors, this many times, and print their table")
	flag.StringVar(&only, "only", "", "measure only these, comma-separated: read, write, home, lock, barrier, contended, diff")
	flag.Func("jarg", "driver: an argument for jiarun before the program, e.g. a host list (repeatable)", func(v string) error {
		jiarunArgs = append(jiarunArgs, v)
		return nil
	})
	stats := flag.Bool("stats", false, "print every rank's DSM statistics after the measurements (a line DSMSTATS each)")
	flag.BoolVar(&acrossHosts, "hosts", false, "driver: the ranks run on different hosts (-jarg gives them): the table's targets are those over tcp, and the floors are skipped")
	flag.Parse()
	if *floors > 0 {
		printFloors(*floors)
		return
	}
	if *drive {
		os.Exit(driver(*jiarun, *bin, *nps, *runs, *apps))
	}
	jia.MustInit()
	res := measure(*pages, *rounds, *iters, *diffPages)
	if *stats {
		st, err := jia.DSMStats()
		check(err)
		b, _ := json.Marshal(st)
		fmt.Printf("DSMSTATS rank %d %s\n", jia.Rank(), b)
	}
	if jia.Rank() == 0 {
		b, _ := json.Marshal(res)
		fmt.Printf("DSMBENCH %s\n", b)
	}
	check(jia.Finalize())
}

// Result is what one run measured, in microseconds unless named otherwise.
type Result struct {
	Ranks int
	// HostShared: the ranks shared one copy of the regions
	// (dsm.host_share on one host), so that they took no page faults
	// through the pagers; ReadFault is then the first read of pages homed
	// on rank 1, WriteFault their first write, and no diff is sent.
	HostShared bool
	// ReadFault: read fault on a page homed on rank 1, pages touched in
	// decreasing order so that prefetching fetches nothing extra.
	ReadFault float64
	// ReadSeq: read fault per page in increasing order (with prefetch).
	ReadSeq float64
	// WriteFault: write fault on a page homed on rank 1 (fetch + twin).
	WriteFault float64
	// DirtyBarrier: barrier right after dirtying -pages remote pages (one
	// word each).
	DirtyBarrier float64
	// HomeWrite: write to an own home page that was read first (mapped
	// writable at once while no other rank holds a copy).
	HomeWrite float64
	// HomeWriteShared: write of an own home page that rank 1 read,
	// so that its writes must become notices (rank 0 watches it).
	HomeWriteShared float64
	// HomeTouch: first touch (write) of an own home page.
	HomeTouch float64
	// LockSelf and LockRemote: uncontended lock+unlock with rank 0 and rank
	// 1 as the manager. Rank 0 keeps the remote lock after its second
	// acquire (nobody else asks for it), so LockRemote is the cost of a
	// kept lock; Contended pays the manager's round trips.
	LockSelf, LockRemote float64
	// Barrier: empty barrier, all ranks.
	Barrier float64
	// Contended: lock, counter++, unlock by all ranks, per acquire.
	Contended float64
	// DiffMBs: MB/s of full-page diffs sent home at a barrier.
	DiffMBs float64
}

// only names the measurements to run (all when empty).
var only string

func want(name string) bool {
	return only == "" || slices.Contains(strings.Split(only, ","), name)
}

// measure runs every measurement; only rank 0's result means anything.
func measure(pages, rounds, iters, diffPages int) Result {
	rank, size := jia.Rank(), jia.Size()
	res := Result{Ranks: size}
	remote := min(1, size-1) // the home of the remote pages
	ps := shmem.PageSize
	per := ps / 8
	var sink int64
	// The first Alloc starts the DSM; every measurement may need it.
	start, err := jia.Alloc(ps, shmem.OnRank(0))
	check(err)
	defer jia.Free(start)
	// A pager takes no fault at the first touch of a home page only when
	// the ranks share the host's memory.
	if rank == 0 {
		before, err := jia.DSMStats()
		check(err)
		shmem.Slice[int64](start)[0] = 1
		after, err := jia.DSMStats()
		check(err)
		res.HostShared = after.HomeFaults+after.WriteFaults == before.HomeFaults+before.WriteFaults
	}
	check(jia.DSMBarrier())

	// fresh allocates pages homed on home and, unless home is rank 0,
	// makes the home map them, so that a fetch finds the page as JIAJIA's
	// home has it; rank 0's home pages stay untouched.
	fresh := func(n, home int) (*shmem.Region, []int64) {
		r, err := jia.Alloc(n*ps, shmem.OnRank(home))
		check(err)
		a := shmem.Slice[int64](r)
		if rank == home && home != 0 {
			for p := 0; p < n; p++ {
				a[p*per] = int64(p)
			}
		}
		check(jia.DSMBarrier())
		return r, a
	}
	// onRank0 times fn on rank 0 (per unit of n), while the others wait
	// in a barrier; it returns the median over rounds.
	onRank0 := func(rounds, n, home int, fn func(a []int64)) float64 {
		var ts []float64
		for range rounds {
			r, a := fresh(n, home)
			if rank == 0 {
				t := time.Now()
				fn(a)
				ts = append(ts, us(time.Since(t))/float64(n))
			}
			check(jia.DSMBarrier())
			check(jia.Free(r))
		}
		return median(ts)
	}

	if want("read") {
		res.ReadFault = onRank0(rounds, pages, remote, func(a []int64) {
			for p := pages - 1; p >= 0; p-- {
				sink += a[p*per]
			}
		})
		res.ReadSeq = onRank0(rounds, pages, remote, func(a []int64) {
			for p := 0; p < pages; p++ {
				sink += a[p*per]
			}
		})
		res.HomeTouch = onRank0(rounds, pages, 0, func(a []int64) {
			for p := pages - 1; p >= 0; p-- {
				a[p*per+1] = 1
			}
		})

	}

	if want("write") {
		// Write faults on remote pages, then the barrier that flushes them.
		var wf, db []float64
		for range rounds {
			r, a := fresh(pages, remote)
			if rank == 0 {
				t := time.Now()
				for p := pages - 1; p >= 0; p-- {
					a[p*per+1] = int64(p)
				}
				wf = append(wf, us(time.Since(t))/float64(pages))
			}
			t := time.Now()
			check(jia.DSMBarrier())
			db = append(db, us(time.Since(t)))
			if rank == 0 && a[(pages-1)*per+1] != int64(pages-1) {
				jia.JiaError("dsmbench: rank 0 lost its own write")
			}
			check(jia.DSMBarrier())
			check(jia.Free(r))
		}
		res.WriteFault, res.DirtyBarrier = median(wf), median(db)

	}

	if want("home") {
		// Write faults on home pages mapped write-protected.
		// readThenWrite reads every page, then times writing them all.
		readThenWrite := func(a []int64) float64 {
			for p := 0; p < pages; p++ {
				sink += a[p*per+2]
			}
			t := time.Now()
			for p := pages - 1; p >= 0; p-- {
				a[p*per+2] = 1
			}
			return us(time.Since(t)) / float64(pages)
		}
		var hw []float64
		for range rounds {
			r, a := fresh(pages, 0)
			if rank == 0 {
				hw = append(hw, readThenWrite(a))
			}
			check(jia.DSMBarrier())
			check(jia.Free(r))
		}
		res.HomeWrite = median(hw)

		hw = hw[:0]
		for range rounds {
			r, a := fresh(pages, 0)
			if rank == remote && remote != 0 {
				for p := 0; p < pages; p++ {
					sink += a[p*per+2]
				}
			}
			// Rank 0 learns of direct reads at its next release after them.
			check(jia.DSMBarrier())
			check(jia.DSMBarrier())
			if rank == 0 {
				hw = append(hw, readThenWrite(a))
			}
			check(jia.DSMBarrier())
			check(jia.Free(r))
		}
		res.HomeWriteShared = median(hw)

	}

	if want("lock") {
		// Uncontended locks: rank 0 alone; the others wait in a barrier.
		lockTime := func(id int) float64 {
			var ts []float64
			for range 3 {
				if rank == 0 {
					t := time.Now()
					for range iters {
						check(jia.Lock(id))
						check(jia.Unlock(id))
					}
					ts = append(ts, us(time.Since(t))/float64(iters))
				}
				check(jia.DSMWait())
			}
			return median(ts)
		}
		res.LockSelf = lockTime(0)
		res.LockRemote = lockTime(remote)

	}

	if want("barrier") {
		// Empty barriers, all ranks.
		var bt []float64
		nb := max(1, iters/2)
		for range 3 {
			check(jia.DSMBarrier())
			t := time.Now()
			for range nb {
				check(jia.DSMBarrier())
			}
			bt = append(bt, us(time.Since(t))/float64(nb))
		}
		res.Barrier = median(bt)

	}

	if want("contended") {
		// Contended lock: every rank increments a counter homed on rank 0.
		{
			const incs = 250
			r, c := fresh(1, 0)
			id := 2 % size
			check(jia.DSMBarrier())
			t := time.Now()
			for range incs {
				check(jia.Lock(id))
				c[0]++
				check(jia.Unlock(id))
			}
			check(jia.DSMBarrier())
			res.Contended = us(time.Since(t)) / float64(incs*size)
			if rank == 0 && c[0] != int64(incs*size) {
				jia.JiaError("dsmbench: counter is %d after %d increments", c[0], incs*size)
			}
			check(jia.DSMBarrier())
			check(jia.Free(r))
		}

	}

	if want("diff") {
		// Diff throughput: rank 0 rewrites whole remote pages (already cached
		// and twinned), and the barrier sends their diffs home.
		var mbs []float64
		for range rounds {
			r, a := fresh(diffPages, remote)
			if rank == 0 {
				for i := range a {
					a[i] = int64(i) + 1
				}
				check(jia.DSMBarrier())
				for i := range a {
					a[i] = -int64(i) - 1
				}
			} else {
				check(jia.DSMBarrier())
			}
			t := time.Now()
			check(jia.DSMBarrier())
			d := time.Since(t)
			if rank == 0 {
				mbs = append(mbs, float64(diffPages*ps)/d.Seconds()/1e6)
			}
			if rank == remote && a[len(a)-1] != -int64(len(a)) {
				jia.JiaError("dsmbench: the home of the diffs holds %d, want %d", a[len(a)-1], -len(a))
			}
			check(jia.DSMBarrier())
			check(jia.Free(r))
		}
		res.DiffMBs = median(mbs)

	}

	if sink == 42 {
		fmt.Print("")
	}
	return res
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func check(err error) {
	if err != nil {
		jia.JiaError("dsmbench: %v", err)
	}
}
