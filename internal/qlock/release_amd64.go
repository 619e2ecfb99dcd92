//go:build amd64 && !race

package qlock

import (
	"sync/atomic"
	"unsafe"
)

// release stores 0 in a lock word: a plain store, since amd64 orders it
// after every earlier load and store of this thread.
func release(w *atomic.Uint32) { *(*uint32)(unsafe.Pointer(w)) = 0 }
