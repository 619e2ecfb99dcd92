//go:build verbs

package verbs

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// TestLibConstants checks every verbs value the portable code assumes
// against verbs.h.
func TestLibConstants(t *testing.T) {
	for _, c := range libConsts() {
		if c.ours != c.lib {
			t.Errorf("%s: this package assumes %d, verbs.h has %d", c.name, c.ours, c.lib)
		}
	}
}

// deviceOrSkip opens a device, or skips the test (saying why) when this
// machine has none.
func deviceOrSkip(t *testing.T) *Device {
	t.Helper()
	d, err := Open(rdmaio.Config{Job: "probe"})
	if errors.Is(err, ErrNoDevice) {
		t.Skipf("no RDMA device on this machine: %v", err)
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return d
}

// TestOpenWithoutDevice: where libibverbs finds no device (or the kernel
// has no RDMA support), Open fails cleanly with an error that wraps
// ErrNoDevice and rdmaio.ErrNoDevice and says "no RDMA device"; rdmaio.Open
// through the registry does the same, and Probe agrees.
func TestOpenWithoutDevice(t *testing.T) {
	desc, perr := Probe()
	d, err := Open(rdmaio.Config{Job: "j"})
	if err == nil {
		d.Close()
		if perr != nil {
			t.Fatalf("Open found a device but Probe says: %v", perr)
		}
		t.Skipf("this machine has an RDMA device (%s): the no-device path is not reachable", desc)
	}
	if !errors.Is(err, ErrNoDevice) || !errors.Is(err, rdmaio.ErrNoDevice) || !strings.Contains(err.Error(), "no RDMA device") {
		t.Fatalf("Open without a device: %v (want ErrNoDevice, \"no RDMA device\")", err)
	}
	t.Logf("Open: %v", err)
	if !errors.Is(perr, ErrNoDevice) || desc != "" {
		t.Fatalf("Probe without a device: %q, %v", desc, perr)
	}
	_, err = rdmaio.Open(Name, rdmaio.Config{Job: "j"})
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "no RDMA device") {
		t.Fatalf("rdmaio.Open(%q) without a device: %v", Name, err)
	}
	if _, statErr := os.Stat("/sys/class/infiniband"); statErr == nil {
		t.Logf("sysfs lists RDMA class devices, but none is usable: %v", err)
	}
}

// TestOpenBadOptions: options are checked before any device is touched.
func TestOpenBadOptions(t *testing.T) {
	for _, o := range []map[string]string{{"bogus": "1"}, {"port": "0"}, {"gid_index": "x"}, {"sleep": "0s"}} {
		_, err := Open(rdmaio.Config{Job: "j", Options: o})
		if !errors.Is(err, rdmaio.ErrInvalidArgument) || errors.Is(err, ErrNoDevice) {
			t.Errorf("Open with %v: %v (want ErrInvalidArgument)", o, err)
		}
	}
}

func TestRegistered(t *testing.T) {
	for _, n := range rdmaio.Providers() {
		if n == Name {
			return
		}
	}
	t.Fatalf("provider %q not registered (have %v)", Name, rdmaio.Providers())
}

var jobSeq atomic.Int64

// fabric opens verbs devices in this process, one per rank, all on the
// first usable port (loopback through the adapter).
type fabric struct{}

func (fabric) Open(t testing.TB, n int) []rdmaio.Device {
	t.Helper()
	job := fmt.Sprintf("t%d-%d", os.Getpid(), jobSeq.Add(1))
	devs := make([]rdmaio.Device, n)
	for i := range devs {
		d, err := rdmaio.Open(Name, rdmaio.Config{Job: job, Rank: i, LocalSize: n})
		if err != nil {
			t.Fatalf("open rank %d: %v", i, err)
		}
		devs[i] = d
	}
	t.Cleanup(func() {
		for _, d := range devs {
			if err := d.Close(); err != nil && !errors.Is(err, rdmaio.ErrClosed) {
				t.Errorf("close: %v", err)
			}
		}
	})
	return devs
}

// TestConformance runs the rdmaio conformance suite wherever an RDMA device
// exists; elsewhere it is skipped, saying so.
func TestConformance(t *testing.T) {
	deviceOrSkip(t).Close()
	rdmaiotest.Run(t, fabric{})
}
