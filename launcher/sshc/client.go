package sshc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// Client is one SSH connection to a host, kept alive with keepalives. Any
// number of sessions (remote commands, copies) can run on it at once, up to
// the server's MaxSessions (OpenSSH's default is 10).
type Client struct {
	host   string
	target *Target
	ssh    *ssh.Client
	rx     *rxConn       // the connection under ssh, counting what arrives
	hops   []*ssh.Client // jump host connections, innermost last

	done      chan struct{}
	closeOnce sync.Once
	mu        sync.Mutex
	err       error // why the connection ended; nil for Close
	closed    bool  // Close was called
}

// Dial connects to host (an ssh_config alias or an address, optionally
// [user@]host[:port]) through its ProxyJump hosts, checks its host key,
// logs in and starts keepalives. Each hop's TCP connect and SSH handshake
// together are bounded by the configured timeout, and ctx can cancel the
// whole dial. Errors name the host: "host jh2: ssh handshake: …".
func Dial(ctx context.Context, host string, cfg *Config) (*Client, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	t, err := cfg.Resolve(host)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	return dialTarget(ctx, host, t, cfg)
}

// DialTarget is Dial for a target already resolved with cfg.Resolve.
func DialTarget(ctx context.Context, t *Target, cfg *Config) (*Client, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	return dialTarget(ctx, t.Alias, t, cfg)
}

// dialTarget dials t; name is the host's name in messages.
func dialTarget(ctx context.Context, name string, t *Target, cfg *Config) (*Client, error) {
	var hops []*ssh.Client
	closeHops := func() {
		for i := len(hops) - 1; i >= 0; i-- {
			hops[i].Close()
		}
	}
	var prev *ssh.Client
	for _, hop := range t.Jumps {
		c, _, err := dialHop(ctx, cfg, hop, prev)
		if err != nil {
			closeHops()
			return nil, fmt.Errorf("host %s: via jump host %s: %w", name, hop.Alias, err)
		}
		hops = append(hops, c)
		prev = c
	}
	sc, rx, err := dialHop(ctx, cfg, t, prev)
	if err != nil {
		closeHops()
		return nil, fmt.Errorf("host %s: %w", name, err)
	}
	c := &Client{host: name, target: t, ssh: sc, rx: rx, hops: hops, done: make(chan struct{})}
	go c.watch()
	interval, count := cfg.KeepaliveInterval, cfg.KeepaliveCountMax
	if interval == 0 {
		interval = DefaultKeepaliveInterval
	}
	if count <= 0 {
		count = DefaultKeepaliveCountMax
	}
	if interval > 0 {
		go c.keepalive(interval, count)
	}
	return c, nil
}

// rxConn counts the bytes read from a connection: anything arriving shows
// that the peer is alive, as an answer to a keepalive does.
type rxConn struct {
	net.Conn
	n atomic.Uint64
}

func (c *rxConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.n.Add(uint64(n))
	}
	return n, err
}

// dialHop opens the TCP connection to t (directly, or through prev as a
// direct-tcpip channel) and runs the SSH handshake under a deadline. It
// returns the client and the connection under it.
func dialHop(ctx context.Context, cfg *Config, t *Target, prev *ssh.Client) (*ssh.Client, *rxConn, error) {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = t.ConnectTimeout
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	ctxBound := false // ctx's deadline comes first: report it as ctx's
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ctxBound = d, true
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	lg, err := cfg.newLogin(t)
	if err != nil {
		return nil, nil, err
	}
	defer lg.close()

	addr := t.Addr()
	var conn net.Conn
	if prev == nil {
		var d net.Dialer
		conn, err = d.DialContext(dctx, "tcp", addr)
	} else {
		conn, err = prev.DialContext(dctx, "tcp", addr)
	}
	if err != nil {
		switch {
		case ctx.Err() != nil || (ctxBound && (dctx.Err() != nil || isTimeout(err))):
			return nil, nil, fmt.Errorf("ssh connect to %s: %w", addr, ctxErr(ctx, dctx))
		case dctx.Err() != nil || isTimeout(err):
			return nil, nil, fmt.Errorf("ssh connect to %s: no connection within %v: %w", addr, timeout, err)
		}
		return nil, nil, fmt.Errorf("ssh connect to %s: %w", addr, err)
	}

	// ssh.ClientConfig.Timeout bounds only the TCP connect: without a
	// deadline a host that accepts but never answers (frozen, overloaded)
	// hangs the handshake for many minutes. TCP connections take a
	// deadline; channels through a jump host do not, so they are closed by
	// a timer instead. Cancelling ctx closes the connection too.
	var expired bool
	var mu sync.Mutex
	kill := func() { mu.Lock(); expired = true; mu.Unlock(); conn.Close() }
	stop := context.AfterFunc(ctx, kill)
	if conn.SetDeadline(deadline) != nil { // a channel through a jump host
		timer := time.AfterFunc(time.Until(deadline), kill)
		stopCtx := stop
		stop = func() bool {
			t, c := timer.Stop(), stopCtx()
			return t && c
		}
	}
	config := &ssh.ClientConfig{
		User:              t.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(lg.signers...)},
		HostKeyCallback:   lg.check,
		HostKeyAlgorithms: lg.algos,
		Timeout:           timeout,
	}
	rx := &rxConn{Conn: conn}
	sconn, chans, reqs, err := ssh.NewClientConn(rx, addr, config)
	if err == nil {
		conn.SetDeadline(time.Time{}) // from now on keepalives watch the connection
	}
	stopped := stop()
	mu.Lock()
	timedOut := expired
	mu.Unlock()
	if err == nil && !stopped {
		// The deadline passed just as the handshake finished.
		sconn.Close()
		err = errors.New("connection closed at the deadline")
		timedOut = true
	}
	if err != nil {
		conn.Close()
		switch {
		case lg.refused != nil:
			return nil, nil, fmt.Errorf("ssh handshake: %w", lg.refused)
		case ctx.Err() != nil || (ctxBound && (timedOut || isTimeout(err))):
			return nil, nil, fmt.Errorf("ssh handshake with %s: %w", addr, ctxErr(ctx, dctx))
		case timedOut || isTimeout(err):
			return nil, nil, fmt.Errorf("ssh handshake with %s: no answer within %v (host frozen or overloaded?): %w", addr, timeout, err)
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, nil, fmt.Errorf("ssh handshake: %w", lg.authErr(err))
		}
		return nil, nil, fmt.Errorf("ssh handshake with %s: %w", addr, err)
	}
	return ssh.NewClient(sconn, chans, reqs), rx, nil
}

