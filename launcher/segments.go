package launcher

import (
	"fmt"
	"io"

	"github.com/jiarun/jia/rdmaio/shm"
)

// removeSegments removes the shared-memory segments that ranks of job left
// on this host once their processes are gone (a rank that crashed before
// every peer mapped its segments leaves them behind), and with them those
// of any earlier job of this user whose ranks were killed with no launcher
// left to clean up (kill -9 of jiarun: its ranks die by their parent-death
// signal). Segments of live processes are kept. A failure is reported on w,
// not fatal: the job's outcome stands.
func removeSegments(job string, w io.Writer) {
	if job == "" {
		return
	}
	if _, err := shm.CleanupStale(""); err != nil {
		fmt.Fprintf(w, "jiarun: job %s: removing leftover shared memory: %v\n", job, err)
	}
}
