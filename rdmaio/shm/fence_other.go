//go:build !amd64 || race

package shm

import "sync/atomic"

// storeRelease64 publishes v at p to readers in other processes: every
// earlier store and load of this thread is ordered before it. Here (not
// amd64, or under the race detector) it is an atomic store.
func storeRelease64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// storeHint stores v in w for readers that only need it soon and in order
// with this thread's earlier stores (consA).
func storeHint(w *atomic.Uint64, v uint64) { w.Store(v) }
