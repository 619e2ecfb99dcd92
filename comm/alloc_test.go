package comm

import (
	"fmt"
	"testing"

	"github.com/jiarun/jia/comm/memtransport"
)

// worlds returns n world communicators on one in-memory fabric (or a
// qtransport world, see testTransport), for tests and benchmarks that drive
// the ranks themselves.
func worlds(tb testing.TB, n int, mopt memtransport.Options, copt *Options) []*Comm {
	tb.Helper()
	eps, _, closeAll := endpoints(tb, n, mopt)
	tb.Cleanup(closeAll)
	cs := make([]*Comm, n)
	for r := range cs {
		c, err := NewWorld(eps[r], copt)
		if err != nil {
			tb.Fatal(err)
		}
		cs[r] = c
	}
	return cs
}

// allocWarmups is how many times allocs has every rank run its side before
// it measures, all ranks finishing first: the pools and queues of a new
// world (a transport's per-peer packet pools and acknowledgement lists
// among them) grow to their steady size over the first few calls, and a
// partner still finishing its first call while rank 0 is measured would
// count its growth too.
const allocWarmups = 4

// allocs measures the allocations of op on rank 0 while ranks 1… run
// partner the same number of times (AllocsPerRun calls op runs+1 times),
// after allocWarmups calls on every rank. Every goroutine's allocations
// count, which is what we want: none.
func allocs(t *testing.T, cs []*Comm, runs int, op func(c *Comm) error, partner func(c *Comm) error) float64 {
	t.Helper()
	errc := make(chan error, len(cs))
	startPartners := func(calls int) {
		for _, c := range cs[1:] {
			go func() {
				for i := 0; i < calls; i++ {
					if err := partner(c); err != nil {
						errc <- fmt.Errorf("rank %d, call %d: %w", c.Rank(), i, err)
						return
					}
				}
				errc <- nil
			}()
		}
	}
	waitPartners := func() {
		t.Helper()
		for range cs[1:] {
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
	}
	startPartners(allocWarmups)
	for i := 0; i < allocWarmups; i++ {
		if err := op(cs[0]); err != nil {
			t.Fatalf("rank 0, warm-up call %d: %v", i, err)
		}
	}
	waitPartners()
	startPartners(runs + 1)
	var err0 error
	n := testing.AllocsPerRun(runs, func() {
		if err := op(cs[0]); err != nil && err0 == nil {
			err0 = err
		}
	})
	waitPartners()
	if err0 != nil {
		t.Fatal(err0)
	}
	return n
}

// TestHotPathsDoNotAllocate checks that steady-state point-to-point calls
// and a small Allreduce allocate nothing: requests, protocol state, match
// queue entries and message buffers are all pooled.
func TestHotPathsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	const runs = 300
	b8 := make([]float64, 1)
	p8 := make([]float64, 1)
	big := make([]float64, 64<<10/8)
	big2 := make([]float64, 64<<10/8)
	perRank := [][]float64{{0}, {1}, {2}, {3}}
	mid := make([]float64, 2<<10) // 16 KiB: Allreduce's direct algorithm on 4 ranks
	midRank := make([][]float64, 4)
	for r := range midRank {
		midRank[r] = make([]float64, len(mid))
	}
	cases := []struct {
		name     string
		n        int
		op, peer func(c *Comm) error
	}{
		{"Send+Recv 8 B", 2,
			func(c *Comm) error {
				if err := Send(c, b8, 1, 0); err != nil {
					return err
				}
				_, err := Recv(c, b8, 1, 0)
				return err
			},
			func(c *Comm) error {
				if _, err := Recv(c, p8, 0, 0); err != nil {
					return err
				}
				return Send(c, p8, 0, 0)
			}},
		{"Isend+Irecv+WaitAll 8 B", 2,
			func(c *Comm) error {
				var reqs [2]Request
				var err error
				if reqs[0], err = Irecv(c, b8, 1, 1); err != nil {
					return err
				}
				if reqs[1], err = Isend(c, b8, 1, 1); err != nil {
					return err
				}
				return WaitAll(reqs[:], nil)
			},
			func(c *Comm) error {
				_, err := Sendrecv(c, p8, 0, 1, p8, 0, 1)
				return err
			}},
		{"Send+Recv 64 KiB (rendezvous)", 2,
			func(c *Comm) error {
				if err := Send(c, big, 1, 2); err != nil {
					return err
				}
				_, err := Recv(c, b8, 1, 2)
				return err
			},
			func(c *Comm) error {
				if _, err := Recv(c, big2, 0, 2); err != nil {
					return err
				}
				return Send(c, p8, 0, 2)
			}},
		{"Allreduce 8 B, 4 ranks", 4,
			func(c *Comm) error { return Allreduce(c, b8, b8, Sum) },
			func(c *Comm) error {
				x := perRank[c.Rank()]
				return Allreduce(c, x, x, Sum)
			}},
		{"Allreduce 16 KiB, 4 ranks", 4,
			func(c *Comm) error { return Allreduce(c, mid, mid, Sum) },
			func(c *Comm) error {
				x := midRank[c.Rank()]
				return Allreduce(c, x, x, Sum)
			}},
		{"Barrier, 3 ranks", 3,
			func(c *Comm) error { return c.Barrier() },
			func(c *Comm) error { return c.Barrier() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := worlds(t, tc.n, memtransport.Options{}, nil)
			if n := allocs(t, cs, runs, tc.op, tc.peer); n != 0 {
				t.Errorf("%v allocations per call", n)
			}
		})
	}
}
