package tcp_test

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/jiarun/jia/rdmaio"
	"github.com/jiarun/jia/rdmaio/tcp"
)

// endpoint is one rank of the tests below: a device, a CQ, an RC QP and a
// buffer.
type endpoint struct {
	dev rdmaio.Device
	pd  rdmaio.PD
	cq  rdmaio.CQ
	qp  rdmaio.QP
	buf rdmaio.MR
}

func openEndpoint(t testing.TB, cfg rdmaio.Config) *endpoint {
	t.Helper()
	e := &endpoint{}
	var err error
	if e.dev, err = rdmaio.Open(tcp.Name, cfg); err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { e.dev.Close() })
	if e.pd, err = e.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = e.dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.RC, SendCQ: e.cq, RecvCQ: e.cq}); err != nil {
		t.Fatal(err)
	}
	if e.buf, err = e.pd.RegMR(make([]byte, 64), rdmaio.AccessAll); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateInit, Access: rdmaio.AccessRemote}); err != nil {
		t.Fatal(err)
	}
	return e
}

// rtr moves e's QP to RTR towards peer's QP.
func (e *endpoint) rtr(peer *endpoint, addr []byte) error {
	return e.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTR, Dest: rdmaio.AHAttr{Addr: addr}, DestQPN: peer.qp.QPN()})
}

// waitOne waits for one completion.
func (e *endpoint) waitOne(t testing.TB) rdmaio.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wc := make([]rdmaio.WorkCompletion, 1)
	if _, err := e.cq.Wait(ctx, wc); err != nil {
		t.Fatalf("wait: %v", err)
	}
	return wc[0]
}

// connectPair connects a and b; exactly one of the two RTRs dials. It
// returns the errors of both.
func connectPair(a, b *endpoint) (errA, errB error) {
	errA = a.rtr(b, b.dev.Addr())
	errB = b.rtr(a, a.dev.Addr())
	return errA, errB
}

// TestWrongSecret: a device without the job secret cannot connect to one
// that has it, in either direction: the dialing side's RTR fails with
// ErrAuth, the other side's sends fail once the connection does not come.
func TestWrongSecret(t *testing.T) {
	job := newJob()
	opts := map[string]string{"connect_timeout": "300ms"}
	for round := 0; round < 4; round++ {
		a := openEndpoint(t, rdmaio.Config{Job: job, Rank: 0, Secret: testSecret, Options: opts})
		b := openEndpoint(t, rdmaio.Config{Job: job, Rank: 1, Secret: []byte("not the secret"), Options: opts})
		errA, errB := connectPair(a, b)
		if (errA == nil) == (errB == nil) {
			t.Fatalf("RTR errors %v and %v: want exactly one (the dialer's)", errA, errB)
		}
		err, waiter := errA, b
		if err == nil {
			err, waiter = errB, a
		}
		if !errors.Is(err, tcp.ErrAuth) {
			t.Fatalf("RTR of the dialer: %v, want ErrAuth", err)
		}
		if err := waiter.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite}); err != nil {
			t.Fatal(err)
		}
		if _, err := waiter.qp.PostSend([]rdmaio.SendWR{{ID: 5, Opcode: rdmaio.OpSend, Inline: []byte("x"), Flags: rdmaio.SendSignaled}}); err != nil {
			t.Fatal(err)
		}
		if c := waiter.waitOne(t); c.ID != 5 || c.Status != rdmaio.StatusRetryExcErr {
			t.Fatalf("send without a connection: %+v", c)
		}
	}
}

// TestOtherJob: an address of another job is refused before connecting;
// a device of another job that forges the job hash of the address is
// refused by the handshake, even with the same secret.
func TestOtherJob(t *testing.T) {
	a := openEndpoint(t, rdmaio.Config{Job: newJob(), Rank: 0, Secret: testSecret})
	b := openEndpoint(t, rdmaio.Config{Job: newJob(), Rank: 1, Secret: testSecret})
	if err := a.rtr(b, b.dev.Addr()); !errors.Is(err, rdmaio.ErrBadAddress) {
		t.Fatalf("RTR to an address of another job: %v", err)
	}
	if _, err := a.pd.CreateAH(rdmaio.AHAttr{Addr: b.dev.Addr()}); !errors.Is(err, rdmaio.ErrBadAddress) {
		t.Fatalf("CreateAH of an address of another job: %v", err)
	}
	// Forge the job hash (bytes 16..24 of the blob) in both directions: the
	// dialer's proof covers the job name, so the acceptor refuses it.
	forge := func(addr, like []byte) []byte {
		f := append([]byte(nil), addr...)
		copy(f[16:24], like[16:24])
		return f
	}
	errA := a.rtr(b, forge(b.dev.Addr(), a.dev.Addr()))
	errB := b.rtr(a, forge(a.dev.Addr(), b.dev.Addr()))
	if errA == nil && errB == nil {
		t.Fatalf("devices of two jobs connected")
	}
	for _, err := range []error{errA, errB} {
		if err != nil && !errors.Is(err, tcp.ErrAuth) {
			t.Fatalf("RTR across jobs: %v, want ErrAuth", err)
		}
	}
}

