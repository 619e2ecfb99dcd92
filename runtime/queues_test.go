package runtime

import (
	"slices"
	"strings"
	"testing"

	"github.com/jiarun/jia/runtime/config"
)

func queuesRuntime(rank int, kind config.TransportKind, hosts ...string) *Runtime {
	r := &Runtime{contract: Contract{Rank: rank, Size: len(hosts), Job: "queues-test", Secret: make([]byte, SecretLen)}}
	r.cfg = config.Default()
	r.cfg.Transport.Kind = kind
	for p, h := range hosts {
		r.cards = append(r.cards, Card{Rank: p, Host: h})
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

func TestOpenQueuesMissingProvider(t *testing.T) {
	r := queuesRuntime(0, config.TransportVerbs, "a", "b")
	_, err := r.OpenQueues()
	if err == nil || !strings.Contains(err.Error(), `provider "verbs" (to reach rank 1) is not built into this program`) {
		t.Fatalf("OpenQueues with verbs: %v", err)
	}
}
