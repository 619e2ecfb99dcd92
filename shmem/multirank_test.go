package shmem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	jiart "github.com/jiarun/jia/runtime"
	"github.com/jiarun/jia/runtime/config"
	"github.com/jiarun/jia/shmem"
)

// hub is the launcher of ranks run as goroutines of the test process: it
// gathers the values of Exchange.
type hub struct {
	n    int
	mu   sync.Mutex
	cond *sync.Cond
	vals map[string][][]byte
	got  map[string]int
}

func newHub(n int) *hub {
	h := &hub{n: n, vals: map[string][][]byte{}, got: map[string]int{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

// member is one rank's Runtime.
type member struct {
	h    *hub
	rank int
	t    *testing.T
	cfg  config.Config
	// abort, if set, is told of an abort instead of failing the test.
	abort func(msg string)
}

func (m *member) Rank() int { return m.rank }
func (m *member) Size() int { return m.h.n }
func (m *member) Contract() jiart.Contract {
	return jiart.Contract{Rank: m.rank, Size: m.h.n, Job: "multirank", Secret: []byte("multirank secret of 32 bytes...")}
}
func (m *member) Config() config.Config { return m.cfg }
func (m *member) Cards() []jiart.Card {
	return make([]jiart.Card, m.h.n) // no address: the pagers listen on 127.0.0.1
}
func (m *member) Abort(code int, msg string) {
	if m.abort != nil {
		m.abort(msg)
		return
	}
	m.t.Errorf("rank %d: abort %d: %s", m.rank, code, msg)
	panic("abort")
}

func (m *member) Exchange(_ context.Context, key string, v []byte) ([][]byte, error) {
	h := m.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.vals[key] == nil {
		h.vals[key] = make([][]byte, h.n)
	}
	h.vals[key][m.rank] = v
	h.got[key]++
	for h.got[key] < h.n {
		h.cond.Wait()
	}
	h.cond.Broadcast()
	return h.vals[key], nil
}

// testConfig is the configuration of the tests' ranks: with share false,
// the ranks (all in the test's process, so on one host) keep a copy each
// and take the page-fault path of the protocol.
func testConfig(share bool) config.Config {
	cfg := config.Default()
	cfg.DSM.MaxAlloc = 64 * config.MiB
	cfg.DSM.HostShare = share
	return cfg
}

// ranks starts n DSMs, one per rank, each with its own pager, and runs fn
// on every rank at once. The ranks keep a copy each of the regions (the
// protocol's page-fault path).
func ranks(t *testing.T, n int, fn func(d *shmem.DSM) error) {
	t.Helper()
	ranksWith(t, n, testConfig(false), fn)
}

// ranksWith is ranks with a configuration.
func ranksWith(t *testing.T, n int, cfg config.Config, fn func(d *shmem.DSM) error) {
	t.Helper()
	needDSM(t)
	shmem.SetDistinctRanges(true)
	t.Cleanup(func() { shmem.SetDistinctRanges(false) })
	h := newHub(n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := shmem.Start(context.Background(), &member{h: h, rank: r, t: t, cfg: cfg})
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = fn(d)
			if err := d.Close(); err != nil && errs[r] == nil {
				errs[r] = err
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Three ranks in one process, each with its pager: counters on pages
// homed on every rank are exact after increments under locks, and what
// each rank wrote before a barrier is seen by all after it.
func TestThreeRanksLocksAndBarriers(t *testing.T) {
	const n, iters = 3, 15
	ranks(t, n, func(d *shmem.DSM) error {
		r, err := countersAndSlots(d, n, iters)
		if err != nil {
			return err
		}
		return d.Free(r)
	})
}

// countersAndSlots is the program of TestThreeRanksLocksAndBarriers on n
// ranks: iters increments under a lock of a counter in each of n pages,
// then a slot per rank in every page written before a barrier, all
// checked after it. It returns the region.
func countersAndSlots(d *shmem.DSM, n, iters int) (*shmem.Region, error) {
	r, err := d.Alloc(n*shmem.PageSize, shmem.BlockCyclic(1, 0))
	if err != nil {
		return nil, err
	}
	per := shmem.PageSize / 8
	c := shmem.Slice[int64](r)
	for i := 0; i < iters; i++ {
		for k := 0; k < n; k++ {
			if err := d.Lock(k); err != nil {
				return nil, err
			}
			c[k*per]++
			if err := d.Unlock(k); err != nil {
				return nil, err
			}
		}
	}
	me := d.Rank()
	for k := 0; k < n; k++ {
		c[k*per+1+me] = int64(100*me + k) // a slot per rank in every page
	}
	if err := d.Barrier(); err != nil {
		return nil, err
	}
	for k := 0; k < n; k++ {
		if c[k*per] != int64(n*iters) {
			return nil, fmt.Errorf("counter %d is %d, want %d", k, c[k*per], n*iters)
		}
		for w := 0; w < n; w++ {
			if got := c[k*per+1+w]; got != int64(100*w+k) {
				return nil, fmt.Errorf("page %d: slot of rank %d is %d after the barrier", k, w, got)
			}
		}
	}
	return r, nil
}

// Ranks that ask for different allocations all get an error naming the
// other call; the DSM works on afterwards.
func TestMismatchedAllocationIsAnErrorEverywhere(t *testing.T) {
	ranks(t, 2, func(d *shmem.DSM) error {
		_, err := mismatchThenWorks(d)
		return err
	})
}

// mismatchThenWorks is the program of
// TestMismatchedAllocationIsAnErrorEverywhere on 2 ranks: Allocs of
// different sizes fail on both, naming the other's call, and then a
// region allocated alike takes a sum under a lock and a barrier. It
// returns that region.
func mismatchThenWorks(d *shmem.DSM) (*shmem.Region, error) {
	size := 100
	if d.Rank() == 1 {
		size = 5000
	}
	_, err := d.Alloc(size, shmem.OnRank(0))
	other := map[int]string{0: "rank 1 called Alloc(5000 bytes", 1: "rank 0 called Alloc(100 bytes"}[d.Rank()]
	if !errors.Is(err, shmem.ErrMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("shmem: rank %d: Alloc(", d.Rank())) || !strings.Contains(err.Error(), other) {
		return nil, fmt.Errorf("mismatched Alloc: %v", err)
	}
	r, err := d.Alloc(64, shmem.OnRank(1))
	if err != nil {
		return nil, err
	}
	if err := d.Lock(7); err != nil {
		return nil, err
	}
	shmem.Slice[int32](r)[3] += 2
	if err := d.Unlock(7); err != nil {
		return nil, err
	}
	if err := d.Barrier(); err != nil {
		return nil, err
	}
	if got := shmem.Slice[int32](r)[3]; got != 4 {
		return nil, fmt.Errorf("sum %d after the barrier", got)
	}
	return r, nil
}

// An Unlock with nothing written since the last release is posted without
// waiting; the accesses right after it fault and are served after it, so
// that nothing written after it is lost: counters incremented under a lock
// taken just after a posted Unlock, and slots written right after one, are
// exact everywhere after the barrier.
func TestPostedUnlocksKeepLaterWrites(t *testing.T) {
	const n, iters = 2, 40
	// A rank posts an Unlock only while nothing it homes is watched, and
	// its home page is, while the other rank fetches it every iteration:
	// after iters, the ranks go on writing their own home pages only (a
	// write fault too, once the watch ended) until each has posted one.
	// firstPosted[r] is the first iteration at whose end rank r had
	// posted an Unlock (-1: none yet). The ranks must agree on when to
	// stop: each decides after the barrier that starts an iteration, from
	// the iterations every rank ended before it.
	var firstPosted [n]atomic.Int64
	for r := range firstPosted {
		firstPosted[r].Store(-1)
	}
	allPosted := func(before int) bool {
		for r := range firstPosted {
			if f := firstPosted[r].Load(); f < 0 || f >= int64(before) {
				return false
			}
		}
		return true
	}
	ranks(t, n, func(d *shmem.DSM) error {
		r, err := d.Alloc(n*shmem.PageSize, shmem.BlockCyclic(1, 0))
		if err != nil {
			return err
		}
		per := shmem.PageSize / 8
		c := shmem.Slice[int64](r)
		me := d.Rank()
		other := (me + 1) % n // its page is homed there
		for i := 0; ; i++ {
			if err := d.Barrier(); err != nil { // ends the interval: quiet
				return err
			}
			if i >= iters && allPosted(i) || i >= 50*iters {
				break
			}
			if err := d.Lock(0); err != nil {
				return err
			}
			if err := d.Unlock(0); err != nil { // nothing written: posted when quiet
				return err
			}
			if i < iters {
				c[other*per+1+me] = int64(i) // a write fault after the Unlock
				if err := d.Lock(1); err != nil {
					return err
				}
				c[other*per]++
				if err := d.Unlock(1); err != nil {
					return err
				}
			} else {
				c[me*per+1+me] = int64(i) // on its home page, protected once no longer watched
			}
			if shmem.PostedUnlocks(d) > 0 {
				firstPosted[me].CompareAndSwap(-1, int64(i))
			}
		}
		c[me*per+1+me] = c[other*per+1+me] // the last value written, on its own home page
		if err := d.Barrier(); err != nil {
			return err
		}
		if shmem.PostedUnlocks(d) == 0 {
			return fmt.Errorf("no Unlock was posted in %d iterations", 50*iters)
		}
		var total int64
		for k := 0; k < n; k++ {
			total += c[k*per]
			for w := 0; w < n; w++ {
				if k == w {
					continue
				}
				if got, last := c[k*per+1+w], c[w*per+1+w]; got != last {
					return fmt.Errorf("page %d: slot of rank %d is %d after the barrier, it wrote %d last", k, w, got, last)
				}
			}
		}
		if total != n*iters {
			return fmt.Errorf("counters sum to %d, want %d", total, n*iters)
		}
		return d.Free(r)
	})
}

// A lock that rank 0 keeps after its release (lock 1), or manages and
// held last (lock 0), is taken by a claim in the call queue, without
// waiting, and given back when rank 1 asks for it in the middle of rank 0's bursts of Lock and Unlock (with and without
// writes): counters incremented under the lock on pages homed on either
// rank are exact everywhere, and some of rank 0's Locks were claimed.
func TestClaimedLocksKeepMutualExclusion(t *testing.T) {
	const n, rounds, burst = 2, 30, 12
	ranks(t, n, func(d *shmem.DSM) error {
		r, err := d.Alloc(n*shmem.PageSize, shmem.BlockCyclic(1, 0))
		if err != nil {
			return err
		}
		per := shmem.PageSize / 8
		c := shmem.Slice[int64](r)
		me := d.Rank()
		var want int64
		id := 1 // managed by rank 1, then by rank 0 (phase 1)
		incr := func() error {
			if err := d.Lock(id); err != nil {
				return err
			}
			c[0]++
			c[per]++
			return d.Unlock(id)
		}
		for phase := 0; phase < 2; phase++ {
			id = 1 - phase
			if err := d.Barrier(); err != nil {
				return err
			}
			posted := shmem.PostedLocks(d)
			for i := 0; i < rounds || me == 0 && shmem.PostedLocks(d) == posted && i < 20*rounds; i++ {
				if me == 0 {
					for k := 0; k < burst; k++ {
						var err error
						if k%4 == 0 {
							err = incr()
							want++
						} else if err = d.Lock(id); err == nil {
							err = d.Unlock(id)
						}
						if err != nil {
							return err
						}
					}
				} else if i%2 == 0 {
					if err := incr(); err != nil {
						return err
					}
					want++
				}
				if err := d.Wait(); err != nil { // lets the pagers catch up
					return err
				}
			}
			if me == 0 && shmem.PostedLocks(d) == posted {
				return fmt.Errorf("no Lock of lock %d was claimed", id)
			}
		}
		c[2+me] = want
		if err := d.Barrier(); err != nil {
			return err
		}
		if total := c[2] + c[3]; c[0] != total || c[per] != total {
			return fmt.Errorf("counters %d and %d after the barrier, want %d", c[0], c[per], total)
		}
		return nil
	})
}
