package shm_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	"github.com/jiarun/jia/rdmaio/shm"
)

var jobSeq atomic.Int64

// fabric opens shm devices in this process, one per rank, each with its own
// job id so that leftovers can be checked per test.
type fabric struct {
	opts map[string]string
	jobs []string
}

func newJob() string { return fmt.Sprintf("t%d-%d", os.Getpid(), jobSeq.Add(1)) }

func (f *fabric) Open(t testing.TB, n int) []rdmaio.Device {
	t.Helper()
	job := newJob()
	f.jobs = append(f.jobs, job)
	devs := make([]rdmaio.Device, n)
	for i := range devs {
		d, err := rdmaio.Open(shm.Name, rdmaio.Config{Job: job, Rank: i, LocalSize: n, Options: f.opts})
		if err != nil {
			t.Fatalf("open rank %d: %v", i, err)
		}
		devs[i] = d
	}
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	return devs
}

func (f *fabric) CheckLeaks(t testing.TB) {
	t.Helper()
	for _, job := range f.jobs {
		left, err := shm.Leftovers("", job)
		if err != nil {
			t.Errorf("leftovers of %s: %v", job, err)
		}
		for _, s := range left {
			t.Errorf("segment left after close: %s", s.Path)
		}
	}
	f.jobs = nil
}

func TestConformance(t *testing.T) {
	rdmaiotest.Run(t, &fabric{})
}

// TestConformanceSmallRing runs the suite with the smallest ring and every
// SEND above 64 bytes going through descriptors, which exercises ring
// wrap-around, full rings and the single-copy paths.
func TestConformanceSmallRing(t *testing.T) {
	if testing.Short() {
		t.Skip("second conformance run in -short mode")
	}
	rdmaiotest.Run(t, &fabric{opts: map[string]string{"ring_bytes": "16384", "eager": "64", "mtu": "1024"}})
}
