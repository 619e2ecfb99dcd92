package main

import "fmt"

// The shared work queue, as in JIAJIA's tsp: a pool of partial-tour
// records, a stack of the free records and a priority queue (a binary
// heap of (bound, record) pairs, smallest bound first), all plain int32
// words so that they can live in DSM memory. The caller holds the queue's
// lock around every call. A header beside them holds the heap's and the
// stack's sizes, and the best tour length any rank has reported through the
// queue (a hint, so that ranks learn each other's bounds every time they
// take work, without another lock).

// Header words.
const (
	hHeap  = iota // records in the heap
	hFree         // records on the free stack
	hBound        // best tour length reported through the queue
	hWords
)

// Record words: the partial type flattened; the path takes one word a city.
const (
	rCost = iota
	rDepth
	rVisited
	rRem
	rPath
)

// queue views the words of a work queue for tours of n cities.
type queue struct {
	n, capacity int
	hdr         []int32 // hWords words
	heap        []int32 // (bound, record) pairs
	free        []int32 // indices of free records, the top last
	recs        []int32 // capacity records of rPath+n words
}

// queueWords returns the int32 words of a queue of capacity records for
// tours of n cities.
func queueWords(n, capacity int) int { return hWords + capacity*(2+1+rPath+n) }

// viewQueue lays a queue of capacity records for n cities over w, which
// must hold queueWords(n, capacity) words.
func viewQueue(w []int32, n, capacity int) (queue, error) {
	if need := queueWords(n, capacity); len(w) < need {
		return queue{}, fmt.Errorf("tsp: a queue of %d records needs %d words, have %d", capacity, need, len(w))
	}
	q := queue{n: n, capacity: capacity}
	q.hdr, w = w[:hWords:hWords], w[hWords:]
	q.heap, w = w[:2*capacity:2*capacity], w[2*capacity:]
	q.free, w = w[:capacity:capacity], w[capacity:]
	q.recs = w[:capacity*(rPath+n)]
	return q, nil
}

// reset empties the queue: every record free, the bound hint inf.
func (q queue) reset() {
	q.hdr[hHeap], q.hdr[hFree], q.hdr[hBound] = 0, int32(q.capacity), inf
	for i := range q.free {
		q.free[i] = int32(q.capacity - 1 - i)
	}
}

// len returns the number of partial tours in the queue.
func (q queue) len() int { return int(q.hdr[hHeap]) }

// rec returns record i.
func (q queue) rec(i int32) []int32 {
	w := rPath + q.n
	return q.recs[int(i)*w : int(i+1)*w : int(i+1)*w]
}

// push adds t with priority bound. It fails when every record is in use
// or the queue is corrupt.
func (q queue) push(t *partial, bound int32) error {
	nf, nh := int(q.hdr[hFree]), int(q.hdr[hHeap])
	if nf <= 0 || nf > q.capacity || nh < 0 || nh >= q.capacity {
		return fmt.Errorf("tsp: cannot queue a partial tour: %d of %d records free, %d queued", nf, q.capacity, nh)
	}
	slot := q.free[nf-1]
	if slot < 0 || int(slot) >= q.capacity {
		return fmt.Errorf("tsp: the queue's free stack holds record %d of %d", slot, q.capacity)
	}
	q.hdr[hFree] = int32(nf - 1)
	r := q.rec(slot)
	r[rCost], r[rDepth], r[rVisited], r[rRem] = t.cost, int32(t.depth), int32(t.visited), t.rem
	for i := range q.n {
		r[rPath+i] = int32(t.path[i])
	}
	// Sift up.
	i := nh
	for i > 0 {
		parent := (i - 1) / 2
		if q.heap[2*parent] <= bound {
			break
		}
		q.heap[2*i], q.heap[2*i+1] = q.heap[2*parent], q.heap[2*parent+1]
		i = parent
	}
	q.heap[2*i], q.heap[2*i+1] = bound, slot
	q.hdr[hHeap] = int32(nh + 1)
	return nil
}

// pop removes the partial tour of the smallest bound into t and returns
// its bound. ok is false when the queue is empty.
func (q queue) pop(t *partial) (bound int32, ok bool, err error) {
	nh := int(q.hdr[hHeap])
	if nh == 0 {
		return 0, false, nil
	}
	nf := int(q.hdr[hFree])
	if nh < 0 || nh > q.capacity || nf < 0 || nf >= q.capacity {
		return 0, false, fmt.Errorf("tsp: the queue is corrupt: %d queued, %d free of %d records", nh, nf, q.capacity)
	}
	bound, slot := q.heap[0], q.heap[1]
	if slot < 0 || int(slot) >= q.capacity {
		return 0, false, fmt.Errorf("tsp: the queue's heap holds record %d of %d", slot, q.capacity)
	}
	r := q.rec(slot)
	depth := int(r[rDepth])
	if depth < 1 || depth > q.n {
		return 0, false, fmt.Errorf("tsp: queued partial tour of %d cities, want 1 to %d", depth, q.n)
	}
	*t = partial{cost: r[rCost], depth: depth, visited: uint32(r[rVisited]), rem: r[rRem]}
	for i := range q.n {
		t.path[i] = int8(r[rPath+i])
	}
	q.free[nf] = slot
	q.hdr[hFree] = int32(nf + 1)

	// Move the last pair to the root and sift it down.
	nh--
	q.hdr[hHeap] = int32(nh)
	if nh > 0 {
		lb, ls := q.heap[2*nh], q.heap[2*nh+1]
		i := 0
		for {
			c := 2*i + 1
			if c >= nh {
				break
			}
			if c+1 < nh && q.heap[2*(c+1)] < q.heap[2*c] {
				c++
			}
			if q.heap[2*c] >= lb {
				break
			}
			q.heap[2*i], q.heap[2*i+1] = q.heap[2*c], q.heap[2*c+1]
			i = c
		}
		q.heap[2*i], q.heap[2*i+1] = lb, ls
	}
	return bound, true, nil
}

// queueCapacity returns how many records a queue needs for tours of n
// cities split down to split cities: every partial tour of fewer than
// split cities is expanded in the queue, and those of split cities are
// solved by one rank, so at most Σ_{d=1..split} (n-1)!/(n-d)! are ever
// queued. It returns -1 when that exceeds limit.
func queueCapacity(n, split, limit int) int {
	total, level := 0, 1
	for d := 1; d <= split; d++ {
		if d > 1 {
			level *= n - d + 1
		}
		total += level
		if level > limit || total > limit {
			return -1
		}
	}
	return total
}
