//go:build race

package tcp

import (
	"runtime"
	"unsafe"
)

const raceEnabled = true

func raceAcquire(p unsafe.Pointer)           { runtime.RaceAcquire(p) }
func raceReleaseMerge(p unsafe.Pointer)      { runtime.RaceReleaseMerge(p) }
func raceWriteRange(p unsafe.Pointer, n int) { runtime.RaceWriteRange(p, n) }
