package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// hangGuard bounds every wait in these tests. It only turns a hang into a
// failure; nothing here measures time against it.
const hangGuard = 2 * time.Minute

// syncBuffer is a bytes.Buffer safe for the server's logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testServer starts a server for a job of size ranks on loopback; it is
// closed when the test ends.
func testServer(t *testing.T, size int, tweak ...func(*ServerConfig)) (*Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg := ServerConfig{
		Size:             size,
		Job:              testJob,
		Secret:           testSecret,
		Addr:             "127.0.0.1:0",
		Logger:           slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		HandshakeTimeout: hangGuard,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), hangGuard)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, s *Server, rank int) *Client {
	t.Helper()
	c, err := Dial(testContext(t), s.Addr(), testJob, rank, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// nextEvent returns the next event of type T from s, skipping others.
func nextEvent[T Event](t *testing.T, s *Server) T {
	t.Helper()
	timeout := time.After(hangGuard)
	for {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				var zero T
				t.Fatalf("events closed while waiting for %T", zero)
			}
			if e, ok := ev.(T); ok {
				return e
			}
		case <-timeout:
			var zero T
			t.Fatalf("no %T event", zero)
		}
	}
}

// waitDone waits until c's connection is gone and returns c.Err().
func waitDone(t *testing.T, c *Client) error {
	t.Helper()
	select {
	case <-c.Done():
		return c.Err()
	case <-time.After(hangGuard):
		t.Fatal("client never noticed the end of its connection")
		return nil
	}
}

