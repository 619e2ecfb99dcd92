//go:build !amd64 || race

package rdmaiotest

import "sync/atomic"

// releaseStore stores v in w, ordered after this thread's earlier stores:
// an atomic store where plain stores may be reordered, and under the race
// detector, which must see it.
func releaseStore(w *atomic.Uint64, v uint64) { w.Store(v) }
