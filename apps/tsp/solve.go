package main

import (
	"fmt"
	"math"
	"slices"
)

// The travelling salesman problem, sequentially: the cities and their
// distances, the lower bound and the depth-first branch and bound that
// every rank runs on its subproblems, and the exact solvers rank 0 checks
// the result with.

const (
	// maxCities is the most cities a problem may have: visited sets are
	// bit masks, and Held–Karp's table has 2^(n-1)·(n-1) entries.
	maxCities = 20
	// inf is a tour length larger than any real one.
	inf = math.MaxInt32
	// gridSize is the side of the square the cities are placed in.
	gridSize = 1000
)

// problem is a symmetric travelling salesman problem on n cities. Tours
// start and end at city 0.
type problem struct {
	n      int
	d      []int32 // d[i*n+j]: the distance from city i to city j
	minOut []int32 // minOut[i]: the shortest distance from city i to another
	near   []int8  // near[i*(n-1):(i+1)*(n-1)]: the other cities, nearest first
}

// cityDistances returns the distances between n cities placed at random
// points of a gridSize×gridSize square: the Euclidean distances rounded to
// integers. The points come from a splitmix64 stream started at seed, so
// the same n and seed give the same problem everywhere.
func cityDistances(n int, seed uint64) []int32 {
	x, y := make([]float64, n), make([]float64, n)
	s := seed
	for i := range n {
		x[i] = float64(splitmix64(&s) % gridSize)
		y[i] = float64(splitmix64(&s) % gridSize)
	}
	d := make([]int32, n*n)
	for i := range n {
		for j := range n {
			d[i*n+j] = int32(math.Round(math.Hypot(x[i]-x[j], y[i]-y[j])))
		}
	}
	return d
}

