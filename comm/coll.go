package comm

import (
	"errors"
	"math/bits"

	"github.com/jiarun/jia/comm/proto"
)

// Collectives are built on point-to-point messages in the communicator's
// second context (2·id+1), so they never match user receives. Each
// collective uses its own tag, and every receive names its source, so the
// traffic of consecutive collectives cannot be confused. Every receive
// expects an exact length: a rank that passes a different count than its
// peers gets ErrCount ("mismatched collective arguments") where the
// mismatch shows up in a message.

const (
	tagBarrier = iota + 1
	tagBcast
	tagReduce
	tagAllreduce
	tagGather
	tagScatter
	tagAllgather
	tagAlltoall
	tagRedScat
	tagScan
	tagExscan
)

// algo names a collective algorithm.
type algo uint8

const (
	algAuto algo = iota
	algBinomial
	algScatterRing    // Bcast: binomial scatter + ring allgather
	algRecDoubling    // Allreduce, Allgather
	algRabenseifner   // Reduce, Allreduce: reduce-scatter by recursive halving + gather/allgather
	algRing           // Allreduce, Allgather
	algBruck          // Allgather, Alltoall
	algLinear         // Gather, Scatter, Bcast
	algScattered      // Alltoall: every send and receive posted at once
	algPairwise       // Alltoall, ReduceScatter
	algReduceScatterv // ReduceScatter: Reduce then Scatterv (non-commutative)
	algHier           // Barrier, Bcast, Reduce, Allreduce: within each host, then between hosts
	algDirect         // Allreduce: reduce-scatter and allgather, every message of each posted at once
	algGatherAll      // Allreduce: every vector to every rank at once, each combines all in rank order
)

type collKind uint8

const (
	kBcast collKind = iota
	kReduce
	kAllreduce
	kAllgather
	kAlltoall
	kGather
	kScatter
	kReduceScatter
	kBarrier
	numCollKinds
)

// tuning holds the thresholds (bytes) that choose algorithms, after MPICH's
// defaults, and forced choices for tests.
type tuning struct {
	bcastShort      int // below: binomial tree
	bcastMinRanks   int // fewer ranks: binomial tree
	bcastLinRanks   int // up to, all on one host, above bcastLinAbove: linear
	bcastLinAbove   int
	bcastChunkMax   int // linear, up to (half of it with 2 ranks): in eager chunks of bcastChunk
	bcastChunk      int
	reduceShort     int // up to: binomial tree
	allreduceShort  int // up to: recursive doubling
	allreduceRing   int // from (non-power-of-two rank counts): ring
	allreduceRingA  int // from (more than allreduceFew ranks): ring
	allreduceFew    int // up to this many ranks (above 2): up to allreduceShort bytes gather-all, up to allreduceDirect direct, never the ring on a power of two
	allreduceDirect int
	allgatherShort  int // total below, non-power-of-two: Bruck
	allgatherLong   int // total below, power of two: recursive doubling
	gatherShort     int // total up to: binomial tree
	alltoallShort   int // block up to, with ≥ alltoallMinRanks: Bruck
	alltoallMinRks  int
	alltoallMedium  int // block up to: all posted at once; above: pairwise
	alltoallFew     int // up to this many ranks: all posted at once, any block
	force           [numCollKinds]algo
}

var defaultTuning = tuning{
	bcastShort:      12 << 10,
	bcastMinRanks:   8,
	bcastLinRanks:   4,
	bcastLinAbove:   16 << 10,
	bcastChunkMax:   64 << 10,
	bcastChunk:      16 << 10,
	reduceShort:     2 << 10,
	allreduceShort:  2 << 10,
	allreduceRing:   512 << 10,
	allreduceRingA:  2 << 20,
	allreduceFew:    4,
	allreduceDirect: 64 << 10,
	allgatherShort:  80 << 10,
	allgatherLong:   512 << 10,
	gatherShort:     64 << 10,
	alltoallShort:   256,
	alltoallMinRks:  8,
	alltoallMedium:  32 << 10,
	alltoallFew:     4,
}

func isPow2(n int) bool { return n&(n-1) == 0 }

// floorPow2 returns the largest power of two ≤ n (n ≥ 1).
func floorPow2(n int) int { return 1 << (bits.Len(uint(n)) - 1) }

// blockOff returns the element offset of part i when count elements are
// cut into parts nearly equal parts (the first count%parts one larger).
func blockOff(count, parts, i int) int {
	q, m := count/parts, count%parts
	return i*q + min(i, m)
}

// blocks is a vector of count elements of es bytes cut into parts nearly
// equal blocks (see blockOff).
type blocks struct{ count, parts, es int }

// cut returns b, a vector of elements of es bytes, cut into parts blocks.
func cut(b []byte, es, parts int) blocks { return blocks{len(b) / es, parts, es} }

// off returns the byte offset of block i.
func (b blocks) off(i int) int { return blockOff(b.count, b.parts, i) * b.es }

// Point-to-point steps in the collective context.

func (c *Comm) csend(call string, b []byte, dst, tag int) error {
	return c.send(call, proto.Contig(b), c.cctx(), dst, tag)
}

func (c *Comm) checkLen(call string, st Status, want, src, tag int, err error) error {
	if err != nil {
		if errors.Is(err, ErrTruncate) {
			return c.errorf(call, src, tag, ErrCount, "mismatched collective arguments: rank %d sent more than the %d bytes expected", src, want)
		}
		return err
	}
	if st.Bytes != want {
		return c.errorf(call, src, tag, ErrCount, "mismatched collective arguments: expected %d bytes from rank %d, got %d", want, src, st.Bytes)
	}
	return nil
}

func (c *Comm) crecv(call string, b []byte, src, tag int) error {
	st, err := c.recv(call, proto.Contig(b), 1, c.cctx(), src, tag)
	return c.checkLen(call, st, len(b), src, tag, err)
}

// cexch sends sb to dst and receives rb from src at the same time
// (sendrecv), in the collective context.
func (c *Comm) cexch(call string, sb []byte, dst int, rb []byte, src, tag int) error {
	st, serr, rerr := c.sendrecv(call, sb, c.cctx(), dst, tag, rb, 1, src, tag)
	if serr != nil {
		return serr
	}
	return c.checkLen(call, st, len(rb), src, tag, rerr)
}

