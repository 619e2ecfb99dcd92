package npb

import (
	"fmt"
	"time"
)

// IS (Integer Sort), NPB3.4-MPI IS/is.c: ten rankings of 2^k integer keys
// by a bucketed counting sort. Keys are block-distributed; each rank jumps
// to its part of the one global random stream, so the key set does not
// depend on the number of ranks. Every ranking counts the local keys per
// bucket, agrees on bucket totals (Allreduce), gives each rank a contiguous
// range of buckets holding about N/np keys, moves the keys there (Alltoall
// of counts, Alltoallv of keys) and counts them. The buckets, the split and
// the messages between ranks are NPB-MPI's; the keys are grouped by
// destination rank (np write streams) rather than scattered into the
// buckets, and counted in the order they arrive. On two ranks one
// branch-free pass splits them in two, the keys that stay going straight
// to where they are ranked, so that the Alltoallv copies only the peer's
// (a data-dependent branch there would mispredict on every other key). On
// one rank they are counted where they are, with no scatter at all, which
// makes a class A ranking about 40% cheaper (the scatter into 1024 buckets
// was its most expensive loop). Unlike NPB-MPI, which needs a power of
// two, any number of ranks works: the only place np enters is the
// load-balancing threshold, and ranks may end up with no keys.

// RunIS runs IS class S, W, A, B or C on any number of ranks.
func RunIS(c Comm, class byte) (Result, error) {
	if err := CheckRanks("IS", class, c.Size()); err != nil {
		return Result{}, err
	}
	s := newISState(c, class)
	// One untimed ranking touches all data and code (NPB does the same).
	if err := s.rank(1); err != nil {
		return Result{}, err
	}
	s.passed = 0
	start := time.Now()
	for it := 1; it <= isMaxIterations; it++ {
		if err := s.rank(it); err != nil {
			return Result{}, err
		}
	}
	tm, err := maxTime(c, time.Since(start).Seconds())
	if err != nil {
		return Result{}, err
	}
	full, err := s.fullVerify()
	if err != nil {
		return Result{}, err
	}
	tot := []int64{s.passed, full}
	if err := c.AllreduceInt64(tot, tot, Sum); err != nil {
		return Result{}, err
	}
	n := int64(1) << s.p.totalKeysLog2
	res := Result{
		Kernel: "IS", Class: class, Size: [3]int{int(n)}, Iterations: isMaxIterations,
		Ranks: c.Size(), Time: tm, Mops: float64(isMaxIterations) * float64(n) / tm / 1e6,
		OpType: "keys ranked",
		Checks: []Check{
			exactCheck("partial verification", tot[0], isMaxIterations*isTestArraySize),
			exactCheck("full verification", tot[1], int64(c.Size())),
		},
	}
	res.Verified = allOK(res.Checks)
	return res, nil
}

type isState struct {
	c      Comm
	class  byte
	p      isParams
	size   int
	me     int
	lo, hi int64 // global indices of this rank's keys
	nb     int   // buckets
	shift  uint
	maxKey int32

	keys     []int32 // this rank's keys (key_array)
	buff1    []int32 // keys grouped by destination rank (key_buff1)
	buff2    []int32 // keys received for ranking (key_buff2)
	count    []int32 // key populations, then ranks, over this rank's key range
	bsize    []int64 // per-bucket counts, then the test keys (bucket_size)
	btotal   []int64 // their global sums (bucket_size_totals)
	bcnt     []int32 // per-bucket counts of this rank's keys
	bown     []int32 // the rank each bucket goes to
	rptr     []int   // write pointers into buff1, one per destination rank
	sendCnt  []int
	sendDisp []int
	recvCnt  []int
	recvDisp []int
	cnt32    []int32 // send counts for the Alltoall
	rcnt32   []int32
	ptr1     []int // first and last bucket of each rank
	ptr2     []int

	passed  int64 // partial verifications passed on this rank
	minKey  int32 // this rank's key range after the last ranking
	maxKeyV int32
	nRanked int // keys ranked on this rank in the last ranking
}

