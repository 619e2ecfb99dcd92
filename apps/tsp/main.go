// Command tsp solves the travelling salesman problem by branch and bound on
// the DSM, as JIAJIA's tsp: the distances, a shared work queue of partial
// tours and the best tour found so far all live in shared memory, homed on
// rank 0. The queue (a pool of partial-tour records, a free stack and a
// priority queue by lower bound) is guarded by lock 0, the best tour by
// lock 1.
//
// Every rank repeatedly takes the queue's lock and pops the partial tours
// of the smallest bounds: one of fewer than -split cities it expands in
// place, queueing the children whose bound is below the best length it
// knows; those of -split cities it takes away, up to -chunk at a time
// (fewer as the queue empties), and searches depth first on its own,
// pruning against that length. A rank that completes a shorter tour
// records it under lock 1. The best length also travels with the
// queue: whoever takes the queue's lock leaves the best length it knows
// there and picks up a better one, so that ranks prune with each other's
// tours without taking lock 1. Children are only made under the queue's
// lock, so a rank that finds the queue empty is done.
//
// The cities are -n random points of a 1000×1000 square (a splitmix64
// stream from -seed), 20 at most, with their Euclidean distances rounded
// to integers. Rank 0 then checks the result against its own copy of the
// distances: the optimum must equal the one found sequentially by Held and
// Karp's dynamic programme, and the recorded tour must visit every city
// once and have the recorded length. Rank 0 prints the time of the search,
// the work each rank did, the tour, and VERIFIED or FAILED; the job exits 0
// only if verified.
//
//	jiarun -np 2 ./bin/tsp -n 18 -seed 1
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/shmem"
)

// The DSM locks.
const (
	lockQueue = 0 // the work queue and the bound hint in its header
	lockBest  = 1 // the best tour
)

// maxRecords bounds the work queue's size.
const maxRecords = 1 << 18

func main() {
	n := flag.Int("n", 18, fmt.Sprintf("number of cities, 3 to %d", maxCities))
	seed := flag.Uint64("seed", 1, "seed of the random cities")
	split := flag.Int("split", 0, "partial tours of this many cities (1 to n-1) are searched by one rank (0: min(3, n-1))")
	chunk := flag.Int("chunk", 8, "most partial tours a rank takes from the queue at once")
	flag.Parse()
	jia.MustInit()
	pid, hosts := jia.Jiapid(), jia.Jiahosts()
	if flag.NArg() > 0 {
		jia.JiaError("tsp: unexpected arguments %q", flag.Args())
	}
	if *n < 3 || *n > maxCities {
		jia.JiaError("tsp: bad -n %d: want 3 to %d cities", *n, maxCities)
	}
	if *split == 0 {
		*split = min(3, *n-1)
	}
	if *split < 1 || *split > *n-1 {
		jia.JiaError("tsp: bad -split %d: want 1 to n-1 = %d", *split, *n-1)
	}
	if *chunk < 1 || *chunk > maxRecords {
		jia.JiaError("tsp: bad -chunk %d: want 1 to %d", *chunk, maxRecords)
	}
	capacity := queueCapacity(*n, *split, maxRecords)
	if capacity < 0 {
		jia.JiaError("tsp: -split %d with %d cities would queue more than %d partial tours: use a smaller -split", *split, *n, maxRecords)
	}

	dist := shmem.Slice[int32](jia.JiaAlloc2p(*n**n*4, 0))
	q, err := viewQueue(shmem.Slice[int32](jia.JiaAlloc2p(queueWords(*n, capacity)*4, 0)), *n, capacity)
	check(err)
	// best[0] is the best length, best[1:1+n] its tour.
	best := shmem.Slice[int32](jia.JiaAlloc2p((1+maxCities)*4, 0))
	// work[2r], work[2r+1]: the subproblems and nodes rank r searched.
	work := shmem.Slice[int64](jia.JiaAlloc2p(2*hosts*8, 0))

	if pid == 0 {
		p, err := newProblem(*n, cityDistances(*n, *seed))
		check(err)
		copy(dist, p.d)
		best[0] = inf
		q.reset()
		r := p.root()
		check(q.push(&r, p.bound(&r)))
	}
	jia.JiaBarrier()

	// Every rank searches with its own copy of the distances.
	p, err := newProblem(*n, slices.Clone(dist[:*n**n]))
	check(err)
	t0 := jia.JiaClock()
	subs, nodes := search(p, q, best, *split, hosts, *chunk)
	work[2*pid], work[2*pid+1] = subs, nodes
	jia.JiaBarrier()
	elapsed := jia.JiaClock() - t0

	code := 0
	if pid == 0 {
		fmt.Printf("tsp: n=%d seed=%d split=%d chunk=%d ranks=%d time=%.3f s\n", *n, *seed, *split, *chunk, hosts, elapsed)
		for r := range hosts {
			fmt.Printf("tsp: rank %d searched %d subproblems, %d partial tours\n", r, work[2*r], work[2*r+1])
		}
		fmt.Printf("tsp: best tour, length %d: %v\n", best[0], best[1:1+*n])
		if opt, msg := verify(*n, *seed, best[0], best[1:1+*n]); msg == "" {
			fmt.Printf("tsp: VERIFIED (the optimum %d by Held–Karp; the tour visits every city once)\n", opt)
		} else {
			fmt.Println("tsp: FAILED:", msg)
			code = 1
		}
	}
	check(jia.Finalize())
	os.Exit(code)
}

