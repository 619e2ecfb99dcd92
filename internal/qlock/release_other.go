//go:build !amd64 || race

package qlock

import "sync/atomic"

// StoreRelease stores v in w with release ordering: an observer that loads
// v also sees every earlier write of this thread. Here (not amd64, or
// under the race detector, which must see it as a release) it is an
// atomic store.
func StoreRelease(w *atomic.Uint32, v uint32) { w.Store(v) }
