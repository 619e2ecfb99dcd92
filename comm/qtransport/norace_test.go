//go:build !race

package qtransport_test

const raceEnabled = false
