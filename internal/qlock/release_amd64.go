//go:build amd64 && !race

package qlock

import (
	"sync/atomic"
	"unsafe"
)

// StoreRelease stores v in w with release ordering: an observer that loads
// v also sees every earlier write of this thread. On amd64 it is a plain
// store, since the processor orders it after every earlier load and store
// of the thread (an atomic Store would be a locked exchange).
func StoreRelease(w *atomic.Uint32, v uint32) { *(*uint32)(unsafe.Pointer(w)) = v }
