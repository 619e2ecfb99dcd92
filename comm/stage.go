package comm

import (
	"encoding/binary"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/jiarun/jia/comm/proto"
)

// Staging buffers: memory of the transport (transport.Stager) that the
// ranks of this host read with a plain copy once registered. The blocks
// of a large vector send are packed there rather than into the Go heap,
// whose pages a reader on the same host reaches only through a system
// call that pins them one by one (process_vm_readv): 4 MiB of 64-byte
// blocks, two ranks, about 1.45 times faster. Buffers are kept by
// power-of-two class for the next send and live as long as the transport,
// as the readers' mappings of them do; a rank allocates at most
// stageBudget bytes of them, and packs into the Go heap past that.
const (
	stageMinClass = 15       // 32 KiB: smaller messages go eager (16 KiB on shm)
	stageMaxClass = 24       // 16 MiB
	stageBudget   = 32 << 20 // bytes of staging memory per rank
)

type stagePool struct {
	free  [stageMaxClass + 1][][]byte
	bytes int  // allocated so far
	off   bool // the transport has no staging memory
}

// getStage returns a staging buffer of n bytes, with stageHdr more bytes
// of capacity (for a staged send's watermark), for a message to rank dst,
// or nil when dst does not read staging memory directly, n is out of the
// staged range, the budget is spent or the transport has none; mu is held.
func (p *proc) getStage(dst, n int) []byte {
	c := bits.Len(uint(n - 1))
	if p.stager == nil || p.stage.off || c < stageMinClass || c > stageMaxClass || !p.stager.StagedTo(dst) {
		return nil
	}
	if l := len(p.stage.free[c]); l > 0 {
		b := p.stage.free[c][l-1]
		p.stage.free[c][l-1] = nil
		p.stage.free[c] = p.stage.free[c][:l-1]
		return b[:n]
	}
	size := 1<<c + stageHdr
	if p.stage.bytes+size > stageBudget {
		return nil
	}
	b, err := p.stager.AllocStage(size)
	if err != nil {
		p.stage.off = true // no such memory: the Go heap serves
		return nil
	}
	p.stage.bytes += size
	return b[:n]
}

// putStage gives back a buffer from getStage; mu is held.
func (p *proc) putStage(b []byte) {
	c := bits.Len(uint(cap(b) - stageHdr - 1))
	p.stage.free[c] = append(p.stage.free[c], b[:cap(b)])
}

// Staged sends: a vector send to a rank that reads the staging memory
// directly is packed there a chunk at a time while the receiver copies
// out what is packed (proto KRTSS): the two copies overlap instead of
// following each other. The first stageHdr bytes of the buffer hold the
// watermark, the count of bytes packed; the packing goes on in the
// rank's polls (packStep), a chunk per poll.
const (
	stageHdr   = 64       // watermark, on a cache line of its own
	stagedMin  = 32 << 10 // the smallest rendezvous on shm
	stageChunk = 16 << 10 // bytes packed per step
)

// startStaged starts send request r of a vector as a staged send from
// staging buffer b (stageHdr + message bytes); mu is held.
func (p *proc) startStaged(r *request, b []byte) error {
	op := &r.op
	n := op.Buf.Len()
	r.packed, r.staged, r.vsrc = b, true, op.Buf
	first := min(n, stageChunk)
	op.Buf.Gather(0, b[stageHdr:stageHdr+first])
	storeWatermark(b, first)
	r.packOff = first
	reg, err := p.tr.Register(b[:stageHdr+n])
	if err != nil {
		op.Buf = r.vsrc
		r.vsrc = proto.Buf{}
		p.putPacked(r)
		return err
	}
	r.region, r.registered = reg, true
	op.Buf = proto.Contig(b[stageHdr : stageHdr+n])
	op.Region = proto.Region{Key: reg.Key, Addr: reg.Addr + stageHdr}
	op.Watch, op.Ready = reg.Addr, first
	if first < n {
		p.packing = append(p.packing, r)
		p.packN.Add(1)
	} else {
		r.vsrc = proto.Buf{}
	}
	p.eng.Send(op)
	p.run()
	return nil
}

// packStep packs the next chunk of every staged send being packed and
// advances its watermark; mu is held.
func (p *proc) packStep() {
	for i := 0; i < len(p.packing); {
		r := p.packing[i]
		n := r.vsrc.Len()
		end := min(n, r.packOff+stageChunk)
		r.vsrc.Gather(r.packOff, r.packed[stageHdr+r.packOff:stageHdr+end])
		storeWatermark(r.packed, end)
		r.packOff = end
		if end < n {
			i++
			continue
		}
		r.vsrc = proto.Buf{}
		p.dropPacking(i)
	}
}

// stopPacking ends the packing of staged send r, complete before it was
// all packed (its receiver took less); mu is held.
func (p *proc) stopPacking(r *request) {
	r.vsrc = proto.Buf{}
	for i, x := range p.packing {
		if x == r {
			p.dropPacking(i)
			return
		}
	}
}

func (p *proc) dropPacking(i int) {
	last := len(p.packing) - 1
	p.packing[i] = p.packing[last]
	p.packing[last] = nil
	p.packing = p.packing[:last]
	p.packN.Add(-1)
}

// storeWatermark publishes that n bytes of staging buffer b are packed: a
// little-endian uint64 at b[0], stored atomically after the bytes it
// counts (b comes from a page-aligned mapping).
func storeWatermark(b []byte, n int) {
	var le [8]byte
	binary.LittleEndian.PutUint64(le[:], uint64(n))
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&b[0])), *(*uint64)(unsafe.Pointer(&le)))
}
