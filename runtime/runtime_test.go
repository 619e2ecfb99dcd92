package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jiarun/jia/runtime/peerauth"
	"github.com/jiarun/jia/runtime/rendezvous"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestContractSingletonWithoutEnvironment(t *testing.T) {
	c, err := ContractFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Singleton() || c.Rank != 0 || c.Size != 1 {
		t.Fatalf("got %+v, want singleton rank 0 of 1", c)
	}
}

func TestContractRoundTrip(t *testing.T) {
	want := Contract{Rank: 3, Size: 8, LocalRank: 1, LocalSize: 4, Job: "j1", Rendezvous: "127.0.0.1:9",
		Secret: bytes.Repeat([]byte{7}, SecretLen), Host: "node1", Config: "[log]\nlevel = \"info\"\n"}
	m := map[string]string{}
	for _, kv := range want.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	got, err := ContractFromEnv(env(m))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestContractErrorsNameTheVariable(t *testing.T) {
	good := map[string]string{EnvRank: "1", EnvSize: "2", EnvLocalRank: "0", EnvLocalSize: "1",
		EnvJob: "j", EnvRendezvous: "127.0.0.1:1", EnvSecret: strings.Repeat("00", SecretLen)}
	for _, c := range []struct{ key, val, want string }{
		{EnvRank, "x", "JIA_RANK"},
		{EnvRank, "2", "JIA_RANK=2 is not below JIA_SIZE=2"},
		{EnvSize, "0", "JIA_SIZE"},
		{EnvLocalRank, "1", "JIA_LOCAL_RANK=1 is not below JIA_LOCAL_SIZE=1"},
		{EnvJob, "", "JIA_JOB is not set"},
		{EnvSecret, "abc", "JIA_SECRET is not 32 hex-encoded bytes"},
	} {
		m := map[string]string{}
		for k, v := range good {
			m[k] = v
		}
		m[c.key] = c.val
		_, err := ContractFromEnv(env(m))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%q: error %v, want it to mention %q", c.key, c.val, err, c.want)
		}
	}
}

func TestCardRoundTripAndCorruption(t *testing.T) {
	c := Card{Rank: 5, Host: "node7", TCP: "10.0.0.1:4000", UDP: "10.0.0.1:4001",
		Providers: map[string][]byte{"shm": []byte("seg"), "tcp": {1, 2, 3}}}
	b, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Card
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(c) {
		t.Fatalf("got %+v, want %+v", got, c)
	}
	for i := 0; i < len(b); i++ {
		var x Card
		if err := x.UnmarshalBinary(b[:i]); err == nil {
			t.Fatalf("truncated card of %d bytes decoded", i)
		}
	}
	if err := got.UnmarshalBinary(append(b, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

// startJob runs a rendezvous server and n ranks in this process.
func startJob(t *testing.T, n int) []*Runtime {
	t.Helper()
	secret := make([]byte, SecretLen)
	rand.Read(secret)
	srv, err := rendezvous.NewServer(rendezvous.ServerConfig{Size: n, Job: "jt", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	go func() {
		for range srv.Events() {
		}
	}()
	rts := make([]*Runtime, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := Contract{Rank: i, Size: n, LocalRank: i, LocalSize: n, Job: "jt", Rendezvous: srv.Addr(), Secret: secret, Host: "h"}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rts[i], errs[i] = InitContract(ctx, c, env(nil))
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	return rts
}

func TestRanksExchangeCardsAndBytes(t *testing.T) {
	const n = 4
	rts := startJob(t, n)
	for i, r := range rts {
		if len(r.Cards()) != n {
			t.Fatalf("rank %d has %d cards", i, len(r.Cards()))
		}
		for j, c := range r.Cards() {
			if c.Rank != j || c.TCP == "" || c.UDP == "" {
				t.Fatalf("rank %d: card %d is %+v", i, j, c)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, r := range rts {
		wg.Add(1)
		go func(r *Runtime) {
			defer wg.Done()
			me := r.Rank()
			for round := 0; round < 3; round++ {
				msg := []byte(fmt.Sprintf("%d→%d #%d", me, (me+1)%n, round))
				if err := r.SendBytes((me+1)%n, msg); err != nil {
					errs <- err
					return
				}
				got, err := r.RecvBytes((me + n - 1) % n)
				if err != nil {
					errs <- err
					return
				}
				if want := fmt.Sprintf("%d→%d #%d", (me+n-1)%n, me, round); string(got) != want {
					errs <- fmt.Errorf("rank %d got %q, want %q", me, got, want)
					return
				}
			}
			if err := r.Fence(context.Background()); err != nil {
				errs <- err
			}
		}(r)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, r := range rts {
		if err := r.Finalize(); err != nil {
			t.Error(err)
		}
		if err := r.SendBytes(0, nil); err == nil || !strings.Contains(err.Error(), "after Finalize") {
			t.Errorf("send after finalize: %v", err)
		}
	}
}

func TestInvalidPeerRank(t *testing.T) {
	rts := startJob(t, 2)
	defer func() {
		for _, r := range rts {
			r.Finalize()
		}
	}()
	if err := rts[0].SendBytes(2, []byte("x")); err == nil || !strings.Contains(err.Error(), "invalid destination rank 2") {
		t.Errorf("send to rank 2 of 2: %v", err)
	}
	if _, err := rts[0].RecvBytes(-1); err == nil || !strings.Contains(err.Error(), "invalid source rank -1") {
		t.Errorf("recv from rank -1: %v", err)
	}
}

// TestPeerRefusesWrongSecret checks that a connection to a rank's port that
// cannot prove the job secret is refused and cannot deliver data.
func TestPeerRefusesWrongSecret(t *testing.T) {
	rts := startJob(t, 2)
	defer func() {
		for _, r := range rts {
			r.Finalize()
		}
	}()
	// An impostor that knows the job and ranks but not the secret.
	wrong := peerauth.Params{Proto: peerProto, Secret: bytes.Repeat([]byte{1}, SecretLen), Job: "jt", Timeout: 5 * time.Second}
	_, err := peerauth.Dial(rts[0].Cards()[0].TCP, wrong, 1, 0, "a jia rank")
	if err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("dial with the wrong secret: %v", err)
	}
	// A plain TCP client that speaks garbage is dropped too.
	c, err := net.Dial("tcp", rts[0].Cards()[0].TCP)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(bytes.Repeat([]byte{0xff}, 100))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	var total int
	for {
		n, err := c.Read(buf)
		total += n
		if err != nil {
			break
		}
	}
	c.Close()
	// The real rank 1 still gets through.
	if err := rts[1].SendBytes(0, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	got, err := rts[0].RecvBytes(1)
	if err != nil || string(got) != "ok" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestExchangeGathersEveryRanksValue(t *testing.T) {
	const n = 3
	rts := startJob(t, n)
	var wg sync.WaitGroup
	for _, r := range rts {
		wg.Add(1)
		go func(r *Runtime) {
			defer wg.Done()
			for round := 0; round < 2; round++ {
				vals, err := r.Exchange(context.Background(), "pager", []byte(fmt.Sprintf("addr-%d-%d", r.Rank(), round)))
				if err != nil {
					t.Error(err)
					return
				}
				for i, v := range vals {
					if want := fmt.Sprintf("addr-%d-%d", i, round); string(v) != want {
						t.Errorf("rank %d round %d: value of rank %d is %q, want %q", r.Rank(), round, i, v, want)
					}
				}
			}
		}(r)
	}
	wg.Wait()
	for _, r := range rts {
		r.Finalize()
	}
}
