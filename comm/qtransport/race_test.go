//go:build race

package qtransport_test

const raceEnabled = true
