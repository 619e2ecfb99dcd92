package shm_test

import (
	"os"
	"strings"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	"github.com/jiarun/jia/rdmaio/shm"
)

// pair is two in-process devices with one connected RC QP pair and one UD QP
// each, for the tests of this package.
type pair = rdmaiotest.Pair

const qkey = rdmaiotest.PairQKey

func newPair(tb testing.TB, size int, opts map[string]string) *pair {
	tb.Helper()
	if opts == nil {
		opts = envOptions()
	}
	job := newJob()
	heapAccess := rdmaio.AccessAll &^ rdmaio.AccessRemoteAtomic
	if opts["cma"] == "off" {
		heapAccess = rdmaio.AccessLocalWrite
	}
	return rdmaiotest.NewPair(tb, func(rank int) (rdmaio.Device, error) {
		return rdmaio.Open(shm.Name, rdmaio.Config{Job: job, Rank: rank, LocalSize: 2, Options: opts})
	}, size, heapAccess)
}

// envOptions reads provider options for benchmarks from JIA_SHM_OPTS
// ("key=value,key=value").
func envOptions() map[string]string {
	v := os.Getenv("JIA_SHM_OPTS")
	if v == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		m[k] = val
	}
	return m
}

// pollN polls cq until it has returned n completions (rdmaiotest.PollN).
func pollN(tb testing.TB, cq rdmaio.CQ, wc []rdmaio.WorkCompletion, n int) {
	rdmaiotest.PollN(tb, cq, wc, n)
}

// TestZeroAllocs: posting and polling allocate nothing on the hot paths
// (the allocation check of package rdmaiotest).
func TestZeroAllocs(t *testing.T) { rdmaiotest.Allocs(t, &fabric{}) }
