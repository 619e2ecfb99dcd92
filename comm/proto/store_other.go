//go:build !amd64 || race

package proto

import "sync/atomic"

// storeRelease stores v in w with release ordering: an atomic store here
// (not amd64, or under the race detector, which sees it as a release).
func storeRelease(w *atomic.Uint32, v uint32) { w.Store(v) }
