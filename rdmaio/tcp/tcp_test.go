package tcp_test

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
	"github.com/jiarun/jia/rdmaio/tcp"
)

var jobSeq atomic.Int64

func newJob() string { return fmt.Sprintf("t%d-%d", os.Getpid(), jobSeq.Add(1)) }

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// fabric opens tcp devices in this process, one per rank, on loopback, all
// of one job with its secret.
type fabric struct {
	opts    map[string]string
	sockets int
}

func (f *fabric) open(t testing.TB, n int, opts map[string]string) []rdmaio.Device {
	t.Helper()
	if f.sockets < 0 {
		f.sockets = countSockets(t)
	}
	job := newJob()
	devs := make([]rdmaio.Device, n)
	for i := range devs {
		d, err := rdmaio.Open(tcp.Name, rdmaio.Config{Job: job, Rank: i, LocalSize: n, Options: opts, Secret: testSecret})
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

func (f *fabric) Open(t testing.TB, n int) []rdmaio.Device { return f.open(t, n, f.opts) }

// OpenLossy opens devices whose UD sends drop datagrams (option ud_drop).
func (f *fabric) OpenLossy(t testing.TB, n int, loss float64, seed uint64) []rdmaio.Device {
	opts := map[string]string{"ud_drop": fmt.Sprint(loss), "ud_seed": fmt.Sprint(seed)}
	for k, v := range f.opts {
		opts[k] = v
	}
	return f.open(t, n, opts)
}

// Dropped returns the datagrams dev's injector dropped.
func (f *fabric) Dropped(dev rdmaio.Device) uint64 { return dev.(*tcp.Device).FaultStats().Dropped }

// CheckLeaks fails when sockets, epoll instances or eventfds of the closed
// devices remain open.
func (f *fabric) CheckLeaks(t testing.TB) {
	t.Helper()
	if f.sockets < 0 {
		return
	}
	if n := countSockets(t); n > f.sockets {
		t.Errorf("%d socket-like descriptors open after close, %d before", n, f.sockets)
	}
	f.sockets = -1
}

// countSockets counts this process's sockets, epoll instances and eventfds.
func countSockets(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && (strings.HasPrefix(l, "socket:") || strings.Contains(l, "eventpoll") || strings.Contains(l, "eventfd")) {
			n++
		}
	}
	return n
}

func TestConformance(t *testing.T) {
	rdmaiotest.Run(t, &fabric{sockets: -1})
}

// TestConformanceVariant runs the suite over IPv6 loopback (when the host
// has it) with a small MTU and without any spinning: every wait sleeps and
// the service goroutines block in epoll_wait at once, which exercises the
// paths that busy polling hides.
func TestConformanceVariant(t *testing.T) {
	if testing.Short() {
		t.Skip("second conformance run in -short mode")
	}
	opts := map[string]string{"mtu": "512", "spin": "0s", "yield": "0s", "service_spin": "0s"}
	if d, err := rdmaio.Open(tcp.Name, rdmaio.Config{Job: newJob(), Options: map[string]string{"addr": "::1"}}); err == nil {
		d.Close()
		opts["addr"] = "::1"
	} else {
		t.Logf("no IPv6 loopback (%v): IPv4", err)
	}
	rdmaiotest.Run(t, &fabric{opts: opts, sockets: -1})
}
