package rdmaiotest

import (
	"testing"

	"github.com/jiarun/jia/rdmaio"
)

// Fabric gives the suite connected endpoints of one provider.
type Fabric interface {
	// Open opens n devices that act as ranks 0..n-1 of one new job, able to
	// reach each other (in this process). The suite closes them; Open may
	// register a t.Cleanup that closes any left open, ignoring
	// rdmaio.ErrClosed.
	Open(t testing.TB, n int) []rdmaio.Device
}

// LeakChecker is implemented by fabrics that can tell whether a closed job
// left anything behind (files, sockets, goroutines). The suite calls
// CheckLeaks after closing every device a test opened.
type LeakChecker interface {
	CheckLeaks(t testing.TB)
}

// FaultFabric is implemented by fabrics whose provider can inject loss into
// UD traffic (like tcp's ud_drop option). The suite then checks that UD
// under loss loses exactly the datagrams the injector dropped and nothing
// else (UDInjectedLoss); other fabrics skip that test.
type FaultFabric interface {
	// OpenLossy opens n devices like Fabric.Open whose UD sends drop each
	// datagram with probability loss, decided by a generator seeded with
	// seed.
	OpenLossy(t testing.TB, n int, loss float64, seed uint64) []rdmaio.Device
	// Dropped returns how many UD datagrams dev's injector has dropped.
	Dropped(dev rdmaio.Device) uint64
}

// Run runs the conformance suite against f. Each test opens its own ranks.
func Run(t *testing.T, f Fabric) {
	tests := []struct {
		name string
		fn   func(*testing.T, Fabric)
	}{
		{"Objects", testObjects},
		{"StateMachine", testStateMachine},
		{"SendRecvSizes", testSendRecvSizes},
		{"SendRecv64MiB", testSendRecv64MiB},
		{"Immediate", testImmediate},
		{"Inline", testInline},
		{"Ordering", testOrdering},
		{"LargeSGL", testLargeSGL},
		{"ReadWriteOffsets", testReadWriteOffsets},
		{"AtomicsContention", testAtomicsContention},
		{"AtomicMalformed", testAtomicMalformed},
		{"UD", testUD},
		{"UDQKeyMismatch", testUDQKey},
		{"UDMTU", testUDMTU},
		{"UDInjectedLoss", testUDInjectedLoss},
		{"RemoteAccessErrors", testRemoteAccessErrors},
		{"LocalProtection", testLocalProtection},
		{"RecvTooSmall", testRecvTooSmall},
		{"RNR", testRNR},
		{"CompletionBatching", testCompletionBatching},
		{"ManyQPsOneCQ", testManyQPs},
		{"SRQ", testSRQ},
		{"QueueDepth", testQueueDepth},
		{"TeardownFlush", testTeardownFlush},
		{"TeardownOutstanding", testTeardownOutstanding},
		{"PeerClosed", testPeerClosed},
		{"FreedMemory", testFreedMemory},
		{"CQWait", testCQWait},
		{"CQWaitDeadline", testCQWaitDeadline},
		{"DirectCQ", testDirectCQ},
		{"BadAddress", testBadAddress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, f) })
	}
}
