//go:build !amd64 || race

package qlock

import "sync/atomic"

// release stores 0 in a lock word: an atomic store here (not amd64, or
// under the race detector, which sees it as a release).
func release(w *atomic.Uint32) { w.Store(0) }
