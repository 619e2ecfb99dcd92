package npb

import "fmt"

// The pieces of EP and IS that their DSM versions (apps/dsmep, apps/dsmis)
// share with the message-passing kernels: problem sizes, reference values,
// the random streams and the verification checks. The DSM versions move
// data through shared memory instead of a Comm, so they take these pieces
// rather than RunEP or RunIS.

// EPAnnuli is the number of square annuli EP counts Gaussian pairs in.
const EPAnnuli = epNQ

// EPBatchLog2 is the log2 of EP's batch size: a batch is 2^16 pairs.
const EPBatchLog2 = epMK

// EPEpsilon is the relative tolerance of EP's verification.
const EPEpsilon = epEps

// EPClass is EP's problem for one class.
type EPClass struct {
	M      int     // 2^M pairs are attempted, in 2^(M-EPBatchLog2) batches
	SX, SY float64 // NPB's reference sums
}

// Batches returns the number of batches of the class.
func (p EPClass) Batches() int { return 1 << (p.M - epMK) }

// EPParams returns EP's problem size and reference sums for class S, W, A,
// B or C.
func EPParams(class byte) (EPClass, error) {
	if err := checkClass("EP", class); err != nil {
		return EPClass{}, err
	}
	p := epClasses[class]
	return EPClass{M: p.m, SX: p.sx, SY: p.sy}, nil
}

// EPBatches runs EP's batches [first, first+n) of the one global stream
// and returns the sums of their Gaussian deviates and their annulus
// counts, computed exactly as RunEP computes them.
func EPBatches(first, n int) (sx, sy float64, q [EPAnnuli]float64) {
	an := PowMod46(Amult, 2*epNK) // a^(2*nk): one batch ahead
	buf := new(epBuf)
	for k := first; k < first+n; k++ {
		seed := (PowMod46(an, uint64(k)) * SeedEP) & mask46
		sx, sy = epBatch(seed, &q, sx, sy, buf)
	}
	return sx, sy, q
}

// ISIterations is the number of timed rankings of IS.
const ISIterations = isMaxIterations

// ISTestKeys is the number of test keys of IS's partial verification.
const ISTestKeys = isTestArraySize

// ISClass is IS's problem for one class.
type ISClass struct {
	TotalKeysLog2  int               // 2^TotalKeysLog2 keys
	MaxKeyLog2     int               // in [0, 2^MaxKeyLog2)
	NumBucketsLog2 int               // 2^NumBucketsLog2 buckets
	TestIndex      [ISTestKeys]int64 // global indices of the test keys
	TestRank       [ISTestKeys]int64 // their ranks before the iteration shifts
}

// ISParams returns IS's problem size and partial-verification data for
// class S, W, A, B or C.
func ISParams(class byte) (ISClass, error) {
	if err := checkClass("IS", class); err != nil {
		return ISClass{}, err
	}
	p := isClasses[class]
	return ISClass{
		TotalKeysLog2: p.totalKeysLog2, MaxKeyLog2: p.maxKeyLog2, NumBucketsLog2: p.numBucketsLog2,
		TestIndex: p.testIndex, TestRank: p.testRank,
	}, nil
}

// ISExpectedRank returns the rank test key j (0-based) must have in
// ranking it (1 to ISIterations) of class, as IS's partial verification
// expects; testRank is the class's TestRank[j].
func ISExpectedRank(class byte, j, it int, testRank int64) int64 {
	return isExpectedRank(class, j, it, testRank)
}

// ISKeys fills dst with IS's keys of global indices lo, lo+1, …,
// lo+len(dst)-1 for keys in [0, 2^maxKeyLog2): NPB's create_seq, jumping
// ahead to index lo in the one global stream, so the keys do not depend on
// how they are split among ranks.
func ISKeys(dst []int32, lo int64, maxKeyLog2 int) error {
	if lo < 0 || maxKeyLog2 < 2 || maxKeyLog2 > 30 {
		return fmt.Errorf("npb: IS keys from index %d below 2^%d: want index ≥ 0 and 2 ≤ log2 ≤ 30", lo, maxKeyLog2)
	}
	const a = uint64(Amult)
	x := skip(Seed, a, uint64(4*lo))
	k := float64(int32(1) << maxKeyLog2 / 4)
	for i := range dst {
		x = (a * x) & mask46
		v := float64(x) * r46
		x = (a * x) & mask46
		v += float64(x) * r46
		x = (a * x) & mask46
		v += float64(x) * r46
		x = (a * x) & mask46
		v += float64(x) * r46
		dst[i] = int32(k * v)
	}
	return nil
}

// RelCheck returns a Check that passes when the relative error of value
// against ref is at most eps; NaN fails, as in NPB.
func RelCheck(name string, value, ref complex128, eps float64) Check {
	return relCheck(name, value, ref, eps)
}

// ExactCheck returns a Check on a count that must equal ref exactly.
func ExactCheck(name string, value, ref int64) Check { return exactCheck(name, value, ref) }

// AllOK reports whether there is at least one check and every check passed.
func AllOK(cs []Check) bool { return allOK(cs) }
