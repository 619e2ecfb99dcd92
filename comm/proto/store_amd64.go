//go:build amd64 && !race

package proto

import (
	"sync/atomic"
	"unsafe"
)

// storeRelease stores v in w with release ordering: a plain store, since
// amd64 orders it after every earlier load and store of this thread (an
// atomic Store would be a locked exchange).
func storeRelease(w *atomic.Uint32, v uint32) { *(*uint32)(unsafe.Pointer(w)) = v }
