package shmem

// SetDistinctRanges lets a test run several ranks in one process.
func SetDistinctRanges(on bool) { distinctRanges = on }
