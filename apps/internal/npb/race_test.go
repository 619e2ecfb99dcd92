//go:build race

package npb_test

// raceEnabled reports a -race build, where the kernels run 5-20x slower.
const raceEnabled = true
