package runtime

import (
	"net"
	"testing"
)

// A rank started by srun publishes an address that ranks on other nodes can
// dial: never the wildcard, and a loopback address only when the host has
// nothing else.
func TestPMIAddrIsReachableFromOtherNodes(t *testing.T) {
	iface := func() string { return "192.0.2.7" }
	for _, launch := range []string{"", "127.0.0.1", "::1", "0.0.0.0", "not-an-address"} {
		if got := pmiAddr(launch, iface); got != "192.0.2.7" {
			t.Errorf("launch node %q: got %q, want the interface address", launch, got)
		}
	}
	if got := pmiAddr("", func() string { return "" }); got != "" {
		t.Errorf("no address at all: got %q, want \"\" (listen everywhere)", got)
	}

	// Toward one of this host's own addresses, the route's source is that
	// address: the one the launch node's network sees.
	own := hostIPv4()
	if own == "" {
		t.Skip("skipped the routed case: this host has no IPv4 address but loopback")
	}
	if got := pmiAddr(own, func() string { return "unused" }); got != own {
		t.Errorf("launch node %s (this host): got %q, want %s", own, got, own)
	}
	if ip := net.ParseIP(own); ip == nil || ip.IsLoopback() {
		t.Errorf("hostIPv4() = %q: want a non-loopback IPv4 address", own)
	}
}
