//go:build !race

package npb_test

const raceEnabled = false
