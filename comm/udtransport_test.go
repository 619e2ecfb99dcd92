package comm

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jiarun/jia/comm/memtransport"
	"github.com/jiarun/jia/comm/transport"
	"github.com/jiarun/jia/comm/udtransport"
	"github.com/jiarun/jia/rdmaio/tcp" // the "tcp" provider for udtransport worlds
)

// The "ud" worlds of the tests: udtransport over in-process tcp devices
// whose UD datagrams suffer 10% loss, 5% duplication and 10% reordering;
// "ud-noloss" worlds inject no faults.
func init() {
	otherTransports["ud"] = func(t testing.TB, n int, mopt memtransport.Options) ([]transport.Transport, func()) {
		return udWorld(t, n, mopt, true)
	}
	otherTransports["ud-noloss"] = func(t testing.TB, n int, mopt memtransport.Options) ([]transport.Transport, func()) {
		return udWorld(t, n, mopt, false)
	}
}

// udJob names the tcp devices of the udtransport worlds.
const udJob = "commtest-ud"

// udSeed makes each world's fault injection different but reproducible.
var udSeed atomic.Uint64

// udFaults are the devices' fault injection options.
func udFaults(seed uint64) map[string]string {
	return map[string]string{"ud_drop": "0.1", "ud_dup": "0.05", "ud_reorder": "0.1",
		"ud_seed": strconv.FormatUint(seed, 10)}
}

// udWorld builds n udtransport ranks over tcp devices of this process
// (lossy ones with faults), mapping the memtransport options of a test configuration (the
// largest message, the gather limit, the eager limit).
func udWorld(t testing.TB, n int, mopt memtransport.Options, faults bool) ([]transport.Transport, func()) {
	t.Helper()
	var opt udtransport.Options
	opt.EagerLimit = mopt.EagerLimit
	opt.MaxMsg = mopt.MaxMsg
	opt.MaxSGE = mopt.MaxSGE
	seed := udSeed.Add(1) * 100
	ctx, cancel := context.WithTimeout(context.Background(), runDeadline)
	defer cancel()
	var devOpts func(int) map[string]string
	if faults {
		devOpts = func(r int) map[string]string { return udFaults(seed + uint64(r)) }
	}
	trs, err := udtransport.OpenLocal(ctx, "tcp", udJob, n, devOpts, opt)
	if err != nil {
		t.Fatal(err)
	}
	eps := make([]transport.Transport, n)
	for r := range eps {
		eps[r] = trs[r]
	}
	return eps, func() {
		if err := udtransport.CloseAll(trs); err != nil {
			t.Errorf("close: %v", err)
		}
		if n > 1 && faults {
			var injected tcp.FaultStats
			var ls udtransport.Stats
			for _, tr := range trs {
				for _, d := range tr.Devices() {
					if td, ok := d.(*tcp.Device); ok {
						f := td.FaultStats()
						injected.Dropped += f.Dropped
						injected.Duplicated += f.Duplicated
						injected.Reordered += f.Reordered
					}
				}
				s := tr.Stats()
				ls.Link.Sent += s.Link.Sent
				ls.Link.Retransmits += s.Link.Retransmits + s.Link.FastRetransmits
			}
			t.Logf("ud world of %d ranks: %d packets, %d retransmitted; injected %+v", n, ls.Link.Sent, ls.Link.Retransmits, injected)
		}
	}
}

// TestOverUDTransport runs the point-to-point and collective tests over
// udtransport: ranks are goroutines, each with its own tcp device, and
// every message travels as UD datagrams through 10% loss (plus duplication
// and reordering), made reliable by proto.Link. (go test
// -comm.transport=ud runs every test that way.)
func TestOverUDTransport(t *testing.T) {
	if transportName() == "ud" {
		t.Skip("every test already runs over udtransport")
	}
	runSuite(t, "ud", transportSuite([]suiteTest{{"CollectivesSomeRankCounts", testUDCollectives}}))
}

// TestUDTransportHotPathsDoNotAllocate checks comm's steady-state calls
// over udtransport with its injected faults: nothing allocates, not even
// waiting for retransmissions (a wait that ends at its deadline leaves the
// channel of its context open for the next: rdmaio.CQ.Wait keeps the
// deadline itself).
func TestUDTransportHotPathsDoNotAllocate(t *testing.T) {
	withTransport("ud", func() { TestHotPathsDoNotAllocate(t) })
}

// testUDCollectives is TestCollectives (every collective, every
// algorithm, every size of collSizes) for a few rank counts, odd and
// even, powers of two and not.
func testUDCollectives(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 7} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			run(t, n, func(c *Comm) error {
				for _, size := range collSizes {
					if err := collAll(c, size); err != nil {
						return fmt.Errorf("size %d: %w", size, err)
					}
				}
				return nil
			})
		})
	}
}

// BenchmarkUDTransport runs the point-to-point and collective benchmarks
// over udtransport on tcp devices of this process, without injected
// faults.
func BenchmarkUDTransport(b *testing.B) { benchSuite(b, "ud-noloss") }
