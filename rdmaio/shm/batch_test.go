package shm_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/shm"
)

// Strided one-sided runs: block i of the chain moves runBlock bytes
// between offset i*remoteStride of the peer's ordinary memory and offset
// runLocalOff+i*localStride of the local buffer.
const (
	runBlock     = 4096
	remoteStride = 8192
	localStride  = 12288
	runLocalOff  = 100
)

// runChain builds n signaled RDMA work requests of opcode op over the
// strided blocks, with IDs 0..n-1, against the region (key, addr).
func runChain(op rdmaio.Opcode, local rdmaio.MR, key uint32, addr uint64, n int) []rdmaio.SendWR {
	wrs := make([]rdmaio.SendWR, n)
	for i := range wrs {
		wrs[i] = rdmaio.SendWR{ID: uint64(i), Opcode: op, Flags: rdmaio.SendSignaled,
			SGL:        []rdmaio.SGE{rdmaio.MRSGE(local, runLocalOff+i*localStride, runBlock)},
			RemoteAddr: addr + uint64(i*remoteStride), RKey: key}
	}
	return wrs
}

// fillPattern writes a byte pattern that differs from block to block.
func fillPattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7+i/4096) ^ seed
	}
}

// postRun posts wrs on qp with one PostSend and collects their
// completions from cq, whatever their status.
func postRun(t *testing.T, qp rdmaio.QP, cq rdmaio.CQ, wrs []rdmaio.SendWR) []rdmaio.WorkCompletion {
	t.Helper()
	if n, err := qp.PostSend(wrs); err != nil || n != len(wrs) {
		t.Fatalf("post %d work requests: posted %d: %v", len(wrs), n, err)
	}
	wc := make([]rdmaio.WorkCompletion, len(wrs))
	deadline := time.Now().Add(time.Minute)
	for got := 0; got < len(wrs); {
		got += cq.Poll(wc[got:])
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions after a minute", got, len(wrs))
		}
	}
	return wc
}

// TestOneSidedRun: a chain of RDMA READs (and one of WRITEs) of strided
// blocks of the peer's ordinary memory moves every byte with one
// process_vm_readv (writev) call instead of one per work request, and
// each work request gets its own successful completion, in order.
func TestOneSidedRun(t *testing.T) {
	const n = 300
	for _, op := range []rdmaio.Opcode{rdmaio.OpRDMARead, rdmaio.OpRDMAWrite} {
		t.Run(op.String(), func(t *testing.T) {
			p := newPair(t, n*localStride+runLocalOff, nil)
			local, remote := p.Heap[0].Bytes(), p.Heap[1].Bytes()
			src, dst := remote, local
			srcOff, dstOff := func(i int) int { return i * remoteStride }, func(i int) int { return runLocalOff + i*localStride }
			if op == rdmaio.OpRDMAWrite {
				src, dst = local, remote
				srcOff, dstOff = dstOff, srcOff
			}
			fillPattern(src, 0x5a)
			want := bytes.Clone(dst)
			for i := range n {
				copy(want[dstOff(i):dstOff(i)+runBlock], src[srcOff(i):srcOff(i)+runBlock])
			}
			before := shm.CMACalls(p.RC[0])
			wc := postRun(t, p.RC[0], p.CQ[0], runChain(op, p.Heap[0], p.Heap[1].RKey(), p.Heap[1].Addr(), n))
			calls := shm.CMACalls(p.RC[0]) - before
			for i, c := range wc {
				if c.ID != uint64(i) || c.Status != rdmaio.StatusSuccess || c.ByteLen != runBlock {
					t.Fatalf("completion %d: id %d status %v len %d", i, c.ID, c.Status, c.ByteLen)
				}
			}
			if !bytes.Equal(dst, want) {
				t.Fatalf("%v: the destination does not hold the blocks (and only them)", op)
			}
			// One PostSend of 300 requests: one call, or a few if the
			// queue was executed in parts.
			if calls > 3 {
				t.Fatalf("%d %vs took %d process_vm calls, want at most 3", n, op, calls)
			}
		})
	}
}

