package shmem_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio/shm"
	"github.com/jiarun/jia/runtime/config"
	"github.com/jiarun/jia/shmem"
	"github.com/jiarun/jia/shmem/internal/board"
)

// Four ranks in one process (one host): barriers with nothing to publish
// are met on the barrier board, and interleaved at random with writes to
// home and remote pages, counters under locks, locks taken with nothing
// written, and plain barriers, every barrier still makes every write
// before it seen by every rank after it.
func TestBoardBarriersInterleavedWithLocksAndWrites(t *testing.T) {
	const n, rounds = 4, 40
	var local [n]uint64
	ranks(t, n, func(d *shmem.DSM) error {
		r, err := d.Alloc(n*shmem.PageSize, shmem.BlockCyclic(1, 0))
		if err != nil {
			return err
		}
		per := shmem.PageSize / 8
		c := shmem.Slice[int64](r)
		me := d.Rank()
		// slot(k, w) is rank w's word in page k (homed on rank k); word 0
		// of each page is a counter incremented under lock k.
		slot := func(k, w int) *int64 { return &c[k*per+1+w] }
		var want [n][n]int64 // the last value each rank wrote in each page
		var counts [n]int64
		rng := rand.New(rand.NewSource(7)) // the same choices on every rank
		for i := 1; i <= rounds; i++ {
			for w := 0; w < n; w++ {
				switch rng.Intn(5) {
				case 0: // nothing
				case 1: // its own home page
					want[w][w] = int64(1000*i + w)
					if w == me {
						*slot(w, w) = want[w][w]
					}
				case 2: // a page homed elsewhere
					k := (w + 1 + rng.Intn(n-1)) % n
					want[k][w] = int64(1000*i + w)
					if w == me {
						*slot(k, w) = want[k][w]
					}
				case 3: // a counter under its lock
					k := rng.Intn(n)
					counts[k]++
					if w == me {
						if err := d.Lock(k); err != nil {
							return err
						}
						c[k*per]++
						if err := d.Unlock(k); err != nil {
							return err
						}
					}
				case 4: // a lock with nothing written
					if w == me {
						if err := d.Lock(w); err != nil {
							return err
						}
						if err := d.Unlock(w); err != nil {
							return err
						}
					}
				}
			}
			if err := d.Barrier(); err != nil {
				return err
			}
			for k := 0; k < n; k++ {
				if got := c[k*per]; got != counts[k] {
					return fmt.Errorf("round %d: counter %d is %d, want %d", i, k, got, counts[k])
				}
				for w := 0; w < n; w++ {
					if got := *slot(k, w); got != want[k][w] {
						return fmt.Errorf("round %d: page %d: slot of rank %d is %d, want %d", i, k, w, got, want[k][w])
					}
				}
			}
			// The next round's writes wait for every rank's checks. This
			// barrier collects the pages the checks read directly; the
			// next ones publish nothing.
			if err := d.Barrier(); err != nil {
				return err
			}
			quiet := rng.Intn(4)
			for j := 0; j < quiet; j++ {
				if j == 1 && rng.Intn(2) == 0 {
					if err := d.Wait(); err != nil {
						return err
					}
				}
				if err := d.Lock(me); err != nil {
					return err
				}
				if err := d.Unlock(me); err != nil {
					return err
				}
				if err := d.Barrier(); err != nil {
					return err
				}
			}
		}
		s, err := d.Stats()
		if err != nil {
			return err
		}
		local[me] = s.LocalBarriers
		return d.Free(r)
	})
	for r, l := range local {
		if l == 0 {
			t.Errorf("rank %d met no barrier on the board", r)
		}
	}
}

// Empty barriers among four ranks are met on the board and counted by
// every pager, which steps them before it answers the next request.
func TestBoardEmptyBarriersAreCounted(t *testing.T) {
	const n, iters = 4, 50
	ranks(t, n, func(d *shmem.DSM) error {
		for i := 0; i < iters; i++ {
			if err := d.Barrier(); err != nil {
				return err
			}
		}
		s, err := d.Stats()
		if err != nil {
			return err
		}
		// A pager busy at the moment of an arrival (with the others'
		// first frames, say) makes the barrier a full one.
		if s.Barriers != iters || s.LocalBarriers < iters/2 {
			return fmt.Errorf("%d barriers, %d of them local; want %d, most of them local", s.Barriers, s.LocalBarriers, iters)
		}
		return nil
	})
}

