//go:build amd64 && !race

package rdmaiotest

import (
	"sync/atomic"
	"unsafe"
)

// releaseStore stores v in w, ordered after this thread's earlier stores
// for readers on other processors: a plain store on amd64, which keeps
// stores in order (what the shm provider's queues publish with).
func releaseStore(w *atomic.Uint64, v uint64) { *(*uint64)(unsafe.Pointer(w)) = v }