// TestOneSidedRunErrors: a run in which one operation fails completes
// exactly as one operation at a time would: the operations before it
// succeed with their data, it completes with its error, the QP goes to
// ERR and the rest are flushed. Checked for an operation that fails its
// checks (bad key, out of bounds: the run ends before it) and for one whose
// memory the kernel refuses (the batched call fails and the run executes
// again one operation at a time).
func TestOneSidedRunErrors(t *testing.T) {
	const n, bad = 12, 5
	prot, err := unix.Mmap(-1, 0, n*remoteStride, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Munmap(prot); err != nil {
			t.Error(err)
		}
	})
	// protected points the spoiled operation at a region whose memory is
	// then given protection mode (restored at the end).
	protected := func(mode int) func(p *pair, wr *rdmaio.SendWR) {
		return func(p *pair, wr *rdmaio.SendWR) {
			m, err := p.PD[1].RegMR(prot, rdmaio.AccessAll&^rdmaio.AccessRemoteAtomic)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Mprotect(prot, mode); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := unix.Mprotect(prot, unix.PROT_READ|unix.PROT_WRITE); err != nil {
					t.Error(err)
				}
			})
			wr.RKey, wr.RemoteAddr = m.RKey(), m.Addr()
		}
	}
	cases := []struct {
		name   string
		op     rdmaio.Opcode
		status rdmaio.Status
		vendor uint32
		spoil  func(p *pair, wr *rdmaio.SendWR)
		calls  uint64 // process_vm calls
	}{
		{"read bad rkey", rdmaio.OpRDMARead, rdmaio.StatusRemAccessErr, 0,
			func(p *pair, wr *rdmaio.SendWR) { wr.RKey ^= 0x10000 }, 1},
		{"write bad rkey", rdmaio.OpRDMAWrite, rdmaio.StatusRemAccessErr, 0,
			func(p *pair, wr *rdmaio.SendWR) { wr.RKey ^= 0x10000 }, 1},
		{"read out of bounds", rdmaio.OpRDMARead, rdmaio.StatusRemAccessErr, 0,
			func(p *pair, wr *rdmaio.SendWR) {
				wr.RemoteAddr = p.Heap[1].Addr() + uint64(len(p.Heap[1].Bytes())) - 100
			}, 1},
		{"read unreadable memory", rdmaio.OpRDMARead, rdmaio.StatusRemAccessErr, uint32(unix.EFAULT),
			protected(unix.PROT_NONE), 1 + bad + 1},
		{"write unwritable memory", rdmaio.OpRDMAWrite, rdmaio.StatusRemAccessErr, uint32(unix.EFAULT),
			protected(unix.PROT_READ), 1 + bad + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, n*localStride+runLocalOff, nil)
			local, remote := p.Heap[0].Bytes(), p.Heap[1].Bytes()
			fillPattern(local, 0x11)
			fillPattern(remote, 0x22)
			wantLocal, wantRemote := bytes.Clone(local), bytes.Clone(remote)
			for i := range bad {
				l, r := runLocalOff+i*localStride, i*remoteStride
				if c.op == rdmaio.OpRDMARead {
					copy(wantLocal[l:l+runBlock], remote[r:r+runBlock])
				} else {
					copy(wantRemote[r:r+runBlock], local[l:l+runBlock])
				}
			}
			wrs := runChain(c.op, p.Heap[0], p.Heap[1].RKey(), p.Heap[1].Addr(), n)
			c.spoil(p, &wrs[bad])
			before := shm.CMACalls(p.RC[0])
			wc := postRun(t, p.RC[0], p.CQ[0], wrs)
			calls := shm.CMACalls(p.RC[0]) - before
			for i, w := range wc {
				st, vendor := rdmaio.StatusSuccess, uint32(0)
				switch {
				case i == bad:
					st, vendor = c.status, c.vendor
				case i > bad:
					st = rdmaio.StatusWRFlushErr
				}
				if w.ID != uint64(i) || w.Status != st || w.VendorErr != vendor {
					t.Errorf("completion %d: id %d status %v vendor %d, want status %v vendor %d", i, w.ID, w.Status, w.VendorErr, st, vendor)
				}
			}
			if s := p.RC[0].State(); s != rdmaio.StateErr {
				t.Errorf("QP state %v, want ERR", s)
			}
			if !bytes.Equal(local, wantLocal) || !bytes.Equal(remote, wantRemote) {
				t.Errorf("memory after the run is not the result of the first %d operations", bad)
			}
			if calls != c.calls {
				t.Errorf("%d process_vm calls, want %d", calls, c.calls)
			}
		})
	}
}

// TestOneSidedRunAllocs: a run of READs allocates nothing once the QP has
// executed one.
func TestOneSidedRunAllocs(t *testing.T) {
	const n = 64
	p := newPair(t, n*localStride+runLocalOff, nil)
	wrs := runChain(rdmaio.OpRDMARead, p.Heap[0], p.Heap[1].RKey(), p.Heap[1].Addr(), n)
	wc := make([]rdmaio.WorkCompletion, n)
	run := func() {
		if _, err := p.RC[0].PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		pollN(t, p.CQ[0], wc, n)
	}
	for range 8 {
		run()
	}
	before := shm.CMACalls(p.RC[0])
	if a := testing.AllocsPerRun(100, run); a != 0 {
		t.Fatalf("%v allocations per run of %d READs", a, n)
	}
	if calls := shm.CMACalls(p.RC[0]) - before; calls > 101 {
		t.Fatalf("%d process_vm calls for 101 runs", calls)
	}
}

// BenchmarkOneSidedRun reads 1 MiB as 256 strided blocks of 4 KiB from the
// peer's ordinary memory, posted in chains of the given length.
func BenchmarkOneSidedRun(b *testing.B) {
	const n = 256
	for _, chain := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("chain=%d", chain), func(b *testing.B) {
			p := newPair(b, n*localStride+runLocalOff, nil)
			wrs := runChain(rdmaio.OpRDMARead, p.Heap[0], p.Heap[1].RKey(), p.Heap[1].Addr(), n)
			for i := range wrs {
				wrs[i].Flags = 0
			}
			for i := chain - 1; i < n; i += chain {
				wrs[i].Flags = rdmaio.SendSignaled
			}
			wc := make([]rdmaio.WorkCompletion, n/chain)
			b.SetBytes(n * runBlock)
			b.ResetTimer()
			for range b.N {
				for i := 0; i < n; i += chain {
					if _, err := p.RC[0].PostSend(wrs[i : i+chain]); err != nil {
						b.Fatal(err)
					}
				}
				pollN(b, p.CQ[0], wc, n/chain)
			}
		})
	}
}