// waitReqs waits for internal requests and checks receive lengths.
func (c *Comm) waitReqs(call string, rs []*request, want []int, tag int) error {
	var first error
	for i, r := range rs {
		if r == nil {
			continue
		}
		src := int(r.op.Peer)
		st, err := waitRecv(r, nil)
		if r.op.Kind == proto.OpSend || want == nil || want[i] < 0 {
			if err != nil && first == nil {
				first = err
			}
			continue
		}
		if err := c.checkLen(call, st, want[i], src, tag, err); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *Comm) force(k collKind) algo { return c.tune.force[k] }

// Barrier blocks until every rank of c has called it (MPI_Barrier). It
// uses the dissemination algorithm: ⌈log₂ n⌉ rounds of zero-byte messages.
func (c *Comm) Barrier() error {
	if err := c.check("Barrier"); err != nil {
		return err
	}
	if c.useHier(kBarrier) {
		return c.barrierHier()
	}
	n, r := c.size, c.rank
	for k := 1; k < n; k <<= 1 {
		if err := c.cexch("Barrier", nil, (r+k)%n, nil, (r-k+n)%n, tagBarrier); err != nil {
			return err
		}
	}
	return nil
}

func (c *Comm) checkRoot(call string, root int) error {
	if err := c.check(call); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return c.errorf(call, root, noTag, ErrRoot, "communicator has %d ranks", c.size)
	}
	return nil
}

// Bcast sends buf of rank root to buf of every other rank (MPI_Bcast).
// Small messages, or fewer than 8 ranks, go down a binomial tree; large
// ones are scattered down the tree and gathered around a ring (van de
// Geijn). Up to 4 ranks on one host, messages past 16 KiB go from the root
// to every rank at once.
func Bcast[T Elem](c *Comm, buf []T, root int) error {
	if err := c.checkRoot("Bcast", root); err != nil {
		return err
	}
	return c.bcast(asBytes(buf), elemSize[T](), root)
}

// bcast is Bcast on bytes; es is the element size.
func (c *Comm) bcast(b []byte, es, root int) error {
	if c.size == 1 || len(b) == 0 {
		return nil
	}
	if c.useHier(kBcast) {
		return c.bcastHier(b, es, root)
	}
	alg := c.force(kBcast)
	if alg == algAuto {
		alg = algScatterRing
		switch {
		case c.size <= c.tune.bcastLinRanks && len(b) > c.tune.bcastLinAbove && c.oneHost():
			alg = algLinear
		case len(b) < c.tune.bcastShort || c.size < c.tune.bcastMinRanks:
			alg = algBinomial
		}
	}
	switch alg {
	case algScatterRing:
		return c.bcastScatterRing(b, es, root)
	case algLinear:
		return c.bcastLinear(b, root)
	}
	return c.bcastBinomial(b, root)
}

