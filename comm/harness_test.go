package comm

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jiarun/jia/comm/memtransport"
	"github.com/jiarun/jia/comm/proto"
	"github.com/jiarun/jia/comm/qtransport"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/rdmaio/shm" // the "shm" provider for qtransport worlds
)

// transportFlag chooses the transport of runRanks: "mem" (memtransport)
// or "q" (qtransport over in-process shm devices). TestOverQTransport runs
// the point-to-point and collective tests over "q" in any case.
var transportFlag = flag.String("comm.transport", "mem", `transport of the tests: "mem" or "q"`)

// testTransport is the transport runRanks builds; set from the flag, and
// by TestOverQTransport for the tests it runs.
var testTransport string

func useQ() bool {
	if testTransport != "" {
		return testTransport == "q"
	}
	return *transportFlag == "q"
}

// otherTransports builds the worlds of further transports, by the name
// given to testTransport or -comm.transport; their test files register
// them.
var otherTransports = map[string]func(t testing.TB, n int, mopt memtransport.Options) ([]transport.Transport, func()){}

func transportName() string {
	if testTransport != "" {
		return testTransport
	}
	return *transportFlag
}

// endpoints returns n transports: a memtransport fabric (returned too) or a
// qtransport world mapped from mopt; close releases them.
func endpoints(t testing.TB, n int, mopt memtransport.Options) (eps []transport.Transport, f *memtransport.Fabric, close func()) {
	t.Helper()
	if mk := otherTransports[transportName()]; mk != nil {
		if mopt.Lossy {
			t.Skip("the lossy datagram fabric exists only in memtransport")
		}
		eps, close = mk(t, n, mopt)
		return eps, nil, close
	}
	eps = make([]transport.Transport, n)
	if !useQ() {
		f = memtransport.New(n, mopt)
		for r := range eps {
			eps[r] = f.Endpoint(r)
		}
		return eps, f, func() { f.Close() }
	}
	if mopt.Lossy {
		t.Skip("the lossy datagram fabric exists only in memtransport")
	}
	trs := qworld(t, n, qOptions(mopt))
	for r := range eps {
		eps[r] = trs[r]
	}
	return eps, nil, func() {
		if err := qtransport.CloseAll(trs); err != nil {
			t.Errorf("close: %v", err)
		}
	}
}

// qOptions maps the memtransport options of a test configuration onto
// qtransport: no one-sided operations, the largest message (through the
// eager limit, which sizes the receive buffers), the gather limit.
func qOptions(mopt memtransport.Options) qtransport.Options {
	var o qtransport.Options
	o.TwoSided = mopt.NoOneSided
	o.EagerLimit = mopt.EagerLimit
	if mopt.MaxMsg > 0 {
		o.EagerLimit = max(1, mopt.MaxMsg-(proto.MaxHeader+63)&^63)
	}
	o.MaxSGE = mopt.MaxSGE
	return o
}

// qDevOpts keep the shm devices of the tests small: room for a QP per
// peer of an n-rank world, 64 KiB rings.
func qDevOpts(n int) map[string]string {
	return map[string]string{"max_qp": fmt.Sprint(max(16, n)), "ring_bytes": "65536"}
}

// qJob names the shm segments of the qtransport worlds.
const qJob = "commtest"

var cleanupOnce sync.Once

// qworld builds n qtransport ranks over shm devices of this process.
func qworld(t testing.TB, n int, opt qtransport.Options) []*qtransport.Transport {
	t.Helper()
	cleanupOnce.Do(func() {
		// Segments that killed runs left behind (their process is gone).
		if _, err := shm.Cleanup(shm.DefaultDir, qJob, false); err != nil {
			t.Logf("shm cleanup: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), runDeadline)
	defer cancel()
	trs, err := qtransport.OpenLocal(ctx, "shm", qJob, n, qDevOpts(n), opt)
	if err != nil {
		t.Fatal(err)
	}
	return trs
}

// runRanks runs fn on n ranks of an in-memory fabric (or of a qtransport
// world, see testTransport), one goroutine each (runWorlds), and reports
// every rank's error. A run that does not finish within the deadline fails
// with a goroutine dump. The fabric is nil over qtransport.
func runRanks(t testing.TB, n int, mopt memtransport.Options, copt *Options, fn func(c *Comm) error) *memtransport.Fabric {
	t.Helper()
	eps, f, closeAll := endpoints(t, n, mopt)
	defer closeAll()
	first, errs, dump := runWorlds(eps, copt, fn, false, runDeadline)
	if dump != "" {
		t.Fatalf("ranks did not finish within %v (errors so far: %v):\n%s", runDeadline, errs, dump)
	}
	for r, err := range errs {
		switch {
		case err == nil:
		case r != first && errors.Is(err, errPeerFailed):
			t.Logf("rank %d of %d (after rank %d failed): %v", r, n, first, err)
		default:
			t.Errorf("rank %d of %d: %v", r, n, err)
		}
	}
	return f
}

// runWorlds runs fn, then a Barrier when barrier is set, on a comm world
// (with copt) over each of eps, one goroutine per rank, and returns every
// rank's error (a panic is one) and the first rank to fail (-1: none).
// That rank's failure breaks the others' message passing (errPeerFailed),
// so that those waiting for it return too. Ranks that do not finish within
// deadline are left running: dump is then the stacks of every goroutine,
// and errs the errors so far.
func runWorlds(eps []transport.Transport, copt *Options, fn func(c *Comm) error, barrier bool, deadline time.Duration) (first int, errs []error, dump string) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		comms = make([]*Comm, len(eps))
	)
	first, errs = -1, make([]error, len(eps))
	for r := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			defer func() {
				if p := recover(); p != nil {
					buf := make([]byte, 1<<16)
					err = fmt.Errorf("panic: %v\n%s", p, buf[:runtime.Stack(buf, false)])
				}
				mu.Lock()
				defer mu.Unlock()
				errs[r] = err
				if err == nil || first >= 0 {
					return
				}
				first = r
				for _, o := range comms {
					if o != nil && o != comms[r] {
						o.p.mu.Lock()
						o.p.setFatal(fmt.Errorf("%w: rank %d: %v", errPeerFailed, r, err))
						o.p.mu.Unlock()
					}
				}
			}()
			c, err := NewWorld(eps[r], copt)
			mu.Lock()
			comms[r] = c
			if first >= 0 && err == nil {
				err = fmt.Errorf("%w before rank %d started", errPeerFailed, r)
			}
			mu.Unlock()
			if err == nil {
				err = fn(c)
			}
			if err == nil && barrier {
				err = c.Barrier()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return first, errs, ""
	case <-time.After(deadline):
		buf := make([]byte, 1<<22)
		dump = string(buf[:runtime.Stack(buf, true)])
		mu.Lock()
		defer mu.Unlock()
		return first, slices.Clone(errs), dump
	}
}

// errPeerFailed is the error runWorlds gives the other ranks when one fails.
var errPeerFailed = errors.New("another rank failed")

var runDeadline = 120 * time.Second

// run is runRanks on a default fabric.
func run(t testing.TB, n int, fn func(c *Comm) error) {
	t.Helper()
	runRanks(t, n, memtransport.Options{}, nil, fn)
}