// ctxErr is the error of ctx when it has ended, else context.DeadlineExceeded
// (dctx ends at ctx's deadline; the connection's deadline may fire first).
func ctxErr(ctx, dctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := dctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// watch waits for the connection to end and closes Done.
func (c *Client) watch() {
	werr := c.ssh.Wait()
	c.mu.Lock()
	if c.err == nil && !c.closed {
		if werr == nil || errors.Is(werr, io.EOF) {
			c.err = fmt.Errorf("host %s: connection closed by the remote side", c.host)
		} else {
			c.err = fmt.Errorf("host %s: connection lost: %w", c.host, werr)
		}
	}
	c.mu.Unlock()
	for i := len(c.hops) - 1; i >= 0; i-- {
		c.hops[i].Close()
	}
	close(c.done)
}

// fail records why the connection is being dropped, then drops it.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err == nil && !c.closed {
		c.err = err
	}
	c.mu.Unlock()
	c.ssh.Close()
}

// keepalive sends a keepalive@openssh.com request every interval. An
// interval in which the request stays unanswered and nothing else arrives
// either counts as missed (as OpenSSH's ServerAliveInterval, which counts
// only silence: a busy peer may answer late behind a stream of data it is
// still sending or acknowledging); after count missed intervals in a row the
// connection is declared dead and closed. The requests are answered (with
// "failure", which is fine) by OpenSSH.
func (c *Client) keepalive(interval time.Duration, count int) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	replies := make(chan error, 1)
	inflight, missed := false, 0
	var since time.Time // since when the peer is silent (roughly)
	var rxSeen uint64   // bytes received by the last tick
	for {
		select {
		case <-c.done:
			return
		case err := <-replies:
			inflight = false
			if err != nil {
				return // the connection is closing; watch reports why
			}
			missed = 0
		case <-tick.C:
			rx := c.rx.n.Load()
			heard := rx != rxSeen
			rxSeen = rx
			if inflight {
				if heard {
					// Not silent: the peer is alive, only slow to answer.
					missed, since = 0, time.Now()
					continue
				}
				if missed++; missed >= count {
					c.fail(fmt.Errorf("host %s: connection lost: no answer to keepalives and nothing received for %v (%d × %v)",
						c.host, time.Since(since).Round(time.Millisecond), count, interval))
					return
				}
				continue
			}
			inflight, since = true, time.Now()
			go func() {
				_, _, err := c.ssh.SendRequest("keepalive@openssh.com", true, nil)
				replies <- err
			}()
		}
	}
}

// Host is the host name the client was dialled with.
func (c *Client) Host() string { return c.host }

// Target is how the host was reached.
func (c *Client) Target() *Target { return c.target }

// SSH is the underlying x/crypto/ssh client, for what this package does not wrap.
func (c *Client) SSH() *ssh.Client { return c.ssh }

// Done is closed when the connection has ended: closed by Close, by the
// remote side, or declared dead by keepalives. Sessions on it end too.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err says why the connection ended: nil while it is up and after Close,
// otherwise an error naming the host ("host jh3: connection lost: no
// answer to keepalives for 4s (3 × 1s)").
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection (and its jump host connections) and waits
// until Done. Remote commands still running are not killed by this; see
// the package documentation.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.ssh.Close()
	})
	<-c.done
	return nil
}
