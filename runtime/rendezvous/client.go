package rendezvous

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"
)

// Timings of the client.
const (
	// defaultDialTimeout bounds Dial when its context has no deadline.
	defaultDialTimeout = 30 * time.Second

	// keepWriteBuf is the largest write buffer a client keeps between frames.
	keepWriteBuf = 64 << 10
)

// ackTimeout bounds how long Finalize and Abort wait for the server to
// acknowledge them (a variable for tests that starve the process of
// processor time on purpose).
var ackTimeout = 30 * time.Second

// Client is one rank's connection to the rendezvous server. It stays open
// for the rank's whole life, so that the rank notices (Done) when the
// launcher goes away. A Client is safe for concurrent use, but Fence is
// collective: a rank has at most one Fence in progress.
type Client struct {
	addr string
	rank int
	nc   net.Conn
	br   *bufio.Reader
	size int

	wmu  sync.Mutex // serializes writes; guards wbuf
	wbuf []byte

	mu        sync.Mutex
	fencing   bool // a Fence call is in progress
	fenceSent bool // a fence frame was sent and its result not yet received
	finalized bool // Finalize or Abort was called

	results chan map[string][]byte // fence results, in epoch order
	acks    chan struct{}          // finalize acknowledgement
	done    chan struct{}          // closed when the connection is gone
	errOnce sync.Once
	cause   error         // why done was closed; set before closing done
	err     error         // cause with the server's address
	readEnd chan struct{} // closed when the reader goroutine has exited
}

// Dial connects to the rendezvous server at addr and authenticates as rank
// of job with the job's secret. The handshake is bounded by ctx (by 30
// seconds if ctx has no deadline). A refusal by the server is an error
// wrapping ErrRefused that carries the server's reason, for example
//
//	rendezvous 127.0.0.1:4000: refused: authentication failed (wrong job secret)
func Dial(ctx context.Context, addr, job string, rank int, secret []byte) (*Client, error) {
	wrap := func(err error) error { return fmt.Errorf("rendezvous %s: %w", addr, err) }
	switch {
	case len(secret) != SecretLen:
		return nil, wrap(fmt.Errorf("job secret must be %d bytes, have %d", SecretLen, len(secret)))
	case job == "" || len(job) > MaxJobLen:
		return nil, wrap(fmt.Errorf("job ID must be 1 to %d bytes, have %d", MaxJobLen, len(job)))
	case rank < 0 || rank > math.MaxInt32:
		return nil, wrap(fmt.Errorf("rank %d out of range", rank))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultDialTimeout)
		defer cancel()
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, wrap(err)
	}
	c := &Client{
		addr:    addr,
		rank:    rank,
		nc:      nc,
		br:      bufio.NewReader(nc),
		results: make(chan map[string][]byte, 1),
		acks:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		readEnd: make(chan struct{}),
	}
	// The handshake ends when ctx does: its deadline or its cancellation
	// interrupts the reads and writes below.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	err = c.handshake(job, secret)
	if !stop() && err == nil {
		err = fmt.Errorf("handshake: %w", context.Cause(ctx)) // cancelled at the very end
	}
	if cerr := context.Cause(ctx); err != nil && cerr != nil && !errors.Is(err, ErrRefused) {
		err = fmt.Errorf("handshake: %w", cerr) // rather than "i/o timeout"
	}
	if err != nil {
		nc.Close()
		return nil, wrap(err)
	}
	go c.readLoop()
	return c, nil
}

// handshake reads the challenge, answers with the hello and reads the
// verdict.
func (c *Client) handshake(job string, secret []byte) error {
	msg, err := c.readHandshake()
	if err != nil {
		return err
	}
	ch, ok := msg.(*challengeMsg)
	if !ok {
		return fmt.Errorf("handshake: expected challenge, got %s frame", typeName(msg.frameType()))
	}
	if ch.version != Version {
		return fmt.Errorf("handshake: server speaks protocol version %d, this client %d", ch.version, Version)
	}
	ranks := []int{c.rank}
	hello := &helloMsg{version: Version, job: job, ranks: ranks, mac: helloMAC(secret, ch.nonce, job, ranks)}
	if _, err := c.nc.Write(encodeFrame(hello)); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	msg, err = c.readHandshake()
	if err != nil {
		return err
	}
	w, ok := msg.(*welcomeMsg)
	if !ok {
		return fmt.Errorf("handshake: expected welcome, got %s frame", typeName(msg.frameType()))
	}
	c.size = w.size
	return nil
}

