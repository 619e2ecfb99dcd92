package runtime

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
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

// fakeKVS is one rank's view of an in-memory process manager: a put is
// visible to everyone after the next fence.
type fakeKVS struct {
	pm      *fakePM
	rank    int
	pending map[string][]byte
	aborted string
	done    bool
}

type fakePM struct {
	mu      sync.Mutex
	size    int
	arrived int
	gen     int
	cond    *sync.Cond
	store   map[string][]byte // "rank/key"
}

func newFakePM(size int) *fakePM {
	pm := &fakePM{size: size, store: map[string][]byte{}}
	pm.cond = sync.NewCond(&pm.mu)
	return pm
}

func (k *fakeKVS) Put(key string, value []byte) error {
	if k.pending == nil {
		k.pending = map[string][]byte{}
	}
	k.pending[key] = append([]byte(nil), value...)
	return nil
}

func (k *fakeKVS) Fence() error {
	pm := k.pm
	pm.mu.Lock()
	defer pm.mu.Unlock()
	for key, v := range k.pending {
		pm.store[strconv.Itoa(k.rank)+"/"+key] = v
	}
	k.pending = nil
	gen := pm.gen
	if pm.arrived++; pm.arrived == pm.size {
		pm.arrived, pm.gen = 0, pm.gen+1
		pm.cond.Broadcast()
	}
	for gen == pm.gen {
		pm.cond.Wait()
	}
	return nil
}

func (k *fakeKVS) Get(src int, key string) ([]byte, error) {
	k.pm.mu.Lock()
	defer k.pm.mu.Unlock()
	v, ok := k.pm.store[strconv.Itoa(src)+"/"+key]
	if !ok {
		return nil, fmt.Errorf("fake: rank %d has no %q", src, key)
	}
	return v, nil
}

func (k *fakeKVS) Abort(status int, msg string) error {
	k.aborted = strconv.Itoa(status) + ": " + msg
	return nil
}
func (k *fakeKVS) Finalize() error { k.done = true; return nil }

// The bootstrap drives any key-value space the same way: after exchange,
// every rank holds every card and rank 0's secret; gather collects every
// rank's value under per-rank keys.
func TestPMIBootExchangeAndGather(t *testing.T) {
	const n = 4
	pm := newFakePM(n)
	kvs := make([]*fakeKVS, n)
	cards := make([][][]byte, n)
	secrets := make([][]byte, n)
	gathered := make([][][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		kvs[r] = &fakeKVS{pm: pm, rank: r}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := &pmiBoot{kv: kvs[r]}
			if cards[r], secrets[r], errs[r] = b.exchange(r, n, []byte("card of "+strconv.Itoa(r))); errs[r] != nil {
				return
			}
			key := func(i int) string { return "x/g/" + strconv.Itoa(i) }
			if gathered[r], errs[r] = b.gather(key, r, n, []byte{byte(10 * r)}); errs[r] != nil {
				return
			}
			errs[r] = b.finalize()
		}()
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if len(secrets[r]) != SecretLen || !bytes.Equal(secrets[r], secrets[0]) {
			t.Errorf("rank %d: secret %x, rank 0's %x", r, secrets[r], secrets[0])
		}
		for i := range n {
			if want := "card of " + strconv.Itoa(i); string(cards[r][i]) != want {
				t.Errorf("rank %d: card %d = %q, want %q", r, i, cards[r][i], want)
			}
			if !bytes.Equal(gathered[r][i], []byte{byte(10 * i)}) {
				t.Errorf("rank %d: gathered[%d] = %v", r, i, gathered[r][i])
			}
		}
		if !kvs[r].done {
			t.Errorf("rank %d: finalize did not reach the process manager", r)
		}
	}
	if bytes.Equal(secrets[0], make([]byte, SecretLen)) {
		t.Error("the secret is all zeros")
	}
	b := &pmiBoot{kv: kvs[1]}
	if err := b.abort("rank 1: boom"); err != nil || kvs[1].aborted != "1: rank 1: boom" {
		t.Errorf("abort: %v, process manager got %q", err, kvs[1].aborted)
	}
	if err := b.abortCode(7, "rank 1: abort (code 7)"); err != nil || kvs[1].aborted != "7: rank 1: abort (code 7)" {
		t.Errorf("abortCode: %v, process manager got %q", err, kvs[1].aborted)
	}
}

// A secret of the wrong length (a foreign or corrupted key-value space) is
// refused.
func TestPMIBootRefusesMalformedSecret(t *testing.T) {
	pm := newFakePM(2)
	pm.store["0/"+pmiSecretKey] = []byte("short")
	pm.store["0/"+pmiCardKey(0)] = []byte("c0")
	k := &fakeKVS{pm: pm, rank: 1}
	go func() { (&fakeKVS{pm: pm, rank: 0}).Fence() }()
	_, _, err := (&pmiBoot{kv: k}).exchange(1, 2, []byte("c1"))
	if err == nil || !strings.Contains(err.Error(), "malformed "+pmiSecretKey) {
		t.Fatalf("got %v, want a malformed-secret error", err)
	}
}