// TestHostileConnections: connections that send garbage, a hello with a bad
// proof, nothing at all, or that stop half-way are refused or time out
// (a challenge is sent only in answer to a whole greeting);
// the device keeps serving its peers and leaks nothing.
func TestHostileConnections(t *testing.T) {
	before := runtime.NumGoroutine()
	job := newJob()
	opts := map[string]string{"connect_timeout": "200ms"}
	a := openEndpoint(t, rdmaio.Config{Job: job, Rank: 0, Secret: testSecret, Options: opts})
	b := openEndpoint(t, rdmaio.Config{Job: job, Rank: 1, Secret: testSecret, Options: opts})
	target := a.dev.(*tcp.Device).ListenAddr().String()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", target)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	readAll := func(c net.Conn) []byte {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		b, _ := io.ReadAll(c)
		return b
	}
	// Garbage instead of a greeting: closed without an answer.
	g := dial()
	junk := make([]byte, 200)
	rand.Read(junk)
	g.Write(junk)
	if got := readAll(g); len(got) != 0 {
		t.Fatalf("garbage greeting: got %d bytes back, want none", len(got))
	}
	g.Close()
	// Garbage instead of a hello: closed after the challenge only.
	g = dial()
	g.Write([]byte("JTCG\x02\x00\x00\x00"))
	g.Write(junk)
	if got := readAll(g); len(got) != 32 {
		t.Fatalf("garbage hello: got %d bytes back, want only the 32-byte challenge", len(got))
	}
	g.Close()
	// A well-formed hello with a wrong proof: refused with status 1.
	h := dial()
	h.Write([]byte("JTCG\x02\x00\x00\x00"))
	ch := make([]byte, 32)
	if _, err := io.ReadFull(h, ch); err != nil {
		t.Fatal(err)
	}
	hello := make([]byte, 88)
	copy(hello, "JTCH")
	hello[4] = 2
	copy(hello[8:16], ch[8:16]) // "from" device: any
	copy(hello[16:24], ch[8:16])
	hello[28], hello[32] = 1, 1 // QPNs
	h.Write(hello)
	if got := readAll(h); len(got) != 36 || got[0] != 1 {
		t.Fatalf("hello with a bad proof: answer %x", got)
	}
	h.Close()
	// Silent connections and half-sent hellos: dropped at the timeout.
	var idle []net.Conn
	for i := 0; i < 8; i++ {
		c := dial()
		switch i % 3 {
		case 1:
			c.Write([]byte("JTC"))
		case 2:
			c.Write([]byte("JTCG\x02\x00\x00\x00JTCH"))
		}
		idle = append(idle, c)
	}
	// Meanwhile the device serves a real peer.
	if errA, errB := connectPair(a, b); errA != nil || errB != nil {
		t.Fatalf("connect: %v, %v", errA, errB)
	}
	for _, e := range []*endpoint{a, b} {
		if err := e.qp.Modify(rdmaio.QPAttr{State: rdmaio.StateRTS, RNRRetry: rdmaio.RNRRetryInfinite}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.qp.PostRecv([]rdmaio.RecvWR{{ID: 1, SGL: []rdmaio.SGE{rdmaio.MRSGE(b.buf, 0, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.qp.PostSend([]rdmaio.SendWR{{ID: 2, Opcode: rdmaio.OpSend, Inline: []byte("still here"), Flags: rdmaio.SendSignaled}}); err != nil {
		t.Fatal(err)
	}
	if c := b.waitOne(t); c.Status != rdmaio.StatusSuccess || string(b.buf.Bytes()[:c.ByteLen]) != "still here" {
		t.Fatalf("receive after hostile connections: %+v", c)
	}
	for i, c := range idle {
		want := 0 // silent or a partial greeting: no challenge
		if i%3 == 2 {
			want = 32 // greeted, then a partial hello
		}
		if got := readAll(c); len(got) != want {
			t.Fatalf("idle connection %d: got %d bytes before the close, want %d", i, len(got), want)
		}
		c.Close()
	}
	a.dev.Close()
	b.dev.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines before, %d after", before, n)
	}
}

// TestUDOtherSecret: datagrams from a device without the job secret are
// dropped.
func TestUDOtherSecret(t *testing.T) {
	job := newJob()
	open := func(rank int, secret []byte) (rdmaio.Device, rdmaio.PD, rdmaio.CQ, rdmaio.QP) {
		d, err := rdmaio.Open(tcp.Name, rdmaio.Config{Job: job, Rank: rank, Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(64)
		q, err := pd.CreateQP(rdmaio.QPInitAttr{Type: rdmaio.UD, SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []rdmaio.QPState{rdmaio.StateInit, rdmaio.StateRTR, rdmaio.StateRTS} {
			if err := q.Modify(rdmaio.QPAttr{State: s, QKey: 7}); err != nil {
				t.Fatal(err)
			}
		}
		return d, pd, cq, q
	}
	d0, pd0, cq0, u0 := open(0, testSecret)
	_, pd1, cq1, u1 := open(1, testSecret)
	_, pd2, cq2, u2 := open(2, []byte("other"))
	buf, _ := pd0.RegMR(make([]byte, 64), rdmaio.AccessLocalWrite)
	for i := 0; i < 2; i++ {
		if _, err := u0.PostRecv([]rdmaio.RecvWR{{ID: uint64(i), SGL: []rdmaio.SGE{rdmaio.MRSGE(buf, 0, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	wc := make([]rdmaio.WorkCompletion, 4)
	send := func(pd rdmaio.PD, cq rdmaio.CQ, q rdmaio.QP, msg string) {
		ah, err := pd.CreateAH(rdmaio.AHAttr{Addr: d0.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		defer ah.Close()
		if _, err := q.PostSend([]rdmaio.SendWR{{Opcode: rdmaio.OpSend, Inline: []byte(msg), AH: ah, RemoteQPN: u0.QPN(), RemoteQKey: 7, Flags: rdmaio.SendSignaled}}); err != nil {
			t.Fatal(err)
		}
		pollN(t, cq, wc, 1)
	}
	send(pd2, cq2, u2, "intruder")
	send(pd1, cq1, u1, "member")
	var got rdmaio.WorkCompletion
	for n := 0; n == 0; {
		n = cq0.Poll(wc[:1])
		got = wc[0]
	}
	if got.Status != rdmaio.StatusSuccess || string(buf.Bytes()[:got.ByteLen]) != "member" {
		t.Fatalf("first datagram delivered: %+v %q", got, buf.Bytes()[:got.ByteLen])
	}
}

// TestOpenErrors: bad configurations are errors, not panics.
func TestOpenErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  rdmaio.Config
	}{
		{"no job", rdmaio.Config{Rank: 0}},
		{"negative rank", rdmaio.Config{Job: "j", Rank: -1}},
		{"unknown option", rdmaio.Config{Job: "j", Options: map[string]string{"colour": "blue"}}},
		{"bad mtu", rdmaio.Config{Job: "j", Options: map[string]string{"mtu": "10"}}},
		{"bad probability", rdmaio.Config{Job: "j", Options: map[string]string{"ud_drop": "1.5"}}},
		{"bad duration", rdmaio.Config{Job: "j", Options: map[string]string{"spin": "-1s"}}},
		{"bad address", rdmaio.Config{Job: "j", Options: map[string]string{"addr": "256.1.1.1"}}},
		{"address not here", rdmaio.Config{Job: "j", Options: map[string]string{"addr": "192.0.2.1"}}},
		{"bad port", rdmaio.Config{Job: "j", Options: map[string]string{"addr": "127.0.0.1:99999"}}},
	} {
		d, err := rdmaio.Open(tcp.Name, c.cfg)
		if err == nil {
			d.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		t.Logf("%s: %v", c.name, err)
	}
	d, err := rdmaio.Open(tcp.Name, rdmaio.Config{Job: "j", Options: map[string]string{"addr": "[::1]:0", "mtu": "1400"}})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer d.Close()
	if d.Attr().MTU != 1400 || d.(*tcp.Device).ListenAddr().Addr().Is4() {
		t.Fatalf("IPv6 device: attr %+v, address %v", d.Attr(), d.(*tcp.Device).ListenAddr())
	}
}
