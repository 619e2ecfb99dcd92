package shmem

// SetDistinctRanges lets a test run several ranks in one process.
func SetDistinctRanges(on bool) { distinctRanges = on }

// PostedUnlocks returns how many Unlocks d posted without waiting.
func PostedUnlocks(d *DSM) int64 { return d.posted.Load() }

// PostedLocks returns how many Locks d posted without waiting.
func PostedLocks(d *DSM) int64 { return d.postedLocks.Load() }
