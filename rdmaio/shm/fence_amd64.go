//go:build amd64 && !race

package shm

import (
	"sync/atomic"
	"unsafe"
)

// storeRelease64 publishes v at p to readers in other processes: every
// earlier store of this thread is visible before it. amd64 keeps stores in
// order and never moves a store before an earlier load, so with the
// asymmetric fence (see asymFence) a plain store does; without it the
// store is sequentially consistent, as a doorbell check that follows needs.
func storeRelease64(p *uint64, v uint64) {
	if asymFence {
		*p = v
		return
	}
	atomic.StoreUint64(p, v)
}

// storeHint stores v in w for readers that only need it soon and in order
// with this thread's earlier stores (consA): a plain store on amd64, a
// locked one elsewhere and under the race detector, which must see it.
func storeHint(w *atomic.Uint64, v uint64) { *(*uint64)(unsafe.Pointer(w)) = v }
