package main

import (
	"fmt"

	"github.com/jiarun/jia/apps/internal/npb"
)

// IS's bucketed counting sort over shared arrays. A ranker is one rank's
// part of it; the shared arrays are plain slices here, DSM memory in main
// and ordinary memory in the tests, and the caller puts a coherence
// barrier between the phases, as the comments of each say.

// shared holds the arrays every rank reads and writes, all indexed from
// the start of the array, whoever's block an element is in.
type shared struct {
	keys   []int32 // the keys, rank r's block [lo(r), hi(r))
	buff1  []int32 // each block's keys sorted into buckets, in place of its keys
	sorted []int32 // all the keys in order, by the full verification
	counts []int32 // rank r's bucket counts at [r*stride, r*stride+buckets)
	stride int
}

// layout is how the keys are dealt: in blocks of per keys (a whole number
// of pages) to ranks 0, 1, …; the last blocks may be short or empty.
type layout struct {
	n, per, ranks int
}

// newLayout deals n keys to ranks in blocks of whole multiples of unit
// keys (the keys of a page).
func newLayout(n, ranks, unit int) layout {
	per := (n + ranks - 1) / ranks
	per = (per + unit - 1) / unit * unit
	return layout{n: n, per: per, ranks: ranks}
}

// block returns the global indices [lo, hi) of rank r's keys.
func (l layout) block(r int) (lo, hi int) { return min(l.n, r*l.per), min(l.n, (r+1)*l.per) }

// ranker is one rank's state.
type ranker struct {
	class  byte
	p      npb.ISClass
	me     int
	l      layout
	lo, hi int
	nb     int   // buckets
	shift  uint  // key >> shift is its bucket
	maxKey int32 // keys are in [0, maxKey)

	bptr       []int   // bucket write pointers
	btotal     []int64 // bucket totals over every rank
	ptr1, ptr2 []int   // each rank's first and last bucket
	count      []int32 // over this rank's key range: populations, then ranks

	// After rank: this rank's buckets and keys.
	minKey, maxKeyV int32
	lower           int64 // keys in the buckets below this rank's
	nRanked         int
	passed          int64 // partial verifications passed
}

func newRanker(class byte, me int, l layout) (*ranker, error) {
	p, err := npb.ISParams(class)
	if err != nil {
		return nil, err
	}
	if l.n != 1<<p.TotalKeysLog2 {
		return nil, fmt.Errorf("dsmis: a layout of %d keys for class %c, which has %d", l.n, class, 1<<p.TotalKeysLog2)
	}
	r := &ranker{
		class: class, p: p, me: me, l: l,
		nb: 1 << p.NumBucketsLog2, shift: uint(p.MaxKeyLog2 - p.NumBucketsLog2),
		maxKey: int32(1) << p.MaxKeyLog2,
	}
	r.lo, r.hi = l.block(me)
	r.bptr = make([]int, r.nb)
	r.btotal = make([]int64, r.nb)
	r.ptr1, r.ptr2 = make([]int, l.ranks), make([]int, l.ranks)
	r.count = make([]int32, r.maxKey)
	return r, nil
}

// generate writes this rank's keys (NPB's create_seq). A barrier must
// follow before any rank ranks.
func (r *ranker) generate(s shared) error {
	return npb.ISKeys(s.keys[r.lo:r.hi], int64(r.lo), r.p.MaxKeyLog2)
}

// bucket is the first phase of ranking it: NPB's alteration of two keys,
// then this rank's bucket counts into s.counts and its keys sorted into
// buckets into its block of s.buff1, all in memory homed on this rank. A
// barrier must follow.
func (r *ranker) bucket(s shared, it int) {
	if g := it; g >= r.lo && g < r.hi {
		s.keys[g] = int32(it)
	}
	if g := it + npb.ISIterations; g >= r.lo && g < r.hi {
		s.keys[g] = r.maxKey - int32(it)
	}
	keys := s.keys[r.lo:r.hi]
	cnt := s.counts[r.me*s.stride : r.me*s.stride+r.nb]
	clear(cnt)
	for _, k := range keys {
		cnt[k>>r.shift]++
	}
	acc := 0
	for b, c := range cnt {
		r.bptr[b] = acc
		acc += int(c)
	}
	buff := s.buff1[r.lo:r.hi]
	for _, k := range keys {
		b := k >> r.shift
		buff[r.bptr[b]] = k
		r.bptr[b]++
	}
}