// bcastLinear: the root sends to every other rank at once. With a few
// ranks on one host it beats a tree for messages past the eager limit:
// every receiver reads the root's buffer itself (a one-sided rendezvous),
// all at the same time, where a tree makes the lower levels wait for the
// upper ones, and when the ranks outnumber the processors each level of
// the tree costs the scheduler a round. A message of a few eager limits
// goes in chunks of the eager limit, each to every rank in turn: the root
// copies it out and goes on while the receivers copy it in, with no
// rendezvous to wait for. (An eager send's wait waits for the receiver
// when the transport has no room: proc.drain.) With two or three receivers
// that holds up to bcastChunkMax (4 ranks on 2 processors, 64 KiB: 41–48
// → 20–40 µs; at 128 KiB chunks lost, 52 → 81); with one, the chunks only
// save a rendezvous round trip, which a single-copy READ of a larger
// message repays, so it stops at half.
func (c *Comm) bcastLinear(b []byte, root int) error {
	const call = "Bcast"
	chunkMax := c.tune.bcastChunkMax
	if c.size == 2 {
		chunkMax /= 2
	}
	if ch := c.tune.bcastChunk; len(b) <= chunkMax && ch > 0 {
		for off := 0; off < len(b); off += ch {
			part := b[off:min(off+ch, len(b))]
			if c.rank != root {
				if err := c.crecv(call, part, root, tagBcast); err != nil {
					return err
				}
				continue
			}
			for i := 1; i < c.size; i++ {
				if err := c.csend(call, part, (root+i)%c.size, tagBcast); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if c.rank != root {
		return c.crecv(call, b, root, tagBcast)
	}
	var rs [maxLinearBcast]*request
	k := 0
	var first error
	for i := 1; i < c.size && first == nil; i++ {
		j := (root + i) % c.size
		if k == len(rs) {
			first = c.csend(call, b, j, tagBcast)
			continue
		}
		sr, err := c.isend(call, proto.Contig(b), c.cctx(), j, tagBcast)
		if err != nil {
			first = err
			break
		}
		rs[k] = sr
		k++
	}
	// Posted sends complete before an error returns: they read b.
	if err := c.waitReqs(call, rs[:k], nil, tagBcast); err != nil && first == nil {
		first = err
	}
	return first
}

// maxLinearBcast bounds the sends bcastLinear keeps in flight at once
// (further ones wait in turn).
const maxLinearBcast = 8

// oneHost reports that every rank of c runs on one host, or that no host
// information was given.
func (c *Comm) oneHost() bool {
	host := c.p.host
	if host == nil {
		return true
	}
	h := host[c.WorldRank(0)]
	for r := 1; r < c.size; r++ {
		if host[c.WorldRank(r)] != h {
			return false
		}
	}
	return true
}

func (c *Comm) bcastBinomial(b []byte, root int) error {
	n, r := c.size, c.rank
	rel := (r - root + n) % n
	mask := 1
	for mask < n {
		if rel&mask != 0 {
			if err := c.crecv("Bcast", b, (r-mask+n)%n, tagBcast); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			if err := c.csend("Bcast", b, (r+mask)%n, tagBcast); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Comm) bcastScatterRing(b []byte, es, root int) error {
	n, r := c.size, c.rank
	nb := len(b)
	rel := (r - root + n) % n
	cs := (nb/es + n - 1) / n * es // chunk size: whole elements
	lo := func(j int) int { return min(j*cs, nb) }
	// Scatter: rank rel gets the chunks of its subtree [rel, rel+mask).
	mask := 1
	for mask < n {
		if rel&mask != 0 {
			if l, h := lo(rel), lo(rel+mask); h > l {
				if err := c.crecv("Bcast", b[l:h], (r-mask+n)%n, tagBcast); err != nil {
					return err
				}
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			if l, h := lo(rel+mask), lo(rel+2*mask); h > l {
				if err := c.csend("Bcast", b[l:h], (r+mask)%n, tagBcast); err != nil {
					return err
				}
			}
		}
	}
	// Ring allgather of the chunks.
	left, right := (r-1+n)%n, (r+1)%n
	for i := 0; i < n-1; i++ {
		sj, rj := (rel-i+n)%n, (rel-i-1+n)%n
		if err := c.cexch("Bcast", b[lo(sj):lo(sj+1)], right, b[lo(rj):lo(rj+1)], left, tagBcast); err != nil {
			return err
		}
	}
	return nil
}

// Reduce combines send of every rank with op into recv of rank root
// (MPI_Reduce); recv is ignored elsewhere (and may be nil). send and recv
// may be the same slice. Small messages and non-commutative operations use
// a binomial tree; large ones reduce-scatter by recursive halving and
// gather the pieces at the root (Rabenseifner).
func Reduce[T Elem](c *Comm, send, recv []T, op Op, root int) error {
	if err := c.checkRoot("Reduce", root); err != nil {
		return err
	}
	red, err := reducerFor[T](op)
	if err != nil {
		return c.errorf("Reduce", noPeer, noTag, err, "")
	}
	if c.rank == root && len(recv) != len(send) {
		return c.errorf("Reduce", noPeer, noTag, ErrCount, "send has %d elements, recv %d", len(send), len(recv))
	}
	sb, rb := asBytes(send), asBytes(recv)
	if len(sb) == 0 {
		return nil
	}
	if c.size == 1 {
		copy(rb, sb)
		return nil
	}
	return c.reduce(sb, rb, red, root, len(send))
}

// reduce is Reduce on bytes of count elements, on two or more ranks.
func (c *Comm) reduce(sb, rb []byte, red reducer, root, count int) error {
	if c.size == 1 {
		copy(rb, sb)
		return nil
	}
	if red.commute && c.useHier(kReduce) {
		return c.reduceHier(sb, rb, red, root, count)
	}
	alg := c.force(kReduce)
	if alg == algAuto {
		alg = algBinomial
		if len(sb) > c.tune.reduceShort && red.commute && count >= floorPow2(c.size) {
			alg = algRabenseifner
		}
	}
	if alg == algRabenseifner && red.commute && count >= floorPow2(c.size) {
		return c.reduceRabenseifner(sb, rb, red, root)
	}
	return c.reduceBinomial(sb, rb, red, root)
}

func (c *Comm) reduceBinomial(sb, rb []byte, red reducer, root int) error {
	const call = "Reduce"
	n, r := c.size, c.rank
	acc := c.scratchBuf(0, len(sb))
	copy(acc, sb)
	tmp := c.scratchBuf(1, len(sb))
	// Non-commutative: reduce at rank 0 in rank order, then move the
	// result to the root.
	lroot := root
	if !red.commute {
		lroot = 0
	}
	rel := (r - lroot + n) % n
	for mask := 1; mask < n; mask <<= 1 {
		if rel&mask == 0 {
			if srel := rel | mask; srel < n {
				if err := c.crecv(call, tmp, (srel+lroot)%n, tagReduce); err != nil {
					return err
				}
				red.fn(acc, tmp) // tmp = acc ⊕ tmp: lower ranks first
				acc, tmp = tmp, acc
			}
		} else {
			if err := c.csend(call, acc, ((rel&^mask)+lroot)%n, tagReduce); err != nil {
				return err
			}
			break
		}
	}
	if lroot != root {
		if r == lroot {
			return c.csend(call, acc, root, tagReduce)
		}
		if r == root {
			return c.crecv(call, rb, lroot, tagReduce)
		}
		return nil
	}
	if r == root {
		copy(rb, acc)
	}
	return nil
}

// preStep folds the ranks beyond the largest power of two into their
// neighbours (MPICH): among the first 2·rem ranks, each even rank sends acc
// to the odd one above it, which combines it (lower first). It returns the
// rank's index among the pof2 remaining ranks, or -1.
func (c *Comm) preStep(call string, acc, tmp []byte, red reducer, pof2, tag int) (int, error) {
	r, rem := c.rank, c.size-pof2
	if r >= 2*rem {
		return r - rem, nil
	}
	if r%2 == 0 {
		return -1, c.csend(call, acc, r+1, tag)
	}
	if err := c.crecv(call, tmp, r-1, tag); err != nil {
		return -1, err
	}
	red.fn(tmp, acc)
	return r / 2, nil
}

// realRank maps an index among the pof2 ranks of preStep back to a rank.
func realRank(newrank, rem int) int {
	if newrank < rem {
		return 2*newrank + 1
	}
	return newrank + rem
}

// halving runs the reduce-scatter of Rabenseifner's algorithm over acc
// (count elements) among the pof2 ranks: afterwards newrank holds the fully
// reduced block range [send, last) of pof2 nearly equal blocks. It returns
// the state the matching allgather needs. src, when not nil, holds the
// rank's contribution instead of acc: the first step sends from it,
// receives the peer's half of the block range it keeps straight into acc
// and combines src's half into it there (no copy of src into acc, no
// staging of the received half in tmp).
func (c *Comm) halving(call string, acc, src, tmp []byte, red reducer, newrank, pof2, tag int) (sendIdx, lastIdx int, err error) {
	es, rem := red.elem, c.size-pof2
	count := len(acc) / es
	off := blocks{count, pof2, es}.off
	recvIdx := 0
	lastIdx = pof2
	for mask := 1; mask < pof2; mask <<= 1 {
		newdst := newrank ^ mask
		var sLo, sHi, rLo, rHi int
		if newrank < newdst {
			sendIdx = recvIdx + pof2/(mask*2)
			sLo, sHi, rLo, rHi = sendIdx, lastIdx, recvIdx, sendIdx
		} else {
			recvIdx = sendIdx + pof2/(mask*2)
			sLo, sHi, rLo, rHi = sendIdx, recvIdx, recvIdx, lastIdx
		}
		rt, from := tmp[off(rLo):off(rHi)], acc
		if src != nil {
			// The peer's half goes straight into acc and src's is
			// combined into it there: the combination writes lines
			// the receive has just written, where reading a staging
			// buffer and writing acc moved twice the memory (a 1 MiB
			// Allreduce on two ranks took 1.4 times as long).
			rt, from = acc[off(rLo):off(rHi)], src
		}
		if err := c.cexch(call, from[off(sLo):off(sHi)], realRank(newdst, rem), rt, realRank(newdst, rem), tag); err != nil {
			return 0, 0, err
		}
		if src != nil {
			red.fn(src[off(rLo):off(rHi)], rt)
			src = nil
		} else {
			red.fn(rt, acc[off(rLo):off(rHi)])
		}
		sendIdx = recvIdx
		if mask*2 < pof2 {
			lastIdx = recvIdx + pof2/(mask*2)
		}
	}
	return sendIdx, lastIdx, nil
}

// ownedBlock returns the block newrank holds after halving.
func ownedBlock(newrank, pof2 int) int {
	sendIdx, recvIdx, lastIdx := 0, 0, pof2
	for mask := 1; mask < pof2; mask <<= 1 {
		if newrank < newrank^mask {
			sendIdx = recvIdx + pof2/(mask*2)
		} else {
			recvIdx = sendIdx + pof2/(mask*2)
		}
		sendIdx = recvIdx
		if mask*2 < pof2 {
			lastIdx = recvIdx + pof2/(mask*2)
		}
	}
	_ = lastIdx
	return sendIdx
}

func (c *Comm) reduceRabenseifner(sb, rb []byte, red reducer, root int) error {
	const call = "Reduce"
	n, r := c.size, c.rank
	pof2 := floorPow2(n)
	rem := n - pof2
	es := red.elem
	count := len(sb) / es
	acc := c.scratchBuf(0, len(sb))
	src := sb // on a power of two, halving's first step reads sb itself
	if rem > 0 {
		copy(acc, sb)
		src = nil
	}
	tmp := c.scratchBuf(1, len(sb))
	newrank, err := c.preStep(call, acc, tmp, red, pof2, tagReduce)
	if err != nil {
		return err
	}
	off := blocks{count, pof2, es}.off
	if newrank >= 0 {
		if _, _, err := c.halving(call, acc, src, tmp, red, newrank, pof2, tagReduce); err != nil {
			return err
		}
	}
	// Every block goes straight to the root.
	if r != root {
		if newrank >= 0 {
			b := ownedBlock(newrank, pof2)
			return c.csend(call, acc[off(b):off(b+1)], root, tagReduce)
		}
		return nil
	}
	rs := make([]*request, pof2)
	want := make([]int, pof2)
	for q := 0; q < pof2; q++ {
		b := ownedBlock(q, pof2)
		src := realRank(q, rem)
		if src == r {
			copy(rb[off(b):off(b+1)], acc[off(b):off(b+1)])
			continue
		}
		rr, err := c.irecv(call, proto.Contig(rb[off(b):off(b+1)]), 1, c.cctx(), src, tagReduce)
		if err != nil {
			return err
		}
		rs[q], want[q] = rr, off(b+1)-off(b)
	}
	return c.waitReqs(call, rs, want, tagReduce)
}

// Allreduce combines send of every rank with op into recv of every rank
// (MPI_Allreduce). send and recv may be the same slice. Small messages and
// non-commutative operations use recursive doubling; large ones
// Rabenseifner's reduce-scatter + allgather, or a ring for very large
// messages (from 512 KiB on non-power-of-two rank counts, from 2 MiB on
// more than four ranks). Every rank gets bit-identical results.
func Allreduce[T Elem](c *Comm, send, recv []T, op Op) error {
	if err := c.check("Allreduce"); err != nil {
		return err
	}
	red, err := reducerFor[T](op)
	if err != nil {
		return c.errorf("Allreduce", noPeer, noTag, err, "")
	}
	if len(recv) != len(send) {
		return c.errorf("Allreduce", noPeer, noTag, ErrCount, "send has %d elements, recv %d", len(send), len(recv))
	}
	rb, sb := asBytes(recv), asBytes(send)
	if c.size > 1 && len(rb) > 0 && !(red.commute && c.useHier(kAllreduce)) {
		// Flat. Out of place, the algorithms that can read send where
		// they first need it receive straight into recv, instead of
		// copying send into recv first.
		alg, src := c.allreduceAlg(rb, red, len(send)), sb
		if overlaps(rb, sb) || !(alg == algRing || alg == algRabenseifner && isPow2(c.size)) {
			copy(rb, sb)
			src = nil
		}
		return c.allreduceRun(alg, rb, src, red)
	}
	copy(rb, sb)
	if c.size == 1 || len(rb) == 0 {
		return nil
	}
	return c.allreduce(rb, red, len(send))
}

// allreduce is Allreduce in place: within each host first where that
// applies (allreduceHier), else flat.
func (c *Comm) allreduce(rb []byte, red reducer, count int) error {
	if c.size == 1 {
		return nil
	}
	if red.commute && c.useHier(kAllreduce) {
		return c.allreduceHier(rb, red, count)
	}
	return c.allreduceFlat(rb, red, count)
}

// allreduceFlat is Allreduce in place over all ranks of c as peers.
func (c *Comm) allreduceFlat(rb []byte, red reducer, count int) error {
	return c.allreduceRun(c.allreduceAlg(rb, red, count), rb, nil, red)
}

// allreduceRun runs algorithm alg (allreduceAlg's choice) over all ranks
// of c as peers: in place on rb, or, with src not nil (the ring, or
// Rabenseifner's algorithm on a power of two), src into rb.
func (c *Comm) allreduceRun(alg algo, rb, src []byte, red reducer) error {
	switch alg {
	case algRing:
		return c.allreduceRing(rb, src, red)
	case algDirect:
		return c.allreduceDirect(rb, red)
	case algGatherAll:
		return c.allreduceGatherAll(rb, red)
	case algRabenseifner:
		return c.allreduceRabenseifner(rb, src, red)
	}
	return c.allreduceRecDoubling(rb, red)
}

// allreduceAlg returns the algorithm a flat Allreduce runs for rb (allreduceRun).
func (c *Comm) allreduceAlg(rb []byte, red reducer, count int) algo {
	n := c.size
	alg := c.force(kAllreduce)
	if alg == algAuto {
		switch {
		case n > 2 && n <= c.tune.allreduceFew && len(rb) <= c.tune.allreduceShort:
			alg = algGatherAll
		case len(rb) <= c.tune.allreduceShort || !red.commute || count < floorPow2(n):
			alg = algRecDoubling
		case len(rb) >= c.tune.allreduceRing && !isPow2(n) && count >= n,
			len(rb) >= c.tune.allreduceRingA && n > c.tune.allreduceFew && count >= n:
			alg = algRing
		case n > 2 && n <= c.tune.allreduceFew && len(rb) <= c.tune.allreduceDirect && count >= n:
			alg = algDirect
		default:
			alg = algRabenseifner
		}
	}
	switch {
	case alg == algRing && red.commute && count >= n:
		return algRing
	case alg == algDirect && red.commute && count >= n && n <= maxDirect:
		return algDirect
	case alg == algGatherAll:
		return algGatherAll
	case alg == algRabenseifner && red.commute && count >= floorPow2(n):
		return algRabenseifner
	}
	return algRecDoubling
}

func (c *Comm) allreduceRecDoubling(rb []byte, red reducer) error {
	const call = "Allreduce"
	n, r := c.size, c.rank
	pof2 := floorPow2(n)
	rem := n - pof2
	a, b := rb, c.scratchBuf(0, len(rb))
	newrank, err := c.preStep(call, a, b, red, pof2, tagAllreduce)
	if err != nil {
		return err
	}
	if newrank >= 0 {
		for mask := 1; mask < pof2; mask <<= 1 {
			newdst := newrank ^ mask
			dst := realRank(newdst, rem)
			if err := c.cexch(call, a, dst, b, dst, tagAllreduce); err != nil {
				return err
			}
			// Lower ranks' contribution first, so that every rank computes
			// the same expression.
			if newdst < newrank {
				red.fn(b, a)
			} else {
				red.fn(a, b)
				a, b = b, a
			}
		}
	}
	if r < 2*rem {
		if r%2 == 1 {
			if err := c.csend(call, a, r-1, tagAllreduce); err != nil {
				return err
			}
		} else if err := c.crecv(call, a, r+1, tagAllreduce); err != nil {
			return err
		}
	}
	if &a[0] != &rb[0] {
		copy(rb, a)
	}
	return nil
}

// allreduceRabenseifner reduces rb in place, or, with src not nil (on a
// power-of-two rank count), src into rb.
func (c *Comm) allreduceRabenseifner(rb, src []byte, red reducer) error {
	const call = "Allreduce"
	n, r := c.size, c.rank
	pof2 := floorPow2(n)
	rem := n - pof2
	es := red.elem
	count := len(rb) / es
	tmp := c.scratchBuf(0, len(rb))
	if src != nil && rem > 0 {
		copy(rb, src)
		src = nil
	}
	newrank, err := c.preStep(call, rb, tmp, red, pof2, tagAllreduce)
	if err != nil {
		return err
	}
	if newrank >= 0 {
		sendIdx, lastIdx, err := c.halving(call, rb, src, tmp, red, newrank, pof2, tagAllreduce)
		if err != nil {
			return err
		}
		off := blocks{count, pof2, es}.off
		// Allgather by recursive doubling, the halving in reverse.
		for mask := pof2 >> 1; mask > 0; mask >>= 1 {
			newdst := newrank ^ mask
			var sLo, sHi, rLo, rHi, recvIdx int
			if newrank < newdst {
				if mask != pof2/2 {
					lastIdx += pof2 / (mask * 2)
				}
				recvIdx = sendIdx + pof2/(mask*2)
				sLo, sHi, rLo, rHi = sendIdx, recvIdx, recvIdx, lastIdx
			} else {
				recvIdx = sendIdx - pof2/(mask*2)
				sLo, sHi, rLo, rHi = sendIdx, lastIdx, recvIdx, sendIdx
			}
			dst := realRank(newdst, rem)
			if err := c.cexch(call, rb[off(sLo):off(sHi)], dst, rb[off(rLo):off(rHi)], dst, tagAllreduce); err != nil {
				return err
			}
			if newrank > newdst {
				sendIdx = recvIdx
			}
		}
	}
	if r < 2*rem {
		if r%2 == 1 {
			return c.csend(call, rb, r-1, tagAllreduce)
		}
		return c.crecv(call, rb, r+1, tagAllreduce)
	}
	return nil
}

// allreduceRing reduces rb in place, or, with src not nil, src into rb: a
// ring reduce-scatter (rank r ends up with block r+1 fully combined), then
// a ring allgather. With src, each block of rb is first written by the
// receive of the peer's partial result, and src's block is combined into
// it there (no copy of src into rb, no staging buffer).
func (c *Comm) allreduceRing(rb, src []byte, red reducer) error {
	const call = "Allreduce"
	n, r := c.size, c.rank
	off := cut(rb, red.elem, n).off
	var tmp []byte
	if src == nil {
		tmp = c.scratchBuf(0, off(1))
	}
	left, right := (r-1+n)%n, (r+1)%n
	for i := 0; i < n-1; i++ {
		s, k := (r-i+n)%n, (r-i-1+n)%n
		sb, kb := rb[off(s):off(s+1)], rb[off(k):off(k+1)]
		if src != nil && i == 0 {
			sb = src[off(s):off(s+1)] // block r: this rank's own contribution
		}
		t := kb
		if src == nil {
			t = tmp[:len(kb)]
		}
		if err := c.cexch(call, sb, right, t, left, tagAllreduce); err != nil {
			return err
		}
		if src != nil {
			red.fn(src[off(k):off(k+1)], kb)
		} else {
			red.fn(t, kb)
		}
	}
	for i := 0; i < n-1; i++ {
		s, k := (r+1-i+n)%n, (r-i+n)%n
		if err := c.cexch(call, rb[off(s):off(s+1)], right, rb[off(k):off(k+1)], left, tagAllreduce); err != nil {
			return err
		}
	}
	return nil
}

// maxDirect bounds the ranks of allreduceDirect (each of its rounds is
// one batch of exchangeAll).
const maxDirect = alltoallvBatch

// allreduceDirect (commutative operations, a few ranks): rank j owns block
// j of the vector. Every rank sends each block to its owner and receives
// its own block from every rank, all at once; combines the contributions
// in rank order; then sends its block to every rank and receives theirs,
// all at once. Two rounds where Rabenseifner's halving and doubling take
// 2·log₂ n dependent ones (and with ranks outnumbering processors, each
// round costs the scheduler a turn); the same bytes move.
func (c *Comm) allreduceDirect(rb []byte, red reducer) error {
	const call = "Allreduce"
	n, r := c.size, c.rank
	off := cut(rb, red.elem, n).off
	mine := rb[off(r):off(r+1)]
	bl := len(mine)
	tmp := c.scratchBuf(0, n*bl) // slot j: block r as rank j holds it
	if err := c.exchangeAll(call, tagAllreduce, n-1,
		func(j int) []byte { return rb[off(j):off(j+1)] },
		func(j int) []byte { return tmp[j*bl : (j+1)*bl] }); err != nil {
		return err
	}
	copy(mine, tmp[:bl])
	for j := 1; j < n; j++ {
		red.fn(tmp[j*bl:(j+1)*bl], mine)
	}
	return c.exchangeAll(call, tagAllreduce, n-1,
		func(int) []byte { return mine },
		func(j int) []byte { return rb[off(j):off(j+1)] })
}

// allreduceGatherAll (small vectors, a few ranks): every rank sends its
// vector to every other and receives theirs, all at once, then combines
// the n vectors in rank order, the same expression on every rank (any
// operation, commutative or not). One round where recursive doubling takes
// two on 4 ranks and three on 3 (its extra step in and out for the rank
// past the power of two); when ranks outnumber processors, each round
// costs the scheduler a turn.
func (c *Comm) allreduceGatherAll(rb []byte, red reducer) error {
	const call = "Allreduce"
	n, bl := c.size, len(rb)
	tmp := c.scratchBuf(0, n*bl) // slot j: rank j's vector
	if err := c.exchangeAll(call, tagAllreduce, n-1,
		func(int) []byte { return rb },
		func(j int) []byte { return tmp[j*bl : (j+1)*bl] }); err != nil {
		return err
	}
	for j := 1; j < n; j++ {
		red.fn(tmp[(j-1)*bl:j*bl], tmp[j*bl:(j+1)*bl])
	}
	copy(rb, tmp[(n-1)*bl:])
	return nil
}

// Gather collects send of every rank, in rank order, into recv of rank
// root (MPI_Gather); recv needs Size()·len(send) elements at the root and
// is ignored elsewhere. Small totals go up a binomial tree, large ones
// straight to the root.
func Gather[T Elem](c *Comm, send, recv []T, root int) error {
	if err := c.checkRoot("Gather", root); err != nil {
		return err
	}
	if c.rank == root && len(recv) != c.size*len(send) {
		return c.errorf("Gather", noPeer, noTag, ErrCount, "recv has %d elements, want %d·%d", len(recv), c.size, len(send))
	}
	sb, rb := asBytes(send), asBytes(recv)
	bs := len(sb)
	if bs == 0 {
		return nil
	}
	n, r := c.size, c.rank
	if r == root {
		copy(rb[r*bs:], sb)
	}
	if n == 1 {
		return nil
	}
	alg := c.force(kGather)
	if alg == algAuto {
		alg = algLinear
		if bs*n <= c.tune.gatherShort {
			alg = algBinomial
		}
	}
	if alg == algLinear {
		if r != root {
			return c.csend("Gather", sb, root, tagGather)
		}
		rs := make([]*request, n)
		want := make([]int, n)
		for j := 0; j < n; j++ {
			if j == root {
				continue
			}
			rr, err := c.irecv("Gather", proto.Contig(rb[j*bs:(j+1)*bs]), 1, c.cctx(), j, tagGather)
			if err != nil {
				return err
			}
			rs[j], want[j] = rr, bs
		}
		return c.waitReqs("Gather", rs, want, tagGather)
	}
	// Binomial: tmp holds the blocks of this rank's subtree in relative
	// order.
	rel := (r - root + n) % n
	tmp := c.scratchBuf(0, n*bs)
	copy(tmp, sb)
	have := 1
	for mask := 1; mask < n; mask <<= 1 {
		if rel&mask == 0 {
			if srel := rel | mask; srel < n {
				cnt := min(mask, n-srel)
				if err := c.crecv("Gather", tmp[have*bs:(have+cnt)*bs], (srel+root)%n, tagGather); err != nil {
					return err
				}
				have += cnt
			}
		} else {
			return c.csend("Gather", tmp[:have*bs], (rel-mask+root)%n, tagGather)
		}
	}
	for i := 0; i < n; i++ {
		copy(rb[((i+root)%n)*bs:], tmp[i*bs:(i+1)*bs])
	}
	return nil
}

// displacements returns displs, or the packed displacements of counts when
// displs is nil, after checking them against a buffer of size elements.
func (c *Comm) displacements(call string, counts, displs []int, size int) ([]int, error) {
	if len(counts) != c.size {
		return nil, c.errorf(call, noPeer, noTag, ErrCount, "%d counts for %d ranks", len(counts), c.size)
	}
	if displs == nil {
		displs = make([]int, c.size)
		s := 0
		for i, k := range counts {
			displs[i] = s
			s += k
		}
	} else if len(displs) != c.size {
		return nil, c.errorf(call, noPeer, noTag, ErrCount, "%d displacements for %d ranks", len(displs), c.size)
	}
	for i := range counts {
		if counts[i] < 0 || displs[i] < 0 || displs[i]+counts[i] > size {
			return nil, c.errorf(call, noPeer, noTag, ErrCount, "block %d (%d elements at %d) outside a buffer of %d", i, counts[i], displs[i], size)
		}
	}
	return displs, nil
}

// Gatherv is Gather with per-rank counts (MPI_Gatherv): rank i's send
// (counts[i] elements) lands at recv[displs[i]:]. counts and displs matter
// only at the root; displs nil means packed in rank order.
func Gatherv[T Elem](c *Comm, send, recv []T, counts, displs []int, root int) error {
	const call = "Gatherv"
	if err := c.checkRoot(call, root); err != nil {
		return err
	}
	n, r := c.size, c.rank
	if r != root {
		if len(send) == 0 {
			return nil
		}
		return c.csend(call, asBytes(send), root, tagGather)
	}
	displs, err := c.displacements(call, counts, displs, len(recv))
	if err != nil {
		return err
	}
	if counts[r] != len(send) {
		return c.errorf(call, noPeer, noTag, ErrCount, "root sends %d elements, counts[%d] = %d", len(send), r, counts[r])
	}
	es := elemSize[T]()
	rb := asBytes(recv)
	copy(rb[displs[r]*es:], asBytes(send))
	rs := make([]*request, n)
	want := make([]int, n)
	for j := 0; j < n; j++ {
		if j == root || counts[j] == 0 {
			continue
		}
		rr, err := c.irecv(call, proto.Contig(rb[displs[j]*es:(displs[j]+counts[j])*es]), 1, c.cctx(), j, tagGather)
		if err != nil {
			return err
		}
		rs[j], want[j] = rr, counts[j]*es
	}
	return c.waitReqs(call, rs, want, tagGather)
}

// Scatter sends block i of root's send (len(recv) elements each) to recv
// of rank i (MPI_Scatter); send is ignored except at the root. Small
// totals go down a binomial tree, large ones straight from the root.
func Scatter[T Elem](c *Comm, send, recv []T, root int) error {
	const call = "Scatter"
	if err := c.checkRoot(call, root); err != nil {
		return err
	}
	if c.rank == root && len(send) != c.size*len(recv) {
		return c.errorf(call, noPeer, noTag, ErrCount, "send has %d elements, want %d·%d", len(send), c.size, len(recv))
	}
	sb, rb := asBytes(send), asBytes(recv)
	bs := len(rb)
	if bs == 0 {
		return nil
	}
	n, r := c.size, c.rank
	alg := c.force(kScatter)
	if alg == algAuto {
		alg = algLinear
		if bs*n <= c.tune.gatherShort {
			alg = algBinomial
		}
	}
	if alg == algLinear || n == 1 {
		if r != root {
			return c.crecv(call, rb, root, tagScatter)
		}
		rs := make([]*request, n)
		for j := 0; j < n; j++ {
			if j == root {
				continue
			}
			sr, err := c.isend(call, proto.Contig(sb[j*bs:(j+1)*bs]), c.cctx(), j, tagScatter)
			if err != nil {
				return err
			}
			rs[j] = sr
		}
		copy(rb, sb[r*bs:(r+1)*bs])
		return c.waitReqs(call, rs, nil, tagScatter)
	}
	rel := (r - root + n) % n
	var tmp []byte
	m := 1
	if rel == 0 {
		// The root's subtree is everything, in relative order.
		for m < n {
			m <<= 1
		}
		if root == 0 {
			tmp = sb
		} else {
			tmp = c.scratchBuf(0, n*bs)
			for i := 0; i < n; i++ {
				copy(tmp[i*bs:], sb[((i+root)%n)*bs:((i+root)%n+1)*bs])
			}
		}
	} else {
		for rel&m == 0 {
			m <<= 1
		}
		cnt := min(m, n-rel)
		tmp = c.scratchBuf(0, cnt*bs)
		if err := c.crecv(call, tmp, (rel-m+root)%n, tagScatter); err != nil {
			return err
		}
	}
	for mask := m >> 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			cnt := min(mask, n-rel-mask)
			if err := c.csend(call, tmp[mask*bs:(mask+cnt)*bs], (rel+mask+root)%n, tagScatter); err != nil {
				return err
			}
		}
	}
	copy(rb, tmp[:bs])
	return nil
}

// Scatterv is Scatter with per-rank counts (MPI_Scatterv): rank i receives
// counts[i] elements from send[displs[i]:] of the root. counts and displs
// matter only at the root; displs nil means packed in rank order.
func Scatterv[T Elem](c *Comm, send []T, counts, displs []int, recv []T, root int) error {
	const call = "Scatterv"
	if err := c.checkRoot(call, root); err != nil {
		return err
	}
	n, r := c.size, c.rank
	if r != root {
		if len(recv) == 0 {
			return nil
		}
		return c.crecv(call, asBytes(recv), root, tagScatter)
	}
	displs, err := c.displacements(call, counts, displs, len(send))
	if err != nil {
		return err
	}
	if counts[r] != len(recv) {
		return c.errorf(call, noPeer, noTag, ErrCount, "root receives %d elements, counts[%d] = %d", len(recv), r, counts[r])
	}
	es := elemSize[T]()
	sb := asBytes(send)
	rs := make([]*request, n)
	for j := 0; j < n; j++ {
		if j == root || counts[j] == 0 {
			continue
		}
		sr, err := c.isend(call, proto.Contig(sb[displs[j]*es:(displs[j]+counts[j])*es]), c.cctx(), j, tagScatter)
		if err != nil {
			return err
		}
		rs[j] = sr
	}
	copy(asBytes(recv), sb[displs[r]*es:(displs[r]+counts[r])*es])
	return c.waitReqs(call, rs, nil, tagScatter)
}

// Allgather collects send of every rank, in rank order, into recv of every
// rank (MPI_Allgather); recv needs Size()·len(send) elements. Recursive
// doubling (power-of-two rank counts) or Bruck's algorithm for small
// totals, a ring for large ones.
func Allgather[T Elem](c *Comm, send, recv []T) error {
	const call = "Allgather"
	if err := c.check(call); err != nil {
		return err
	}
	if len(recv) != c.size*len(send) {
		return c.errorf(call, noPeer, noTag, ErrCount, "recv has %d elements, want %d·%d", len(recv), c.size, len(send))
	}
	sb, rb := asBytes(send), asBytes(recv)
	bs := len(sb)
	if bs == 0 {
		return nil
	}
	n, r := c.size, c.rank
	copy(rb[r*bs:], sb)
	if n == 1 {
		return nil
	}
	alg := c.force(kAllgather)
	if alg == algAuto {
		total := bs * n
		switch {
		case isPow2(n) && total < c.tune.allgatherLong:
			alg = algRecDoubling
		case total < c.tune.allgatherShort:
			alg = algBruck
		default:
			alg = algRing
		}
	}
	if alg == algRecDoubling && !isPow2(n) {
		alg = algBruck
	}
	switch alg {
	case algRecDoubling:
		for mask := 1; mask < n; mask <<= 1 {
			dst := r ^ mask
			me, him := r&^(mask-1), dst&^(mask-1)
			if err := c.cexch(call, rb[me*bs:(me+mask)*bs], dst, rb[him*bs:(him+mask)*bs], dst, tagAllgather); err != nil {
				return err
			}
		}
		return nil
	case algBruck:
		tmp := c.scratchBuf(0, n*bs)
		copy(tmp, sb)
		for k := 1; k < n; k <<= 1 {
			cnt := min(k, n-k)
			if err := c.cexch(call, tmp[:cnt*bs], (r-k+n)%n, tmp[k*bs:(k+cnt)*bs], (r+k)%n, tagAllgather); err != nil {
				return err
			}
		}
		for i := 0; i < n; i++ {
			copy(rb[((r+i)%n)*bs:], tmp[i*bs:(i+1)*bs])
		}
		return nil
	}
	left, right := (r-1+n)%n, (r+1)%n
	for i := 0; i < n-1; i++ {
		s, k := (r-i+n)%n, (r-i-1+n)%n
		if err := c.cexch(call, rb[s*bs:(s+1)*bs], right, rb[k*bs:(k+1)*bs], left, tagAllgather); err != nil {
			return err
		}
	}
	return nil
}

// Allgatherv is Allgather with per-rank counts (MPI_Allgatherv): rank i's
// send (counts[i] elements) lands at recv[displs[i]:] on every rank;
// displs nil means packed in rank order. It runs around a ring.
func Allgatherv[T Elem](c *Comm, send, recv []T, counts, displs []int) error {
	const call = "Allgatherv"
	if err := c.check(call); err != nil {
		return err
	}
	displs, err := c.displacements(call, counts, displs, len(recv))
	if err != nil {
		return err
	}
	n, r := c.size, c.rank
	if counts[r] != len(send) {
		return c.errorf(call, noPeer, noTag, ErrCount, "rank sends %d elements, counts[%d] = %d", len(send), r, counts[r])
	}
	es := elemSize[T]()
	rb := asBytes(recv)
	blk := func(j int) []byte { return rb[displs[j]*es : (displs[j]+counts[j])*es] }
	copy(blk(r), asBytes(send))
	left, right := (r-1+n)%n, (r+1)%n
	for i := 0; i < n-1; i++ {
		s, k := (r-i+n)%n, (r-i-1+n)%n
		if err := c.cexch(call, blk(s), right, blk(k), left, tagAllgather); err != nil {
			return err
		}
	}
	return nil
}

// ReduceScatter combines send of every rank with op and scatters the
// result: rank i gets counts[i] elements (MPI_Reduce_scatter); send holds
// the sum of counts, recv counts[Rank()]. Commutative operations use
// pairwise exchange; others a reduction in rank order and a scatter.
func ReduceScatter[T Elem](c *Comm, send, recv []T, counts []int, op Op) error {
	const call = "ReduceScatter"
	if err := c.check(call); err != nil {
		return err
	}
	red, err := reducerFor[T](op)
	if err != nil {
		return c.errorf(call, noPeer, noTag, err, "")
	}
	displs, err := c.displacements(call, counts, nil, len(send))
	if err != nil {
		return err
	}
	n, r := c.size, c.rank
	total := 0
	for _, k := range counts {
		total += k
	}
	if total != len(send) || counts[r] != len(recv) {
		return c.errorf(call, noPeer, noTag, ErrCount, "send has %d elements (counts sum to %d), recv %d (counts[%d] = %d)", len(send), total, len(recv), r, counts[r])
	}
	if total == 0 {
		return nil
	}
	es := red.elem
	sb, rb := asBytes(send), asBytes(recv)
	blk := func(j int) []byte { return sb[displs[j]*es : (displs[j]+counts[j])*es] }
	alg := c.force(kReduceScatter)
	if alg == algAuto || (alg == algPairwise && !red.commute) {
		alg = algPairwise
		if !red.commute {
			alg = algReduceScatterv
		}
	}
	if alg == algReduceScatterv {
		var full []byte
		if r == 0 {
			full = make([]byte, len(sb))
		}
		// Reduce uses scratch buffers 0 and 1; full is separate.
		if err := c.reduceBytes(sb, full, red, 0); err != nil {
			return err
		}
		return Scatterv(c, fromBytes[T](full), counts, displs, recv, 0)
	}
	if n == 1 {
		copy(rb, blk(r))
		return nil
	}
	// The result accumulates in recv (in scratch memory if recv overlaps
	// send): the first step receives straight into it and combines this
	// rank's own block into it there, the later ones combine what they
	// receive into it.
	acc, staged := rb, overlaps(rb, sb)
	if staged {
		acc = c.scratchBuf(0, len(rb))
	}
	tmp := c.scratchBuf(1, len(rb))
	for i := 1; i < n; i++ {
		src, dst := (r-i+n)%n, (r+i)%n
		t := tmp
		if i == 1 {
			t = acc
		}
		if err := c.cexch(call, blk(dst), dst, t, src, tagRedScat); err != nil {
			return err
		}
		if i == 1 {
			red.fn(blk(r), acc)
		} else {
			red.fn(tmp, acc)
		}
	}
	if staged {
		copy(rb, acc)
	}
	return nil
}

// reduceBytes is Reduce on bytes.
func (c *Comm) reduceBytes(sb, rb []byte, red reducer, root int) error {
	if c.size == 1 {
		copy(rb, sb)
		return nil
	}
	return c.reduceBinomial(sb, rb, red, root)
}

// ReduceScatterBlock is ReduceScatter with len(recv) elements for every
// rank (MPI_Reduce_scatter_block).
func ReduceScatterBlock[T Elem](c *Comm, send, recv []T, op Op) error {
	if err := c.check("ReduceScatterBlock"); err != nil {
		return err
	}
	counts := make([]int, c.size)
	for i := range counts {
		counts[i] = len(recv)
	}
	return ReduceScatter(c, send, recv, counts, op)
}

// Scan stores in recv of rank i the combination of send of ranks 0…i
// (MPI_Scan, inclusive prefix), by recursive doubling in rank order.
func Scan[T Elem](c *Comm, send, recv []T, op Op) error {
	return scan(c, send, recv, op, false)
}

// Exscan stores in recv of rank i > 0 the combination of send of ranks
// 0…i-1 (MPI_Exscan, exclusive prefix); recv of rank 0 is left unchanged.
func Exscan[T Elem](c *Comm, send, recv []T, op Op) error {
	return scan(c, send, recv, op, true)
}

func scan[T Elem](c *Comm, send, recv []T, op Op, exclusive bool) error {
	call, tag := "Scan", tagScan
	if exclusive {
		call, tag = "Exscan", tagExscan
	}
	if err := c.check(call); err != nil {
		return err
	}
	red, err := reducerFor[T](op)
	if err != nil {
		return c.errorf(call, noPeer, noTag, err, "")
	}
	if len(recv) != len(send) {
		return c.errorf(call, noPeer, noTag, ErrCount, "send has %d elements, recv %d", len(send), len(recv))
	}
	sb, rb := asBytes(send), asBytes(recv)
	if len(sb) == 0 {
		return nil
	}
	n, r := c.size, c.rank
	partial := c.scratchBuf(0, len(sb))
	copy(partial, sb)
	tmp := c.scratchBuf(1, len(sb))
	if !exclusive {
		copy(rb, sb)
	}
	have := !exclusive
	for mask := 1; mask < n; mask <<= 1 {
		dst := r ^ mask
		if dst >= n {
			continue
		}
		if err := c.cexch(call, partial, dst, tmp, dst, tag); err != nil {
			return err
		}
		if r > dst {
			red.fn(tmp, partial)
			if have {
				red.fn(tmp, rb)
			} else {
				copy(rb, tmp)
				have = true
			}
		} else {
			red.fn(partial, tmp)
			partial, tmp = tmp, partial
		}
	}
	return nil
}
