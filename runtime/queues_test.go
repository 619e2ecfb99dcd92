package runtime

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/runtime/config"
)

// queuesRuntime is rank's runtime in a job whose ranks are on hosts; a host
// name ending in "+rdma" marks a rank whose card says it has an RDMA device.
func queuesRuntime(rank int, kind config.TransportKind, hosts ...string) *Runtime {
	r := &Runtime{contract: Contract{Rank: rank, Size: len(hosts), Job: "queues-test", Secret: make([]byte, SecretLen)}}
	r.cfg = config.Default()
	r.cfg.Transport.Kind = kind
	for p, h := range hosts {
		c := Card{Rank: p, Host: strings.TrimSuffix(h, "+rdma")}
		if strings.HasSuffix(h, "+rdma") {
			c.Providers = map[string][]byte{"verbs": nil}
		}
		r.cards = append(r.cards, c)
	}
	return r
}

func TestProvidersPerPeer(t *testing.T) {
	for _, tc := range []struct {
		kind  config.TransportKind
		rank  int
		hosts []string
		want  []string
		err   string
	}{
		{config.TransportAuto, 0, []string{"a", "a", "b"}, []string{"", "shm", "tcp"}, ""},
		{config.TransportAuto, 2, []string{"a", "a", "b"}, []string{"tcp", "tcp", ""}, ""},
		// verbs only between two ranks that both have an RDMA device.
		{config.TransportAuto, 0, []string{"a+rdma", "a+rdma", "b+rdma", "c"}, []string{"", "shm", "verbs", "tcp"}, ""},
		{config.TransportAuto, 3, []string{"a+rdma", "a+rdma", "b+rdma", "c"}, []string{"tcp", "tcp", "tcp", ""}, ""},
		{config.TransportTCP, 0, []string{"a", "a"}, []string{"", "tcp"}, ""},
		{config.TransportSHM, 1, []string{"a", "a"}, []string{"shm", ""}, ""},
		{config.TransportSHM, 0, []string{"a", "a", "b"}, nil, `rank 2 is on host "b"`},
	} {
		got, err := queuesRuntime(tc.rank, tc.kind, tc.hosts...).Providers()
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s rank %d of %v: err %v, want one containing %q", tc.kind, tc.rank, tc.hosts, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s rank %d of %v: %v", tc.kind, tc.rank, tc.hosts, err)
		case !slices.Equal(got, tc.want):
			t.Errorf("%s rank %d of %v: %q, want %q", tc.kind, tc.rank, tc.hosts, got, tc.want)
		}
	}
}

func TestOpenQueuesSHM(t *testing.T) {
	r := queuesRuntime(0, config.TransportAuto, "a", "a", "a")
	q, err := r.OpenQueues()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if len(q.Devices) != 1 || q.Devices["shm"] == nil {
		t.Fatalf("devices %v, want one shm device", q.Devices)
	}
	if q.Peer[0] != nil || q.Peer[1] != q.Devices["shm"] || q.Peer[2] != q.Devices["shm"] {
		t.Fatalf("peers %v: want nil, shm, shm", q.Peer)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenQueuesVerbs(t *testing.T) {
	r := queuesRuntime(0, config.TransportVerbs, "a", "b")
	q, err := r.OpenQueues()
	switch {
	case !registered("verbs"):
		if err == nil || !strings.Contains(err.Error(), `provider "verbs" (to reach rank 1) is not built into this program`) {
			t.Fatalf("OpenQueues with verbs, not built in: %v", err)
		}
	case rdmaio.Usable("verbs") != nil:
		if !errors.Is(err, rdmaio.ErrNoDevice) || !strings.Contains(err.Error(), "open rdmaio provider verbs (to reach rank 1)") {
			t.Fatalf("OpenQueues with verbs, no device: %v", err)
		}
	default:
		if err != nil {
			t.Fatalf("OpenQueues with verbs, device present: %v", err)
		}
		q.Close()
	}
}

// TestProviderOptions: the tcp provider gets the configured send buffer of
// its connections (transport.tcp_send_buffer; 0 asks for the kernel's own
// sizing), the other providers no options.
func TestProviderOptions(t *testing.T) {
	r := queuesRuntime(0, config.TransportTCP, "a", "b")
	if got := r.providerOptions("tcp")["sndbuf"]; got != "262144" {
		t.Errorf("default tcp sndbuf option %q, want 262144", got)
	}
	for _, size := range []config.ByteSize{64 << 10, 0} {
		r.cfg.Transport.TCPSendBuffer = size
		if got, want := r.providerOptions("tcp")["sndbuf"], fmt.Sprint(int64(size)); got != want {
			t.Errorf("tcp_send_buffer %v: sndbuf option %q, want %q", size, got, want)
		}
	}
	if opts := r.providerOptions("shm"); opts != nil {
		t.Errorf("shm options %v, want none", opts)
	}
}