// search takes partial tours from the shared queue, up to chunk at a time,
// and searches them until the queue is empty. It returns the number of
// subproblems it searched and of partial tours it visited.
func search(p *problem, q queue, best []int32, split, ranks, chunk int) (subs, nodes int64) {
	s := &searcher{p: p, best: inf, found: func(l int32, tour []int8) int32 {
		jia.JiaLock(lockBest)
		if l < best[0] {
			best[0] = l
			for i, c := range tour {
				best[1+i] = int32(c)
			}
		}
		l = best[0]
		jia.JiaUnlock(lockBest)
		return l
	}}
	ts := make([]partial, chunk)
	for {
		jia.JiaLock(lockQueue)
		k, err := take(p, q, ts, s, split, ranks)
		jia.JiaUnlock(lockQueue)
		check(err)
		if k == 0 {
			return subs, s.nodes
		}
		for i := range ts[:k] {
			// Another rank's tour, or one of this chunk's, may have
			// made a tour taken with the others not worth searching.
			if p.bound(&ts[i]) < s.best {
				subs++
				s.solve(&ts[i])
			}
		}
	}
}

// take is what a rank does holding the queue's lock: it trades best
// lengths with the queue's hint, then pops partial tours, dropping those
// whose bound is no better than the best length and expanding those of
// fewer than split cities into the queue, until it has popped partial
// tours of split cities into ts: as many as fit, but no more than the
// queue's length over twice the ranks, at least one (guided
// self-scheduling, so that the last subproblems are dealt one at a time).
// It returns how many it took; none means the queue is empty.
func take(p *problem, q queue, ts []partial, s *searcher, split, ranks int) (int, error) {
	switch h := q.hdr[hBound]; {
	case h < s.best:
		s.best = h
	case h > s.best:
		q.hdr[hBound] = s.best
	}
	n := p.n
	k := 0
	for k < len(ts) {
		t := &ts[k]
		b, ok, err := q.pop(t)
		if err != nil || !ok {
			return k, err
		}
		if b >= s.best {
			continue
		}
		if t.depth >= split {
			k++
			if k >= (q.len()+2*ranks-1)/(2*ranks) {
				break
			}
			continue
		}
		last := int(t.path[t.depth-1])
		for _, c := range p.near[last*(n-1) : (last+1)*(n-1)] {
			if t.visited&(1<<c) != 0 {
				continue
			}
			ch := p.child(t, int(c))
			if cb := p.bound(&ch); cb < s.best {
				if err := q.push(&ch, cb); err != nil {
					return k, err
				}
			}
		}
	}
	return k, nil
}

// verify checks the best length and tour the ranks recorded against the
// problem made afresh from n and seed: the length must be Held–Karp's
// optimum, and the tour a tour of that length. It returns the optimum and
// what is wrong, or "".
func verify(n int, seed uint64, length int32, recorded []int32) (int32, string) {
	p, err := newProblem(n, cityDistances(n, seed))
	if err != nil {
		return 0, err.Error()
	}
	tour := make([]int8, len(recorded))
	for i, c := range recorded {
		if c < 0 || int(c) >= n {
			return 0, fmt.Sprintf("the recorded tour has city %d at position %d: want 0 to %d", c, i, n-1)
		}
		tour[i] = int8(c)
	}
	opt := heldKarp(p)
	if length != opt {
		return opt, fmt.Sprintf("the best length found is %d, the optimum is %d", length, opt)
	}
	l, err := tourLength(p, tour)
	if err != nil {
		return opt, "the recorded tour is not a tour: " + err.Error()
	}
	if l != length {
		return opt, fmt.Sprintf("the recorded tour has length %d, not the recorded %d", l, length)
	}
	return opt, ""
}

func check(err error) {
	if err != nil {
		jia.JiaError("tsp: %v", err)
	}
}
