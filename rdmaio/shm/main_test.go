package shm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio/shm"
)

// testSegment matches the segments of this package's test jobs (named
// "t<pid>-<n>" by newJob) and captures the creating process.
var testSegment = regexp.MustCompile(`^jia-t\d+-\d+-r\d+-p(\d+)-`)

// TestMain removes the segments that earlier runs of these tests left when
// they were killed (a crash skips every cleanup), then runs the tests.
func TestMain(m *testing.M) {
	if ents, err := os.ReadDir(shm.DefaultDir); err == nil {
		for _, e := range ents {
			sub := testSegment.FindStringSubmatch(e.Name())
			if sub == nil {
				continue
			}
			if pid, _ := strconv.Atoi(sub[1]); pid > 0 && unix.Kill(pid, 0) == unix.ESRCH {
				if err := os.Remove(filepath.Join(shm.DefaultDir, e.Name())); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}
		}
	}
	os.Exit(m.Run())
}