// A rank whose pager dies while the others wait on the barrier board
// aborts the job, and the others' Barrier returns instead of waiting
// forever.
func TestBoardWaitersLeaveWhenARankIsLost(t *testing.T) {
	needDSM(t)
	shmem.SetDistinctRanges(true)
	t.Cleanup(func() { shmem.SetDistinctRanges(false) })
	const n = 3
	h := newHub(n)
	cfg := testConfig(false)
	aborted := make(chan string, 4*n)
	ds := startRanks(t, h, cfg, func(msg string) { aborted <- msg })
	defer func() {
		for _, d := range ds {
			d.Close() // fails: the board is broken
		}
	}()
	// The waiters arrive clean (a pager busy with its first frames says
	// otherwise for a while: a rank would take the full path, which waits
	// for the job's abort as it always did).
	for _, d := range ds[:n-1] {
		for !shmem.Clean(d) {
			time.Sleep(time.Millisecond)
		}
	}
	done := make(chan error, n)
	for r := 0; r < n-1; r++ {
		go func() { done <- ds[r].Barrier() }()
	}
	// Rank n-1 never arrives: its pager dies.
	if err := syscall.Kill(shmem.PagerPid(ds[n-1]), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < n-1; r++ {
		if err := <-done; !errors.Is(err, board.ErrBroken) {
			t.Errorf("a waiting rank's Barrier: %v", err)
		}
	}
	if msg := <-aborted; !strings.Contains(msg, fmt.Sprintf("rank %d", n-1)) {
		t.Errorf("abort message %q does not name rank %d", msg, n-1)
	}
}

// After a rank read pages homed on another rank directly (in a region
// freed before the home collected the reads), or took and released locks
// it keeps, the empty barriers that follow are met on the board again;
// and pages read directly still see their home's writes after a barrier.
func TestBoardAfterReadsAndLocks(t *testing.T) {
	for _, lock := range []bool{false, true} {
		name := "read"
		if lock {
			name = "lock"
		}
		t.Run(name, func(t *testing.T) {
			const n, pages, iters = 2, 8, 40
			per := shmem.PageSize / 8
			ranks(t, n, func(d *shmem.DSM) error {
				me := d.Rank()
				// fill has rank 1 write v+p in page p of a region homed on
				// it; check has rank 0 read them.
				fill := func(a []int64, v int64) {
					if me == 1 {
						for p := 0; p < pages; p++ {
							a[p*per] = v + int64(p)
						}
					}
				}
				check := func(a []int64, v int64) error {
					if me == 0 {
						for p := 0; p < pages; p++ {
							if got := a[p*per]; got != v+int64(p) {
								return fmt.Errorf("rank 0: page %d: read %d, want %d", p, got, v+int64(p))
							}
						}
					}
					return nil
				}
				kept, err := d.Alloc(pages*shmem.PageSize, shmem.OnRank(1))
				if err != nil {
					return err
				}
				k := shmem.Slice[int64](kept)
				fill(k, 100)
				if err := d.Barrier(); err != nil {
					return err
				}
				if err := check(k, 100); err != nil {
					return err
				}
				if lock {
					for i := 0; i < 10 && me == 0; i++ {
						for id := 0; id < n; id++ {
							if err := d.Lock(id); err != nil {
								return err
							}
							if err := d.Unlock(id); err != nil {
								return err
							}
						}
					}
				} else {
					// Rank 1 makes no release between rank 0's reads and
					// the Free.
					r, err := d.Alloc(pages*shmem.PageSize, shmem.OnRank(1))
					if err != nil {
						return err
					}
					a := shmem.Slice[int64](r)
					fill(a, 1)
					if err := d.Barrier(); err != nil {
						return err
					}
					if err := check(a, 1); err != nil {
						return err
					}
					if err := d.Wait(); err != nil {
						return err
					}
					if err := d.Free(r); err != nil {
						return err
					}
				}
				if err := d.Barrier(); err != nil {
					return err
				}
				s0, err := d.Stats()
				if err != nil {
					return err
				}
				for i := 0; i < iters; i++ {
					if err := d.Barrier(); err != nil {
						return err
					}
				}
				s1, err := d.Stats()
				if err != nil {
					return err
				}
				// A pager busy at the moment of an arrival makes the
				// barrier a full one.
				if b, l := s1.Barriers-s0.Barriers, s1.LocalBarriers-s0.LocalBarriers; b != iters || l < iters/2 {
					return fmt.Errorf("%d barriers, %d of them local; want %d, most of them local", b, l, iters)
				}
				// The pages rank 0 read directly: it sees the home's new
				// writes after the next barrier.
				fill(k, 200)
				if err := d.Barrier(); err != nil {
					return err
				}
				if err := check(k, 200); err != nil {
					return err
				}
				if err := d.Barrier(); err != nil {
					return err
				}
				return d.Free(kept)
			})
		})
	}
}

// A rank whose pager dies while the rank closes its DSM: the goroutine
// that learns of the death breaks the board while Close unmaps it; the
// two must not race (go test -race) nor touch an unmapped board, and the
// dead pager's bell file does not outlive Close.
func TestCloseWhileThePagerDies(t *testing.T) {
	needDSM(t)
	shmem.SetDistinctRanges(true)
	t.Cleanup(func() { shmem.SetDistinctRanges(false) })
	const n = 2
	for round := 0; round < 3; round++ {
		h := newHub(n)
		cfg := testConfig(false)
		ds := startRanks(t, h, cfg, func(string) {})
		closed := make(chan struct{})
		bellFile := shmem.BellFile(ds[n-1])
		go func() {
			ds[n-1].Close() // fails: its pager is gone
			close(closed)
		}()
		pid := shmem.PagerPid(ds[n-1])
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-closed
		// A killed pager cannot remove its bell's file nor its queues'
		// segments: Close does.
		if _, err := os.Stat(bellFile); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the killed pager's bell file %s is left after Close (%v)", bellFile, err)
		}
		segs, err := shm.Leftovers(shm.DefaultDir, "multirank")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range segs {
			if s.Pid == pid {
				t.Errorf("the killed pager's segment %s is left after Close", s.Path)
			}
		}
		for _, d := range ds[:n-1] {
			d.Close()
		}
	}
}

// startRanks starts the DSM of every rank of hub h in this process, with
// configuration cfg and abort as each rank's Runtime.Abort (message only).
func startRanks(t *testing.T, h *hub, cfg config.Config, abort func(msg string)) []*shmem.DSM {
	t.Helper()
	n := h.n
	ds := make([]*shmem.DSM, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds[r], errs[r] = shmem.Start(context.Background(), &member{h: h, rank: r, t: t, cfg: cfg, abort: abort})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return ds
}
