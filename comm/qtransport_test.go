package comm

import (
	"testing"
)

// withTransport runs fn with runRanks and worlds building transports of
// the given kind ("mem" or "q").
func withTransport(kind string, fn func()) {
	old := testTransport
	testTransport = kind
	defer func() { testTransport = old }()
	fn()
}

// TestOverQTransport runs the point-to-point and collective tests over
// qtransport: ranks are goroutines, each with its own shm device, connected
// by RC queue pairs. (go test -comm.transport=q runs every test that way.)
func TestOverQTransport(t *testing.T) {
	if useQ() {
		t.Skip("every test already runs over qtransport")
	}
	tests := []struct {
		name string
		fn   func(*testing.T)
	}{
		{"NonOvertaking", TestNonOvertaking},
		{"StatusAndWildcards", TestStatusAndWildcards},
		{"Truncation", TestTruncation},
		{"ArgumentErrors", TestArgumentErrors},
		{"ProcNull", TestProcNull},
		{"SendrecvRing", TestSendrecvRing},
		{"CompletionCalls", TestCompletionCalls},
		{"Communicators", TestCommunicators},
		{"Vector", TestVector},
		{"SelfMessages", TestSelfMessages},
		{"Stress", TestStress},
		{"ConcurrentWaitsOnOneRequest", TestConcurrentWaitsOnOneRequest},
		{"Collectives", TestCollectives},
		{"CollectivesHierarchical", TestCollectivesHierarchical},
		{"CollectivesOtherTransports", TestCollectivesOtherTransports},
		{"PredefinedOps", TestPredefinedOps},
		{"Deterministic", TestDeterministic},
		{"LargeCollectives", TestLargeCollectives},
		{"MismatchedArguments", TestMismatchedArguments},
		{"HotPathsDoNotAllocate", TestHotPathsDoNotAllocate},
	}
	withTransport("q", func() {
		for _, tc := range tests {
			t.Run(tc.name, tc.fn)
		}
	})
}

// BenchmarkQTransport runs the point-to-point benchmarks over qtransport
// (two ranks, two shm devices of this process); BenchmarkLatency and
// BenchmarkBandwidth are the same over memtransport.
func BenchmarkQTransport(b *testing.B) {
	withTransport("q", func() {
		b.Run("Latency", BenchmarkLatency)
		b.Run("Bandwidth", BenchmarkBandwidth)
		b.Run("Allreduce", BenchmarkAllreduce)
		b.Run("Barrier", BenchmarkBarrier)
	})
}
