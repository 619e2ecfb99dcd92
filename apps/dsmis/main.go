// Command dsmis is the NAS Parallel Benchmark kernel IS (NPB 3.4 rules) on
// the DSM instead of message passing: ten rankings of 2^k integer keys by a
// bucketed counting sort, with the keys, the ranks' bucket counts and the
// keys sorted into buckets all in shared memory.
//
// The keys are dealt in page-aligned blocks, each homed on the rank that
// generates it (NPB's create_seq, each rank jumping ahead to its part of
// NPB's one random stream, so the keys do not depend on the number of
// ranks). Each ranking has two phases with a coherence barrier after each:
// every rank alters two keys as NPB does, counts its keys per bucket and
// sorts them into buckets, all in memory homed on itself; then every rank
// reads all ranks' bucket counts, takes its share of the buckets (NPB's
// distribution: whole buckets, about n/ranks keys a rank), reads those
// buckets' keys out of every rank's block through the DSM, and counts them
// into ranks. NPB's partial verification checks the ranks of five test keys
// in every ranking.
//
// After the timed rankings each rank puts the keys it ranked last at their
// ranks in a shared array, and after a barrier checks its block of it:
// NPB's full verification (no key smaller than the one before it), and
// sums that show the sorted keys are the keys. When there are at most
// 2^seq keys (-seq; by default classes S and W) rank 0 also compares the
// whole sorted array with a sequential sort of keys it makes itself. Rank 0
// prints NPB's report; the job exits 0 only if verified.
//
//	jiarun -np 4 ./bin/dsmis -class W
package main

import (
	"flag"
	"os"
	"slices"
	"strings"

	"github.com/jiarun/jia"
	"github.com/jiarun/jia/apps/internal/npb"
	"github.com/jiarun/jia/shmem"
)

// Words of each rank's slot of results.
const (
	sPassed = iota
	sDescents
	sSum
	sSumSq
	sSortedSum
	sSortedSumSq
	slotWords
)

func main() {
	class := flag.String("class", "S", "problem class: S, W, A, B or C")
	seqLog2 := flag.Int("seq", 20, "rank 0 compares the sorted keys with a sequential sort when there are at most 2^seq keys")
	flag.Parse()
	jia.MustInit()
	pid, hosts := jia.Jiapid(), jia.Jiahosts()
	if flag.NArg() > 0 {
		jia.JiaError("dsmis: unexpected arguments %q", flag.Args())
	}
	cl := strings.ToUpper(*class)
	if len(cl) != 1 {
		jia.JiaError("dsmis: bad -class %q: want one of S, W, A, B, C", *class)
	}
	p, err := npb.ISParams(cl[0])
	if err != nil {
		jia.JiaError("dsmis: bad -class %q: %v", *class, err)
	}
	n := 1 << p.TotalKeysLog2
	l := newLayout(n, hosts, shmem.PageSize/4)
	r, err := newRanker(cl[0], pid, l)
	check(err)

	// The key arrays: rank r's block of each homed on rank r.
	keyArray := func() []int32 {
		return shmem.Slice[int32](jia.JiaAlloc3(hosts*l.per*4, l.per*4, 0))[:n:n]
	}
	rowBytes := (r.nb*4 + shmem.PageSize - 1) / shmem.PageSize * shmem.PageSize
	s := shared{keys: keyArray(), buff1: keyArray(), sorted: keyArray(), stride: rowBytes / 4}
	s.counts = shmem.Slice[int32](jia.JiaAlloc3(hosts*rowBytes, rowBytes, 0))
	slots := shmem.Slice[int64](jia.JiaAlloc2p(hosts*slotWords*8, 0))

	check(r.generate(s))
	jia.JiaBarrier()

	// One untimed ranking touches the code and the data, as NPB's does.
	ranking := func(it int) {
		r.bucket(s, it)
		jia.JiaBarrier()
		check(r.rank(s, it))
		jia.JiaBarrier()
	}
	ranking(1)
	r.passed = 0
	t0 := jia.JiaClock()
	for it := 1; it <= npb.ISIterations; it++ {
		ranking(it)
	}
	elapsed := jia.JiaClock() - t0

	r.sortKeys(s)
	jia.JiaBarrier()
	c := r.check(s)
	slot := slots[pid*slotWords : (pid+1)*slotWords]
	slot[sPassed], slot[sDescents] = r.passed, c.descents
	slot[sSum], slot[sSumSq], slot[sSortedSum], slot[sSortedSumSq] = c.sum, c.sumSq, c.sSum, c.sSumQ
	jia.JiaBarrier()

	verified := true
	if pid == 0 {
		var seq []int32
		if p.TotalKeysLog2 <= *seqLog2 {
			seq, err = sequentialSort(p, npb.ISIterations)
			check(err)
		}
		res := result(cl[0], p, hosts, elapsed, slots[:hosts*slotWords], s.sorted, seq)
		check(res.Report(os.Stdout))
		verified = res.Verified
	}
	check(jia.Finalize())
	if !verified {
		os.Exit(1)
	}
}

// result is NPB's result of class on ranks from the ranks' slots: NPB's
// partial verification (five test keys in each of the ten rankings) and
// full verification (every rank's block of the sorted keys in order), the
// sorted keys' sums against the keys', and, with seq, the sorted keys
// against seq, the keys sorted sequentially.
func result(class byte, p npb.ISClass, ranks int, seconds float64, slots []int64, sorted, seq []int32) npb.Result {
	n := int64(1) << p.TotalKeysLog2
	var passed, inOrder int64
	var sums [slotWords]int64
	for r := range ranks {
		s := slots[r*slotWords : (r+1)*slotWords]
		passed += s[sPassed]
		if s[sDescents] == 0 {
			inOrder++
		}
		for i, v := range s {
			sums[i] += v
		}
	}
	res := npb.Result{
		Kernel: "DSM IS", Class: class, Size: [3]int{int(n)}, Iterations: npb.ISIterations,
		Ranks: ranks, Time: seconds, Mops: float64(npb.ISIterations) * float64(n) / seconds / 1e6,
		OpType: "keys ranked",
		Checks: []npb.Check{
			npb.ExactCheck("partial verification", passed, npb.ISIterations*npb.ISTestKeys),
			npb.ExactCheck("full verification", inOrder, int64(ranks)),
			npb.ExactCheck("sum of sorted keys", sums[sSortedSum], sums[sSum]),
			npb.ExactCheck("sum of their squares", sums[sSortedSumSq], sums[sSumSq]),
		},
	}
	if seq != nil {
		var differ int64
		for i, k := range sorted[:n] {
			if k != seq[i] {
				differ++
			}
		}
		res.Checks = append(res.Checks, npb.ExactCheck("differ from sequential", differ, 0))
	}
	res.Verified = npb.AllOK(res.Checks)
	return res
}

// sequentialSort returns the keys of class p as they are after the
// alterations of rankings 1 to iterations, sorted, computed on this rank
// alone.
func sequentialSort(p npb.ISClass, iterations int) ([]int32, error) {
	keys := make([]int32, 1<<p.TotalKeysLog2)
	if err := npb.ISKeys(keys, 0, p.MaxKeyLog2); err != nil {
		return nil, err
	}
	for it := 1; it <= iterations; it++ {
		keys[it] = int32(it)
		keys[it+npb.ISIterations] = int32(1)<<p.MaxKeyLog2 - int32(it)
	}
	slices.Sort(keys)
	return keys, nil
}

func check(err error) {
	if err != nil {
		jia.JiaError("dsmis: %v", err)
	}
}
