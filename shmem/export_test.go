package shmem

// SetDistinctRanges lets a test run several ranks in one process.
func SetDistinctRanges(on bool) { distinctRanges = on }

// PostedUnlocks returns how many Unlocks d posted without waiting.
func PostedUnlocks(d *DSM) int64 { return d.posted.Load() }

// BellFile returns the path of the file of d's pager's bell.
func BellFile(d *DSM) string { return d.bellFile }

// PagerPid returns the process id of d's pager.
func PagerPid(d *DSM) int { return d.pid }

// Clean reports whether d's pager says that a barrier would publish
// nothing now.
func Clean(d *DSM) bool { return d.calls.Clean() }

// PostedLocks returns how many Locks d posted without waiting.
func PostedLocks(d *DSM) int64 { return d.postedLocks.Load() }

// SharedFD returns d's memfd of the range shared by the host's ranks, or
// -1.
func SharedFD(d *DSM) int { return d.shareFD }