func newISState(c Comm, class byte) *isState {
	size, me := c.Size(), c.Rank()
	p := isClasses[class]
	n := int64(1) << p.totalKeysLog2
	s := &isState{
		c: c, class: class, p: p, size: size, me: me,
		lo: n * int64(me) / int64(size), hi: n * int64(me+1) / int64(size),
		nb: 1 << p.numBucketsLog2, shift: uint(p.maxKeyLog2 - p.numBucketsLog2),
		maxKey: int32(1) << p.maxKeyLog2,
	}
	nloc := int(s.hi - s.lo)
	s.keys = make([]int32, nloc)
	if size > 1 {
		s.buff1 = make([]int32, nloc)
		s.buff2 = make([]int32, nloc+nloc/2+1024)
	}
	s.count = make([]int32, s.maxKey)
	s.bsize = make([]int64, s.nb+isTestArraySize)
	s.btotal = make([]int64, s.nb+isTestArraySize)
	s.bcnt, s.bown, s.rptr = make([]int32, s.nb), make([]int32, s.nb), make([]int, size)
	s.sendCnt, s.sendDisp = make([]int, size), make([]int, size)
	s.recvCnt, s.recvDisp = make([]int, size), make([]int, size)
	s.cnt32, s.rcnt32 = make([]int32, size), make([]int32, size)
	s.ptr1, s.ptr2 = make([]int, size), make([]int, size)

	// create_seq: key = int(MAX_KEY/4 * (r1+r2+r3+r4)), this rank's part
	// of the stream starting 4*lo numbers in (find_my_seed).
	const a = uint64(Amult)
	x := skip(Seed, a, uint64(4*s.lo))
	k := float64(s.maxKey / 4)
	for i := range s.keys {
		x = (a * x) & mask46
		v := float64(x) * r46
		x = (a * x) & mask46
		v += float64(x) * r46
		x = (a * x) & mask46
		v += float64(x) * r46
		x = (a * x) & mask46
		v += float64(x) * r46
		s.keys[i] = int32(k * v)
	}
	return s
}

// rank is NPB's rank(iteration).
func (s *isState) rank(it int) error {
	nb, shift := s.nb, s.shift
	keys := s.keys
	// Iteration alteration of keys (global indices it and it+10).
	if g := int64(it); g >= s.lo && g < s.hi {
		keys[g-s.lo] = int32(it)
	}
	if g := int64(it + isMaxIterations); g >= s.lo && g < s.hi {
		keys[g-s.lo] = s.maxKey - int32(it)
	}

	bsize := s.bsize
	clear(bsize)
	// The test keys ride along in the bucket sums.
	for i, ti := range s.p.testIndex {
		if ti >= s.lo && ti < s.hi {
			bsize[nb+i] = int64(keys[ti-s.lo])
		}
	}
	bc := s.bcnt[:nb]
	clear(bc)
	for _, k := range keys {
		bc[k>>shift]++
	}
	bs := bsize[:nb]
	for i, n := range bc {
		bs[i] = int64(n)
	}

	if err := s.c.AllreduceInt64(bsize, s.btotal, Sum); err != nil {
		return err
	}
	bt := s.btotal[:nb]

	// Give each rank whole buckets until the running total passes
	// (j+1)*N/np keys (process_bucket_distrib_ptr1/2).
	n := int64(1) << s.p.totalKeysLog2
	size := int64(s.size)
	var sum, local int64
	j := 0
	s.sendDisp[0], s.ptr1[0] = 0, 0
	for i := 0; i < nb && j < s.size; i++ {
		sum += bt[i]
		local += bs[i]
		if sum >= (int64(j)+1)*n/size {
			s.sendCnt[j] = int(local)
			if j != 0 {
				s.sendDisp[j] = s.sendDisp[j-1] + s.sendCnt[j-1]
				s.ptr1[j] = s.ptr2[j-1] + 1
			}
			s.ptr2[j] = i
			j++
			local = 0
		}
	}
	for ; j < s.size; j++ { // ranks left without buckets
		s.sendCnt[j] = 0
		s.sendDisp[j] = s.sendDisp[j-1] + s.sendCnt[j-1]
		s.ptr1[j], s.ptr2[j] = 1, 0
	}

	total := s.sendCnt[0]
	if s.size == 1 {
		// Nothing to move: rank the keys where they are.
		s.buff2 = keys
	} else {
		var err error
		if total, err = s.exchange(keys); err != nil {
			return err
		}
	}

	// Rank the keys of this rank's bucket range.
	minKey := int32(s.ptr1[s.me]) << shift
	maxKeyV := int32(s.ptr2[s.me]+1)<<shift - 1
	var m int64 // keys on lower ranks
	for k := 0; k < s.me; k++ {
		for i := s.ptr1[k]; i <= s.ptr2[k]; i++ {
			m += bt[i]
		}
	}
	var nloc int64
	for i := s.ptr1[s.me]; i <= s.ptr2[s.me]; i++ {
		nloc += bt[i]
	}
	if nloc != int64(total) {
		return fmt.Errorf("npb: IS: rank %d received %d keys, bucket totals say %d", s.me, total, nloc)
	}
	var cnt []int32
	if maxKeyV >= minKey {
		cnt = s.count[:maxKeyV-minKey+1]
		clear(cnt)
		for _, k := range s.buff2[:total] {
			cnt[k-minKey]++
		}
		for i := 1; i < len(cnt); i++ {
			cnt[i] += cnt[i-1]
		}
	}

	// Partial verification: the rank of each test key (the number of
	// keys less than it) against NPB's expected value.
	for i := 0; i < isTestArraySize; i++ {
		k := int32(s.btotal[nb+i])
		if minKey <= k && k <= maxKeyV {
			r := m
			if k > minKey {
				r += int64(cnt[k-1-minKey])
			}
			if r == isExpectedRank(s.class, i, it, s.p.testRank[i]) {
				s.passed++
			}
		}
	}
	s.minKey, s.maxKeyV, s.nRanked = minKey, maxKeyV, total
	return nil
}