func TestServerPutFenceFinalize(t *testing.T) {
	s, _ := testServer(t, 3)
	ctx := testContext(t)
	var wg sync.WaitGroup
	results := make([][]map[string][]byte, 3)
	errs := make([]error, 3)
	for r := range 3 {
		c := dial(t, s, r)
		wg.Go(func() {
			errs[r] = func() error {
				for epoch := range 3 {
					if epoch < 2 {
						if err := c.Put(fmt.Sprintf("k%d/%d", epoch, r), []byte(fmt.Sprint(epoch*10+r))); err != nil {
							return err
						}
					}
					kv, err := c.Fence(ctx)
					if err != nil {
						return err
					}
					results[r] = append(results[r], kv)
				}
				return c.Finalize()
			}()
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range 3 {
		for epoch, kv := range results[r] {
			want := map[string]string{}
			if epoch < 2 {
				for i := range 3 {
					want[fmt.Sprintf("k%d/%d", epoch, i)] = fmt.Sprint(epoch*10 + i)
				}
			}
			if got := fmt.Sprint(stringMap(kv)); got != fmt.Sprint(want) {
				t.Errorf("rank %d epoch %d: got %s, want %v", r, epoch, got, want)
			}
		}
	}
	nextEvent[AllFinalized](t, s)
}

func stringMap(kv map[string][]byte) map[string]string {
	out := make(map[string]string, len(kv))
	for k, v := range kv {
		out[k] = string(v)
	}
	return out
}

func TestServerReportsEventsInOrder(t *testing.T) {
	s, _ := testServer(t, 1)
	c := dial(t, s, 0)
	if _, err := c.Fence(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Finalize(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		select {
		case ev := <-s.Events():
			got = append(got, fmt.Sprintf("%T", ev))
		case <-time.After(hangGuard):
			t.Fatalf("events so far: %v", got)
		}
	}
	want := "[rendezvous.Connected rendezvous.FenceDone rendezvous.Finalized rendezvous.AllFinalized]"
	if fmt.Sprint(got) != want {
		t.Errorf("events %v, want %s", got, want)
	}
}

func TestWrongSecretIsRefusedWithReason(t *testing.T) {
	s, logs := testServer(t, 2)
	_, err := Dial(testContext(t), s.Addr(), testJob, 0, otherSecret)
	want := fmt.Sprintf("rendezvous %s: refused: authentication failed (wrong job secret)", s.Addr())
	if err == nil || err.Error() != want {
		t.Fatalf("Dial with the wrong secret: %v, want %s", err, want)
	}
	if !errors.Is(err, ErrRefused) {
		t.Errorf("%v does not wrap ErrRefused", err)
	}
	ev := nextEvent[Refused](t, s)
	if ev.Reason != "authentication failed (wrong job secret)" || !strings.HasPrefix(ev.Remote, "127.0.0.1:") {
		t.Errorf("event %+v", ev)
	}
	if l := logs.String(); !strings.Contains(l, "connection refused") || !strings.Contains(l, "wrong job secret") {
		t.Errorf("the refusal was not logged:\n%s", l)
	}
	// The rank can still connect with the right secret.
	dial(t, s, 0)
}

func TestWrongJobIsRefusedWithReason(t *testing.T) {
	s, _ := testServer(t, 2)
	_, err := Dial(testContext(t), s.Addr(), "job-7", 0, testSecret)
	want := fmt.Sprintf(`rendezvous %s: refused: authentication failed (wrong job ID "job-7")`, s.Addr())
	if err == nil || err.Error() != want {
		t.Fatalf("Dial with the wrong job: %v, want %s", err, want)
	}
	nextEvent[Refused](t, s)
}

func TestSecondConnectionForARankIsRefused(t *testing.T) {
	s, _ := testServer(t, 2)
	dial(t, s, 1)
	_, err := Dial(testContext(t), s.Addr(), testJob, 1, testSecret)
	if err == nil || !strings.HasSuffix(err.Error(), "refused: rank 1 already connected") {
		t.Fatalf("second Dial for rank 1: %v", err)
	}
	_, err = Dial(testContext(t), s.Addr(), testJob, 2, testSecret)
	if err == nil || !strings.HasSuffix(err.Error(), "refused: rank 2 out of range [0, 2)") {
		t.Fatalf("Dial for rank 2 of 2: %v", err)
	}
}

func TestSilentConnectionIsDroppedAfterHandshakeTimeout(t *testing.T) {
	s, logs := testServer(t, 1, func(c *ServerConfig) { c.HandshakeTimeout = 100 * time.Millisecond })
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ev := nextEvent[Refused](t, s)
	if !strings.Contains(ev.Reason, "handshake not completed within 100ms") {
		t.Errorf("event %+v", ev)
	}
	// The server has closed the connection: after the challenge, EOF.
	nc.SetReadDeadline(time.Now().Add(hangGuard))
	if body, err := readFrame(nc, nil, maxHandshakeFrame); err != nil || body[0] != typeChallenge {
		t.Fatalf("first frame: %v", err)
	}
	if _, err := readFrame(nc, nil, maxHandshakeFrame); err == nil {
		t.Fatal("the silent connection is still open")
	}
	if !strings.Contains(logs.String(), "handshake not completed") {
		t.Errorf("the timeout was not logged:\n%s", logs)
	}
	// The server still serves.
	dial(t, s, 0)
}

func TestOversizedHandshakeFrameIsRefused(t *testing.T) {
	s, _ := testServer(t, 1)
	nc, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.Write([]byte{0x01, 0, 0, 0, typeHello}) // a 16 MiB hello
	ev := nextEvent[Refused](t, s)
	want := fmt.Sprintf("bad hello: malformed frame: frame of %d bytes exceeds the limit of %d bytes", 1<<24, maxHandshakeFrame)
	if ev.Reason != want {
		t.Errorf("event %+v, want reason %q", ev, want)
	}
	nc.SetReadDeadline(time.Now().Add(hangGuard))
	readFrame(nc, nil, maxHandshakeFrame) // the challenge
	body, err := readFrame(nc, nil, maxHandshakeFrame)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := decodeMessage(body); err != nil || describe(m) != fmt.Sprintf("refused %q", want) {
		t.Errorf("the server answered %v %v", m, err)
	}
}

func TestClientNoticesServerClose(t *testing.T) {
	s, _ := testServer(t, 2)
	c := dial(t, s, 0)
	s.Close()
	err := waitDone(t, c)
	if !errors.Is(err, ErrServerClosed) || !strings.Contains(err.Error(), "rendezvous server closed") {
		t.Errorf("Err after the server closed: %v", err)
	}
	if _, err := c.Fence(testContext(t)); err == nil {
		t.Error("Fence after the server closed succeeded")
	}
}

func TestClientNoticesLauncherDeath(t *testing.T) {
	// A bare listener stands in for a launcher that dies mid-job.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		var nonce [NonceLen]byte
		nc.Write(encodeFrame(&challengeMsg{version: Version, nonce: nonce}))
		readFrame(nc, nil, maxHandshakeFrame)
		nc.Write(encodeFrame(&welcomeMsg{size: 1}))
		// and die
	}()
	c, err := Dial(testContext(t), ln.Addr().String(), testJob, 0, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = waitDone(t, c)
	if err == nil || !strings.Contains(err.Error(), "connection to the server lost") {
		t.Errorf("Err: %v", err)
	}
}

func TestLostRankFailsTheJob(t *testing.T) {
	s, _ := testServer(t, 3)
	c0, c1, c2 := dial(t, s, 0), dial(t, s, 1), dial(t, s, 2)
	if err := c2.Finalize(); err != nil {
		t.Fatal(err)
	}
	c0.Close() // rank 0 goes away without finalizing
	lost := nextEvent[Lost](t, s)
	if lost.Rank != 0 || !errors.Is(lost.Err, errPeerClosed) {
		t.Errorf("lost %+v", lost)
	}
	err := waitDone(t, c1)
	if !errors.Is(err, ErrServerClosed) || !strings.Contains(err.Error(), "job failed: rank 0 lost: connection closed by the peer") {
		t.Errorf("rank 1: %v", err)
	}
	if _, err := Dial(testContext(t), s.Addr(), testJob, 0, testSecret); !errors.Is(err, ErrRefused) {
		t.Errorf("Dial after the job failed: %v", err)
	}
}

func TestAbortReachesEveryRank(t *testing.T) {
	s, _ := testServer(t, 3)
	c0, c1, c2 := dial(t, s, 0), dial(t, s, 1), dial(t, s, 2)
	fenceErr := make(chan error, 1)
	go func() {
		_, err := c0.Fence(testContext(t))
		fenceErr <- err
	}()
	if err := c1.Abort(3, "bad input"); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	ev := nextEvent[Abort](t, s)
	if ev != (Abort{Rank: 1, Code: 3, Message: "bad input"}) {
		t.Errorf("event %+v", ev)
	}
	for _, c := range []*Client{c0, c2} {
		var ae *AbortError
		if err := waitDone(t, c); !errors.As(err, &ae) || *ae != (AbortError{Rank: 1, Code: 3, Message: "bad input"}) {
			t.Errorf("Err: %v", err)
		}
	}
	if err := <-fenceErr; err == nil || !strings.Contains(err.Error(), "job aborted by rank 1 (code 3): bad input") {
		t.Errorf("Fence during the abort: %v", err)
	}
}

func TestFenceCancelledThenResumed(t *testing.T) {
	s, _ := testServer(t, 2)
	c0, c1 := dial(t, s, 0), dial(t, s, 1)
	if err := c0.Put("a", []byte("0")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	if _, err := c0.Fence(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Fence with a cancelled context: %v", err)
	}
	if err := c0.Put("b", nil); err == nil {
		t.Error("Put while rank 0 is still in the fence succeeded")
	}
	if err := c0.Finalize(); err == nil {
		t.Error("Finalize while rank 0 is still in the fence succeeded")
	}
	done := make(chan error, 1)
	go func() {
		kv, err := c1.Fence(testContext(t))
		if err == nil && string(kv["a"]) != "0" {
			err = fmt.Errorf("rank 1 got %v", stringMap(kv))
		}
		done <- err
	}()
	kv, err := c0.Fence(testContext(t)) // waits for the same fence, does not join another
	if err != nil || string(kv["a"]) != "0" || len(kv) != 1 {
		t.Fatalf("resumed Fence: %v %v", stringMap(kv), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Client{c0, c1} {
		if err := c.Finalize(); err != nil {
			t.Fatal(err)
		}
	}
	nextEvent[AllFinalized](t, s)
}

func TestClientChecksArguments(t *testing.T) {
	s, _ := testServer(t, 1)
	ctx := testContext(t)
	if _, err := Dial(ctx, s.Addr(), testJob, 0, testSecret[:8]); err == nil {
		t.Error("Dial with a short secret succeeded")
	}
	if _, err := Dial(ctx, s.Addr(), "", 0, testSecret); err == nil {
		t.Error("Dial with no job succeeded")
	}
	if _, err := Dial(ctx, s.Addr(), testJob, -1, testSecret); err == nil {
		t.Error("Dial as rank -1 succeeded")
	}
	c := dial(t, s, 0)
	if err := c.Put("", []byte("v")); err == nil {
		t.Error("Put with an empty key succeeded")
	}
	if err := c.Put(strings.Repeat("k", MaxKeyLen+1), nil); err == nil {
		t.Error("Put with a long key succeeded")
	}
	if err := c.Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := c.Put("k", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Finalize: %v", err)
	}
	if err := c.Finalize(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Finalize: %v", err)
	}
}

func TestDialHonoursContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(testContext(t), 50*time.Millisecond)
	defer cancel()
	_, err = Dial(ctx, ln.Addr().String(), testJob, 0, testSecret)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "rendezvous "+ln.Addr().String()+": ") {
		t.Errorf("Dial to a silent server: %v", err)
	}
}

func TestServerCloseLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := NewServer(ServerConfig{Size: 4, Job: testJob, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	var clients []*Client
	for r := range 3 { // rank 3 never comes: rank 0's fence stays open
		c, err := Dial(ctx, s.Addr(), testJob, r, testSecret)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	go clients[0].Fence(ctx)
	silent, err := net.Dial("tcp", s.Addr()) // a connection in its handshake
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range s.Events() { // Close has closed the channel
	}
	for _, c := range clients {
		waitDone(t, c)
		c.Close()
	}
	silent.Close()
	deadline := time.Now().Add(hangGuard)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// raiseFDLimit makes sure the process may open n file descriptors.
func raiseFDLimit(t *testing.T, n uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	lim.Cur = min(max(n, lim.Cur), lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < n {
		t.Skipf("need %d file descriptors, the limit is %d (%v)", n, lim.Cur, err)
	}
}

// card returns rank r's ~200-byte endpoint card.
func card(r int) []byte {
	b := fmt.Appendf(nil, "rank=%d host=node%03d tcp=10.0.%d.%d:%d udp=10.0.%d.%d:%d ", r, r/16, r/256, r%256, 40000+r, r/256, r%256, 50000+r)
	for len(b) < 200 {
		b = append(b, byte('a'+(r+len(b))%26))
	}
	return b
}

// TestThousandRanksExchangeCards runs 1024 clients in this process against
// one server: each puts a ~200-byte card, fences, checks that it holds all
// 1024 cards exactly, and finalizes.
func TestThousandRanksExchangeCards(t *testing.T) {
	const n = 1024
	if testing.Short() {
		t.Skip("1024 connections in -short mode")
	}
	raiseFDLimit(t, 2*n+256)
	// 1024 clients in one process (under the race detector, on a loaded
	// machine) may leave a client's reader goroutine unscheduled for longer
	// than a real rank process would ever be: the acknowledgement bound is
	// for a server that died, not for this test's own starvation.
	defer func(d time.Duration) { ackTimeout = d }(ackTimeout)
	ackTimeout = 5 * time.Minute
	s, _ := testServer(t, n)
	ctx := testContext(t)
	cards := make([][]byte, n)
	keys := make([]string, n)
	for r := range cards {
		cards[r] = card(r)
		keys[r] = fmt.Sprintf("card/%d", r)
	}
	start := time.Now()
	var fenced time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r := range n {
		wg.Go(func() {
			c, err := Dial(ctx, s.Addr(), testJob, r, testSecret)
			if err != nil {
				errs <- fmt.Errorf("rank %d: %w", r, err)
				return
			}
			defer c.Close()
			if err := c.Put(keys[r], cards[r]); err != nil {
				errs <- fmt.Errorf("rank %d: %w", r, err)
				return
			}
			kv, err := c.Fence(ctx)
			if err != nil {
				errs <- fmt.Errorf("rank %d: %w", r, err)
				return
			}
			mu.Lock()
			fenced = max(fenced, time.Since(start))
			mu.Unlock()
			if len(kv) != n {
				errs <- fmt.Errorf("rank %d: %d cards, want %d", r, len(kv), n)
				return
			}
			for i, key := range keys {
				if !bytes.Equal(kv[key], cards[i]) {
					errs <- fmt.Errorf("rank %d: card of rank %d is %q, want %q", r, i, kv[key], cards[i])
					return
				}
			}
			if err := c.Finalize(); err != nil {
				errs <- fmt.Errorf("rank %d: %w", r, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	var connected, finalized int
	var done FenceDone
events:
	for {
		select {
		case ev := <-s.Events():
			switch ev := ev.(type) {
			case Connected:
				connected++
			case FenceDone:
				done = ev
			case Finalized:
				finalized++
			case AllFinalized:
				break events
			default:
				t.Errorf("unexpected event %v", ev)
			}
		case <-time.After(hangGuard):
			t.Fatal("no AllFinalized event")
		}
	}
	if connected != n || finalized != n || done.Keys != n {
		t.Errorf("%d connected, %d finalized, fence of %d keys; want %d of each", connected, finalized, done.Keys, n)
	}
	t.Logf("%d ranks: all fenced after %v, all finalized after %v; fence result %d bytes", n, fenced.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), done.Bytes)
}

// TestEventsAreNotLostWhenTheOwnerIsSlow checks that the server queues
// events without bound while nobody reads them.
func TestEventsAreNotLostWhenTheOwnerIsSlow(t *testing.T) {
	const n = 3 * eventBuffer
	s, _ := testServer(t, n)
	ctx := testContext(t)
	for r := range n {
		c, err := Dial(ctx, s.Addr(), testJob, r, testSecret)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Finalize(); err != nil {
			t.Fatal(err)
		}
	}
	for r := range n {
		if ev := nextEvent[Finalized](t, s); ev.Rank != r {
			t.Fatalf("event %v, want rank %d finalized", ev, r)
		}
	}
	nextEvent[AllFinalized](t, s)
}

var _ io.Closer = (*Server)(nil)
var _ io.Closer = (*Client)(nil)
