//go:build race

package udtransport_test

const raceEnabled = true
