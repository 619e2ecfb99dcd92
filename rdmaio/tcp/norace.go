//go:build !race

package tcp

import "unsafe"

const raceEnabled = false

func raceAcquire(unsafe.Pointer)         {}
func raceReleaseMerge(unsafe.Pointer)    {}
func raceWriteRange(unsafe.Pointer, int) {}