// rank is the second phase of ranking it, after the barrier: from every
// rank's bucket counts it finds the buckets this rank ranks (NPB's
// distribution: whole buckets, about n/ranks keys a rank), reads their
// keys from every rank's block of s.buff1, counts them and turns the
// counts into ranks, then checks the test keys in its range (NPB's partial
// verification). A barrier must follow before the next ranking.
func (r *ranker) rank(s shared, it int) error {
	nb, ranks := r.nb, r.l.ranks
	bt := r.btotal
	clear(bt)
	for q := range ranks {
		var sum int64
		for b, c := range s.counts[q*s.stride : q*s.stride+nb] {
			bt[b] += int64(c)
			sum += int64(c)
		}
		if lo, hi := r.l.block(q); sum != int64(hi-lo) {
			return fmt.Errorf("dsmis: ranking %d: rank %d's bucket counts add up to %d, its block holds %d keys", it, q, sum, hi-lo)
		}
	}
	distribute(bt, int64(r.l.n), r.ptr1, r.ptr2)
	b1, b2 := r.ptr1[r.me], r.ptr2[r.me]
	minKey := int32(b1) << r.shift
	maxKeyV := int32(b2+1)<<r.shift - 1

	var lower, want int64
	for b := range b1 {
		lower += bt[b]
	}
	for b := b1; b <= b2; b++ {
		want += bt[b]
	}
	var cnt []int32
	if maxKeyV >= minKey {
		cnt = r.count[:maxKeyV-minKey+1]
		clear(cnt)
	}
	total := 0
	for q := range ranks {
		off, n := segment(s.counts[q*s.stride:q*s.stride+nb], b1, b2)
		lo, _ := r.l.block(q)
		for _, k := range s.buff1[lo+off : lo+off+n] {
			if k < minKey || k > maxKeyV {
				return fmt.Errorf("dsmis: ranking %d: rank %d's buckets %d to %d hold key %d, outside %d to %d", it, q, b1, b2, k, minKey, maxKeyV)
			}
			cnt[k-minKey]++
		}
		total += n
	}
	if int64(total) != want {
		return fmt.Errorf("dsmis: ranking %d: read %d keys of buckets %d to %d, their totals say %d", it, total, b1, b2, want)
	}
	for i := 1; i < len(cnt); i++ {
		cnt[i] += cnt[i-1]
	}

	// Partial verification: the rank of each test key in this rank's range
	// (the number of keys less than it) against NPB's expected value.
	for j, ti := range r.p.TestIndex {
		k := s.keys[ti]
		if k < minKey || k > maxKeyV {
			continue
		}
		rk := lower
		if k > minKey {
			rk += int64(cnt[k-1-minKey])
		}
		if rk == npb.ISExpectedRank(r.class, j, it, r.p.TestRank[j]) {
			r.passed++
		}
	}
	r.minKey, r.maxKeyV, r.lower, r.nRanked = minKey, maxKeyV, lower, total
	return nil
}

// sortKeys writes the keys this rank ranked last to their places in
// s.sorted (NPB's full_verify, each key at its rank). A barrier must
// follow before checking.
func (r *ranker) sortKeys(s shared) {
	if r.nRanked == 0 {
		return
	}
	cnt := r.count[:r.maxKeyV-r.minKey+1]
	out := s.sorted[r.lower : r.lower+int64(r.nRanked)]
	for q := range r.l.ranks {
		off, n := segment(s.counts[q*s.stride:q*s.stride+r.nb], r.ptr1[r.me], r.ptr2[r.me])
		lo, _ := r.l.block(q)
		for _, k := range s.buff1[lo+off : lo+off+n] {
			cnt[k-r.minKey]--
			out[cnt[k-r.minKey]] = k
		}
	}
}

// blockCheck is what one rank finds in its block after the full sort.
type blockCheck struct {
	descents    int64 // places where a key is smaller than the one before
	sum, sumSq  int64 // of the keys of its block of s.keys
	sSum, sSumQ int64 // of its block of s.sorted
}

// check checks this rank's block of s.sorted: no key smaller than the one
// before it, the key before the block included; and it sums the keys of
// its blocks of s.keys and s.sorted, so that the ranks can see together
// that the sorted keys are the keys.
func (r *ranker) check(s shared) blockCheck {
	var c blockCheck
	if r.lo == r.hi {
		return c
	}
	prev := int32(-1)
	if r.lo > 0 {
		prev = s.sorted[r.lo-1]
	}
	for _, k := range s.sorted[r.lo:r.hi] {
		if k < prev {
			c.descents++
		}
		prev = k
		c.sSum += int64(k)
		c.sSumQ += int64(k) * int64(k)
	}
	for _, k := range s.keys[r.lo:r.hi] {
		c.sum += int64(k)
		c.sumSq += int64(k) * int64(k)
	}
	return c
}

// distribute gives the ranks contiguous ranges of whole buckets,
// [ptr1[j], ptr2[j]] for rank j, from the bucket totals bt of n keys:
// rank j's range ends at the first bucket where the running total reaches
// (j+1)·n/ranks. Ranks left without buckets get the empty range [1, 0].
// It is NPB IS's distribution (process_bucket_distrib_ptr1/2).
func distribute(bt []int64, n int64, ptr1, ptr2 []int) {
	ranks := len(ptr1)
	var sum int64
	j := 0
	ptr1[0] = 0
	for i := 0; i < len(bt) && j < ranks; i++ {
		sum += bt[i]
		if sum >= int64(j+1)*n/int64(ranks) {
			if j != 0 {
				ptr1[j] = ptr2[j-1] + 1
			}
			ptr2[j] = i
			j++
		}
	}
	for ; j < ranks; j++ {
		ptr1[j], ptr2[j] = 1, 0
	}
}

// segment returns where buckets [b1, b2] start in a block sorted into
// buckets whose counts are cnt, and how many keys they hold.
func segment(cnt []int32, b1, b2 int) (off, n int) {
	for b := range min(b1, len(cnt)) {
		off += int(cnt[b])
	}
	for b := b1; b <= b2; b++ {
		n += int(cnt[b])
	}
	return off, n
}
