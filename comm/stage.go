package comm

import "math/bits"

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

// getStage returns a staging buffer of n bytes, or nil when n is out of
// the staged range, the budget is spent or the transport has none; mu is
// held.
func (p *proc) getStage(n int) []byte {
	c := bits.Len(uint(n - 1))
	if p.stager == nil || p.stage.off || c < stageMinClass || c > stageMaxClass {
		return nil
	}
	if l := len(p.stage.free[c]); l > 0 {
		b := p.stage.free[c][l-1]
		p.stage.free[c][l-1] = nil
		p.stage.free[c] = p.stage.free[c][:l-1]
		return b[:n]
	}
	if p.stage.bytes+1<<c > stageBudget {
		return nil
	}
	b, err := p.stager.AllocStage(1 << c)
	if err != nil {
		p.stage.off = true // no such memory: the Go heap serves
		return nil
	}
	p.stage.bytes += 1 << c
	return b[:n]
}

// putStage gives back a buffer from getStage; mu is held.
func (p *proc) putStage(b []byte) {
	c := bits.Len(uint(cap(b) - 1))
	p.stage.free[c] = append(p.stage.free[c], b[:cap(b)])
}
