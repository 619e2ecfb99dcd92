package npb

import (
	"math"
	"time"
)

// EP (Embarrassingly Parallel), NPB3.4-MPI EP/ep.f: 2^M pairs of uniform
// random numbers, Gaussian pairs by the Marsaglia polar method, their sums
// and their counts in ten square annuli. The 2^(M-16) batches of 2^16 pairs
// are block-distributed over the ranks; each batch starts its part of the
// one global stream by jumping ahead, so the numbers do not depend on the
// number of ranks.

const (
	epMK = 16      // log2 of the batch size
	epNK = 1 << 16 // pairs per batch
	epNQ = 10      // annuli
)

// epCounts are the Gaussian pair counts EP computes but NPB does not verify.
type epCounts struct {
	gc float64       // Gaussian pairs accepted
	q  [epNQ]float64 // pairs per annulus
}

// RunEP runs EP class S, W, A, B or C on any number of ranks.
func RunEP(c Comm, class byte) (Result, error) {
	r, _, err := runEP(c, class)
	return r, err
}

func runEP(c Comm, class byte) (Result, epCounts, error) {
	var cnt epCounts
	if err := CheckRanks("EP", class, c.Size()); err != nil {
		return Result{}, cnt, err
	}
	p := epClasses[class]
	size, me := c.Size(), c.Rank()

	// Batches per rank: the first nn%size ranks get one more (EP/ep.f).
	nn := 1 << (p.m - epMK)
	np := nn / size
	large := nn % size
	var first int
	if me < large {
		np++
		first = me * np
	} else {
		first = large*(np+1) + (me-large)*np
	}
	an := PowMod46(Amult, 2*epNK) // a^(2*nk): one batch ahead
	red := make([]float64, 2+epNQ)
	buf := new(epBuf)

	if err := c.Barrier(); err != nil {
		return Result{}, cnt, err
	}
	start := time.Now()

	var sx, sy float64
	var q [epNQ]float64
	for k := 0; k < np; k++ {
		seed := (PowMod46(an, uint64(first+k)) * SeedEP) & mask46
		sx, sy = epBatch(seed, &q, sx, sy, buf)
	}
	red[0], red[1] = sx, sy
	copy(red[2:], q[:])
	if err := c.AllreduceFloat64(red, red, Sum); err != nil {
		return Result{}, cnt, err
	}
	sx, sy = red[0], red[1]
	copy(cnt.q[:], red[2:])
	for _, v := range cnt.q {
		cnt.gc += v
	}

	tm, err := maxTime(c, time.Since(start).Seconds())
	if err != nil {
		return Result{}, cnt, err
	}
	res := Result{
		Kernel: "EP", Class: class, Size: [3]int{1 << (p.m + 1)}, Ranks: size,
		Time: tm, OpType: "Random numbers generated",
		Checks: []Check{
			relCheck("sx (sum of X)", complex(sx, 0), complex(p.sx, 0), epEps),
			relCheck("sy (sum of Y)", complex(sy, 0), complex(p.sy, 0), epEps),
		},
	}
	res.Mops = math.Ldexp(1, p.m+1) / tm / 1e6
	res.Verified = allOK(res.Checks)
	return res, cnt, nil
}

// epBatch runs one batch of nk pairs whose stream starts after seed, adding
// to the sums and the annulus counts. It computes what EP/ep.f's vranlc and
// acceptance loop compute, in the same order, but in chunks that stay in L1:
// first the chunk's pairs are drawn (the odd and even numbers of the stream
// advanced as two independent chains, steps of a^2) and the accepted ones
// kept, without a branch; then the accepted pairs go through log and sqrt.
// Branches at the end of the log/sqrt chain would mispredict and cost the
// chain's whole latency each time. The annulus counts are integers in four
// banks, so that runs of pairs in the same annulus do not wait for one
// another's increments; they are exact and added to q at the end.
func epBatch(seed uint64, q *[epNQ]float64, sx, sy float64, buf *epBuf) (float64, float64) {
	const a = uint64(Amult)
	a2 := (a * a) & mask46
	x0 := (a * seed) & mask46 // x(2i-1)
	x1 := (a * x0) & mask46   // x(2i)
	var qc [4][epNQ]uint32    // at most epNK per batch
	for chunk := 0; chunk < epNK; chunk += epChunk {
		k := 0
		for i := 0; i < epChunk; i++ {
			u1 := 2*(float64(x0)*r46) - 1
			u2 := 2*(float64(x1)*r46) - 1
			x0 = (a2 * x0) & mask46
			x1 = (a2 * x1) & mask46
			buf.u1[k&(epChunk-1)] = u1
			buf.u2[k&(epChunk-1)] = u2
			inc := 0
			if u1*u1+u2*u2 <= 1 {
				inc = 1
			}
			k += inc
		}
		b1, b2 := buf.u1[:k], buf.u2[:k]
		for i, u1 := range b1 {
			u2 := b2[i]
			t := u1*u1 + u2*u2
			f := math.Sqrt(-2 * epLog(t) / t)
			t3 := u1 * f
			t4 := u2 * f
			qc[i&3][int(max(math.Abs(t3), math.Abs(t4)))]++
			sx += t3
			sy += t4
		}
	}
	for l := range q {
		q[l] += float64(qc[0][l] + qc[1][l] + qc[2][l] + qc[3][l])
	}
	return sx, sy
}

// epChunk pairs are drawn at a time (a power of two dividing epNK).
const epChunk = 2048

type epBuf struct{ u1, u2 [epChunk]float64 }