// exchange moves the keys to the ranks that own them (NPB's Alltoall of
// the counts and Alltoallv of the keys) and leaves this rank's keys in
// buff2. It returns how many there are.
func (s *isState) exchange(keys []int32) (int, error) {
	me := s.me
	for p, v := range s.sendCnt {
		s.cnt32[p] = int32(v)
	}
	if err := s.c.AlltoallInt32(s.cnt32, s.rcnt32); err != nil {
		return 0, err
	}
	total := 0
	for p, v := range s.rcnt32 {
		s.recvCnt[p], s.recvDisp[p] = int(v), total
		total += int(v)
	}
	if need := max(total, len(keys)); need > len(s.buff2) {
		s.buff2 = make([]int32, need+need/8) // rare: only on a skewed distribution
	}
	buff1 := s.buff1[:len(keys)]
	if s.size == 2 {
		// The keys that stay go straight to the front of buff2, the
		// others to buff1 for the peer; the peer's go after ours.
		peer := 1 - me
		own := s.sendCnt[me]
		minKey := int32(s.ptr1[me]) << s.shift
		nOwn := max(int(int32(s.ptr2[me]+1)<<s.shift-minKey), 0)
		a, b := isSplit2(keys, s.buff2, buff1, minKey, nOwn)
		if a != own || b != s.sendCnt[peer] {
			return 0, fmt.Errorf("npb: IS: rank %d keeps %d keys and sends %d, bucket counts say %d and %d", me, a, b, own, s.sendCnt[peer])
		}
		s.sendCnt[me], s.recvCnt[me] = 0, 0
		s.sendDisp[peer], s.recvDisp[peer] = 0, own
	} else {
		// Group the keys by destination rank (a few sequential write
		// streams, where NPB scatters them into nb buckets).
		nb, shift := s.nb, s.shift
		bown := s.bown[:nb]
		for i := range bown {
			bown[i] = int32(s.size - 1) // empty buckets past the last split
		}
		for p := 0; p < s.size; p++ {
			for i := s.ptr1[p]; i <= s.ptr2[p]; i++ {
				bown[i] = int32(p)
			}
		}
		rptr := s.rptr
		copy(rptr, s.sendDisp)
		for _, k := range keys {
			d := bown[k>>shift]
			buff1[rptr[d]] = k
			rptr[d]++
		}
	}
	if err := s.c.AlltoallvInt32(buff1, s.sendCnt, s.sendDisp, s.buff2, s.recvCnt, s.recvDisp); err != nil {
		return 0, err
	}
	return total, nil
}

// isSplit2 is the grouping loop for two ranks: it copies the keys k with
// minKey <= k < minKey+nOwn to the front of own and the others to the front
// of out, and returns how many of each. Every key is stored to both (the
// store that does not count is overwritten later or lies past the end), so
// that no branch depends on the random keys and both indices stay in
// registers. own and out must be at least as long as keys.
func isSplit2(keys, own, out []int32, minKey int32, nOwn int) (a, b int) {
	no := int64(nOwn)
	own, out = own[:len(keys)], out[:len(keys)]
	for _, k := range keys {
		o := int((int64(uint32(k-minKey))-no)>>63) + 1 // 1: k goes to the peer
		own[a] = k
		out[b] = k
		a += 1 - o
		b += o
	}
	return a, b
}

// fullVerify is NPB's full_verify: sort the keys of the last ranking by
// their ranks and check that they do not decrease, on this rank and across
// the boundary with the previous rank that holds keys. It returns 1 when
// this rank passes, 0 otherwise.
func (s *isState) fullVerify() (int64, error) {
	n := s.nRanked
	sorted := make([]int32, n)
	if n > 0 {
		cnt := s.count[:s.maxKeyV-s.minKey+1]
		for _, k := range s.buff2[:n] {
			cnt[k-s.minKey]--
			sorted[cnt[k-s.minKey]] = k
		}
	}
	bad := 0
	for i := 1; i < n; i++ {
		if sorted[i-1] > sorted[i] {
			bad++
		}
	}
	last := make([]int64, s.size) // each rank's largest key, -1 if none
	for i := range last {
		last[i] = -1
	}
	if n > 0 {
		last[s.me] = int64(sorted[n-1])
	}
	if err := s.c.AllreduceInt64(last, last, Max); err != nil {
		return 0, err
	}
	if n > 0 {
		for p := s.me - 1; p >= 0; p-- {
			if last[p] >= 0 {
				if last[p] > int64(sorted[0]) {
					bad++
				}
				break
			}
		}
	}
	if bad != 0 {
		return 0, nil
	}
	return 1, nil
}
