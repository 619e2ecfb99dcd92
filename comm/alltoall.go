package comm

import "github.com/jiarun/jia/comm/proto"

// alltoallvBatch is the number of peers an Alltoallv exchanges with at
// once (MPICH's bblock): enough to keep every peer busy on small jobs,
// bounded so that a large job does not post thousands of rendezvous.
const alltoallvBatch = 32

// Alltoall sends block j of send to rank j, which stores it as block i
// (this rank) of its recv (MPI_Alltoall); send and recv hold Size() blocks
// of equal size. Bruck's algorithm for small blocks on 8 or more ranks,
// the messages of up to 32 peers posted at once for medium blocks (and for
// any block on up to 4 ranks, where a pairwise exchange only makes each
// step wait for the slowest pair), pairwise exchange for large ones; the
// block to itself is copied while the first messages are under way.
func Alltoall[T Elem](c *Comm, send, recv []T) error {
	const call = "Alltoall"
	if err := c.check(call); err != nil {
		return err
	}
	n := c.size
	if len(send) != len(recv) || len(send)%n != 0 {
		return c.errorf(call, noPeer, noTag, ErrCount, "send has %d elements, recv %d, for %d ranks", len(send), len(recv), n)
	}
	sb, rb := asBytes(send), asBytes(recv)
	bs := len(sb) / n
	if bs == 0 {
		return nil
	}
	if n == 1 {
		copy(rb, sb)
		return nil
	}
	alg := c.force(kAlltoall)
	if alg == algAuto {
		switch {
		case bs <= c.tune.alltoallShort && n >= c.tune.alltoallMinRks:
			alg = algBruck
		case bs <= c.tune.alltoallMedium || n <= c.tune.alltoallFew:
			alg = algScattered
		default:
			alg = algPairwise
		}
	}
	if alg == algBruck {
		return c.alltoallBruck(sb, rb, bs)
	}
	batch := 1 // pairwise: one peer at a time
	if alg == algScattered {
		batch = n - 1
	}
	return c.exchangeAll(call, tagAlltoall, batch,
		func(j int) []byte { return sb[j*bs : (j+1)*bs] },
		func(j int) []byte { return rb[j*bs : (j+1)*bs] })
}

// alltoallBruck is Bruck's algorithm: log2(Size()) steps, each sending
// the blocks whose index has that bit set, through scratch buffers.
func (c *Comm) alltoallBruck(sb, rb []byte, bs int) error {
	const call = "Alltoall"
	n, r := c.size, c.rank
	tmp := c.scratchBuf(0, n*bs)
	for i := 0; i < n; i++ {
		copy(tmp[i*bs:], sb[((r+i)%n)*bs:((r+i)%n+1)*bs])
	}
	pack, rpack := c.scratchBuf(1, n*bs), c.scratchBuf(2, n*bs)
	for k := 1; k < n; k <<= 1 {
		np := 0
		for i := k; i < n; i++ {
			if i&k != 0 {
				copy(pack[np*bs:], tmp[i*bs:(i+1)*bs])
				np++
			}
		}
		if err := c.cexch(call, pack[:np*bs], (r+k)%n, rpack[:np*bs], (r-k+n)%n, tagAlltoall); err != nil {
			return err
		}
		np = 0
		for i := k; i < n; i++ {
			if i&k != 0 {
				copy(tmp[i*bs:(i+1)*bs], rpack[np*bs:])
				np++
			}
		}
	}
	for i := 0; i < n; i++ {
		copy(rb[((r-i+n)%n)*bs:], tmp[i*bs:(i+1)*bs])
	}
	return nil
}

// Alltoallv is Alltoall with per-peer counts (MPI_Alltoallv): sendCounts[j]
// elements from send[sendDispls[j]:] go to rank j, which receives them as
// recvCounts[i] elements at recv[recvDispls[i]:]. Nil displacements mean
// packed. It exchanges with up to 32 peers at once, in pairwise order, and
// copies the block for this rank itself while the first messages are under
// way.
func Alltoallv[T Elem](c *Comm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) error {
	const call = "Alltoallv"
	if err := c.check(call); err != nil {
		return err
	}
	sd, err := c.displacements(call, sendCounts, sendDispls, len(send))
	if err != nil {
		return err
	}
	rd, err := c.displacements(call, recvCounts, recvDispls, len(recv))
	if err != nil {
		return err
	}
	es := elemSize[T]()
	sb, rb := asBytes(send), asBytes(recv)
	sblk := func(j int) []byte { return sb[sd[j]*es : (sd[j]+sendCounts[j])*es] }
	rblk := func(j int) []byte { return rb[rd[j]*es : (rd[j]+recvCounts[j])*es] }
	if r := c.rank; sendCounts[r] != recvCounts[r] {
		return c.errorf(call, noPeer, noTag, ErrCount, "sends itself %d elements but receives %d", sendCounts[r], recvCounts[r])
	}
	return c.exchangeAll(call, tagAlltoall, alltoallvBatch, sblk, rblk)
}

// exchangeAll runs the exchanges of an all-to-all: in step i (1 ≤ i <
// Size()) this rank receives rblk(r-i) from rank r-i and sends sblk(r+i)
// to rank r+i (modulo Size()). The steps are posted batch at a time, the
// receives first, and each batch completes before the next is posted. The
// block to this rank itself is copied after the first batch is posted, so
// that the peers need not wait for the copy: a rendezvous peer can read
// this rank's blocks meanwhile. Every receive must get exactly len(rblk)
// bytes. tag is the collective's.
func (c *Comm) exchangeAll(call string, tag, batch int, sblk, rblk func(int) []byte) error {
	n, r := c.size, c.rank
	var rs [2 * alltoallvBatch]*request
	var want [2 * alltoallvBatch]int
	batch = max(min(batch, alltoallvBatch), 1)
	// The first round always runs: on one rank it only copies.
	for lo := 1; lo == 1 || lo < n; lo += batch {
		hi := min(lo+batch, n)
		k := 0
		var first error
		for i := lo; i < hi; i++ {
			src := (r - i + n) % n
			b := rblk(src)
			rr, err := c.irecv(call, proto.Contig(b), 1, c.cctx(), src, tag)
			if err != nil {
				first = err
				break
			}
			rs[k], want[k] = rr, len(b)
			k++
		}
		for i := lo; i < hi && first == nil; i++ {
			dst := (r + i) % n
			sr, err := c.isend(call, proto.Contig(sblk(dst)), c.cctx(), dst, tag)
			if err != nil {
				first = err
				break
			}
			rs[k], want[k] = sr, -1
			k++
		}
		if lo == 1 && first == nil {
			copy(rblk(r), sblk(r))
		}
		// Posted requests complete before an error returns: they refer
		// to the caller's buffers.
		if err := c.waitReqs(call, rs[:k], want[:k], tag); err != nil && first == nil {
			first = err
		}
		clear(rs[:k])
		if first != nil {
			return first
		}
	}
	return nil
}