// splitmix64 returns the next number of the splitmix64 stream whose state
// is *s.
func splitmix64(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// newProblem returns the problem of n cities with distances d (n×n, row
// by row). It checks the size and that the distances are non-negative
// and small enough that no tour's length overflows.
func newProblem(n int, d []int32) (*problem, error) {
	if n < 3 || n > maxCities {
		return nil, fmt.Errorf("tsp: %d cities: want 3 to %d", n, maxCities)
	}
	if len(d) != n*n {
		return nil, fmt.Errorf("tsp: %d distances for %d cities, want %d", len(d), n, n*n)
	}
	p := &problem{n: n, d: d, minOut: make([]int32, n), near: make([]int8, 0, n*(n-1))}
	for i := range n {
		others := make([]int8, 0, n-1)
		for j := range n {
			if v := d[i*n+j]; v < 0 || v > inf/int32(2*maxCities) {
				return nil, fmt.Errorf("tsp: distance %d from city %d to %d: want 0 to %d", v, i, j, inf/int32(2*maxCities))
			}
			if j != i {
				others = append(others, int8(j))
			}
		}
		slices.SortStableFunc(others, func(a, b int8) int { return int(d[i*n+int(a)] - d[i*n+int(b)]) })
		p.minOut[i] = d[i*n+int(others[0])]
		p.near = append(p.near, others...)
	}
	return p, nil
}

// partial is a partial tour: the path from city 0, its length, the set of
// cities visited and the sum of minOut over the cities not visited.
type partial struct {
	cost    int32
	depth   int    // cities on the path
	visited uint32 // bit i: city i is on the path
	rem     int32  // Σ minOut[i] over the cities not on the path
	path    [maxCities]int8
}

// root returns the partial tour that holds only city 0.
func (p *problem) root() partial {
	r := partial{depth: 1, visited: 1}
	for i := 1; i < p.n; i++ {
		r.rem += p.minOut[i]
	}
	return r
}

// bound returns a lower bound on the length of every tour that extends t:
// the rest of the tour leaves t's last city and every city not on t once,
// each time along an edge no shorter than that city's shortest.
func (p *problem) bound(t *partial) int32 {
	if t.depth == p.n {
		return t.cost + p.d[int(t.path[p.n-1])*p.n]
	}
	return t.cost + p.minOut[t.path[t.depth-1]] + t.rem
}

// child returns t extended by city c, which t has not visited.
func (p *problem) child(t *partial, c int) partial {
	ch := *t
	ch.cost += p.d[int(t.path[t.depth-1])*p.n+c]
	ch.path[ch.depth] = int8(c)
	ch.depth++
	ch.visited |= 1 << c
	ch.rem -= p.minOut[c]
	return ch
}

// searcher runs the depth-first branch and bound below partial tours.
type searcher struct {
	p     *problem
	best  int32 // no tour of this length or longer is looked for
	nodes int64 // partial tours visited
	// found is called with a tour shorter than best; it returns the new
	// best, which may be shorter still (another rank's).
	found func(length int32, tour []int8) int32
}

// solve looks for tours shorter than s.best that extend t.
func (s *searcher) solve(t *partial) {
	s.nodes++
	p := s.p
	n := p.n
	last := int(t.path[t.depth-1])
	if t.depth == n {
		if l := t.cost + p.d[last*n]; l < s.best {
			s.best = s.found(l, t.path[:n])
		}
		return
	}
	d := p.d[last*n : (last+1)*n]
	for _, c := range p.near[last*(n-1) : (last+1)*(n-1)] {
		if t.visited&(1<<c) != 0 {
			continue
		}
		// The child's bound, cost + d + (rem - minOut[c]) + minOut[c],
		// grows with d: the rest of the nearest-first list is no better.
		if t.cost+d[c]+t.rem >= s.best {
			break
		}
		t.path[t.depth] = c
		t.cost += d[c]
		t.visited |= 1 << c
		t.rem -= p.minOut[c]
		t.depth++
		s.solve(t)
		t.depth--
		t.rem += p.minOut[c]
		t.visited &^= 1 << c
		t.cost -= d[c]
	}
}

// solveSequential solves p by the same branch and bound on one core and
// returns the optimal length and a tour of that length.
func solveSequential(p *problem) (int32, []int8) {
	var tour []int8
	s := &searcher{p: p, best: inf, found: func(l int32, t []int8) int32 {
		tour = slices.Clone(t)
		return l
	}}
	r := p.root()
	s.solve(&r)
	return s.best, tour
}

// heldKarp returns the length of the shortest tour of p by Held and Karp's
// dynamic programme over subsets: O(2^n·n²) time, O(2^n·n) memory.
func heldKarp(p *problem) int32 {
	n := p.n
	m := n - 1 // cities 1…n-1 are bits 0…m-1
	// best[S*m+j]: the shortest path from 0 through the cities of S that
	// ends at city j+1 (bit j of S).
	best := make([]int32, (1<<m)*m)
	for i := range best {
		best[i] = inf
	}
	for j := range m {
		best[(1<<j)*m+j] = p.d[j+1]
	}
	for set := 1; set < 1<<m; set++ {
		row := best[set*m : (set+1)*m]
		for j, l := range row {
			if l == inf {
				continue
			}
			dj := p.d[(j+1)*n+1:]
			for k := range m {
				if set&(1<<k) != 0 {
					continue
				}
				next := set | 1<<k
				if v := l + dj[k]; v < best[next*m+k] {
					best[next*m+k] = v
				}
			}
		}
	}
	opt := int32(inf)
	full := (1<<m - 1) * m
	for j := range m {
		if v := best[full+j] + p.d[(j+1)*n]; best[full+j] != inf && v < opt {
			opt = v
		}
	}
	return opt
}

// tourLength checks that tour visits every city of p once, starting at
// city 0, and returns its length back to city 0.
func tourLength(p *problem, tour []int8) (int32, error) {
	n := p.n
	if len(tour) != n {
		return 0, fmt.Errorf("the tour has %d cities, want %d", len(tour), n)
	}
	if tour[0] != 0 {
		return 0, fmt.Errorf("the tour starts at city %d, want 0", tour[0])
	}
	var seen uint32
	for i, c := range tour {
		if c < 0 || int(c) >= n {
			return 0, fmt.Errorf("city %d at position %d: want 0 to %d", c, i, n-1)
		}
		if seen&(1<<c) != 0 {
			return 0, fmt.Errorf("city %d is visited twice", c)
		}
		seen |= 1 << c
	}
	var l int32
	for i, c := range tour {
		l += p.d[int(c)*n+int(tour[(i+1)%n])]
	}
	return l, nil
}