// readHandshake reads one handshake frame, turning a refusal into an error.
func (c *Client) readHandshake() (message, error) {
	body, err := readFrame(c.br, nil, maxHandshakeFrame)
	if err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	msg, err := decodeMessage(body)
	if err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if r, ok := msg.(*refusedMsg); ok {
		return nil, fmt.Errorf("%w: %s", ErrRefused, r.reason)
	}
	return msg, nil
}

// readLoop reads the server's frames for the rest of the connection's life.
func (c *Client) readLoop() {
	defer close(c.readEnd)
	for {
		// A fresh buffer per frame: a fence result's values alias it.
		body, err := readFrame(c.br, nil, MaxFrame)
		if err != nil {
			c.fail(fmt.Errorf("connection to the server lost: %w", err))
			return
		}
		msg, err := decodeMessage(body)
		if err != nil {
			c.fail(fmt.Errorf("protocol error: %w", err))
			return
		}
		switch m := msg.(type) {
		case *fenceResultMsg:
			select {
			case c.results <- m.pairs:
			default:
				c.fail(errors.New("protocol error: fence result without a fence"))
				return
			}
		case *finalizedMsg:
			if m.rank != c.rank {
				c.fail(fmt.Errorf("protocol error: finalize acknowledged for rank %d", m.rank))
				return
			}
			select {
			case c.acks <- struct{}{}:
			default:
			}
		case *abortedMsg:
			c.fail(&AbortError{Rank: m.rank, Code: int(m.code), Message: m.text})
			return
		case *closingMsg:
			c.fail(fmt.Errorf("%w: %s", ErrServerClosed, m.reason))
			return
		default:
			c.fail(fmt.Errorf("protocol error: unexpected %s frame", typeName(msg.frameType())))
			return
		}
	}
}

// fail records why the connection is gone (the first reason wins), closes
// Done and the connection.
func (c *Client) fail(err error) {
	c.errOnce.Do(func() {
		c.cause = err
		c.err = fmt.Errorf("rendezvous %s: %w", c.addr, err)
		close(c.done)
		c.nc.Close()
	})
}

// Done returns a channel that is closed when the connection to the server
// is gone: the launcher died or closed it, the job was aborted or failed, or
// the Client was closed.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why Done was closed, or nil while the connection is up. After
// an abort it wraps an *AbortError; after the server closed the connection
// with a reason it wraps ErrServerClosed; after Close, Finalize or Abort by
// this rank it wraps ErrClosed.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Size returns the number of ranks in the job, as the server announced it.
func (c *Client) Size() int { return c.size }

// Put publishes key=value for the current epoch. Every rank receives the
// pair from the next Fence. A key may be put by one rank only in an epoch;
// putting it again replaces the value. key must be 1 to MaxKeyLen bytes.
// Put returns once the pair is written to the connection, not when the
// server has stored it.
func (c *Client) Put(key string, value []byte) error {
	if key == "" || len(key) > MaxKeyLen {
		return c.errorf("put: key must be 1 to %d bytes, have %d", MaxKeyLen, len(key))
	}
	if frameHeader+4+4+len(key)+4+len(value) > MaxFrame {
		return c.errorf("put %q: value of %d bytes does not fit in a frame", key, len(value))
	}
	c.mu.Lock()
	err := c.usable("put")
	if err == nil && c.fenceSent {
		err = c.errorf("put %q while a fence is in progress", key)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.write("put", &putMsg{rank: c.rank, key: key, value: value})
}

// Fence waits until every rank has joined the fence, then returns every
// key/value pair put by any rank in this epoch (since the previous fence).
// The returned map and its values belong to the caller. If ctx ends first,
// Fence returns ctx's error and the rank stays in the fence: the next call
// to Fence waits for the same result instead of joining a new fence.
func (c *Client) Fence(ctx context.Context) (map[string][]byte, error) {
	c.mu.Lock()
	err := c.usable("fence")
	if err == nil && c.fencing {
		err = c.errorf("fence: another Fence is in progress")
	}
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	c.fencing = true
	send := !c.fenceSent
	c.fenceSent = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.fencing = false
		c.mu.Unlock()
	}()

	if send {
		if err := c.write("fence", &fenceMsg{rank: c.rank}); err != nil {
			return nil, err
		}
	}
	select {
	case kv := <-c.results:
		c.fenceDone()
		return kv, nil
	case <-c.done:
		select {
		case kv := <-c.results: // the result came just before the end
			c.fenceDone()
			return kv, nil
		default:
		}
		return nil, c.gone("fence")
	case <-ctx.Done():
		return nil, c.errorf("fence: %w", ctx.Err())
	}
}

