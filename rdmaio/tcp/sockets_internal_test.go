package tcp

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/rdmaiotest"
)

// TestUDPReceiveBuffer: the UDP socket gets the receive buffer of option
// udp_rcvbuf, beyond net.core.rmem_max when the process may force it.
func TestUDPReceiveBuffer(t *testing.T) {
	kernelDefault := sysctlInt(t, "net/core/rmem_default")
	want := max(DefaultUDPRcvBuf, 4*kernelDefault)
	d, err := Open(rdmaio.Config{Job: "rcvbuf", Options: map[string]string{"udp_rcvbuf": strconv.Itoa(want)}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := unix.GetsockoptInt(d.ufd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		// Without CAP_NET_ADMIN the kernel caps the request at rmem_max:
		// only the fallback can be checked.
		t.Logf("not root: SO_RCVBUF is %d (asked %d, capped at net.core.rmem_max)", got, want)
		return
	}
	if got < want { // the kernel reports twice what was set (bookkeeping)
		t.Errorf("SO_RCVBUF is %d, want at least %d", got, want)
	}
	// Option 0 leaves the kernel's default.
	d0, err := Open(rdmaio.Config{Job: "rcvbuf0", Options: map[string]string{"udp_rcvbuf": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d0.Close()
	if got, err := unix.GetsockoptInt(d0.ufd, unix.SOL_SOCKET, unix.SO_RCVBUF); err != nil || got >= want {
		t.Errorf("udp_rcvbuf=0: SO_RCVBUF %d (%v), want the kernel default", got, err)
	}
}

// TestSleepAllocs: a Wait that sleeps (here: until its sleep bound passes,
// with nothing to complete) allocates nothing.
func TestSleepAllocs(t *testing.T) {
	d, err := Open(rdmaio.Config{Job: "sleep", Options: map[string]string{"spin": "0s", "yield": "0s", "sleep": "20us"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	wc := make([]rdmaio.WorkCompletion, 4)
	ctx := context.Background()
	sleep := func() {
		if n, err := c.(*cq).sleep(ctx, wc, d.opt.policy.Sleep); n != 0 || err != nil {
			t.Fatalf("sleep: %d, %v", n, err)
		}
	}
	for range 10 {
		sleep()
	}
	if n := testing.AllocsPerRun(200, sleep); n != 0 {
		t.Errorf("%v allocations per sleep", n)
	}
	// A Wait with a deadline sleeps through the same path.
	tctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(tctx, wc); err != context.DeadlineExceeded {
		t.Errorf("Wait: %v, want the deadline", err)
	}
}

// TestDialerSpeaksFirst: the dialer sends its greeting as soon as TCP's
// handshake completes, before the acceptor says anything, so that a lost
// final ACK of that handshake is repaired by the dialer's retransmission.
func TestDialerSpeaksFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := Open(rdmaio.Config{Job: "greet", Options: map[string]string{"connect_timeout": "2s"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, greetingLen)
		n, _ := io.ReadFull(c, b)
		got <- b[:n]
	}()
	pa := &peerAddr{rank: 1, devID: 9, tcp: netip.MustParseAddrPort(ln.Addr().String())}
	if _, err := d.dial(pa, 1, 2); err == nil {
		t.Fatalf("dial to a listener that never answers succeeded")
	}
	b := <-got
	if decodeGreeting(b) != nil {
		t.Fatalf("the dialer's first bytes: %q, want the greeting", b)
	}
}

// TestRCSendBuffer: both ends of an RC connection get the send buffer of
// option sndbuf (DefaultSndBuf without it), which the kernel doubles and
// caps at net.core.wmem_max; a negative size is refused.
func TestRCSendBuffer(t *testing.T) {
	wmemMax := sysctlInt(t, "net/core/wmem_max")
	for _, tt := range []struct {
		opt  string
		want int
	}{{"", DefaultSndBuf}, {"65536", 65536}} {
		job := "sndbuf-" + tt.opt
		p := rdmaiotest.NewPair(t, func(rank int) (rdmaio.Device, error) {
			cfg := rdmaio.Config{Job: job, Rank: rank, LocalSize: 2}
			if tt.opt != "" {
				cfg.Options = map[string]string{"sndbuf": tt.opt}
			}
			return Open(cfg)
		}, 4096, rdmaio.AccessAll)
		for rank, q := range p.RC {
			q := q.(*qp)
			q.mu.Lock()
			fd := q.conn.fd
			q.mu.Unlock()
			got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
			if err != nil {
				t.Fatal(err)
			}
			if want := 2 * min(tt.want, wmemMax); got != want {
				t.Errorf("sndbuf %q: rank %d's SO_SNDBUF is %d, want %d", tt.opt, rank, got, want)
			}
		}
	}
	if d, err := Open(rdmaio.Config{Job: "sndbuf-neg", Options: map[string]string{"sndbuf": "-1"}}); err == nil {
		d.Close()
		t.Error("sndbuf=-1 accepted")
	}
}

// sysctlInt reads the integer kernel setting name (a path below
// /proc/sys).
func sysctlInt(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}
