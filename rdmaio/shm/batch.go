package shm

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/provider"
)

const (
	// cmaMaxIov is the most iovecs process_vm_readv and process_vm_writev
	// take on each side (IOV_MAX).
	cmaMaxIov = 1024
	// cmaMaxRun bounds the bytes of one batched call: the kernel moves at
	// most about 2 GiB per call, and a shorter transfer would only cost the
	// fallback.
	cmaMaxRun = 1 << 30
)

// heapRun executes a run of one-sided operations with one system call. When
// the send queue holds, from sqExec on, at least two RDMA READs (or two RDMA
// WRITEs) on ordinary memory of the peer, it checks each as oneSided does,
// holds the region's in-use reference of every one, and moves them all with
// one process_vm_readv (process_vm_writev). The run ends before an
// operation of another kind, an atomic, a shared-memory region, one that
// fails its checks, or at the iovec limit. It returns how many operations
// it completed, all successfully; 0 leaves the operation at sqExec to
// oneSided. When the batched call fails, the operations of the run execute
// one at a time (serial), so that each gets its own status. smu is held,
// and either no ring entry is unacknowledged or the operation at sqExec is
// an unordered READ, and then so is every operation of the run.
func (q *qp) heapRun() int {
	if q.sqTail-q.sqExec < 2 || q.sqExec < q.serial {
		return 0
	}
	op := q.sq[q.sqExec&q.sqMask].op
	if op != rdmaio.OpRDMARead && op != rdmaio.OpRDMAWrite {
		return 0
	}
	if nx := &q.sq[(q.sqExec+1)&q.sqMask]; nx.op != op || nx.status != rdmaio.StatusSuccess {
		return 0
	}
	p := q.peer
	if !p.cma || q.remoteQPGone() != 0 || !provider.Receives(rdmaio.QPState(load32(q.pctl, cState))) {
		return 0
	}
	if q.briov == nil {
		q.allocRun()
	}
	qpAccess := rdmaio.Access(get32(q.pctl, cAccess))
	need := provider.RemoteAccess(op)
	k, nl, nr, total := 0, 0, 0, 0
	for i := q.sqExec; i < q.sqTail && k < len(q.binuse); i++ {
		e := &q.sq[i&q.sqMask]
		if e.op != op || e.status != rdmaio.StatusSuccess || q.unacked > 0 && !e.unordered || nl+len(e.sg) > len(q.bliov) ||
			total+int(e.length) > cmaMaxRun {
			break
		}
		ent := p.mrEntry(e.rkey)
		if ent == nil {
			break
		}
		inuse := p32(ent, mInuse)
		atomic.AddUint32(inuse, 1)
		base, size := get64(ent, mAddr), get64(ent, mLen)
		if load32(ent, mKey) != e.rkey || get32(ent, mKind) != kindHeap ||
			provider.CheckRemote(rdmaio.Access(get32(ent, mAccess)), qpAccess, need, base, size, e.raddr, uint64(e.length)) != rdmaio.StatusSuccess {
			atomic.AddUint32(inuse, ^uint32(0))
			break
		}
		q.binuse[k] = inuse
		k++
		if e.length == 0 {
			continue
		}
		q.briov[nr] = unix.RemoteIovec{Base: uintptr(get64(ent, mVA) + e.raddr - base), Len: int(e.length)}
		nr++
		nl += len(cmaIovecs(q.bliov[nl:], e.sg))
		total += int(e.length)
	}
	// The peer's liveness, as oneSided checks it for each operation: a
	// thorough check whenever the count of checks passes a multiple of
	// 1024.
	deep := q.checks/1024 != (q.checks+uint32(k))/1024
	q.checks += uint32(k)
	ok := k >= 2 && p.gone(deep) == 0
	if ok {
		q.cmaCalls++
		ok = cmaTransfer(op == rdmaio.OpRDMAWrite, p.pid, q.bliov[:nl], q.briov[:nr], total) == 0
	}
	for _, w := range q.binuse[:k] {
		atomic.AddUint32(w, ^uint32(0))
	}
	clear(q.bliov[:nl]) // drop the references to the local buffers
	if !ok {
		if k >= 2 {
			q.serial = q.sqExec + uint64(k)
		}
		return 0
	}
	return k
}

// allocRun allocates the iovec arrays of heapRun, at most as many as one
// call takes and as the send queue can fill.
func (q *qp) allocRun() {
	ops := min(cmaMaxIov, len(q.sq))
	q.briov = make([]unix.RemoteIovec, ops)
	q.binuse = make([]*uint32, ops)
	q.bliov = make([]unix.Iovec, min(cmaMaxIov, len(q.sq)*q.cap.MaxSendSGE))
}