func (c *Client) fenceDone() {
	c.mu.Lock()
	c.fenceSent = false
	c.mu.Unlock()
}

// Abort asks the server to abort the job with exit code code and message
// msg, waits until the server has told every rank (or 30 seconds), and
// closes the Client. The launcher then stops every rank and exits with code.
func (c *Client) Abort(code int, msg string) error {
	if code < math.MinInt32 || code > math.MaxInt32 {
		return c.errorf("abort: exit code %d out of range", code)
	}
	if len(msg) > maxTextLen {
		msg = msg[:maxTextLen]
	}
	c.mu.Lock()
	err := c.usable("abort")
	c.finalized = true
	c.mu.Unlock()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.write("abort", &abortMsg{rank: c.rank, code: int32(code), text: msg}); err != nil {
		return err
	}
	t := time.NewTimer(ackTimeout)
	defer t.Stop()
	select {
	case <-c.done:
		var ae *AbortError
		if errors.As(c.Err(), &ae) {
			return nil // ours, or another rank's abort that came first: the job ends either way
		}
		return c.gone("abort")
	case <-t.C:
		return c.errorf("abort: no answer from the server within %v", ackTimeout)
	}
}

// Finalize tells the server that this rank finished cleanly, waits for the
// server's acknowledgement (or 30 seconds) and closes the Client. It is an
// error to call Finalize while a Fence is in progress.
func (c *Client) Finalize() error {
	c.mu.Lock()
	err := c.usable("finalize")
	if err == nil && c.fenceSent {
		err = c.errorf("finalize while a fence is in progress")
	}
	if err == nil {
		c.finalized = true
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.write("finalize", &finalizeMsg{rank: c.rank}); err != nil {
		return err
	}
	t := time.NewTimer(ackTimeout)
	defer t.Stop()
	select {
	case <-c.acks:
		return nil
	case <-c.done:
		select {
		case <-c.acks:
			return nil
		default:
		}
		return c.gone("finalize")
	case <-t.C:
		return c.errorf("finalize: no acknowledgement from the server within %v", ackTimeout)
	}
}

// Close closes the connection without finalizing: if the rank has not
// finalized, the server counts it as lost. Close waits for the Client's
// goroutine to exit and is safe to call more than once.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	<-c.readEnd
	return nil
}

// usable returns an error if the Client can no longer send what. c.mu must
// be held.
func (c *Client) usable(what string) error {
	if c.finalized {
		return c.errorf("%s: %w (rank already finalized or aborted)", what, ErrClosed)
	}
	if c.Err() != nil {
		return c.gone(what)
	}
	return nil
}

// gone returns the error of an operation that failed because the
// connection is gone. Done must be closed.
func (c *Client) gone(what string) error {
	<-c.done
	return c.errorf("%s: %w", what, c.cause)
}

// write sends one frame.
func (c *Client) write(what string, m message) error {
	c.wmu.Lock()
	c.wbuf = appendFrame(c.wbuf[:0], m)
	_, err := c.nc.Write(c.wbuf)
	if cap(c.wbuf) > keepWriteBuf {
		c.wbuf = nil
	}
	c.wmu.Unlock()
	if err != nil {
		if c.Err() != nil {
			return c.gone(what)
		}
		return c.errorf("%s: %w", what, err)
	}
	return nil
}

func (c *Client) errorf(format string, args ...any) error {
	return fmt.Errorf("rendezvous %s: "+format, append([]any{c.addr}, args...)...)
}
